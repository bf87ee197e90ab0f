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

// ApproveREST serves terraformruns/approve: POST a TerraformRunApproval to
// approve the plan with the given digest. The approver is the authenticated
// user. Separation of duties is enforced by the TerraformRunPolicy admission
// plugin, which sees this request as a create of the approve subresource.
type ApproveREST struct {
	status statusWriter
}

var _ rest.NamedCreater = &ApproveREST{}

// New returns an empty approval.
func (r *ApproveREST) New() runtime.Object { return &terrarun.TerraformRunApproval{} }

// Destroy does nothing.
func (r *ApproveREST) Destroy() {}

// Create approves the run named name.
func (r *ApproveREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	approval, ok := obj.(*terrarun.TerraformRunApproval)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a TerraformRunApproval, got %T", obj))
	}
	if err := admitAction(ctx, "TerraformRunApproval", name, approval, validation.ValidateTerraformRunApproval(approval), createValidation); err != nil {
		return nil, err
	}
	approver := requestUser(ctx)
	if approver == "" {
		return nil, apierrors.NewForbidden(terrarun.Resource("terraformruns"), name, fmt.Errorf("approvals require an authenticated user"))
	}
	return r.status.update(ctx, name, func(run *terrarun.TerraformRun) error {
		if run.Status.Phase != terrarun.RunPhaseAwaitingApproval {
			return conflict(name, "the run is %s; a plan can be approved only while the run is AwaitingApproval", phaseOrPending(run))
		}
		if meta.IsStatusConditionTrue(run.Status.Conditions, terrarun.ConditionDiscardRequested) {
			return conflict(name, "a discard of this plan was requested; create a new run to plan again")
		}
		if run.Status.Plan == nil || run.Status.Plan.Digest != approval.PlanDigest {
			current := "none"
			if run.Status.Plan != nil {
				current = run.Status.Plan.Digest
			}
			return conflict(name, "stale plan digest: you approved %s but the run's plan is %s; review the current plan and approve its digest (status.plan.digest)", approval.PlanDigest, current)
		}
		now := metav1.Now()
		run.Status.Approval = &terrarun.ApprovalStatus{
			ApprovedBy: approver,
			ApprovedAt: &now,
			PlanDigest: approval.PlanDigest,
			Comment:    approval.Comment,
		}
		meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
			Type:               terrarun.ConditionApproved,
			Status:             metav1.ConditionTrue,
			Reason:             terrarun.ReasonApproved,
			Message:            fmt.Sprintf("Plan %s approved by %s.", shortDigest(approval.PlanDigest), approver),
			ObservedGeneration: run.Generation,
		})
		run.Status.Message = fmt.Sprintf("Approved by %s; the apply starts shortly.", approver)
		return nil
	})
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}
