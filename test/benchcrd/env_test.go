package benchcrd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	chart "github.com/terrarun/terrarun/charts/terrarun"
	"github.com/terrarun/terrarun/pkg/standalone"
	"github.com/terrarun/terrarun/test/internal/harness"
)

const (
	// toolsEnv names the directory of etcd and kube-apiserver.
	toolsEnv = "TERRARUN_E2E_TOOLS"
	// hostIP is the address of everything inside the network namespace.
	hostIP           = "10.214.0.1"
	kubeEtcdPort     = 2379
	terrarunEtcdPort = 2479
	kubeAPIPort      = 6443
	terrarunPort     = 8443
	// terrarunUser is terrarun-apiserver's identity in the cluster.
	terrarunUser = "terrarun-apiserver"
	// namespace holds the benchmark's objects, on both sides.
	namespace = "bench"
)

// environment is the running comparison: two etcds, kube-apiserver with
// the CRD, terrarun-apiserver behind it, and the client of both.
type environment struct {
	dir               string
	procs             []*harness.Proc
	kubeAPI, terrarun *harness.Proc
	kubeURL, trURL    string
	kubeEtcd, trEtcd  string // client URLs
	// client is the one HTTP client of every measured request: the admin's
	// client certificate, both servers' CAs, no client-side rate limit.
	client *http.Client
	kube   kubernetes.Interface
	// config is the client's: kube-apiserver's address, the admin's
	// credentials.
	config *rest.Config
}

var (
	envOnce sync.Once
	envir   *environment
	envErr  error
)

// getEnv returns the environment, starting it on first use.
func getEnv(b *testing.B) *environment {
	b.Helper()
	envOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		envir, envErr = startEnv(ctx)
		if envErr != nil && envir != nil {
			envir.dumpLogs(os.Stderr)
			envir.stop()
			envir = nil
		}
	})
	if envErr != nil {
		b.Fatalf("starting kube-apiserver and terrarun-apiserver: %v", envErr)
	}
	return envir
}

func startEnv(ctx context.Context) (*environment, error) {
	tools := os.Getenv(toolsEnv)
	if tools == "" {
		return nil, fmt.Errorf("%s is not set: set %s=$(hack/e2e-tools.sh), or run make bench-crd", toolsEnv, toolsEnv)
	}
	binDir, cleanup, err := harness.Binaries()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "terrarun-bench-crd-")
	if err != nil {
		cleanup()
		return nil, err
	}
	e := &environment{
		dir:      dir,
		kubeURL:  fmt.Sprintf("https://%s:%d", hostIP, kubeAPIPort),
		trURL:    fmt.Sprintf("https://%s:%d", hostIP, terrarunPort),
		kubeEtcd: fmt.Sprintf("http://%s:%d", hostIP, kubeEtcdPort),
		trEtcd:   fmt.Sprintf("http://%s:%d", hostIP, terrarunEtcdPort),
	}
	defer cleanup()
	return e, e.bootstrap(ctx, tools, filepath.Join(binDir, "terrarun-apiserver"))
}

func (e *environment) path(parts ...string) string {
	return filepath.Join(append([]string{e.dir}, parts...)...)
}

func (e *environment) start(name string, args ...string) (*harness.Proc, error) {
	p, err := harness.StartProc(e.path("logs"), name, args...)
	if err == nil {
		e.procs = append(e.procs, p)
	}
	return p, err
}

