package notification

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runrules"
)

// Event is something that happened to a run or a workspace that a
// notification can deliver.
type Event struct {
	// ID identifies the event: the same for every notification, replica
	// and attempt, so that a receiver drops what it got already.
	ID string
	// Trigger is what happened.
	Trigger v1alpha1.NotificationTrigger
	// Time is when it happened.
	Time time.Time
	// Run is the run it happened to; nil for Drifted.
	Run *v1alpha1.TerraformRun
	// Workspace is the workspace it happened to (Drifted), or the run's
	// workspace; nil for a run no workspace owns.
	Workspace *v1alpha1.TerraformWorkspace
}

// eventID derives an event's ID from what it is of (a UID), its trigger,
// and what tells it from an earlier event of the same trigger.
func eventID(uid string, trigger v1alpha1.NotificationTrigger, discriminator string) string {
	sum := sha256.Sum256([]byte(uid + "\x00" + string(trigger) + "\x00" + discriminator))
	return "evt_" + hex.EncodeToString(sum[:16])
}

// RunEvents are the events run has had, by what its status says now: a
// plan waiting for an approval or an override, a plan denied by policy, an
// apply started, and the run's end. ws is the workspace that owns run, or
// nil.
func RunEvents(run *v1alpha1.TerraformRun, ws *v1alpha1.TerraformWorkspace) []Event {
	var out []Event
	add := func(trigger v1alpha1.NotificationTrigger, at *metav1.Time, discriminator string) {
		if at == nil {
			return
		}
		out = append(out, Event{ID: eventID(string(run.UID), trigger, discriminator), Trigger: trigger, Time: at.Time, Run: run, Workspace: ws})
	}
	phase := runrules.Phase(run)
	if p := run.Status.Plan; p != nil && p.Digest != "" {
		policy := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionPolicyChecked)
		if policy != nil && policy.Status == metav1.ConditionFalse {
			switch policy.Reason {
			case v1alpha1.ReasonPolicyDenied:
				add(v1alpha1.TriggerPolicyFailed, &policy.LastTransitionTime, p.Digest)
			case v1alpha1.ReasonPolicyOverrideRequired:
				if phase == v1alpha1.RunPhaseAwaitingApproval {
					add(v1alpha1.TriggerNeedsOverride, &policy.LastTransitionTime, p.Digest)
				}
			}
		}
		approved := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionApproved)
		if phase == v1alpha1.RunPhaseAwaitingApproval && run.Status.Approval == nil && approved != nil &&
			approved.Reason == v1alpha1.ReasonAwaitingApproval && runrules.PolicyCleared(run, p.Digest) {
			// Cleared after an override, it waits from the override on.
			at := approved.LastTransitionTime
			if policy != nil && policy.LastTransitionTime.After(at.Time) {
				at = policy.LastTransitionTime
			}
			add(v1alpha1.TriggerNeedsApproval, &at, p.Digest)
		}
	}
	for i := range run.Status.Stages {
		if st := &run.Status.Stages[i]; st.Name == v1alpha1.StageApply && st.StartTime != nil {
			add(v1alpha1.TriggerApplying, st.StartTime, "")
			break
		}
	}
	switch phase {
	case v1alpha1.RunPhaseSucceeded:
		add(v1alpha1.TriggerSucceeded, run.Status.CompletionTime, "")
	case v1alpha1.RunPhaseFailed:
		add(v1alpha1.TriggerFailed, run.Status.CompletionTime, "")
	}
	return out
}

// WorkspaceEvents are the events ws has had: its latest drift, while its
// Drifted condition is True.
func WorkspaceEvents(ws *v1alpha1.TerraformWorkspace) []Event {
	c := meta.FindStatusCondition(ws.Status.Conditions, v1alpha1.WorkspaceConditionDrifted)
	if c == nil || c.Status != metav1.ConditionTrue {
		return nil
	}
	return []Event{{
		ID:        eventID(string(ws.UID), v1alpha1.TriggerDrifted, c.LastTransitionTime.UTC().Format(time.RFC3339)),
		Trigger:   v1alpha1.TriggerDrifted,
		Time:      c.LastTransitionTime.Time,
		Workspace: ws,
	}}
}
