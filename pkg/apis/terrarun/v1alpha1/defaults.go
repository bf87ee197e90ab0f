package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}

// SetDefaults_TerraformRunSpec applies the version's static defaults.
//
// Only fields that no cluster policy may choose are defaulted here, because
// decoding runs before admission: defaulting approval mode, engine or timeouts at
// this point would hide them from the TerraformRunDefaults admission plugin. Those
// are defaulted by the TerraformRunDefaults plugin from the cluster's policy, and
// then by the registry strategy from built-in values, so they hold with admission off.
func SetDefaults_TerraformRunSpec(obj *TerraformRunSpec) {
	if obj.Operation == "" {
		obj.Operation = OperationApply
	}
	if obj.Workspace == "" {
		obj.Workspace = "default"
	}
}

// SetDefaults_OCIVerification names cosign, the one provider.
func SetDefaults_OCIVerification(obj *OCIVerification) {
	if obj.Provider == "" {
		obj.Provider = OCIVerificationProviderCosign
	}
}

// SetDefaults_PolicyValidation makes a validation without an enforcement
// hard-mandatory: a policy that forgets to say blocks rather than advises.
func SetDefaults_PolicyValidation(obj *PolicyValidation) {
	if obj.Enforcement == "" {
		obj.Enforcement = EnforcementHardMandatory
	}
}

// SetDefaults_TerraformRunTaskSpec makes a run task Mandatory with a timeout
// of 10m unless it says otherwise: a task that forgets to say blocks.
func SetDefaults_TerraformRunTaskSpec(obj *TerraformRunTaskSpec) {
	if obj.Enforcement == "" {
		obj.Enforcement = RunTaskMandatory
	}
	if obj.Timeout == nil {
		obj.Timeout = &metav1.Duration{Duration: DefaultRunTaskTimeout}
	}
}
