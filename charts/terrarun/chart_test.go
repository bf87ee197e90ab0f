package chart

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/terrarun/terrarun/pkg/admission/policy"
)

// helm is the Helm binary that make unit passes (hack/helm.sh builds it).
func helm(t *testing.T) string {
	t.Helper()
	h := os.Getenv("TERRARUN_HELM")
	if h == "" {
		t.Fatal("TERRARUN_HELM is not set: run `make unit`, or set it to a helm binary (hack/helm.sh prints one)")
	}
	return h
}

// render runs helm template with args and returns the objects, or helm's
// error output.
func render(t *testing.T, args ...string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	cmd := exec.Command(helm(t), append([]string{"template", "terrarun", ".", "--namespace", "terrarun-system"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, stderr.String())
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(&stdout, 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if err.Error() == "EOF" {
				return objs, nil
			}
			t.Fatalf("the rendered chart is not YAML: %v", err)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

func mustRender(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := render(t, args...)
	if err != nil {
		t.Fatalf("helm template %s: %v", strings.Join(args, " "), err)
	}
	return objs
}

// find returns the object of kind and name, decoded into out.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return
		}
	}
	t.Fatalf("the chart renders no %s %s", kind, name)
}

// apiService is what the tests read of the APIService.
type apiService struct {
	Metadata struct {
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		CABundle []byte `json:"caBundle"`
	} `json:"spec"`
}

func findAPIService(t *testing.T, objs []*unstructured.Unstructured) apiService {
	t.Helper()
	var u map[string]any
	find(t, objs, "APIService", "v1alpha1.terrarun.dev", &u)
	data, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	var a apiService
	if err := json.Unmarshal(data, &a); err != nil {
		t.Fatalf("the APIService: %v", err)
	}
	return a
}

func has(objs []*unstructured.Unstructured, kind string) bool {
	for _, o := range objs {
		if o.GetKind() == kind {
			return true
		}
	}
	return false
}

func TestLint(t *testing.T) {
	for _, args := range [][]string{nil, {"--set", "tls.certManager.enabled=true"}, {"--set", "etcd.bundled=false", "--set", "etcd.external.endpoints={https://etcd:2379}"}} {
		out, err := exec.Command(helm(t), append([]string{"lint", "--strict", "."}, args...)...).CombinedOutput()
		if err != nil {
			t.Errorf("helm lint --strict %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestDefaultInstall: with no values the chart installs a working server: a
// certificate that the APIService's caBundle verifies for the Service's name,
// a bundled etcd the server points at, the ClusterRoles of files/roles.yaml
// and a policy that the server's own loader accepts.
func TestDefaultInstall(t *testing.T) {
	objs := mustRender(t)

	var secret corev1.Secret
	find(t, objs, "Secret", "terrarun-apiserver-tls", &secret)
	apiService := findAPIService(t, objs)
	if !bytes.Equal(apiService.Spec.CABundle, secret.Data["ca.crt"]) {
		t.Errorf("the APIService's caBundle is not the Secret's ca.crt")
	}
	verifyServing(t, secret.Data["tls.crt"], apiService.Spec.CABundle, "terrarun-apiserver.terrarun-system.svc")

	var deploy appsv1.Deployment
	find(t, objs, "Deployment", "terrarun-apiserver", &deploy)
	if *deploy.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want 2", *deploy.Spec.Replicas)
	}
	c := deploy.Spec.Template.Spec.Containers[0]
	if c.Image != "ghcr.io/terrarun/terrarun-apiserver:v0.1.0" {
		t.Errorf("image %s", c.Image)
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{
		"--etcd-servers=http://terrarun-etcd-0.terrarun-etcd.terrarun-system.svc:2379,http://terrarun-etcd-1.terrarun-etcd.terrarun-system.svc:2379,http://terrarun-etcd-2.terrarun-etcd.terrarun-system.svc:2379",
		"--executor-server-url=https://terrarun-apiserver.terrarun-system.svc:443",
		"--executor=kubernetes", "--default-engine=tofu",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("the server's args lack %s: %s", want, args)
		}
	}
	if strings.Contains(args, "plugin-cache") {
		t.Errorf("without pluginCache.storageClassName the server has a plugin cache: %s", args)
	}
	memLimit := false
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil {
			memLimit = e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" && e.ValueFrom.ResourceFieldRef.ContainerName == c.Name
		}
	}
	if !memLimit {
		t.Errorf("the server's GOMEMLIMIT is not its container's memory limit: %+v", c.Env)
	}
	var etcd appsv1.StatefulSet
	find(t, objs, "StatefulSet", "terrarun-etcd", &etcd)
	if got := strings.Count(strings.Join(etcd.Spec.Template.Spec.Containers[0].Args, " "), "=http://terrarun-etcd-"); got != 3 {
		t.Errorf("--initial-cluster names %d members, want 3", got)
	}

	var crb rbacv1.ClusterRoleBinding
	find(t, objs, "ClusterRoleBinding", "terrarun-apiserver", &crb)
	if s := crb.Subjects[0]; s.Name != "terrarun-apiserver" || s.Namespace != "terrarun-system" {
		t.Errorf("the server's binding names %s/%s", s.Namespace, s.Name)
	}
	roles, err := clusterRoles()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range roles {
		var role rbacv1.ClusterRole
		find(t, objs, "ClusterRole", name, &role)
	}

	var cm corev1.ConfigMap
	find(t, objs, "ConfigMap", "terrarun-admission", &cm)
	cfg, err := policy.Parse([]byte(cm.Data["policy.yaml"]))
	if err != nil {
		t.Fatalf("the server refuses the chart's policy: %v\n%s", err, cm.Data["policy.yaml"])
	}
	if cfg.Defaults.Engine.Image != "ghcr.io/terrarun/terrarun-executor:v0.1.0" {
		t.Errorf("the policy's default executor image is %q", cfg.Defaults.Engine.Image)
	}
	if cfg.SeparationOfDuties == nil || !*cfg.SeparationOfDuties {
		t.Error("the default policy does not keep a run's creator from approving it")
	}
	if has(objs, "ServiceMonitor") || has(objs, "Certificate") {
		t.Error("optional objects are rendered by default")
	}
}

// clusterRoles names the ClusterRoles of files/roles.yaml.
func clusterRoles() ([]string, error) {
	var names []string
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(Roles), 4096)
	for {
		var role rbacv1.ClusterRole
		if err := dec.Decode(&role); err != nil {
			if err.Error() == "EOF" {
				return names, nil
			}
			return nil, err
		}
		names = append(names, role.Name)
	}
}

func verifyServing(t *testing.T, certPEM, caPEM []byte, dnsName string) {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("tls.crt is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("the caBundle is not PEM")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: dnsName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the serving certificate does not verify for %s: %v", dnsName, err)
	}
}

func TestTLSModes(t *testing.T) {
	t.Run("cert-manager", func(t *testing.T) {
		objs := mustRender(t, "--set", "tls.certManager.enabled=true")
		apiService := findAPIService(t, objs)
		if got := apiService.Metadata.Annotations["cert-manager.io/inject-ca-from"]; got != "terrarun-system/terrarun-apiserver-tls" {
			t.Errorf("inject-ca-from %q", got)
		}
		if len(apiService.Spec.CABundle) != 0 || has(objs, "Secret") {
			t.Error("with cert-manager the chart writes a caBundle or a Secret itself")
		}
		var cert unstructured.Unstructured
		find(t, objs, "Certificate", "terrarun-apiserver-tls", &cert.Object)
		if issuer, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name"); issuer != "terrarun-ca" {
			t.Errorf("issuer %q, want the chart's CA", issuer)
		}
		objs = mustRender(t, "--set", "tls.certManager.enabled=true", "--set", "tls.certManager.issuerRef.name=corp", "--set", "tls.certManager.issuerRef.kind=ClusterIssuer")
		find(t, objs, "Certificate", "terrarun-apiserver-tls", &cert.Object)
		if issuer, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name"); issuer != "corp" || has(objs, "Issuer") {
			t.Errorf("with issuerRef the chart uses %q and makes its own Issuer: %v", issuer, has(objs, "Issuer"))
		}
	})
	t.Run("PEM values", func(t *testing.T) {
		objs := mustRender(t, "--set", "tls.cert=CERT", "--set", "tls.key=KEY", "--set", "tls.ca=CA")
		apiService := findAPIService(t, objs)
		var secret corev1.Secret
		find(t, objs, "Secret", "terrarun-apiserver-tls", &secret)
		if string(apiService.Spec.CABundle) != "CA" || string(secret.Data["tls.key"]) != "KEY" {
			t.Errorf("caBundle %q, tls.key %q", apiService.Spec.CABundle, secret.Data["tls.key"])
		}
	})
	t.Run("existing Secret", func(t *testing.T) {
		objs := mustRender(t, "--set", "tls.existingSecret=mine", "--set", "tls.caBundle="+base64.StdEncoding.EncodeToString([]byte("CA")))
		var deploy appsv1.Deployment
		find(t, objs, "Deployment", "terrarun-apiserver", &deploy)
		for _, v := range deploy.Spec.Template.Spec.Volumes {
			if v.Name == "tls" && v.Secret.SecretName != "mine" {
				t.Errorf("the server mounts Secret %s", v.Secret.SecretName)
			}
		}
		if has(objs, "Secret") {
			t.Error("the chart writes a Secret though one exists")
		}
	})
}

