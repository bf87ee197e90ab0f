package nodeagent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

const (
	// prepareRetry is how often a pod whose volumes or environment cannot be
	// made yet (a missing Secret, say) is retried, as the kubelet keeps
	// retrying a pod in ContainerCreating.
	prepareRetry = 2 * time.Second
	// defaultGracePeriod is the API's default terminationGracePeriodSeconds.
	defaultGracePeriod = 30 * time.Second
	// maxTerminationMessage is the kubelet's limit on termination messages.
	maxTerminationMessage = 4096
	// tokenRetry is how soon a failed token refresh is retried.
	tokenRetry = 10 * time.Second
	// The kubelet's crash-loop back-off: a container that exits is restarted
	// at once the first time, then after 10s, doubling up to 5 minutes; one
	// that ran for 10 minutes starts over.
	restartBackoffInitial = 10 * time.Second
	restartBackoffMax     = 5 * time.Minute
	restartBackoffReset   = 10 * time.Minute
)

// podRunner runs one pod bound to the node, from its first sight to its
// deletion.
type podRunner struct {
	a   *Agent
	key string
	uid types.UID
	pod *corev1.Pod // as first seen; the spec is immutable
	dir string
	// claimDirs are the node paths of the pod's persistentVolumeClaim
	// volumes, by volume name, once prepare has found their volumes.
	claimDirs map[string]string

	stopCh   chan struct{} // closed when the pod must stop
	killCh   chan struct{} // closed when it must stop now
	done     chan struct{} // closed when no process of the pod runs any more, nor will
	finished chan struct{} // closed when the runner is gone from the agent
	stopOnce sync.Once
	killOnce sync.Once

	// metaMu guards labels and annotations: the pod's as last seen (nil
	// until they change from r.pod's).
	metaMu      sync.Mutex
	labels      map[string]string
	annotations map[string]string

	mu         sync.Mutex
	inits      []*container // init containers, run one after the other first
	containers []*container
	stopping   bool
	ready      bool   // volumes and environment were made (PodReadyToStartContainers)
	waitMsg    string // why the containers are still waiting
	failReason string // a pod the agent cannot run at all: Failed with this
	failMsg    string
	startTime  time.Time
}

// container is one container of the pod and its process.
type container struct {
	spec    corev1.Container
	logPath string
	termLog string

	// init marks an init container: it runs once, to its end, before the
	// containers, and never again.
	init bool

	// under podRunner.mu
	pid        int
	cmd        *exec.Cmd
	running    bool
	terminated bool
	startedAt  time.Time
	finishedAt time.Time
	exitCode   int32
	reason     string
	message    string
	exited     chan struct{} // closed once terminated for good, or once it never will run
	exitOnce   sync.Once
	// Restarts (restartPolicy Always or OnFailure): the count, the last
	// instance's end, when the next starts and the back-off after it.
	restarts  int32
	last      *corev1.ContainerStateTerminated
	restartAt time.Time
	backoff   time.Duration
}

func (c *container) closeExited() { c.exitOnce.Do(func() { close(c.exited) }) }

func newPodRunner(a *Agent, key string, pod *corev1.Pod) *podRunner {
	r := &podRunner{
		a:        a,
		key:      key,
		uid:      pod.UID,
		pod:      pod.DeepCopy(),
		dir:      a.podDir(pod),
		stopCh:   make(chan struct{}),
		killCh:   make(chan struct{}),
		done:     make(chan struct{}),
		finished: make(chan struct{}),
	}
	newContainer := func(c *corev1.Container, init bool) *container {
		return &container{
			spec:    *c.DeepCopy(),
			init:    init,
			logPath: filepath.Join(r.dir, c.Name+".log"),
			termLog: filepath.Join(r.dir, c.Name+".termination-log"),
			exited:  make(chan struct{}),
		}
	}
	for i := range pod.Spec.InitContainers {
		r.inits = append(r.inits, newContainer(&pod.Spec.InitContainers[i], true))
	}
	for i := range pod.Spec.Containers {
		r.containers = append(r.containers, newContainer(&pod.Spec.Containers[i], false))
	}
	return r
}

