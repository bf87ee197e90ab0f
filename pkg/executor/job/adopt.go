package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/stage"
)

// Adoption. The Job and stage Secret of an execution have deterministic
// names, so anyone who may create Secrets or Jobs in the run's namespace can
// create them first, with the run's labels (its UID is readable by its
// viewers). A stage Secret whose stage.json names another server would hand
// the executor's token to whoever runs it. So an object of those names is
// adopted only when it holds exactly what terrarun builds for the execution:
// the labels say whose it claims to be, the content whether it is.

// checkSecret refuses an existing stage Secret that is not the one built.
func checkSecret(existing, built *corev1.Secret, uid string) error {
	if err := CheckOwned(&existing.ObjectMeta, "Secret", uid); err != nil {
		return err
	}
	var differs string
	switch {
	case existing.Type != built.Type:
		differs = "type"
	case !ptr.Deref(existing.Immutable, false):
		differs = "immutable"
	case !equality.Semantic.DeepEqual(existing.Data, built.Data) && !sameButPluginCache(existing.Data, built.Data):
		differs = "data"
	default:
		return nil
	}
	return NotBuilt("Secret", &existing.ObjectMeta, differs)
}

// sameButPluginCache reports whether the stage Secret data got is want's
// but for the plugin cache of its stage (stage.Spec.PluginCacheDir): what
// terrarun builds for the stage with the plugin cache turned on or off,
// which an operator may do while stages run.
func sameButPluginCache(got, want map[string][]byte) bool {
	if !equality.Semantic.DeepEqual(maps.Clone(got), withKey(want, StageKey, got[StageKey])) {
		return false
	}
	var spec stage.Spec
	if err := json.Unmarshal(want[StageKey], &spec); err != nil {
		return false
	}
	for _, dir := range []string{"", pluginCacheDir} {
		spec.PluginCacheDir = dir
		if js, err := json.Marshal(spec); err == nil && bytes.Equal(js, got[StageKey]) {
			return true
		}
	}
	return false
}

// withKey returns a copy of m in which key holds value.
func withKey(m map[string][]byte, key string, value []byte) map[string][]byte {
	out := maps.Clone(m)
	out[key] = value
	return out
}

// checkJob refuses an existing Job that is not of run, or
// whose pod template is not the one built: different containers, commands,
// volumes, service account or security settings. Fields the API server
// defaults are compared only where terrarun sets them, and those of options
// that may change while a stage runs only where they could not come from
// terrarun (withoutOptions, withoutBindingVariant, with secret the built
// stage Secret).
func checkJob(existing, built *batchv1.Job, secret *corev1.Secret, run *v1alpha1.TerraformRun) error {
	if err := CheckOwned(&existing.ObjectMeta, "Job", string(run.UID)); err != nil {
		return err
	}
	return CheckPod("Job", &existing.ObjectMeta, "spec.template.spec.", &existing.Spec.Template.Spec, &built.Spec.Template.Spec, secret, run)
}

// CheckPod refuses got, the pod that an existing object of an execution's
// name runs (a Job's template, or the pod a TaskRun describes), when it is
// not want, the one built for run with stage Secret secret: different
// containers, commands, volumes, service account or security settings.
// Fields the API server defaults are compared only where terrarun sets
// them, and those of options that may change while a stage runs only where
// they could not come from terrarun (withoutOptions, withoutBindingVariant).
// The error, which Forged recognises, names kind, m and the first field of
// got (below prefix) that differs.
func CheckPod(kind string, m *metav1.ObjectMeta, prefix string, got, want *corev1.PodSpec, secret *corev1.Secret, run *v1alpha1.TerraformRun) error {
	// The options first: defaults are undone by matching volumes and
	// containers in order, which a plugin cache turned on or off shifts.
	got, want = got.DeepCopy(), want.DeepCopy()
	withoutOptions(got, want, run)
	withoutBindingVariant(got, want, secret)
	got = withoutDefaults(got, want)
	if equality.Semantic.DeepEqual(got, want) {
		return nil
	}
	return NotBuilt(kind, m, prefix+firstDifference(got, want))
}

