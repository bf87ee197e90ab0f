// +k8s:openapi-gen=true
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/terrarun/terrarun/pkg/apis/terrarun
// +k8s:defaulter-gen=TypeMeta
// +groupName=terrarun.dev
// +k8s:openapi-model-package=dev.terrarun.v1alpha1

// Package v1alpha1 is the v1alpha1 version of the terrarun.dev API.
package v1alpha1
