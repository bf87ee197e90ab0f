package terraformworkspace

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// cond is a condition a test expects: its type, status and reason.
type cond struct {
	typ    string
	status metav1.ConditionStatus
	reason string
}

// expectConditions checks each of want on ws.
func expectConditions(t *testing.T, ws *v1alpha1.TerraformWorkspace, want ...cond) {
	t.Helper()
	for _, c := range want {
		expectCondition(t, ws, c.typ, c.status, c.reason)
	}
}

var (
	readyApplied   = cond{v1alpha1.WorkspaceConditionReady, metav1.ConditionTrue, ReasonApplied}
	notReadyRun    = cond{v1alpha1.WorkspaceConditionReady, metav1.ConditionFalse, ReasonRunning}
	reconciling    = cond{v1alpha1.WorkspaceConditionReconciling, metav1.ConditionTrue, ReasonRunning}
	notReconciling = cond{v1alpha1.WorkspaceConditionReconciling, metav1.ConditionFalse, ReasonWaiting}
)

// objects returns ws and runs as objects for newHarness.
func objects(ws *v1alpha1.TerraformWorkspace, runs ...*v1alpha1.TerraformRun) []k8sruntime.Object {
	objs := []k8sruntime.Object{ws}
	for _, r := range runs {
		objs = append(objs, r)
	}
	return objs
}

// ---------------------------------------------------------------------------
// Spec change.

// TestSpecChange: a desired hash other than the last applied one starts an
// Apply run (SpecChange) when no run is under way, and only then; a failed
// run of the current spec is not retried in a loop.
func TestSpecChange(t *testing.T) {
	v1 := newWorkspace(testWS)
	v2 := newWorkspace(testWS, specV2)
	configMapSource := func(ws *v1alpha1.TerraformWorkspace) {
		ws.Spec.Template.Source = v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Name: "tf"}}
	}
	cm := newWorkspace(testWS, configMapSource)
	oldData := map[string]string{"main.tf": `resource "terraform_data" "v1" {}`}
	newData := map[string]string{"main.tf": `resource "terraform_data" "v2" {}`}
	oldDigest := digestOf(t, cm, oldData)
	for _, tc := range []struct {
		name       string
		ws         *v1alpha1.TerraformWorkspace
		runs       []*v1alpha1.TerraformRun
		configMaps map[string]map[string]string
		wantRun    string // "" for none
		wantDigest string // the run's configmap-digest annotation
		wantCur    string
		// stopped: the sync stopped before it observed the generation (a
		// ConfigMap it could not read)
		stopped bool
		want    []cond
	}{{
		name:    "a new workspace",
		ws:      v1,
		wantRun: "net-1", wantCur: "net-1",
		want: []cond{reconciling, notReadyRun},
	}, {
		name:    "the spec changed after an apply",
		ws:      v2,
		runs:    []*v1alpha1.TerraformRun{newRun(v1, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, succeeded(t0.Add(-time.Hour)))},
		wantRun: "net-2", wantCur: "net-2",
		want: []cond{reconciling, notReadyRun},
	}, {
		name: "the current spec is applied",
		ws:   v2,
		runs: []*v1alpha1.TerraformRun{newRun(v2, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, succeeded(t0.Add(-time.Hour)))},
		want: []cond{readyApplied, notReconciling},
	}, {
		// The image verification pinned the run to a digest: the
		// workspace asked for the image, and it is applied.
		name: "the current spec is applied with its image pinned",
		ws:   v2,
		runs: []*v1alpha1.TerraformRun{newRun(v2, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, succeeded(t0.Add(-time.Hour)),
			func(r *v1alpha1.TerraformRun) { r.Spec.Engine.ImageDigest = "sha256:" + strings.Repeat("a", 64) })},
		want: []cond{readyApplied, notReconciling},
	}, {
		name:    "a run of an older spec is under way",
		ws:      v2,
		runs:    []*v1alpha1.TerraformRun{newRun(v1, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, phase(v1alpha1.RunPhaseApplying))},
		wantCur: "net-1",
		want:    []cond{reconciling, notReadyRun},
	}, {
		name:    "the current spec's run is pending",
		ws:      v1,
		runs:    []*v1alpha1.TerraformRun{newRun(v1, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange)},
		wantCur: "net-1",
		want:    []cond{reconciling, notReadyRun},
	}, {
		name: "the current spec's run failed",
		ws:   v2,
		runs: []*v1alpha1.TerraformRun{
			newRun(v1, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, succeeded(t0.Add(-time.Hour))),
			newRun(v2, 2, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, ended(v1alpha1.RunPhaseFailed, t0.Add(-time.Minute))),
		},
		want: []cond{
			{v1alpha1.WorkspaceConditionStalled, metav1.ConditionTrue, ReasonRunFailed},
			{v1alpha1.WorkspaceConditionReady, metav1.ConditionFalse, ReasonRunFailed},
			notReconciling,
		},
	}, {
		name: "a ConfigMap the template reads changed",
		ws:   cm,
		runs: []*v1alpha1.TerraformRun{newRun(cm, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, succeeded(t0.Add(-time.Hour)),
			func(r *v1alpha1.TerraformRun) { r.Annotations[v1alpha1.AnnotationConfigMapDigest] = oldDigest })},
		configMaps: map[string]map[string]string{"tf": newData},
		wantRun:    "net-2", wantCur: "net-2", wantDigest: digestOf(t, cm, newData),
		want: []cond{reconciling, notReadyRun},
	}, {
		name: "the ConfigMaps the template reads are as applied",
		ws:   cm,
		runs: []*v1alpha1.TerraformRun{newRun(cm, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, succeeded(t0.Add(-time.Hour)),
			func(r *v1alpha1.TerraformRun) { r.Annotations[v1alpha1.AnnotationConfigMapDigest] = oldDigest })},
		configMaps: map[string]map[string]string{"tf": oldData},
		want:       []cond{readyApplied, notReconciling},
	}, {
		name:    "a ConfigMap the template reads is missing",
		ws:      cm,
		stopped: true,
		want:    []cond{{v1alpha1.WorkspaceConditionStalled, metav1.ConditionTrue, ReasonConfigMapUnreadable}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, objects(tc.ws.DeepCopy(), tc.runs...)...)
			h.configMaps = tc.configMaps
			h.mustSync(testWS)
			ws := h.ws(testWS)
			if tc.wantRun == "" {
				h.expectNoRun()
			} else {
				run := h.createdOne()
				expectRun(t, run, ws, tc.wantRun, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange)
				if got := runHash(run); got != ws.Status.DesiredHash {
					t.Errorf("the run's hash %s is not the desired hash %s", got, ws.Status.DesiredHash)
				}
				if got := run.Annotations[v1alpha1.AnnotationConfigMapDigest]; got != tc.wantDigest {
					t.Errorf("%s = %q, want %q", v1alpha1.AnnotationConfigMapDigest, got, tc.wantDigest)
				}
				if ws.Status.LastRun != tc.wantRun {
					t.Errorf("status.lastRun = %q, want %q", ws.Status.LastRun, tc.wantRun)
				}
				h.expectEvent("Normal RunCreated Created run " + tc.wantRun + " (Apply, SpecChange)")
			}
			if ws.Status.CurrentRun != tc.wantCur {
				t.Errorf("status.currentRun = %q, want %q", ws.Status.CurrentRun, tc.wantCur)
			}
			if wantGen := tc.ws.Generation; !tc.stopped && ws.Status.ObservedGeneration != wantGen {
				t.Errorf("status.observedGeneration = %d, want %d", ws.Status.ObservedGeneration, wantGen)
			}
			expectConditions(t, ws, tc.want...)
			if names, _ := h.discarded(); len(names) > 0 {
				t.Errorf("discarded %q, want none", names)
			}
		})
	}
}

