package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/terrarun/terrarun/pkg/standalone"
	"github.com/terrarun/terrarun/test/e2e/nodeagent"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// Ports inside the network namespace.
const (
	kubeEtcdPort     = 2379
	terrarunEtcdPort = 2479
	kubeAPIPort      = 6443
	terrarunPort     = 8443
	kubeletPort      = 10250
	nodeName         = "e2e-node"
)

// Users of the test cluster, authenticated by static tokens.
var users = map[string]string{
	"admin": "system:masters",
	"alice": "",
	"bob":   "",
	"carol": "",
}

// cluster is the running test cluster.
type cluster struct {
	dir string
	// providerDir holds the test provider's mirror, outside dir.
	providerDir string
	tools       string // directory of etcd, kube-apiserver, kube-controller-manager, kubectl
	bin         string // directory of terrarun-apiserver and terrarun-executor
	engine      string // terraform or tofu
	kubectl     string
	kubeAPI     string
	kubeCA      string
	trCA        string
	trEtcd      string
	agentDir    string

	kubeconfigs map[string]string

	trArgs []string

	mu       sync.Mutex
	procs    []*proc
	terrarun *proc
	cancel   context.CancelFunc
	agent    chan error
}

// proc is one process of the cluster with its log.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func (c *cluster) start(name string, args ...string) (*proc, error) {
	logPath := filepath.Join(c.dir, "logs", name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	// No Pdeathsig: it fires when the starting OS thread exits, not the
	// process. Leftovers are killed with the network namespace.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(c.engine)+":"+c.bin+":"+os.Getenv("PATH"))
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

// stopProc sends sig to the process group and waits up to 30s.
func stopProc(p *proc, sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

func (c *cluster) stop() {
	if c.cancel != nil {
		c.cancel()
		select {
		case <-c.agent:
		case <-time.After(30 * time.Second):
		}
	}
	c.mu.Lock()
	procs := append([]*proc(nil), c.procs...)
	c.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		stopProc(procs[i], syscall.SIGTERM)
	}
	if os.Getenv("TERRARUN_E2E_KEEP") == "" {
		_ = os.RemoveAll(c.dir)
		if c.providerDir != "" {
			_ = os.RemoveAll(c.providerDir)
		}
	}
}

// dumpLogs prints the end of every process log, for a failed run.
func (c *cluster) dumpLogs(w io.Writer) {
	c.mu.Lock()
	procs := append([]*proc(nil), c.procs...)
	c.mu.Unlock()
	for _, p := range procs {
		data, _ := os.ReadFile(p.log)
		if len(data) > 6000 {
			data = data[len(data)-6000:]
		}
		fmt.Fprintf(w, "\n===== %s (%s), last lines =====\n%s\n", p.name, p.log, data)
	}
}

func env(name, hint string) (string, error) {
	v := os.Getenv(name)
	if v == "" {
		return "", fmt.Errorf("%s is not set: %s", name, hint)
	}
	return v, nil
}

func startCluster() (*cluster, error) {
	tools, err := env("TERRARUN_E2E_TOOLS", "run `make e2e-tools` and pass its output directory (make test does)")
	if err != nil {
		return nil, err
	}
	apiserver, err := env("TERRARUN_APISERVER", "the terrarun-apiserver binary (make build)")
	if err != nil {
		return nil, err
	}
	engine, err := env("TERRARUN_ENGINE", "terraform or tofu (hack/engine.sh)")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "terrarun-e2e-")
	if err != nil {
		return nil, err
	}
	c := &cluster{
		dir:         dir,
		tools:       tools,
		bin:         filepath.Dir(apiserver),
		engine:      engine,
		kubectl:     filepath.Join(tools, "kubectl"),
		kubeAPI:     fmt.Sprintf("https://%s:%d", nodeIP, kubeAPIPort),
		trEtcd:      fmt.Sprintf("http://%s:%d", nodeIP, terrarunEtcdPort),
		kubeconfigs: map[string]string{},
	}
	for _, d := range []string{"logs", "pki", "kubeconfigs", "agent"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return c, err
		}
	}
	c.agentDir = filepath.Join(dir, "agent")
	if err := c.bootstrap(); err != nil {
		return c, err
	}
	return c, nil
}

func (c *cluster) path(parts ...string) string {
	return filepath.Join(append([]string{c.dir}, parts...)...)
}