// all is the pod's init containers, then its containers.
func (r *podRunner) all() []*container {
	return append(append([]*container{}, r.inits...), r.containers...)
}

func (a *Agent) podDir(pod *corev1.Pod) string {
	return filepath.Join(a.o.RootDir, pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
}

func (r *podRunner) container(name string) *container {
	for _, c := range r.all() {
		if c.spec.Name == name {
			return c
		}
	}
	return nil
}

func (r *podRunner) fsGroup() *int64 {
	if sc := r.pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroup
	}
	return nil
}

func (r *podRunner) stopRequested() bool {
	select {
	case <-r.stopCh:
		return true
	default:
		return false
	}
}

// run takes the pod from Pending to Succeeded or Failed.
func (r *podRunner) run() {
	ctx := r.a.ctx
	defer func() {
		r.mu.Lock()
		for _, c := range r.all() {
			c.closeExited()
		}
		r.mu.Unlock()
		close(r.done)
	}()
	r.mu.Lock()
	r.startTime = time.Now()
	r.mu.Unlock()
	if err := os.MkdirAll(r.dir, 0o750); err != nil {
		r.fail("NodeAgentError", fmt.Sprintf("creating the pod directory: %v", err))
		r.updateStatus(ctx)
		return
	}
	if reason, msg := r.unsupported(); reason != "" {
		r.fail(reason, msg)
		r.updateStatus(ctx)
		return
	}
	r.updateStatus(ctx)

	var (
		specs     []*execSpec
		refreshAt time.Time
	)
	for {
		var err error
		specs, refreshAt, err = r.prepare(ctx)
		if err == nil {
			break
		}
		r.a.logf("nodeagent: pod %s: %v (retrying)", r.key, err)
		r.mu.Lock()
		changed := r.waitMsg != err.Error()
		r.waitMsg = err.Error()
		r.mu.Unlock()
		if changed {
			r.updateStatus(ctx)
		}
		select {
		case <-r.stopCh:
			now := time.Now()
			r.mu.Lock()
			for _, c := range r.all() {
				c.terminated, c.exitCode, c.reason = true, 137, "Error"
				c.message = "the pod was deleted before the container started"
				c.startedAt, c.finishedAt = now, now
			}
			r.mu.Unlock()
			r.updateStatus(ctx)
			return
		case <-ctx.Done():
			return
		case <-time.After(prepareRetry):
		}
	}
	r.mu.Lock()
	r.ready = true
	r.waitMsg = ""
	r.mu.Unlock()

	exits := make(chan struct{}, 4*len(r.all()))
	initSpecs, specs := specs[:len(r.inits)], specs[len(r.inits):]
	refreshDone, refreshExited := make(chan struct{}), make(chan struct{})
	if !refreshAt.IsZero() {
		// Stopped and waited for before done is closed: the pod directory may
		// be removed then.
		defer func() {
			close(refreshDone)
			<-refreshExited
		}()
		go func() {
			defer close(refreshExited)
			r.refreshTokens(ctx, refreshAt, refreshDone)
		}()
	}
	// The init containers, one after the other, each to its end: one that
	// fails fails the pod (restartPolicy Never; the agent retries no init
	// container), and the containers never start.
	for i, c := range r.inits {
		r.startContainer(c, initSpecs[i], exits)
		r.updateStatus(ctx)
		select {
		case <-c.exited:
		case <-r.stopCh:
			<-c.exited
		}
		r.mu.Lock()
		failed, stopping := c.exitCode != 0, r.stopping
		r.mu.Unlock()
		if failed || stopping {
			now := time.Now()
			r.mu.Lock()
			for _, c := range r.containers {
				c.terminated, c.exitCode, c.reason = true, 137, "Error"
				c.message = "the pod's init container " + r.inits[i].spec.Name + " did not succeed"
				c.startedAt, c.finishedAt = now, now
				c.closeExited()
			}
			r.mu.Unlock()
			r.updateStatus(ctx)
			return
		}
	}

	for i, c := range r.containers {
		r.startContainer(c, specs[i], exits)
	}
	r.updateStatus(ctx)

	for {
		r.mu.Lock()
		all := true
		var next time.Time // the next restart due
		for _, c := range r.containers {
			all = all && c.terminated
			if !c.restartAt.IsZero() && (next.IsZero() || c.restartAt.Before(next)) {
				next = c.restartAt
			}
		}
		r.mu.Unlock()
		if all {
			break
		}
		var (
			due   <-chan time.Time
			timer *time.Timer
		)
		if !next.IsZero() {
			timer = time.NewTimer(time.Until(next))
			due = timer.C
		}
		select {
		case <-exits:
		case <-due:
			r.restartDue(specs, exits)
		case <-r.stopCh:
			// The running containers got SIGTERM from stop; those waiting to
			// restart never will.
			r.endRestarts()
			for !r.allTerminated() {
				<-exits
			}
		}
		if timer != nil {
			timer.Stop()
		}
		r.updateStatus(ctx)
	}
	r.updateStatus(ctx)
}

