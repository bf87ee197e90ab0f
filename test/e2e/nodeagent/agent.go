package nodeagent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

const (
	// HeartbeatInterval is how often the Node's Ready condition and its
	// Lease are renewed.
	HeartbeatInterval = 10 * time.Second
	// leaseDuration is the Lease's leaseDurationSeconds (the kubelet's 40s).
	leaseDuration   = 40
	leaseNamespace  = corev1.NamespaceNodeLease
	defaultSchedule = corev1.DefaultSchedulerName
	workers         = 2
)

// Options configure an Agent.
type Options struct {
	// NodeName is the Node's name.
	NodeName string
	// Address is the node's InternalIP, its pods' IP, and where the kubelet
	// endpoint listens.
	Address string
	// Port is the kubelet endpoint's HTTPS port (e.g. 10250). 0 picks a free
	// one, which the Node then advertises.
	Port int
	// Client talks to kube-apiserver with enough rights for a kubelet and for
	// binding pods: nodes, nodes/status, leases in kube-node-lease, pods,
	// pods/status, pods/binding, secrets, configmaps, serviceaccounts/token
	// and endpointslices (read).
	Client kubernetes.Interface
	// RootDir holds one directory per pod, <namespace>_<name>_<uid>.
	RootDir string
	// Images maps images to local binaries (see the package documentation).
	Images map[string]string
	// PathDirs are put first on containers' PATH (the engine's directory).
	PathDirs []string
	// Env ("NAME=value") is added to every container's environment, after
	// the defaults and before the container's envFrom and env. When it sets
	// KUBERNETES_SERVICE_HOST, the kubernetes Service's endpoint is not looked
	// up.
	Env []string
	// ServingCert and ServingKey are PEM files of the kubelet endpoint's
	// serving certificate (its SANs should include Address). Both empty: a
	// self-signed certificate is made.
	ServingCert, ServingKey string
	// ClientCAFile, when set, verifies client certificates, which the
	// containerLogs endpoint then requires (kube-apiserver presents its
	// --kubelet-client-certificate).
	ClientCAFile string
	// Scheduled says that a scheduler (kube-scheduler) binds pods to nodes:
	// the agent then binds none and runs those bound to its node. Several
	// agents, each its own node, need it.
	Scheduled bool
	// Logf logs what the agent does. Default: klog at verbosity 2.
	Logf func(format string, args ...any)
}

// Agent is a test-only node agent. See the package documentation.
type Agent struct {
	o        Options
	client   kubernetes.Interface
	staging  string
	pathDirs []string
	hostPath string
	tls      *tls.Config
	version  string

	heartbeat time.Duration
	ready     chan struct{}
	started   sync.Once
	port      int // set before ready is closed

	// Set by Run before any worker starts.
	ctx     context.Context
	spawner *spawner
	queue   workqueue.TypedRateLimitingInterface[string]
	lister  corelisters.PodLister

	mu      sync.Mutex
	pods    map[string]*podRunner // by namespace/name
	nodeUID types.UID
}

// New checks o and that this process can run containers (root, private mount
// namespaces), and returns an Agent to Run.
func New(o Options) (*Agent, error) {
	switch {
	case o.NodeName == "":
		return nil, errors.New("nodeagent: no node name")
	case net.ParseIP(o.Address) == nil:
		return nil, fmt.Errorf("nodeagent: address %q is not an IP address", o.Address)
	case o.Port < 0 || o.Port > 65535:
		return nil, fmt.Errorf("nodeagent: port %d is out of range", o.Port)
	case o.Client == nil:
		return nil, errors.New("nodeagent: no client")
	case o.RootDir == "":
		return nil, errors.New("nodeagent: no root directory")
	case (o.ServingCert == "") != (o.ServingKey == ""):
		return nil, errors.New("nodeagent: give both a serving certificate and its key, or neither")
	}
	a := &Agent{
		o:         o,
		client:    o.Client,
		staging:   DefaultStagingDir,
		heartbeat: HeartbeatInterval,
		ready:     make(chan struct{}),
		pods:      map[string]*podRunner{},
		version:   kubeVersion(),
		hostPath:  os.Getenv("PATH"),
	}
	if a.hostPath == "" {
		a.hostPath = defaultPath
	}
	if a.o.Logf == nil {
		a.o.Logf = func(format string, args ...any) { klog.V(2).Infof(format, args...) }
	}
	root, err := filepath.Abs(o.RootDir)
	if err != nil {
		return nil, fmt.Errorf("nodeagent: root directory: %w", err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("nodeagent: root directory: %w", err)
	}
	a.o.RootDir = root
	a.o.Images = map[string]string{}
	for image, bin := range o.Images {
		abs, err := filepath.Abs(bin)
		if err != nil || !isExecutable(abs) {
			return nil, fmt.Errorf("nodeagent: image %s: %s is not an executable file", image, bin)
		}
		a.o.Images[image] = abs
	}
	for _, kv := range o.Env {
		if name, _, ok := strings.Cut(kv, "="); !ok || name == "" {
			return nil, fmt.Errorf("nodeagent: env %q is not NAME=value", kv)
		}
	}
	for _, dir := range o.PathDirs {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, fmt.Errorf("nodeagent: PATH directory %s: %w", dir, err)
		}
		if st, err := os.Stat(abs); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("nodeagent: PATH directory %s is not a directory", dir)
		}
		a.pathDirs = append(a.pathDirs, abs)
	}
	if under(a.staging, a.o.RootDir) {
		return nil, fmt.Errorf("nodeagent: the root directory %s must not contain the staging directory %s", a.o.RootDir, a.staging)
	}
	if err := os.MkdirAll(a.staging, 0o755); err != nil {
		return nil, fmt.Errorf("nodeagent: staging directory: %w", err)
	}
	if err := probeMountNamespaces(a.staging, a.o.RootDir); err != nil {
		return nil, err
	}
	if a.tls, err = a.tlsConfig(); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *Agent) logf(format string, args ...any) { a.o.Logf(format, args...) }

