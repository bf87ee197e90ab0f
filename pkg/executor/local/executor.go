package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/sandbox"
	"github.com/terrarun/terrarun/pkg/stagelimits"
)

const (
	// deadlineGrace is how long a stage past its deadline gets between SIGTERM and SIGKILL.
	deadlineGrace = 30 * time.Second
	// forgetGrace is how long a stage of a deleted run gets between SIGTERM and SIGKILL.
	forgetGrace = 10 * time.Second
	// logTailBytes of a stage's output are kept in the message of a failed execution.
	logTailBytes = 2048
	// outputWaitDelay bounds the wait for a stage's output pipe to close
	// once its process has exited.
	outputWaitDelay = 5 * time.Second
	// persistFor bounds the retries of recording a final state in etcd.
	persistFor = 5 * time.Minute
	// cleanupTimeout bounds etcd writes that must happen even when the caller's context ended.
	cleanupTimeout = 10 * time.Second
)

// Options configure the local executor.
type Options struct {
	// ExecutorBinary is the path of terrarun-executor (a bare name is looked up on PATH).
	ExecutorBinary string
	// WorkRoot is the private root of the per-execution work directories,
	// e.g. <data-dir>/work. It is created with mode 0700.
	WorkRoot string
	// StateRoot is the root of the default (local) backend: <data-dir>/state.
	StateRoot string
	// PluginCacheRoot, when set, is the root of the provider plugin caches:
	// <PluginCacheRoot>/<namespace>/<creator> is the TF_PLUGIN_CACHE_DIR of
	// the runs of one creator in a namespace, shared by them and only them
	// (<creator> is a digest of the creator's user name). Empty: no cache.
	PluginCacheRoot string
	// ValuesRoot is the standalone stand-in for Secrets and ConfigMaps:
	// <ValuesRoot>/<namespace>/{secrets,configmaps}/<name>/<key> files. It is
	// used when ValueSource is nil.
	ValuesRoot string
	// ServerURL is where the executor reaches the API.
	ServerURL string
	// CAFile is the CA of the API's serving certificate.
	CAFile string
	// Etcd records executions: one active execution per run, stage and
	// attempt, across replicas and restarts.
	Etcd *clientv3.Client
	// EtcdPrefix is the key prefix of the records; defaultEtcdPrefix when empty.
	EtcdPrefix string
	// Env is extra environment for the children (KEY=VALUE), e.g. a PATH that
	// holds the engine. It must never hold secrets.
	Env []string
	// ValueSource resolves Secret and ConfigMap keys; FileValues{ValuesRoot} when nil.
	ValueSource ValueSource
	// Sandbox says how stages are isolated from the host and from each other.
	Sandbox SandboxOptions
	// Limits bound what each stage takes of the host (package stagelimits),
	// and LimitFlags name the settings of each, for messages.
	Limits     stagelimits.Limits
	LimitFlags stagelimits.Flags
}

// SandboxOptions say how stages are isolated (package sandbox). A sandboxed
// stage sees the system's programs and libraries, the directories on its PATH
// and the engine read-only, and only its own work directory and its
// workspace's state directory read-write: not the server's PKI, etcd's data,
// values, or other runs' work directories and state. All of its processes,
// daemons included, end with it.
type SandboxOptions struct {
	// Disabled runs stages as plain child processes of the server, as its
	// user, with the whole host in reach.
	Disabled bool
	// UID and GID are the user stages run as when the server runs as root.
	// Without root, stages run as the server's own user, in a user namespace.
	UID, GID uint32
	// Hidden are directories no stage may see, even where a directory it may
	// see contains them: the server's data directory. WorkRoot, StateRoot,
	// ValuesRoot and the directory of CAFile are always hidden.
	Hidden []string
	// Mounts are further host paths every stage sees, such as a provider
	// mirror or a plugin cache.
	Mounts []sandbox.Mount
}

// Executor is the local executor. It implements executor.Executor.
type Executor struct {
	opts   Options
	prefix string
	holder string
	env    []string
	values ValueSource
	tokens *Tokens
	// engines knows the engines' versions, for the stages.
	engines *engineVersions
	// limits makes each stage's cgroups.
	limits *stagelimits.Controller
	// notify is the Notifier of Run, while it runs.
	notify atomic.Pointer[executor.Notifier]

	spawn chan spawnRequest
	quit  chan struct{}

	mu     sync.Mutex
	procs  map[string]*proc
	closed bool
	// created is when New ran: work directories older than it that no
	// process of this instance uses were left by a previous server.
	created time.Time
}

var _ executor.Executor = (*Executor)(nil)