func (r *podRunner) allTerminated() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.containers {
		if !c.terminated {
			return false
		}
	}
	return true
}

// restarts says whether container c, which exited with code, runs again.
func (r *podRunner) restarts(c *container, code int32) bool {
	if r.stopping || c.init {
		return false
	}
	switch r.pod.Spec.RestartPolicy {
	case corev1.RestartPolicyAlways:
		return true
	case corev1.RestartPolicyOnFailure:
		return code != 0
	}
	return false
}

// restartDue starts again the containers whose back-off is over.
func (r *podRunner) restartDue(specs []*execSpec, exits chan<- struct{}) {
	r.mu.Lock()
	var due []int
	for i, c := range r.containers {
		if !c.restartAt.IsZero() && !time.Now().Before(c.restartAt) {
			c.restartAt = time.Time{}
			due = append(due, i)
		}
	}
	r.mu.Unlock()
	for _, i := range due {
		r.startContainer(r.containers[i], specs[i], exits)
	}
}

// endRestarts makes the containers waiting to restart terminated for good,
// with their last instance's end, when the pod stops.
func (r *podRunner) endRestarts() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.containers {
		if c.restartAt.IsZero() || c.last == nil {
			continue
		}
		c.restartAt = time.Time{}
		c.terminated = true
		c.exitCode, c.reason, c.message = c.last.ExitCode, c.last.Reason, c.last.Message
		c.startedAt, c.finishedAt = c.last.StartedAt.Time, c.last.FinishedAt.Time
		c.closeExited()
	}
}

// hostname is the pod's host name, as the kubelet gives it: spec.hostname,
// else the pod's name cut to the 63 characters a host name may have.
func (r *podRunner) hostname() string {
	if h := r.pod.Spec.Hostname; h != "" {
		return h
	}
	h := r.pod.Name
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	return h
}

// unsupported returns why the agent cannot run the pod at all.
func (r *podRunner) unsupported() (reason, msg string) {
	spec := &r.pod.Spec
	for _, c := range spec.InitContainers {
		if c.RestartPolicy != nil {
			return "UnsupportedPodSpec", fmt.Sprintf("init container %s: the test node agent does not run sidecar (restartPolicy) init containers", c.Name)
		}
	}
	switch {
	case len(spec.EphemeralContainers) > 0:
		return "UnsupportedPodSpec", "the test node agent does not run ephemeral containers"
	case len(spec.Containers) == 0:
		return "UnsupportedPodSpec", "the pod has no containers"
	}
	for _, v := range spec.Volumes {
		if msg := unsupportedVolume(&v); msg != "" {
			return "UnsupportedVolume", fmt.Sprintf("volume %s: %s", v.Name, msg)
		}
	}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		if _, mapped := r.a.imageBinary(c.Image); !mapped && len(c.Command) == 0 {
			return "ErrImageNeverPull", fmt.Sprintf("container %s: image %q has no local binary in the test node agent and the container has no command", c.Name, c.Image)
		}
	}
	return "", ""
}

