package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// TestVolumes materializes every supported kind of volume, reads it from a
// container running as 65532, and checks the files on the node.
func TestVolumes(t *testing.T) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s1", Namespace: testNS},
		Data:       map[string][]byte{"a": []byte("alpha"), "b": []byte("beta"), "unused": []byte("x")},
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: testNS},
		Data:       map[string]string{"x": "ex", "y": "why"},
		BinaryData: map[string][]byte{"z": {0, 1, 2}},
	}
	rootCA := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: testNS},
		Data:       map[string]string{"ca.crt": "CA-PEM"},
	}
	h := newHarness(t, nil, secret, cm, rootCA)

	pod := shPod("vols", strings.Join([]string{
		`echo "a=$(cat /sec/a.txt) b=$(cat /sec/sub/b.txt)"`,
		`echo "x=$(cat /cm/x) y=$(cat /cm/y)"`,
		`echo "name=$(cat /down/name) ns=$(cat /down/namespace) uid=$(cat /down/uid) note=$(cat /down/note)"`,
		`echo "token=$(cat /proj/token) ca=$(cat /proj/ca.crt) projns=$(cat /proj/namespace)"`,
		`echo "id=$(id -u):$(id -g) groups=$(id -G)"`,
		`echo "env=$FROM_SECRET/$FROM_CM/$POD_NAME/$POD_NS/$POD_UID/$NODE/$POD_IP/$EXPANDED/$HOME"`,
		`touch /work/ok && echo work-writable`,
		`touch /sec/nope 2>/dev/null || echo sec-readonly`,
		`echo "pwd=$(pwd)"`,
		`echo "subpath=$(cat /work/conf/x.txt)"`,
	}, "\n"))
	pod.Labels = map[string]string{"app": "demo", "tier": "x"}
	pod.Annotations = map[string]string{"note": "hello"}
	pod.Spec.ServiceAccountName = "runner"
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532), FSGroup: ptr.To[int64](65532),
	}
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  "s1",
			DefaultMode: ptr.To[int32](0o440),
			Items: []corev1.KeyToPath{
				{Key: "a", Path: "a.txt", Mode: ptr.To[int32](0o400)},
				{Key: "b", Path: "sub/b.txt"},
			},
		}}},
		{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "c1"},
		}}},
		{Name: "down", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
			{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}},
			{Path: "uid", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}},
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "note", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['note']"}},
		}}}},
		{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "terrarun.dev", ExpirationSeconds: ptr.To[int64](600), Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}},
			}}},
		}}}},
		{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	c := &pod.Spec.Containers[0]
	c.WorkingDir = "/work"
	c.VolumeMounts = []corev1.VolumeMount{
		{Name: "sec", MountPath: "/sec", ReadOnly: true},
		{Name: "cm", MountPath: "/cm", ReadOnly: true},
		{Name: "down", MountPath: "/down", ReadOnly: true},
		{Name: "proj", MountPath: "/proj", ReadOnly: true},
		{Name: "work", MountPath: "/work"},
		// A file of a volume, inside another volume.
		{Name: "cm", MountPath: "/work/conf/x.txt", SubPath: "x", ReadOnly: true},
	}
	c.Env = []corev1.EnvVar{
		{Name: "FROM_SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s1"}, Key: "a"}}},
		{Name: "FROM_CM", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "c1"}, Key: "y"}}},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "POD_UID", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}},
		{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "EXPANDED", Value: "$(POD_NAME)-$$(POD_NAME)"},
	}
	h.create(pod)
	p := h.waitPhase("vols", corev1.PodSucceeded)
	_, log := h.logs("vols", "main", "")
	token := ""
	if calls := h.tokenCalls(); len(calls) == 1 {
		call := calls[0]
		token = call.token
		ref := call.req.Spec.BoundObjectRef
		switch {
		case call.namespace != testNS || call.serviceAccount != "runner":
			t.Errorf("token for %s/%s", call.namespace, call.serviceAccount)
		case len(call.req.Spec.Audiences) != 1 || call.req.Spec.Audiences[0] != "terrarun.dev":
			t.Errorf("audiences %v", call.req.Spec.Audiences)
		case ptr.Deref(call.req.Spec.ExpirationSeconds, 0) != 600:
			t.Errorf("expirationSeconds %v", call.req.Spec.ExpirationSeconds)
		case ref == nil || ref.Kind != "Pod" || ref.APIVersion != "v1" || ref.Name != "vols" || ref.UID != p.UID:
			t.Errorf("boundObjectRef %+v", ref)
		}
	} else {
		t.Errorf("%d token requests, want 1: %+v", len(calls), calls)
	}
	for _, want := range []string{
		"a=alpha b=beta\n",
		"x=ex y=why\n",
		"name=vols ns=ns uid=uid-vols note=hello\n",
		"token=" + token + " ca=CA-PEM projns=ns\n",
		"id=65532:65532 groups=65532",
		"env=alpha/why/vols/ns/uid-vols/node-1/127.0.0.1/vols-$(POD_NAME)//\n",
		"work-writable\n",
		"sec-readonly\n",
		"pwd=/work\n",
		"subpath=ex\n",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}

	// On the node: the atomic writer's layout, modes and groups.
	r := h.a.runner(testNS, "vols")
	vol := func(parts ...string) string { return filepath.Join(append([]string{r.dir, "volumes"}, parts...)...) }
	checkFile(t, vol("sec", "a.txt"), 0o440, 65532, "alpha") // 0400, group-readable for fsGroup
	checkFile(t, vol("sec", "sub", "b.txt"), 0o440, 65532, "beta")
	checkFile(t, vol("cm", "x"), 0o644, 65532, "ex")
	checkFile(t, vol("cm", "z"), 0o644, 65532, "\x00\x01\x02")
	checkFile(t, vol("down", "labels"), 0o644, 65532, "app=\"demo\"\ntier=\"x\"")
	checkFile(t, vol("proj", "token"), 0o644, 65532, token)
	if _, err := os.Lstat(vol("sec", "unused")); !os.IsNotExist(err) {
		t.Errorf("a key not in items was written: %v", err)
	}
	if target, err := os.Readlink(vol("sec", "a.txt")); err != nil || target != "..data/a.txt" {
		t.Errorf("a.txt links to %q (%v)", target, err)
	}
	if target, err := os.Readlink(vol("sec", "..data")); err != nil || !strings.HasPrefix(target, "..") {
		t.Errorf("..data links to %q (%v)", target, err)
	}
	st, err := os.Stat(vol("work"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModePerm != 0o777 || st.Mode()&os.ModeSetgid == 0 || st.Sys().(*syscall.Stat_t).Gid != 65532 {
		t.Errorf("emptyDir mode %v gid %d", st.Mode(), st.Sys().(*syscall.Stat_t).Gid)
	}
}

func checkFile(t *testing.T, path string, mode os.FileMode, gid uint32, content string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Error(err)
		return
	}
	if st.Mode()&os.ModePerm != mode {
		t.Errorf("%s: mode %v, want %v", path, st.Mode()&os.ModePerm, mode)
	}
	if g := st.Sys().(*syscall.Stat_t).Gid; g != gid {
		t.Errorf("%s: gid %d, want %d", path, g, gid)
	}
	if b, _ := os.ReadFile(path); string(b) != content {
		t.Errorf("%s: %q, want %q", path, b, content)
	}
}

func TestWriteAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	if err := writeAtomic(dir, map[string]payloadFile{
		"a":     {data: []byte("1"), mode: 0o400},
		"d/b":   {data: []byte("2"), mode: 0o640},
		"stale": {data: []byte("3"), mode: 0o644},
	}, nil); err != nil {
		t.Fatal(err)
	}
	first, _ := os.Readlink(filepath.Join(dir, "..data"))
	checkFile(t, filepath.Join(dir, "a"), 0o400, 0, "1")
	checkFile(t, filepath.Join(dir, "d", "b"), 0o640, 0, "2")
	if err := writeAtomic(dir, map[string]payloadFile{
		"a":   {data: []byte("one"), mode: 0o600},
		"d/b": {data: []byte("two"), mode: 0o644},
	}, nil); err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(dir, "a"), 0o600, 0, "one")
	checkFile(t, filepath.Join(dir, "d", "b"), 0o644, 0, "two")
	if _, err := os.Lstat(filepath.Join(dir, "stale")); !os.IsNotExist(err) {
		t.Errorf("stale survived: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Errorf("the previous payload %s survived: %v", first, err)
	}
	for _, bad := range []string{"../x", "/abs", "..data"} {
		if err := writeAtomic(dir, map[string]payloadFile{bad: {data: nil, mode: 0o644}}, nil); err == nil {
			t.Errorf("path %q accepted", bad)
		}
	}
}

// TestTokenRefresh: a projected token is requested again at 80% of its
// lifetime while the pod runs.
func TestTokenRefresh(t *testing.T) {
	h := newHarness(t, nil)
	h.mu.Lock()
	h.tokenTTL = time.Second
	h.mu.Unlock()
	pod := shPod("refresh", "while :; do sleep 0.05; done")
	pod.Spec.Volumes = []corev1.Volume{{Name: "t", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "terrarun.dev", Path: "token"}},
	}}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "t", MountPath: "/var/run/secrets/terrarun", ReadOnly: true}}
	h.create(pod)
	h.waitPhase("refresh", corev1.PodRunning)
	path := filepath.Join(h.a.runner(testNS, "refresh").dir, "volumes", "t", "token")
	deadline := time.Now().Add(timeout)
	for len(h.tokenCalls()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d token requests", len(h.tokenCalls()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	calls := h.tokenCalls()
	// The file holds the newest token, or the one before if a refresh is
	// being written right now.
	b, _ := os.ReadFile(path)
	if got := string(b); got != calls[len(calls)-1].token && got != calls[len(calls)-2].token {
		t.Errorf("token file %q, issued %q", got, calls[len(calls)-1].token)
	}
	for _, c := range calls {
		if ref := c.req.Spec.BoundObjectRef; ref == nil || ref.Name != "refresh" {
			t.Errorf("refresh not bound to the pod: %+v", ref)
		}
	}
}