// New returns a local executor. It creates WorkRoot, StateRoot and
// PluginCacheRoot (0700).
func New(opts Options) (*Executor, error) {
	if opts.Etcd == nil {
		return nil, errors.New("local executor: an etcd client is required")
	}
	if opts.ExecutorBinary == "" {
		return nil, errors.New("local executor: the path of terrarun-executor is required")
	}
	bin, err := exec.LookPath(opts.ExecutorBinary)
	if err != nil {
		return nil, fmt.Errorf("local executor: terrarun-executor: %w", err)
	}
	if opts.ExecutorBinary, err = filepath.Abs(bin); err != nil {
		return nil, err
	}
	if opts.ServerURL == "" {
		return nil, errors.New("local executor: the API server URL is required")
	}
	for _, d := range []struct {
		name     string
		path     *string
		optional bool
	}{{"work root", &opts.WorkRoot, false}, {"state root", &opts.StateRoot, false}, {"plugin cache root", &opts.PluginCacheRoot, true}} {
		if *d.path == "" && d.optional {
			continue
		}
		if *d.path == "" {
			return nil, fmt.Errorf("local executor: a %s is required", d.name)
		}
		if *d.path, err = filepath.Abs(*d.path); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(*d.path, 0o700); err != nil {
			return nil, fmt.Errorf("local executor: creating the %s: %w", d.name, err)
		}
		if err := checkPrivate(*d.path); err != nil {
			return nil, fmt.Errorf("local executor: the %s: %w", d.name, err)
		}
	}
	if opts.CAFile != "" {
		if opts.CAFile, err = filepath.Abs(opts.CAFile); err != nil {
			return nil, err
		}
	}
	values := opts.ValueSource
	if values == nil {
		if opts.ValuesRoot == "" {
			return nil, errors.New("local executor: a values root or a ValueSource is required")
		}
		root, err := filepath.Abs(opts.ValuesRoot)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(root, 0o700); err != nil {
			return nil, fmt.Errorf("local executor: creating the values root: %w", err)
		}
		values = FileValues{Root: root}
	}
	prefix := opts.EtcdPrefix
	if prefix == "" {
		prefix = defaultEtcdPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	env, err := childEnv(opts.Env)
	if err != nil {
		return nil, err
	}
	var h [16]byte
	if _, err := rand.Read(h[:]); err != nil {
		return nil, err
	}
	e := &Executor{
		opts:   opts,
		prefix: prefix,
		holder: hex.EncodeToString(h[:]),
		env:    env,
		values: values,
		tokens: newTokens(),
		// childEnv puts PATH first.
		engines: &engineVersions{path: strings.TrimPrefix(env[0], "PATH="), byPath: map[string]engineEntry{}},
		spawn:   make(chan spawnRequest),
		quit:    make(chan struct{}),
		procs:   map[string]*proc{},
		limits:  stagelimits.New(opts.Limits, opts.LimitFlags),

		created: time.Now(),
	}
	klog.InfoS("Local stage limits", "enforcement", e.limits.Enforcement())
	if !opts.Sandbox.Disabled {
		if os.Getuid() == 0 && (opts.Sandbox.UID == 0 || opts.Sandbox.GID == 0) {
			return nil, errors.New("local executor: sandboxed stages may not run as root or in group root: choose another uid and gid")
		}
		if err := e.checkSandbox(); err != nil {
			return nil, err
		}
	}
	go e.spawnLoop()
	return e, nil
}

// checkPrivate fails unless dir is a directory of this process's user that
// no other user may write to: not one another user created in a shared
// directory such as /tmp, to read or swap what stages leave in it.
func checkPrivate(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	case ok && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s belongs to uid %d, not to this server's uid %d: remove it, or choose another directory", dir, st.Uid, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by other users (mode %v): chmod go-w it", dir, fi.Mode().Perm())
	}
	return nil
}

// Tokens is the per-stage token authority: the server's token authenticator
// and auth.Resolver in local mode.
func (e *Executor) Tokens() *Tokens { return e.tokens }

// Name implements executor.Executor.
func (e *Executor) Name(ex executor.Execution) string {
	return processName(ex.Run.Namespace, ex.Run.Name, ex.Stage, ex.Attempt)
}

// processName is the deterministic name of an execution: <namespace>.<run>.<stage>.<attempt>.
func processName(namespace, name string, stageName v1alpha1.StageName, attempt int32) string {
	return fmt.Sprintf("%s.%s.%s.%d", namespace, name, stageName, attempt)
}

