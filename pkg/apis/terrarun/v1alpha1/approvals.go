package v1alpha1

// RequiredApprovals is how many distinct users must approve a Manual run's
// plan: spec.approval.requiredApprovals, at least 1.
func RequiredApprovals(run *TerraformRun) int {
	return max(int(run.Spec.Approval.RequiredApprovals), 1)
}

// Approvers lists, in the order they approved, the distinct users whose
// approvals of the plan with digest count: every one in status.approvals (and
// status.approval, which runs approved before status.approvals existed have
// alone), except AutoApprover and, when more than one approval is required,
// the run's creator.
func Approvers(run *TerraformRun, digest string) []string {
	creator := ""
	if run.Spec.Creator != nil && RequiredApprovals(run) > 1 {
		creator = run.Spec.Creator.Username
	}
	records := run.Status.Approvals
	if a := run.Status.Approval; a != nil {
		records = append(records[:len(records):len(records)], *a)
	}
	var users []string
	seen := map[string]bool{}
	for _, a := range records {
		u := a.ApprovedBy
		if a.PlanDigest != digest || digest == "" || u == "" || u == AutoApprover || u == creator || seen[u] {
			continue
		}
		seen[u] = true
		users = append(users, u)
	}
	return users
}
