package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group served by terrarun.
const GroupName = "terrarun.dev"

// SchemeGroupVersion is the group and version of this package.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

var (
	// SchemeBuilder collects the functions that add this version to a scheme.
	SchemeBuilder      runtime.SchemeBuilder
	localSchemeBuilder = &SchemeBuilder
	// AddToScheme adds this version's types, conversions and defaults to a scheme.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func init() {
	// Only hand-written functions are registered here; generated files register
	// their own, so the package compiles without them.
	localSchemeBuilder.Register(addKnownTypes, addDefaultingFuncs, addFieldLabelConversionFuncs)
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&TerraformRun{},
		&TerraformRunList{},
		&TerraformRunApproval{},
		&TerraformRunDiscard{},
		&TerraformRunCancel{},
		&TerraformRunLogOptions{},
		&TerraformRunPlanOptions{},
		&TerraformRunOutputsOptions{},
		&TerraformRunStateOptions{},
		&TerraformWorkspace{},
		&TerraformWorkspaceList{},
		&TerraformWorkspaceRerun{},
		&TerraformPolicy{},
		&TerraformPolicyList{},
		&TerraformRunOverride{},
		&TerraformRunTask{},
		&TerraformRunTaskList{},
		&TerraformNotification{},
		&TerraformNotificationList{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}

// Resource qualifies a resource name with this group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}
