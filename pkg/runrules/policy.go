package runrules

import (
	"fmt"
	"slices"
	"strings"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// policyFor is the policy record of the plan with digest: nil when the plan
// was not checked (it has no changes, or was recorded before policies
// existed); ok is false when the record is of another plan, which never
// clears.
func policyFor(run *v1alpha1.TerraformRun, digest string) (p *v1alpha1.PolicyStatus, ok bool) {
	p = run.Status.Policy
	return p, p == nil || p.PlanDigest == digest
}

// PolicyDenials are the results that deny the plan with digest: the
// hard-mandatory validations that failed or could not be evaluated.
func PolicyDenials(run *v1alpha1.TerraformRun, digest string) []v1alpha1.PolicyResult {
	p, _ := policyFor(run, digest)
	if p == nil {
		return nil
	}
	var out []v1alpha1.PolicyResult
	for _, r := range p.Results {
		if r.Enforcement == v1alpha1.EnforcementHardMandatory && r.Outcome != v1alpha1.PolicyPassed {
			out = append(out, r)
		}
	}
	return out
}

// PendingOverrides are the soft-mandatory validations of the plan with
// digest that failed (or could not be evaluated) and that no override of
// that plan covers yet.
func PendingOverrides(run *v1alpha1.TerraformRun, digest string) []v1alpha1.PolicyResult {
	p, _ := policyFor(run, digest)
	if p == nil {
		return nil
	}
	var out []v1alpha1.PolicyResult
	for _, r := range p.Results {
		if r.Enforcement != v1alpha1.EnforcementSoftMandatory || r.Outcome == v1alpha1.PolicyPassed {
			continue
		}
		name := ResultName(r)
		if !slices.ContainsFunc(p.Overrides, func(o v1alpha1.PolicyOverride) bool {
			return o.PlanDigest == digest && slices.Contains(o.Validations, name)
		}) {
			out = append(out, r)
		}
	}
	return out
}

// PolicyCleared says whether the policies let the plan with digest go on to
// be approved and applied: none denies it and every soft-mandatory failure
// is overridden. A plan that was not checked is cleared.
func PolicyCleared(run *v1alpha1.TerraformRun, digest string) bool {
	_, ok := policyFor(run, digest)
	return ok && len(PolicyDenials(run, digest)) == 0 && len(PendingOverrides(run, digest)) == 0
}

// ResultName names a result as overrides record it: policy/validation.
func ResultName(r v1alpha1.PolicyResult) string {
	return r.Policy + "/" + r.Validation
}

// DescribeResults says what results are, for messages: "policy/validation
// (Failed: message)", joined.
func DescribeResults(results []v1alpha1.PolicyResult) string {
	var parts []string
	for _, r := range results {
		s := fmt.Sprintf("%s (%s", ResultName(r), r.Outcome)
		if r.Message != "" {
			s += ": " + r.Message
		}
		parts = append(parts, s+")")
	}
	return strings.Join(parts, "; ")
}

// PolicyVerdict says in a word what the policies said of run's plan, for
// tables: Denied, Held (a soft-mandatory failure waits for an override),
// Overridden, Advisory (only advisory validations failed), Passed, or "-"
// when no policy checked it.
func PolicyVerdict(run *v1alpha1.TerraformRun) string {
	pol, plan := run.Status.Policy, run.Status.Plan
	if pol == nil || len(pol.Policies) == 0 || plan == nil {
		return "-"
	}
	switch {
	case len(PolicyDenials(run, plan.Digest)) > 0 || pol.PlanDigest != plan.Digest:
		return "Denied"
	case len(PendingOverrides(run, plan.Digest)) > 0:
		return "Held"
	case len(pol.Overrides) > 0:
		return "Overridden"
	}
	for _, r := range pol.Results {
		if r.Outcome != v1alpha1.PolicyPassed {
			return "Advisory"
		}
	}
	return "Passed"
}