func identityOf(ex executor.Execution) (executor.Identity, error) {
	if ex.Run == nil {
		return executor.Identity{}, errors.New("execution without a run")
	}
	id := executor.Identity{
		Namespace: ex.Run.Namespace,
		Name:      ex.Run.Name,
		UID:       string(ex.Run.UID),
		Stage:     ex.Stage,
		Attempt:   ex.Attempt,
	}
	if err := validIdentity(id); err != nil {
		return id, err
	}
	for _, s := range []string{id.Namespace, id.Name, id.UID} {
		if !safeSegment(s) {
			return id, fmt.Errorf("invalid run %s/%s (uid %q)", id.Namespace, id.Name, id.UID)
		}
	}
	return id, nil
}

// safeSegment says whether s is usable as one path segment and key segment.
func safeSegment(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\\\x00")
}

func (e *Executor) workDir(id executor.Identity) string {
	return filepath.Join(e.opts.WorkRoot, id.Namespace, id.Name, id.UID, fmt.Sprintf("%s-%d", id.Stage, id.Attempt))
}

// Start implements executor.Executor. It records the execution in etcd with a
// create-if-absent transaction, and only when that creates the record does it
// prepare the work directory and start the process. When the record exists
// already (this instance runs it, another replica does, or a previous server
// did), Start returns the name and starts nothing.
//
// When the work directory cannot be prepared (for example a Secret is
// missing) or the process cannot be started, Start removes the record again
// and returns the error: nothing ran, and a later Start may succeed. A record
// of this instance's own that it provably never started a process for (the
// removal failed, or the client saw an error for a transaction that did
// commit) is taken over by the next Start.
func (e *Executor) Start(ctx context.Context, ex executor.Execution) (string, error) {
	id, err := identityOf(ex)
	if err != nil {
		return "", err
	}
	name := processName(id.Namespace, id.Name, id.Stage, id.Attempt)
	key := e.key(id)

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return "", errors.New("local executor is shut down")
	}
	if _, ok := e.procs[key]; ok {
		e.mu.Unlock()
		return name, nil // adopt our own
	}
	now := time.Now()
	p := &proc{
		key:    key,
		name:   name,
		dir:    e.workDir(id),
		id:     id,
		exited: make(chan struct{}),
		status: executor.Status{State: executor.StateRunning, Name: name, StartTime: &now},
	}
	e.procs[key] = p
	e.mu.Unlock()

	started := false
	defer func() {
		if started {
			return
		}
		e.mu.Lock()
		if e.procs[key] == p {
			delete(e.procs, key)
		}
		p.done = true
		close(p.exited)
		e.mu.Unlock()
	}()

	rec := record{Name: name, State: executor.StateRunning, Holder: e.holder, StartTime: &now}
	claimed, err := e.claim(ctx, p, rec)
	if err != nil {
		return "", err
	}
	if !claimed {
		return name, nil // recorded already: adopted, never started twice
	}

	cmd, err := e.prepare(ctx, p, ex)
	if err == nil {
		e.mu.Lock()
		switch {
		case p.forgotten:
			err = errors.New("the run was deleted")
		case e.closed:
			err = errors.New("local executor is shut down")
		}
		e.mu.Unlock()
	}
	if err == nil {
		errc := make(chan error, 1)
		select {
		case e.spawn <- spawnRequest{cmd: cmd, errc: errc}:
			err = <-errc
		case <-e.quit:
			err = errors.New("local executor is shut down")
		}
		if err != nil {
			err = fmt.Errorf("starting %s: %w", e.opts.ExecutorBinary, err)
		}
	}
	// The child has its own descriptors.
	if cmd != nil {
		for _, f := range cmd.ExtraFiles {
			f.Close()
		}
	}
	if err != nil {
		e.tokens.Revoke(id)
		e.removeWorkDir(p)
		if p.cgroup != nil {
			if derr := p.cgroup.Delete(); derr != nil {
				klog.ErrorS(derr, "Removing the cgroups of a stage that did not start", "execution", name)
			}
		}
		e.release(ctx, p)
		return "", fmt.Errorf("execution %s: %w", name, err)
	}

	started = true
	e.mu.Lock()
	p.cmd = cmd
	timeout := executor.ExecutionTimeout(ex.Run, ex.Stage)
	p.deadline = time.AfterFunc(timeout, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.stopLocked(p, deadlineGrace, executor.ReasonDeadlineExceeded)
	})
	if p.pendingStop != nil {
		grace := *p.pendingStop
		p.pendingStop = nil
		e.stopLocked(p, grace, executor.ReasonCanceled)
	}
	e.mu.Unlock()

	klog.V(2).InfoS("Started a stage", "execution", name, "pid", cmd.Process.Pid)

	if p.cgroup != nil && e.opts.Sandbox.Disabled {
		// Unsandboxed, the stage joins its cgroups once started; what it
		// forked before then is not in them.
		if err := p.cgroup.Add(cmd.Process.Pid); err != nil {
			klog.ErrorS(err, "Moving an unsandboxed stage into its cgroups", "execution", name)
		}
	}
	go e.watchBudget(p)
	go e.wait(p)
	return name, nil
}

