package runrules

import (
	"fmt"
	"slices"
	"strings"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// RequiredApprovals is how many distinct users must approve a run's plan:
// spec.approval.requiredApprovals, at least 1, raised to the largest count
// of the policy approval rules that apply to its plan (PolicyApprovals).
func RequiredApprovals(run *v1alpha1.TerraformRun) int {
	n := max(int(run.Spec.Approval.RequiredApprovals), 1)
	for _, r := range PolicyApprovals(run) {
		n = max(n, int(r.RequiredApprovals))
	}
	return n
}

// PolicyApprovals are the policy approval rules that apply to run's plan.
func PolicyApprovals(run *v1alpha1.TerraformRun) []v1alpha1.PolicyApprovalRequirement {
	p := run.Status.Policy
	if p == nil || run.Status.Plan == nil || p.PlanDigest != run.Status.Plan.Digest {
		return nil
	}
	return p.Approvals
}

// Requested says whether user asked for run (created it, or made the server
// create it: spec.requestedBy), and how, for messages. With separation of
// duties on, whoever requested a run never approves it; when it needs more
// than one approval, their approval never counts (Approvers), whatever the
// policy says. Whoever requested a run never overrides its policies.
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
	var users []string
	for _, a := range counted(run, digest) {
		users = append(users, a.ApprovedBy)
	}
	return users
}

// counted are the approval records of Approvers, one per user.
func counted(run *v1alpha1.TerraformRun, digest string) []v1alpha1.ApprovalStatus {
	several := RequiredApprovals(run) > 1
	records := run.Status.Approvals
	if a := run.Status.Approval; a != nil {
		records = append(records[:len(records):len(records)], *a)
	}
	var out []v1alpha1.ApprovalStatus
	for _, a := range records {
		u := a.ApprovedBy
		if a.PlanDigest != digest || digest == "" || u == "" || u == v1alpha1.AutoApprover ||
			slices.ContainsFunc(out, func(o v1alpha1.ApprovalStatus) bool { return o.ApprovedBy == u }) {
			continue
		}
		if _, requested := Requested(run, u); requested && several {
			continue
		}
		out = append(out, a)
	}
	return out
}

// MissingApprovals says what the plan with digest still needs to be
// approved, one sentence per requirement not met: the count of distinct
// approvers, and each policy approval rule's count from its groups. It is
// empty once the approvals suffice.
func MissingApprovals(run *v1alpha1.TerraformRun, digest string) []string {
	records := counted(run, digest)
	var missing []string
	if got, want := len(records), RequiredApprovals(run); got < want {
		missing = append(missing, fmt.Sprintf("%d more approval(s) from other users (%d of %d)", want-got, got, want))
	}
	for _, r := range PolicyApprovals(run) {
		if len(r.Groups) == 0 {
			continue // counted in RequiredApprovals
		}
		got := 0
		for _, a := range records {
			if slices.ContainsFunc(a.Groups, func(g string) bool { return slices.Contains(r.Groups, g) }) {
				got++
			}
		}
		if want := int(r.RequiredApprovals); got < want {
			why := ""
			if r.Message != "" {
				why = ": " + r.Message
			}
			missing = append(missing, fmt.Sprintf("%d more approval(s) from group %s (%d of %d; policy %s, rule %s%s)",
				want-got, strings.Join(r.Groups, " or "), got, want, r.Policy, r.Rule, why))
		}
	}
	return missing
}

// Approved says whether run's approval records approve the plan with digest:
// its policies let it go on (PolicyCleared), and either the approvals of
// distinct users meet every requirement (MissingApprovals), recorded by the
// approve subresource, or Auto mode approved it, recorded by the run
// controller for a run in that mode whose plan no policy approval rule
// applies to. The status subresource keeps both from anyone else.
func Approved(run *v1alpha1.TerraformRun, digest string) bool {
	a := run.Status.Approval
	switch {
	case a == nil || digest == "" || a.PlanDigest != digest || a.ApprovedBy == "" || !PolicyCleared(run, digest):
		return false
	case a.ApprovedBy == v1alpha1.AutoApprover:
		return AutoApproves(run, digest)
	}
	return len(MissingApprovals(run, digest)) == 0
}

// AutoApproves says whether Auto mode approves run's plan with digest
// itself: the run is in that mode, its policies let the plan go on, and no
// policy approval rule asks for people.
func AutoApproves(run *v1alpha1.TerraformRun, digest string) bool {
	return run.Spec.Approval.Mode == v1alpha1.ApprovalModeAuto && PolicyCleared(run, digest) && len(PolicyApprovals(run)) == 0
}

// AppliesWithoutApproval says whether run may apply its plan with no one
// approving it: Auto mode, unless its policies hold the plan once it is
// checked, which is not known while it plans.
func AppliesWithoutApproval(run *v1alpha1.TerraformRun) bool {
	return run.Spec.Approval.Mode == v1alpha1.ApprovalModeAuto && run.Spec.Operation != v1alpha1.OperationPlan
}
