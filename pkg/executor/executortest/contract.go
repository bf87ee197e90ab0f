// Package executortest is the contract that every executor backend keeps
// (local, job, tekton): one table of cases, which each backend's tests run
// against its own platform: real child processes for the local executor, a
// fake cluster that plays the Job or Tekton controller and the kubelet for
// the others.
package executortest

import (
	"context"
	"testing"
	"time"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
)

// Backend makes, for one case of the contract, a platform of its own: the
// case's executors share it.
type Backend func(t *testing.T) Platform

// Platform is how the contract drives one backend and what it runs on.
type Platform struct {
	// New returns an executor of the backend: another replica, or the
	// server restarted, when called again.
	New func() executor.Executor
	// Run returns a run named name whose stages end with exit code code
	// once ended (End), or on their own when long is false (the local
	// backend's); a long stage runs until it is stopped.
	Run func(name string, code int32, long bool) *v1alpha1.TerraformRun
	// End ends the started execution ex with its run's code, as the
	// platform would report it; nil when stages end on their own.
	End func(e executor.Executor, ex executor.Execution)
	// Lose takes away the started execution ex as a lost node or a killed
	// server would, and returns the executor to ask afterwards (a new one
	// after a restart, or e).
	Lose func(e executor.Executor, ex executor.Execution) executor.Executor
}

// timeout bounds how long a case waits for an execution to change.
const timeout = 30 * time.Second

// Run runs the contract's cases against b, each on a platform of its own.
func Run(t *testing.T, b Backend) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, b(t)) })
	}
}

var cases = []struct {
	name string
	run  func(*testing.T, Platform)
}{
	{"an execution never started may start", func(t *testing.T, b Platform) {
		e := b.New()
		ex := plan(b.Run("fresh", 0, false))
		st := status(t, e, ex)
		if !st.Startable() || st.State != executor.StateUnknown || st.Reason != executor.ReasonNotStarted {
			t.Fatalf("Status before Start = %+v, want Unknown, NotStarted", st)
		}
	}},
	{"Start names the execution, and again adopts it", func(t *testing.T, b Platform) {
		e := b.New()
		ex := plan(b.Run("adopt", 0, true))
		name := start(t, e, ex)
		if name != e.Name(ex) {
			t.Errorf("Start = %q, Name = %q", name, e.Name(ex))
		}
		if again := start(t, e, ex); again != name {
			t.Errorf("Start again = %q, want %q", again, name)
		}
		// Another replica adopts it too.
		if other := start(t, b.New(), ex); other != name {
			t.Errorf("Start on another instance = %q, want %q", other, name)
		}
		if st := status(t, e, ex); st.State != executor.StateRunning || st.Name != name {
			t.Errorf("Status = %+v, want Running %s", st, name)
		}
		stop(t, e, ex)
	}},
	{"an execution that exits 0 succeeded", func(t *testing.T, b Platform) {
		e := b.New()
		ex := plan(b.Run("ok", 0, false))
		name := start(t, e, ex)
		end(t, b, e, ex)
		st := final(t, e, ex)
		if st.State != executor.StateSucceeded || st.Reason != executor.ReasonCompleted || st.ExitCode == nil || *st.ExitCode != 0 || st.Name != name {
			t.Errorf("Status = %+v, want Succeeded, Completed, exit 0", st)
		}
	}},
	{"an execution that exits 1 failed with its code", func(t *testing.T, b Platform) {
		e := b.New()
		ex := apply(b.Run("broken", 1, false))
		start(t, e, ex)
		end(t, b, e, ex)
		st := final(t, e, ex)
		if st.State != executor.StateFailed || st.Reason != executor.ReasonError || st.ExitCode == nil || *st.ExitCode != 1 {
			t.Errorf("Status = %+v, want Failed, Error, exit 1", st)
		}
		if st.Startable() {
			t.Errorf("a failed apply may start again")
		}
	}},
	{"Stop ends a running execution, and an ended one is left alone", func(t *testing.T, b Platform) {
		e := b.New()
		ex := apply(b.Run("stopped", 0, true))
		start(t, e, ex)
		stop(t, e, ex)
		st := final(t, e, ex)
		if st.State == executor.StateRunning || st.State == executor.StateSucceeded || st.Startable() {
			t.Errorf("Status after Stop = %+v, want ended, not succeeded, never startable", st)
		}
		stop(t, e, ex)
		if again := status(t, e, ex); again.State != st.State || again.Reason != st.Reason {
			t.Errorf("Status after a second Stop = %+v, was %+v", again, st)
		}
	}},
	{"a lost apply never starts again", func(t *testing.T, b Platform) {
		e := b.New()
		ex := apply(b.Run("lost", 0, true))
		name := start(t, e, ex)
		asked := b.Lose(e, ex)
		st := status(t, asked, ex)
		if st.State != executor.StateUnknown || st.Reason != executor.ReasonExecutorLost || st.Startable() || st.Name != name {
			t.Fatalf("Status of a lost apply = %+v, want Unknown, ExecutorLost, %s: the controller must never start it again", st, name)
		}
	}},
	{"Forget of a run that never ran does nothing", func(t *testing.T, b Platform) {
		e := b.New()
		run := b.Run("forgotten", 0, false)
		if err := e.Forget(context.Background(), run.Namespace, run.Name, string(run.UID)); err != nil {
			t.Errorf("Forget: %v", err)
		}
	}},
}

func plan(run *v1alpha1.TerraformRun) executor.Execution {
	return executor.Execution{Run: run, Stage: v1alpha1.StagePlan, Attempt: 1}
}

func apply(run *v1alpha1.TerraformRun) executor.Execution {
	return executor.Execution{Run: run, Stage: v1alpha1.StageApply, Attempt: 1, PlanDigest: "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
}

func start(t *testing.T, e executor.Executor, ex executor.Execution) string {
	t.Helper()
	name, err := e.Start(context.Background(), ex)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return name
}

func stop(t *testing.T, e executor.Executor, ex executor.Execution) {
	t.Helper()
	if err := e.Stop(context.Background(), ex, 2*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

func end(t *testing.T, b Platform, e executor.Executor, ex executor.Execution) {
	t.Helper()
	if b.End != nil {
		b.End(e, ex)
	}
}

func status(t *testing.T, e executor.Executor, ex executor.Execution) executor.Status {
	t.Helper()
	st, err := e.Status(context.Background(), ex)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	return st
}

// final waits until ex's execution no longer runs.
func final(t *testing.T, e executor.Executor, ex executor.Execution) executor.Status {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := status(t, e, ex)
		if st.State != executor.StateRunning || time.Now().After(deadline) {
			return st
		}
		time.Sleep(50 * time.Millisecond)
	}
}
