package runrules

import (
	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// FromInternal converts a run of the registry's internal types to the
// versioned types the rules take, once per request. The result shares
// memory with run: read it, never write it.
func FromInternal(run *terrarun.TerraformRun) *v1alpha1.TerraformRun {
	out := &v1alpha1.TerraformRun{}
	if err := v1alpha1.Convert_terrarun_TerraformRun_To_v1alpha1_TerraformRun(run, out, nil); err != nil {
		// The generated conversion of a run fails only for a type it does
		// not know, which a build that passed its tests does not have.
		panic("runrules: converting a run: " + err.Error())
	}
	return out
}