func (e *environment) bootstrap(ctx context.Context, tools, terrarunBin string) error {
	for _, d := range []string{"logs", "pki"} {
		if err := os.MkdirAll(e.path(d), 0o755); err != nil {
			return err
		}
	}
	ip := net.ParseIP(hostIP)
	kubeCerts, err := harness.NewKubePKI(e.path("pki"), ip)
	if err != nil {
		return err
	}
	kubePKI := kubeCerts.CA
	trPKI, err := standalone.LoadOrCreatePKI(e.path("pki", "terrarun"))
	if err != nil {
		return err
	}
	trCert, trKey, err := trPKI.ServingCert([]string{"terrarun-apiserver", "terrarun-apiserver.terrarun-system", "terrarun-apiserver.terrarun-system.svc"}, []net.IP{ip})
	if err != nil {
		return err
	}
	adminCert, adminKey, err := harness.WriteClientCert(kubePKI, e.path("pki", "admin"), "bench-admin", []string{"system:masters"})
	if err != nil {
		return err
	}
	trClientCert, trClientKey, err := harness.WriteClientCert(kubePKI, e.path("pki", terrarunUser), terrarunUser, nil)
	if err != nil {
		return err
	}

	// Two etcds on the same disk, fsync on (etcd's default), with a quota
	// of 8 GiB instead of the default 2 (StoredRuns stores 3.5 GiB of runs
	// and artifacts).
	for _, m := range []struct {
		name, dir string
		port      int
	}{{"etcd-kube", e.path("etcd-kube"), kubeEtcdPort}, {"etcd-terrarun", e.path("etcd-terrarun"), terrarunEtcdPort}} {
		client, peer := fmt.Sprintf("http://%s:%d", hostIP, m.port), fmt.Sprintf("http://%s:%d", hostIP, m.port+1)
		if _, err := e.start(m.name, filepath.Join(tools, "etcd"),
			"--name", m.name, "--data-dir", m.dir,
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", m.name+"="+peer, "--initial-cluster-state", "new",
			"--quota-backend-bytes", fmt.Sprint(8<<30)); err != nil {
			return err
		}
		if err := harness.WaitHTTP(client+"/health", nil, "", 60*time.Second); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}

	if e.kubeAPI, err = e.start("kube-apiserver", append([]string{filepath.Join(tools, "kube-apiserver"),
		"--etcd-servers", e.kubeEtcd,
		"--bind-address", hostIP, "--advertise-address", hostIP, "--secure-port", fmt.Sprint(kubeAPIPort),
		"--authorization-mode", "RBAC",
		"--service-cluster-ip-range", "10.96.0.0/16"},
		kubeCerts.Args()...)...); err != nil {
		return err
	}
	if err := harness.WaitHTTP(e.kubeURL+"/readyz", harness.CAPool(kubePKI.CAFile()), "", 120*time.Second); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}

	// The client: trusts both servers, authenticates as a cluster admin.
	var cas []byte
	for _, f := range []string{kubePKI.CAFile(), trPKI.CAFile()} {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		cas = append(cas, data...)
	}
	cfg := &rest.Config{Host: e.kubeURL, QPS: -1, TLSClientConfig: rest.TLSClientConfig{CAData: cas, CertFile: adminCert, KeyFile: adminKey}}
	e.config = cfg
	if e.client, err = rest.HTTPClientFor(cfg); err != nil {
		return err
	}
	if e.kube, err = kubernetes.NewForConfigAndClient(cfg, e.client); err != nil {
		return err
	}
	if err := e.grantTerrarun(ctx); err != nil {
		return fmt.Errorf("terrarun's RBAC: %w", err)
	}
	for _, ns := range []string{"terrarun-system", namespace, "bench-schema"} {
		if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}

	kubeconfig := e.path("terrarun.kubeconfig")
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: bench
  cluster: {server: %q, certificate-authority: %q}
users:
- name: %s
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: bench
  context: {cluster: bench, user: %s}