// digestOf is the configmap-digest of ws's runs when ConfigMap tf holds data.
func digestOf(t *testing.T, ws *v1alpha1.TerraformWorkspace, data map[string]string) string {
	t.Helper()
	spec := runSpec(ws, v1alpha1.OperationApply, func(string) string { return "" })
	d, err := configMapDigest(t.Context(), &spec, testNS, func(context.Context, string, string) (map[string]string, error) { return data, nil })
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSpecChangeOneRunAtATime follows one workspace through its syncs: the
// first creates a run, syncs while it is under way create none, even when
// the spec changes again meanwhile, and the run's end brings the next.
func TestSpecChangeOneRunAtATime(t *testing.T) {
	h := newHarness(t, newWorkspace(testWS))
	h.mustSync(testWS)
	expectRun(t, h.createdOne(), h.ws(testWS), "net-1", v1alpha1.OperationApply, v1alpha1.TriggerSpecChange)

	h.mustSync(testWS)
	h.expectNoRun()

	ws := h.ws(testWS)
	specV2(ws)
	if err := h.cs.Tracker().Update(workspacesGVR, ws, testNS); err != nil {
		t.Fatal(err)
	}
	h.updateRun("net-1", phase(v1alpha1.RunPhaseApplying))
	h.mustSync(testWS)
	h.expectNoRun()
	ws = h.ws(testWS)
	if ws.Status.CurrentRun != "net-1" || ws.Status.ObservedGeneration != 2 {
		t.Errorf("currentRun %q observedGeneration %d, want net-1 and 2", ws.Status.CurrentRun, ws.Status.ObservedGeneration)
	}
	expectConditions(t, ws, reconciling, notReadyRun)

	h.updateRun("net-1", succeeded(t0))
	h.mustSync(testWS)
	expectRun(t, h.createdOne(), h.ws(testWS), "net-2", v1alpha1.OperationApply, v1alpha1.TriggerSpecChange)
	ws = h.ws(testWS)
	if ws.Status.LastAppliedRun != "net-1" || ws.Status.LastAppliedHash != runHash(h.run("net-1")) || ws.Status.LastAppliedHash == ws.Status.DesiredHash {
		t.Errorf("lastAppliedRun %q lastAppliedHash %q desiredHash %q: want net-1's hash, not the desired one",
			ws.Status.LastAppliedRun, ws.Status.LastAppliedHash, ws.Status.DesiredHash)
	}

	h.updateRun("net-2", succeeded(t0.Add(time.Minute)))
	h.mustSync(testWS)
	h.expectNoRun()
	ws = h.ws(testWS)
	if ws.Status.LastAppliedRun != "net-2" || ws.Status.LastAppliedHash != ws.Status.DesiredHash || ws.Status.CurrentRun != "" {
		t.Errorf("lastAppliedRun %q currentRun %q, hashes %s/%s: want net-2, none, equal", ws.Status.LastAppliedRun, ws.Status.CurrentRun, ws.Status.LastAppliedHash, ws.Status.DesiredHash)
	}
	expectConditions(t, ws, readyApplied, notReconciling)
}

// ---------------------------------------------------------------------------
// New revision.

// TestNewRevision: for a git source, a drift check that resolved the ref to
// another commit (for an OCI source, the tag to another digest) makes the desired hash another; when the spec is the one
// applied, the run that follows says NewRevision, and the check's changes
// are new code, not drift.
func TestNewRevision(t *testing.T) {
	t.Run("git", func(t *testing.T) {
		testNewRevision(t, gitSource, func(src *v1alpha1.Source) { src.Git.Path = "envs/prod" })
	})
	t.Run("oci", func(t *testing.T) {
		testNewRevision(t, ociSource, func(src *v1alpha1.Source) { src.OCI.Path = "envs/prod" })
	})
}

// testNewRevision is TestNewRevision for the source that source sets;
// otherPath changes the directory it names.
func testNewRevision(t *testing.T, source func(*v1alpha1.TerraformWorkspace), otherDir func(*v1alpha1.Source)) {
	ws := newWorkspace(testWS, source, every(10*time.Minute))
	otherPath := newWorkspace(testWS, source, every(10*time.Minute), func(ws *v1alpha1.TerraformWorkspace) {
		ws.Generation = 2
		otherDir(&ws.Spec.Template.Source)
	})
	applied := newRun(ws, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, atRevision("aaaa"), planned(true), succeeded(t0.Add(-30*time.Minute)))
	// What an earlier sync observed of net-1.
	for _, w := range []*v1alpha1.TerraformWorkspace{ws, otherPath} {
		w.Status.LastAppliedRun, w.Status.LastAppliedHash, w.Status.LastAppliedRevision = applied.Name, runHash(applied), "aaaa"
	}
	check := func(rev string, changes bool) *v1alpha1.TerraformRun {
		return newRun(ws, 2, v1alpha1.OperationPlan, v1alpha1.TriggerDriftCheck, atRevision(rev), planned(changes), succeeded(t0.Add(-5*time.Minute)))
	}
	for _, tc := range []struct {
		name        string
		ws          *v1alpha1.TerraformWorkspace
		runs        []*v1alpha1.TerraformRun
		wantWhy     v1alpha1.Trigger // "" for no run
		wantDesired string
		wantDrifted *cond
	}{{
		name:        "the ref moved",
		ws:          ws,
		runs:        []*v1alpha1.TerraformRun{applied, check("bbbb", true)},
		wantWhy:     v1alpha1.TriggerNewRevision,
		wantDesired: Hash(applied.Spec, "bbbb", ""),
	}, {
		name:        "the ref moved and the spec changed",
		ws:          otherPath,
		runs:        []*v1alpha1.TerraformRun{applied, check("bbbb", true)},
		wantWhy:     v1alpha1.TriggerSpecChange,
		wantDesired: Hash(runSpec(otherPath, v1alpha1.OperationApply, nil), "aaaa", ""),
	}, {
		name:        "the ref did not move",
		ws:          ws,
		runs:        []*v1alpha1.TerraformRun{applied, check("aaaa", false)},
		wantDesired: Hash(applied.Spec, "aaaa", ""),
		wantDrifted: &cond{v1alpha1.WorkspaceConditionDrifted, metav1.ConditionFalse, ReasonNoChanges},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, objects(tc.ws.DeepCopy(), tc.runs...)...)
			h.mustSync(testWS)
			got := h.ws(testWS)
			if got.Status.DesiredHash != tc.wantDesired {
				t.Errorf("status.desiredHash = %s, want %s", got.Status.DesiredHash, tc.wantDesired)
			}
			if got.Status.LastAppliedRevision != "aaaa" {
				t.Errorf("status.lastAppliedRevision = %q, want aaaa", got.Status.LastAppliedRevision)
			}
			if tc.wantWhy == "" {
				h.expectNoRun()
				expectConditions(t, got, readyApplied)
			} else {
				expectRun(t, h.createdOne(), got, "net-3", v1alpha1.OperationApply, tc.wantWhy)
				expectConditions(t, got, reconciling, notReadyRun)
			}
			if tc.wantDrifted == nil {
				expectNoCondition(t, got, v1alpha1.WorkspaceConditionDrifted)
			} else {
				expectConditions(t, got, *tc.wantDrifted)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Drift.

// TestDrift: with an interval, a plan-only DriftCheck run follows the last
// apply or check by that interval; a check that found changes sets Drifted
// (Report) or starts a DriftRepair apply (Apply); an apply after the check
// clears Drifted.
func TestDrift(t *testing.T) {
	const iv = 10 * time.Minute
	ws := newWorkspace(testWS, every(iv))
	apply := func(n int, why v1alpha1.Trigger, at time.Time) *v1alpha1.TerraformRun {
		return newRun(ws, n, v1alpha1.OperationApply, why, planned(true), succeeded(at))
	}
	check := func(n int, changes bool, at time.Time) *v1alpha1.TerraformRun {
		return newRun(ws, n, v1alpha1.OperationPlan, v1alpha1.TriggerDriftCheck, planned(changes), succeeded(at))
	}
	drifted := func(ws *v1alpha1.TerraformWorkspace) {
		meta.SetStatusCondition(&ws.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkspaceConditionDrifted, Status: metav1.ConditionTrue, Reason: ReasonChangesFound})
	}
	for _, tc := range []struct {
		name        string
		policy      v1alpha1.DriftPolicy
		mutate      func(*v1alpha1.TerraformWorkspace)
		runs        []*v1alpha1.TerraformRun
		wantOp      v1alpha1.Operation // "" for no run
		wantWhy     v1alpha1.Trigger
		wantNext    time.Time
		wantLast    time.Time // zero for no check yet
		wantAfter   time.Duration
		wantDrifted *cond // nil for none
		wantMessage string
	}{{
		name:      "the interval has not passed since the apply",
		runs:      []*v1alpha1.TerraformRun{apply(1, v1alpha1.TriggerSpecChange, t0.Add(-4*time.Minute))},
		wantNext:  t0.Add(6 * time.Minute),
		wantAfter: 6 * time.Minute,
	}, {
		name:   "the interval has passed since the apply",
		runs:   []*v1alpha1.TerraformRun{apply(1, v1alpha1.TriggerSpecChange, t0.Add(-iv))},
		wantOp: v1alpha1.OperationPlan, wantWhy: v1alpha1.TriggerDriftCheck,
		wantNext: t0,
	}, {
		name: "the interval has passed since the last check",
		runs: []*v1alpha1.TerraformRun{
			apply(1, v1alpha1.TriggerSpecChange, t0.Add(-time.Hour)),
			check(2, false, t0.Add(-iv-time.Second)),
		},
		wantOp: v1alpha1.OperationPlan, wantWhy: v1alpha1.TriggerDriftCheck,
		wantNext: t0.Add(-time.Second), wantLast: t0.Add(-iv - time.Second),
		wantDrifted: &cond{v1alpha1.WorkspaceConditionDrifted, metav1.ConditionFalse, ReasonNoChanges},
	}, {
		name: "a check found no changes",
		runs: []*v1alpha1.TerraformRun{
			apply(1, v1alpha1.TriggerSpecChange, t0.Add(-time.Hour)),
			check(2, false, t0.Add(-time.Minute)),
		},
		wantNext: t0.Add(9 * time.Minute), wantLast: t0.Add(-time.Minute), wantAfter: 9 * time.Minute,
		wantDrifted: &cond{v1alpha1.WorkspaceConditionDrifted, metav1.ConditionFalse, ReasonNoChanges},
		wantMessage: "Drift check net-2 found no changes.",
	}, {
		name: "a check found changes, Report",
		runs: []*v1alpha1.TerraformRun{
			apply(1, v1alpha1.TriggerSpecChange, t0.Add(-time.Hour)),
			check(2, true, t0.Add(-time.Minute)),
		},
		wantNext: t0.Add(9 * time.Minute), wantLast: t0.Add(-time.Minute), wantAfter: 9 * time.Minute,
		wantDrifted: &cond{v1alpha1.WorkspaceConditionDrifted, metav1.ConditionTrue, ReasonChangesFound},
		wantMessage: "Drift check net-2 found changes: +1 ~2 -0",
	}, {
		name:   "a check found changes, Apply",
		policy: v1alpha1.DriftPolicyApply,
		runs: []*v1alpha1.TerraformRun{
			apply(1, v1alpha1.TriggerSpecChange, t0.Add(-time.Hour)),
			check(2, true, t0.Add(-time.Minute)),
		},
		wantOp: v1alpha1.OperationApply, wantWhy: v1alpha1.TriggerDriftRepair,
		wantNext: t0.Add(9 * time.Minute), wantLast: t0.Add(-time.Minute),
		wantDrifted: &cond{v1alpha1.WorkspaceConditionDrifted, metav1.ConditionTrue, ReasonChangesFound},
	}, {
		name:   "a check found no changes, Apply",
		policy: v1alpha1.DriftPolicyApply,
		runs: []*v1alpha1.TerraformRun{
			apply(1, v1alpha1.TriggerSpecChange, t0.Add(-time.Hour)),
			check(2, false, t0.Add(-time.Minute)),
		},
		wantNext: t0.Add(9 * time.Minute), wantLast: t0.Add(-time.Minute), wantAfter: 9 * time.Minute,
		wantDrifted: &cond{v1alpha1.WorkspaceConditionDrifted, metav1.ConditionFalse, ReasonNoChanges},
	}, {
		// Not at once: a check that cannot run (an unreachable repository,
		// expired credentials) would start again as soon as it ended.
		name: "a check failed: the next is an interval after it",
		runs: []*v1alpha1.TerraformRun{
			apply(1, v1alpha1.TriggerSpecChange, t0.Add(-time.Hour)),
			newRun(ws, 2, v1alpha1.OperationPlan, v1alpha1.TriggerDriftCheck, ended(v1alpha1.RunPhaseFailed, t0.Add(-time.Minute))),
		},
		wantNext: t0.Add(9 * time.Minute), wantAfter: 9 * time.Minute,
	}, {
		name: "a check was canceled: the next is an interval after it",
		runs: []*v1alpha1.TerraformRun{
			apply(1, v1alpha1.TriggerSpecChange, t0.Add(-time.Hour)),
			check(2, true, t0.Add(-30*time.Minute)),
			newRun(ws, 3, v1alpha1.OperationPlan, v1alpha1.TriggerDriftCheck, ended(v1alpha1.RunPhaseCanceled, t0.Add(-time.Minute))),
		},
		wantNext: t0.Add(9 * time.Minute), wantLast: t0.Add(-30 * time.Minute), wantAfter: 9 * time.Minute,
		wantDrifted: &cond{v1alpha1.WorkspaceConditionDrifted, metav1.ConditionTrue, ReasonChangesFound},
	}, {
		name:   "the repair applied",
		policy: v1alpha1.DriftPolicyApply,
		mutate: drifted,
		runs: []*v1alpha1.TerraformRun{
			apply(1, v1alpha1.TriggerSpecChange, t0.Add(-time.Hour)),
			check(2, true, t0.Add(-2*time.Minute)),
			apply(3, v1alpha1.TriggerDriftRepair, t0.Add(-time.Minute)),
		},
		wantNext: t0.Add(9 * time.Minute), wantLast: t0.Add(-2 * time.Minute), wantAfter: 9 * time.Minute,
		wantDrifted: &cond{v1alpha1.WorkspaceConditionDrifted, metav1.ConditionFalse, ReasonApplied},
		wantMessage: "Run net-3 applied after the last drift check.",
	}, {
		name:   "a check found changes, Apply, suspended",
		policy: v1alpha1.DriftPolicyApply,
		mutate: func(ws *v1alpha1.TerraformWorkspace) { ws.Spec.Suspend = true },
		runs: []*v1alpha1.TerraformRun{
			apply(1, v1alpha1.TriggerSpecChange, t0.Add(-time.Hour)),
			check(2, true, t0.Add(-time.Minute)),
		},
		wantNext: t0.Add(9 * time.Minute), wantLast: t0.Add(-time.Minute),
		wantDrifted: &cond{v1alpha1.WorkspaceConditionDrifted, metav1.ConditionTrue, ReasonChangesFound},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			w := ws.DeepCopy()
			w.Spec.DriftPolicy = tc.policy
			if tc.mutate != nil {
				tc.mutate(w)
			}
			h := newHarness(t, objects(w, tc.runs...)...)
			after := h.mustSync(testWS)
			got := h.ws(testWS)
			if tc.wantOp == "" {
				h.expectNoRun()
			} else {
				expectRun(t, h.createdOne(), got, fmt.Sprintf("net-%d", len(tc.runs)+1), tc.wantOp, tc.wantWhy)
				expectConditions(t, got, reconciling)
			}
			if after != tc.wantAfter {
				t.Errorf("requeue after %v, want %v", after, tc.wantAfter)
			}
			if n := got.Status.NextDriftCheck; n == nil || !n.Time.Equal(tc.wantNext) {
				t.Errorf("status.nextDriftCheck = %v, want %v", n, tc.wantNext)
			}
			switch l := got.Status.LastDriftCheck; {
			case tc.wantLast.IsZero() && l != nil:
				t.Errorf("status.lastDriftCheck = %v, want none", l)
			case !tc.wantLast.IsZero() && (l == nil || !l.Time.Equal(tc.wantLast)):
				t.Errorf("status.lastDriftCheck = %v, want %v", l, tc.wantLast)
			}
			if tc.wantDrifted == nil {
				expectNoCondition(t, got, v1alpha1.WorkspaceConditionDrifted)
				return
			}
			c := expectCondition(t, got, tc.wantDrifted.typ, tc.wantDrifted.status, tc.wantDrifted.reason)
			if !strings.HasPrefix(c.Message, tc.wantMessage) {
				t.Errorf("Drifted says %q, want it to start with %q", c.Message, tc.wantMessage)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Superseded.

// TestSuperseded: a plan that waits for approval and whose hash is not the
// desired one is discarded through the discard subresource, with reason
// Superseded; a run of the current spec follows once it has ended.
func TestSuperseded(t *testing.T) {
	v1 := newWorkspace(testWS)
	v2 := newWorkspace(testWS, specV2)
	for _, tc := range []struct {
		name        string
		run         *v1alpha1.TerraformRun
		wantDiscard bool
	}{
		{"a plan of an older spec awaits approval", newRun(v1, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, planned(true), phase(v1alpha1.RunPhaseAwaitingApproval)), true},
		{"a plan of the current spec awaits approval", newRun(v2, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, planned(true), phase(v1alpha1.RunPhaseAwaitingApproval)), false},
		{"a run of an older spec is planning", newRun(v1, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, phase(v1alpha1.RunPhasePlanning)), false},
		{"a run of an older spec is applying", newRun(v1, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, planned(true), phase(v1alpha1.RunPhaseApplying)), false},
		{"a drift check of an older spec awaits approval", newRun(v1, 1, v1alpha1.OperationPlan, v1alpha1.TriggerDriftCheck, planned(true), phase(v1alpha1.RunPhaseAwaitingApproval)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, v2.DeepCopy(), tc.run)
			h.mustSync(testWS)
			h.expectNoRun()
			got := h.ws(testWS)
			if got.Status.CurrentRun != "net-1" {
				t.Errorf("status.currentRun = %q, want net-1", got.Status.CurrentRun)
			}
			expectConditions(t, got, reconciling, notReadyRun)
			names, bodies := h.discarded()
			if !tc.wantDiscard {
				if len(names) > 0 {
					t.Errorf("discarded %q, want none", names)
				}
				return
			}
			if len(names) != 1 || names[0] != "net-1" {
				t.Fatalf("discarded %q, want [net-1]", names)
			}
			wantComment := "Superseded: workspace net changed since this plan was made; a run of its current spec follows."
			if bodies[0].Reason != ReasonSuperseded || bodies[0].Comment != wantComment {
				t.Errorf("discard reason %q comment %q, want %q %q", bodies[0].Reason, bodies[0].Comment, ReasonSuperseded, wantComment)
			}
			h.expectEvent("Normal Superseded Discarded run net-1")
		})
	}
}

// TestSupersededThenFollowed: the fake clientset records the discard but
// cannot serve it (its body has no name: the tracker answers NotFound, which
// the controller takes for a run that ended meanwhile); with a reactor that
// discards as the server does, the next sync starts the current spec's run.
func TestSupersededThenFollowed(t *testing.T) {
	v1, v2 := newWorkspace(testWS), newWorkspace(testWS, specV2)
	h := newHarness(t, v2, newRun(v1, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, planned(true), phase(v1alpha1.RunPhaseAwaitingApproval)))

	h.mustSync(testWS)
	if names, _ := h.discarded(); !slices.Equal(names, []string{"net-1"}) {
		t.Fatalf("discarded %q, want [net-1]", names)
	}
	if p := h.run("net-1").Status.Phase; p != v1alpha1.RunPhaseAwaitingApproval {
		t.Fatalf("without a reactor the fake stored phase %s; the test's premise changed", p)
	}

	h.cs.PrependReactor("create", "terraformruns", func(action k8stesting.Action) (bool, k8sruntime.Object, error) {
		if action.GetSubresource() != "discard" {
			return false, nil, nil
		}
		name := action.(k8stesting.CreateActionImpl).Name
		obj, err := h.cs.Tracker().Get(runsGVR, testNS, name)
		if err != nil {
			return true, nil, err
		}
		run := obj.(*v1alpha1.TerraformRun).DeepCopy()
		run.Status.Phase = v1alpha1.RunPhaseDiscarded
		run.Status.CompletionTime = ptr.To(metav1.NewTime(t0))
		run.Status.Message = action.(k8stesting.CreateAction).GetObject().(*v1alpha1.TerraformRunDiscard).Comment
		return true, run, h.cs.Tracker().Update(runsGVR, run, testNS)
	})
	h.mustSync(testWS)
	h.expectNoRun() // the cache still showed the run AwaitingApproval
	if p := h.run("net-1").Status.Phase; p != v1alpha1.RunPhaseDiscarded {
		t.Fatalf("net-1 is %s, want Discarded", p)
	}
	h.mustSync(testWS)
	expectRun(t, h.createdOne(), h.ws(testWS), "net-2", v1alpha1.OperationApply, v1alpha1.TriggerSpecChange)
	if names, _ := h.discarded(); len(names) > 0 {
		t.Errorf("discarded %q after net-1 ended, want none", names)
	}
}

// ---------------------------------------------------------------------------
// Rerun.

// TestRerun: status.rerunRequests above observedRerunRequests starts one
// Apply run (Rerun) that names the request it serves and who asked.
func TestRerun(t *testing.T) {
	ws := newWorkspace(testWS)
	applied := newRun(ws, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, succeeded(t0.Add(-time.Hour)))
	rerun := func(requests, observed int64, by string) func(*v1alpha1.TerraformWorkspace) {
		return func(ws *v1alpha1.TerraformWorkspace) {
			ws.Status.RerunRequests, ws.Status.ObservedRerunRequests, ws.Status.RerunRequestedBy = requests, observed, by
		}
	}
	served := func(n string) func(*v1alpha1.TerraformRun) {
		return func(r *v1alpha1.TerraformRun) { r.Annotations[v1alpha1.AnnotationRerunRequest] = n }
	}
	for _, tc := range []struct {
		name          string
		mutate        []func(*v1alpha1.TerraformWorkspace)
		runs          []*v1alpha1.TerraformRun
		wantRun       string // "" for none
		wantRequest   string
		wantRequested []string
		wantObserved  int64
	}{{
		name:    "bob asked",
		mutate:  []func(*v1alpha1.TerraformWorkspace){rerun(1, 0, "bob")},
		runs:    []*v1alpha1.TerraformRun{applied},
		wantRun: "net-2", wantRequest: "1", wantRequested: []string{"bob"}, wantObserved: 1,
	}, {
		name:    "the creator asked",
		mutate:  []func(*v1alpha1.TerraformWorkspace){rerun(1, 0, testUser)},
		runs:    []*v1alpha1.TerraformRun{applied},
		wantRun: "net-2", wantRequest: "1", wantObserved: 1,
	}, {
		name:    "asked twice since the last rerun: one run",
		mutate:  []func(*v1alpha1.TerraformWorkspace){rerun(3, 1, "bob")},
		runs:    []*v1alpha1.TerraformRun{applied},
		wantRun: "net-2", wantRequest: "3", wantRequested: []string{"bob"}, wantObserved: 3,
	}, {
		name:    "asked while the spec changed: the rerun wins",
		mutate:  []func(*v1alpha1.TerraformWorkspace){specV2, rerun(1, 0, "bob")},
		runs:    []*v1alpha1.TerraformRun{applied},
		wantRun: "net-2", wantRequest: "1", wantRequested: []string{"bob"}, wantObserved: 1,
	}, {
		name:         "asked while a run is under way",
		mutate:       []func(*v1alpha1.TerraformWorkspace){rerun(1, 0, "bob")},
		runs:         []*v1alpha1.TerraformRun{applied, newRun(ws, 2, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, phase(v1alpha1.RunPhasePlanning))},
		wantObserved: 0,
	}, {
		name:         "served, but the status write was lost",
		mutate:       []func(*v1alpha1.TerraformWorkspace){rerun(1, 0, "bob")},
		runs:         []*v1alpha1.TerraformRun{applied, newRun(ws, 2, v1alpha1.OperationApply, v1alpha1.TriggerRerun, served("1"), succeeded(t0.Add(-time.Minute)))},
		wantObserved: 1,
	}, {
		name:         "already observed",
		mutate:       []func(*v1alpha1.TerraformWorkspace){rerun(2, 2, "bob")},
		runs:         []*v1alpha1.TerraformRun{applied},
		wantObserved: 2,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, objects(newWorkspace(testWS, tc.mutate...), tc.runs...)...)
			h.mustSync(testWS)
			got := h.ws(testWS)
			if got.Status.ObservedRerunRequests != tc.wantObserved {
				t.Errorf("status.observedRerunRequests = %d, want %d", got.Status.ObservedRerunRequests, tc.wantObserved)
			}
			if tc.wantRun == "" {
				h.expectNoRun()
				return
			}
			run := h.createdOne()
			expectRun(t, run, got, tc.wantRun, v1alpha1.OperationApply, v1alpha1.TriggerRerun, tc.wantRequested...)
			if a := run.Annotations[v1alpha1.AnnotationRerunRequest]; a != tc.wantRequest {
				t.Errorf("%s = %q, want %q", v1alpha1.AnnotationRerunRequest, a, tc.wantRequest)
			}
			if run.Spec.Creator == nil || run.Spec.Creator.Username != testUser {
				t.Errorf("spec.creator = %+v, want %s (the spec's editor)", run.Spec.Creator, testUser)
			}
			expectConditions(t, got, reconciling)
		})
	}
}

// ---------------------------------------------------------------------------
// Destroy.

// TestDestroy: a workspace being deleted with destroyOnDelete waits for its
// run under way (discarding a plan that waits for approval), then starts a
// Destroy run that names who deleted it, and lets go of its finalizer once
// that run succeeded, retrying one that did not with backoff; the abandon
// annotation, or a namespace being deleted, lets it go without one.
func TestDestroy(t *testing.T) {
	ws := newWorkspace(testWS)
	applied := newRun(ws, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, succeeded(t0.Add(-time.Hour)))
	destroy := func(n int, mutate ...func(*v1alpha1.TerraformRun)) *v1alpha1.TerraformRun {
		return newRun(ws, n, v1alpha1.OperationDestroy, v1alpha1.TriggerDestroy, mutate...)
	}
	namespaceTerminating := func(h *harness) {
		h.cs.PrependReactor("create", "terraformruns", func(action k8stesting.Action) (bool, k8sruntime.Object, error) {
			if action.GetSubresource() != "" {
				return false, nil, nil
			}
			err := apierrors.NewForbidden(v1alpha1.Resource("terraformruns"), "net-2", fmt.Errorf("namespace team-a is being terminated"))
			err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause, Message: "namespace team-a is being terminated", Field: "metadata.namespace"}}
			return true, nil, err
		})
	}
	for _, tc := range []struct {
		name          string
		mutate        []func(*v1alpha1.TerraformWorkspace)
		runs          []*v1alpha1.TerraformRun
		react         func(*harness)
		wantRun       string // "" for none
		wantRequested []string
		wantRefused   bool // a Destroy run was asked for, and refused
		wantDiscard   string
		wantReleased  bool // the finalizer removed
		wantAfter     time.Duration
		wantCur       string
		wantCond      *cond
		wantEvent     string
	}{{
		name:    "deleted: a Destroy run starts",
		mutate:  []func(*v1alpha1.TerraformWorkspace){deleting},
		runs:    []*v1alpha1.TerraformRun{applied},
		wantRun: "net-2", wantRequested: []string{"carol"}, wantCur: "net-2",
		wantCond:  &cond{v1alpha1.WorkspaceConditionDestroying, metav1.ConditionTrue, ReasonDestroyRunning},
		wantEvent: "Normal RunCreated Created run net-2 (Destroy, Destroy)",
	}, {
		name:    "deleted by its creator",
		mutate:  []func(*v1alpha1.TerraformWorkspace){deleting, func(ws *v1alpha1.TerraformWorkspace) { ws.Status.DeletionRequestedBy = testUser }},
		runs:    []*v1alpha1.TerraformRun{applied},
		wantRun: "net-2", wantCur: "net-2",
		wantCond: &cond{v1alpha1.WorkspaceConditionDestroying, metav1.ConditionTrue, ReasonDestroyRunning},
	}, {
		name:     "the Destroy run is under way",
		mutate:   []func(*v1alpha1.TerraformWorkspace){deleting},
		runs:     []*v1alpha1.TerraformRun{applied, destroy(2, phase(v1alpha1.RunPhasePlanning))},
		wantCur:  "net-2",
		wantCond: &cond{v1alpha1.WorkspaceConditionDestroying, metav1.ConditionTrue, ReasonDestroyRunning},
	}, {
		name:         "the Destroy run succeeded",
		mutate:       []func(*v1alpha1.TerraformWorkspace){deleting},
		runs:         []*v1alpha1.TerraformRun{applied, destroy(2, succeeded(t0.Add(-time.Minute)))},
		wantReleased: true,
		wantEvent:    "Normal Destroyed Destroy run net-2 succeeded",
	}, {
		name:      "the Destroy run failed, the retry is not due",
		mutate:    []func(*v1alpha1.TerraformWorkspace){deleting},
		runs:      []*v1alpha1.TerraformRun{applied, destroy(2, ended(v1alpha1.RunPhaseFailed, t0.Add(-10*time.Second)))},
		wantAfter: 20 * time.Second,
		wantCond:  &cond{v1alpha1.WorkspaceConditionDestroying, metav1.ConditionTrue, ReasonDestroyFailed},
	}, {
		name:    "the Destroy run failed, the retry is due",
		mutate:  []func(*v1alpha1.TerraformWorkspace){deleting},
		runs:    []*v1alpha1.TerraformRun{applied, destroy(2, ended(v1alpha1.RunPhaseFailed, t0.Add(-30*time.Second)))},
		wantRun: "net-3", wantRequested: []string{"carol"}, wantCur: "net-3",
		wantCond: &cond{v1alpha1.WorkspaceConditionDestroying, metav1.ConditionTrue, ReasonDestroyRunning},
	}, {
		name:   "two Destroy runs failed: the backoff doubled",
		mutate: []func(*v1alpha1.TerraformWorkspace){deleting},
		runs: []*v1alpha1.TerraformRun{applied, destroy(2, ended(v1alpha1.RunPhaseFailed, t0.Add(-10*time.Minute))),
			destroy(3, ended(v1alpha1.RunPhaseFailed, t0.Add(-30*time.Second)))},
		wantAfter: 30 * time.Second,
		wantCond:  &cond{v1alpha1.WorkspaceConditionDestroying, metav1.ConditionTrue, ReasonDestroyFailed},
	}, {
		name:        "a plan awaits approval",
		mutate:      []func(*v1alpha1.TerraformWorkspace){deleting},
		runs:        []*v1alpha1.TerraformRun{applied, newRun(ws, 2, v1alpha1.OperationApply, v1alpha1.TriggerRerun, planned(true), phase(v1alpha1.RunPhaseAwaitingApproval))},
		wantDiscard: "net-2", wantCur: "net-2",
		wantCond: &cond{v1alpha1.WorkspaceConditionDestroying, metav1.ConditionTrue, ReasonRunning},
	}, {
		name:     "a run is applying",
		mutate:   []func(*v1alpha1.TerraformWorkspace){deleting},
		runs:     []*v1alpha1.TerraformRun{applied, newRun(ws, 2, v1alpha1.OperationApply, v1alpha1.TriggerRerun, phase(v1alpha1.RunPhaseApplying))},
		wantCur:  "net-2",
		wantCond: &cond{v1alpha1.WorkspaceConditionDestroying, metav1.ConditionTrue, ReasonRunning},
	}, {
		name: "abandoned",
		mutate: []func(*v1alpha1.TerraformWorkspace){deleting, func(ws *v1alpha1.TerraformWorkspace) {
			ws.Annotations = map[string]string{v1alpha1.AnnotationAbandonResources: "true"}
		}},
		runs:         []*v1alpha1.TerraformRun{applied},
		wantReleased: true,
		wantEvent:    "Warning Abandoned Deleted without destroying its resources",
	}, {
		name:         "the namespace is being deleted",
		mutate:       []func(*v1alpha1.TerraformWorkspace){deleting},
		runs:         []*v1alpha1.TerraformRun{applied},
		react:        namespaceTerminating,
		wantRefused:  true,
		wantReleased: true,
		wantCond:     &cond{v1alpha1.WorkspaceConditionDestroying, metav1.ConditionFalse, ReasonNamespaceTerminating},
		wantEvent:    "Warning NamespaceTerminating Namespace team-a is being deleted",
	}, {
		name: "deleted without destroyOnDelete",
		mutate: []func(*v1alpha1.TerraformWorkspace){func(ws *v1alpha1.TerraformWorkspace) {
			ws.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
			ws.Finalizers = []string{"example.com/other"}
		}},
		runs: []*v1alpha1.TerraformRun{applied},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			// It was Ready before its deletion.
			ready := func(ws *v1alpha1.TerraformWorkspace) {
				meta.SetStatusCondition(&ws.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkspaceConditionReady, Status: metav1.ConditionTrue, Reason: ReasonApplied})
			}
			h := newHarness(t, objects(newWorkspace(testWS, append([]func(*v1alpha1.TerraformWorkspace){ready}, tc.mutate...)...), tc.runs...)...)
			if tc.react != nil {
				tc.react(h)
			}
			after := h.mustSync(testWS)
			if after != tc.wantAfter {
				t.Errorf("requeue after %v, want %v", after, tc.wantAfter)
			}
			got := h.ws(testWS)
			if tc.wantRun == "" {
				h.expectNoRun()
			} else {
				expectRun(t, h.createdOne(), got, tc.wantRun, v1alpha1.OperationDestroy, v1alpha1.TriggerDestroy, tc.wantRequested...)
			}
			if tc.wantRefused {
				creates := h.actions("create", "terraformruns", "")
				if len(creates) != 1 || trigger(creates[0].(k8stesting.CreateAction).GetObject().(*v1alpha1.TerraformRun)) != v1alpha1.TriggerDestroy {
					t.Errorf("%d runs asked for, want one Destroy run", len(creates))
				}
			}
			discarded, _ := h.discarded()
			if want := slices.DeleteFunc([]string{tc.wantDiscard}, func(s string) bool { return s == "" }); !slices.Equal(discarded, want) {
				t.Errorf("discarded %q, want %q", discarded, want)
			}
			updates := h.actions("update", "terraformworkspaces", "")
			switch {
			case tc.wantReleased && len(updates) != 1:
				t.Errorf("%d updates of the workspace, want 1 that removes its finalizer", len(updates))
			case tc.wantReleased:
				if f := updates[0].(k8stesting.UpdateAction).GetObject().(*v1alpha1.TerraformWorkspace).Finalizers; slices.Contains(f, destroyFinalizer) {
					t.Errorf("the update kept the finalizer: %q", f)
				}
				if slices.Contains(got.Finalizers, destroyFinalizer) {
					t.Errorf("the stored workspace kept the finalizer: %q", got.Finalizers)
				}
			case len(updates) > 0:
				t.Errorf("the workspace was updated (finalizers %q), want only its status written", got.Finalizers)
			}
			if got.Status.CurrentRun != tc.wantCur {
				t.Errorf("status.currentRun = %q, want %q", got.Status.CurrentRun, tc.wantCur)
			}
			if tc.wantCond == nil {
				expectNoCondition(t, got, v1alpha1.WorkspaceConditionDestroying)
			} else {
				expectConditions(t, got, *tc.wantCond)
			}
			if tc.wantCond != nil && !tc.wantReleased {
				// Never Ready beside Destroying.
				expectConditions(t, got, cond{v1alpha1.WorkspaceConditionReady, metav1.ConditionFalse, ReasonDeleting})
			}
			if tc.wantEvent != "" {
				h.expectEvent(tc.wantEvent)
			}
		})
	}
}

