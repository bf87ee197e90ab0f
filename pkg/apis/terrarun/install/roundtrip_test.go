package install

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"testing"

	"github.com/google/go-cmp/cmp"
	apitestingfuzzer "k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/randfill"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	terrarunfuzzer "github.com/terrarun/terrarun/pkg/apis/terrarun/fuzzer"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// TestRoundTripTypes fuzzes every internal kind, converts it to v1alpha1, encodes
// it as JSON, YAML and protobuf, decodes and converts it back, and requires the
// result to equal the original.
func TestRoundTripTypes(t *testing.T) {
	roundtrip.RoundTripTestForAPIGroup(t, Install, terrarunfuzzer.Funcs)
	roundtrip.RoundTripProtobufTestForAPIGroup(t, Install, terrarunfuzzer.Funcs)
}

// TestRoundTripTypesFixedSeeds repeats the round trip with fixed seeds, so that a
// failure is reproducible, and with more objects than the default iterations.
func TestRoundTripTypesFixedSeeds(t *testing.T) {
	scheme, codecs := newScheme()
	for seed := int64(1); seed <= 10; seed++ {
		f := newFiller(seed, codecs)
		roundtrip.RoundTripTypes(t, scheme, codecs, f, nil)
		if t.Failed() {
			t.Fatalf("round trip failed with seed %d", seed)
		}
	}
}

// TestRoundTripExternalTypes round-trips the v1alpha1 kinds through JSON and
// protobuf.
func TestRoundTripExternalTypes(t *testing.T) {
	scheme, codecs := newScheme()
	f := newFiller(rand.Int63(), codecs)
	roundtrip.RoundTripExternalTypes(t, scheme, codecs, f, nil)
}

// TestInternalAndV1alpha1Agree converts fuzzed internal objects (runs,
// approvals and the subresources' query options) to v1alpha1 and requires
// both to have the same JSON. The two versions have the same shape, so this
// catches conversions that lose a field, and also conversions that swap
// fields symmetrically, which a round trip alone would not notice.
func TestInternalAndV1alpha1Agree(t *testing.T) {
	scheme, codecs := newScheme()
	f := newFiller(rand.Int63(), codecs)
	for i := 0; i < 200; i++ {
		in := &terrarun.TerraformRun{}
		f.Fill(in)
		in.TypeMeta = metav1.TypeMeta{}

		out := &v1alpha1.TerraformRun{}
		if err := scheme.Convert(in, out, nil); err != nil {
			t.Fatalf("convert internal to v1alpha1: %v", err)
		}
		out.TypeMeta = metav1.TypeMeta{}
		requireSameJSON(t, in, out)

		back := &terrarun.TerraformRun{}
		if err := scheme.Convert(out, back, nil); err != nil {
			t.Fatalf("convert v1alpha1 to internal: %v", err)
		}
		back.TypeMeta = metav1.TypeMeta{}
		requireSameJSON(t, in, back)

		inApproval := &terrarun.TerraformRunApproval{}
		f.Fill(inApproval)
		inApproval.TypeMeta = metav1.TypeMeta{}
		outApproval := &v1alpha1.TerraformRunApproval{}
		if err := scheme.Convert(inApproval, outApproval, nil); err != nil {
			t.Fatalf("convert approval: %v", err)
		}
		outApproval.TypeMeta = metav1.TypeMeta{}
		requireSameJSON(t, inApproval, outApproval)

		// The query options of the plan, logs and outputs subresources.
		for _, pair := range []struct{ in, out runtime.Object }{
			{&terrarun.TerraformRunLogOptions{}, &v1alpha1.TerraformRunLogOptions{}},
			{&terrarun.TerraformRunPlanOptions{}, &v1alpha1.TerraformRunPlanOptions{}},
			{&terrarun.TerraformRunOutputsOptions{}, &v1alpha1.TerraformRunOutputsOptions{}},
			{&terrarun.TerraformRunStateOptions{}, &v1alpha1.TerraformRunStateOptions{}},
		} {
			f.Fill(pair.in)
			pair.in.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
			if err := scheme.Convert(pair.in, pair.out, nil); err != nil {
				t.Fatalf("convert %T: %v", pair.in, err)
			}
			pair.out.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
			requireSameJSON(t, pair.in, pair.out)
		}
		if t.Failed() {
			return
		}
	}
}

