package planpolicy

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// planJSON is the redacted plan JSON of a plan that creates a bucket,
// updates a DNS record, replaces an instance and deletes a database.
const planJSON = `{
  "format_version": "1.2",
  "resource_changes": [
    {"address": "aws_s3_bucket.logs", "mode": "managed", "type": "aws_s3_bucket", "provider_name": "registry.terraform.io/hashicorp/aws", "change": {"actions": ["create"], "after": {"bucket": "logs"}}},
    {"address": "aws_route53_record.www", "mode": "managed", "type": "aws_route53_record", "provider_name": "registry.terraform.io/hashicorp/aws", "change": {"actions": ["update"]}},
    {"address": "aws_instance.web", "mode": "managed", "type": "aws_instance", "provider_name": "registry.terraform.io/hashicorp/aws", "change": {"actions": ["delete", "create"]}},
    {"address": "aws_db_instance.main", "mode": "managed", "type": "aws_db_instance", "provider_name": "registry.terraform.io/hashicorp/aws", "change": {"actions": ["delete"]}},
    {"address": "data.aws_ami.ubuntu", "mode": "data", "type": "aws_ami", "provider_name": "registry.terraform.io/hashicorp/aws", "change": {"actions": ["read"]}},
    {"address": "terraform_data.same", "mode": "managed", "type": "terraform_data", "provider_name": "terraform.io/builtin/terraform", "change": {"actions": ["no-op"]}}
  ]
}`

func testRun() *v1alpha1.TerraformRun {
	return &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "r1", Namespace: "team-a", Labels: map[string]string{"tier": "prod"}},
		Spec: v1alpha1.TerraformRunSpec{Operation: v1alpha1.OperationApply, Approval: v1alpha1.Approval{Mode: v1alpha1.ApprovalModeManual},
			Creator: &v1alpha1.Creator{Username: "alice"}},
	}
}

func testInput(t *testing.T) *Input {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"env": "prod"}}}
	in, err := NewInput(testRun(), []byte(planJSON), nil, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func compileOK(t *testing.T, spec v1alpha1.TerraformPolicySpec) *Policy {
	t.Helper()
	p, errs := Compile(&v1alpha1.TerraformPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: spec}, NewExpressions)
	if len(errs) > 0 {
		t.Fatalf("compile: %v", errs)
	}
	return p
}

func TestSummarize(t *testing.T) {
	s := testInput(t).Summary
	want := map[string]string{"add": "aws_s3_bucket.logs", "change": "aws_route53_record.www", "replace": "aws_instance.web", "delete": "aws_db_instance.main"}
	for key, addr := range want {
		list := s[key].([]any)
		if len(list) != 1 || list[0].(map[string]any)["address"] != addr {
			t.Errorf("summary.%s = %v, want only %s", key, list, addr)
		}
	}
}

