package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
	terrarunPort     = 8443 // the chart's containerPort, on each replica's node address
	serviceProxyPort = 443  // terrarun's Service, on nodeIP
	kubeletPort      = 10250
	schedulerPort    = 10259
	fluxStoragePort  = 9090 // source-controller's artifact server, on nodeIP
)

// nodes are the names and addresses of the cluster's three nodes, each a node
// agent with its own address in the namespace: pods on a node share its
// address, so each terrarun replica binds its node's.
var nodes = []struct{ name, ip string }{
	{"e2e-node-1", "10.213.0.11"},
	{"e2e-node-2", "10.213.0.12"},
	{"e2e-node-3", "10.213.0.13"},
}

// terrarunEtcd are the client and peer ports of terrarun's three etcd
// members, on nodeIP.
var terrarunEtcd = []struct{ client, peer int }{{2479, 2480}, {2489, 2490}, {2499, 2500}}

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
	// providerDir holds the test provider's mirror, and imageDir the
	// images' file systems, outside dir: the pods' user reaches them.
	providerDir string
	provider    harness.TestProvider
	imageDir    string
	volumeDir   string // the test provisioner's volumes
	tools       string // directory of etcd, kube-apiserver, kube-controller-manager, kubectl
	images      string // directory of the OCI layouts make images writes
	helm        string
	// values are the chart's values, as deployTerrarun applied them (JSON).
	values   []byte
	kubectl  string
	kubeAPI  string
	kubeCA   string
	trCA     string
	trEtcd   []string // terrarun's etcd members' client URLs
	agentDir string

	kubeconfigs map[string]string
	serviceURL  string // terrarun's Service, through the harness's proxy
	trMembers   []*etcdMember

	mu     sync.Mutex
	procs  []*harness.Proc
	cancel context.CancelFunc
	// agents are the node agents, by node name.
	agents map[string]*nodeAgent
}

// nodeAgent is one node: its agent, which a test may stop (the node dies
// with its pods) and start again.
type nodeAgent struct {
	opts nodeagent.Options
	ctx  context.Context // the cluster's

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

// start starts the node's agent, unless it runs.
func (n *nodeAgent) start() error {
	n.mu.Lock()
	running := n.cancel != nil
	n.mu.Unlock()
	if running {
		return nil
	}
	agent, err := nodeagent.New(n.opts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(n.ctx)
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx) }()
	n.mu.Lock()
	n.cancel, n.done = cancel, done
	n.mu.Unlock()
	return nil
}

// kill stops the agent as a dead node would stop: its containers are
// killed, and it reports nothing more.
func (n *nodeAgent) kill() {
	n.mu.Lock()
	cancel, done := n.cancel, n.done
	n.cancel = nil
	n.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
}

func (c *cluster) start(name string, args ...string) (*harness.Proc, error) {
	p, err := harness.StartProc(filepath.Join(c.dir, "logs"), name, args...)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

// etcdMember is a member of terrarun's etcd cluster, which a test may kill
// and start again on its data directory.
type etcdMember struct {
	name, client string
	args         []string
	proc         *harness.Proc
}

// kill kills the member's process, as a crash would.
func (m *etcdMember) kill() { m.proc.Stop(syscall.SIGKILL) }

// restart starts the member again on its data directory.
func (c *cluster) restart(m *etcdMember) error {
	p, err := c.start(m.name, m.args...)
	if err != nil {
		return err
	}
	m.proc = p
	return nil
}

func (c *cluster) stop() {
	if c.cancel != nil {
		c.cancel()
		for _, n := range c.agents {
			n.kill()
		}
	}
	c.mu.Lock()
	procs := append([]*harness.Proc(nil), c.procs...)
	c.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop(syscall.SIGTERM)
	}
	if os.Getenv("TERRARUN_E2E_KEEP") == "" {
		_ = os.RemoveAll(c.dir)
		for _, d := range []string{c.providerDir, c.imageDir, c.volumeDir} {
			if d != "" {
				_ = os.RemoveAll(d)
			}
		}
	}
}