// TestDestroyThenReleased follows a deletion through: the Destroy run
// starts, runs, succeeds, and the finalizer goes.
func TestDestroyThenReleased(t *testing.T) {
	ws := newWorkspace(testWS, deleting)
	h := newHarness(t, ws, newRun(ws, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, succeeded(t0.Add(-time.Hour))))
	h.mustSync(testWS)
	expectRun(t, h.createdOne(), h.ws(testWS), "net-2", v1alpha1.OperationDestroy, v1alpha1.TriggerDestroy, "carol")

	h.updateRun("net-2", phase(v1alpha1.RunPhaseApplying))
	h.mustSync(testWS)
	h.expectNoRun()
	if !slices.Contains(h.ws(testWS).Finalizers, destroyFinalizer) {
		t.Fatalf("the finalizer went while the Destroy run was applying")
	}

	h.updateRun("net-2", succeeded(t0))
	h.mustSync(testWS)
	h.expectNoRun()
	if f := h.ws(testWS).Finalizers; slices.Contains(f, destroyFinalizer) {
		t.Errorf("finalizers %q after the Destroy run succeeded, want %s removed", f, destroyFinalizer)
	}
	if n := len(h.actions("update", "terraformworkspaces", "status")); n != 0 {
		t.Errorf("%d status writes after the finalizer went, want none (the workspace is gone)", n)
	}
}

