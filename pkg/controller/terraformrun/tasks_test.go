package terraformrun

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned/fake"
	"github.com/terrarun/terrarun/pkg/generated/informers/externalversions"
	informers "github.com/terrarun/terrarun/pkg/generated/informers/externalversions/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runtask"
)

// taskWorld is a run task service that records the payloads it gets, and
// the TerraformRunTasks of the controller's cache.
type taskWorld struct {
	t        *testing.T
	payloads chan runtask.Payload
	srv      *httptest.Server
	informer informers.TerraformRunTaskInformer
}

func newTaskWorld(t *testing.T) *taskWorld {
	w := &taskWorld{t: t, payloads: make(chan runtask.Payload, 16),
		informer: externalversions.NewSharedInformerFactory(fake.NewSimpleClientset(), 0).Terrarun().V1alpha1().TerraformRunTasks()}
	w.srv = httptest.NewTLSServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		var p runtask.Payload
		if err := json.NewDecoder(req.Body).Decode(&p); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		w.payloads <- p
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *taskWorld) option(o *Options) {
	o.Tasks = &Tasks{Informer: w.informer, CallbackURL: "https://terrarun.test",
		SecretValue: func(context.Context, string, string, string) ([]byte, error) { return []byte("key"), nil }}
}

func (w *taskWorld) add(name string, enforcement v1alpha1.RunTaskEnforcement, stages ...v1alpha1.RunTaskStage) {
	w.t.Helper()
	task := &v1alpha1.TerraformRunTask{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name}, Spec: v1alpha1.TerraformRunTaskSpec{
		URL: w.srv.URL + "/" + name, CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: w.srv.Certificate().Raw}), Stages: stages, Enforcement: enforcement, Timeout: &metav1.Duration{Duration: time.Minute}}}
	if err := w.informer.Informer().GetIndexer().Add(task); err != nil {
		w.t.Fatal(err)
	}
}

// received waits for n payloads, and then makes sure no other comes.
func (w *taskWorld) received(n int) []runtask.Payload {
	w.t.Helper()
	var got []runtask.Payload
	for len(got) < n {
		select {
		case p := <-w.payloads:
			got = append(got, p)
		case <-time.After(10 * time.Second):
			w.t.Fatalf("received %d payloads, want %d", len(got), n)
		}
	}
	select {
	case p := <-w.payloads:
		w.t.Fatalf("an unexpected payload: %+v", p)
	case <-time.After(200 * time.Millisecond):
	}
	return got
}

func tasksChecked(run *v1alpha1.TerraformRun) *metav1.Condition {
	return meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionTasksChecked)
}

// TestPrePlanTasks: the PrePlan tasks are recorded before their payloads
// go out, each payload goes out once, with the token whose hash is
// recorded, even when a sync sees the run as it was before the record; the
// plan stage starts once they have answered; an Advisory task that does not
// answer in time is recorded and does not hold the run.
func TestPrePlanTasks(t *testing.T) {
	w := newTaskWorld(t)
	w.add("scan", v1alpha1.RunTaskMandatory, v1alpha1.RunTaskPrePlan, v1alpha1.RunTaskPostApply)
	w.add("cost", v1alpha1.RunTaskAdvisory, v1alpha1.RunTaskPrePlan)
	w.add("later", v1alpha1.RunTaskMandatory, v1alpha1.RunTaskPreApply)
	h := newHarness(t, newRun(), w.option)
	before := h.get()

	h.mustSync()
	run := h.get()
	if run.Status.Phase != v1alpha1.RunPhasePending || len(run.Status.Tasks) != 2 || len(run.Status.Stages) != 0 {
		t.Fatalf("after the first sync: phase %s, tasks %+v, stages %+v", run.Status.Phase, run.Status.Tasks, run.Status.Stages)
	}
	if c := tasksChecked(run); c == nil || c.Reason != v1alpha1.ReasonAwaitingTasks || c.Message != "Waiting for run tasks at PrePlan: cost, scan." {
		t.Errorf("TasksChecked = %+v", c)
	}
	w.received(0) // recorded, not sent

	// A sync that sees the run as it was before the record records calls of
	// its own, whose write conflicts; the first calls' tokens are kept.
	if err := h.indexer.Update(before); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ctrl.sync(h.ctx, testKey); err == nil {
		t.Fatal("a sync of a stale run wrote it")
	}
	h.mustSync()
	payloads := w.received(2)
	run = h.get()
	for _, p := range payloads {
		call := findCall(run, strings.TrimSuffix(p.TaskResultID, ".PrePlan"), v1alpha1.RunTaskPrePlan)
		if call == nil || runtask.HashToken(p.AccessToken) != call.TokenHash || p.Stage != "pre_plan" || p.PlanJSONAPIURL != "" {
			t.Errorf("payload %+v does not match the call %+v", p, call)
		}
	}
	h.mustSync()
	w.received(0) // sent once

	// scan passes; cost never answers.
	findCall(run, "scan", v1alpha1.RunTaskPrePlan).Status = v1alpha1.RunTaskPassed
	if _, err := h.cs.TerrarunV1alpha1().TerraformRuns(testNS).UpdateStatus(h.ctx, run, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if wait := h.mustSync(); wait <= 0 || wait > time.Minute || h.get().Status.Phase != v1alpha1.RunPhasePending {
		t.Fatalf("waiting for cost: requeue after %s, phase %s", wait, h.get().Status.Phase)
	}
	h.clock.Step(time.Minute)
	h.mustSync()
	run = h.get()
	if run.Status.Phase != v1alpha1.RunPhasePlanning {
		t.Fatalf("after cost's deadline: %s %q", run.Status.Phase, run.Status.Message)
	}
	if c := tasksChecked(run); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "cost (Advisory) errored: No answer within its timeout") {
		t.Errorf("TasksChecked = %+v", c)
	}
}

