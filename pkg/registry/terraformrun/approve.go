package terraformrun

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
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
		check:    status.stateUnchanged,
	}
}

// approve records approver's approval of the run's plan. The plan is approved
// once spec.approval.requiredApprovals distinct users have approved its
// digest; until then each approval is only listed in status.approvals.
func approve(run *terrarun.TerraformRun, approval *terrarun.TerraformRunApproval, approver string) error {
	if a := run.Status.Approval; a != nil {
		return conflict(run.Name, "the plan is already approved by %s (%s); the run is %s", approvers(run, a.PlanDigest), shortDigest(a.PlanDigest), phaseOrPending(run))
	}
	if run.Status.Phase != terrarun.RunPhaseAwaitingApproval {
		return conflict(run.Name, "the run is %s; a plan can be approved only while the run is AwaitingApproval", phaseOrPending(run))
	}
	if meta.IsStatusConditionTrue(run.Status.Conditions, terrarun.ConditionDiscardRequested) {
		return conflict(run.Name, "a discard of this plan was requested; create a new run to plan again")
	}
	if run.DeletionTimestamp != nil {
		return conflict(run.Name, "the run is being deleted; its plan will not be applied; create a new run to plan again")
	}
	if run.Status.Plan == nil || run.Status.Plan.Digest != approval.PlanDigest {
		current := "none"
		if run.Status.Plan != nil {
			current = run.Status.Plan.Digest
		}
		return conflict(run.Name, "stale plan digest: you approved %s but the run's plan is %s; review the current plan and approve its digest (status.plan.digest)", approval.PlanDigest, current)
	}
	required := terrarun.RequiredApprovals(run)
	if how, ok := terrarun.Requested(run, approver); ok && required > 1 {
		return apierrors.NewForbidden(terrarun.Resource("terraformruns/approve"), run.Name, fmt.Errorf(
			"%s %s, and it needs %d approvals from other users: the approval of whoever requested a run never counts", approver, how, required))
	}
	for _, a := range run.Status.Approvals {
		if a.ApprovedBy == approver && a.PlanDigest == approval.PlanDigest {
			return conflict(run.Name, "%s already approved plan %s; it needs %d distinct approvals, %d so far (%s)",
				approver, shortDigest(a.PlanDigest), required, len(terrarun.Approvers(run, a.PlanDigest)), approvers(run, a.PlanDigest))
		}
	}
	now := metav1.Now()
	record := terrarun.ApprovalStatus{
		ApprovedBy: approver,
		ApprovedAt: &now,
		PlanDigest: approval.PlanDigest,
		Comment:    approval.Comment,
	}
	run.Status.Approvals = append(run.Status.Approvals, record)
	got := len(terrarun.Approvers(run, approval.PlanDigest))
	if got < required {
		msg := fmt.Sprintf("Plan %s has %d of %d approvals (%s); waiting for %d more from other users.",
			shortDigest(approval.PlanDigest), got, required, approvers(run, approval.PlanDigest), required-got)
		meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
			Type:               terrarun.ConditionApproved,
			Status:             metav1.ConditionFalse,
			Reason:             terrarun.ReasonAwaitingApproval,
			Message:            msg,
			ObservedGeneration: run.Generation,
		})
		run.Status.Message = msg
		return nil
	}
	run.Status.Approval = &record
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
		Type:               terrarun.ConditionApproved,
		Status:             metav1.ConditionTrue,
		Reason:             terrarun.ReasonApproved,
		Message:            fmt.Sprintf("Plan %s approved by %s.", shortDigest(approval.PlanDigest), approvers(run, approval.PlanDigest)),
		ObservedGeneration: run.Generation,
	})
	run.Status.Message = fmt.Sprintf("Approved by %s; the apply starts shortly.", approvers(run, approval.PlanDigest))
	return nil
}

// approvers lists the users whose approvals of digest count, for messages.
func approvers(run *terrarun.TerraformRun, digest string) string {
	return strings.Join(terrarun.Approvers(run, digest), ", ")
}

// stateUnchanged refuses an approval of run's plan when the Terraform state
// it was made on has changed since, or is about to: another run on the same
// state (terrarun.StateKey) started applying after the plan read the state,
// is applying now, has an approved plan waiting to apply, or plans with
// approval mode Auto. A stale plan would make terraform refuse the apply;
// refusing it here says so before any apply starts.
func (w statusWriter) stateUnchanged(ctx context.Context, run *terrarun.TerraformRun) error {
	since, ok := planStart(run)
	if !ok {
		return nil
	}
	obj, err := w.store.List(ctx, &metainternalversion.ListOptions{})
	if err != nil {
		return err
	}
	key, state := terrarun.StateKey(run), terrarun.DescribeState(run)
	var busy error
	for i := range obj.(*terrarun.TerraformRunList).Items {
		o := &obj.(*terrarun.TerraformRunList).Items[i]
		if o.UID == run.UID || terrarun.StateKey(o) != key {
			continue
		}
		for _, st := range o.Status.Stages {
			if st.Name == terrarun.StageApply && terrarun.ChangedStateAfter(terrarun.StageOrder{Start: st.StartTime, End: st.CompletionTime, Revision: st.StartRevision}, since) {
				return conflict(run.Name, "the plan is stale: run %s applied to the same state (%s) at %s, after this plan was made; create a new run to plan again",
					o.Name, state, st.StartTime.UTC().Format(time.RFC3339))
			}
		}
		switch {
		case busy != nil:
		case o.Status.Phase == terrarun.RunPhaseApplying:
			busy = conflict(run.Name, "run %s is applying to the same state (%s) now, which may make this plan stale; wait until it ends, then approve again (a stale plan is refused) or create a new run", o.Name, state)
		case o.Status.Phase == terrarun.RunPhaseAwaitingApproval && o.Status.Approval != nil && o.DeletionTimestamp == nil:
			busy = conflict(run.Name, "run %s's approved plan applies to the same state (%s) first, which may make this plan stale; wait until it ends, then approve again (a stale plan is refused) or create a new run", o.Name, state)
		case o.Status.Phase == terrarun.RunPhasePlanning && o.Spec.Approval.Mode == terrarun.ApprovalModeAuto && o.Spec.Operation != terrarun.OperationPlan:
			busy = conflict(run.Name, "run %s is planning on the same state (%s) and applies without approval, which may make this plan stale; wait until it ends, then approve again (a stale plan is refused) or create a new run", o.Name, state)
		}
	}
	return busy
}

// planStart places run's last plan stage, whose plan read the state when it
// started, among the stages on its state.
func planStart(run *terrarun.TerraformRun) (terrarun.StageOrder, bool) {
	for i := len(run.Status.Stages) - 1; i >= 0; i-- {
		if st := run.Status.Stages[i]; st.Name == terrarun.StagePlan && st.StartTime != nil {
			return terrarun.StageOrder{Start: st.StartTime, End: st.CompletionTime, Revision: st.StartRevision}, true
		}
	}
	return terrarun.StageOrder{}, false
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}
