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
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/stage"
)

// DefaultEtcdPrefix is where executions are recorded when Options.EtcdPrefix is empty.
const DefaultEtcdPrefix = "/terrarun/executions/"

// Reasons of Status.
const (
	// ReasonCompleted: the process exited with code 0.
	ReasonCompleted = "Completed"
	// ReasonError: the process exited with another code.
	ReasonError = "Error"
	// ReasonCanceled: the process ended after Stop.
	ReasonCanceled = "Canceled"
	// ReasonKilled: the process did not end within the grace period of Stop and was killed.
	ReasonKilled = "Killed"
	// ReasonDeadlineExceeded: the stage ran past the run's timeout and was stopped.
	ReasonDeadlineExceeded = "DeadlineExceeded"
	// ReasonSignaled: the process was ended by a signal that this executor did not send.
	ReasonSignaled = "Signaled"
	// ReasonExecutorLost: the execution was recorded as running by a server
	// instance that is gone; its outcome is unknown.
	ReasonExecutorLost = "ExecutorLost"
	// ReasonNotStarted: there is no record of the execution.
	ReasonNotStarted = "NotStarted"
)

const (
	// defaultStageTimeout bounds a stage whose run sets no timeout (the API default).
	defaultStageTimeout = time.Hour
	// deadlineGrace is how long a stage past its deadline gets between SIGTERM and SIGKILL.
	deadlineGrace = 30 * time.Second
	// forgetGrace is how long a stage of a deleted run gets between SIGTERM and SIGKILL.
	forgetGrace = 10 * time.Second
	// logTailBytes of executor.log are kept in the message of a failed execution.
	logTailBytes = 2048
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
	// EtcdPrefix is the key prefix of the records; DefaultEtcdPrefix when empty.
	EtcdPrefix string
	// Env is extra environment for the children (KEY=VALUE), e.g. a PATH that
	// holds the engine. It must never hold secrets.
	Env []string
	// Notify is called whenever an execution ends.
	Notify executor.Notifier
	// ValueSource resolves Secret and ConfigMap keys; FileValues{ValuesRoot} when nil.
	ValueSource ValueSource
}

// Executor is the local executor. It implements executor.Executor.
type Executor struct {
	opts   Options
	prefix string
	holder string
	env    []string
	values ValueSource
	tokens *Tokens

	spawn chan spawnRequest
	quit  chan struct{}

	mu     sync.Mutex
	procs  map[string]*proc
	closed bool
}

var _ executor.Executor = (*Executor)(nil)

// proc is one execution started by this instance. Its mutable fields are
// guarded by Executor.mu.
type proc struct {
	key  string
	name string
	dir  string
	id   executor.Identity
	// createRev is the etcd revision that created the record, putRev the one
	// of Start's last write to it.
	createRev, putRev int64
	// secrets are values masked in the log tail.
	secrets []string

	cmd    *exec.Cmd // nil until started
	status executor.Status
	// exited is closed once the process has ended (or failed to start) and
	// status is final.
	exited chan struct{}
	// exiting is set once the process has exited, before it is reaped.
	exiting bool
	done    bool

	stopCause   string // ReasonCanceled or ReasonDeadlineExceeded
	pendingStop *time.Duration
	termSent    bool
	killed      bool
	killAt      time.Time
	killTimer   *time.Timer
	deadline    *time.Timer
	forgotten   bool
	// recordGone is set once Forget has deleted the record.
	recordGone bool
}

type spawnRequest struct {
	cmd  *exec.Cmd
	errc chan error
}

// record is the JSON value of an execution's etcd key.
type record struct {
	Name           string         `json:"name"`
	State          executor.State `json:"state"`
	Holder         string         `json:"holder"`
	PID            int            `json:"pid,omitempty"`
	StartTime      *time.Time     `json:"startTime,omitempty"`
	CompletionTime *time.Time     `json:"completionTime,omitempty"`
	ExitCode       *int32         `json:"exitCode,omitempty"`
	Reason         string         `json:"reason,omitempty"`
	Message        string         `json:"message,omitempty"`
}

// New returns a local executor. It creates WorkRoot and StateRoot (0700).
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
		name string
		path *string
	}{{"work root", &opts.WorkRoot}, {"state root", &opts.StateRoot}} {
		if *d.path == "" {
			return nil, fmt.Errorf("local executor: a %s is required", d.name)
		}
		if *d.path, err = filepath.Abs(*d.path); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(*d.path, 0o700); err != nil {
			return nil, fmt.Errorf("local executor: creating the %s: %w", d.name, err)
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
		prefix = DefaultEtcdPrefix
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
		tokens: NewTokens(),
		spawn:  make(chan spawnRequest),
		quit:   make(chan struct{}),
		procs:  map[string]*proc{},
	}
	go e.spawnLoop()
	return e, nil
}

