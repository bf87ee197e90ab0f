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

// DiscardREST serves terraformruns/discard: POST a TerraformRunDiscard to
// reject a plan that waits for approval. It records the request in the
// DiscardRequested condition; the run controller ends the run Discarded.
type DiscardREST struct {
	status statusWriter
}

var _ rest.NamedCreater = &DiscardREST{}

// New returns an empty discard request.
func (r *DiscardREST) New() runtime.Object { return &terrarun.TerraformRunDiscard{} }

// Destroy does nothing.
func (r *DiscardREST) Destroy() {}

// Create discards the run's plan.
func (r *DiscardREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	body, ok := obj.(*terrarun.TerraformRunDiscard)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a TerraformRunDiscard, got %T", obj))
	}
	if err := admitAction(ctx, "TerraformRunDiscard", name, body, validation.ValidateTerraformRunDiscard(body), createValidation); err != nil {
		return nil, err
	}
	who := requestUser(ctx)
	return r.status.update(ctx, name, func(run *terrarun.TerraformRun) error {
		if run.Status.Phase != terrarun.RunPhaseAwaitingApproval {
			hint := ""
			if run.Status.Phase == terrarun.RunPhasePlanning || run.Status.Phase == terrarun.RunPhaseApplying || run.Status.Phase == terrarun.RunPhasePending {
				hint = "; to stop a stage in flight, use cancel"
			}
			return conflict(name, "the run is %s; only a plan that is AwaitingApproval can be discarded%s", phaseOrPending(run), hint)
		}
		if run.Status.Approval != nil {
			return conflict(name, "the plan is already approved by %s and its apply is starting; to stop it, use cancel", run.Status.Approval.ApprovedBy)
		}
		if meta.IsStatusConditionTrue(run.Status.Conditions, terrarun.ConditionDiscardRequested) {
			return nil
		}
		msg := fmt.Sprintf("Plan discarded by %s.", who)
		if body.Comment != "" {
			msg = fmt.Sprintf("Plan discarded by %s: %s", who, body.Comment)
		}
		// The controller ends the run Discarded; it owns every phase change.
		meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
			Type: terrarun.ConditionDiscardRequested, Status: metav1.ConditionTrue, Reason: terrarun.ReasonDiscardRequested,
			Message: msg, ObservedGeneration: run.Generation,
		})
		run.Status.Message = msg
		return nil
	})
}