func (c *cluster) bootstrap() error {
	ip := net.ParseIP(nodeIP)

	// Certificates and keys.
	kubePKI, err := standalone.LoadOrCreatePKI(c.path("pki", "kube"))
	if err != nil {
		return err
	}
	c.kubeCA = kubePKI.CAFile()
	kubeCert, kubeKey, err := kubePKI.ServingCert([]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "localhost"}, []net.IP{ip})
	if err != nil {
		return err
	}
	kubeletClientCert, kubeletClientKey, err := writeClientCert(kubePKI, c.path("pki", "kubelet-client"), "kube-apiserver-kubelet-client", []string{"system:masters"})
	if err != nil {
		return err
	}
	frontPKI, err := standalone.LoadOrCreatePKI(c.path("pki", "front-proxy"))
	if err != nil {
		return err
	}
	proxyCert, proxyKey, err := writeClientCert(frontPKI, c.path("pki", "front-proxy-client"), "front-proxy-client", nil)
	if err != nil {
		return err
	}
	kubeletPKI, err := standalone.LoadOrCreatePKI(c.path("pki", "kubelet"))
	if err != nil {
		return err
	}
	kubeletCert, kubeletKey, err := kubeletPKI.ServingCert([]string{nodeName}, []net.IP{ip})
	if err != nil {
		return err
	}
	trPKI, err := standalone.LoadOrCreatePKI(c.path("pki", "terrarun"))
	if err != nil {
		return err
	}
	c.trCA = trPKI.CAFile()
	trCert, trKey, err := trPKI.ServingCert([]string{"terrarun-apiserver", "terrarun-apiserver.terrarun-system", "terrarun-apiserver.terrarun-system.svc"}, []net.IP{ip})
	if err != nil {
		return err
	}
	saKey, saPub, err := writeServiceAccountKey(c.path("pki"))
	if err != nil {
		return err
	}
	var tokens strings.Builder
	for user, group := range users {
		fmt.Fprintf(&tokens, "%s-token,%s,%s-uid,\"%s\"\n", user, user, user, group)
		if err := c.writeKubeconfig(user, user+"-token"); err != nil {
			return err
		}
	}
	tokenFile := c.path("pki", "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(tokens.String()), 0o600); err != nil {
		return err
	}

	// Two etcds: the cluster's and terrarun's own.
	for _, e := range []struct {
		name       string
		client, pr int
	}{{"etcd-kube", kubeEtcdPort, kubeEtcdPort + 1}, {"etcd-terrarun", terrarunEtcdPort, terrarunEtcdPort + 1}} {
		clientURL := fmt.Sprintf("http://%s:%d", nodeIP, e.client)
		peerURL := fmt.Sprintf("http://%s:%d", nodeIP, e.pr)
		if _, err := c.start(e.name, filepath.Join(c.tools, "etcd"),
			"--name", e.name, "--data-dir", c.path(e.name),
			"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
			"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
			"--initial-cluster", e.name+"="+peerURL, "--unsafe-no-fsync"); err != nil {
			return err
		}
		if err := waitHTTP(clientURL+"/health", nil, "", 60*time.Second); err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
	}

	if _, err := c.start("kube-apiserver", filepath.Join(c.tools, "kube-apiserver"),
		"--etcd-servers", fmt.Sprintf("http://%s:%d", nodeIP, kubeEtcdPort),
		"--bind-address", nodeIP, "--advertise-address", nodeIP, "--secure-port", fmt.Sprint(kubeAPIPort),
		"--tls-cert-file", kubeCert, "--tls-private-key-file", kubeKey,
		"--client-ca-file", kubePKI.CAFile(),
		"--token-auth-file", tokenFile,
		"--authorization-mode", "Node,RBAC",
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", saPub,
		"--service-account-signing-key-file", saKey,
		"--api-audiences", "https://kubernetes.default.svc",
		"--requestheader-client-ca-file", frontPKI.CAFile(),
		"--requestheader-allowed-names", "front-proxy-client",
		"--requestheader-username-headers", "X-Remote-User",
		"--requestheader-group-headers", "X-Remote-Group",
		"--requestheader-uid-headers", "X-Remote-Uid",
		"--requestheader-extra-headers-prefix", "X-Remote-Extra-",
		"--proxy-client-cert-file", proxyCert, "--proxy-client-key-file", proxyKey,
		"--enable-aggregator-routing",
		"--kubelet-client-certificate", kubeletClientCert, "--kubelet-client-key", kubeletClientKey,
		"--kubelet-certificate-authority", kubeletPKI.CAFile(),
		"--kubelet-preferred-address-types", "InternalIP",
		"--allow-privileged",
		"--enable-priority-and-fairness=false",
	); err != nil {
		return err
	}
	if err := waitHTTP(c.kubeAPI+"/readyz", c.caPool(c.kubeCA), "admin-token", 120*time.Second); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}

	if _, err := c.start("kube-controller-manager", filepath.Join(c.tools, "kube-controller-manager"),
		"--kubeconfig", c.kubeconfigs["admin"],
		"--authentication-kubeconfig", c.kubeconfigs["admin"],
		"--authorization-kubeconfig", c.kubeconfigs["admin"],
		"--bind-address", nodeIP, "--secure-port", "10257",
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file", saKey,
		"--root-ca-file", kubePKI.CAFile(),
		"--controllers", "job-controller,garbage-collector-controller,ttl-after-finished-controller,serviceaccount-token-controller,serviceaccount-controller,namespace-controller,root-ca-certificate-publisher-controller",
	); err != nil {
		return err
	}

	// The node agent runs pods; it is part of this test process.
	admin, err := clientcmd.BuildConfigFromFlags("", c.kubeconfigs["admin"])
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	// The executor "image" carries the test provider in a filesystem mirror
	// and a CLI configuration that installs it, as a real one would: in a
	// directory that the pods' user can reach, unlike c.dir, and that their
	// /tmp (an emptyDir) does not hide.
	providerDir, err := os.MkdirTemp("/var/tmp", "terrarun-e2e-provider-")
	if err != nil {
		return err
	}
	c.providerDir = providerDir
	if err := os.Chmod(providerDir, 0o755); err != nil {
		return err
	}
	provider, err := harness.InstallTestProvider(providerDir)
	if err != nil {
		return err
	}
	agent, err := nodeagent.New(nodeagent.Options{
		NodeName:     nodeName,
		Address:      nodeIP,
		Port:         kubeletPort,
		Client:       kube,
		RootDir:      c.agentDir,
		Images:       map[string]string{"terrarun-executor": filepath.Join(c.bin, "terrarun-executor")},
		PathDirs:     []string{filepath.Dir(c.engine), c.bin},
		ServingCert:  kubeletCert,
		ServingKey:   kubeletKey,
		ClientCAFile: kubePKI.CAFile(),
		Env: append([]string{"KUBERNETES_SERVICE_HOST=" + nodeIP, fmt.Sprintf("KUBERNETES_SERVICE_PORT=%d", kubeAPIPort)},
			provider.Env()...),
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.agent = make(chan error, 1)
	go func() { c.agent <- agent.Run(ctx) }()

	return c.deployTerrarun(trCert, trKey)
}

// deployTerrarun applies artifacts/deploy (except the Deployment and etcd,
// replaced by a local process and the harness's etcd), points the Service's
// endpoints at the process, starts it and waits for the APIService.
func (c *cluster) deployTerrarun(cert, key string) error {
	for _, f := range []string{"00-namespace.yaml", "service-account.yaml", "rbac.yaml", "service.yaml", "apiservice.yaml"} {
		if _, err := c.kubectlAs("admin", "apply", "-f", harness.RepoPath("artifacts", "deploy", f)); err != nil {
			return err
		}
	}
	endpoints := fmt.Sprintf(`apiVersion: v1
kind: Endpoints
metadata:
  name: terrarun-apiserver
  namespace: terrarun-system
subsets:
- addresses:
  - ip: %[1]s
  ports:
  - name: https
    port: %[2]d
    protocol: TCP
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: terrarun-apiserver-e2e
  namespace: terrarun-system
  labels:
    kubernetes.io/service-name: terrarun-apiserver
addressType: IPv4
endpoints:
- addresses: ["%[1]s"]
  conditions:
    ready: true
ports:
- name: https
  port: %[2]d
  protocol: TCP
`, nodeIP, terrarunPort)
	if _, err := c.kubectlStdin("admin", endpoints, "apply", "-f", "-"); err != nil {
		return err
	}
	caBundle, err := os.ReadFile(c.trCA)
	if err != nil {
		return err
	}
	patch := fmt.Sprintf(`{"spec":{"caBundle":%q}}`, base64.StdEncoding.EncodeToString(caBundle))
	if _, err := c.kubectlAs("admin", "patch", "apiservice", "v1alpha1.terrarun.dev", "--type=merge", "-p", patch); err != nil {
		return err
	}

	// terrarun-apiserver authenticates to the cluster as its ServiceAccount,
	// with the RBAC of artifacts/deploy.
	token, err := c.kubectlAs("admin", "create", "token", "terrarun-apiserver", "-n", "terrarun-system", "--duration=24h")
	if err != nil {
		return err
	}
	if err := c.writeKubeconfig("terrarun-apiserver", strings.TrimSpace(token)); err != nil {
		return err
	}
	// A cluster policy that allows only the default executor image.
	policyFile, admissionFile := c.path("terrarun-policy.yaml"), c.path("admission-config.yaml")
	if err := os.WriteFile(policyFile, []byte("apiVersion: admission.terrarun.dev/v1alpha1\nkind: TerraformRunPolicy\n"+
		"allowedImages: [\"ghcr.io/terrarun/terrarun-executor:*\"]\n"), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(admissionFile, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n"+
		"- name: TerraformRunDefaults\n  path: "+policyFile+"\n- name: TerraformRunPolicy\n  path: "+policyFile+"\n"), 0o600); err != nil {
		return err
	}
	c.trArgs = []string{filepath.Join(c.bin, "terrarun-apiserver"),
		"--admission-control-config-file", admissionFile,
		"--etcd-servers", c.trEtcd,
		"--bind-address", nodeIP, "--secure-port", fmt.Sprint(terrarunPort),
		"--tls-cert-file", cert, "--tls-private-key-file", key,
		"--kubeconfig", c.kubeconfigs["terrarun-apiserver"],
		"--authentication-kubeconfig", c.kubeconfigs["terrarun-apiserver"],
		"--authorization-kubeconfig", c.kubeconfigs["terrarun-apiserver"],
		"--executor", "kubernetes",
		"--executor-server-url", fmt.Sprintf("https://%s:%d", nodeIP, terrarunPort),
		"--executor-ca-file", c.trCA,
		"--default-engine", filepath.Base(c.engine),
	}
	if err := c.startTerrarun(); err != nil {
		return err
	}
	if _, err := c.kubectlAs("admin", "wait", "apiservice/v1alpha1.terrarun.dev", "--for=condition=Available", "--timeout=120s"); err != nil {
		return err
	}
	return nil
}

// startTerrarun starts terrarun-apiserver and waits until it is ready.
func (c *cluster) startTerrarun() error {
	p, err := c.start("terrarun-apiserver", c.trArgs...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.terrarun = p
	c.mu.Unlock()
	return waitHTTP(fmt.Sprintf("https://%s:%d/readyz", nodeIP, terrarunPort), c.caPool(c.trCA), "", 120*time.Second)
}

func (c *cluster) caPool(file string) *x509.CertPool {
	pool := x509.NewCertPool()
	data, _ := os.ReadFile(file)
	pool.AppendCertsFromPEM(data)
	return pool
}

// writeKubeconfig writes a kubeconfig for the cluster with a bearer token.
func (c *cluster) writeKubeconfig(name, token string) error {
	path := c.path("kubeconfigs", name)
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: %s, namespace: default}
current-context: e2e
`, c.kubeAPI, c.kubeCA, name, token, name)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return err
	}
	c.kubeconfigs[name] = path
	return nil
}

// kubectlAs runs kubectl as one of the users and returns its stdout; an
// error carries stderr.
func (c *cluster) kubectlAs(user string, args ...string) (string, error) {
	return c.kubectlStdin(user, "", args...)
}

func (c *cluster) kubectlStdin(user, stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.kubectl, append([]string{"--kubeconfig", c.kubeconfigs[user]}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s (as %s): %v: %s%s", strings.Join(args, " "), user, err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// waitHTTP polls url until it answers 200.
func waitHTTP(url string, roots *x509.CertPool, token string, timeout time.Duration) error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %s: %s", url, timeout, last)
}

func writeClientCert(p *standalone.PKI, base, user string, groups []string) (string, string, error) {
	certPEM, keyPEM, err := p.ClientCert(user, groups, 24*time.Hour)
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(base+".crt", certPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(base+".key", keyPEM, 0o600); err != nil {
		return "", "", err
	}
	return base + ".crt", base + ".key", nil
}

// writeServiceAccountKey writes the key that signs service-account tokens.
func writeServiceAccountKey(dir string) (string, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return "", "", err
	}
	keyPath, pubPath := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return "", "", err
	}
	return keyPath, pubPath, nil
}
