package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// defaultPath is the PATH of containers after the PathDirs when the agent's
// process has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// objects caches the Secrets and ConfigMaps read while preparing one pod.
type objects struct {
	ns         string
	a          *Agent
	secrets    map[string]*corev1.Secret
	configMaps map[string]*corev1.ConfigMap
}

func (o *objects) secret(ctx context.Context, name string) (*corev1.Secret, error) {
	if s, ok := o.secrets[name]; ok {
		return s, nil
	}
	s, err := o.a.client.CoreV1().Secrets(o.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if o.secrets == nil {
		o.secrets = map[string]*corev1.Secret{}
	}
	o.secrets[name] = s
	return s, nil
}

func (o *objects) configMap(ctx context.Context, name string) (*corev1.ConfigMap, error) {
	if c, ok := o.configMaps[name]; ok {
		return c, nil
	}
	c, err := o.a.client.CoreV1().ConfigMaps(o.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if o.configMaps == nil {
		o.configMaps = map[string]*corev1.ConfigMap{}
	}
	o.configMaps[name] = c
	return c, nil
}

// envList is an ordered environment in which a later definition replaces an
// earlier one.
type envList struct {
	names  []string
	values map[string]string
}

func (e *envList) set(name, value string) {
	if e.values == nil {
		e.values = map[string]string{}
	}
	if _, ok := e.values[name]; !ok {
		e.names = append(e.names, name)
	}
	e.values[name] = value
}

func (e *envList) lookup(name string) (string, bool) {
	v, ok := e.values[name]
	return v, ok
}

func (e *envList) environ() []string {
	out := make([]string, 0, len(e.names))
	for _, n := range e.names {
		out = append(out, n+"="+e.values[n])
	}
	return out
}

// containerEnv is the environment of container c, as the kubelet and a
// container runtime would make it: PATH (PathDirs as staged, then the agent's
// PATH) and HOSTNAME, KUBERNETES_SERVICE_* when the kubernetes Service has
// endpoints (unless Options.Env sets KUBERNETES_SERVICE_HOST), Options.Env,
// then envFrom and env in order, with $(VAR) references to what is already
// defined expanded, and HOME ("/") unless set.
func (r *podRunner) containerEnv(ctx context.Context, c *corev1.Container, objs *objects, path string) (*envList, error) {
	env := &envList{}
	env.set("PATH", path)
	env.set("HOSTNAME", r.hostname())
	extra := &envList{}
	for _, kv := range r.a.o.Env {
		name, value, _ := strings.Cut(kv, "=")
		extra.set(name, value)
	}
	if _, ok := extra.lookup("KUBERNETES_SERVICE_HOST"); !ok {
		for _, kv := range r.a.kubernetesServiceEnv(ctx) {
			env.set(kv[0], kv[1])
		}
	}
	for _, name := range extra.names {
		env.set(name, extra.values[name])
	}
	for _, from := range c.EnvFrom {
		switch {
		case from.SecretRef != nil:
			s, err := objs.secret(ctx, from.SecretRef.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && from.SecretRef.Optional != nil && *from.SecretRef.Optional {
					continue
				}
				return nil, fmt.Errorf("envFrom secret %s: %w", from.SecretRef.Name, err)
			}
			for _, k := range sortedKeys(s.Data) {
				env.set(from.Prefix+k, string(s.Data[k]))
			}
		case from.ConfigMapRef != nil:
			cm, err := objs.configMap(ctx, from.ConfigMapRef.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional {
					continue
				}
				return nil, fmt.Errorf("envFrom configmap %s: %w", from.ConfigMapRef.Name, err)
			}
			for _, k := range sortedKeys(cm.Data) {
				env.set(from.Prefix+k, cm.Data[k])
			}
		}
	}
	for _, v := range c.Env {
		value, skip, err := r.envValue(ctx, c, v, objs, env)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", v.Name, err)
		}
		if !skip {
			env.set(v.Name, value)
		}
	}
	if _, ok := env.lookup("HOME"); !ok {
		env.set("HOME", "/")
	}
	return env, nil
}

// envValue resolves one env entry. skip is true for an optional reference to
// a missing object or key.
func (r *podRunner) envValue(ctx context.Context, c *corev1.Container, v corev1.EnvVar, objs *objects, env *envList) (value string, skip bool, err error) {
	if v.ValueFrom == nil {
		return expand(v.Value, env.lookup), false, nil
	}
	from := v.ValueFrom
	optional := func(p *bool) bool { return p != nil && *p }
	switch {
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		s, err := objs.secret(ctx, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional(ref.Optional) {
				return "", true, nil
			}
			return "", false, fmt.Errorf("secret %s: %w", ref.Name, err)
		}
		b, ok := s.Data[ref.Key]
		if !ok {
			if optional(ref.Optional) {
				return "", true, nil
			}
			return "", false, fmt.Errorf("secret %s has no key %q", ref.Name, ref.Key)
		}
		return string(b), false, nil
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		cm, err := objs.configMap(ctx, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional(ref.Optional) {
				return "", true, nil
			}
			return "", false, fmt.Errorf("configmap %s: %w", ref.Name, err)
		}
		s, ok := cm.Data[ref.Key]
		if !ok {
			if optional(ref.Optional) {
				return "", true, nil
			}
			return "", false, fmt.Errorf("configmap %s has no key %q", ref.Name, ref.Key)
		}
		return s, false, nil
	case from.FieldRef != nil:
		s, err := r.fieldValue(from.FieldRef.FieldPath)
		return s, false, err
	case from.ResourceFieldRef != nil:
		s, err := r.resourceValue(c, from.ResourceFieldRef)
		return s, false, err
	default:
		return "", false, fmt.Errorf("only secretKeyRef, configMapKeyRef, fieldRef and resourceFieldRef are supported by the test node agent")
	}
}

// resourceValue is a container's limit or request as the kubelet gives it
// to the downward API: in units of the divisor (default 1), rounded up; a
// limit not set is the node's allocatable amount, a request not set zero.
func (r *podRunner) resourceValue(c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	if ref.ContainerName != "" {
		c = nil
		for i := range r.pod.Spec.Containers {
			if r.pod.Spec.Containers[i].Name == ref.ContainerName {
				c = &r.pod.Spec.Containers[i]
			}
		}
		if c == nil {
			return "", fmt.Errorf("resourceFieldRef: no container %q", ref.ContainerName)
		}
	}
	kind, name, _ := strings.Cut(ref.Resource, ".")
	var q resource.Quantity
	var ok bool
	switch kind {
	case "limits":
		if q, ok = c.Resources.Limits[corev1.ResourceName(name)]; !ok {
			q, ok = nodeCapacity()[corev1.ResourceName(name)]
		}
	case "requests":
		// A request not set is zero.
		q, ok = c.Resources.Requests[corev1.ResourceName(name)], true
	}
	if !ok || (name != string(corev1.ResourceCPU) && name != string(corev1.ResourceMemory)) {
		return "", fmt.Errorf("resourceFieldRef %q: the test node agent gives limits and requests of cpu and memory", ref.Resource)
	}
	divisor := resource.MustParse("1")
	if !ref.Divisor.IsZero() {
		divisor = ref.Divisor
	}
	if name == string(corev1.ResourceCPU) {
		return strconv.FormatInt((q.MilliValue()+divisor.MilliValue()-1)/divisor.MilliValue(), 10), nil
	}
	return strconv.FormatInt((q.Value()+divisor.Value()-1)/divisor.Value(), 10), nil
}

// expand replaces $(NAME) with the value of NAME when it is defined, and $$
// with $, as Kubernetes does in env values, command and args. Undefined
// references are left as they are.
func expand(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			ref := s[i : i+3+end]
			if v, ok := lookup(s[i+2 : i+2+end]); ok {
				b.WriteString(v)
			} else {
				b.WriteString(ref)
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// kubernetesServiceEnv returns KUBERNETES_SERVICE_HOST and friends, pointing
// at an endpoint of the kubernetes Service in the default namespace: there is
// no kube-proxy to route its ClusterIP, so pods get what the Service routes
// to (for client-go's in-cluster configuration). Nil when unknown.
func (a *Agent) kubernetesServiceEnv(ctx context.Context) [][2]string {
	host, port := a.apiServerEndpoint(ctx)
	if host == "" {
		return nil
	}
	p := strconv.Itoa(int(port))
	hp := host
	if strings.Contains(host, ":") {
		hp = "[" + host + "]"
	}
	url := "tcp://" + hp + ":" + p
	return [][2]string{
		{"KUBERNETES_SERVICE_HOST", host},
		{"KUBERNETES_SERVICE_PORT", p},
		{"KUBERNETES_SERVICE_PORT_HTTPS", p},
		{"KUBERNETES_PORT", url},
		{"KUBERNETES_PORT_" + p + "_TCP", url},
		{"KUBERNETES_PORT_" + p + "_TCP_PROTO", "tcp"},
		{"KUBERNETES_PORT_" + p + "_TCP_PORT", p},
		{"KUBERNETES_PORT_" + p + "_TCP_ADDR", host},
	}
}

func (a *Agent) apiServerEndpoint(ctx context.Context) (string, int32) {
	slices_, err := a.client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=kubernetes",
	})
	if err == nil {
		for _, s := range slices_.Items {
			var port int32
			for _, p := range s.Ports {
				if p.Port != nil && (port == 0 || (p.Name != nil && *p.Name == "https")) {
					port = *p.Port
				}
			}
			for _, e := range s.Endpoints {
				if len(e.Addresses) > 0 && port != 0 && (e.Conditions.Ready == nil || *e.Conditions.Ready) {
					return e.Addresses[0], port
				}
			}
		}
	}
	return "", 0
}

// resolveCommand returns the argv of container c (command and args, with
// $(VAR) expanded) and how to find its executable: hostPath is the file on
// the node, and stage is true when it must be staged (an image binary), as
// opposed to being found at containerPath inside the container.
func (a *Agent) resolveCommand(c *corev1.Container, env *envList) (argv []string, hostPath string, stage bool, containerPath string, err error) {
	imageBinary, mapped := a.imageBinary(c.Image)
	for _, s := range c.Command {
		argv = append(argv, expand(s, env.lookup))
	}
	if len(argv) == 0 {
		if !mapped {
			return nil, "", false, "", fmt.Errorf("image %q has no local binary (Options.Images) and the container has no command", c.Image)
		}
		argv = []string{imageBinary}
	}
	for _, s := range c.Args {
		argv = append(argv, expand(s, env.lookup))
	}
	name := argv[0]
	if mapped && (name == imageBinary || filepath.Base(name) == filepath.Base(imageBinary) || filepath.Base(name) == imageName(c.Image)) {
		return argv, imageBinary, true, "", nil
	}
	if strings.Contains(name, "/") {
		for j, dir := range a.pathDirs {
			if filepath.Dir(name) == dir {
				return argv, name, false, filepath.Join(a.staging, "path", strconv.Itoa(j), filepath.Base(name)), nil
			}
		}
		return argv, name, false, name, nil
	}
	for j, dir := range a.pathDirs {
		if p := filepath.Join(dir, name); isExecutable(p) {
			return argv, p, false, filepath.Join(a.staging, "path", strconv.Itoa(j), name), nil
		}
	}
	for _, dir := range filepath.SplitList(a.hostPath) {
		if dir == "" {
			continue
		}
		if p := filepath.Join(dir, name); isExecutable(p) {
			return argv, p, false, p, nil
		}
	}
	return nil, "", false, "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}

// imageBinary maps an image to a local binary: an exact key of
// Options.Images, else a key with the same repository (tag and digest
// ignored), else a key whose last path element is the image's (so the key
// "terrarun-executor" or "any.registry/x/terrarun-executor:tag" serves every
// ".../terrarun-executor" image).
func (a *Agent) imageBinary(image string) (string, bool) {
	if p, ok := a.o.Images[image]; ok {
		return p, true
	}
	repo := imageRepository(image)
	keys := sortedKeys(a.o.Images)
	for _, k := range keys {
		if imageRepository(k) == repo {
			return a.o.Images[k], true
		}
	}
	for _, k := range keys {
		if imageName(k) == imageName(image) {
			return a.o.Images[k], true
		}
	}
	return "", false
}

// imageRepository strips the tag and digest from an image reference.
func imageRepository(image string) string {
	if i := strings.IndexByte(image, '@'); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndexByte(image, ':'); i > strings.LastIndexByte(image, '/') {
		image = image[:i]
	}
	return image
}

// imageName is the last path element of the image's repository.
func imageName(image string) string {
	repo := imageRepository(image)
	return repo[strings.LastIndexByte(repo, '/')+1:]
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