// Forged says whether err is CheckPod's, or checkSecret's, refusal of an
// object that carries a run's labels but that terrarun did not build, and
// names that object.
func Forged(err error) (name string, ok bool) {
	var f *forgedError
	if errors.As(err, &f) {
		return f.name, true
	}
	return "", false
}

// CheckOwned refuses an object that is not of the run with UID uid.
func CheckOwned(m *metav1.ObjectMeta, kind, uid string) error {
	if got := m.Labels[LabelRunUID]; got != uid {
		return fmt.Errorf("%s %s/%s exists and is not of this run (%s is %q, want %q)", kind, m.Namespace, m.Name, LabelRunUID, got, uid)
	}
	return nil
}

// forgedError is an object of an execution's name that terrarun did not
// build for it.
type forgedError struct {
	name string
	msg  string
}

func (e *forgedError) Error() string { return e.msg }

// NotBuilt is the refusal, which Forged recognises, of an object of kind
// that carries a run's labels, but whose field differs from what terrarun
// builds.
func NotBuilt(kind string, m *metav1.ObjectMeta, field string) error {
	return &forgedError{name: m.Name, msg: fmt.Sprintf("%s %s/%s carries this run's labels but is not the one terrarun builds for it (its %s differs): it was created by someone else or by another version of terrarun; "+
		"delete it and check who may create %ss in namespace %s", kind, m.Namespace, m.Name, field, strings.ToLower(kind), m.Namespace)}
}

// withoutDefaults returns a copy of got in which the fields that the API
// server defaults, and that want leaves unset, are unset too.
func withoutDefaults(got, want *corev1.PodSpec) *corev1.PodSpec {
	out := got.DeepCopy()
	if want.DNSPolicy == "" && out.DNSPolicy == corev1.DNSClusterFirst {
		out.DNSPolicy = ""
	}
	if want.SchedulerName == "" {
		out.SchedulerName = ""
	}
	if want.DeprecatedServiceAccount == "" && out.DeprecatedServiceAccount == want.ServiceAccountName {
		out.DeprecatedServiceAccount = ""
	}
	if len(out.Containers) == len(want.Containers) {
		for i := range out.Containers {
			c, w := &out.Containers[i], &want.Containers[i]
			if w.TerminationMessagePath == "" && c.TerminationMessagePath == corev1.TerminationMessagePathDefault {
				c.TerminationMessagePath = ""
			}
			if w.ImagePullPolicy == "" {
				c.ImagePullPolicy = ""
			}
		}
	}
	if len(out.Volumes) == len(want.Volumes) {
		for i := range out.Volumes {
			p, w := out.Volumes[i].Projected, want.Volumes[i].Projected
			if p != nil && w != nil && w.DefaultMode == nil {
				p.DefaultMode = nil
			}
		}
	}
	return out
}

// withoutOptions takes out of got and want, in place, the fields that come
// only from JobOptions that an operator may change while stages run (the
// grace period, the spread of executor pods, the token's lifetime, the
// plugin cache), wherever got holds what terrarun builds for run with some
// options: a Job built before the options changed is still terrarun's. What
// got holds otherwise stays, and is compared.
func withoutOptions(got, want *corev1.PodSpec, run *v1alpha1.TerraformRun) {
	if g := got.TerminationGracePeriodSeconds; g != nil && *g > 0 {
		got.TerminationGracePeriodSeconds = want.TerminationGracePeriodSeconds
	}
	if g := got.TopologySpreadConstraints; len(g) == 0 || len(g) == 1 && g[0].TopologyKey != "" && equality.Semantic.DeepEqual(g, spread(g[0].TopologyKey)) {
		got.TopologySpreadConstraints = want.TopologySpreadConstraints
	}
	if g, w := tokenProjection(got), tokenProjection(want); g != nil && w != nil && ptr.Deref(g.ExpirationSeconds, 0) >= seconds(minTokenExpiration) {
		g.ExpirationSeconds = w.ExpirationSeconds
	}
	for _, spec := range []*corev1.PodSpec{got, want} {
		withoutPluginCache(spec, run)
	}
}

