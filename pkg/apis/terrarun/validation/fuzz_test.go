package validation

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// specFields are the spec's fields, as errors name them.
var specFields = map[string]bool{
	"operation": true, "source": true, "variables": true, "backend": true, "workspace": true, "approval": true,
	"engine": true, "timeouts": true, "executor": true, "outputsSecret": true, "targets": true, "replace": true,
	"parallelism": true, "refresh": true, "creator": true,
}

// FuzzValidateTerraformRunSpec validates any spec that decodes from JSON:
// nothing panics, every error names the spec or a field of it, and no error
// about a variable repeats its value.
func FuzzValidateTerraformRunSpec(f *testing.F) {
	valid, err := json.Marshal(validRun().Spec)
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(valid),
		`{}`,
		`{"operation":"Apply","source":{"inline":{"main.tf":"x"}}}`,
		`{"operation":"Plan","source":{"git":{"url":"HTTPS://user:pass@example.com/repo.git","ref":"main"}}}`,
		`{"operation":"Apply","source":{"configMap":{"name":"cfg"}},"variables":[{"name":"a","value":"s3cret","valueFrom":{"secretKeyRef":{"name":"s","key":"k"}}}]}`,
		`{"operation":"Destroy","source":{"inline":{"../x.tf":""}},"backend":{"type":"s3","config":{"secret_key":"AKIAsecret","endpoint":"https://u:p@h"}}}`,
		`{"operation":"Apply","source":{"inline":{"main.tf":""}},"timeouts":{"plan":"-1s"},"parallelism":0,"targets":[""]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var spec terrarun.TerraformRunSpec
		if err := json.Unmarshal(data, &spec); err != nil {
			return
		}
		errs := ValidateTerraformRunSpec(&spec, field.NewPath("spec"))
		for _, e := range errs {
			top := strings.FieldsFunc(strings.TrimPrefix(e.Field, "spec."), func(r rune) bool { return r == '.' || r == '[' })
			if e.Field != "spec" && (!strings.HasPrefix(e.Field, "spec.") || len(top) == 0 || !specFields[top[0]]) {
				t.Errorf("an error on %q, not a field of the spec: %v", e.Field, e)
			}
			if !strings.HasPrefix(e.Field, "spec.variables[") {
				continue
			}
			for _, v := range spec.Variables {
				if len(v.Value) >= 8 && strings.Contains(e.Error(), v.Value) {
					t.Errorf("an error repeats the value of variable %q: %v", v.Name, e)
				}
			}
		}
	})
}