func TestEvaluate(t *testing.T) {
	p := compileOK(t, v1alpha1.TerraformPolicySpec{
		Variables: []v1alpha1.PolicyVariable{
			{Name: "destroyed", Expression: "summary.delete + summary.replace"},
			{Name: "databases", Expression: "variables.destroyed.filter(r, r.type.matches('_db_|_database'))"},
		},
		Validations: []v1alpha1.PolicyValidation{
			{Name: "no-database-deletes", Expression: "size(variables.databases) == 0", Enforcement: v1alpha1.EnforcementHardMandatory,
				MessageExpression: "'deletes ' + variables.databases.map(r, r.address).join(', ')"},
			{Name: "few-changes", Expression: "size(summary.add) < 5", Enforcement: v1alpha1.EnforcementSoftMandatory},
			{Name: "prod-is-manual", Expression: "namespaceObject.metadata.labels.env != 'prod' || run.spec.approval.mode == 'Manual'", Enforcement: v1alpha1.EnforcementSoftMandatory},
			{Name: "tagged", Expression: "plan.resource_changes.all(r, r.mode != 'managed' || r.type != 'aws_s3_bucket' || has(r.change.after.tags))", Message: "buckets need tags", Enforcement: v1alpha1.EnforcementAdvisory},
			{Expression: "workspace == null", Enforcement: v1alpha1.EnforcementAdvisory},
			{Name: "errors", Expression: "plan.no_such_key == 1", Enforcement: v1alpha1.EnforcementHardMandatory},
		},
		Approvals: []v1alpha1.PolicyApprovalRule{
			{Name: "dba", Condition: "size(variables.databases) > 0", RequiredApprovals: 2, Groups: []string{"dba"}, Message: "a database is destroyed"},
			{Name: "never", Condition: "false", RequiredApprovals: 3},
		},
	})
	ev := p.Evaluate(context.Background(), testInput(t))
	got := map[string]v1alpha1.PolicyResult{}
	for _, r := range ev.Results {
		got[r.Validation] = r
	}
	for name, want := range map[string]v1alpha1.PolicyOutcome{
		"no-database-deletes": v1alpha1.PolicyFailed, "few-changes": v1alpha1.PolicyPassed, "prod-is-manual": v1alpha1.PolicyPassed,
		"tagged": v1alpha1.PolicyFailed, "validations[4]": v1alpha1.PolicyPassed, "errors": v1alpha1.PolicyError,
	} {
		if got[name].Outcome != want {
			t.Errorf("%s: %+v, want %s", name, got[name], want)
		}
	}
	if m := got["no-database-deletes"].Message; m != "deletes aws_db_instance.main" {
		t.Errorf("messageExpression gave %q", m)
	}
	if m := got["tagged"].Message; m != "buckets need tags" {
		t.Errorf("message %q", m)
	}
	if m := got["errors"].Message; !strings.Contains(m, "fails closed") || !strings.Contains(m, "no_such_key") {
		t.Errorf("error message %q should say it fails closed and why", m)
	}
	if len(ev.Approvals) != 1 || ev.Approvals[0].Rule != "dba" || ev.Approvals[0].RequiredApprovals != 2 || ev.Approvals[0].Groups[0] != "dba" {
		t.Errorf("approvals = %+v, want the dba rule only", ev.Approvals)
	}
}

// TestCostLimit: an expression that would run for long stops at its cost
// limit, and its mandatory validation fails closed, saying so.
func TestCostLimit(t *testing.T) {
	p := compileOK(t, v1alpha1.TerraformPolicySpec{
		Variables: []v1alpha1.PolicyVariable{{Name: "l", Expression: "[" + strings.Repeat("0,", 199) + "0]"}},
		Validations: []v1alpha1.PolicyValidation{
			{Name: "costly", Expression: "variables.l.all(a, variables.l.all(b, variables.l.all(c, a + b + c == 0)))", Enforcement: v1alpha1.EnforcementSoftMandatory},
			{Name: "cheap", Expression: "true", Enforcement: v1alpha1.EnforcementHardMandatory},
		},
	})
	ev := p.Evaluate(context.Background(), testInput(t))
	if r := ev.Results[0]; r.Outcome != v1alpha1.PolicyError || !strings.Contains(r.Message, "cost limit") || !strings.Contains(r.Message, "fails closed") {
		t.Errorf("costly: %+v, want an Error naming the cost limit", r)
	}
	if ev.Results[1].Outcome != v1alpha1.PolicyPassed {
		t.Errorf("cheap: %+v", ev.Results[1])
	}
}

// TestUnreadablePlanFailsClosed: a plan JSON that cannot be read fails
// every validation with outcome Error, and applies every approval rule.
func TestUnreadablePlanFailsClosed(t *testing.T) {
	p := compileOK(t, v1alpha1.TerraformPolicySpec{
		Validations: []v1alpha1.PolicyValidation{{Expression: "true"}},
		Approvals:   []v1alpha1.PolicyApprovalRule{{Condition: "false", RequiredApprovals: 2}},
	})
	in, err := NewInput(testRun(), []byte(`{"truncated`), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := p.Evaluate(context.Background(), in)
	if ev.Results[0].Outcome != v1alpha1.PolicyError || ev.Results[0].Enforcement != v1alpha1.EnforcementHardMandatory {
		t.Errorf("result = %+v, want a hard-mandatory Error", ev.Results[0])
	}
	if len(ev.Approvals) != 1 {
		t.Errorf("approvals = %+v, want the rule applied", ev.Approvals)
	}
}

func TestCompileErrorsNameTheField(t *testing.T) {
	_, errs := Compile(&v1alpha1.TerraformPolicy{Spec: v1alpha1.TerraformPolicySpec{
		MatchConstraints: &v1alpha1.PolicyMatchConstraints{RunSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}},
		Variables:        []v1alpha1.PolicyVariable{{Name: "x", Expression: "variables.later"}, {Name: "later", Expression: "1"}},
		Validations: []v1alpha1.PolicyValidation{
			{Expression: "plan.resource_changes.size() >"},
			{Expression: "'not a bool'"},
			{Expression: "true", MessageExpression: "1"},
		},
		Approvals: []v1alpha1.PolicyApprovalRule{{Condition: "nope(", RequiredApprovals: 1}},
	}}, NewExpressions)
	want := []string{
		"spec.matchConstraints.runSelector",
		"spec.variables[0].expression",
		"spec.validations[0].expression",
		"spec.validations[1].expression",
		"spec.validations[2].messageExpression",
		"spec.approvals[0].condition",
	}
	var got []string
	for _, e := range errs {
		got = append(got, e.Field)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("errors at %v, want %v:\n%v", got, want, errs)
	}
}

