package integration

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// TestStageTimeout: a stage that runs past spec.timeouts is stopped, and the
// run fails with DeadlineExceeded, long before the stage would have ended.
func TestStageTimeout(t *testing.T) {
	e := newRunEnv(t)
	e.create(t, runManifest("slowapply", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {
  provisioner "local-exec" {
    command = "sleep 60"
  }
}`}, "  approval:\n    mode: Auto\n  timeouts:\n    apply: 3s\n")))
	// A plan of 5000 resources takes longer than 2s on any machine.
	e.create(t, runManifest("slowplan", inline(map[string]string{"main.tf": largePlanTF}, "  operation: Plan\n  timeouts:\n    plan: 2s\n")))

	e.waitPhase(t, "slowapply", 3*time.Minute, v1alpha1.RunPhaseApplying, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded)
	start := time.Now()
	run := e.waitPhase(t, "slowapply", 2*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseCanceled)
	took := time.Since(start)
	t.Logf("the apply with a timeout of 3s ended %s after %s: %s", run.Status.Phase, took, run.Status.Message)
	if run.Status.Phase != v1alpha1.RunPhaseFailed {
		t.Fatalf("the apply past its timeout ended %s: %s", run.Status.Phase, run.Status.Message)
	}
	if took > 30*time.Second {
		t.Errorf("the run failed %s after the apply started; its timeout is 3s, the sleep 60s", took)
	}
	c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionApplied)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonDeadlineExceeded || !strings.Contains(c.Message, "timeout") || !strings.Contains(c.Message, "3s") {
		t.Errorf("Applied condition = %+v, want False, DeadlineExceeded, naming the timeout of 3s", c)
	}
	if !strings.Contains(run.Status.Message, "timeout") {
		t.Errorf("status.message = %q, want it to name the timeout", run.Status.Message)
	}
	applies := stagesOf(run, v1alpha1.StageApply)
	if len(applies) != 1 || applies[0].Reason != v1alpha1.ReasonDeadlineExceeded || applies[0].CompletionTime == nil {
		t.Errorf("apply stages = %+v, want one that ended DeadlineExceeded", applies)
	} else if d := applies[0].CompletionTime.Sub(applies[0].StartTime.Time); d > 30*time.Second {
		t.Errorf("the apply stage ran %s", d)
	}
	if run.Status.CompletionTime == nil {
		t.Errorf("a failed run has no completionTime")
	}
	// The sleep was stopped with the stage: nothing of it is left running.
	waitNoProcessesUnder(t, e.DataDir, 30*time.Second)

	plan := e.waitPhase(t, "slowplan", 2*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseCanceled)
	t.Logf("the plan with a timeout of 2s ended %s: %s", plan.Status.Phase, plan.Status.Message)
	if plan.Status.Phase != v1alpha1.RunPhaseFailed {
		t.Fatalf("the plan past its timeout ended %s: %s", plan.Status.Phase, plan.Status.Message)
	}
	c = meta.FindStatusCondition(plan.Status.Conditions, v1alpha1.ConditionPlanned)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonDeadlineExceeded || !strings.Contains(c.Message, "timeout") {
		t.Errorf("Planned condition = %+v, want False, DeadlineExceeded, naming the timeout", c)
	}
	if plans := stagesOf(plan, v1alpha1.StagePlan); len(plans) != 1 || plans[0].Reason != v1alpha1.ReasonDeadlineExceeded {
		t.Errorf("plan stages = %+v, want one that ended DeadlineExceeded", plans)
	}
	if applyStages(plan) != 0 || plan.Status.Plan != nil && plan.Status.Plan.Digest != "" {
		t.Errorf("a plan stopped by its timeout has apply stages %d, status.plan %+v", applyStages(plan), plan.Status.Plan)
	}
}
