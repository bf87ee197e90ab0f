package v1alpha1

import "github.com/terrarun/terrarun/pkg/apis/terrarun"

// StateKey names the Terraform state run reads and writes; see
// terrarun.StateKey.
func StateKey(run *TerraformRun) string {
	if b := run.Spec.Backend; b != nil {
		return terrarun.StateKeyOf(run.Namespace, run.Spec.Workspace, b.Type, b.Config, b.ConfigSecret)
	}
	return terrarun.StateKeyOf(run.Namespace, run.Spec.Workspace, "", nil, "")
}

// DescribeState says which state run uses, for messages.
func DescribeState(run *TerraformRun) string {
	if b := run.Spec.Backend; b != nil {
		return terrarun.DescribeStateOf(run.Spec.Workspace, b.Type)
	}
	return terrarun.DescribeStateOf(run.Spec.Workspace, "")
}