current-context: bench
`, e.kubeURL, kubePKI.CAFile(), terrarunUser, trClientCert, trClientKey, terrarunUser), 0o600); err != nil {
		return err
	}
	// The API only: no run controller, so stored runs stay Pending. The
	// executor flags are required by validation and unused.
	if e.terrarun, err = e.start("terrarun-apiserver", terrarunBin,
		"--etcd-servers", e.trEtcd,
		"--bind-address", hostIP, "--secure-port", fmt.Sprint(terrarunPort),
		"--tls-cert-file", trCert, "--tls-private-key-file", trKey,
		"--kubeconfig", kubeconfig, "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
		"--run-controller=false",
		"--executor=kubernetes", "--executor-server-url", e.trURL); err != nil {
		return err
	}
	if err := harness.Poll(ctx, 250*time.Millisecond, 90*time.Second, "terrarun-apiserver's /readyz", func(ctx context.Context) bool {
		_, err := e.get(ctx, e.trURL+"/readyz", "")
		return err == nil
	}); err != nil {
		return err
	}
	if err := e.register(ctx, trPKI.CAPEM()); err != nil {
		return fmt.Errorf("registering terrarun with the aggregator: %w", err)
	}
	if err := e.createCRD(ctx); err != nil {
		return err
	}
	return e.checkCRD(ctx)
}

// grantTerrarun gives terrarun-apiserver's user what the chart gives its
// service account (templates/rbac.yaml): its own ClusterRole of
// files/roles.yaml, system:auth-delegator, and
// extension-apiserver-authentication-reader in kube-system.
func (e *environment) grantTerrarun(ctx context.Context) error {
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: terrarunUser}}
	found := false
	for _, doc := range bytes.Split(chart.Roles, []byte("\n---")) {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal(doc, &role); err != nil {
			return fmt.Errorf("charts/terrarun/files/roles.yaml: %w", err)
		}
		if role.Name != terrarunUser {
			continue
		}
		found = true
		if _, err := e.kube.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if !found {
		return fmt.Errorf("charts/terrarun/files/roles.yaml has no ClusterRole %s", terrarunUser)
	}
	for _, role := range []string{terrarunUser, "system:auth-delegator"} {
		if _, err := e.kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "terrarun-apiserver:" + role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   subjects,
		}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	_, err := e.kube.RbacV1().RoleBindings("kube-system").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "terrarun-apiserver:extension-apiserver-authentication-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
		Subjects:   subjects,
	}, metav1.CreateOptions{})
	return err
}

// register creates terrarun's Service, without a selector, its
// EndpointSlice at hostIP, and the APIService of charts/terrarun, and
// waits until the APIService is Available.
func (e *environment) register(ctx context.Context, caBundle []byte) error {
	const ns, name = "terrarun-system", "terrarun-apiserver"
	if _, err := e.kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(terrarunPort)}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	// The EndpointSlice that the endpointslice controller would write: what
	// the aggregator routes to with --enable-aggregator-routing.
	portName, port, ready := "https", int32(terrarunPort), true
	if _, err := e.kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{hostIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	apiService := map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1alpha1.terrarun.dev"},
		"spec": map[string]any{
			"group": "terrarun.dev", "version": "v1alpha1",
			"service":              map[string]any{"namespace": ns, "name": name, "port": 443},
			"groupPriorityMinimum": 1000, "versionPriority": 15,
			"caBundle": caBundle,
		},
	}
	if err := e.post(ctx, e.kubeURL+"/apis/apiregistration.k8s.io/v1/apiservices", apiService); err != nil {
		return err
	}
	return e.waitCondition(ctx, e.kubeURL+"/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.terrarun.dev", "Available")
}

// waitCondition waits until the object at url has status condition cond True.
func (e *environment) waitCondition(ctx context.Context, url, cond string) error {
	var last string
	err := harness.Poll(ctx, 250*time.Millisecond, 90*time.Second, url+" "+cond, func(ctx context.Context) bool {
		body, err := e.get(ctx, url, "application/json")
		if err != nil {
			last = err.Error()
			return false
		}
		var obj struct {
			Status struct {
				Conditions []struct{ Type, Status, Message string }
			}
		}
		if err := json.Unmarshal(body, &obj); err != nil {
			last = err.Error()
			return false
		}
		for _, c := range obj.Status.Conditions {
			if c.Type == cond {
				last = c.Message
				return c.Status == "True"
			}
		}
		return false
	})
	if err != nil {
		return fmt.Errorf("%w: %s", err, last)
	}
	return nil
}

// do sends a request with a JSON body (none when nil) and Accept accept
// (none when empty), and returns the body of an answer with status want.
func (e *environment) do(ctx context.Context, method, url string, body []byte, accept string, want int) ([]byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != want {
		return nil, fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, out)
	}
	return out, nil
}

// get GETs url with Accept accept (none when empty) and returns the body of
// a 200 answer.
func (e *environment) get(ctx context.Context, url, accept string) ([]byte, error) {
	return e.do(ctx, http.MethodGet, url, nil, accept, http.StatusOK)
}

// post POSTs obj as JSON to url and expects 201.
func (e *environment) post(ctx context.Context, url string, obj any) error {
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return e.postRaw(ctx, url, data)
}

// postRaw POSTs the JSON body to url and expects 201; it is the create of
// the benchmarks.
func (e *environment) postRaw(ctx context.Context, url string, body []byte) error {
	_, err := e.do(ctx, http.MethodPost, url, body, "application/json", http.StatusCreated)
	return err
}

// stop ends every process, the last started first, and removes the
// directory unless TERRARUN_BENCH_CRD_KEEP is set.
func (e *environment) stop() {
	for i := len(e.procs) - 1; i >= 0; i-- {
		e.procs[i].Stop(syscall.SIGTERM)
	}
	if os.Getenv("TERRARUN_BENCH_CRD_KEEP") == "" {
		_ = os.RemoveAll(e.dir)
	} else {
		fmt.Fprintf(os.Stderr, "bench-crd: kept %s\n", e.dir)
	}
}

// dumpLogs prints the end of every process's log.
func (e *environment) dumpLogs(w io.Writer) {
	for _, p := range e.procs {
		data, _ := os.ReadFile(p.Log)
		if len(data) > 6000 {
			data = data[len(data)-6000:]
		}
		fmt.Fprintf(w, "\n===== %s (%s), last lines =====\n%s\n", p.Name, p.Log, strings.TrimSpace(string(data)))
	}
}