func TestMatches(t *testing.T) {
	in := testInput(t)
	for _, c := range []struct {
		m    *v1alpha1.PolicyMatchConstraints
		want bool
	}{
		{nil, true},
		{&v1alpha1.PolicyMatchConstraints{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}, true},
		{&v1alpha1.PolicyMatchConstraints{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}}, false},
		{&v1alpha1.PolicyMatchConstraints{RunSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}}}, true},
		{&v1alpha1.PolicyMatchConstraints{Operations: []v1alpha1.Operation{v1alpha1.OperationDestroy}}, false},
		{&v1alpha1.PolicyMatchConstraints{Operations: []v1alpha1.Operation{v1alpha1.OperationApply}, Triggers: []v1alpha1.Trigger{v1alpha1.TriggerDirect}}, true},
		{&v1alpha1.PolicyMatchConstraints{Triggers: []v1alpha1.Trigger{v1alpha1.TriggerDriftCheck}}, false},
	} {
		p := compileOK(t, v1alpha1.TerraformPolicySpec{MatchConstraints: c.m})
		if got := p.Matches(in); got != c.want {
			t.Errorf("%+v: matches %v, want %v", c.m, got, c.want)
		}
	}
}

// TestCheckerCompilesOncePerVersion: a policy is compiled once per
// resourceVersion, compiled again when it changes, and forgotten when it is
// deleted; one that no longer compiles fails closed.
func TestCheckerCompilesOncePerVersion(t *testing.T) {
	pol := &v1alpha1.TerraformPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u1", ResourceVersion: "1"},
		Spec: v1alpha1.TerraformPolicySpec{Validations: []v1alpha1.PolicyValidation{{Name: "v", Expression: "size(summary.add) == 1", Enforcement: v1alpha1.EnforcementHardMandatory}}}}
	listed := []*v1alpha1.TerraformPolicy{pol}
	c := &Checker{Policies: func() ([]*v1alpha1.TerraformPolicy, error) { return listed, nil }}
	check := func() *v1alpha1.PolicyStatus {
		t.Helper()
		st, err := c.Check(context.Background(), testInput(t), "sha256:d")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := check(); len(st.Results) != 1 || st.Results[0].Outcome != v1alpha1.PolicyPassed || st.Policies[0].ResourceVersion != "1" {
		t.Fatalf("first check: %+v", st)
	}
	first := c.compiled["u1"]
	check()
	if c.compiled["u1"] != first {
		t.Error("an unchanged policy was compiled again")
	}
	edited := pol.DeepCopy()
	edited.ResourceVersion = "2"
	edited.Spec.Validations[0].Expression = "nope("
	listed = []*v1alpha1.TerraformPolicy{edited}
	if st := check(); st.Results[0].Outcome != v1alpha1.PolicyError || !strings.Contains(st.Results[0].Message, "does not compile") || st.Policies[0].ResourceVersion != "2" {
		t.Errorf("a stored policy that no longer compiles: %+v", st.Results)
	}
	listed = nil
	if st := check(); len(st.Policies) != 0 || len(c.compiled) != 0 {
		t.Errorf("after deletion: %+v, %d compiled kept", st, len(c.compiled))
	}
}