// unsupportedVolume says why the agent cannot make v, if it cannot.
func unsupportedVolume(v *corev1.Volume) string {
	downward := func(items []corev1.DownwardAPIVolumeFile) string {
		for _, item := range items {
			if item.FieldRef == nil {
				return fmt.Sprintf("downwardAPI item %s: only fieldRef is supported by the test node agent", item.Path)
			}
		}
		return ""
	}
	switch {
	case v.EmptyDir != nil, v.HostPath != nil, v.Secret != nil, v.ConfigMap != nil, v.PersistentVolumeClaim != nil:
		return ""
	case v.DownwardAPI != nil:
		return downward(v.DownwardAPI.Items)
	case v.Projected != nil:
		for i, src := range v.Projected.Sources {
			switch {
			case src.ServiceAccountToken != nil, src.Secret != nil, src.ConfigMap != nil:
			case src.DownwardAPI != nil:
				if msg := downward(src.DownwardAPI.Items); msg != "" {
					return msg
				}
			default:
				return fmt.Sprintf("projected source %d is not supported by the test node agent (only serviceAccountToken, secret, configMap and downwardAPI are)", i)
			}
		}
		return ""
	}
	return "only emptyDir, hostPath, persistentVolumeClaim, secret, configMap, downwardAPI and projected volumes are supported by the test node agent"
}

func (r *podRunner) fail(reason, msg string) {
	r.a.logf("nodeagent: pod %s: %s: %s", r.key, reason, msg)
	r.mu.Lock()
	r.failReason, r.failMsg = reason, msg
	r.mu.Unlock()
}

// prepare makes the pod's volumes, and the exec spec of each container.
func (r *podRunner) prepare(ctx context.Context) ([]*execSpec, time.Time, error) {
	var refreshAt time.Time
	for i := range r.pod.Spec.Volumes {
		at, err := r.materializeVolume(ctx, &r.pod.Spec.Volumes[i])
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("volume %s: %w", r.pod.Spec.Volumes[i].Name, err)
		}
		if !at.IsZero() && (refreshAt.IsZero() || at.Before(refreshAt)) {
			refreshAt = at
		}
	}
	objs := &objects{ns: r.pod.Namespace, a: r.a}
	var specs []*execSpec
	for _, c := range r.all() {
		spec, err := r.execSpec(ctx, c, objs)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("container %s: %w", c.spec.Name, err)
		}
		specs = append(specs, spec)
	}
	return specs, refreshAt, nil
}

