package terrarun

// The projection of a workspace into its runs, in one place: the
// workspace strategy and the defaulting admission plugin default a
// workspace's runs through RunTemplate and SetRunTemplate, and the policy
// plugin and the workspace controller make their runs' spec with RunSpecOf.

// RunTemplate is the spec of a workspace's runs before defaulting and before
// its operation is chosen: spec.template, with spec.approval as their
// approval.
func RunTemplate(spec *TerraformWorkspaceSpec) TerraformRunSpec {
	run := *spec.Template.DeepCopy()
	run.Approval = *spec.Approval.DeepCopy()
	return run
}

// SetRunTemplate stores run, spec's RunTemplate with defaults applied, back
// into spec: its approval in spec.approval, the rest in spec.template.
func SetRunTemplate(spec *TerraformWorkspaceSpec, run TerraformRunSpec) {
	spec.Approval, run.Approval = run.Approval, Approval{}
	spec.Template = run
}

// RunSpecOf is the spec of a workspace's run with operation op: its
// RunTemplate, in which a variable that reads a workspace's output reads the
// output of that workspace's last applied run, which lastApplied names (""
// for some run of it, before one is known): a new apply upstream is a new
// spec downstream.
func RunSpecOf(spec *TerraformWorkspaceSpec, op Operation, lastApplied func(workspace string) string) TerraformRunSpec {
	run := RunTemplate(spec)
	run.Operation = op
	for i := range run.Variables {
		vf := run.Variables[i].ValueFrom
		if vf == nil || vf.WorkspaceOutput == nil {
			continue
		}
		vf.RunOutput = &OutputSelector{Name: lastApplied(vf.WorkspaceOutput.Name), Output: vf.WorkspaceOutput.Output}
		vf.WorkspaceOutput = nil
	}
	return run
}