// Ready is closed once Run has registered the Node and sees pods.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Port is the kubelet endpoint's port once Ready is closed, 0 before.
func (a *Agent) Port() int {
	select {
	case <-a.ready:
		return a.port
	default:
		return 0
	}
}

// Run registers the Node, keeps its Ready condition and Lease fresh, binds
// unscheduled pods to it, runs the pods bound to it, and serves the kubelet
// endpoint, until ctx ends. Then it kills every container process, waits for
// them, and returns nil. It returns an error when the kubelet endpoint cannot
// listen or stops serving (having killed every process too). Run may be
// called once.
func (a *Agent) Run(ctx context.Context) error {
	first := false
	a.started.Do(func() { first = true })
	if !first {
		return errors.New("nodeagent: Run called twice")
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.ctx = ctx
	a.spawner = newSpawner()
	defer a.spawner.close() // after killAll

	ln, err := net.Listen("tcp", net.JoinHostPort(a.o.Address, strconv.Itoa(a.o.Port)))
	if err != nil {
		return fmt.Errorf("nodeagent: kubelet endpoint: %w", err)
	}
	a.port = ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: a.Handler(), TLSConfig: a.tls, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(tls.NewListener(ln, a.tls)) }()
	defer func() {
		_ = srv.Close()
		<-serveErr
	}()

	if err := a.register(ctx); err != nil {
		if parent.Err() != nil {
			return nil
		}
		return err
	}

	factory := informers.NewSharedInformerFactory(a.client, 0)
	pods := factory.Core().V1().Pods()
	a.lister = pods.Lister()
	a.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeagent-" + a.o.NodeName},
	)
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			a.queue.Add(key)
		}
	}
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("nodeagent: watching pods: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), pods.Informer().HasSynced) {
		a.queue.ShutDown()
		return nil
	}

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for a.processNext() {
			}
		})
	}
	wg.Go(func() { a.heartbeatLoop(ctx, a.heartbeat) })
	close(a.ready)

	select {
	case <-ctx.Done():
		err = nil
	case err = <-serveErr:
		serveErr <- err
		err = fmt.Errorf("nodeagent: kubelet endpoint: %w", err)
		cancel()
	}
	a.queue.ShutDown()
	wg.Wait()
	a.killAll()
	return err
}

// killAll kills every container process at once and waits for the runners,
// keeping the pod directories.
func (a *Agent) killAll() {
	a.mu.Lock()
	runners := make([]*podRunner, 0, len(a.pods))
	for _, r := range a.pods {
		runners = append(runners, r)
	}
	a.mu.Unlock()
	for _, r := range runners {
		r.kill(false, true)
	}
	for _, r := range runners {
		<-r.finished
	}
}

func (a *Agent) processNext() bool {
	key, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(key)
	if err := a.sync(key); err != nil {
		a.logf("nodeagent: pod %s: %v", key, err)
		a.queue.AddRateLimited(key)
		return true
	}
	a.queue.Forget(key)
	return true
}

