package v1alpha1_test

import (
	"net/url"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
)

// FuzzLogAndPlanOptions decodes any query into the options of the logs and
// plan subresources, as the server does, and validates them: nothing panics,
// and options that pass validation are in range (an attempt is never read
// from a number it is not, as 4294967297 once was read as 1).
func FuzzLogAndPlanOptions(f *testing.F) {
	for _, seed := range []string{
		"stage=plan&attempt=2", "stage=apply&follow=true&tailLines=10&limitBytes=0", "attempt=4294967297",
		"attempt=-1", "attempt=1.0", "tailLines=9223372036854775808", "follow=maybe", "format=json&wait=true",
		"attempt=1&part=file", "format=%00", "stage=plan&stage=apply", "attempt=0x10", "attempt=+1", "attempt= 1",
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	scheme := runtime.NewScheme()
	if err := terrarun.AddToScheme(scheme); err != nil {
		f.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		f.Fatal(err)
	}
	codec := runtime.NewParameterCodec(scheme)
	f.Fuzz(func(t *testing.T, query string, upload bool) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		var logs terrarun.TerraformRunLogOptions
		if err := codec.DecodeParameters(q, v1alpha1.SchemeGroupVersion, &logs); err == nil {
			if errs := validation.ValidateTerraformRunLogOptions(&logs, upload); len(errs) == 0 {
				if logs.Attempt != nil && (*logs.Attempt < 1 || q.Get("attempt") != strings.TrimLeft(q.Get("attempt"), " ")) {
					t.Errorf("query %q: valid attempt %d", query, *logs.Attempt)
				}
				if logs.TailLines != nil && *logs.TailLines < 0 || logs.LimitBytes != nil && *logs.LimitBytes < 0 {
					t.Errorf("query %q: valid negative tailLines or limitBytes", query)
				}
				if upload && (logs.Stage == "" || logs.Attempt == nil) {
					t.Errorf("query %q: a valid upload without stage or attempt", query)
				}
			}
		}
		var plan terrarun.TerraformRunPlanOptions
		if err := codec.DecodeParameters(q, v1alpha1.SchemeGroupVersion, &plan); err == nil {
			if errs := validation.ValidateTerraformRunPlanOptions(&plan, upload); len(errs) == 0 && upload && (plan.Attempt == nil || *plan.Attempt < 1 || plan.Part == "") {
				t.Errorf("query %q: a valid plan upload %+v", query, plan)
			}
		}
	})
}
