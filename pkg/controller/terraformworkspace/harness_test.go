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
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned/fake"
	"github.com/terrarun/terrarun/pkg/generated/informers/externalversions"
)

// The fixtures: workspace net in namespace team-a, whose spec alice wrote
// last, and its runs net-1, net-2, ... created a minute apart from t0.
const (
	testNS   = "team-a"
	testWS   = "net"
	testUID  = types.UID("5c1d0c3e-0000-4000-8000-00000000a0e1")
	testUser = "alice"
)

var (
	t0            = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	workspacesGVR = v1alpha1.SchemeGroupVersion.WithResource("terraformworkspaces")
	runsGVR       = v1alpha1.SchemeGroupVersion.WithResource("terraformruns")
)

// ---------------------------------------------------------------------------
// Workspaces.

// newWorkspace returns workspace name of team-a at generation 1: an inline
// source, manual approval, alice its creator; mutate changes it further.
func newWorkspace(name string, mutate ...func(*v1alpha1.TerraformWorkspace)) *v1alpha1.TerraformWorkspace {
	ws := &v1alpha1.TerraformWorkspace{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS, Name: name, UID: types.UID("uid-" + name), Generation: 1,
			CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour)),
		},
		Spec: v1alpha1.TerraformWorkspaceSpec{
			Template: v1alpha1.TerraformRunSpec{
				Source:  v1alpha1.Source{Inline: map[string]string{"main.tf": `resource "terraform_data" "v1" {}`}},
				Creator: &v1alpha1.Creator{Username: testUser},
			},
			Approval: v1alpha1.Approval{Mode: v1alpha1.ApprovalModeManual},
		},
	}
	if name == testWS {
		ws.UID = testUID
	}
	for _, m := range mutate {
		m(ws)
	}
	return ws
}

// specV2 is an edit of the template by alice: new content, generation 2.
func specV2(ws *v1alpha1.TerraformWorkspace) {
	ws.Generation = 2
	ws.Spec.Template.Source.Inline = map[string]string{"main.tf": `resource "terraform_data" "v2" {}`}
}

// gitSource reads the configuration from the main branch of a repository.
func gitSource(ws *v1alpha1.TerraformWorkspace) {
	ws.Spec.Template.Source = v1alpha1.Source{Git: &v1alpha1.GitSource{URL: "https://git.example.com/infra.git", Ref: "main"}}
}

// ociSource reads the configuration from the tag stable of an OCI
// repository.
func ociSource(ws *v1alpha1.TerraformWorkspace) {
	ws.Spec.Template.Source = v1alpha1.Source{OCI: &v1alpha1.OCISource{URL: "oci://registry.example.com/infra", Ref: &v1alpha1.OCIReference{Tag: "stable"}}}
}

// every sets spec.interval, the drift check interval, to d.
func every(d time.Duration) func(*v1alpha1.TerraformWorkspace) {
	return func(ws *v1alpha1.TerraformWorkspace) { ws.Spec.Interval = &metav1.Duration{Duration: d} }
}

// readyWorkspace is a workspace whose status says it is Ready at its
// current generation, applied last by run <name>-4, with no run under way.
func readyWorkspace(ws *v1alpha1.TerraformWorkspace) {
	ws.Status.ObservedGeneration = ws.Generation
	ws.Status.LastAppliedRun = ws.Name + "-4"
	meta.SetStatusCondition(&ws.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkspaceConditionReady, Status: metav1.ConditionTrue, Reason: ReasonApplied})
}

// deleting marks the workspace deleted at t0 with its destroy finalizer,
// by carol, with destroyOnDelete.
func deleting(ws *v1alpha1.TerraformWorkspace) {
	ws.Spec.DestroyOnDelete = true
	ws.Finalizers = []string{destroyFinalizer}
	ws.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	ws.Status.DeletionRequestedBy = "carol"
}

// ---------------------------------------------------------------------------
// Runs.