// execSpec describes how the helper starts container c. A command that
// cannot be resolved is not an error but the spec's failure, reported as the
// container's StartError by startContainer, and not retried.
func (r *podRunner) execSpec(ctx context.Context, c *container, objs *objects) (*execSpec, error) {
	a := r.a
	spec := &execSpec{Staging: a.staging, Dir: c.spec.WorkingDir, Hostname: r.hostname()}

	// PathDirs, read-only: a directory that anyone may search as a whole,
	// else its executables one by one (a bind mount's root needs only its own
	// mode to let the container's user in, not its parents').
	var path []string
	for j, dir := range a.pathDirs {
		staged := filepath.Join("path", strconv.Itoa(j))
		path = append(path, filepath.Join(a.staging, staged))
		st, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("PATH directory %s: %w", dir, err)
		}
		if st.Mode()&0o005 == 0o005 {
			spec.Stage = append(spec.Stage, bindSpec{Source: dir, Target: staged, ReadOnly: true})
			continue
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("PATH directory %s: %w", dir, err)
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if isExecutable(p) {
				spec.Stage = append(spec.Stage, bindSpec{Source: p, Target: filepath.Join(staged, e.Name()), File: true, ReadOnly: true})
			}
		}
	}
	path = append(path, a.hostPath)

	env, err := r.containerEnv(ctx, &c.spec, objs, strings.Join(path, ":"))
	if err != nil {
		return nil, err
	}
	spec.Env = env.environ()

	argv, hostPath, stage, containerPath, err := a.resolveCommand(&c.spec, env)
	if err != nil {
		return &execSpec{failure: err.Error()}, nil
	}
	spec.Args = argv
	if stage {
		staged := filepath.Join("bin", filepath.Base(hostPath))
		spec.Stage = append(spec.Stage, bindSpec{Source: hostPath, Target: staged, File: true, ReadOnly: true})
		containerPath = filepath.Join(a.staging, staged)
		if filepath.IsAbs(argv[0]) && filepath.Clean(argv[0]) != hostPath {
			// The command names the binary where its image has it (Tekton's
			// entrypoint, /ko-app/entrypoint, copies itself from there):
			// it is there in the container too.
			spec.Mounts = append(spec.Mounts, bindSpec{Source: containerPath, Target: filepath.Clean(argv[0]), File: true, ReadOnly: true})
		}
	}
	spec.Path = containerPath

	volumes := map[string]*corev1.Volume{}
	for i := range r.pod.Spec.Volumes {
		volumes[r.pod.Spec.Volumes[i].Name] = &r.pod.Spec.Volumes[i]
	}
	for i, m := range c.spec.VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok {
			return nil, fmt.Errorf("volume mount %s: no such volume", m.Name)
		}
		if !filepath.IsAbs(m.MountPath) {
			return nil, fmt.Errorf("volume mount %s: mount path %q is not absolute", m.Name, m.MountPath)
		}
		source := r.volumeSourceDir(v)
		sub := m.SubPath
		if m.SubPathExpr != "" {
			sub = expand(m.SubPathExpr, env.lookup)
		}
		file := false
		if sub != "" {
			source = filepath.Join(source, sub)
			if !under(source, r.volumeSourceDir(v)) {
				return nil, fmt.Errorf("volume mount %s: subPath %q leaves the volume", m.Name, sub)
			}
			st, err := os.Stat(source)
			switch {
			case os.IsNotExist(err):
				if err := os.MkdirAll(source, 0o755); err != nil {
					return nil, err
				}
			case err != nil:
				return nil, err
			default:
				file = !st.IsDir()
			}
		}
		staged := filepath.Join("vol", strconv.Itoa(i))
		spec.Stage = append(spec.Stage, bindSpec{Source: source, Target: staged, File: file, Transient: true})
		spec.Mounts = append(spec.Mounts, bindSpec{
			Source:   filepath.Join(a.staging, staged),
			Target:   filepath.Clean(m.MountPath),
			File:     file,
			ReadOnly: m.ReadOnly || (v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ReadOnly),
		})
	}

	// The termination log, made writable by anyone: the container may run as
	// any user.
	if f, err := os.OpenFile(c.termLog, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o666); err != nil {
		return nil, err
	} else {
		f.Close()
	}
	if err := os.Chmod(c.termLog, 0o666); err != nil {
		return nil, err
	}
	termPath := c.spec.TerminationMessagePath
	if termPath == "" {
		termPath = corev1.TerminationMessagePathDefault
	}
	spec.Stage = append(spec.Stage, bindSpec{Source: c.termLog, Target: "termination-log", File: true, Transient: true})
	spec.Mounts = append(spec.Mounts, bindSpec{Source: filepath.Join(a.staging, "termination-log"), Target: termPath, File: true, Optional: true})

	cred, err := r.credentials(&c.spec)
	if err != nil {
		return nil, err
	}
	spec.Cred = cred
	if sc := c.spec.SecurityContext; sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		spec.NoNewPrivs = true
	}
	return spec, nil
}

// credentials is the identity of container c: runAsUser, runAsGroup (the
// container's over the pod's; 0 when unset, as for an image without USER),
// with fsGroup and supplementalGroups as supplementary groups. Nil means root
// with root's groups.
func (r *podRunner) credentials(c *corev1.Container) (*credSpec, error) {
	var uid, gid *int64
	var nonRoot *bool
	var groups []int
	if sc := r.pod.Spec.SecurityContext; sc != nil {
		uid, gid, nonRoot = sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot
		if sc.FSGroup != nil {
			groups = append(groups, int(*sc.FSGroup))
		}
		for _, g := range sc.SupplementalGroups {
			groups = append(groups, int(g))
		}
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = sc.RunAsGroup
		}
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
	}
	if nonRoot != nil && *nonRoot && (uid == nil || *uid == 0) {
		return nil, fmt.Errorf("container has runAsNonRoot and would run as root (the test node agent has no image user: set runAsUser)")
	}
	if uid == nil && gid == nil && len(groups) == 0 {
		return nil, nil
	}
	return &credSpec{UID: int(ptr.Deref(uid, 0)), GID: int(ptr.Deref(gid, 0)), Groups: append([]int{}, groups...)}, nil
}

