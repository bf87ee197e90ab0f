package terraformrun

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
)

// newCancelREST serves terraformruns/cancel: POST a TerraformRunCancel to stop
// the stage in flight. It records the request in the CancelRequested
// condition; the run controller stops the stage gracefully, or ends a run that
// has not started one, and the run ends Canceled.
func newCancelREST(status statusWriter) *actionREST[*terrarun.TerraformRunCancel] {
	return &actionREST[*terrarun.TerraformRunCancel]{
		status:   status,
		kind:     "TerraformRunCancel",
		newBody:  func() *terrarun.TerraformRunCancel { return &terrarun.TerraformRunCancel{} },
		validate: validation.ValidateTerraformRunCancel,
		record:   cancel,
	}
}

// cancel records who asked to cancel the run.
func cancel(run *terrarun.TerraformRun, body *terrarun.TerraformRunCancel, u user.Info) error {
	who := u.GetName()
	msg := fmt.Sprintf("Canceled by %s.", who)
	if body.Comment != "" {
		msg = fmt.Sprintf("Canceled by %s: %s", who, body.Comment)
	}
	switch run.Status.Phase {
	case "", terrarun.RunPhasePending, terrarun.RunPhaseQueued, terrarun.RunPhasePlanning, terrarun.RunPhaseApplying:
		if meta.IsStatusConditionTrue(run.Status.Conditions, terrarun.ConditionCancelRequested) {
			return nil
		}
		// The controller stops the running stage, or ends a run that has not
		// started one; it owns every phase change.
		meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
			Type: terrarun.ConditionCancelRequested, Status: metav1.ConditionTrue, Reason: terrarun.ReasonCancelRequested,
			Message: msg, ObservedGeneration: run.Generation,
		})
		run.Status.Message = msg + " Stopping the running stage."
		if p := phase(run); p == v1alpha1.RunPhasePending || p == v1alpha1.RunPhaseQueued {
			run.Status.Message = msg + " The run ends before it starts."
		}
		return nil
	case terrarun.RunPhaseAwaitingApproval:
		return conflict(run.Name, "the run is AwaitingApproval and no stage is running; to reject the plan, use discard")
	default:
		return conflict(run.Name, "the run already ended %s; there is nothing to cancel", run.Status.Phase)
	}
}