// Status implements executor.Status: the in-memory state of a process of this
// instance, else the etcd record. A final record is returned as is; a record
// still Running that this instance does not run is StateUnknown with reason
// ExecutorLost; no record (or a record of this instance whose process never
// started) is StateUnknown with reason NotStarted.
func (e *Executor) Status(ctx context.Context, ex executor.Execution) (executor.Status, error) {
	id, err := identityOf(ex)
	if err != nil {
		return executor.Status{}, err
	}
	name := processName(id.Namespace, id.Name, id.Stage, id.Attempt)
	key := e.key(id)
	e.mu.Lock()
	if p, ok := e.procs[key]; ok {
		st := copyStatus(p.status)
		e.mu.Unlock()
		return st, nil
	}
	e.mu.Unlock()

	resp, err := e.opts.Etcd.Get(ctx, key)
	if err != nil {
		return executor.Status{}, fmt.Errorf("reading execution %s: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return executor.Status{State: executor.StateUnknown, Name: name, Reason: executor.ReasonNotStarted,
			Message: "no execution of this stage attempt has been started"}, nil
	}
	var rec record
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		return executor.Status{}, fmt.Errorf("decoding execution %s: %w", name, err)
	}
	st := executor.Status{
		State: rec.State, Name: name, ExitCode: rec.ExitCode, Reason: rec.Reason, Message: rec.Message,
		StartTime: rec.StartTime, CompletionTime: rec.CompletionTime,
	}
	switch rec.State {
	case executor.StateSucceeded, executor.StateFailed:
		return st, nil
	}
	if e.neverStarted(rec) {
		return executor.Status{State: executor.StateUnknown, Name: name, Reason: executor.ReasonNotStarted,
			Message: "the execution was recorded, but its process was never started"}, nil
	}
	// Recorded as running, but not by a live process of this instance: its
	// server (and with it, through Pdeathsig, the process) is gone.
	return executor.Status{
		State:     executor.StateUnknown,
		Name:      name,
		Reason:    executor.ReasonExecutorLost,
		StartTime: rec.StartTime,
		Message: fmt.Sprintf("process %s was started by a previous terrarun-apiserver "+
			"(instance %s) and ended with it; its outcome is unknown", name, rec.Holder),
	}, nil
}