// Tokens is the per-stage token authority: the server's token authenticator
// and executor.IdentityResolver in local mode.
func (e *Executor) Tokens() *Tokens { return e.tokens }

// spawnLoop starts every child from one OS thread that never ends while the
// executor is in use: Pdeathsig fires when the thread that started a child
// exits, not only when the process does.
func (e *Executor) spawnLoop() {
	runtime.LockOSThread()
	// Never unlocked: returning ends the thread, which is only done after
	// Shutdown has stopped every child.
	for {
		select {
		case req := <-e.spawn:
			req.errc <- req.cmd.Start()
		case <-e.quit:
			return
		}
	}
}

// Name implements executor.Executor.
func (e *Executor) Name(ex executor.Execution) string {
	return ProcessName(ex.Run.Namespace, ex.Run.Name, ex.Stage, ex.Attempt)
}

// ProcessName is the deterministic name of an execution: <namespace>.<run>.<stage>.<attempt>.
func ProcessName(namespace, name, stageName string, attempt int32) string {
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

func (e *Executor) key(id executor.Identity) string {
	return fmt.Sprintf("%s%s/%s/%s/%s/%d", e.prefix, id.Namespace, id.Name, id.UID, id.Stage, id.Attempt)
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
	name := ProcessName(id.Namespace, id.Name, id.Stage, id.Attempt)
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
	val, err := json.Marshal(rec)
	if err != nil {
		return "", err
	}
	resp, err := e.opts.Etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return "", fmt.Errorf("recording execution %s: %w", name, err)
	}
	if resp.Succeeded {
		p.createRev, p.putRev = resp.Header.Revision, resp.Header.Revision
	} else {
		// Recorded already: never start a second process, unless the record is
		// this instance's own and it never started a process for it (see neverStarted).
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return name, nil
		}
		var old record
		if json.Unmarshal(kvs[0].Value, &old) != nil || !e.neverStarted(old) {
			return name, nil
		}
		tresp, err := e.opts.Etcd.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision)).
			Then(clientv3.OpPut(key, string(val))).
			Commit()
		if err != nil {
			return "", fmt.Errorf("recording execution %s: %w", name, err)
		}
		if !tresp.Succeeded {
			return name, nil
		}
		p.createRev, p.putRev = kvs[0].CreateRevision, tresp.Header.Revision
	}

	cmd, logFile, err := e.prepare(ctx, p, ex)
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
	if logFile != nil {
		logFile.Close() // the child has its own descriptor
	}
	if err != nil {
		e.tokens.Revoke(id)
		if rmErr := os.RemoveAll(p.dir); rmErr != nil {
			klog.ErrorS(rmErr, "Removing work directory", "execution", name)
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		_, delErr := e.opts.Etcd.Txn(dctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", p.createRev)).
			Then(clientv3.OpDelete(key)).
			Commit()
		cancel()
		if delErr != nil {
			klog.ErrorS(delErr, "Removing the record of an execution that did not start", "execution", name)
		}
		return "", fmt.Errorf("execution %s: %w", name, err)
	}

	started = true
	e.mu.Lock()
	p.cmd = cmd
	timeout := stageTimeout(ex)
	p.deadline = time.AfterFunc(timeout, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.stopLocked(p, deadlineGrace, ReasonDeadlineExceeded)
	})
	if p.pendingStop != nil {
		grace := *p.pendingStop
		p.pendingStop = nil
		e.stopLocked(p, grace, ReasonCanceled)
	}
	e.mu.Unlock()

	// Record the pid: it tells an operator which process it is, and that a
	// process was started (see neverStarted). Without it, the record only
	// stays more conservative.
	rec.PID = cmd.Process.Pid
	if val, err := json.Marshal(rec); err == nil {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		if _, err := e.opts.Etcd.Txn(pctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", p.createRev),
				clientv3.Compare(clientv3.ModRevision(key), "=", p.putRev)).
			Then(clientv3.OpPut(key, string(val))).
			Commit(); err != nil {
			klog.ErrorS(err, "Recording the pid of an execution", "execution", name)
		}
		cancel()
	}

	go e.wait(p)
	return name, nil
}

func stageTimeout(ex executor.Execution) time.Duration {
	t := ex.Run.Spec.Timeouts.Plan
	if ex.Stage == stage.Apply {
		t = ex.Run.Spec.Timeouts.Apply
	}
	if t == nil || t.Duration <= 0 {
		return defaultStageTimeout
	}
	return t.Duration
}

