package terraformworkspace

import (
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned/fake"
	"github.com/terrarun/terrarun/pkg/generated/informers/externalversions"
)

// TestMattersToWorkspace: of a run's changes, its phase, its resolved
// revision, its deletion, its labels and its annotations re-sync its
// workspace; its stage records, conditions, message and plan within a phase
// do not.
func TestMattersToWorkspace(t *testing.T) {
	ws := newWorkspace(testWS)
	planning := newRun(ws, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, phase(v1alpha1.RunPhasePlanning), func(r *v1alpha1.TerraformRun) {
		r.Status.Stages = []v1alpha1.StageStatus{{Name: v1alpha1.StagePlan, Attempt: 1, Job: "net-1-plan-1", StartTime: ptr.To(metav1.NewTime(t0))}}
	})
	for _, tc := range []struct {
		name   string
		old    *v1alpha1.TerraformRun
		mutate func(*v1alpha1.TerraformRun)
		want   bool
	}{
		{"a stage record", planning, func(r *v1alpha1.TerraformRun) {
			r.Status.Stages = append(r.Status.Stages, v1alpha1.StageStatus{Name: v1alpha1.StagePlan, Attempt: 2, Job: "net-1-plan-2"})
		}, false},
		{"a stage's end", planning, func(r *v1alpha1.TerraformRun) {
			r.Status.Stages[0].CompletionTime, r.Status.Stages[0].ExitCode = ptr.To(metav1.NewTime(t0.Add(time.Minute))), ptr.To[int32](0)
		}, false},
		{"a condition within the phase", planning, func(r *v1alpha1.TerraformRun) {
			meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionPlanned, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPlanning})
		}, false},
		{"the message within the phase", planning, func(r *v1alpha1.TerraformRun) { r.Status.Message = "Queued behind 2 runs." }, false},
		{"the plan within the phase", planning, planned(true), false},
		{"the observed generation", planning, func(r *v1alpha1.TerraformRun) { r.Status.ObservedGeneration = 1 }, false},
		{"an empty phase written Pending", newRun(ws, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, phase("")), phase(v1alpha1.RunPhasePending), false},
		{"the phase", planning, phase(v1alpha1.RunPhaseAwaitingApproval), true},
		{"the end", planning, succeeded(t0), true},
		{"the resolved revision", planning, atRevision("cccc"), true},
		{"the deletion", planning, func(r *v1alpha1.TerraformRun) { r.DeletionTimestamp = ptr.To(metav1.NewTime(t0)) }, true},
		{"a label", planning, func(r *v1alpha1.TerraformRun) { r.Labels["team"] = "a" }, true},
		{"an annotation", planning, func(r *v1alpha1.TerraformRun) { r.Annotations[v1alpha1.AnnotationRerunRequest] = "1" }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.old.DeepCopy()
			tc.mutate(n)
			o, n2, ok := runPair(tc.old.DeepCopy(), n)
			if !ok {
				t.Fatalf("runPair did not take two runs")
			}
			if got := mattersToWorkspace(o, n2); got != tc.want {
				t.Errorf("mattersToWorkspace = %v, want %v", got, tc.want)
			}
		})
	}
	if _, _, ok := runPair(planning, ws); ok {
		t.Errorf("runPair took a workspace for a run")
	}
}