// startContainer starts c's process, or records why it could not start.
// exits gets a value when c terminates.
func (r *podRunner) startContainer(c *container, spec *execSpec, exits chan<- struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	terminate := func(code int32, reason, msg string) {
		c.terminated, c.running = true, false
		c.exitCode, c.reason, c.message = code, reason, msg
		c.startedAt, c.finishedAt = now, now
		c.closeExited()
		exits <- struct{}{}
	}
	if r.stopping {
		terminate(137, "Error", "the pod was deleted before the container started")
		return
	}
	if spec.failure != "" {
		terminate(helperExitCode, "StartError", spec.failure)
		return
	}
	out, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		terminate(helperExitCode, "StartError", fmt.Sprintf("opening the log: %v", err))
		return
	}
	defer out.Close()
	cmd, startErr, err := startHelper(r.a.spawner, spec, filepath.Join(r.dir, c.spec.Name+".exec.json"), out)
	if err != nil {
		terminate(helperExitCode, "StartError", err.Error())
		return
	}
	c.cmd, c.pid = cmd, cmd.Process.Pid
	if startErr != nil {
		// The helper is exiting on its own.
		_ = cmd.Wait()
		terminate(helperExitCode, "StartError", startErr.Error())
		return
	}
	c.running, c.startedAt = true, now
	r.a.logf("nodeagent: pod %s: container %s started, pid %d", r.key, c.spec.Name, c.pid)
	go func() {
		err := cmd.Wait()
		code := exitCode(cmd, err)
		// Whatever the command left behind in its process group goes with it,
		// as with a container's PID namespace.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		msg := readTerminationMessage(c)
		r.mu.Lock()
		c.running = false
		c.exitCode, c.finishedAt = code, time.Now()
		c.reason, c.message = "Completed", msg
		if code != 0 {
			c.reason = "Error"
		}
		restart := r.restarts(c, code)
		if restart {
			c.last = &corev1.ContainerStateTerminated{
				ExitCode: code, Reason: c.reason, Message: msg,
				StartedAt: metav1.Time{Time: c.startedAt}, FinishedAt: metav1.Time{Time: c.finishedAt},
				ContainerID: fmt.Sprintf("nodeagent://%s-%s-%d", r.uid, c.spec.Name, c.pid),
			}
			if c.finishedAt.Sub(c.startedAt) >= restartBackoffReset {
				c.backoff = 0
			}
			c.restarts++
			c.restartAt = c.finishedAt.Add(c.backoff)
			c.backoff = min(max(2*c.backoff, restartBackoffInitial), restartBackoffMax)
		} else {
			c.terminated = true
			c.closeExited()
		}
		r.mu.Unlock()
		r.a.logf("nodeagent: pod %s: container %s exited with %d (restarting: %v)", r.key, c.spec.Name, code, restart)
		exits <- struct{}{}
	}()
}

func exitCode(cmd *exec.Cmd, err error) int32 {
	if cmd.ProcessState == nil {
		return 1
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		if ws.Signaled() {
			return 128 + int32(ws.Signal())
		}
		return int32(ws.ExitStatus())
	}
	if err != nil {
		return 1
	}
	return 0
}

// readTerminationMessage reads what the container wrote to its termination
// message path, or for FallbackToLogsOnError after a failure, the log's tail.
func readTerminationMessage(c *container) string {
	b, _ := os.ReadFile(c.termLog)
	if len(b) > maxTerminationMessage {
		b = b[:maxTerminationMessage]
	}
	if len(b) > 0 || c.spec.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		return string(b)
	}
	log, _ := os.ReadFile(c.logPath)
	lines := strings.Split(strings.TrimRight(string(log), "\n"), "\n")
	if len(lines) > 80 {
		lines = lines[len(lines)-80:]
	}
	s := strings.Join(lines, "\n")
	if len(s) > 2048 {
		s = s[len(s)-2048:]
	}
	return s
}