// sync acts on the current state of one pod.
func (a *Agent) sync(key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := a.lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		pod, err = nil, nil
	}
	if err != nil {
		return err
	}
	a.mu.Lock()
	r := a.pods[key]
	a.mu.Unlock()

	if r != nil && (pod == nil || pod.UID != r.uid) {
		// Gone for good (deleted with grace 0), or replaced by a namesake: kill
		// what is left. forget requeues the key for the namesake.
		r.kill(false, false)
		return nil
	}
	if pod == nil {
		return nil
	}
	if pod.Spec.NodeName == "" {
		if a.o.Scheduled {
			return nil
		}
		return a.bind(pod)
	}
	if pod.Spec.NodeName != a.o.NodeName {
		return nil
	}
	if pod.DeletionTimestamp != nil {
		if r != nil {
			r.stop(gracePeriod(pod), true, false)
			return nil
		}
		// Nothing runs: finish the deletion.
		err := a.client.CoreV1().Pods(ns).Delete(a.ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting: %w", err)
		}
		_ = os.RemoveAll(a.podDir(pod))
		return nil
	}
	if r != nil {
		r.updateMetadata(a.ctx, pod)
		// The node lifecycle controller marks the pods of a node that went
		// silent not ready; once the node reports again, the kubelet's
		// status manager writes its own view back, and so does the agent.
		want := pod.Status.DeepCopy()
		r.fillStatus(want, time.Now())
		if readyStatus(want) != readyStatus(&pod.Status) {
			go r.updateStatus(a.ctx)
		}
		return nil
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	r = newPodRunner(a, key, pod)
	a.mu.Lock()
	a.pods[key] = r
	a.mu.Unlock()
	a.logf("nodeagent: pod %s: starting", key)
	go r.run()
	return nil
}

// readyStatus is the status of the pod's Ready condition, "" without one.
func readyStatus(s *corev1.PodStatus) corev1.ConditionStatus {
	for _, c := range s.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status
		}
	}
	return ""
}

// forget removes a finished runner, and looks at its pod again.
func (a *Agent) forget(r *podRunner) {
	a.mu.Lock()
	if a.pods[r.key] == r {
		delete(a.pods, r.key)
	}
	a.mu.Unlock()
	if a.ctx.Err() == nil {
		a.queue.Add(r.key)
	}
}

// runner returns the runner of a pod, if any.
func (a *Agent) runner(ns, name string) *podRunner {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pods[ns+"/"+name]
}

// bind binds a pending pod of the default scheduler to the node. There is no
// scheduler: nodeSelector, affinity, tolerations and resources are ignored.
func (a *Agent) bind(pod *corev1.Pod) error {
	if pod.DeletionTimestamp != nil || (pod.Spec.SchedulerName != "" && pod.Spec.SchedulerName != defaultSchedule) {
		return nil
	}
	err := a.client.CoreV1().Pods(pod.Namespace).Bind(a.ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: a.o.NodeName},
	}, metav1.CreateOptions{})
	switch {
	case err == nil:
		a.logf("nodeagent: pod %s/%s: bound to %s", pod.Namespace, pod.Name, a.o.NodeName)
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil
	}
	return fmt.Errorf("binding: %w", err)
}

// register creates or updates the Node and its Lease, retrying until it
// works or ctx ends.
func (a *Agent) register(ctx context.Context) error {
	for {
		err := a.registerOnce(ctx)
		if err == nil {
			return nil
		}
		a.logf("nodeagent: registering node %s: %v (retrying)", a.o.NodeName, err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("nodeagent: registering node %s: %w", a.o.NodeName, err)
		case <-time.After(time.Second):
		}
	}
}

func (a *Agent) registerOnce(ctx context.Context) error {
	nodes := a.client.CoreV1().Nodes()
	want := a.node(time.Now())
	node, err := nodes.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		node, err = nodes.Get(ctx, a.o.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		for k, v := range want.Labels {
			node.Labels[k] = v
		}
		node.Spec.Unschedulable = false
		if node, err = nodes.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	if err != nil {
		return err
	}
	// The status was given on create, but the node may have existed; write it
	// as the kubelet does. Admission and controllers change a new Node
	// (taints), hence the retries.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node.Status = want.Status
		updated, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if latest, gerr := nodes.Get(ctx, a.o.NodeName, metav1.GetOptions{}); gerr == nil {
				node = latest
			}
		}
		if err == nil {
			node = updated
		}
		return err
	})
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.nodeUID = node.UID
	a.mu.Unlock()
	return a.renewLease(ctx)
}

// nodeCapacity is every node's capacity, all of it allocatable.
func nodeCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("2"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
}