// newRun returns run <ws>-<n> as ws creates it (its label, owner and
// trigger annotation, its spec from the workspace's spec as it is now, with
// operation op), created n minutes after t0-1h and Pending; mutate changes
// it further.
func newRun(ws *v1alpha1.TerraformWorkspace, n int, op v1alpha1.Operation, why v1alpha1.Trigger, mutate ...func(*v1alpha1.TerraformRun)) *v1alpha1.TerraformRun {
	run := &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ws.Namespace, Name: fmt.Sprintf("%s-%d", ws.Name, n), UID: types.UID(fmt.Sprintf("uid-%s-%d", ws.Name, n)),
			CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour + time.Duration(n)*time.Minute)),
			Labels:            map[string]string{v1alpha1.LabelWorkspace: ws.Name},
			Annotations:       map[string]string{v1alpha1.AnnotationTrigger: string(why)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "TerraformWorkspace",
				Name: ws.Name, UID: ws.UID, Controller: ptr.To(true),
			}},
		},
		Spec: runSpec(ws, op, func(string) string { return "" }),
	}
	run.Status.Phase = v1alpha1.RunPhasePending
	for _, m := range mutate {
		m(run)
	}
	return run
}

// phase puts the run in phase p, not finished.
func phase(p v1alpha1.RunPhase) func(*v1alpha1.TerraformRun) {
	return func(run *v1alpha1.TerraformRun) { run.Status.Phase = p }
}

// ended ends the run in phase p at time at.
func ended(p v1alpha1.RunPhase, at time.Time) func(*v1alpha1.TerraformRun) {
	return func(run *v1alpha1.TerraformRun) {
		run.Status.Phase = p
		run.Status.CompletionTime = ptr.To(metav1.NewTime(at))
		if p != v1alpha1.RunPhaseSucceeded {
			run.Status.Message = "The plan stage failed (exit code 1)."
		}
	}
}

// succeeded ends the run Succeeded at time at.
func succeeded(at time.Time) func(*v1alpha1.TerraformRun) {
	return ended(v1alpha1.RunPhaseSucceeded, at)
}

// planned records the run's plan: with changes (+1 ~2 -0) or without.
func planned(changes bool) func(*v1alpha1.TerraformRun) {
	return func(run *v1alpha1.TerraformRun) {
		run.Status.Plan = &v1alpha1.PlanSummary{Digest: "sha256:00", HasChanges: changes}
		if changes {
			run.Status.Plan.Add, run.Status.Plan.Change = 1, 2
		}
	}
}

// atRevision records the commit the run resolved its git ref to.
func atRevision(rev string) func(*v1alpha1.TerraformRun) {
	return func(run *v1alpha1.TerraformRun) { run.Status.Source = &v1alpha1.SourceStatus{Revision: rev} }
}

// ---------------------------------------------------------------------------
// A harness around one controller whose informers are never started: every
// sync first puts what the fake clientset stores into the controller's
// caches, so that it sees exactly the stored workspaces and runs.

type harness struct {
	t     *testing.T
	ctx   context.Context
	cs    *fake.Clientset
	clock *clocktesting.FakeClock
	rec   *record.FakeRecorder
	ctrl  *Controller
	// workspaces and runs are the controller's caches.
	workspaces, runs cache.Indexer
	// configMaps is what Options.ConfigMapData reads, by name; a name that
	// is missing is NotFound.
	configMaps map[string]map[string]string
}

// newHarness returns a harness over a fake clientset that holds objs, with
// a fake clock at t0.
func newHarness(t *testing.T, objs ...k8sruntime.Object) *harness {
	t.Helper()
	return newHarnessWith(t, func(*Options) {}, objs...)
}