// Stop implements executor.Executor: SIGTERM to the process (terrarun-executor
// forwards SIGINT to terraform), then SIGKILL to its whole process group after
// grace. It returns once the process is gone, or when ctx ends. Stopping an
// ended execution, or one this instance does not run, does nothing. Calling it
// again is harmless; a shorter grace brings the kill forward.
func (e *Executor) Stop(ctx context.Context, ex executor.Execution, grace time.Duration) error {
	id, err := identityOf(ex)
	if err != nil {
		return err
	}
	e.mu.Lock()
	p, ok := e.procs[e.key(id)]
	if !ok {
		e.mu.Unlock()
		return nil
	}
	e.stopLocked(p, grace, executor.ReasonCanceled)
	exited := p.exited
	e.mu.Unlock()
	select {
	case <-exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Forget implements executor.Executor: it stops every process of the run
// (all of its UIDs when uid is empty), and deletes its records and work
// directories.
func (e *Executor) Forget(ctx context.Context, namespace, name string, uid string) error {
	if !safeSegment(namespace) || !safeSegment(name) || (uid != "" && !safeSegment(uid)) {
		return fmt.Errorf("invalid run %s/%s (uid %q)", namespace, name, uid)
	}
	prefix := e.prefix + namespace + "/" + name + "/"
	dir := filepath.Join(e.opts.WorkRoot, namespace, name)
	if uid != "" {
		prefix += uid + "/"
		dir = filepath.Join(dir, uid)
	}
	var (
		procs []*proc
		waits []chan struct{}
	)
	e.mu.Lock()
	for key, p := range e.procs {
		if strings.HasPrefix(key, prefix) {
			p.forgotten = true
			e.stopLocked(p, forgetGrace, executor.ReasonCanceled)
			procs = append(procs, p)
			waits = append(waits, p.exited)
		}
	}
	e.mu.Unlock()

	var errs []error
	if _, err := e.opts.Etcd.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
		errs = append(errs, fmt.Errorf("deleting execution records of %s/%s: %w", namespace, name, err))
	} else {
		// A process leaves the table only once its record is final or gone
		// (neverStarted relies on it).
		e.mu.Lock()
		for _, p := range procs {
			p.recordGone = true
			if p.done && e.procs[p.key] == p {
				delete(e.procs, p.key)
			}
		}
		e.mu.Unlock()
	}
	for _, w := range waits {
		select {
		case <-w:
		case <-ctx.Done():
			// The processes end on their own and remove their directories.
			return errors.Join(append(errs, ctx.Err())...)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	// Remove parents left empty; a non-empty one stays.
	for d := filepath.Dir(dir); d != e.opts.WorkRoot && strings.HasPrefix(d, e.opts.WorkRoot); d = filepath.Dir(d) {
		if os.Remove(d) != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// Run implements executor.Executor: until ctx ends, notify is called
// whenever an execution of this instance ends. The executions themselves do
// not depend on it. staleSweepDelay after it starts, Run removes the work
// directories a previous server left (sweepStale).
func (e *Executor) Run(ctx context.Context, notify executor.Notifier) error {
	go e.sweepStale(ctx, staleSweepDelay)
	e.notify.Store(&notify)
	<-ctx.Done()
	e.notify.CompareAndSwap(&notify, nil)
	return nil
}

// Shutdown starts no more stages, and stops every process of this
// instance: SIGTERM, then SIGKILL after opts.Grace. The applies in flight
// (opts.Applying) first get opts.ApplyGrace to end on their own, and their
// end is recorded; those still running then are stopped, and the log names
// them. A stage stopped by Shutdown keeps its record Running, so that the
// next server reports it lost: a plan is planned again, an apply never
// re-applied.
func (e *Executor) Shutdown(ctx context.Context, opts executor.ShutdownOptions) error {
	logger := klog.FromContext(ctx)
	applying := map[string]bool{}
	if opts.Applying != nil {
		for _, name := range opts.Applying() {
			applying[name] = true
		}
	}
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		defer close(e.quit)
	}
	var applies []*proc
	var stopped []string
	for _, p := range e.procs {
		if applying[p.name] && opts.ApplyGrace > 0 && !p.done && !p.exiting {
			applies = append(applies, p)
			continue
		}
		e.interruptLocked(p, opts.Grace)
		stopped = append(stopped, p.name)
	}
	e.mu.Unlock()
	sort.Strings(stopped)
	if len(stopped) > 0 {
		// Say what the shutdown waits for: Ctrl-C would seem to hang otherwise.
		logger.Info(fmt.Sprintf("Shutting down: stopping %d stage(s) in flight; each gets SIGINT to release its state lock, and SIGKILL after %s at most. A second Ctrl-C exits at once and leaves their locks held.", len(stopped), opts.Grace), "stages", stopped)
	}
	if len(applies) > 0 {
		names := make([]string, 0, len(applies))
		for _, p := range applies {
			names = append(names, p.name)
		}
		sort.Strings(names)
		logger.Info(fmt.Sprintf("Shutting down: waiting up to %s for %d apply(s) in flight to end before stopping them (--shutdown-apply-grace-period); no new stage starts", opts.ApplyGrace, len(applies)), "applies", names)
		deadline := time.NewTimer(opts.ApplyGrace)
		defer deadline.Stop()
	wait:
		for _, p := range applies {
			select {
			case <-p.exited:
			case <-deadline.C:
				break wait
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var cut []string
		e.mu.Lock()
		for _, p := range applies {
			if !p.done && !p.exiting {
				e.interruptLocked(p, opts.Grace)
				cut = append(cut, p.name)
			}
		}
		e.mu.Unlock()
		if len(cut) > 0 {
			sort.Strings(cut)
			logger.Error(nil, fmt.Sprintf("Shutting down: %d apply(s) still running after %s are interrupted (SIGINT, then SIGKILL after %s); their runs will fail ExecutorLost: check their state", len(cut), opts.ApplyGrace, opts.Grace), "applies", cut)
		}
	}
	e.mu.Lock()
	waits := make([]chan struct{}, 0, len(e.procs))
	for _, p := range e.procs {
		waits = append(waits, p.exited)
	}
	e.mu.Unlock()
	for _, w := range waits {
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// interruptLocked stops p for the shutdown: its record stays Running. e.mu
// must be held.
func (e *Executor) interruptLocked(p *proc, grace time.Duration) {
	p.interrupted = true
	e.stopLocked(p, grace, executor.ReasonCanceled)
}
