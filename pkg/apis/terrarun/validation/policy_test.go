package validation

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

func TestValidateTerraformPolicy(t *testing.T) {
	valid := func() *terrarun.TerraformPolicy {
		return &terrarun.TerraformPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: terrarun.TerraformPolicySpec{
			MatchConstraints: &terrarun.PolicyMatchConstraints{Operations: []terrarun.Operation{terrarun.OperationApply}, Triggers: []terrarun.Trigger{terrarun.TriggerDirect}},
			Variables:        []terrarun.PolicyVariable{{Name: "destroyed", Expression: "summary.delete"}},
			Validations:      []terrarun.PolicyValidation{{Name: "no-deletes", Expression: "size(variables.destroyed) == 0", Enforcement: terrarun.EnforcementSoftMandatory}},
			Approvals:        []terrarun.PolicyApprovalRule{{Name: "sre", Condition: "true", RequiredApprovals: 2, Groups: []string{"sre"}}},
		}}
	}
	if errs := ValidateTerraformPolicy(valid()); len(errs) > 0 {
		t.Fatalf("a valid policy: %v", errs)
	}
	for _, c := range []struct {
		name   string
		change func(*terrarun.TerraformPolicy)
		field  string
	}{
		{"namespaced", func(p *terrarun.TerraformPolicy) { p.Namespace = "team-a" }, "metadata.namespace"},
		{"nothing to check", func(p *terrarun.TerraformPolicy) { p.Spec.Validations, p.Spec.Approvals = nil, nil }, "spec.validations"},
		{"unknown operation", func(p *terrarun.TerraformPolicy) { p.Spec.MatchConstraints.Operations = []terrarun.Operation{"Deploy"} }, "spec.matchConstraints.operations[0]"},
		{"repeated trigger", func(p *terrarun.TerraformPolicy) {
			p.Spec.MatchConstraints.Triggers = []terrarun.Trigger{terrarun.TriggerRerun, terrarun.TriggerRerun}
		}, "spec.matchConstraints.triggers[1]"},
		{"bad selector", func(p *terrarun.TerraformPolicy) {
			p.Spec.MatchConstraints.RunSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"a b": "c"}}
		}, "spec.matchConstraints.runSelector.matchLabels"},
		{"variable name", func(p *terrarun.TerraformPolicy) { p.Spec.Variables[0].Name = "not-an-identifier" }, "spec.variables[0].name"},
		{"empty expression", func(p *terrarun.TerraformPolicy) { p.Spec.Validations[0].Expression = " " }, "spec.validations[0].expression"},
		{"long expression", func(p *terrarun.TerraformPolicy) { p.Spec.Validations[0].Expression = strings.Repeat("x", 6000) }, "spec.validations[0].expression"},
		{"enforcement", func(p *terrarun.TerraformPolicy) { p.Spec.Validations[0].Enforcement = "Strict" }, "spec.validations[0].enforcement"},
		{"message lines", func(p *terrarun.TerraformPolicy) { p.Spec.Validations[0].Message = "a\nb" }, "spec.validations[0].message"},
		{"duplicate validation", func(p *terrarun.TerraformPolicy) {
			p.Spec.Validations = append(p.Spec.Validations, p.Spec.Validations[0])
		}, "spec.validations[1].name"},
		{"no approvals", func(p *terrarun.TerraformPolicy) { p.Spec.Approvals[0].RequiredApprovals = 0 }, "spec.approvals[0].requiredApprovals"},
		{"empty group", func(p *terrarun.TerraformPolicy) { p.Spec.Approvals[0].Groups = []string{""} }, "spec.approvals[0].groups[0]"},
	} {
		p := valid()
		c.change(p)
		errs := ValidateTerraformPolicy(p)
		found := false
		for _, e := range errs {
			found = found || strings.HasPrefix(e.Field, c.field)
		}
		if !found {
			t.Errorf("%s: errors %v, want one at %s", c.name, errs, c.field)
		}
	}
}

func TestValidateTerraformRunOverride(t *testing.T) {
	digest := "sha256:" + strings.Repeat("a", 64)
	if errs := ValidateTerraformRunOverride(&terrarun.TerraformRunOverride{PlanDigest: digest, Justification: "CHANGE-1"}); len(errs) > 0 {
		t.Errorf("a valid override: %v", errs)
	}
	errs := ValidateTerraformRunOverride(&terrarun.TerraformRunOverride{PlanDigest: "nope", Justification: "  "})
	if len(errs) != 2 || errs[0].Field != "planDigest" || errs[1].Field != "justification" {
		t.Errorf("a bad override: %v, want planDigest and justification", errs)
	}
}
