package terraformrun

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
)

// CancelREST serves terraformruns/cancel: POST a TerraformRunCancel to stop
// the stage in flight. It records the request in the CancelRequested
// condition; the run controller stops the stage gracefully, or ends a run that
// has not started one, and the run ends Canceled.
type CancelREST struct {
	status statusWriter
}

var _ rest.NamedCreater = &CancelREST{}

// New returns an empty cancel request.
func (r *CancelREST) New() runtime.Object { return &terrarun.TerraformRunCancel{} }

// Destroy does nothing.
func (r *CancelREST) Destroy() {}

// Create requests cancellation of the run.
func (r *CancelREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	body, ok := obj.(*terrarun.TerraformRunCancel)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a TerraformRunCancel, got %T", obj))
	}
	if err := admitAction(ctx, "TerraformRunCancel", name, body, validation.ValidateTerraformRunCancel(body), createValidation); err != nil {
		return nil, err
	}
	who := requestUser(ctx)
	return r.status.update(ctx, name, func(run *terrarun.TerraformRun) error {
		msg := fmt.Sprintf("Canceled by %s.", who)
		if body.Comment != "" {
			msg = fmt.Sprintf("Canceled by %s: %s", who, body.Comment)
		}
		switch run.Status.Phase {
		case "", terrarun.RunPhasePending, terrarun.RunPhasePlanning, terrarun.RunPhaseApplying:
			if meta.IsStatusConditionTrue(run.Status.Conditions, terrarun.ConditionCancelRequested) {
				return nil
			}
			// The controller stops the running stage, or ends a run that has
			// not started one; it owns every phase change.
			meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
				Type: terrarun.ConditionCancelRequested, Status: metav1.ConditionTrue, Reason: terrarun.ReasonCancelRequested,
				Message: msg, ObservedGeneration: run.Generation,
			})
			run.Status.Message = msg + " Stopping the running stage."
			if phaseOrPending(run) == terrarun.RunPhasePending {
				run.Status.Message = msg + " The run ends before it starts."
			}
			return nil
		case terrarun.RunPhaseAwaitingApproval:
			return conflict(name, "the run is AwaitingApproval and no stage is running; to reject the plan, use discard")
		default:
			return conflict(name, "the run already ended %s; there is nothing to cancel", run.Status.Phase)
		}
	})
}
