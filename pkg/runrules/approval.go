package runrules

import (
	"slices"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// RequiredApprovals is how many distinct users must approve a Manual run's
// plan: spec.approval.requiredApprovals, at least 1.
func RequiredApprovals(run *v1alpha1.TerraformRun) int {
	return max(int(run.Spec.Approval.RequiredApprovals), 1)
}

// Requested says whether user asked for run (created it, or made the server
// create it: spec.requestedBy), and how, for messages. With separation of
// duties on, whoever requested a run never approves it; when it needs more
// than one approval, their approval never counts (Approvers), whatever the
// policy says.
func Requested(run *v1alpha1.TerraformRun, user string) (how string, ok bool) {
	if c := run.Spec.Creator; c != nil && c.Username == user {
		return "created this run", true
	}
	if slices.Contains(run.Spec.RequestedBy, user) {
		return "requested this run (spec.requestedBy: deleted its workspace, or asked for its rerun)", true
	}
	return "", false
}

// Approvers lists, in the order they approved, the distinct users whose
// approvals of the plan with digest count: every one in status.approvals
// (and status.approval, which runs approved before status.approvals existed
// have alone), except AutoApprover and, when more than one approval is
// required, whoever requested the run.
func Approvers(run *v1alpha1.TerraformRun, digest string) []string {
	several := RequiredApprovals(run) > 1
	records := run.Status.Approvals
	if a := run.Status.Approval; a != nil {
		records = append(records[:len(records):len(records)], *a)
	}
	var users []string
	for _, a := range records {
		u := a.ApprovedBy
		if a.PlanDigest != digest || digest == "" || u == "" || u == v1alpha1.AutoApprover || slices.Contains(users, u) {
			continue
		}
		if _, requested := Requested(run, u); requested && several {
			continue
		}
		users = append(users, u)
	}
	return users
}

// Approved says whether run's approval records approve the plan with digest:
// the approvals of RequiredApprovals distinct users (Approvers), recorded by
// the approve subresource, or Auto mode's, recorded by the run controller
// for a run in that mode. The status subresource keeps both from anyone
// else.
func Approved(run *v1alpha1.TerraformRun, digest string) bool {
	a := run.Status.Approval
	switch {
	case a == nil || digest == "" || a.PlanDigest != digest || a.ApprovedBy == "":
		return false
	case a.ApprovedBy == v1alpha1.AutoApprover:
		return run.Spec.Approval.Mode == v1alpha1.ApprovalModeAuto
	}
	return len(Approvers(run, digest)) >= RequiredApprovals(run)
}