// ---------------------------------------------------------------------------
// Dependencies.

// TestDependencyPending: a workspace starts no run while a workspace it
// depends on is missing, not Ready at its current spec, or running, and
// Reconciling names it; once they are Ready, its run reads their outputs
// from their last applied run.
func TestDependencyPending(t *testing.T) {
	const (
		missingMsg  = "Waiting for workspace %s (spec.dependsOn), which does not exist."
		notReadyMsg = "Waiting for workspace %s (spec.dependsOn) to be Ready at its current spec."
	)
	app := newWorkspace("app", func(ws *v1alpha1.TerraformWorkspace) {
		ws.Spec.DependsOn = []v1alpha1.WorkspaceReference{{Name: "net"}, {Name: "dns"}}
		ws.Spec.Template.Variables = []v1alpha1.Variable{{Name: "vpc_id", ValueFrom: &v1alpha1.VariableSource{
			WorkspaceOutput: &v1alpha1.OutputSelector{Name: "net", Output: "vpc_id"},
		}}}
	})
	ready := func(name string, mutate ...func(*v1alpha1.TerraformWorkspace)) *v1alpha1.TerraformWorkspace {
		return newWorkspace(name, append([]func(*v1alpha1.TerraformWorkspace){readyWorkspace}, mutate...)...)
	}
	for _, tc := range []struct {
		name    string
		deps    []*v1alpha1.TerraformWorkspace
		wantMsg string // "" for a run
	}{
		{"net is missing", []*v1alpha1.TerraformWorkspace{ready("dns")}, fmt.Sprintf(missingMsg, "net")},
		{"dns is missing", []*v1alpha1.TerraformWorkspace{ready("net")}, fmt.Sprintf(missingMsg, "dns")},
		{"net is not Ready", []*v1alpha1.TerraformWorkspace{ready("dns"), ready("net", func(ws *v1alpha1.TerraformWorkspace) {
			meta.SetStatusCondition(&ws.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkspaceConditionReady, Status: metav1.ConditionFalse, Reason: ReasonRunFailed})
		})}, fmt.Sprintf(notReadyMsg, "net")},
		{"net is Ready at an older generation", []*v1alpha1.TerraformWorkspace{ready("dns"), ready("net", func(ws *v1alpha1.TerraformWorkspace) { ws.Generation = 2 })}, fmt.Sprintf(notReadyMsg, "net")},
		{"net has a run under way", []*v1alpha1.TerraformWorkspace{ready("dns"), ready("net", func(ws *v1alpha1.TerraformWorkspace) { ws.Status.CurrentRun = "net-5" })}, fmt.Sprintf(notReadyMsg, "net")},
		{"dns has a run under way", []*v1alpha1.TerraformWorkspace{ready("net"), ready("dns", func(ws *v1alpha1.TerraformWorkspace) { ws.Status.CurrentRun = "dns-5" })}, fmt.Sprintf(notReadyMsg, "dns")},
		{"both are Ready", []*v1alpha1.TerraformWorkspace{ready("net"), ready("dns")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []k8sruntime.Object{app.DeepCopy()}
			for _, d := range tc.deps {
				objs = append(objs, d)
			}
			h := newHarness(t, objs...)
			h.mustSync("app")
			got := h.ws("app")
			if tc.wantMsg != "" {
				h.expectNoRun()
				c := expectCondition(t, got, v1alpha1.WorkspaceConditionReconciling, metav1.ConditionFalse, ReasonDependencyNotReady)
				if c.Message != tc.wantMsg {
					t.Errorf("Reconciling says %q, want %q", c.Message, tc.wantMsg)
				}
				// Ready says what holds it up, not that a run is under way.
				r := expectCondition(t, got, v1alpha1.WorkspaceConditionReady, metav1.ConditionFalse, ReasonDependencyNotReady)
				if r.Message != tc.wantMsg {
					t.Errorf("Ready says %q, want %q", r.Message, tc.wantMsg)
				}
				if got.Status.LastRun != "" || got.Status.CurrentRun != "" {
					t.Errorf("lastRun %q currentRun %q, want none", got.Status.LastRun, got.Status.CurrentRun)
				}
				return
			}
			run := h.createdOne()
			expectRun(t, run, got, "app-1", v1alpha1.OperationApply, v1alpha1.TriggerSpecChange)
			want := &v1alpha1.OutputSelector{Name: "net-4", Output: "vpc_id"}
			if vf := run.Spec.Variables[0].ValueFrom; vf.WorkspaceOutput != nil || vf.RunOutput == nil || *vf.RunOutput != *want {
				t.Errorf("variable vpc_id reads %+v / %+v, want runOutput %+v", vf.WorkspaceOutput, vf.RunOutput, want)
			}
			expectConditions(t, got, reconciling)
		})
	}
}