// withoutBindingVariant takes the binding of got (stage.BindingEnv) as
// want's when want cannot know it, or when it is the binding of the same
// stage as an earlier build of it wrote it (bindingVariants): a Job rebuilt
// without the other runs' outputs its stage reads cannot know their digest,
// and the created Job's stands.
func withoutBindingVariant(got, want *corev1.PodSpec, secret *corev1.Secret) {
	w, g := bindingEnv(want), bindingEnv(got)
	if w == nil || g == nil || w.Value == g.Value {
		return
	}
	if w.Value == bindingUnknown || slices.Contains(bindingVariants(want, secret), g.Value) {
		w.Value = g.Value
	}
}

// bindingVariants are the bindings of the stage that spec and its stage
// Secret describe as an earlier build of it may have written them: with the
// plugin cache on or off (the options changed since; sameButPluginCache),
// and without the plan's digest and parts, which a plan stage that carries
// its apply is rebuilt with once its plan is recorded.
func bindingVariants(spec *corev1.PodSpec, secret *corev1.Secret) []string {
	var st stage.Spec
	if secret == nil || json.Unmarshal(secret.Data[StageKey], &st) != nil {
		return nil
	}
	// The files terrarun wrote into the stage Secret, where the pod mounts them.
	mounts := map[string]string{}
	for i := range spec.Containers {
		for _, m := range spec.Containers[i].VolumeMounts {
			mounts[m.Name] = m.MountPath
		}
	}
	files := map[string][]byte{}
	for _, v := range spec.Volumes {
		if v.Secret == nil || v.Secret.SecretName != secret.Name {
			continue
		}
		for _, item := range v.Secret.Items {
			files[mounts[v.Name]+"/"+item.Path] = secret.Data[item.Key]
		}
	}
	bound := map[string][]byte{}
	for _, p := range st.Bound {
		content, ok := files[p]
		if !ok {
			return nil // another Secret's file (other runs' outputs)
		}
		bound[p] = content
	}
	var out []string
	digest, parts := st.PlanDigest, st.PlanParts
	for _, dir := range []string{"", pluginCacheDir} {
		for _, planned := range []bool{true, false} {
			st.PluginCacheDir, st.PlanDigest, st.PlanParts = dir, digest, parts
			if !planned {
				st.PlanDigest, st.PlanParts = "", nil
			}
			if js, err := json.Marshal(st); err == nil {
				out = append(out, stage.BindingDigest(js, bound))
			}
		}
	}
	return out
}

// bindingEnv is the stage.BindingEnv variable of spec's executor container.
func bindingEnv(spec *corev1.PodSpec) *corev1.EnvVar {
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if c.Name != ContainerName {
			continue
		}
		for j := range c.Env {
			if c.Env[j].Name == stage.BindingEnv {
				return &c.Env[j]
			}
		}
	}
	return nil
}

// tokenProjection returns the projection of the executor's token in spec.
func tokenProjection(spec *corev1.PodSpec) *corev1.ServiceAccountTokenProjection {
	for _, v := range spec.Volumes {
		if v.Name == volumeToken && v.Projected != nil && len(v.Projected.Sources) == 1 {
			return v.Projected.Sources[0].ServiceAccountToken
		}
	}
	return nil
}

// withoutPluginCache takes out of spec the plugin cache of run's creator,
// mounted where terrarun mounts it, but no other volume or mount.
func withoutPluginCache(spec *corev1.PodSpec, run *v1alpha1.TerraformRun) {
	key := executor.PluginCacheKey(run)
	if key == "" || len(spec.Containers) != 1 {
		return
	}
	vol := corev1.Volume{Name: volumePluginCache, VolumeSource: pluginCacheVolume(pluginCacheClaimName(key))}
	mount := corev1.VolumeMount{Name: volumePluginCache, MountPath: pluginCacheDir}
	c := &spec.Containers[0]
	vi := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return equality.Semantic.DeepEqual(v, vol) })
	mi := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return equality.Semantic.DeepEqual(m, mount) })
	if vi < 0 || mi < 0 {
		return
	}
	spec.Volumes = slices.Delete(slices.Clone(spec.Volumes), vi, vi+1)
	c.VolumeMounts = slices.Delete(slices.Clone(c.VolumeMounts), mi, mi+1)
}

// firstDifference names, by its JSON name, the first field in which two pod
// specs differ.
func firstDifference(a, b *corev1.PodSpec) string {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	for i := range va.NumField() {
		if !equality.Semantic.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			name, _, _ := strings.Cut(va.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return "content"
}
