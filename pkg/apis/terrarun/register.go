package terrarun

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group served by terrarun.
const GroupName = "terrarun.dev"

// SchemeGroupVersion is the internal version of the group.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: runtime.APIVersionInternal}

var (
	// SchemeBuilder collects the functions that add the internal types to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the internal types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Kind qualifies a kind name with this group.
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
}

// Resource qualifies a resource name with this group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
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
	return nil
}
