package v1alpha1_test

import (
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/openapi"
)

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := terrarun.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
}

// decode decodes query into the internal options type of into, as the
// generic handler of a connect request does.
func decode(t *testing.T, query string, into runtime.Object) error {
	t.Helper()
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.NewParameterCodec(newScheme(t)).DecodeParameters(q, v1alpha1.SchemeGroupVersion, into)
}

func TestDecodeOptions(t *testing.T) {
	cases := []struct {
		query string
		into  runtime.Object
		want  runtime.Object
	}{
		// the executor's writes (pkg/stage)
		{"stage=plan&attempt=2", &terrarun.TerraformRunLogOptions{}, &terrarun.TerraformRunLogOptions{Stage: terrarun.StagePlan, Attempt: ptr.To[int32](2)}},
		{"attempt=1&part=file", &terrarun.TerraformRunPlanOptions{}, &terrarun.TerraformRunPlanOptions{Attempt: ptr.To[int32](1), Part: "file"}},
		{"attempt=3", &terrarun.TerraformRunOutputsOptions{}, &terrarun.TerraformRunOutputsOptions{Attempt: ptr.To[int32](3)}},
		{"lockID=6a2f-11", &terrarun.TerraformRunStateOptions{}, &terrarun.TerraformRunStateOptions{LockID: "6a2f-11"}},
		// reads
		{"stage=apply&follow=true&tailLines=10&limitBytes=0", &terrarun.TerraformRunLogOptions{}, &terrarun.TerraformRunLogOptions{Stage: terrarun.StageApply, Follow: true, TailLines: ptr.To[int64](10), LimitBytes: ptr.To[int64](0)}},
		{"follow=1", &terrarun.TerraformRunLogOptions{}, &terrarun.TerraformRunLogOptions{Follow: true}},
		{"follow=F", &terrarun.TerraformRunLogOptions{}, &terrarun.TerraformRunLogOptions{}},
		{"follow=", &terrarun.TerraformRunLogOptions{}, &terrarun.TerraformRunLogOptions{}},
		{"format=json&wait=true", &terrarun.TerraformRunPlanOptions{}, &terrarun.TerraformRunPlanOptions{Format: "json", Wait: true}},
		{"format=file", &terrarun.TerraformRunPlanOptions{}, &terrarun.TerraformRunPlanOptions{Format: "file"}},
		{"", &terrarun.TerraformRunPlanOptions{}, &terrarun.TerraformRunPlanOptions{}},
		// negative numbers parse; validation refuses them
		{"tailLines=-1", &terrarun.TerraformRunLogOptions{}, &terrarun.TerraformRunLogOptions{TailLines: ptr.To[int64](-1)}},
	}
	for _, tc := range cases {
		if err := decode(t, tc.query, tc.into); err != nil {
			t.Errorf("%q: %v", tc.query, err)
			continue
		}
		if diff := cmp.Diff(tc.want, tc.into); diff != "" {
			t.Errorf("%q decoded wrong (-want +got):\n%s", tc.query, diff)
		}
	}
}

func TestDecodeOptionsRefusesWhatDoesNotParse(t *testing.T) {
	cases := []struct {
		query string
		into  runtime.Object
		want  string
	}{
		{"follow=maybe", &terrarun.TerraformRunLogOptions{}, `invalid follow="maybe": must be true or false`},
		{"tailLines=ten", &terrarun.TerraformRunLogOptions{}, `invalid tailLines="ten"`},
		{"limitBytes=1.5", &terrarun.TerraformRunLogOptions{}, `invalid limitBytes="1.5"`},
		{"stage=plan&attempt=x", &terrarun.TerraformRunLogOptions{}, `invalid attempt="x"`},
		{"attempt=4294967296&part=file", &terrarun.TerraformRunPlanOptions{}, `invalid attempt="4294967296"`},
		{"wait=yes", &terrarun.TerraformRunPlanOptions{}, `invalid wait="yes"`},
		{"attempt=", &terrarun.TerraformRunOutputsOptions{}, `invalid attempt=""`},
	}
	for _, tc := range cases {
		err := decode(t, tc.query, tc.into)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.query, err, tc.want)
		}
	}
}

type documented interface {
	runtime.Object
	SwaggerDoc() map[string]string
}

// TestSwaggerDocMatchesOpenAPI keeps the hand-written SwaggerDoc methods,
// which describe the subresources' query parameters, equal to the field
// comments that the generated OpenAPI definitions carry, and makes sure every
// query field has one.
func TestSwaggerDocMatchesOpenAPI(t *testing.T) {
	defs := openapi.GetOpenAPIDefinitions(func(path string) spec.Ref { return spec.MustCreateRef(path) })
	for _, obj := range []documented{&v1alpha1.TerraformRunLogOptions{}, &v1alpha1.TerraformRunPlanOptions{}, &v1alpha1.TerraformRunOutputsOptions{}, &v1alpha1.TerraformRunStateOptions{}} {
		name := reflect.TypeOf(obj).Elem().Name()
		def, ok := defs[obj.(interface{ OpenAPIModelName() string }).OpenAPIModelName()]
		if !ok {
			t.Fatalf("no OpenAPI definition of %s", name)
		}
		want := map[string]string{"": def.Schema.Description}
		for field, prop := range def.Schema.Properties {
			if field != "kind" && field != "apiVersion" {
				want[field] = prop.Description
			}
		}
		if diff := cmp.Diff(want, obj.SwaggerDoc()); diff != "" {
			t.Errorf("%s.SwaggerDoc differs from its field comments (-comments +SwaggerDoc):\n%s", name, diff)
		}
	}
}
