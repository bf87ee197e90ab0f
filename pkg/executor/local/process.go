package local

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/stage"
	"github.com/terrarun/terrarun/pkg/stagelimits"
)

// Process control: starting, waiting for, signalling and reaping the
// children of this instance.

// proc is one execution started by this instance. Its mutable fields are
// guarded by Executor.mu.
type proc struct {
	key  string
	name string
	dir  string
	// tmpDir is the TMPDIR of an unsandboxed stage, outside dir.
	tmpDir string
	id     executor.Identity
	// createRev is the etcd revision that created the record.
	createRev int64
	// secrets are values masked in the output's tail.
	secrets []string
	// output is the tail of the stage's stdout and stderr; nil until prepared.
	output *outputTail

	cmd    *exec.Cmd // nil until started
	status executor.Status
	// exited is closed once the process has ended (or failed to start) and
	// status is final.
	exited chan struct{}
	// exiting is set once the process has exited, before it is reaped.
	exiting bool
	done    bool

	stopCause   string // executor.ReasonCanceled or executor.ReasonDeadlineExceeded
	pendingStop *time.Duration
	termSent    bool
	killed      bool
	killAt      time.Time
	killTimer   *time.Timer
	deadline    *time.Timer
	forgotten   bool
	// interrupted is set when Shutdown stopped the process: its record
	// stays Running, so that the next server reports it lost.
	interrupted bool
	// recordGone is set once Forget has deleted the record.
	recordGone bool

	// cgroup bounds the stage's memory, processes and CPU (nil: the host
	// gives none); budget measures what it writes. limitCause says which
	// limit of the budget stopped it.
	cgroup     *stagelimits.Group
	budget     *stagelimits.Budget
	limitCause string
	// removesNew says whether, over its budget, what the stage added to
	// the trees it shares is removed: a plan's, never an apply's, whose
	// state may describe infrastructure it created.
	removesNew bool
}

// budgetInterval is how often a stage's writes are measured.
const budgetInterval = 2 * time.Second

// watchBudget measures what p writes while it runs, and stops it when it
// goes over its budget.
func (e *Executor) watchBudget(p *proc) {
	if p.budget == nil {
		return
	}
	t := time.NewTicker(budgetInterval)
	defer t.Stop()
	for {
		select {
		case <-p.exited:
			return
		case <-t.C:
		}
		over, err := p.budget.Check()
		if err != nil {
			klog.ErrorS(err, "Measuring what a stage wrote", "execution", p.name)
			continue
		}
		if over != "" {
			e.mu.Lock()
			if p.limitCause == "" {
				p.limitCause = over
			}
			e.stopLocked(p, deadlineGrace, executor.ReasonLimitExceeded)
			e.mu.Unlock()
			return
		}
	}
}

// endLimits removes p's cgroups, and returns the limit of its budget it
// went over (measured once more now that it has ended), if any, and the
// limits of its cgroups it reached. Over its budget, what a plan added to
// the shared trees is removed.
func (e *Executor) endLimits(p *proc) (over string, reached []string) {
	if p.cgroup != nil {
		reached = p.cgroup.Exceeded()
		if err := p.cgroup.Delete(); err != nil {
			klog.ErrorS(err, "Removing a stage's cgroups", "execution", p.name)
		}
	}
	if p.budget == nil {
		return "", reached
	}
	e.mu.Lock()
	over = p.limitCause
	e.mu.Unlock()
	if over == "" {
		var err error
		if over, err = p.budget.Check(); err != nil {
			klog.ErrorS(err, "Measuring what a stage wrote", "execution", p.name)
		}
	}
	if over == "" {
		return "", reached
	}
	if p.removesNew {
		if err := p.budget.RemoveNew(); err != nil {
			klog.ErrorS(err, "Removing what a stage over its budget wrote", "execution", p.name)
		}
		return over + "; what it added to its workspace's state directory and plugin cache was removed", reached
	}
	return over + "; what it added to its workspace's state directory is kept: an apply's state may describe infrastructure it created", reached
}

type spawnRequest struct {
	cmd  *exec.Cmd
	errc chan error
}

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
	over, reached := e.endLimits(p)

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
	case over != "":
		st.State, st.Reason = executor.StateFailed, executor.ReasonLimitExceeded
		summary = over
	case len(reached) > 0 && (waitErr != nil || code != 0):
		st.State, st.Reason = executor.StateFailed, executor.ReasonLimitExceeded
		summary = fmt.Sprintf("the stage failed (exit code %d) having reached %s", code, strings.Join(reached, " and "))
	case waitErr == nil && code == 0:
		st.State, st.Reason = executor.StateSucceeded, executor.ReasonCompleted
	case stopCause == executor.ReasonDeadlineExceeded:
		st.State, st.Reason = executor.StateFailed, executor.ReasonDeadlineExceeded
		summary = "the stage ran past its timeout and was stopped"
		if killed {
			summary += "; it did not exit after SIGTERM and was killed"
		}
	case killed:
		st.State, st.Reason = executor.StateFailed, executor.ReasonKilled
		summary = "stopped: it did not exit within the grace period after SIGTERM and was killed"
	case stopCause != "":
		st.State, st.Reason = executor.StateFailed, stopCause
		summary = fmt.Sprintf("stopped on request; exit code %d", code)
	case signaled:
		st.State, st.Reason = executor.StateFailed, executor.ReasonSignaled
		summary = fmt.Sprintf("terminated by signal %s", sig)
	default:
		st.State, st.Reason = executor.StateFailed, executor.ReasonError
		summary = fmt.Sprintf("terrarun-executor exited with code %d", code)
		if code < 0 && waitErr != nil {
			summary = fmt.Sprintf("waiting for terrarun-executor: %v", waitErr)
		}
	}
	if st.State == executor.StateFailed {
		st.Message = summary
		if tail := p.output.String(logTailBytes, p.secrets); tail != "" {
			if failure := stage.FailureIn(tail); failure != "" && st.Reason == executor.ReasonError {
				// The first line says why, not only the exit code.
				st.Message += ": " + failure
			}
			st.Message += "\n" + tail
		}
	}

	e.tokens.Revoke(p.id)
	e.removeWorkDir(p)

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
	forgotten, interrupted := p.forgotten, p.interrupted
	if forgotten && p.recordGone && e.procs[p.key] == p {
		delete(e.procs, p.key)
	}
	close(p.exited)
	e.mu.Unlock()

	if forgotten || interrupted {
		// A deleted run keeps no records. A stage the shutdown stopped keeps
		// its record Running, so that the next server reports it lost; one
		// that ended on its own meanwhile (an apply given time) is recorded.
		return
	}
	if e.persist(p, st) {
		e.mu.Lock()
		if e.procs[p.key] == p {
			delete(e.procs, p.key)
		}
		e.mu.Unlock()
	}
	if notify := e.notify.Load(); notify != nil {
		(*notify)(p.id.Namespace, p.id.Name)
	}
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

// removeWorkDir removes the work directory of p, the mount point of its
// sandbox's root, and its TMPDIR when it ran unsandboxed.
func (e *Executor) removeWorkDir(p *proc) {
	for _, d := range []string{p.dir, p.dir + ".root", p.tmpDir} {
		if d == "" {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			klog.ErrorS(err, "Removing work directory", "execution", p.name, "path", d)
		}
	}
}
