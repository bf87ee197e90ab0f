package planpolicy

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// FuzzCompile compiles arbitrary expressions and names: Compile never
// panics, and either compiles or names the field of each error.
func FuzzCompile(f *testing.F) {
	f.Add("v", "size(summary.add) < 3", "variables.v == null", "'m'", "true")
	f.Add("x", "plan.resource_changes.map(r, r.address)", "variables.x.all(a, a != '')", "1", "nope(")
	f.Add("", "", ")", "", "")
	f.Fuzz(func(t *testing.T, name, variable, expression, messageExpression, condition string) {
		p, errs := Compile(&v1alpha1.TerraformPolicy{ObjectMeta: metav1.ObjectMeta{Name: "f"}, Spec: v1alpha1.TerraformPolicySpec{
			Variables:   []v1alpha1.PolicyVariable{{Name: name, Expression: variable}},
			Validations: []v1alpha1.PolicyValidation{{Expression: expression, MessageExpression: messageExpression, Enforcement: v1alpha1.EnforcementSoftMandatory}},
			Approvals:   []v1alpha1.PolicyApprovalRule{{Condition: condition, RequiredApprovals: 1}},
		}}, NewExpressions)
		if (p == nil) == (len(errs) == 0) {
			t.Fatalf("Compile returned %v and %v", p, errs)
		}
		for _, e := range errs {
			if e.Field == "" {
				t.Errorf("an error without a field: %v", e)
			}
		}
	})
}

// fuzzPolicy reads every part of the plan a policy commonly reads.
var fuzzPolicy = func() *Policy {
	p, errs := Compile(&v1alpha1.TerraformPolicy{ObjectMeta: metav1.ObjectMeta{Name: "f"}, Spec: v1alpha1.TerraformPolicySpec{
		Variables: []v1alpha1.PolicyVariable{{Name: "destroyed", Expression: "summary.delete + summary.replace"}},
		Validations: []v1alpha1.PolicyValidation{
			{Expression: "plan.resource_changes.all(r, r.change.actions.size() > 0)", Enforcement: v1alpha1.EnforcementHardMandatory},
			{Expression: "size(variables.destroyed) < 2", MessageExpression: "variables.destroyed.map(r, r.address).join(',')", Enforcement: v1alpha1.EnforcementSoftMandatory},
			{Expression: "!has(plan.output_changes) || size(plan.output_changes) < 10", Enforcement: v1alpha1.EnforcementAdvisory},
		},
		Approvals: []v1alpha1.PolicyApprovalRule{{Condition: "summary.add.exists(r, r.type.startsWith('aws_'))", RequiredApprovals: 2}},
	}}, StoredExpressions)
	if len(errs) > 0 {
		panic(errs.ToAggregate())
	}
	return p
}()

// FuzzEvaluate evaluates a policy against arbitrary plan JSON: it never
// panics, every validation has a result, and every result is Passed,
// Failed or Error.
func FuzzEvaluate(f *testing.F) {
	f.Add([]byte(planJSON))
	f.Add([]byte(`{"resource_changes":[{"change":{"actions":[]}}]}`))
	f.Add([]byte(`{"resource_changes":[{"address":1,"type":null,"change":{"actions":["delete","create"]}}]}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"resource_changes":"x"}`))
	f.Fuzz(func(t *testing.T, plan []byte) {
		in, err := NewInput(testRun(), plan, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ev := fuzzPolicy.Evaluate(context.Background(), in)
		if len(ev.Results) != 3 {
			t.Fatalf("%d results, want 3", len(ev.Results))
		}
		for _, r := range ev.Results {
			switch r.Outcome {
			case v1alpha1.PolicyPassed, v1alpha1.PolicyFailed, v1alpha1.PolicyError:
			default:
				t.Errorf("outcome %q", r.Outcome)
			}
		}
	})
}