// TestUpstreamChanged: a workspace whose spec is the one applied, but whose
// dependency applied again since (new outputs to read), runs with trigger
// UpstreamChanged; with its own spec changed too, SpecChange.
func TestUpstreamChanged(t *testing.T) {
	reads := func(ws *v1alpha1.TerraformWorkspace) {
		ws.Spec.DependsOn = []v1alpha1.WorkspaceReference{{Name: "net"}}
		ws.Spec.Template.Variables = []v1alpha1.Variable{{Name: "vpc_id", ValueFrom: &v1alpha1.VariableSource{
			WorkspaceOutput: &v1alpha1.OutputSelector{Name: "net", Output: "vpc_id"},
		}}}
	}
	app := newWorkspace("app", reads)
	// app-1 applied what net-4 output.
	applied := newRun(app, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, succeeded(t0.Add(-30*time.Minute)))
	applied.Spec = runSpec(app, v1alpha1.OperationApply, func(string) string { return "net-4" })
	for _, tc := range []struct {
		name    string
		netRun  string // net's last applied run
		mutate  func(*v1alpha1.TerraformWorkspace)
		wantWhy v1alpha1.Trigger // "" for no run
	}{
		{name: "net applied again", netRun: "net-5", wantWhy: v1alpha1.TriggerUpstreamChanged},
		{name: "net applied again and the spec changed", netRun: "net-5", mutate: func(ws *v1alpha1.TerraformWorkspace) {
			ws.Generation = 2
			ws.Spec.Template.Parallelism = ptr.To[int32](3)
		}, wantWhy: v1alpha1.TriggerSpecChange},
		{name: "nothing changed", netRun: "net-4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := app.DeepCopy()
			if tc.mutate != nil {
				tc.mutate(ws)
			}
			ws.Status.LastAppliedRun, ws.Status.LastAppliedHash = applied.Name, runHash(applied)
			net := newWorkspace("net", readyWorkspace, func(ws *v1alpha1.TerraformWorkspace) { ws.Status.LastAppliedRun = tc.netRun })
			h := newHarness(t, ws, net, applied.DeepCopy())
			h.mustSync("app")
			if tc.wantWhy == "" {
				h.expectNoRun()
				return
			}
			run := h.createdOne()
			expectRun(t, run, h.ws("app"), "app-2", v1alpha1.OperationApply, tc.wantWhy)
			if got := run.Spec.Variables[0].ValueFrom.RunOutput; got == nil || got.Name != tc.netRun {
				t.Errorf("the run reads %+v, want %s's outputs", got, tc.netRun)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// History.

// TestHistoryPruning: finished runs beyond spec.historyLimits (5 each by
// default), succeeded and others counted apart, are deleted, the oldest
// ones, each under a UID precondition; never a run under way, nor the last
// applied run.
func TestHistoryPruning(t *testing.T) {
	ws := newWorkspace(testWS)
	done := func(n int, op v1alpha1.Operation, why v1alpha1.Trigger, p v1alpha1.RunPhase) *v1alpha1.TerraformRun {
		return newRun(ws, n, op, why, ended(p, t0.Add(-time.Duration(60-n)*time.Minute)))
	}
	apply := func(n int) *v1alpha1.TerraformRun {
		return done(n, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, v1alpha1.RunPhaseSucceeded)
	}
	check := func(n int) *v1alpha1.TerraformRun {
		return done(n, v1alpha1.OperationPlan, v1alpha1.TriggerDriftCheck, v1alpha1.RunPhaseSucceeded)
	}
	failed := func(n int, p v1alpha1.RunPhase) *v1alpha1.TerraformRun {
		return done(n, v1alpha1.OperationApply, v1alpha1.TriggerRerun, p)
	}
	limits := func(succeeded, other int32) func(*v1alpha1.TerraformWorkspace) {
		return func(ws *v1alpha1.TerraformWorkspace) {
			ws.Spec.HistoryLimits = v1alpha1.HistoryLimits{Succeeded: ptr.To(succeeded), Failed: ptr.To(other)}
		}
	}
	for _, tc := range []struct {
		name        string
		limits      func(*v1alpha1.TerraformWorkspace)
		runs        []*v1alpha1.TerraformRun
		wantDeleted []string
	}{{
		name:   "2 succeeded, 1 other; a run under way",
		limits: limits(2, 1),
		runs: []*v1alpha1.TerraformRun{
			apply(1), failed(2, v1alpha1.RunPhaseFailed), apply(3), check(4), failed(5, v1alpha1.RunPhaseDiscarded),
			check(6), failed(7, v1alpha1.RunPhaseCanceled), check(8),
			newRun(ws, 9, v1alpha1.OperationPlan, v1alpha1.TriggerDriftCheck, phase(v1alpha1.RunPhasePlanning)),
		},
		wantDeleted: []string{"net-1", "net-2", "net-4", "net-5"},
	}, {
		name:        "default limits",
		runs:        []*v1alpha1.TerraformRun{apply(1), apply(2), apply(3), apply(4), apply(5), apply(6), apply(7)},
		wantDeleted: []string{"net-1", "net-2"},
	}, {
		name:        "the last applied run beyond the limit",
		limits:      limits(1, 1),
		runs:        []*v1alpha1.TerraformRun{apply(1), check(2), check(3), failed(4, v1alpha1.RunPhaseFailed), failed(5, v1alpha1.RunPhaseFailed)},
		wantDeleted: []string{"net-2", "net-4"},
	}, {
		name:   "nothing kept but the last applied and the run under way",
		limits: limits(0, 0),
		runs: []*v1alpha1.TerraformRun{apply(1), failed(2, v1alpha1.RunPhaseFailed), check(3),
			newRun(ws, 4, v1alpha1.OperationApply, v1alpha1.TriggerRerun, phase(v1alpha1.RunPhaseAwaitingApproval))},
		wantDeleted: []string{"net-2", "net-3"},
	}, {
		name:   "within the limits",
		limits: limits(3, 3),
		runs:   []*v1alpha1.TerraformRun{apply(1), failed(2, v1alpha1.RunPhaseFailed), apply(3)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			w := ws.DeepCopy()
			if tc.limits != nil {
				tc.limits(w)
			}
			h := newHarness(t, objects(w, tc.runs...)...)
			h.mustSync(testWS)
			h.expectNoRun()
			if got := h.deleted(); !slices.Equal(got, tc.wantDeleted) {
				t.Errorf("deleted %q, want %q", got, tc.wantDeleted)
			}
			for _, a := range h.actions("delete", "terraformruns", "") {
				d := a.(k8stesting.DeleteAction)
				if p := d.GetDeleteOptions().Preconditions; p == nil || p.UID == nil || string(*p.UID) != "uid-"+d.GetName() {
					t.Errorf("run %s deleted with preconditions %+v, want its UID", d.GetName(), p)
				}
			}
			var kept []string
			for _, r := range tc.runs {
				if !slices.Contains(tc.wantDeleted, r.Name) {
					kept = append(kept, r.Name)
				}
			}
			slices.Sort(kept)
			if got := h.runNames(); !slices.Equal(got, kept) {
				t.Errorf("runs left %q, want %q", got, kept)
			}
		})
	}
}