// newHarnessWith is newHarness with options changed by with.
func newHarnessWith(t *testing.T, with func(*Options), objs ...k8sruntime.Object) *harness {
	t.Helper()
	h := &harness{
		t:          t,
		ctx:        t.Context(),
		cs:         fake.NewSimpleClientset(objs...),
		clock:      clocktesting.NewFakeClock(t0),
		rec:        record.NewFakeRecorder(100),
		configMaps: map[string]map[string]string{},
	}
	factory := externalversions.NewSharedInformerFactory(h.cs, 0)
	workspaces, runs := factory.Terrarun().V1alpha1().TerraformWorkspaces(), factory.Terrarun().V1alpha1().TerraformRuns()
	opts := Options{
		Clock:    h.clock,
		Recorder: h.rec,
		ConfigMapData: func(_ context.Context, namespace, name string) (map[string]string, error) {
			data, ok := h.configMaps[name]
			if !ok || namespace != testNS {
				return nil, apierrors.NewNotFound(corev1.Resource("configmaps"), name)
			}
			return data, nil
		},
	}
	with(&opts)
	ctrl, err := New(h.cs, workspaces, runs, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.ctrl, h.workspaces, h.runs = ctrl, workspaces.Informer().GetIndexer(), runs.Informer().GetIndexer()
	t.Cleanup(ctrl.queue.ShutDown)
	return h
}

// refresh replaces the controller's caches with what the clientset stores.
func (h *harness) refresh() {
	h.t.Helper()
	fill := func(indexer cache.Indexer, list k8sruntime.Object) {
		items, err := meta.ExtractList(list)
		if err != nil {
			h.t.Fatal(err)
		}
		objs := make([]any, len(items))
		for i := range items {
			objs[i] = items[i]
		}
		if err := indexer.Replace(objs, ""); err != nil {
			h.t.Fatal(err)
		}
	}
	wl, err := h.cs.TerrarunV1alpha1().TerraformWorkspaces(testNS).List(h.ctx, metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	rl, err := h.cs.TerrarunV1alpha1().TerraformRuns(testNS).List(h.ctx, metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	fill(h.workspaces, wl)
	fill(h.runs, rl)
	h.cs.ClearActions()
}

// sync fills the caches from the clientset, forgets the actions recorded
// so far, and reconciles workspace name.
func (h *harness) sync(name string) (time.Duration, error) {
	h.t.Helper()
	h.refresh()
	return h.ctrl.sync(h.ctx, testNS+"/"+name)
}

// mustSync syncs workspace name and fails the test on an error; it returns
// when the workspace wants to be looked at again.
func (h *harness) mustSync(name string) time.Duration {
	h.t.Helper()
	d, err := h.sync(name)
	if err != nil {
		h.t.Fatalf("sync %s: %v", name, err)
	}
	return d
}

// ws returns the stored workspace name.
func (h *harness) ws(name string) *v1alpha1.TerraformWorkspace {
	h.t.Helper()
	obj, err := h.cs.Tracker().Get(workspacesGVR, testNS, name)
	if err != nil {
		h.t.Fatalf("getting workspace %s: %v", name, err)
	}
	return obj.(*v1alpha1.TerraformWorkspace).DeepCopy()
}

// run returns the stored run name.
func (h *harness) run(name string) *v1alpha1.TerraformRun {
	h.t.Helper()
	obj, err := h.cs.Tracker().Get(runsGVR, testNS, name)
	if err != nil {
		h.t.Fatalf("getting run %s: %v", name, err)
	}
	return obj.(*v1alpha1.TerraformRun).DeepCopy()
}

// runNames lists the names of the stored runs, sorted.
func (h *harness) runNames() []string {
	h.t.Helper()
	list, err := h.cs.TerrarunV1alpha1().TerraformRuns(testNS).List(h.ctx, metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	var names []string
	for _, run := range list.Items {
		names = append(names, run.Name)
	}
	slices.Sort(names)
	return names
}

// updateRun changes the stored run name, as the run controller or the
// server would.
func (h *harness) updateRun(name string, mutate ...func(*v1alpha1.TerraformRun)) {
	h.t.Helper()
	run := h.run(name)
	for _, m := range mutate {
		m(run)
	}
	if err := h.cs.Tracker().Update(runsGVR, run, testNS); err != nil {
		h.t.Fatal(err)
	}
}

// actions returns the actions of the last sync with verb on resource and
// subresource.
func (h *harness) actions(verb, resource, subresource string) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range h.cs.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource && a.GetSubresource() == subresource {
			out = append(out, a)
		}
	}
	return out
}

// created returns the runs the last sync created: asked to create, and
// stored.
func (h *harness) created() []*v1alpha1.TerraformRun {
	var out []*v1alpha1.TerraformRun
	for _, a := range h.actions("create", "terraformruns", "") {
		run := a.(k8stesting.CreateAction).GetObject().(*v1alpha1.TerraformRun)
		if _, err := h.cs.Tracker().Get(runsGVR, testNS, run.Name); err == nil {
			out = append(out, run)
		}
	}
	return out
}

// createdOne returns the one run the last sync created, and fails the test
// when it created none or more.
func (h *harness) createdOne() *v1alpha1.TerraformRun {
	h.t.Helper()
	runs := h.created()
	if len(runs) != 1 {
		h.t.Fatalf("the sync created %d runs (%s), want 1", len(runs), names(runs))
	}
	return runs[0]
}

// expectNoRun fails the test when the last sync created a run.
func (h *harness) expectNoRun() {
	h.t.Helper()
	if runs := h.created(); len(runs) > 0 {
		h.t.Errorf("the sync created %s, want no run", names(runs))
	}
}

// discarded returns the runs the last sync discarded, by name, with the
// body of each discard.
func (h *harness) discarded() ([]string, []*v1alpha1.TerraformRunDiscard) {
	h.t.Helper()
	var names []string
	var bodies []*v1alpha1.TerraformRunDiscard
	for _, a := range h.actions("create", "terraformruns", "discard") {
		c := a.(k8stesting.CreateActionImpl)
		body, ok := c.Object.(*v1alpha1.TerraformRunDiscard)
		if !ok || c.Namespace != testNS {
			h.t.Fatalf("discard of %s/%s with a %T, want one of %s with a TerraformRunDiscard", c.Namespace, c.Name, c.Object, testNS)
		}
		names = append(names, c.Name)
		bodies = append(bodies, body)
	}
	return names, bodies
}

// deleted returns the names of the runs the last sync deleted, sorted.
func (h *harness) deleted() []string {
	var out []string
	for _, a := range h.actions("delete", "terraformruns", "") {
		out = append(out, a.(k8stesting.DeleteAction).GetName())
	}
	slices.Sort(out)
	return out
}

// events drains the events recorded so far.
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// expectEvent fails the test unless an event recorded since the last drain
// starts with prefix.
func (h *harness) expectEvent(prefix string) {
	h.t.Helper()
	evs := h.events()
	for _, e := range evs {
		if strings.HasPrefix(e, prefix) {
			return
		}
	}
	h.t.Errorf("no event %q among %q", prefix, evs)
}

func names(runs []*v1alpha1.TerraformRun) string {
	var out []string
	for _, r := range runs {
		out = append(out, r.Name)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// expectRun checks what a created run says: its name, operation, trigger
// annotation and spec.requestedBy, and that it is the workspace's (label
// and controller reference).
func expectRun(t *testing.T, run *v1alpha1.TerraformRun, ws *v1alpha1.TerraformWorkspace, name string, op v1alpha1.Operation, why v1alpha1.Trigger, requestedBy ...string) {
	t.Helper()
	if run.Name != name {
		t.Errorf("run name = %q, want %q", run.Name, name)
	}
	if run.Spec.Operation != op {
		t.Errorf("run %s: operation = %q, want %q", run.Name, run.Spec.Operation, op)
	}
	if got := run.Annotations[v1alpha1.AnnotationTrigger]; got != string(why) {
		t.Errorf("run %s: %s = %q, want %q", run.Name, v1alpha1.AnnotationTrigger, got, why)
	}
	if !slices.Equal(run.Spec.RequestedBy, requestedBy) {
		t.Errorf("run %s: spec.requestedBy = %q, want %q", run.Name, run.Spec.RequestedBy, requestedBy)
	}
	if run.Labels[v1alpha1.LabelWorkspace] != ws.Name || !metav1.IsControlledBy(run, ws) {
		t.Errorf("run %s: label %q, owners %+v: not workspace %s's", run.Name, run.Labels[v1alpha1.LabelWorkspace], run.OwnerReferences, ws.Name)
	}
}

// expectCondition checks the workspace's condition typ.
func expectCondition(t *testing.T, ws *v1alpha1.TerraformWorkspace, typ string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(ws.Status.Conditions, typ)
	if c == nil {
		t.Errorf("workspace %s: condition %s missing; conditions: %+v", ws.Name, typ, ws.Status.Conditions)
		return &metav1.Condition{}
	}
	if c.Status != status || c.Reason != reason {
		t.Errorf("workspace %s: condition %s = %s/%s (%q), want %s/%s", ws.Name, typ, c.Status, c.Reason, c.Message, status, reason)
	}
	return c
}

// expectNoCondition fails the test when the workspace has condition typ.
func expectNoCondition(t *testing.T, ws *v1alpha1.TerraformWorkspace, typ string) {
	t.Helper()
	if c := meta.FindStatusCondition(ws.Status.Conditions, typ); c != nil {
		t.Errorf("workspace %s: condition %s = %s/%s (%q), want none", ws.Name, typ, c.Status, c.Reason, c.Message)
	}
}
