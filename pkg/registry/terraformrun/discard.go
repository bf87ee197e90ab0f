package terraformrun

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
)

// newDiscardREST serves terraformruns/discard: POST a TerraformRunDiscard to
// reject a plan that waits for approval. It records the request in the
// DiscardRequested condition; the run controller ends the run Discarded.
func newDiscardREST(status statusWriter) *actionREST[*terrarun.TerraformRunDiscard] {
	return &actionREST[*terrarun.TerraformRunDiscard]{
		status:   status,
		kind:     "TerraformRunDiscard",
		newBody:  func() *terrarun.TerraformRunDiscard { return &terrarun.TerraformRunDiscard{} },
		validate: validation.ValidateTerraformRunDiscard,
		record:   discard,
	}
}

// discard records who asked to discard the run's plan.
func discard(run *terrarun.TerraformRun, body *terrarun.TerraformRunDiscard, u user.Info) error {
	who := u.GetName()
	if run.Status.Phase != terrarun.RunPhaseAwaitingApproval {
		hint := ""
		if run.Status.Phase == terrarun.RunPhasePlanning || run.Status.Phase == terrarun.RunPhaseApplying || run.Status.Phase == terrarun.RunPhasePending || run.Status.Phase == terrarun.RunPhaseQueued {
			hint = "; to stop a stage in flight, use cancel"
		}
		return conflict(run.Name, "the run is %s; only a plan that is AwaitingApproval can be discarded%s", phase(run), hint)
	}
	if run.Status.Approval != nil {
		return conflict(run.Name, "the plan is already approved by %s and its apply is starting; to stop it, use cancel", run.Status.Approval.ApprovedBy)
	}
	if meta.IsStatusConditionTrue(run.Status.Conditions, terrarun.ConditionDiscardRequested) {
		return nil
	}
	msg := fmt.Sprintf("Plan discarded by %s.", who)
	if body.Comment != "" {
		msg = fmt.Sprintf("Plan discarded by %s: %s", who, body.Comment)
	}
	// The controller ends the run Discarded; it owns every phase change.
	// The reason, when the body gives one, is the run's final reason.
	reason := terrarun.ReasonDiscardRequested
	if body.Reason != "" {
		reason = body.Reason
	}
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
		Type: terrarun.ConditionDiscardRequested, Status: metav1.ConditionTrue, Reason: reason,
		Message: msg, ObservedGeneration: run.Generation,
	})
	run.Status.Message = msg
	return nil
}