// TestRunEventsEnqueueTheWorkspace drives the run informer's event handler
// through a fake clientset's watch: an update that matters enqueues the
// run's workspace, one that does not enqueues nothing. After each change it
// creates a run of workspace probe: the handler sees events in order, so a
// queue whose next key is probe's proves that the change enqueued nothing,
// with no sleep.
func TestRunEventsEnqueueTheWorkspace(t *testing.T) {
	ctx := t.Context()
	cs := fake.NewSimpleClientset()
	watching := make(chan struct{})
	var once sync.Once
	cs.PrependWatchReactor("terraformruns", func(action k8stesting.Action) (bool, watch.Interface, error) {
		w, err := cs.Tracker().Watch(action.GetResource(), action.GetNamespace())
		if err != nil {
			return false, nil, err
		}
		once.Do(func() { close(watching) })
		return true, w, nil
	})
	factory := externalversions.NewSharedInformerFactory(cs, 0)
	ctrl, err := New(cs, factory.Terrarun().V1alpha1().TerraformWorkspaces(), factory.Terrarun().V1alpha1().TerraformRuns(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctrl.queue.ShutDown)
	factory.Start(ctx.Done())
	t.Cleanup(factory.Shutdown)
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("the %v cache did not sync", typ)
		}
	}
	select {
	case <-watching:
	case <-time.After(10 * time.Second):
		t.Fatal("the runs informer did not watch within 10s")
	}

	runs := cs.TerrarunV1alpha1().TerraformRuns(testNS)
	ws, probeWS := newWorkspace(testWS), newWorkspace("probe")
	probes := 0
	const netKey, probeKey = testNS + "/" + testWS, testNS + "/probe"
	// probe creates a run of workspace probe and returns the keys queued up
	// to probe's.
	probe := func() []string {
		t.Helper()
		probes++
		if _, err := runs.Create(ctx, newRun(probeWS, probes, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for !slices.Contains(keys, probeKey) {
			keys = append(keys, nextKey(t, ctrl.queue))
		}
		if n := ctrl.queue.Len(); n != 0 {
			t.Errorf("%d more keys queued after probe's", n)
		}
		return keys
	}
	// status changes the stored run net-1 through the status subresource.
	status := func(mutate func(*v1alpha1.TerraformRun)) func() {
		return func() {
			t.Helper()
			run, err := runs.Get(ctx, "net-1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			mutate(run)
			if _, err := runs.UpdateStatus(ctx, run, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	for _, step := range []struct {
		name   string
		change func()
		want   []string
	}{
		{"created", func() {
			if _, err := runs.Create(ctx, newRun(ws, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, phase(v1alpha1.RunPhasePlanning)), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, []string{netKey, probeKey}},
		{"a stage record", status(func(r *v1alpha1.TerraformRun) {
			r.Status.Stages = append(r.Status.Stages, v1alpha1.StageStatus{Name: v1alpha1.StagePlan, Attempt: 1, Job: "net-1-plan-1"})
		}), []string{probeKey}},
		{"a condition within Planning", status(func(r *v1alpha1.TerraformRun) {
			meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionPlanned, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPlanning})
		}), []string{probeKey}},
		{"Planning to AwaitingApproval", status(phase(v1alpha1.RunPhaseAwaitingApproval)), []string{netKey, probeKey}},
		{"deleted", func() {
			if err := runs.Delete(ctx, "net-1", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, []string{netKey, probeKey}},
	} {
		step.change()
		if got := probe(); !slices.Equal(got, step.want) {
			t.Errorf("%s: queued %q, want %q", step.name, got, step.want)
		}
	}
}

// nextKey returns the next key of q, done with at once; it fails the test
// when none comes within 10s.
func nextKey(t *testing.T, q workqueue.TypedRateLimitingInterface[string]) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		key, quit := q.Get()
		if quit {
			close(got)
			return
		}
		q.Done(key)
		got <- key
	}()
	select {
	case key, ok := <-got:
		if !ok {
			t.Fatal("the queue was shut down")
		}
		return key
	case <-time.After(10 * time.Second):
		t.Fatal("no key queued within 10s")
		return ""
	}
}

// TestDependentsEnqueued: a workspace's change enqueues it and the
// workspaces that depend on it (the dependsOn index), no other.
func TestDependentsEnqueued(t *testing.T) {
	net := newWorkspace(testWS)
	app := newWorkspace("app", func(ws *v1alpha1.TerraformWorkspace) {
		ws.Spec.DependsOn = []v1alpha1.WorkspaceReference{{Name: testWS}}
	})
	other := newWorkspace("other", func(ws *v1alpha1.TerraformWorkspace) {
		ws.Spec.DependsOn = []v1alpha1.WorkspaceReference{{Name: "dns"}}
	})
	h := newHarness(t, net, app, other)
	h.refresh()
	h.ctrl.enqueueWithDependents(net)
	var keys []string
	for h.ctrl.queue.Len() > 0 {
		keys = append(keys, nextKey(t, h.ctrl.queue))
	}
	slices.Sort(keys)
	if want := []string{testNS + "/app", testNS + "/net"}; !slices.Equal(keys, want) {
		t.Errorf("queued %q, want %q", keys, want)
	}
}
