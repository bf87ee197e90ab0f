package executor

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// TestVariables: every backend gets each variable resolved the same way:
// literals with their value, Secret and ConfigMap keys by name, and another
// run's output as an input of the plan stage only, which Start must hold.
func TestVariables(t *testing.T) {
	run := &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "app"},
		Spec: v1alpha1.TerraformRunSpec{Variables: []v1alpha1.Variable{
			{Name: "region", Value: "eu-west-1"},
			{Name: "password", ValueFrom: &v1alpha1.VariableSource{SecretKeyRef: &v1alpha1.KeySelector{Name: "db", Key: "password"}}},
			{Name: "size", HCL: true, ValueFrom: &v1alpha1.VariableSource{ConfigMapKeyRef: &v1alpha1.KeySelector{Name: "settings", Key: "size"}}},
			{Name: "vpc", ValueFrom: &v1alpha1.VariableSource{RunOutput: &v1alpha1.OutputSelector{Name: "network-4", Output: "vpc_id"}}},
		}},
	}
	plan, err := Variables(Execution{Run: run, Stage: v1alpha1.StagePlan, Inputs: map[string][]byte{"vpc": []byte(`"vpc-1"`)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 4 {
		t.Fatalf("%d variables, want 4", len(plan))
	}
	if v := plan[0]; v.Value != "eu-west-1" || v.Secret || v.SecretKeyRef != nil || v.ConfigMapKeyRef != nil || v.NeedsInput {
		t.Errorf("literal = %+v", v)
	}
	if v := plan[1]; v.SecretKeyRef == nil || v.SecretKeyRef.Name != "db" || !v.Secret || v.Value != "" {
		t.Errorf("Secret key = %+v, want a secret read from db/password", v)
	}
	if v := plan[2]; v.ConfigMapKeyRef == nil || v.Secret || !v.HCL {
		t.Errorf("ConfigMap key = %+v, want a non-secret HCL value read from settings/size", v)
	}
	if v := plan[3]; !v.NeedsInput || string(v.Input) != `"vpc-1"` || !v.Secret || !v.JSON || v.CheckInput(run) != nil {
		t.Errorf("run output = %+v, want a secret JSON input holding the resolved value", v)
	}

	// Status rebuilds a plan stage without its inputs: resolved, unchecked.
	unresolved, err := Variables(Execution{Run: run, Stage: v1alpha1.StagePlan})
	if err != nil {
		t.Fatal(err)
	}
	err = unresolved[3].CheckInput(run)
	if err == nil || !strings.Contains(err.Error(), `variable vpc: the value of output "vpc_id" of run "network-4" was not resolved`) {
		t.Errorf("an unresolved input checks as %v", err)
	}

	apply, err := Variables(Execution{Run: run, Stage: v1alpha1.StageApply})
	if err != nil {
		t.Fatal(err)
	}
	if v := apply[3]; v.NeedsInput || v.Input != nil || v.CheckInput(run) != nil || v.FromRun == nil {
		t.Errorf("the apply stage's run output = %+v, want its name only", v)
	}

	run.Spec.Variables = append(run.Spec.Variables, v1alpha1.Variable{Name: "empty", ValueFrom: &v1alpha1.VariableSource{}})
	if _, err := Variables(Execution{Run: run, Stage: v1alpha1.StageApply}); err == nil || !strings.Contains(err.Error(), "variable empty: valueFrom names no source") {
		t.Errorf("a valueFrom without a source: %v", err)
	}
}