// refreshTokens rewrites the projected volumes with tokens at 80% of the
// tokens' lifetime until done is closed.
func (r *podRunner) refreshTokens(ctx context.Context, at time.Time, done <-chan struct{}) {
	for {
		t := time.NewTimer(time.Until(at))
		select {
		case <-done:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		next := time.Time{}
		var failed error
		for i := range r.pod.Spec.Volumes {
			v := &r.pod.Spec.Volumes[i]
			if v.Projected == nil || !hasToken(v.Projected) {
				continue
			}
			refresh, err := r.materializeVolume(ctx, v)
			if err != nil {
				failed = err
				continue
			}
			if next.IsZero() || refresh.Before(next) {
				next = refresh
			}
		}
		if failed != nil {
			r.a.logf("nodeagent: pod %s: refreshing tokens: %v", r.key, failed)
			next = time.Now().Add(tokenRetry)
		}
		at = next
	}
}

func hasToken(p *corev1.ProjectedVolumeSource) bool {
	for _, s := range p.Sources {
		if s.ServiceAccountToken != nil {
			return true
		}
	}
	return false
}

// stop asks the pod to stop: SIGTERM to each container's main process (as a
// runtime signals a container's PID 1), SIGKILL to their process groups after
// grace. Once nothing runs, deleteObject deletes the pod object for good
// (grace 0, as the kubelet does once its containers are gone), and the pod
// directory is removed unless keepDir. Calls after the first can only make
// things faster (kill).
func (r *podRunner) stop(grace time.Duration, deleteObject, keepDir bool) {
	r.stopOnce.Do(func() {
		r.mu.Lock()
		r.stopping = true
		close(r.stopCh)
		for _, c := range r.all() {
			if c.running && c.cmd != nil {
				_ = c.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
		r.mu.Unlock()
		go r.terminate(grace, deleteObject, keepDir)
	})
}

// kill stops the pod at once.
func (r *podRunner) kill(deleteObject, keepDir bool) {
	r.killOnce.Do(func() { close(r.killCh) })
	r.stop(0, deleteObject, keepDir)
}

func (r *podRunner) terminate(grace time.Duration, deleteObject, keepDir bool) {
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-r.done:
	case <-timer.C:
	case <-r.killCh:
	}
	select {
	case <-r.done:
	default:
		r.mu.Lock()
		for _, c := range r.all() {
			if c.running && c.cmd != nil {
				_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			}
		}
		r.mu.Unlock()
		<-r.done
	}
	ctx := r.a.ctx
	if deleteObject && ctx.Err() == nil {
		err := r.a.client.CoreV1().Pods(r.pod.Namespace).Delete(ctx, r.pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      &metav1.Preconditions{UID: &r.uid},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			r.a.logf("nodeagent: pod %s: deleting: %v", r.key, err)
		}
	}
	if !keepDir {
		if err := os.RemoveAll(r.dir); err != nil {
			r.a.logf("nodeagent: pod %s: removing %s: %v", r.key, r.dir, err)
		}
	}
	r.a.forget(r)
	close(r.finished)
}

// gracePeriod is how long a deleted pod's containers have after SIGTERM.
func gracePeriod(pod *corev1.Pod) time.Duration {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return defaultGracePeriod
}

// updateStatus writes the runner's view of the pod to its status.
func (r *podRunner) updateStatus(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := r.a.client.CoreV1().Pods(r.pod.Namespace).Get(ctx, r.pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.UID != r.uid {
			return nil
		}
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			// Terminal phases are final.
			return nil
		}
		r.fillStatus(&pod.Status, time.Now())
		_, err = r.a.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		r.a.logf("nodeagent: pod %s: updating status: %v", r.key, err)
	}
}

// fillStatus sets the fields of status that the node owns.
func (r *podRunner) fillStatus(status *corev1.PodStatus, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.a
	status.HostIP = a.o.Address
	status.HostIPs = []corev1.HostIP{{IP: a.o.Address}}
	if status.StartTime == nil {
		status.StartTime = &metav1.Time{Time: r.startTime}
	}

	initialized, initFailed := true, false
	var initStatuses []corev1.ContainerStatus
	for _, c := range r.inits {
		initStatuses = append(initStatuses, r.containerStatus(c, "PodInitializing"))
		initialized = initialized && c.terminated && c.exitCode == 0
		initFailed = initFailed || c.terminated && c.exitCode != 0
	}
	status.InitContainerStatuses = initStatuses
	waiting := "ContainerCreating"
	if !initialized && r.ready {
		waiting = "PodInitializing"
	}
	var statuses []corev1.ContainerStatus
	running, terminated, failed, restarting := 0, 0, 0, 0
	for _, c := range r.containers {
		cs := r.containerStatus(c, waiting)
		switch {
		case c.terminated:
			terminated++
			if c.exitCode != 0 {
				failed++
			}
		case c.running:
			running++
		case !c.restartAt.IsZero():
			restarting++
		}
		statuses = append(statuses, cs)
	}
	status.ContainerStatuses = statuses

	phase := corev1.PodPending
	switch {
	case r.failReason != "":
		phase = corev1.PodFailed
		status.Reason, status.Message = r.failReason, r.failMsg
	case initFailed:
		phase = corev1.PodFailed
	case terminated == len(r.containers) && failed == 0:
		phase = corev1.PodSucceeded
	case terminated == len(r.containers):
		phase = corev1.PodFailed
	case running > 0 || terminated > 0 || restarting > 0:
		phase = corev1.PodRunning
	}
	status.Phase = phase
	if r.ready {
		status.PodIP = a.o.Address
		status.PodIPs = []corev1.PodIP{{IP: a.o.Address}}
	}

	allReady := running == len(r.containers)
	notReady := "ContainersNotReady"
	if phase == corev1.PodSucceeded || phase == corev1.PodFailed {
		notReady = "PodCompleted"
	}
	cond := func(t corev1.PodConditionType, ok bool, reason string) {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: reason}
		if ok {
			c.Status, c.Reason = corev1.ConditionTrue, ""
		}
		setCondition(&status.Conditions, c, now)
	}
	cond(corev1.PodScheduled, true, "")
	cond(corev1.PodReadyToStartContainers, r.ready && phase != corev1.PodSucceeded && phase != corev1.PodFailed, "")
	cond(corev1.PodInitialized, initialized, "ContainersNotInitialized")
	cond(corev1.ContainersReady, allReady, notReady)
	cond(corev1.PodReady, allReady, notReady)
}

