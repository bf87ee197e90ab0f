package terraformrun

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
	"github.com/terrarun/terrarun/pkg/runrules"
)

// newApproveREST serves terraformruns/approve: POST a TerraformRunApproval to
// approve the plan with the given digest. The approver is the authenticated
// user. Separation of duties is enforced by the TerraformRunPolicy admission
// plugin, which sees this request as a create of the approve subresource.
// Before the approval is recorded, the other runs on the run's state, as
// runsOnState (an informer) shows them, must leave its plan current
// (stateUnchanged); the run controller still decides before the apply.
func newApproveREST(status statusWriter, runsOnState RunsOnState) *actionREST[*terrarun.TerraformRunApproval] {
	return &actionREST[*terrarun.TerraformRunApproval]{
		status:   status,
		kind:     "TerraformRunApproval",
		newBody:  func() *terrarun.TerraformRunApproval { return &terrarun.TerraformRunApproval{} },
		validate: validation.ValidateTerraformRunApproval,
		record:   approve,
		check: func(ctx context.Context, run *terrarun.TerraformRun) error {
			return stateUnchanged(ctx, run, runsOnState)
		},
	}
}

// approve records approver's approval of the run's plan. The plan is approved
// once the approvals of distinct users meet every requirement
// (runrules.MissingApprovals: spec.approval.requiredApprovals, and the
// policy approval rules that apply); until then each approval is only listed
// in status.approvals. A plan a policy denies, or holds for an override, is
// not approved.
func approve(run *terrarun.TerraformRun, approval *terrarun.TerraformRunApproval, u user.Info) error {
	approver := u.GetName()
	v := runrules.FromInternal(run)
	if a := run.Status.Approval; a != nil {
		return conflict(run.Name, "the plan is already approved by %s (%s); the run is %s", approvers(run, a.PlanDigest), shortDigest(a.PlanDigest), runrules.Phase(v))
	}
	if p := run.Status.Plan; p != nil {
		if denied := runrules.PolicyDenials(v, p.Digest); len(denied) > 0 {
			return conflict(run.Name, "plan %s is denied by policy: %s; change the configuration and create a new run",
				shortDigest(p.Digest), runrules.DescribeResults(denied))
		}
	}
	if run.Status.Phase != terrarun.RunPhaseAwaitingApproval {
		return conflict(run.Name, "the run is %s; a plan can be approved only while the run is AwaitingApproval", runrules.Phase(v))
	}
	if meta.IsStatusConditionTrue(run.Status.Conditions, terrarun.ConditionDiscardRequested) {
		return conflict(run.Name, "a discard of this plan was requested; create a new run to plan again")
	}
	if run.DeletionTimestamp != nil {
		return conflict(run.Name, "the run is being deleted; its plan will not be applied; create a new run to plan again")
	}
	if err := currentPlan(run, approval.PlanDigest, "approved", "review the current plan and approve its digest (status.plan.digest)"); err != nil {
		return err
	}
	if pending := runrules.PendingOverrides(v, approval.PlanDigest); len(pending) > 0 {
		return conflict(run.Name, "plan %s fails soft-mandatory policy: %s; it can be approved once a user allowed to override (create on terraformruns/override) overrides it, with a justification",
			shortDigest(approval.PlanDigest), runrules.DescribeResults(pending))
	}
	if msg, waiting := runrules.TasksHold(v); waiting {
		return conflict(run.Name, "plan %s waits for its run tasks: %s It can be approved once they have answered (status.tasks shows them)",
			shortDigest(approval.PlanDigest), msg)
	}
	required := runrules.RequiredApprovals(v)
	if how, ok := runrules.Requested(v, approver); ok && required > 1 {
		return apierrors.NewForbidden(terrarun.Resource("terraformruns/approve"), run.Name, fmt.Errorf(
			"%s %s, and it needs %d approvals from other users: the approval of whoever requested a run never counts", approver, how, required))
	}
	for _, a := range run.Status.Approvals {
		if a.ApprovedBy == approver && a.PlanDigest == approval.PlanDigest {
			return conflict(run.Name, "%s already approved plan %s; it still needs %s",
				approver, shortDigest(a.PlanDigest), strings.Join(runrules.MissingApprovals(v, a.PlanDigest), " and "))
		}
	}
	now := metav1.Now()
	record := terrarun.ApprovalStatus{
		ApprovedBy: approver,
		ApprovedAt: &now,
		PlanDigest: approval.PlanDigest,
		Comment:    approval.Comment,
		Groups:     slices.Clone(u.GetGroups()),
	}
	run.Status.Approvals = append(run.Status.Approvals, record)
	if missing := runrules.MissingApprovals(runrules.FromInternal(run), approval.PlanDigest); len(missing) > 0 {
		msg := fmt.Sprintf("Plan %s is approved by %s; it still needs %s.",
			shortDigest(approval.PlanDigest), orNobody(approvers(run, approval.PlanDigest)), strings.Join(missing, " and "))
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

// currentPlan refuses, with 409, an action on a plan digest that is not the
// run's recorded plan; did is what the user did ("approved"), and what the
// hint to do instead.
func currentPlan(run *terrarun.TerraformRun, digest, did, what string) error {
	if run.Status.Plan != nil && run.Status.Plan.Digest == digest {
		return nil
	}
	if run.Status.Plan == nil || run.Status.Plan.Digest == "" {
		return conflict(run.Name, "the run has no plan yet, so %s is no plan of it; %s once status.plan.digest is set", digest, what)
	}
	return conflict(run.Name, "plan digest mismatch: you %s %s but the run's plan is %s; %s", did, digest, run.Status.Plan.Digest, what)
}

// orNobody is users, or "nobody yet" when it is empty.
func orNobody(users string) string {
	if users == "" {
		return "nobody whose approval counts yet"
	}
	return users
}

// approvers lists the users whose approvals of digest count, for messages.
func approvers(run *terrarun.TerraformRun, digest string) string {
	return strings.Join(runrules.Approvers(runrules.FromInternal(run), digest), ", ")
}

// stateUnchanged refuses an approval of run's plan when the Terraform state
// it was made on has changed since, or is about to: another run on the same
// state (runrules.StateKey) started applying after the plan read the state
// (runrules.AppliedSince), or applies now, has an approved plan waiting to
// apply, or plans with approval mode Auto (runrules.Busy). A stale plan
// would make terraform refuse the apply; refusing it here says so before any
// apply starts.
func stateUnchanged(ctx context.Context, run *terrarun.TerraformRun, runsOnState RunsOnState) error {
	v := runrules.FromInternal(run)
	if _, ok := runrules.PlanStart(v); !ok || runsOnState == nil {
		return nil
	}
	others, err := runsOnState(ctx, v)
	if err != nil {
		return err
	}
	if o, st := runrules.AppliedSince(v, others, false); o != nil {
		return conflict(run.Name, "the plan is stale: run %s applied to the same state (%s) at %s, after this plan was made; create a new run to plan again",
			o.Name, runrules.DescribeState(v), startedAt(st))
	}
	if o, how := runrules.Busy(v, others); o != nil {
		return conflict(run.Name, "%s, which may make this plan stale; wait until it ends, then approve again (a stale plan is refused) or create a new run", how)
	}
	return nil
}

// startedAt says when st started, for messages.
func startedAt(st *v1alpha1.StageStatus) string {
	if st.StartTime == nil {
		return "an unrecorded time"
	}
	return st.StartTime.UTC().Format(time.RFC3339)
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}
