package planpolicy

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// BenchmarkCheck50Policies1000Resources is one plan's policy check as the
// server makes it when the plan is recorded: the plan JSON decoded, then 50
// policies (each a variable, three validations and an approval rule over
// every resource) evaluated against a plan of 1,000 resource changes. It
// reports the p50 and p99 of one check; the target is well under the
// plan's own time (seconds for 1,000 resources).
func BenchmarkCheck50Policies1000Resources(b *testing.B) {
	var changes []map[string]any
	actions := [][]string{{"create"}, {"update"}, {"delete"}, {"delete", "create"}, {"no-op"}}
	for i := range 1000 {
		changes = append(changes, map[string]any{
			"address": fmt.Sprintf("aws_instance.web[%d]", i), "mode": "managed", "type": []string{"aws_instance", "aws_db_instance", "aws_s3_bucket"}[i%3],
			"name": "web", "provider_name": "registry.terraform.io/hashicorp/aws",
			"change": map[string]any{"actions": actions[i%len(actions)], "after": map[string]any{"tags": map[string]any{"owner": "team-a"}, "size": i}},
		})
	}
	planJSON, err := json.Marshal(map[string]any{"format_version": "1.2", "resource_changes": changes})
	if err != nil {
		b.Fatal(err)
	}
	var policies []*v1alpha1.TerraformPolicy
	for i := range 50 {
		policies = append(policies, &v1alpha1.TerraformPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%02d", i), UID: types.UID(fmt.Sprint(i)), ResourceVersion: "1"},
			Spec: v1alpha1.TerraformPolicySpec{
				Variables: []v1alpha1.PolicyVariable{{Name: "destroyed", Expression: "summary.delete + summary.replace"}},
				Validations: []v1alpha1.PolicyValidation{
					{Name: "no-db-deletes", Expression: "!variables.destroyed.exists(r, r.type.contains('_db_'))", Enforcement: v1alpha1.EnforcementAdvisory},
					{Name: "tagged", Expression: "plan.resource_changes.all(r, r.change.actions == ['delete'] || !has(r.change.after) || has(r.change.after.tags))", Enforcement: v1alpha1.EnforcementHardMandatory},
					{Name: "bounded", Expression: fmt.Sprintf("size(summary.add) < %d", 1000+i), Enforcement: v1alpha1.EnforcementSoftMandatory},
				},
				Approvals: []v1alpha1.PolicyApprovalRule{{Name: "sre", Condition: "summary.delete.exists(r, r.type == 'aws_s3_bucket')", RequiredApprovals: 2, Groups: []string{"sre"}}},
			},
		})
	}
	checker := &Checker{Policies: func() ([]*v1alpha1.TerraformPolicy, error) { return slices.Clone(policies), nil }}
	// Percentiles need samples whatever -benchtime says (make bench: 1x).
	const samples = 30
	var took []time.Duration
	b.ResetTimer()
	for b.Loop() {
		for range samples {
			took = append(took, check(b, checker, planJSON))
		}
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[(len(took)*99)/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(len(took)), "samples")
}

// check is one timed check of the plan.
func check(b *testing.B, checker *Checker, planJSON []byte) time.Duration {
	start := time.Now()
	in, err := NewInput(testRun(), planJSON, nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	st, err := checker.Check(context.Background(), in, "sha256:x")
	if err != nil {
		b.Fatal(err)
	}
	if len(st.Results) != 150 {
		b.Fatalf("%d results, want 150", len(st.Results))
	}
	return time.Since(start)
}
