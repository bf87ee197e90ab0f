package terrarun

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Built-in defaults. They apply to whatever neither the user nor the cluster
// policy (the TerraformRunDefaults admission plugin) has set.
const (
	// DefaultExecutorImage is the executor image used when nothing else sets one.
	DefaultExecutorImage = "ghcr.io/terrarun/terrarun-executor:v0.1.0"
	// DefaultStageTimeout bounds the plan and apply stages.
	DefaultStageTimeout = time.Hour
	// DefaultApprovalTimeout is how long a plan waits for approval.
	DefaultApprovalTimeout = 24 * time.Hour
)

// ServerDefaults are the defaults of a run's spec that depend on the server.
// +k8s:deepcopy-gen=false
type ServerDefaults struct {
	// Engine is the default engine (terraform when empty).
	Engine EngineBinary
	// Image is the default executor image: DefaultExecutorImage where stages
	// run in Jobs; empty with the local executor, which runs no image.
	Image string
}

// SetBuiltinDefaults fills every defaultable field of spec that is still empty
// with its built-in default, d's where they depend on the server. The
// registry strategy calls it after admission has applied the cluster
// policy, so the defaults hold even with admission off.
func SetBuiltinDefaults(spec *TerraformRunSpec, d ServerDefaults) {
	engine := d.Engine
	if engine == "" {
		engine = EngineTerraform
	}
	if spec.Operation == "" {
		spec.Operation = OperationApply
	}
	if spec.Workspace == "" {
		spec.Workspace = "default"
	}
	if spec.Approval.Mode == "" {
		spec.Approval.Mode = ApprovalModeManual
	}
	if spec.Approval.Timeout == nil {
		spec.Approval.Timeout = &metav1.Duration{Duration: DefaultApprovalTimeout}
	}
	if spec.Approval.RequiredApprovals == 0 && spec.Approval.Mode == ApprovalModeManual {
		spec.Approval.RequiredApprovals = 1
	}
	if spec.Engine.Binary == "" {
		spec.Engine.Binary = engine
	}
	if spec.Engine.Image == "" {
		spec.Engine.Image = d.Image
	}
	if spec.Timeouts.Plan == nil {
		spec.Timeouts.Plan = &metav1.Duration{Duration: DefaultStageTimeout}
	}
	if spec.Timeouts.Apply == nil {
		spec.Timeouts.Apply = &metav1.Duration{Duration: DefaultStageTimeout}
	}
}