// wait waits for the process to end, then records its final state, revokes
// its token, removes its work directory and notifies.
func (e *Executor) wait(p *proc) {
	pid := p.cmd.Process.Pid
	// Wait for the exit without reaping: until cmd.Wait, the pid, and with it
	// the process group id, cannot be reused.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	e.mu.Lock()
	p.exiting = true
	// Nothing of the execution outlives it: kill what is left of its process group.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	e.mu.Unlock()
	waitErr := p.cmd.Wait()

	now := time.Now()
	st := executor.Status{Name: p.name, CompletionTime: &now}
	e.mu.Lock()
	st.StartTime = p.status.StartTime
	stopCause, killed := p.stopCause, p.killed
	e.mu.Unlock()

	var code int32 = -1
	signaled := false
	var sig syscall.Signal
	if ps := p.cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			signaled, sig = true, ws.Signal()
			code = 128 + int32(sig)
		} else {
			code = int32(ps.ExitCode())
		}
	}
	st.ExitCode = &code
	var summary string
	switch {
	case waitErr == nil && code == 0:
		st.State, st.Reason = executor.StateSucceeded, ReasonCompleted
	case stopCause == ReasonDeadlineExceeded:
		st.State, st.Reason = executor.StateFailed, ReasonDeadlineExceeded
		summary = "the stage ran past its timeout and was stopped"
		if killed {
			summary += "; it did not exit after SIGTERM and was killed"
		}
	case killed:
		st.State, st.Reason = executor.StateFailed, ReasonKilled
		summary = "stopped: it did not exit within the grace period after SIGTERM and was killed"
	case stopCause != "":
		st.State, st.Reason = executor.StateFailed, stopCause
		summary = fmt.Sprintf("stopped on request; exit code %d", code)
	case signaled:
		st.State, st.Reason = executor.StateFailed, ReasonSignaled
		summary = fmt.Sprintf("terminated by signal %s", sig)
	default:
		st.State, st.Reason = executor.StateFailed, ReasonError
		summary = fmt.Sprintf("terrarun-executor exited with code %d", code)
		if code < 0 && waitErr != nil {
			summary = fmt.Sprintf("waiting for terrarun-executor: %v", waitErr)
		}
	}
	if st.State == executor.StateFailed {
		st.Message = summary
		if tail := logTail(filepath.Join(p.dir, "executor.log"), logTailBytes, p.secrets); tail != "" {
			st.Message += "\n" + tail
		}
	}

	e.tokens.Revoke(p.id)
	if err := os.RemoveAll(p.dir); err != nil {
		klog.ErrorS(err, "Removing work directory", "execution", p.name)
	}

	e.mu.Lock()
	p.status = st
	p.done = true
	p.secrets = nil
	if p.killTimer != nil {
		p.killTimer.Stop()
	}
	if p.deadline != nil {
		p.deadline.Stop()
	}
	forgotten, closed := p.forgotten, e.closed
	if forgotten && p.recordGone && e.procs[p.key] == p {
		delete(e.procs, p.key)
	}
	close(p.exited)
	e.mu.Unlock()

	if forgotten || closed {
		// A deleted run keeps no records. On shutdown the record stays Running,
		// so that the next server reports the execution as lost.
		return
	}
	if e.persist(p, st) {
		e.mu.Lock()
		if e.procs[p.key] == p {
			delete(e.procs, p.key)
		}
		e.mu.Unlock()
	}
	if e.opts.Notify != nil {
		e.opts.Notify(p.id.Namespace, p.id.Name)
	}
}

