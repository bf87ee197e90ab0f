package terraformpolicy

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage/names"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/install"
)

func testStrategy() strategy {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	return strategy{ObjectTyper: scheme, NameGenerator: names.SimpleNameGenerator, scheme: scheme}
}

func policy(expression string) *terrarun.TerraformPolicy {
	return &terrarun.TerraformPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: terrarun.TerraformPolicySpec{
		Validations: []terrarun.PolicyValidation{{Name: "v", Expression: expression, Enforcement: terrarun.EnforcementAdvisory}},
	}}
}

// TestStrategyCompiles: a policy is validated and its expressions compiled
// when written; an edit of the spec raises the generation.
func TestStrategyCompiles(t *testing.T) {
	s := testStrategy()
	ctx := context.Background()
	if errs := s.Validate(ctx, policy("size(summary.add) < 3")); len(errs) > 0 {
		t.Errorf("a valid policy: %v", errs)
	}
	errs := s.Validate(ctx, policy("size(summary.add) <"))
	if len(errs) != 1 || errs[0].Field != "spec.validations[0].expression" || !strings.Contains(errs[0].Detail, "compilation failed") {
		t.Errorf("a policy that does not compile: %v", errs)
	}
	old := policy("true")
	s.PrepareForCreate(ctx, old)
	same := old.DeepCopy()
	s.PrepareForUpdate(ctx, same, old)
	edited := old.DeepCopy()
	edited.Spec.Validations[0].Expression = "false"
	s.PrepareForUpdate(ctx, edited, old)
	if old.Generation != 1 || same.Generation != 1 || edited.Generation != 2 {
		t.Errorf("generations: created %d, unchanged %d, edited %d; want 1, 1, 2", old.Generation, same.Generation, edited.Generation)
	}
	if s.NamespaceScoped() {
		t.Error("policies are namespaced")
	}
}

func TestTable(t *testing.T) {
	p := policy("true")
	p.Spec.Validations = append(p.Spec.Validations, terrarun.PolicyValidation{Expression: "true"}, terrarun.PolicyValidation{Expression: "true", Enforcement: terrarun.EnforcementSoftMandatory})
	p.Spec.MatchConstraints = &terrarun.PolicyMatchConstraints{Operations: []terrarun.Operation{terrarun.OperationApply, terrarun.OperationDestroy}}
	table, err := tableConvertor{}.ConvertToTable(context.Background(), &terrarun.TerraformPolicyList{Items: []terrarun.TerraformPolicy{*p}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// An enforcement left empty is HardMandatory.
	if got := table.Rows[0].Cells[:4]; got[1] != "1/1/1" || got[2] != int64(0) || got[3] != "Apply,Destroy" {
		t.Errorf("row %v", got)
	}
}
