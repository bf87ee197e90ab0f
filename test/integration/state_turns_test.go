package integration

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// replaced is a configuration whose every plan replaces its resource, which
// sleeps a second as it is created: every run changes the state, and holds it
// a while.
var replaced = map[string]string{"main.tf": `resource "terraform_data" "x" {
  triggers_replace = plantimestamp()
  provisioner "local-exec" {
    command = "sleep 1"
  }
}`}

// TestRunsOnOneStateTakeTurns: two runs on one state do not fight over its
// lock: the second waits, Queued, naming the first, and starts when the
// first is done; both succeed.
func TestRunsOnOneStateTakeTurns(t *testing.T) {
	e := newRunEnv(t)
	// A watch sees every phase the second run goes through.
	w, err := e.client.TerrarunV1alpha1().TerraformRuns("default").Watch(ctxT(t), metav1.ListOptions{FieldSelector: "metadata.name=second"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	auto := "  workspace: shared\n  approval:\n    mode: Auto\n"
	e.create(t, runManifest("first", inline(replaced, auto)))
	e.create(t, runManifest("second", inline(replaced, auto)))
	waiting := ""
	timeout := time.After(3 * time.Minute)
	for waiting == "" {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended")
			}
			run, isRun := ev.Object.(*v1alpha1.TerraformRun)
			if !isRun {
				continue
			}
			switch run.Status.Phase {
			case v1alpha1.RunPhaseQueued:
				waiting = run.Status.Message
			case v1alpha1.RunPhasePlanning, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed:
				t.Fatalf("the second run went %s without waiting for the first\n%s", run.Status.Phase, mustKubectl(t, e.Kubeconfig, "get", "events"))
			}
		case <-timeout:
			t.Fatal("the second run was never Queued")
		}
	}
	if !strings.Contains(waiting, "Waiting for the state (workspace shared of the default backend): run first is") {
		t.Errorf("the second run waits with the message %q", waiting)
	}
	first := e.waitPhase(t, "first", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	second := e.waitPhase(t, "second", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if first.Status.Phase != v1alpha1.RunPhaseSucceeded || second.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Fatalf("first %s (%s), second %s (%s): both should succeed", first.Status.Phase, first.Status.Message, second.Status.Phase, second.Status.Message)
	}
	if second.Status.StartTime.Before(first.Status.CompletionTime) {
		t.Errorf("second started at %s, before first ended at %s", second.Status.StartTime, first.Status.CompletionTime)
	}
}

// TestStaleApprovalRefused: a plan waiting for approval does not hold its
// state; a run that applies to the state meanwhile makes it stale. The
// stale plan ends Discarded (StalePlan) as soon as that apply ends, rather
// than wait for its approval timeout (an hour), and its approval is refused
// with 409, with nothing applied. Each stage records its start revision,
// which orders the stages on a state without the ties of startTime's
// seconds.
func TestStaleApprovalRefused(t *testing.T) {
	e := newRunEnv(t)
	e.create(t, runManifest("waits", inline(replaced, "  workspace: stale\n")))
	waits := e.waitPhase(t, "waits", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval, v1alpha1.RunPhaseFailed)
	if waits.Status.Phase != v1alpha1.RunPhaseAwaitingApproval {
		t.Fatalf("waits ended %s: %s", waits.Status.Phase, waits.Status.Message)
	}
	e.create(t, runManifest("meanwhile", inline(replaced, "  workspace: stale\n  approval:\n    mode: Auto\n")))
	meanwhile := e.waitPhase(t, "meanwhile", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if meanwhile.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Fatalf("meanwhile ended %s: %s", meanwhile.Status.Phase, meanwhile.Status.Message)
	}
	if plan, apply := waits.Status.Stages[0].StartRevision, meanwhile.Status.Stages[1].StartRevision; plan == 0 || apply <= plan {
		t.Errorf("start revisions: the stale plan's %d, the apply's %d; want the apply's after the plan's", plan, apply)
	}

	out, err := e.approve(t, e.bob, waits)
	if err == nil || !strings.Contains(out, "Conflict") ||
		!strings.Contains(out, "the plan is stale: run meanwhile applied to the same state (workspace stale of the default backend)") && !strings.Contains(out, "the run is Discarded") {
		t.Fatalf("approving a stale plan: err=%v\n%s", err, out)
	}
	run := e.waitPhase(t, "waits", time.Minute, v1alpha1.RunPhaseDiscarded)
	if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionApproved); c == nil || c.Reason != v1alpha1.ReasonStalePlan || !strings.Contains(run.Status.Message, "run meanwhile applied") {
		t.Errorf("the stale plan: Approved %+v, message %q; want reason StalePlan naming the run that applied", c, run.Status.Message)
	}
	if run.Status.Approval != nil || len(run.Status.Approvals) != 0 || len(run.Status.Stages) != 1 {
		t.Errorf("after a refused approval: approval %+v, stages %+v", run.Status.Approvals, run.Status.Stages)
	}
}