// TestFuzzerCoverage makes sure that the fuzzer really fills the objects that the
// round-trip tests compare, so that they cannot silently pass on empty objects.
func TestFuzzerCoverage(t *testing.T) {
	_, codecs := newScheme()
	f := newFiller(42, codecs)

	seen := map[string]bool{}
	for i := 0; i < 500; i++ {
		run := &terrarun.TerraformRun{}
		f.Fill(run)
		s, st := run.Spec, run.Status

		// invariants the fuzzer promises
		members := 0
		if len(s.Source.Inline) > 0 {
			members++
			seen["source.inline"] = true
		}
		if s.Source.ConfigMap != nil {
			members++
			seen["source.configMap"] = true
		}
		if s.Source.Git != nil {
			members++
			seen["source.git"] = true
		}
		if s.Source.OCI != nil {
			members++
			seen["source.oci"] = true
		}
		if s.Source.SourceRef != nil {
			members++
			seen["source.sourceRef"] = true
		}
		if members != 1 {
			t.Fatalf("source has %d members, want exactly 1: %+v", members, s.Source)
		}
		if s.Operation == "" || s.Workspace == "" {
			t.Fatalf("operation and workspace must be set, got %q and %q", s.Operation, s.Workspace)
		}
		for _, v := range s.Variables {
			if v.Value != "" && v.ValueFrom != nil {
				t.Fatalf("variable %q has both value and valueFrom", v.Name)
			}
			if v.ValueFrom != nil {
				if (v.ValueFrom.SecretKeyRef == nil) == (v.ValueFrom.ConfigMapKeyRef == nil) {
					t.Fatalf("variable %q: valueFrom must have exactly one member", v.Name)
				}
				seen["variables.valueFrom"] = true
			} else {
				seen["variables.value"] = true
			}
		}

		// fields the round trip must see
		if s.Approval.Timeout != nil && s.Approval.Timeout.Duration != 0 {
			seen["approval.timeout"] = true
		}
		if s.Timeouts.Plan != nil && s.Timeouts.Apply != nil {
			seen["timeouts"] = true
		}
		if s.Backend != nil && len(s.Backend.Config) > 0 {
			seen["backend.config"] = true
		}
		if e := s.Executor; e != nil {
			if len(e.Resources.Requests) > 0 && len(e.Resources.Limits) > 0 {
				seen["executor.resources"] = true
			}
			if len(e.Tolerations) > 0 {
				seen["executor.tolerations"] = true
			}
			if len(e.NodeSelector) > 0 {
				seen["executor.nodeSelector"] = true
			}
		}
		if s.Creator != nil && s.Creator.Username != "" {
			seen["creator"] = true
		}
		if len(s.Targets) > 0 && len(s.Replace) > 0 && s.Parallelism != nil && s.Refresh != nil {
			seen["flags"] = true
		}
		if st.Phase != "" {
			seen["status.phase"] = true
		}
		if len(st.Conditions) == 3 {
			seen["status.conditions"] = true
		}
		if st.Plan != nil && st.Plan.Digest != "" && st.Plan.CompletedAt != nil {
			seen["status.plan"] = true
		}
		if st.Approval != nil && st.Approval.ApprovedAt != nil {
			seen["status.approval"] = true
		}
		if st.Source != nil && st.Source.Revision != "" {
			seen["status.source"] = true
		}
		if len(st.Stages) > 0 && st.Stages[0].ExitCode != nil && st.Stages[0].StartTime != nil {
			seen["status.stages"] = true
		}
		for _, o := range st.Outputs {
			if o.Sensitive && o.Value != nil {
				t.Fatalf("sensitive output %q has a value", o.Name)
			}
			if o.Sensitive {
				seen["status.outputs.sensitive"] = true
			} else {
				seen["status.outputs.value"] = true
			}
		}
		if st.StartTime != nil && st.CompletionTime != nil && st.Message != "" {
			seen["status.times"] = true
		}
		if len(run.Labels) > 0 {
			seen["metadata.labels"] = true
		}
	}

	for _, want := range []string{
		"source.inline", "source.configMap", "source.git", "source.oci", "source.sourceRef",
		"variables.value", "variables.valueFrom",
		"approval.timeout", "timeouts", "backend.config",
		"executor.resources", "executor.tolerations", "executor.nodeSelector",
		"creator", "flags",
		"status.phase", "status.conditions", "status.plan", "status.approval", "status.source",
		"status.stages", "status.outputs.sensitive", "status.outputs.value", "status.times",
		"metadata.labels",
	} {
		if !seen[want] {
			t.Errorf("the fuzzer never produced %s in 500 objects", want)
		}
	}
}

func newScheme() (*runtime.Scheme, runtimeserializer.CodecFactory) {
	scheme := runtime.NewScheme()
	Install(scheme)
	return scheme, runtimeserializer.NewCodecFactory(scheme)
}

func newFiller(seed int64, codecs runtimeserializer.CodecFactory) *randfill.Filler {
	return apitestingfuzzer.FuzzerFor(
		apitestingfuzzer.MergeFuzzerFuncs(metafuzzer.Funcs, terrarunfuzzer.Funcs),
		rand.NewSource(seed),
		codecs,
	)
}

func requireSameJSON(t *testing.T, a, b interface{}) {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ja, jb) {
		var ma, mb interface{}
		_ = json.Unmarshal(ja, &ma)
		_ = json.Unmarshal(jb, &mb)
		t.Errorf("%T and %T differ in JSON (-first +second):\n%s", a, b, cmp.Diff(ma, mb))
	}
}