// TestMandatoryTaskFails: a Mandatory PrePlan task that answers failed ends
// the run Failed (TaskFailed) before any stage, naming it; the calls still
// running end with the run, so their tokens are worth nothing.
func TestMandatoryTaskFails(t *testing.T) {
	w := newTaskWorld(t)
	w.add("scan", v1alpha1.RunTaskMandatory, v1alpha1.RunTaskPrePlan)
	w.add("slow", v1alpha1.RunTaskMandatory, v1alpha1.RunTaskPrePlan)
	h := newHarness(t, newRun(), w.option)
	h.mustSync()
	run := h.get()
	scan := findCall(run, "scan", v1alpha1.RunTaskPrePlan)
	scan.Status, scan.Message = v1alpha1.RunTaskFailed, "2 critical findings"
	if _, err := h.cs.TerrarunV1alpha1().TerraformRuns(testNS).UpdateStatus(h.ctx, run, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.mustSync()
	run = h.get()
	if run.Status.Phase != v1alpha1.RunPhaseFailed || run.Status.Message != "Stopped by run tasks at PrePlan: scan (Mandatory) failed: 2 critical findings." || len(run.Status.Stages) != 0 {
		t.Errorf("run %s %q, stages %+v", run.Status.Phase, run.Status.Message, run.Status.Stages)
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionPlanned); c == nil || c.Reason != v1alpha1.ReasonTaskFailed {
		t.Errorf("Planned = %+v", c)
	}
	if slow := findCall(run, "slow", v1alpha1.RunTaskPrePlan); slow.Status != v1alpha1.RunTaskErrored || slow.Message != "The run ended Failed before the task answered." {
		t.Errorf("the call still running: %+v", slow)
	}
}

// TestAutoRunWaitsForPostPlanTasks: an Auto run with PostPlan tasks does
// not go on to apply in its plan's execution: it waits in
// AwaitingApproval, and applies in a stage of its own once they passed.
func TestAutoRunWaitsForPostPlanTasks(t *testing.T) {
	w := newTaskWorld(t)
	w.add("scan", v1alpha1.RunTaskMandatory, v1alpha1.RunTaskPostPlan)
	h := newHarness(t, newRun(autoMode, planning, withPlan), w.option)
	h.world.script(planJob1, executor.Status{State: executor.StateRunning})
	h.mustSync()
	run := h.get()
	if run.Status.Phase != v1alpha1.RunPhaseAwaitingApproval || run.Status.Approval != nil || len(run.Status.Tasks) != 1 {
		t.Fatalf("run %s %q, approval %+v, tasks %+v", run.Status.Phase, run.Status.Message, run.Status.Approval, run.Status.Tasks)
	}
	h.mustSync()
	w.received(1)
	run = h.get()
	run.Status.Tasks[0].Status = v1alpha1.RunTaskPassed
	if _, err := h.cs.TerrarunV1alpha1().TerraformRuns(testNS).UpdateStatus(h.ctx, run, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.mustSync()
	run = h.get()
	apply := run.Status.Stages[len(run.Status.Stages)-1]
	if run.Status.Phase != v1alpha1.RunPhaseApplying || run.Status.Approval == nil || apply.Name != v1alpha1.StageApply || apply.CarrierAttempt != 0 {
		t.Errorf("run %s %q, approval %+v, last stage %+v; want its apply, a stage of its own", run.Status.Phase, run.Status.Message, run.Status.Approval, apply)
	}
}

// TestTasksSelectByLabelsAtCreation: a task selects a run by its labels now
// or as it was created, so an editor who removes a label after the plan
// does not take the run out of the task's PreApply check.
func TestTasksSelectByLabelsAtCreation(t *testing.T) {
	w := newTaskWorld(t)
	task := &v1alpha1.TerraformRunTask{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "payments-scan"}, Spec: v1alpha1.TerraformRunTaskSpec{
		URL: w.srv.URL, Stages: []v1alpha1.RunTaskStage{v1alpha1.RunTaskPreApply},
		RunSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}}}}
	if err := w.informer.Informer().GetIndexer().Add(task); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, newRun(), w.option)
	for name, tc := range map[string]struct {
		labels, annotations map[string]string
		selected            bool
	}{
		"labelled":                     {map[string]string{"team": "payments"}, nil, true},
		"never labelled":               {nil, nil, false},
		"label removed after creation": {nil, map[string]string{v1alpha1.AnnotationLabelsAtCreation: `{"team":"payments"}`}, true},
		"label changed after creation": {map[string]string{"team": "web"}, map[string]string{v1alpha1.AnnotationLabelsAtCreation: `{"team":"payments"}`}, true},
		"label added after creation":   {map[string]string{"team": "payments"}, map[string]string{v1alpha1.AnnotationLabelsAtCreation: `{"team":"web"}`}, true},
		"created with another label":   {nil, map[string]string{v1alpha1.AnnotationLabelsAtCreation: `{"team":"web"}`}, false},
	} {
		run := newRun()
		run.Labels, run.Annotations = tc.labels, tc.annotations
		if got := len(h.ctrl.matchingTasks(run, v1alpha1.RunTaskPreApply)) == 1; got != tc.selected {
			t.Errorf("%s: selected %v, want %v", name, got, tc.selected)
		}
	}
}