// node is the Node as registered: Ready, with the kubelet endpoint.
func (a *Agent) node(now time.Time) *corev1.Node {
	capacity := nodeCapacity()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: a.o.NodeName,
			Labels: map[string]string{
				corev1.LabelHostname:   a.o.NodeName,
				corev1.LabelOSStable:   runtime.GOOS,
				corev1.LabelArchStable: runtime.GOARCH,
			},
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			Phase:       corev1.NodeRunning,
			Conditions:  a.nodeConditions(now),
			// Only InternalIP: kube-apiserver tries Hostname first by default,
			// and the node name does not resolve.
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: a.o.Address}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{
				KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(a.port)},
			},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID:               "terrarun-nodeagent",
				SystemUUID:              a.o.NodeName,
				BootID:                  bootID(),
				KernelVersion:           kernelVersion(),
				OSImage:                 "terrarun test node agent",
				ContainerRuntimeVersion: "nodeagent://" + a.version,
				KubeletVersion:          a.version,
				KubeProxyVersion:        a.version,
				OperatingSystem:         runtime.GOOS,
				Architecture:            runtime.GOARCH,
			},
		},
	}
}

func (a *Agent) nodeConditions(now time.Time) []corev1.NodeCondition {
	t := metav1.Time{Time: now}
	cond := func(typ corev1.NodeConditionType, status corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: status, Reason: reason, Message: msg, LastHeartbeatTime: t, LastTransitionTime: t}
	}
	return []corev1.NodeCondition{
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
		cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "terrarun test node agent is posting ready status"),
	}
}

// heartbeatLoop renews the Node's conditions and the Lease.
func (a *Agent) heartbeatLoop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := a.heartbeatOnce(ctx); err != nil && ctx.Err() == nil {
			a.logf("nodeagent: heartbeat: %v", err)
		}
	}
}

func (a *Agent) heartbeatOnce(ctx context.Context) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := a.client.CoreV1().Nodes().Get(ctx, a.o.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return a.registerOnce(ctx)
		}
		if err != nil {
			return err
		}
		now := metav1.Now()
		fresh := a.nodeConditions(now.Time)
		for i := range fresh {
			for _, old := range node.Status.Conditions {
				if old.Type == fresh[i].Type && old.Status == fresh[i].Status {
					fresh[i].LastTransitionTime = old.LastTransitionTime
				}
			}
		}
		node.Status.Conditions = fresh
		_, err = a.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("node status: %w", err)
	}
	return a.renewLease(ctx)
}

// renewLease creates or renews the node's Lease in kube-node-lease.
func (a *Agent) renewLease(ctx context.Context) error {
	leases := a.client.CoordinationV1().Leases(leaseNamespace)
	now := metav1.NowMicro()
	a.mu.Lock()
	nodeUID := a.nodeUID
	a.mu.Unlock()
	lease, err := leases.Get(ctx, a.o.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: a.o.NodeName, Namespace: leaseNamespace},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(a.o.NodeName),
				LeaseDurationSeconds: ptr.To[int32](leaseDuration),
				RenewTime:            &now,
			},
		}
		if nodeUID != "" {
			lease.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: a.o.NodeName, UID: nodeUID}}
		}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("lease: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	lease.Spec.HolderIdentity = ptr.To(a.o.NodeName)
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](leaseDuration)
	lease.Spec.RenewTime = &now
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	return nil
}

// tlsConfig serves ServingCert (or a self-signed certificate), and verifies
// client certificates against ClientCAFile when given. Certificates are
// verified if given, and required by the containerLogs handler only, so that
// /healthz answers anyone.
func (a *Agent) tlsConfig() (*tls.Config, error) {
	var (
		cert tls.Certificate
		err  error
	)
	if a.o.ServingCert != "" {
		cert, err = tls.LoadX509KeyPair(a.o.ServingCert, a.o.ServingKey)
	} else {
		cert, err = selfSignedCert(a.o.NodeName, a.o.Address)
	}
	if err != nil {
		return nil, fmt.Errorf("nodeagent: serving certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if a.o.ClientCAFile != "" {
		pem, err := os.ReadFile(a.o.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("nodeagent: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("nodeagent: client CA %s has no certificate", a.o.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}

// kubeVersion is the Kubernetes release of the linked client-go (v0.X.Y is
// Kubernetes v1.X.Y), reported as the kubelet version.
func kubeVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "k8s.io/client-go" && strings.HasPrefix(m.Version, "v0.") {
				return "v1." + strings.TrimPrefix(m.Version, "v0.")
			}
		}
	}
	return "v1.37.0"
}

func kernelVersion() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
