package apiserver

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

func storedRun(name string) *terrarun.TerraformRun {
	return &terrarun.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "team-a", UID: types.UID("uid-" + name), ResourceVersion: "7",
			Labels: map[string]string{"terrarun.dev/workspace": "network"},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "kubectl-create", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "terrarun.dev/v1alpha1",
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)},
			}},
		},
		Spec: terrarun.TerraformRunSpec{
			Operation: terrarun.OperationApply,
			Source:    terrarun.Source{Inline: map[string]string{"main.tf": `resource "terraform_data" "x" {}`}},
			Variables: []terrarun.Variable{{Name: "region", Value: "eu-west-1"}},
			Workspace: "default",
			Approval:  terrarun.Approval{Mode: terrarun.ApprovalModeManual},
			Creator:   &terrarun.Creator{Username: "alice", Groups: []string{"system:authenticated", "developers"}},
		},
		Status: terrarun.TerraformRunStatus{
			Phase: terrarun.RunPhaseAwaitingApproval,
			Conditions: []metav1.Condition{{
				Type: "Planned", Status: metav1.ConditionTrue, Reason: "PlanReady", Message: "the plan is ready", LastTransitionTime: metav1.Now(),
			}},
			Plan: &terrarun.PlanSummary{Digest: "sha256:" + strings.Repeat(name[:1], 64)},
		},
	}
}

func sameData(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// TestInterningCodec: two runs decoded from storage share the strings they
// have in common, and keep their own values unchanged.
func TestInterningCodec(t *testing.T) {
	codec, err := StorageCodec(runtime.ContentTypeProtobuf, v1alpha1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	var decoded []*terrarun.TerraformRun
	for _, name := range []string{"a-run", "b-run"} {
		data, err := runtime.Encode(codec, storedRun(name))
		if err != nil {
			t.Fatal(err)
		}
		obj, err := runtime.Decode(codec, data)
		if err != nil {
			t.Fatal(err)
		}
		run := obj.(*terrarun.TerraformRun)
		want := storedRun(name)
		want.Status.Conditions[0].LastTransitionTime = run.Status.Conditions[0].LastTransitionTime
		if !apiequality.Semantic.DeepEqual(run, want) {
			t.Fatalf("%s decoded as %+v, want %+v", name, run, want)
		}
		decoded = append(decoded, run)
	}
	a, b := decoded[0], decoded[1]
	for what, pair := range map[string][2]string{
		"namespace":         {a.Namespace, b.Namespace},
		"label value":       {a.Labels["terrarun.dev/workspace"], b.Labels["terrarun.dev/workspace"]},
		"manager":           {a.ManagedFields[0].Manager, b.ManagedFields[0].Manager},
		"configuration":     {a.Spec.Source.Inline["main.tf"], b.Spec.Source.Inline["main.tf"]},
		"variable value":    {a.Spec.Variables[0].Value, b.Spec.Variables[0].Value},
		"creator":           {a.Spec.Creator.Username, b.Spec.Creator.Username},
		"creator's group":   {a.Spec.Creator.Groups[1], b.Spec.Creator.Groups[1]},
		"phase":             {string(a.Status.Phase), string(b.Status.Phase)},
		"condition message": {a.Status.Conditions[0].Message, b.Status.Conditions[0].Message},
	} {
		if !sameData(pair[0], pair[1]) {
			t.Errorf("the two runs' %s (%q) are two copies, want one", what, pair[0])
		}
	}
	if &a.ManagedFields[0].FieldsV1.Raw[0] != &b.ManagedFields[0].FieldsV1.Raw[0] {
		t.Error("the two runs' managed fields are two copies, want one")
	}
	if a.Name == b.Name || a.UID == b.UID || a.Status.Plan.Digest == b.Status.Plan.Digest {
		t.Errorf("the runs' own values were mixed up: %q/%q, %q/%q, %q/%q", a.Name, b.Name, a.UID, b.UID, a.Status.Plan.Digest, b.Status.Plan.Digest)
	}
}

// TestInternTableBounds: the table starts afresh rather than grow past its
// bounds, and leaves long strings alone.
func TestInternTableBounds(t *testing.T) {
	var table internTable
	first := table.get(strings.Clone("kept"))
	if got := table.get(strings.Clone("kept")); !sameData(got, first) {
		t.Fatal("a string seen before was not shared")
	}
	for i := range internMaxEntries {
		table.get(fmt.Sprint("s", i))
	}
	if len(table.m)+len(table.raw) > internMaxEntries {
		t.Errorf("the table holds %d strings, want at most %d", len(table.m)+len(table.raw), internMaxEntries)
	}
	if got := table.get(strings.Clone("kept")); sameData(got, first) {
		t.Error("the table kept its first strings past its bound")
	}
	long := strings.Repeat("x", internMaxLen+1)
	table.get(long)
	if _, ok := table.m[long]; ok {
		t.Error("a string longer than internMaxLen was interned")
	}
	for range internMaxBytes/internMaxLen + 1 {
		table.get(strings.Repeat("y", internMaxLen) + fmt.Sprint(len(table.m)))
		if table.bytes > internMaxBytes {
			t.Fatalf("the table holds %d bytes, want at most %d", table.bytes, internMaxBytes)
		}
	}
}
