package runrules

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

func TestStateKey(t *testing.T) {
	run := func(ns, ws string, b *v1alpha1.Backend) *v1alpha1.TerraformRun {
		return &v1alpha1.TerraformRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns}, Spec: v1alpha1.TerraformRunSpec{Workspace: ws, Backend: b}}
	}
	s3 := func(key string) *v1alpha1.Backend {
		return &v1alpha1.Backend{Type: "s3", Config: map[string]string{"bucket": "b", "key": key}}
	}
	same := [][2]*v1alpha1.TerraformRun{
		{run("a", "", nil), run("a", "default", nil)},
		{run("a", "", nil), run("a", "", &v1alpha1.Backend{Type: "local"})},
		{run("a", "x", s3("k")), run("a", "x", &v1alpha1.Backend{Type: "s3", Config: map[string]string{"key": "k", "bucket": "b"}})},
	}
	for _, p := range same {
		if StateKey(p[0]) != StateKey(p[1]) {
			t.Errorf("%+v and %+v should share a state", p[0].Spec, p[1].Spec)
		}
	}
	different := [][2]*v1alpha1.TerraformRun{
		{run("a", "", nil), run("b", "", nil)},
		{run("a", "x", nil), run("a", "y", nil)},
		{run("a", "", nil), run("a", "", &v1alpha1.Backend{Type: "local", Config: map[string]string{"path": "/s/t.tfstate"}})},
		{run("a", "", s3("k1")), run("a", "", s3("k2"))},
		{run("a", "", &v1alpha1.Backend{Type: "s3", ConfigSecret: "one"}), run("a", "", &v1alpha1.Backend{Type: "s3", ConfigSecret: "two"})},
		// No ambiguity from the separator: a=b=c is not a=b and c.
		{run("a", "", &v1alpha1.Backend{Type: "t", Config: map[string]string{"a": "b=c"}}), run("a", "", &v1alpha1.Backend{Type: "t", Config: map[string]string{"a=b": "c"}})},
	}
	for _, p := range different {
		if StateKey(p[0]) == StateKey(p[1]) {
			t.Errorf("%+v and %+v should not share a state", p[0].Spec, p[1].Spec)
		}
	}
}

func TestChangedStateAfter(t *testing.T) {
	plan := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: plan.Add(d)} }
	planStage := StageOrder{Start: at(0)}
	for _, tc := range []struct {
		name       string
		start, end *metav1.Time
		want       bool
	}{
		{"never started", nil, nil, false},
		{"before the plan", at(-time.Minute), at(-30 * time.Second), false},
		{"ended in the plan's second", at(0), at(0), false},
		{"after the plan", at(time.Minute), at(2 * time.Minute), true},
		{"running since the plan's second", at(0), nil, true},
		{"ended after the plan started", at(0), at(time.Second), true},
	} {
		if got := ChangedStateAfter(StageOrder{Start: tc.start, End: tc.end}, planStage); got != tc.want {
			t.Errorf("%s, without revisions: %v, want %v", tc.name, got, tc.want)
		}
	}
	// In one second both ways, which the times cannot tell apart: the start
	// revisions can.
	before := StageOrder{Start: at(0), End: at(0), Revision: 41}
	after := StageOrder{Start: at(0), End: at(0), Revision: 43}
	withRevision := StageOrder{Start: at(0), Revision: 42}
	if ChangedStateAfter(before, withRevision) || !ChangedStateAfter(after, withRevision) {
		t.Error("applies in the plan's second are not ordered by their start revisions")
	}
}
