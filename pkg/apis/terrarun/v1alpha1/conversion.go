package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

func addFieldLabelConversionFuncs(scheme *runtime.Scheme) error {
	return scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind("TerraformRun"),
		func(label, value string) (string, string, error) {
			switch label {
			case "metadata.name", "metadata.namespace", "status.phase":
				return label, value, nil
			default:
				return "", "", fmt.Errorf("field label %q is not supported for TerraformRun; use metadata.name, metadata.namespace or status.phase", label)
			}
		})
}