// dumpLogs prints the end of every process log, and of the logs of
// terrarun's pods, for a failed run.
func (c *cluster) dumpLogs(w io.Writer) {
	c.mu.Lock()
	var logs [][2]string
	for _, p := range c.procs {
		logs = append(logs, [2]string{p.Name, p.Log})
	}
	c.mu.Unlock()
	pods, _ := filepath.Glob(filepath.Join(c.agentDir, "*", "terrarun-system_*", "*.log"))
	for _, l := range pods {
		logs = append(logs, [2]string{"pod " + filepath.Base(filepath.Dir(l)), l})
	}
	for _, args := range [][]string{
		{"get", "nodes,pods", "-A", "-o", "wide"},
		{"get", "events", "-n", "terrarun-system"},
	} {
		out, err := c.kubectlAs("admin", args...)
		fmt.Fprintf(w, "\n===== kubectl %s =====\n%s%v\n", strings.Join(args, " "), out, err)
	}
	for _, l := range logs {
		data, _ := os.ReadFile(l[1])
		if len(data) > 6000 {
			data = data[len(data)-6000:]
		}
		fmt.Fprintf(w, "\n===== %s (%s), last lines =====\n%s\n", l[0], l[1], data)
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
	images, err := env("TERRARUN_IMAGES", "the directory of the images `make images` builds (bin/images; make e2e passes it)")
	if err != nil {
		return nil, err
	}
	helm, err := env("TERRARUN_HELM", "a helm binary (hack/helm.sh prints one; make e2e passes it)")
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
		images:      images,
		helm:        helm,
		kubectl:     filepath.Join(tools, "kubectl"),
		kubeAPI:     fmt.Sprintf("https://%s:%d", nodeIP, kubeAPIPort),
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
	kubeCerts, err := harness.NewKubePKI(c.path("pki"), ip)
	if err != nil {
		return err
	}
	kubePKI := kubeCerts.CA
	c.kubeCA = kubePKI.CAFile()
	kubeletClientCert, kubeletClientKey, err := harness.WriteClientCert(kubePKI, c.path("pki", "kubelet-client"), "kube-apiserver-kubelet-client", []string{"system:masters"})
	if err != nil {
		return err
	}
	kubeletPKI, err := standalone.LoadOrCreatePKI(c.path("pki", "kubelet"))
	if err != nil {
		return err
	}
	kubeletCerts := map[string][2]string{}
	for _, n := range nodes {
		cert, key, err := kubeletPKI.ServingCert([]string{n.name}, []net.IP{net.ParseIP(n.ip)})
		if err != nil {
			return err
		}
		// ServingCert writes the same two files each time: keep each node's.
		mine := [2]string{c.path("pki", n.name+"-kubelet.crt"), c.path("pki", n.name+"-kubelet.key")}
		if err := os.Rename(cert, mine[0]); err != nil {
			return err
		}
		if err := os.Rename(key, mine[1]); err != nil {
			return err
		}
		kubeletCerts[n.name] = mine
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

	// The cluster's etcd, and terrarun's own: a cluster of three members.
	type member struct {
		name, client, peer string
	}
	kubeEtcd := member{"etcd-kube", fmt.Sprintf("http://%s:%d", nodeIP, kubeEtcdPort), fmt.Sprintf("http://%s:%d", nodeIP, kubeEtcdPort+1)}
	var trMembers []member
	var initial []string
	for i, e := range terrarunEtcd {
		m := member{fmt.Sprintf("etcd-terrarun-%d", i), fmt.Sprintf("http://%s:%d", nodeIP, e.client), fmt.Sprintf("http://%s:%d", nodeIP, e.peer)}
		trMembers = append(trMembers, m)
		initial = append(initial, m.name+"="+m.peer)
		c.trEtcd = append(c.trEtcd, m.client)
	}
	for _, e := range append([]member{kubeEtcd}, trMembers...) {
		cluster := e.name + "=" + e.peer
		if e != kubeEtcd {
			cluster = strings.Join(initial, ",")
		}
		args := []string{filepath.Join(c.tools, "etcd"),
			"--name", e.name, "--data-dir", c.path(e.name),
			"--listen-client-urls", e.client, "--advertise-client-urls", e.client,
			"--listen-peer-urls", e.peer, "--initial-advertise-peer-urls", e.peer,
			"--initial-cluster", cluster, "--initial-cluster-state", "new", "--unsafe-no-fsync"}
		p, err := c.start(e.name, args...)
		if err != nil {
			return err
		}
		if e != kubeEtcd {
			c.trMembers = append(c.trMembers, &etcdMember{name: e.name, client: e.client, args: args, proc: p})
		}
	}
	for _, e := range append([]member{kubeEtcd}, trMembers...) {
		if err := harness.WaitHTTP(e.client+"/health", nil, "", 60*time.Second); err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
	}

	if _, err := c.start("kube-apiserver", append([]string{filepath.Join(c.tools, "kube-apiserver"),
		"--etcd-servers", fmt.Sprintf("http://%s:%d", nodeIP, kubeEtcdPort),
		"--bind-address", nodeIP, "--advertise-address", nodeIP, "--secure-port", fmt.Sprint(kubeAPIPort),
		"--token-auth-file", tokenFile,
		"--authorization-mode", "Node,RBAC",
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--kubelet-client-certificate", kubeletClientCert, "--kubelet-client-key", kubeletClientKey,
		"--kubelet-certificate-authority", kubeletPKI.CAFile(),
		"--kubelet-preferred-address-types", "InternalIP",
		"--allow-privileged",
		"--enable-priority-and-fairness=false"},
		kubeCerts.Args()...)...,
	); err != nil {
		return err
	}
	if err := harness.WaitHTTP(c.kubeAPI+"/readyz", harness.CAPool(c.kubeCA), "admin-token", 120*time.Second); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}

	if _, err := c.start("kube-controller-manager", filepath.Join(c.tools, "kube-controller-manager"),
		"--kubeconfig", c.kubeconfigs["admin"],
		"--authentication-kubeconfig", c.kubeconfigs["admin"],
		"--authorization-kubeconfig", c.kubeconfigs["admin"],
		"--bind-address", nodeIP, "--secure-port", "10257",
		"--leader-elect=false",
		// A node whose agent stops is marked unreachable after 20s (the
		// agents report every 10s), not 50s.
		"--node-monitor-grace-period=20s",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file", kubeCerts.SAKey,
		"--root-ca-file", kubePKI.CAFile(),
		"--controllers", "job-controller,garbage-collector-controller,ttl-after-finished-controller,serviceaccount-token-controller,serviceaccount-controller,namespace-controller,root-ca-certificate-publisher-controller,"+
			"deployment-controller,replicaset-controller,endpoints-controller,endpointslice-controller,disruption-controller,node-lifecycle-controller,"+
			"persistentvolume-binder-controller,persistentvolumeclaim-protection-controller,persistentvolume-protection-controller",
	); err != nil {
		return err
	}

	// kube-scheduler places pods on the nodes (spread, anti-affinity).
	if _, err := c.start("kube-scheduler", filepath.Join(c.tools, "kube-scheduler"),
		"--kubeconfig", c.kubeconfigs["admin"],
		"--authentication-kubeconfig", c.kubeconfigs["admin"],
		"--authorization-kubeconfig", c.kubeconfigs["admin"],
		"--bind-address", nodeIP, "--secure-port", fmt.Sprint(schedulerPort),
		"--leader-elect=false",
	); err != nil {
		return err
	}

	// The node agents run pods; they are part of this test process.
	admin, err := clientcmd.BuildConfigFromFlags("", c.kubeconfigs["admin"])
	if err != nil {
		return err
	}
	// The three agents (and the Service proxy) share this client: the
	// kubelet's own limits (50/s, bursts of 100) for each, so that a burst of
	// pods never holds a node's heartbeat back past the node monitor's grace
	// period, which would mark the node unreachable and its stages lost.
	admin.QPS, admin.Burst = 150, 300
	kube, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	// The executor "image" carries the test provider in a filesystem mirror
	// and a CLI configuration that installs it, as a real one would.
	providerDir, err := c.reachableDir("terrarun-e2e-provider-", &c.providerDir)
	if err != nil {
		return err
	}
	provider, err := harness.InstallTestProvider(providerDir)
	if err != nil {
		return err
	}
	c.provider = provider
	// The node runs what is in the images that make images built: their
	// file systems are unpacked, and a container of an image runs its
	// binary, with the executor image's engine on PATH.
	imageDir, err := c.reachableDir("terrarun-e2e-images-", &c.imageDir)
	if err != nil {
		return err
	}
	roots := map[string]string{}
	for _, name := range []string{"terrarun-apiserver", "terrarun-executor"} {
		img, err := openImage(filepath.Join(c.images, name))
		if err != nil {
			return err
		}
		roots[name] = filepath.Join(imageDir, name)
		if err := extractImage(img, roots[name]); err != nil {
			return fmt.Errorf("unpacking %s: %w", name, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	// The plugin caches' volumes, where the pods' user reaches them.
	volumeDir, err := c.reachableDir("terrarun-e2e-volumes-", &c.volumeDir)
	if err != nil {
		return err
	}
	if err := startProvisioner(ctx, kube, volumeDir); err != nil {
		return err
	}
	images := map[string]string{
		"terrarun-apiserver": filepath.Join(roots["terrarun-apiserver"], "usr", "local", "bin", "terrarun-apiserver"),
		"terrarun-executor":  filepath.Join(roots["terrarun-executor"], "usr", "local", "bin", "terrarun-executor"),
	}
	// Tekton's TaskRun pods run its entrypoint, nop and workingdirinit
	// images (TestTektonExecutor), which hack/tekton.sh builds as OCI
	// layouts: unpacked, each runs its /ko-app binary.
	if dir := os.Getenv("TERRARUN_TEKTON"); dir != "" {
		for _, program := range tektonImages {
			img, err := openImage(filepath.Join(dir, "images", program))
			if err != nil {
				return fmt.Errorf("%w (hack/tekton.sh builds it)", err)
			}
			root := filepath.Join(imageDir, "tekton-"+program)
			if err := extractImage(img, root); err != nil {
				return fmt.Errorf("unpacking Tekton's %s image: %w", program, err)
			}
			images[tektonImage(program)] = filepath.Join(root, "ko-app", program)
		}
	}
	c.agents = map[string]*nodeAgent{}
	for _, n := range nodes {
		agent := &nodeAgent{ctx: ctx, opts: nodeagent.Options{
			NodeName:     n.name,
			Address:      n.ip,
			Port:         kubeletPort,
			Client:       kube,
			RootDir:      filepath.Join(c.agentDir, n.name),
			Scheduled:    true,
			Images:       images,
			PathDirs:     []string{filepath.Join(roots["terrarun-executor"], "usr", "local", "bin")},
			ServingCert:  kubeletCerts[n.name][0],
			ServingKey:   kubeletCerts[n.name][1],
			ClientCAFile: kubePKI.CAFile(),
			Env: append([]string{"KUBERNETES_SERVICE_HOST=" + nodeIP, fmt.Sprintf("KUBERNETES_SERVICE_PORT=%d", kubeAPIPort)},
				provider.Env()...),
		}}
		if err := agent.start(); err != nil {
			return err
		}
		c.agents[n.name] = agent
	}
	// terrarun's Service, as kube-proxy would route it: the executor pods
	// reach whichever replica is ready.
	proxy, err := newServiceProxy(ctx, kube, fmt.Sprintf("%s:%d", nodeIP, serviceProxyPort), "terrarun-system", "terrarun-apiserver")
	if err != nil {
		return err
	}
	c.serviceURL = "https://" + proxy

	return c.deployTerrarun(trCert, trKey)
}

// reachableDir makes a directory that the pods' user can reach, unlike
// c.dir, under /var/tmp, which their /tmp (an emptyDir) does not hide; it
// records it in *field, for stop to remove.
func (c *cluster) reachableDir(prefix string, field *string) (string, error) {
	dir, err := os.MkdirTemp("/var/tmp", prefix)
	if err != nil {
		return "", err
	}
	*field = dir
	return dir, os.Chmod(dir, 0o755)
}

// deployTerrarun installs charts/terrarun as the README says: it renders
// the chart with helm, for this cluster (terrarun's etcd is the harness's,
// the serving certificate its PKI's), and applies it with
// kubectl. The node agent runs the Deployment's pod from the
// terrarun-apiserver image. The chart's default rendering (bundled etcd, a
// certificate made by the chart) is checked by the cluster with a server-side
// dry run.
func (c *cluster) deployTerrarun(cert, key string) error {
	if _, err := c.kubectlAs("admin", "create", "namespace", "terrarun-system"); err != nil {
		return err
	}
	// The restricted Pod Security Standard: the chart's pods must meet it.
	if _, err := c.kubectlAs("admin", "label", "namespace", "terrarun-system",
		"pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted"); err != nil {
		return err
	}
	values := map[string]any{
		"replicas":          2,
		"executorServerURL": c.serviceURL,
		"etcd":              map[string]any{"bundled": false, "external": map[string]any{"endpoints": c.trEtcd}},
		// Pods share their node's address: each replica binds its own.
		// A stage whose node stops reporting is lost 5s after the node
		// lifecycle controller marks the node (TestNodeLost).
		// Flux artifacts are served by the source-controller that
		// TestFluxSources runs on nodeIP (startFlux).
		"extraArgs": []string{"--bind-address=$(POD_IP)", "--executor-node-lost-after=5s", fmt.Sprintf("--flux-artifact-host=%s:%d", nodeIP, fluxStoragePort)},
		// Each creator's runs in a namespace share a plugin cache
		// (TestJobPluginCache).
		"pluginCache": map[string]any{"storageClassName": cacheStorageClass, "size": "1Gi"},
		// The policy of these tests: only the executor images are allowed,
		// and none of the chart's other defaults apply.
		"policy": map[string]any{
			"defaults": nil, "allowedGitHosts": nil, "manualApprovalNamespaceSelector": nil, "maxTimeouts": nil, "separationOfDuties": nil,
			"allowedImages": []string{"ghcr.io/terrarun/terrarun-executor:*"},
		},
	}
	tls := map[string]any{}
	for k, file := range map[string]string{"cert": cert, "key": key, "ca": c.trCA} {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		tls[k] = string(data)
	}
	values["tls"] = tls
	data, err := json.Marshal(values)
	if err != nil {
		return err
	}
	c.values = data
	defaults, err := c.helmTemplate()
	if err != nil {
		return err
	}
	if _, err := c.kubectlStdin("admin", defaults, "apply", "--dry-run=server", "-f", "-"); err != nil {
		return fmt.Errorf("the chart's default rendering: %w", err)
	}
	return c.applyTerrarun(nil)
}

// applyTerrarun renders the chart with the values of deployTerrarun, changed
// by change when it is not nil, applies it, and waits until every replica
// runs it, the old replicas' pods are gone and the APIService is available.
func (c *cluster) applyTerrarun(change func(values map[string]any)) error {
	var values map[string]any
	if err := json.Unmarshal(c.values, &values); err != nil {
		return err
	}
	if change != nil {
		change(values)
	}
	data, err := json.Marshal(values)
	if err != nil {
		return err
	}
	valuesFile := c.path("terrarun-values.json")
	if err := os.WriteFile(valuesFile, data, 0o600); err != nil {
		return err
	}
	manifests, err := c.helmTemplate("-f", valuesFile)
	if err != nil {
		return err
	}
	if _, err := c.kubectlStdin("admin", manifests, "apply", "-f", "-"); err != nil {
		return err
	}
	if _, err := c.kubectlAs("admin", "-n", "terrarun-system", "rollout", "status", "deployment/terrarun-apiserver", "--timeout=180s"); err != nil {
		return err
	}
	if err := c.within(2*time.Minute, "the old replicas' pods to go", c.rolledOut); err != nil {
		return err
	}
	if _, err := c.kubectlAs("admin", "wait", "apiservice/v1alpha1.terrarun.dev", "--for=condition=Available", "--timeout=180s"); err != nil {
		return err
	}
	// kubectl validates what it creates against the aggregated OpenAPI,
	// which kube-apiserver fetches from the new replicas a little later;
	// until then a user who may not list CRDs cannot create a run.
	return c.within(2*time.Minute, "the aggregated OpenAPI to have TerraformRun again", func() error {
		_, err := c.kubectlAs("admin", "explain", "terraformruns.spec.engine", "--api-version=terrarun.dev/v1alpha1")
		return err
	})
}

// within retries check every second until it returns nil, for at most d.
func (c *cluster) within(d time.Duration, what string, check func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %s for %s: %w", d, what, err)
		}
		time.Sleep(time.Second)
	}
}

// rolledOut says why terrarun's Deployment has not only its replicas'
// pods yet, or nil.
func (c *cluster) rolledOut() error {
	want, err := c.kubectlAs("admin", "-n", "terrarun-system", "get", "deployment", "terrarun-apiserver", "-o", "jsonpath={.spec.replicas}")
	if err != nil {
		return err
	}
	pods, err := c.kubectlAs("admin", "-n", "terrarun-system", "get", "pods", "--selector=app.kubernetes.io/name=terrarun-apiserver", "-o", "jsonpath={.items[*].metadata.name}")
	if err != nil {
		return err
	}
	if got := len(strings.Fields(pods)); strconv.Itoa(got) != strings.TrimSpace(want) {
		return fmt.Errorf("%d pods of terrarun-apiserver, want its %s replicas: the old ones are still terminating", got, want)
	}
	return nil
}

// helmTemplate renders charts/terrarun into terrarun-system.
func (c *cluster) helmTemplate(args ...string) (string, error) {
	cmd := exec.Command(c.helm, append([]string{"template", "terrarun", harness.RepoPath("charts", "terrarun"), "--namespace", "terrarun-system"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm template %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
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
	return c.kubectlWith(c.kubeconfigs[user], "as "+user, stdin, args...)
}

// kubectlWith runs kubectl with kubeconfig, who naming its user in errors.
func (c *cluster) kubectlWith(kubeconfig, who, stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s (%s): %v: %s%s", strings.Join(args, " "), who, err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}