// persist records a final state in etcd, retrying for a while. It reports
// whether the state is recorded (or no longer needs to be).
func (e *Executor) persist(p *proc, st executor.Status) bool {
	rec := record{
		Name: p.name, State: st.State, Holder: e.holder,
		StartTime: st.StartTime, CompletionTime: st.CompletionTime,
		ExitCode: st.ExitCode, Reason: st.Reason, Message: st.Message,
	}
	if p.cmd != nil && p.cmd.Process != nil {
		rec.PID = p.cmd.Process.Pid
	}
	val, err := json.Marshal(rec)
	if err != nil {
		klog.ErrorS(err, "Encoding execution record", "execution", p.name)
		return false
	}
	begin := time.Now()
	backoff := 200 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		// Only the record this execution created: after Forget it is gone.
		_, err := e.opts.Etcd.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(p.key), "=", p.createRev)).
			Then(clientv3.OpPut(p.key, string(val))).
			Commit()
		cancel()
		if err == nil {
			return true
		}
		if time.Since(begin) > persistFor {
			klog.ErrorS(err, "Giving up recording the final state of an execution; it stays in memory", "execution", p.name)
			return false
		}
		klog.V(2).InfoS("Recording the final state of an execution", "execution", p.name, "err", err)
		select {
		case <-time.After(backoff):
		case <-e.quit:
			return false
		}
		backoff = min(2*backoff, 10*time.Second)
	}
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
	name := ProcessName(id.Namespace, id.Name, id.Stage, id.Attempt)
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
		return executor.Status{State: executor.StateUnknown, Name: name, Reason: ReasonNotStarted,
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
		return executor.Status{State: executor.StateUnknown, Name: name, Reason: ReasonNotStarted,
			Message: "the execution was recorded, but its process was never started"}, nil
	}
	// Recorded as running, but not by a live process of this instance: its
	// server (and with it, through Pdeathsig, the process) is gone.
	return executor.Status{
		State:     executor.StateUnknown,
		Name:      name,
		Reason:    ReasonExecutorLost,
		StartTime: rec.StartTime,
		Message: fmt.Sprintf("process %s (pid %d) was started by a previous terrarun-apiserver "+
			"(instance %s) and ended with it; its outcome is unknown", name, rec.PID, rec.Holder),
	}, nil
}

// neverStarted says whether rec, found in etcd for a key that this instance
// has no process for, is one this instance recorded without ever starting its
// process: its Start failed after the record was created (or its client saw an
// error for a transaction that did commit), and removing the record failed.
// Every process that this instance starts stays in its table until its final
// state is recorded, and its record carries its pid.
func (e *Executor) neverStarted(rec record) bool {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	return !closed && rec.Holder == e.holder && rec.State == executor.StateRunning && rec.PID == 0
}

func copyStatus(s executor.Status) executor.Status {
	c := s
	if s.ExitCode != nil {
		v := *s.ExitCode
		c.ExitCode = &v
	}
	if s.StartTime != nil {
		v := *s.StartTime
		c.StartTime = &v
	}
	if s.CompletionTime != nil {
		v := *s.CompletionTime
		c.CompletionTime = &v
	}
	return c
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
	e.stopLocked(p, grace, ReasonCanceled)
	exited := p.exited
	e.mu.Unlock()
	select {
	case <-exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopLocked starts stopping p: SIGTERM now, SIGKILL to the group after
// grace. e.mu must be held.
func (e *Executor) stopLocked(p *proc, grace time.Duration, cause string) {
	if p.done || p.exiting {
		return
	}
	grace = max(grace, 0)
	if p.cmd == nil { // still starting: Start stops it right after it started
		if p.pendingStop == nil || grace < *p.pendingStop {
			p.pendingStop = &grace
		}
		return
	}
	if p.stopCause == "" {
		p.stopCause = cause
	}
	if !p.termSent {
		p.termSent = true
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			klog.ErrorS(err, "Sending SIGTERM", "execution", p.name)
		}
	}
	killAt := time.Now().Add(grace)
	if p.killTimer != nil && !killAt.Before(p.killAt) {
		return
	}
	if p.killTimer != nil {
		p.killTimer.Stop()
	}
	p.killAt = killAt
	p.killTimer = time.AfterFunc(grace, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if p.done || p.exiting {
			return
		}
		p.killed = true
		// The group id is the child's pid (Setpgid); until wait sets exiting,
		// the child is not reaped, so the id cannot have been reused.
		if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			klog.ErrorS(err, "Sending SIGKILL", "execution", p.name)
		}
	})
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
			e.stopLocked(p, forgetGrace, ReasonCanceled)
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

// Shutdown stops every process of this instance (SIGTERM, then SIGKILL after
// grace) and waits for them, or for ctx. Start fails afterwards. The records
// of the stopped executions stay Running, so that the next server reports them
// as ExecutorLost, as it would after a crash.
func (e *Executor) Shutdown(ctx context.Context, grace time.Duration) error {
	var waits []chan struct{}
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		defer close(e.quit)
	}
	for _, p := range e.procs {
		e.stopLocked(p, grace, ReasonCanceled)
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

// childEnv is the base environment of every child, without HOME and TMPDIR.
func childEnv(extra []string) ([]string, error) {
	path := os.Getenv("PATH")
	var rest []string
	for _, kv := range extra {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("local executor: environment entry %q is not KEY=VALUE", kv)
		}
		switch k {
		case "PATH":
			path = v
		case "HOME", "TMPDIR":
			// Each execution gets its own.
		default:
			rest = append(rest, kv)
		}
	}
	return append([]string{"PATH=" + path}, rest...), nil
}