func TestContainerEnv(t *testing.T) {
	cs := fake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: testNS}, Data: map[string][]byte{"k": []byte("sv"), "E1": []byte("from-secret")}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: testNS}, Data: map[string]string{"k": "cv", "E2": "from-cm"}},
		&discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.5"}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](6443)}},
		},
	)
	a := &Agent{client: cs, o: Options{NodeName: testNode, Address: "10.1.2.3"}}
	pod := shPod("envpod", "true")
	pod.Labels = map[string]string{"app": "x"}
	pod.Spec.ServiceAccountName = "sa"
	r := &podRunner{a: a, pod: pod}
	ref := func(name string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: name} }
	c := corev1.Container{
		EnvFrom: []corev1.EnvFromSource{
			{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: ref("s")}, Prefix: "S_"},
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref("c")}},
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref("absent"), Optional: ptr.To(true)}},
		},
		Env: []corev1.EnvVar{
			{Name: "PLAIN", Value: "v"},
			{Name: "REF", Value: "$(PLAIN)-$(UNDEFINED)-$$(PLAIN)-$(E2)"},
			{Name: "SEC", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: ref("s"), Key: "k"}}},
			{Name: "CM", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref("c"), Key: "k"}}},
			{Name: "OPT", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: ref("s"), Key: "nope", Optional: ptr.To(true)}}},
			{Name: "LABEL", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
			{Name: "SA", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.serviceAccountName"}}},
			{Name: "HOST_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
			{Name: "HOME", Value: "/work"},
		},
	}
	env, err := r.containerEnv(context.Background(), &c, &objects{ns: testNS, a: a}, "/staged:/usr/bin")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"PATH":                    "/staged:/usr/bin",
		"HOSTNAME":                "envpod",
		"KUBERNETES_SERVICE_HOST": "10.0.0.5",
		"KUBERNETES_SERVICE_PORT": "6443",
		"KUBERNETES_PORT":         "tcp://10.0.0.5:6443",
		"S_k":                     "sv",
		"S_E1":                    "from-secret",
		"E2":                      "from-cm",
		"PLAIN":                   "v",
		"REF":                     "v-$(UNDEFINED)-$(PLAIN)-from-cm",
		"SEC":                     "sv",
		"CM":                      "cv",
		"LABEL":                   "x",
		"SA":                      "sa",
		"HOST_IP":                 "10.1.2.3",
		"HOME":                    "/work",
	}
	for k, v := range want {
		if got, ok := env.lookup(k); !ok || got != v {
			t.Errorf("%s = %q (%v), want %q", k, got, ok, v)
		}
	}
	if _, ok := env.lookup("OPT"); ok {
		t.Error("an optional missing key was set")
	}

	// Options.Env: added to every container, and its KUBERNETES_SERVICE_HOST
	// replaces the endpoint lookup.
	a.o.Env = []string{"KUBERNETES_SERVICE_HOST=10.9.9.9", "KUBERNETES_SERVICE_PORT=443", "EXTRA=1", "PLAIN=overridden"}
	env, err = r.containerEnv(context.Background(), &c, &objects{ns: testNS, a: a}, "/p")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"KUBERNETES_SERVICE_HOST": "10.9.9.9", "KUBERNETES_SERVICE_PORT": "443", "EXTRA": "1", "PLAIN": "v"} {
		if got, ok := env.lookup(k); !ok || got != v {
			t.Errorf("with Options.Env: %s = %q (%v), want %q", k, got, ok, v)
		}
	}
	if got, ok := env.lookup("KUBERNETES_PORT"); ok {
		t.Errorf("with Options.Env: KUBERNETES_PORT = %q from the endpoint lookup", got)
	}
	a.o.Env = nil

	for _, bad := range []corev1.EnvVar{
		{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: ref("s"), Key: "nope"}}},
		{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref("absent"), Key: "k"}}},
		{Name: "X", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nope"}}},
		{Name: "X", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.ephemeral-storage"}}},
		{Name: "X", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu", ContainerName: "nope"}}},
	} {
		c := corev1.Container{Env: []corev1.EnvVar{bad}}
		if _, err := r.containerEnv(context.Background(), &c, &objects{ns: testNS, a: a}, "/p"); err == nil {
			t.Errorf("%+v: no error", bad.ValueFrom)
		}
	}
}

// TestResourceFieldRef: limits and requests as the kubelet gives them to
// the downward API, in the divisor's units rounded up, a limit not set being
// the node's capacity and a request not set zero.
func TestResourceFieldRef(t *testing.T) {
	pod := shPod("respod", "true")
	pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
	other := pod.Spec.Containers[0]
	other.Name, other.Resources = "other", corev1.ResourceRequirements{}
	pod.Spec.Containers = append(pod.Spec.Containers, other)
	r := &podRunner{a: &Agent{}, pod: pod}
	for _, tc := range []struct {
		ref  corev1.ResourceFieldSelector
		want string
	}{
		{corev1.ResourceFieldSelector{Resource: "limits.memory"}, "1073741824"},
		{corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}, "1024"},
		{corev1.ResourceFieldSelector{Resource: "requests.cpu"}, "1"},
		{corev1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: resource.MustParse("1m")}, "100"},
		{corev1.ResourceFieldSelector{Resource: "limits.cpu"}, "2"},
		{corev1.ResourceFieldSelector{Resource: "limits.memory", ContainerName: "other"}, "8589934592"},
		{corev1.ResourceFieldSelector{Resource: "requests.memory"}, "0"},
	} {
		got, err := r.resourceValue(&pod.Spec.Containers[0], &tc.ref)
		if err != nil || got != tc.want {
			t.Errorf("%+v: %q (%v), want %q", tc.ref, got, err, tc.want)
		}
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "a", "B": "b"}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	for in, want := range map[string]string{
		"plain":       "plain",
		"$(A)":        "a",
		"x$(A)y$(B)z": "xaybz",
		"$(C)":        "$(C)",
		"$$(A)":       "$(A)",
		"$$":          "$",
		"$A":          "$A",
		"$(A":         "$(A",
		"end$":        "end$",
	} {
		if got := expand(in, lookup); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestImageBinary(t *testing.T) {
	a := &Agent{o: Options{Images: map[string]string{
		"terrarun-executor":            "/bin/executor",
		"example.com/tools/thing:v1":   "/bin/thing",
		"registry.local/exact:special": "/bin/exact",
	}}}
	for image, want := range map[string]string{
		"ghcr.io/terrarun/terrarun-executor:v0.1.0":       "/bin/executor",
		"terrarun-executor@sha256:abcd":                   "/bin/executor",
		"localhost:5000/x/terrarun-executor":              "/bin/executor",
		"example.com/tools/thing:v2":                      "/bin/thing",
		"registry.local/exact:special":                    "/bin/exact",
		"registry.local/exact:other":                      "/bin/exact",
		"ghcr.io/terrarun/terrarun-executor-other:latest": "",
		"busybox": "",
	} {
		got, ok := a.imageBinary(image)
		if got != want || ok != (want != "") {
			t.Errorf("imageBinary(%q) = %q, %v; want %q", image, got, ok, want)
		}
	}
}

// TestPersistentVolumeClaim: a pod with a claim waits until it is bound,
// then mounts the directory of its hostPath volume, writable, as the kubelet
// would.
func TestPersistentVolumeClaim(t *testing.T) {
	dir := worldDir(t)
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: testNS, UID: "uid-cache"},
		Spec:       corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-cache"},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
			ClaimRef:               &corev1.ObjectReference{Namespace: testNS, Name: "cache", UID: "uid-cache"},
		},
	}
	h := newHarness(t, nil, pvc, pv)
	pod := shPod("claims", `echo cached > /cache/provider && cat /cache/provider`)
	pod.Spec.Volumes = []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "cache"}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "c", MountPath: "/cache"}}
	h.create(pod)
	h.waitPod("claims", "waiting for its claim", func(p *corev1.Pod) bool {
		s := p.Status.ContainerStatuses
		return len(s) == 1 && s[0].State.Waiting != nil && strings.Contains(s[0].State.Waiting.Message, "persistentvolumeclaim cache is not bound")
	})

	bound := pvc.DeepCopy()
	bound.Spec.VolumeName, bound.Status.Phase = "pv-cache", corev1.ClaimBound
	if _, err := h.cs.CoreV1().PersistentVolumeClaims(testNS).Update(t.Context(), bound, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitPhase("claims", corev1.PodSucceeded)
	if _, log := h.logs("claims", "main", ""); log != "cached\n" {
		t.Errorf("log %q, want the volume's file", log)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "provider")); err != nil || string(b) != "cached\n" {
		t.Errorf("the volume's directory holds %q (%v), want what the pod wrote", b, err)
	}
}
