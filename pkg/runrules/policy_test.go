package runrules

import (
	"strings"
	"testing"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

func policyRun(results []v1alpha1.PolicyResult, approvals []v1alpha1.PolicyApprovalRequirement) *v1alpha1.TerraformRun {
	run := &v1alpha1.TerraformRun{}
	run.Spec.Creator = &v1alpha1.Creator{Username: "alice"}
	run.Status.Plan = &v1alpha1.PlanSummary{Digest: "sha256:p"}
	run.Status.Policy = &v1alpha1.PolicyStatus{PlanDigest: "sha256:p", Policies: []v1alpha1.CheckedPolicy{{Name: "pol", ResourceVersion: "1"}},
		Results: results, Approvals: approvals}
	return run
}

func result(e v1alpha1.Enforcement, o v1alpha1.PolicyOutcome) v1alpha1.PolicyResult {
	return v1alpha1.PolicyResult{Policy: "pol", Validation: string(e), Enforcement: e, Outcome: o}
}

// TestPolicyVerdicts: what each enforcement's failure does to a plan, and
// that an override covers only the failures it names, of its digest.
func TestPolicyVerdicts(t *testing.T) {
	hard, soft, advisory := v1alpha1.EnforcementHardMandatory, v1alpha1.EnforcementSoftMandatory, v1alpha1.EnforcementAdvisory
	for _, c := range []struct {
		name    string
		run     *v1alpha1.TerraformRun
		cleared bool
		verdict string
	}{
		{"passed", policyRun([]v1alpha1.PolicyResult{result(hard, v1alpha1.PolicyPassed)}, nil), true, "Passed"},
		{"advisory failed", policyRun([]v1alpha1.PolicyResult{result(advisory, v1alpha1.PolicyFailed)}, nil), true, "Advisory"},
		{"hard error fails closed", policyRun([]v1alpha1.PolicyResult{result(hard, v1alpha1.PolicyError)}, nil), false, "Denied"},
		{"soft failed", policyRun([]v1alpha1.PolicyResult{result(soft, v1alpha1.PolicyFailed)}, nil), false, "Held"},
		{"not checked", &v1alpha1.TerraformRun{}, true, "-"},
	} {
		digest := ""
		if c.run.Status.Plan != nil {
			digest = c.run.Status.Plan.Digest
		}
		if got := PolicyCleared(c.run, digest); got != c.cleared {
			t.Errorf("%s: cleared %v, want %v", c.name, got, c.cleared)
		}
		if got := PolicyVerdict(c.run); got != c.verdict {
			t.Errorf("%s: verdict %q, want %q", c.name, got, c.verdict)
		}
	}

	run := policyRun([]v1alpha1.PolicyResult{result(soft, v1alpha1.PolicyFailed)}, nil)
	run.Status.Policy.Overrides = []v1alpha1.PolicyOverride{{OverriddenBy: "olga", PlanDigest: "sha256:other", Validations: []string{"pol/SoftMandatory"}}}
	if PolicyCleared(run, "sha256:p") {
		t.Error("an override of another digest cleared the plan")
	}
	run.Status.Policy.Overrides[0].PlanDigest = "sha256:p"
	if !PolicyCleared(run, "sha256:p") || PolicyVerdict(run) != "Overridden" {
		t.Errorf("an override of the plan's failure: cleared %v, verdict %q", PolicyCleared(run, "sha256:p"), PolicyVerdict(run))
	}
	run.Status.Policy.PlanDigest = "sha256:old"
	if PolicyCleared(run, "sha256:p") || PolicyVerdict(run) != "Denied" {
		t.Error("a policy record of another plan cleared this one")
	}
}

// TestPolicyApprovalRules: a rule raises the count, and counts only its
// groups' approvers; the requester never counts when several are needed;
// an Auto approval is no approval while a rule applies.
func TestPolicyApprovalRules(t *testing.T) {
	run := policyRun(nil, []v1alpha1.PolicyApprovalRequirement{{Policy: "pol", Rule: "sre", RequiredApprovals: 2, Groups: []string{"sre"}}})
	approve := func(user string, groups ...string) {
		run.Status.Approvals = append(run.Status.Approvals, v1alpha1.ApprovalStatus{ApprovedBy: user, PlanDigest: "sha256:p", Groups: groups})
	}
	if RequiredApprovals(run) != 2 {
		t.Errorf("required %d, want the rule's 2", RequiredApprovals(run))
	}
	approve("alice", "sre") // the creator
	approve("bob")
	approve("sam", "sre")
	missing := MissingApprovals(run, "sha256:p")
	if len(missing) != 1 || !strings.Contains(missing[0], "1 more approval(s) from group sre (1 of 2") {
		t.Errorf("after alice (creator), bob and sam: missing %q", missing)
	}
	approve("sue", "sre")
	if missing := MissingApprovals(run, "sha256:p"); len(missing) != 0 {
		t.Errorf("after sue: missing %q", missing)
	}
	run.Status.Approval = &run.Status.Approvals[3]
	if !Approved(run, "sha256:p") {
		t.Error("not approved with every requirement met")
	}
	run.Spec.Approval.Mode = v1alpha1.ApprovalModeAuto
	run.Status.Approval = &v1alpha1.ApprovalStatus{ApprovedBy: v1alpha1.AutoApprover, PlanDigest: "sha256:p"}
	if Approved(run, "sha256:p") {
		t.Error("Auto's approval counted while a policy approval rule applies")
	}
}