func TestValues(t *testing.T) {
	objs := mustRender(t,
		"--set", "replicas=3", "--set", "priorityClassName=system-cluster-critical",
		"--set", "resources.requests.cpu=2", "--set", "etcd.bundled=false",
		"--set", "etcd.external.endpoints={https://a:2379,https://b:2379}", "--set", "etcd.external.tlsSecretName=etcd-client",
		"--set", "extraArgs={--max-concurrent-stages=8}", "--set", "executorServerURL=https://10.0.0.1:8443",
		"--set", "runTaskCallbackURL=https://terrarun.example.com", "--set", "webViewURL=https://runs.example.com", "--set", "image.executor.tag=v9", "--set", "policy.allowedImages={ghcr.io/terrarun/*}",
		"--set", "policy.separationOfDuties=null",
		"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.grafanaDashboard.enabled=true",
		"--set", "pluginCache.storageClassName=nfs-rwx", "--set", "pluginCache.size=20Gi")
	var deploy appsv1.Deployment
	find(t, objs, "Deployment", "terrarun-apiserver", &deploy)
	spec := deploy.Spec.Template.Spec
	if *deploy.Spec.Replicas != 3 || spec.PriorityClassName != "system-cluster-critical" || spec.Containers[0].Resources.Requests.Cpu().String() != "2" {
		t.Errorf("replicas %d, priorityClassName %q, cpu %s", *deploy.Spec.Replicas, spec.PriorityClassName, spec.Containers[0].Resources.Requests.Cpu())
	}
	args := strings.Join(spec.Containers[0].Args, " ")
	for _, want := range []string{"--etcd-servers=https://a:2379,https://b:2379", "--etcd-cafile=", "--max-concurrent-stages=8", "--executor-server-url=https://10.0.0.1:8443",
		"--run-task-callback-url=https://terrarun.example.com", "--web-view-url=https://runs.example.com", "--executor-plugin-cache-storage-class=nfs-rwx", "--executor-plugin-cache-size=20Gi"} {
		if !strings.Contains(args, want) {
			t.Errorf("the server's args lack %s: %s", want, args)
		}
	}
	if has(objs, "StatefulSet") {
		t.Error("an external etcd still renders the bundled one")
	}
	var cm corev1.ConfigMap
	find(t, objs, "ConfigMap", "terrarun-admission", &cm)
	cfg, err := policy.Parse([]byte(cm.Data["policy.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Defaults.Engine.Image != "ghcr.io/terrarun/terrarun-executor:v9" || len(cfg.AllowedImages) != 1 || cfg.SeparationOfDuties != nil {
		t.Errorf("policy: image %q, allowedImages %v, separationOfDuties %v", cfg.Defaults.Engine.Image, cfg.AllowedImages, cfg.SeparationOfDuties)
	}
	var sm, dashboard unstructured.Unstructured
	find(t, objs, "ServiceMonitor", "terrarun-apiserver", &sm.Object)
	find(t, objs, "ConfigMap", "terrarun-grafana-dashboard", &dashboard.Object)
	board, err := os.ReadFile(filepath.Join("files", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(dashboard.Object, "data", "terrarun.json"); strings.TrimSpace(got) != strings.TrimSpace(string(board)) {
		t.Error("the dashboard ConfigMap does not hold files/grafana-dashboard.json")
	}
}

// TestExecutorValue: executor selects the server's executor, and its
// ClusterRole grants that executor's objects alone: Jobs by default,
// Tekton TaskRuns with executor=tekton, never both.
func TestExecutorValue(t *testing.T) {
	for _, c := range []struct {
		set         []string
		arg         string
		grants, not string
	}{
		{nil, "--executor=kubernetes", "jobs", "taskruns"},
		{[]string{"--set", "executor=tekton"}, "--executor=tekton --tekton-namespace=tekton-pipelines", "taskruns", "jobs"},
	} {
		objs := mustRender(t, c.set...)
		var deploy appsv1.Deployment
		find(t, objs, "Deployment", "terrarun-apiserver", &deploy)
		if args := strings.Join(deploy.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, c.arg) {
			t.Errorf("%v: the server's args lack %s: %s", c.set, c.arg, args)
		}
		var granted []string
		for _, o := range objs {
			if o.GetKind() != "ClusterRole" || !strings.HasPrefix(o.GetName(), "terrarun-apiserver") {
				continue
			}
			var role rbacv1.ClusterRole
			find(t, objs, "ClusterRole", o.GetName(), &role)
			for _, r := range role.Rules {
				granted = append(granted, r.Resources...)
			}
		}
		if !slices.Contains(granted, c.grants) || slices.Contains(granted, c.not) {
			t.Errorf("%v: the server's ClusterRoles grant %v: want %s, not %s", c.set, granted, c.grants, c.not)
		}
		var binding rbacv1.ClusterRoleBinding
		find(t, objs, "ClusterRoleBinding", "terrarun-apiserver-executor", &binding)
		if binding.RoleRef.Name != "terrarun-apiserver-executor" || binding.Subjects[0].Name != "terrarun-apiserver" {
			t.Errorf("%v: the executor role's binding %+v", c.set, binding)
		}
	}
	// Tekton's config-defaults are readable, by name, in its namespace.
	var defaultsRole rbacv1.Role
	find(t, mustRender(t, "--set", "executor=tekton", "--set", "tektonNamespace=tekton"), "Role", "terrarun-apiserver-tekton-defaults", &defaultsRole)
	if defaultsRole.Namespace != "tekton" || !slices.Equal(defaultsRole.Rules[0].Resources, []string{"configmaps"}) ||
		!slices.Equal(defaultsRole.Rules[0].ResourceNames, []string{"config-defaults"}) || !slices.Equal(defaultsRole.Rules[0].Verbs, []string{"get"}) {
		t.Errorf("the Role of Tekton's defaults: %+v", defaultsRole)
	}
	// The policy's Task is readable where it lives, by name, and only with
	// the Tekton executor.
	task := []string{"--set", "policy.taskRunTemplate.task.namespace=ops", "--set", "policy.taskRunTemplate.task.name=scan"}
	objs := mustRender(t, append([]string{"--set", "executor=tekton"}, task...)...)
	var role rbacv1.Role
	find(t, objs, "Role", "terrarun-apiserver-stage-task", &role)
	if role.Namespace != "ops" || len(role.Rules) != 1 || !slices.Equal(role.Rules[0].Resources, []string{"tasks"}) ||
		!slices.Equal(role.Rules[0].ResourceNames, []string{"scan"}) || !slices.Equal(role.Rules[0].Verbs, []string{"get"}) {
		t.Errorf("the Task's Role: %+v", role)
	}
	var roleBinding rbacv1.RoleBinding
	find(t, objs, "RoleBinding", "terrarun-apiserver-stage-task", &roleBinding)
	if roleBinding.Namespace != "ops" || roleBinding.Subjects[0].Name != "terrarun-apiserver" {
		t.Errorf("the Task's RoleBinding: %+v", roleBinding)
	}
	for _, o := range mustRender(t, task...) {
		if o.GetName() == "terrarun-apiserver-stage-task" {
			t.Errorf("the Job executor's server may read the Task (%s)", o.GetKind())
		}
	}
	if _, err := render(t, "--set", "executor=jobs"); err == nil || !strings.Contains(err.Error(), "executor") {
		t.Errorf("executor=jobs: %v, want refused naming executor", err)
	}
}

// TestBadValues: a mistake in the values fails the install with the value's
// path and what to do, before anything reaches the cluster.
func TestBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "replica=3"}, "additional properties 'replica' not allowed"},
		{[]string{"--set", "replicas=0"}, "/replicas"},
		{[]string{"--set", "defaultEngine=opentofu"}, "/defaultEngine"},
		{[]string{"--set", "etcd.replicas=2"}, "/etcd/replicas"},
		{[]string{"--set", "etcd.bundled=false"}, "etcd.external.endpoints: list terrarun's etcd members"},
		{[]string{"--set", "etcd.external.endpoints={etcd:2379}"}, "/etcd/external/endpoints/0"},
		{[]string{"--set", "tls.certManager.enabled=true", "--set", "tls.existingSecret=x"}, "tls: choose at most one of"},
		{[]string{"--set", "tls.cert=C"}, "tls.cert, tls.key and tls.ca are all needed"},
		{[]string{"--set", "tls.existingSecret=x"}, "tls.caBundle: the base64 PEM"},
		{[]string{"--set", "tls.certManager.duration=90d"}, "/tls/certManager/duration"},
		{[]string{"--set", "extraArgs={max-concurrent-stages=8}"}, "/extraArgs/0"},
		{[]string{"--set", "pluginCache.size=5GB"}, "/pluginCache/size"},
		{[]string{"--set", "pluginCache.storageClassName=NFS"}, "/pluginCache/storageClassName"},
	} {
		_, err := render(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template %s: %v, want an error with %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// TestArtifactStoreValues: with artifactStore.type s3 the server is told
// where the object store is, and mounts the Secrets of its keys, CA and
// credentials; the required values are named when missing.
func TestArtifactStoreValues(t *testing.T) {
	objs := mustRender(t, "--set", "artifactStore.type=s3", "--set", "artifactStore.s3.endpoint=https://s3.example.com",
		"--set", "artifactStore.s3.bucket=plans", "--set", "artifactStore.s3.pathStyle=true", "--set", "artifactStore.s3.caSecretName=s3-ca",
		"--set", "artifactStore.s3.credentialsSecretName=s3-creds", "--set", "artifactStore.encryptionKeysSecretName=artifact-keys")
	var deploy appsv1.Deployment
	find(t, objs, "Deployment", "terrarun-apiserver", &deploy)
	spec := deploy.Spec.Template.Spec
	args := strings.Join(spec.Containers[0].Args, " ")
	for _, want := range []string{"--artifact-store=s3", "--artifact-store-endpoint=https://s3.example.com", "--artifact-store-bucket=plans",
		"--artifact-store-path-style", "--artifact-store-ca-file=/var/run/terrarun/artifact-store-ca/ca.crt",
		"--artifact-store-credentials-file=/var/run/terrarun/artifact-store-credentials/credentials",
		"--artifact-encryption-keys=/var/run/terrarun/artifact-keys/keys.yaml"} {
		if !strings.Contains(args, want) {
			t.Errorf("the server's args lack %s: %s", want, args)
		}
	}
	secrets := map[string]string{}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret.SecretName
		}
	}
	if secrets["artifact-keys"] != "artifact-keys" || secrets["artifact-store-ca"] != "s3-ca" || secrets["artifact-store-credentials"] != "s3-creds" {
		t.Errorf("secret volumes %v", secrets)
	}
	if _, err := render(t, "--set", "artifactStore.type=s3", "--set", "artifactStore.s3.endpoint=https://s3.example.com", "--set", "artifactStore.s3.bucket=plans"); err == nil ||
		!strings.Contains(err.Error(), "artifactStore.encryptionKeysSecretName is required") {
		t.Errorf("s3 without keys: %v", err)
	}
	// The default keeps artifacts in etcd.
	find(t, mustRender(t), "Deployment", "terrarun-apiserver", &deploy)
	if args := strings.Join(deploy.Spec.Template.Spec.Containers[0].Args, " "); strings.Contains(args, "--artifact-store") {
		t.Errorf("the default chart configures an object store: %s", args)
	}
}
