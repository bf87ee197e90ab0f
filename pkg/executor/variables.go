package executor

import (
	"fmt"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/stage"
)

// Variable is one variable of a stage, resolved once for every backend: the
// stage.Variable the runner reads (its File left for the backend), and where
// its value comes from when it is not a literal. The backend only
// materializes it: it reads (local) or mounts (Job) the key of a Secret or
// ConfigMap, and writes an input, as a file or a key of the stage's inputs
// Secret.
type Variable struct {
	stage.Variable
	// SecretKeyRef or ConfigMapKeyRef, when set, names the key of the run's
	// namespace that holds the value.
	SecretKeyRef, ConfigMapKeyRef *v1alpha1.KeySelector
	// FromRun, when set, names another run's output (valueFrom.runOutput)
	// that holds the value, a secret like every output. A plan stage plans
	// with it (NeedsInput), and Input holds it when the Execution does
	// (Execution.Inputs); the apply stage applies the saved plan and needs
	// only the name.
	FromRun    *v1alpha1.OutputSelector
	NeedsInput bool
	Input      []byte
}

// CheckInput returns an error naming v when its stage needs the value of
// another run's output that is not at hand.
func (v *Variable) CheckInput(run *v1alpha1.TerraformRun) error {
	if v.NeedsInput && v.Input == nil {
		return fmt.Errorf("run %s/%s: variable %s: the value of output %q of run %q was not resolved",
			run.Namespace, run.Name, v.Name, v.FromRun.Output, v.FromRun.Name)
	}
	return nil
}

// Variables resolves the variables of ex's run for its stage: a literal
// keeps its value, a Secret's or ConfigMap's key is named, and another run's
// output takes its value from ex.Inputs in a plan stage (Start must have it:
// CheckInput). It fails, naming the variable, when a valueFrom names no
// source.
func Variables(ex Execution) ([]Variable, error) {
	run := ex.Run
	vars := make([]Variable, 0, len(run.Spec.Variables))
	for _, v := range run.Spec.Variables {
		out := Variable{Variable: stage.Variable{Name: v.Name, HCL: v.HCL}}
		switch vf := v.ValueFrom; {
		case vf == nil:
			out.Value = v.Value
		case vf.SecretKeyRef != nil:
			out.SecretKeyRef, out.Secret = vf.SecretKeyRef, true
		case vf.ConfigMapKeyRef != nil:
			out.ConfigMapKeyRef = vf.ConfigMapKeyRef
		case vf.RunOutput != nil:
			out.FromRun, out.Secret, out.JSON = vf.RunOutput, true, true
			if ex.Stage == v1alpha1.StagePlan {
				out.NeedsInput, out.Input = true, ex.Inputs[v.Name]
			}
		default:
			return nil, fmt.Errorf("run %s/%s: variable %s: valueFrom names no source", run.Namespace, run.Name, v.Name)
		}
		vars = append(vars, out)
	}
	return vars, nil
}