// containerStatus is c's status, with waiting as the reason of a container
// that waits to be created.
func (r *podRunner) containerStatus(c *container, waiting string) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{
		Name:         c.spec.Name,
		Image:        c.spec.Image,
		ImageID:      "nodeagent://" + c.spec.Image,
		Ready:        c.running,
		Started:      ptr.To(c.running),
		RestartCount: c.restarts,
	}
	if c.last != nil {
		cs.LastTerminationState.Terminated = c.last.DeepCopy()
	}
	if c.pid != 0 {
		cs.ContainerID = fmt.Sprintf("nodeagent://%s-%s-%d", r.uid, c.spec.Name, c.pid)
	}
	switch {
	case c.terminated:
		cs.State.Terminated = &corev1.ContainerStateTerminated{
			ExitCode:    c.exitCode,
			Reason:      c.reason,
			Message:     c.message,
			StartedAt:   metav1.Time{Time: c.startedAt},
			FinishedAt:  metav1.Time{Time: c.finishedAt},
			ContainerID: cs.ContainerID,
		}
	case c.running:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: c.startedAt}}
	case !c.restartAt.IsZero():
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", time.Until(c.restartAt).Round(time.Second), c.spec.Name, r.pod.Name)}
	default:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: waiting, Message: r.waitMsg}
		if r.failReason != "" {
			cs.State.Waiting.Reason, cs.State.Waiting.Message = r.failReason, r.failMsg
		}
	}
	return cs
}

// setCondition replaces or adds c, keeping the transition time when the
// status does not change.
func setCondition(conds *[]corev1.PodCondition, c corev1.PodCondition, now time.Time) {
	for i := range *conds {
		old := &(*conds)[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		} else {
			c.LastTransitionTime = metav1.Time{Time: now}
		}
		*old = c
		return
	}
	c.LastTransitionTime = metav1.Time{Time: now}
	*conds = append(*conds, c)
}
