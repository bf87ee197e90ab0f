package server

import (
	"testing"

	"k8s.io/kube-openapi/pkg/validation/spec"

	generatedopenapi "github.com/terrarun/terrarun/pkg/generated/openapi"
)

// TestWithoutRepeatedDescriptions: a type that described fields refer to
// loses its description (kubectl explain prints the field's), a kind keeps
// its own, and every field keeps its.
func TestWithoutRepeatedDescriptions(t *testing.T) {
	ref := func(name string) spec.Ref { return spec.MustCreateRef(name) }
	before := generatedopenapi.GetOpenAPIDefinitions(ref)
	after := withoutRepeatedDescriptions(generatedopenapi.GetOpenAPIDefinitions)(ref)
	for name, want := range map[string]bool{
		"dev.terrarun.v1alpha1.Source":           false,
		"dev.terrarun.v1alpha1.TerraformRunSpec": false,
		"dev.terrarun.v1alpha1.TerraformRun":     true,
		"dev.terrarun.v1alpha1.TerraformRunList": true,
	} {
		if before[name].Schema.Description == "" {
			t.Fatalf("%s has no description to begin with", name)
		}
		if got := after[name].Schema.Description != ""; got != want {
			t.Errorf("%s keeps its description: %v, want %v", name, got, want)
		}
	}
	run := after["dev.terrarun.v1alpha1.TerraformRunSpec"].Schema.Properties["source"]
	if run.Description != before["dev.terrarun.v1alpha1.TerraformRunSpec"].Schema.Properties["source"].Description || run.Description == "" {
		t.Errorf("spec.source lost its description: %q", run.Description)
	}
}
