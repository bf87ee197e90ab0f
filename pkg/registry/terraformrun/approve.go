package terraformrun

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
)

// newApproveREST serves terraformruns/approve: POST a TerraformRunApproval to
// approve the plan with the given digest. The approver is the authenticated
// user. Separation of duties is enforced by the TerraformRunPolicy admission
// plugin, which sees this request as a create of the approve subresource.
func newApproveREST(status statusWriter) *actionREST[*terrarun.TerraformRunApproval] {
	return &actionREST[*terrarun.TerraformRunApproval]{
		status:   status,
		kind:     "TerraformRunApproval",
		newBody:  func() *terrarun.TerraformRunApproval { return &terrarun.TerraformRunApproval{} },
		validate: validation.ValidateTerraformRunApproval,
		record:   approve,
	}
}

// approve records approval of the run's plan by approver.
func approve(run *terrarun.TerraformRun, approval *terrarun.TerraformRunApproval, approver string) error {
	if a := run.Status.Approval; a != nil {
		return conflict(run.Name, "the plan is already approved by %s (%s); the run is %s", a.ApprovedBy, shortDigest(a.PlanDigest), phaseOrPending(run))
	}
	if run.Status.Phase != terrarun.RunPhaseAwaitingApproval {
		return conflict(run.Name, "the run is %s; a plan can be approved only while the run is AwaitingApproval", phaseOrPending(run))
	}
	if meta.IsStatusConditionTrue(run.Status.Conditions, terrarun.ConditionDiscardRequested) {
		return conflict(run.Name, "a discard of this plan was requested; create a new run to plan again")
	}
	if run.Status.Plan == nil || run.Status.Plan.Digest != approval.PlanDigest {
		current := "none"
		if run.Status.Plan != nil {
			current = run.Status.Plan.Digest
		}
		return conflict(run.Name, "stale plan digest: you approved %s but the run's plan is %s; review the current plan and approve its digest (status.plan.digest)", approval.PlanDigest, current)
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
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}
