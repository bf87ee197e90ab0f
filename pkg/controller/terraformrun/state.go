package terraformrun

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runrules"
)

// State turns. Runs that use one Terraform state (runrules.StateKey: the
// namespace, the Terraform workspace and the backend) take turns instead of
// failing on its lock: a run's plan stage starts only when no other run on
// the state has a stage running, no approved plan waits to apply to it, and
// no run created earlier waits for it; until then the run is Queued and its
// status names the run it waits for. An approved apply waits only for a
// stage in flight. A plan awaiting approval does not hold the state, so that
// a forgotten approval blocks no one: a run that applies to the state in the
// meantime makes that plan stale, and the approve subresource refuses it
// (409); should an apply slip in between approval and apply, the controller
// discards the stale plan rather than start terraform on it.

// sameState returns the other runs on run's state.
func (c *Controller) sameState(run *v1alpha1.TerraformRun) []*v1alpha1.TerraformRun {
	return runrules.SameState(c.indexer, run)
}

// inStage says whether r has a stage running, or admitted to start (a plan
// stage, or the apply of an approved plan). Called with c.slots.mu held.
func (c *Controller) inStage(r *v1alpha1.TerraformRun) bool {
	switch runrules.Phase(r) {
	case v1alpha1.RunPhasePlanning, v1alpha1.RunPhaseApplying:
		return true
	case v1alpha1.RunPhasePending, v1alpha1.RunPhaseQueued, v1alpha1.RunPhaseAwaitingApproval:
		return c.slots.admitted[runKey(r)]
	}
	return false
}

// createdBefore orders runs by creation, then by name.
func createdBefore(a, b *v1alpha1.TerraformRun) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return runKey(a) < runKey(b)
}

// stateHolder returns the run that run's stage must wait for: for a plan
// stage, one with a stage in flight, an approved plan waiting to apply, or a
// run created earlier that waits too; for an apply stage, one with a stage
// in flight. It returns nil when the state is free. Called with c.slots.mu held.
func (c *Controller) stateHolder(run *v1alpha1.TerraformRun, stage v1alpha1.StageName) *v1alpha1.TerraformRun {
	var first *v1alpha1.TerraformRun
	for _, r := range c.sameState(run) {
		switch {
		case c.inStage(r):
			return r
		case stage == v1alpha1.StageApply:
		case runrules.ApprovedToApply(r), runrules.WaitsToStart(r) && createdBefore(r, run):
			if first == nil {
				first = r
			}
		}
	}
	return first
}

// waitForState shows that run waits for holder to be done with their state:
// a Queued run before its plan, an approved one before its apply. It writes
// status only when the message changes.
func (c *Controller) waitForState(ctx context.Context, run, holder *v1alpha1.TerraformRun, stage v1alpha1.StageName) (time.Duration, error) {
	var why string
	switch {
	case c.inStage(holder):
		why = fmt.Sprintf("run %s is %s", holder.Name, stageDoing(holder))
	case runrules.ApprovedToApply(holder):
		why = fmt.Sprintf("run %s's approved plan applies first", holder.Name)
	default:
		why = fmt.Sprintf("run %s, created earlier, takes its turn first", holder.Name)
	}
	msg := fmt.Sprintf("Waiting for the state (%s): %s; this run's %s starts when it is done. Runs on one state take turns.", runrules.DescribeState(run), why, stage)
	if run.Status.Message == msg {
		return queuedRecheck, nil
	}
	run.Status.Message = msg
	if stage == v1alpha1.StagePlan {
		run.Status.Phase = v1alpha1.RunPhaseQueued
		c.setCondition(run, v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonWaitingForState, msg)
	} else {
		c.setCondition(run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonWaitingForState, msg)
	}
	return queuedRecheck, c.writeStatus(ctx, run, v1alpha1.ReasonWaitingForState, msg)
}

// stageDoing says what holder's stage in flight does.
func stageDoing(r *v1alpha1.TerraformRun) string {
	if runrules.Phase(r) == v1alpha1.RunPhaseApplying {
		return "applying to it"
	}
	if runrules.Phase(r) == v1alpha1.RunPhasePlanning {
		return "planning on it"
	}
	return "starting its plan on it"
}

// Applying names the executions that apply now, as this controller's cache
// shows them: the current apply stage of every run in phase Applying (a
// plan execution, when it carries its apply).
func (c *Controller) Applying() []string {
	runs, err := c.lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	var names []string
	for _, r := range runs {
		if runrules.Phase(r) != v1alpha1.RunPhaseApplying {
			continue
		}
		if st := runrules.CurrentStage(r, v1alpha1.StageApply); st != nil && st.Job != "" {
			names = append(names, st.Job)
		}
	}
	return names
}

// stateFreed enqueues the runs that may wait for the state run was using.
func (c *Controller) stateFreed(run *v1alpha1.TerraformRun) {
	for _, r := range c.sameState(run) {
		if runrules.WaitsToStart(r) || runrules.ApprovedToApply(r) || r.Status.Phase == v1alpha1.RunPhaseAwaitingApproval {
			c.queue.Add(runKey(r))
		}
	}
}

// startApproved starts the apply of run's approved plan once no other stage
// runs on its state. It discards the plan instead when another run applied
// to the state after the plan read it: terraform would refuse the stale
// plan, and the run says why before any engine starts.
func (c *Controller) startApproved(ctx context.Context, run *v1alpha1.TerraformRun) (time.Duration, error) {
	c.slots.mu.Lock()
	holder := c.stateHolder(run, v1alpha1.StageApply)
	var stale *v1alpha1.TerraformRun
	if holder == nil {
		stale, _ = runrules.AppliedSince(run, c.sameState(run), false)
	}
	if holder == nil && stale == nil {
		c.slots.admitted[runKey(run)] = true
	}
	c.slots.mu.Unlock()
	switch {
	case holder != nil:
		return c.waitForState(ctx, run, holder, v1alpha1.StageApply)
	case stale != nil:
		msg := fmt.Sprintf("The plan is stale: run %s applied to the same state (%s) after this plan was made, so it was not applied. Create a new run to plan again.", stale.Name, runrules.DescribeState(run))
		c.setCondition(run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonStalePlan, msg)
		c.finish(run, v1alpha1.RunPhaseDiscarded, msg)
		return 0, c.writeStatus(ctx, run, v1alpha1.ReasonStalePlan, msg)
	}
	return c.startStage(ctx, run, v1alpha1.StageApply, 1, nil)
}
