package terraformrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned/fake"
	"github.com/terrarun/terrarun/pkg/generated/informers/externalversions"
)

const (
	testNS     = "team-a"
	testName   = "net"
	testKey    = testNS + "/" + testName
	testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

	planJob1  = testName + "-plan-1"
	applyJob1 = testName + "-apply-1"
)

var (
	t0       = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	runsGVR  = v1alpha1.SchemeGroupVersion.WithResource("terraformruns")
	testSpec = v1alpha1.TerraformRunSpec{
		Operation: v1alpha1.OperationApply,
		Approval:  v1alpha1.Approval{Mode: v1alpha1.ApprovalModeManual, Timeout: &metav1.Duration{Duration: time.Hour}},
		Timeouts: v1alpha1.Timeouts{
			Plan:  &metav1.Duration{Duration: 10 * time.Minute},
			Apply: &metav1.Duration{Duration: 30 * time.Minute},
		},
	}
)

// ---------------------------------------------------------------------------
// A fake executor.

// execWorld is what executors share, like Jobs in a cluster or execution
// records in etcd: several fakeExec instances (replicas) over one world see
// the same executions, and Start is idempotent by name across all of them.
type execWorld struct {
	mu         sync.Mutex
	started    map[string]bool            // executions that exist
	starts     map[string]int             // real starts per name
	startCalls map[string]int             // Start calls per name
	startedEx  []executor.Execution       // executions really started, in order
	scripted   map[string]executor.Status // the state of an execution, as the test scripts it
	stops      []stopCall
	// stopEnds makes Stop end a running execution at once (Failed, exit 130);
	// otherwise it keeps running until the test scripts its end.
	stopEnds bool
	// beforeStart, when set, is called (without mu) before every Start.
	beforeStart func(ex executor.Execution)
	// startErr, when set, is what Start returns, starting nothing.
	startErr error
}

type stopCall struct {
	name  string
	grace time.Duration
}

func newExecWorld() *execWorld {
	return &execWorld{
		started:    map[string]bool{},
		starts:     map[string]int{},
		startCalls: map[string]int{},
		scripted:   map[string]executor.Status{},
		stopEnds:   true,
	}
}

func execName(ex executor.Execution) string {
	return fmt.Sprintf("%s-%s-%d", ex.Run.Name, ex.Stage, ex.Attempt)
}

// script sets the state that Status reports for the execution name.
func (w *execWorld) script(name string, st executor.Status) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.scripted[name] = st
}

// succeed scripts name as ended with exit code 0.
func (w *execWorld) succeed(name string) {
	w.script(name, executor.Status{State: executor.StateSucceeded, ExitCode: ptr.To[int32](0), CompletionTime: ptr.To(t0.Add(time.Minute))})
}

// lose scripts name as lost with its executor.
func (w *execWorld) lose(name string) {
	w.script(name, executor.Status{State: executor.StateUnknown, Reason: executor.ReasonExecutorLost, Message: "lost with its server"})
}

// markStarted records name as started earlier (by a previous incarnation).
func (w *execWorld) markStarted(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started[name] = true
	w.starts[name]++
}

func (w *execWorld) realStarts(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.starts[name]
}

func (w *execWorld) calls(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.startCalls[name]
}

// startsOf returns the real starts of stageName by attempt.
func (w *execWorld) startsOf(stageName v1alpha1.StageName) map[int32]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[int32]int{}
	for _, ex := range w.startedEx {
		if ex.Stage == stageName {
			out[ex.Attempt]++
		}
	}
	return out
}

func (w *execWorld) stopCalls() []stopCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]stopCall(nil), w.stops...)
}

func (w *execWorld) startedExecutions() []executor.Execution {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]executor.Execution(nil), w.startedEx...)
}

// fakeExec is one replica's executor over a shared world.
type fakeExec struct {
	w *execWorld
	// lost makes this instance report every execution that exists and has not
	// ended as StateUnknown/ExecutorLost, as a restarted local executor reports
	// a record of a process that it does not run.
	lost bool
	// notify is the Notifier of Run, while it runs.
	notify atomic.Pointer[executor.Notifier]
}

var _ executor.Executor = (*fakeExec)(nil)

func (f *fakeExec) Run(ctx context.Context, notify executor.Notifier) error {
	f.notify.Store(&notify)
	<-ctx.Done()
	return nil
}

func (f *fakeExec) Shutdown(context.Context, executor.ShutdownOptions) error { return nil }

// changed reports that an execution of the run changed, as a backend does
// through the Notifier of Run.
func (f *fakeExec) changed(t *testing.T, namespace, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return f.notify.Load() != nil, nil
	})
	if err != nil {
		t.Fatalf("the controller never called the executor's Run: %v", err)
	}
	(*f.notify.Load())(namespace, name)
}

func (f *fakeExec) Name(ex executor.Execution) string { return execName(ex) }

func (f *fakeExec) Start(_ context.Context, ex executor.Execution) (string, error) {
	if f.w.beforeStart != nil {
		f.w.beforeStart(ex)
	}
	name := execName(ex)
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.startCalls[name]++
	if f.w.startErr != nil {
		return "", f.w.startErr
	}
	if f.w.started[name] {
		return name, nil // adopted: nothing new starts
	}
	f.w.started[name] = true
	f.w.starts[name]++
	f.w.startedEx = append(f.w.startedEx, ex)
	return name, nil
}

func (f *fakeExec) Status(_ context.Context, ex executor.Execution) (executor.Status, error) {
	name := execName(ex)
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	st, scripted := f.w.scripted[name]
	switch {
	case scripted && (st.State != executor.StateRunning || !f.lost):
	case f.w.started[name] && f.lost:
		st = executor.Status{State: executor.StateUnknown, Reason: executor.ReasonExecutorLost}
	case f.w.started[name]:
		st = executor.Status{State: executor.StateRunning}
	default:
		st = executor.Status{State: executor.StateUnknown, Reason: executor.ReasonNotStarted}
	}
	st.Name = name
	return st, nil
}

func (f *fakeExec) Stop(_ context.Context, ex executor.Execution, grace time.Duration) error {
	name := execName(ex)
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.stops = append(f.w.stops, stopCall{name: name, grace: grace})
	st, scripted := f.w.scripted[name]
	running := (scripted && st.State == executor.StateRunning) || (!scripted && f.w.started[name])
	// An executor that reports the execution lost has no process to
	// interrupt: its Stop removes what is left, and no exit code results.
	if running && f.w.stopEnds && !f.lost {
		f.w.scripted[name] = executor.Status{State: executor.StateFailed, ExitCode: ptr.To[int32](130), Reason: "Stopped",
			Message: "Interrupt received. Gracefully shutting down...", CompletionTime: ptr.To(t0.Add(90 * time.Minute))}
	}
	return nil
}

func (f *fakeExec) Forget(context.Context, string, string, string) error { return nil }

// ---------------------------------------------------------------------------
// Optimistic concurrency for the fake clientset.

// occ makes updates of terraformruns (plain and status) honour
// resourceVersion as the API server does: an update whose resourceVersion is
// not the stored one is a Conflict; an accepted one bumps it. A status update
// changes everything but spec, as terrarun's status strategy does (its
// metadata too: the apply finalizer goes with the writes of the apply's start
// and of the run's end), a plain update everything but status.
type occ struct {
	mu        sync.Mutex
	cs        *fake.Clientset
	conflicts int
	accepted  int
	// onWrite, when set, sees every accepted write, under mu.
	onWrite func(old, updated *v1alpha1.TerraformRun)
}

func addOptimisticConcurrency(cs *fake.Clientset) *occ {
	o := &occ{cs: cs}
	cs.PrependReactor("update", "terraformruns", o.react)
	return o
}

func (o *occ) react(action k8stesting.Action) (bool, k8sruntime.Object, error) {
	ua, ok := action.(k8stesting.UpdateAction)
	if !ok {
		return false, nil, nil
	}
	sub := ua.GetSubresource()
	if sub != "" && sub != "status" {
		return false, nil, nil
	}
	in, ok := ua.GetObject().(*v1alpha1.TerraformRun)
	if !ok {
		return true, nil, fmt.Errorf("unexpected object %T", ua.GetObject())
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	cur, err := o.cs.Tracker().Get(runsGVR, ua.GetNamespace(), in.Name)
	if err != nil {
		return true, nil, err
	}
	stored := cur.(*v1alpha1.TerraformRun)
	if in.ResourceVersion != stored.ResourceVersion {
		o.conflicts++
		return true, nil, apierrors.NewConflict(v1alpha1.Resource("terraformruns"), in.Name,
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again (resourceVersion %q, stored %q)", in.ResourceVersion, stored.ResourceVersion))
	}
	rv, err := strconv.ParseInt(stored.ResourceVersion, 10, 64)
	if err != nil {
		return true, nil, err
	}
	var next *v1alpha1.TerraformRun
	if sub == "status" {
		next = in.DeepCopy()
		next.Spec = *stored.Spec.DeepCopy()
	} else {
		next = in.DeepCopy()
		next.Status = *stored.Status.DeepCopy()
	}
	next.ResourceVersion = strconv.FormatInt(rv+1, 10)
	if o.onWrite != nil {
		o.onWrite(stored, next)
	}
	if err := o.cs.Tracker().Update(runsGVR, next, ua.GetNamespace()); err != nil {
		return true, nil, err
	}
	o.accepted++
	return true, next.DeepCopy(), nil
}

// ---------------------------------------------------------------------------
// Runs.

func newRun(mutate ...func(*v1alpha1.TerraformRun)) *v1alpha1.TerraformRun {
	run := &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS, Name: testName, UID: "0b5e7b9e-1111-4d2c-9a55-000000000001",
			Generation: 1, ResourceVersion: "1", CreationTimestamp: metav1.NewTime(t0),
		},
		Spec: *testSpec.DeepCopy(),
	}
	for _, m := range mutate {
		m(run)
	}
	return run
}

func stageAt(name v1alpha1.StageName, attempt int32, at time.Time) v1alpha1.StageStatus {
	return v1alpha1.StageStatus{Name: name, Attempt: attempt, Job: fmt.Sprintf("%s-%s-%d", testName, name, attempt), StartTime: ptr.To(metav1.NewTime(at))}
}

func completed(st v1alpha1.StageStatus, at time.Time) v1alpha1.StageStatus {
	st.CompletionTime = ptr.To(metav1.NewTime(at))
	st.ExitCode = ptr.To[int32](0)
	st.Reason = "Completed"
	return st
}

// planning: the plan stage, attempt 1, recorded at t0.
func planning(run *v1alpha1.TerraformRun) {
	run.Status.Phase = v1alpha1.RunPhasePlanning
	run.Status.StartTime = ptr.To(metav1.NewTime(t0))
	run.Status.Stages = []v1alpha1.StageStatus{stageAt(v1alpha1.StagePlan, 1, t0)}
}

// withPlan: the plan subresource received a plan with changes at t0+1m.
func withPlan(run *v1alpha1.TerraformRun) {
	run.Status.Plan = &v1alpha1.PlanSummary{Digest: testDigest, Add: 2, Change: 1, Destroy: 0, HasChanges: true, CompletedAt: ptr.To(metav1.NewTime(t0.Add(time.Minute)))}
}

// awaiting: planned with changes, waiting for an approval since t0+1m.
func awaiting(run *v1alpha1.TerraformRun) {
	withPlan(run)
	run.Status.Phase = v1alpha1.RunPhaseAwaitingApproval
	run.Status.StartTime = ptr.To(metav1.NewTime(t0))
	run.Status.Stages = []v1alpha1.StageStatus{completed(stageAt(v1alpha1.StagePlan, 1, t0), t0.Add(time.Minute))}
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionPlanned, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPlanned, Message: "Plan: 2 to add, 1 to change, 0 to destroy."})
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionApproved, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAwaitingApproval, Message: "Waiting."})
}

// approved: awaiting, and approved (by the approve subresource) at t0+2m.
func approved(run *v1alpha1.TerraformRun) {
	awaiting(run)
	run.Status.Approval = &v1alpha1.ApprovalStatus{ApprovedBy: "alice", ApprovedAt: ptr.To(metav1.NewTime(t0.Add(2 * time.Minute))), PlanDigest: testDigest}
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionApproved, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonApproved, Message: "Approved by alice."})
}

// applying: approved, and the apply stage, attempt 1, recorded at t0+3m.
func applying(run *v1alpha1.TerraformRun) {
	approved(run)
	run.Status.Phase = v1alpha1.RunPhaseApplying
	run.Status.Stages = append(run.Status.Stages, stageAt(v1alpha1.StageApply, 1, t0.Add(3*time.Minute)))
}

func cancelRequested(run *v1alpha1.TerraformRun) {
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionCancelRequested, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonCancelRequested, Message: "Canceled by bob: wrong workspace",
	})
}

func autoMode(run *v1alpha1.TerraformRun) { run.Spec.Approval.Mode = v1alpha1.ApprovalModeAuto }

func discardRequested(run *v1alpha1.TerraformRun) {
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionDiscardRequested, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonDiscardRequested, Message: "Plan discarded by bob: not today",
	})
}

// ---------------------------------------------------------------------------
// A harness around one controller whose cache the test fills by hand, so
// that every sync sees exactly the stored run.

type harness struct {
	t       *testing.T
	ctx     context.Context
	cs      *fake.Clientset
	occ     *occ
	world   *execWorld
	clock   *clocktesting.FakeClock
	rec     *record.FakeRecorder
	ctrl    *Controller
	indexer cache.Indexer
	applied atomic.Int32
	logs    closedLogs
}

type harnessOption func(*Options)

func newHarness(t *testing.T, run *v1alpha1.TerraformRun, hopts ...harnessOption) *harness {
	t.Helper()
	h := &harness{
		t:     t,
		ctx:   t.Context(),
		cs:    fake.NewSimpleClientset(run),
		world: newExecWorld(),
		clock: clocktesting.NewFakeClock(t0),
		rec:   record.NewFakeRecorder(100),
	}
	h.occ = addOptimisticConcurrency(h.cs)
	opts := Options{
		Clock:       h.clock,
		Recorder:    h.rec,
		CancelGrace: 7 * time.Second,
		OnApplied: func(context.Context, *v1alpha1.TerraformRun) error {
			h.applied.Add(1)
			return nil
		},
	}
	for _, o := range hopts {
		o(&opts)
	}
	h.ctrl, h.indexer = newManualController(t, h.cs, &fakeExec{w: h.world}, opts)
	h.ctrl.artifacts = &h.logs
	return h
}

// closedLogs records the stage logs a controller closes, as "stage/attempt".
type closedLogs struct {
	mu     sync.Mutex
	closed []string
}

func (l *closedLogs) CloseLog(_ context.Context, _ artifacts.RunRef, stage string, attempt int32) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = append(l.closed, fmt.Sprintf("%s/%d", stage, attempt))
	return nil
}

// Get finds no artifact: these tests read no run's outputs.
func (l *closedLogs) Get(context.Context, artifacts.RunRef, artifacts.Kind) (io.ReadCloser, artifacts.Meta, error) {
	return nil, artifacts.Meta{}, errors.New("the controller tests store no artifacts")
}

func (l *closedLogs) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.closed)
}

// newManualController builds a controller whose informer is never started:
// the test puts objects into its cache.
func newManualController(t *testing.T, cs *fake.Clientset, exec executor.Executor, opts Options) (*Controller, cache.Indexer) {
	t.Helper()
	inf := externalversions.NewSharedInformerFactory(cs, 0).Terrarun().V1alpha1().TerraformRuns()
	c, err := New(cs, inf, exec, nil, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c, inf.Informer().GetIndexer()
}

func getRun(t *testing.T, cs *fake.Clientset) *v1alpha1.TerraformRun {
	t.Helper()
	obj, err := cs.Tracker().Get(runsGVR, testNS, testName)
	if err != nil {
		t.Fatalf("getting the run: %v", err)
	}
	return obj.(*v1alpha1.TerraformRun).DeepCopy()
}

func (h *harness) get() *v1alpha1.TerraformRun { h.t.Helper(); return getRun(h.t, h.cs) }

// sync puts the stored run into the controller's cache and reconciles it.
func (h *harness) sync() (time.Duration, error) {
	h.t.Helper()
	if err := h.indexer.Update(h.get()); err != nil {
		h.t.Fatal(err)
	}
	return h.ctrl.sync(h.ctx, testKey)
}

// add puts other runs into the controller's cache.
func (h *harness) add(runs ...*v1alpha1.TerraformRun) {
	h.t.Helper()
	for _, r := range runs {
		if err := h.indexer.Add(r); err != nil {
			h.t.Fatal(err)
		}
	}
}

// endRun ends the other run r (Succeeded) in the cache, and syncs the run.
func (h *harness) endRun(r *v1alpha1.TerraformRun) {
	h.t.Helper()
	r = r.DeepCopy()
	r.Status.Phase = v1alpha1.RunPhaseSucceeded
	if err := h.indexer.Update(r); err != nil {
		h.t.Fatal(err)
	}
	h.mustSync()
}

// expectNotRewritten syncs again and fails if that wrote the run.
func (h *harness) expectNotRewritten(what string) {
	h.t.Helper()
	rv := h.get().ResourceVersion
	h.mustSync()
	if h.get().ResourceVersion != rv {
		h.t.Errorf("%s was written again", what)
	}
}

func (h *harness) mustSync() time.Duration {
	h.t.Helper()
	d, err := h.sync()
	if err != nil {
		h.t.Fatalf("sync: %v", err)
	}
	return d
}

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

func expectCondition(t *testing.T, run *v1alpha1.TerraformRun, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	c := meta.FindStatusCondition(run.Status.Conditions, typ)
	if c == nil {
		t.Errorf("condition %s missing; conditions: %+v", typ, run.Status.Conditions)
		return
	}
	if c.Status != status || c.Reason != reason {
		t.Errorf("condition %s = %s/%s (%q), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
	}
}

func stagesOf(run *v1alpha1.TerraformRun, name v1alpha1.StageName) []v1alpha1.StageStatus {
	var out []v1alpha1.StageStatus
	for _, st := range run.Status.Stages {
		if st.Name == name {
			out = append(out, st)
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Case 1: Pending → Planning.

func TestSyncPendingStartsPlan(t *testing.T) {
	for _, phase := range []v1alpha1.RunPhase{"", v1alpha1.RunPhasePending} {
		t.Run("phase="+string(phase), func(t *testing.T) {
			h := newHarness(t, newRun(func(r *v1alpha1.TerraformRun) { r.Status.Phase = phase }))
			if d := h.mustSync(); d != 0 {
				t.Errorf("requeue = %v, want 0 (the executor notifies)", d)
			}
			run := h.get()
			if run.Status.Phase != v1alpha1.RunPhasePlanning {
				t.Errorf("phase = %q, want Planning", run.Status.Phase)
			}
			want := []v1alpha1.StageStatus{stageAt(v1alpha1.StagePlan, 1, t0)}
			if len(run.Status.Stages) != 1 || run.Status.Stages[0].Name != want[0].Name || run.Status.Stages[0].Attempt != 1 ||
				run.Status.Stages[0].Job != planJob1 || !run.Status.Stages[0].StartTime.Time.Equal(t0) {
				t.Errorf("stages = %+v, want %+v", run.Status.Stages, want)
			}
			if run.Status.StartTime == nil || !run.Status.StartTime.Time.Equal(t0) {
				t.Errorf("startTime = %v, want %v", run.Status.StartTime, t0)
			}
			if run.Status.ObservedGeneration != run.Generation {
				t.Errorf("observedGeneration = %d, want %d", run.Status.ObservedGeneration, run.Generation)
			}
			expectCondition(t, run, v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonPlanning)
			if got := h.world.calls(planJob1); got != 1 {
				t.Errorf("Start calls = %d, want 1", got)
			}
			if got := h.world.realStarts(planJob1); got != 1 {
				t.Errorf("real starts = %d, want 1", got)
			}
			h.expectEvent("Normal StageStarted Started the plan stage, attempt 1")

			// The stage runs: the next sync only waits for the plan timeout.
			h.clock.Step(4 * time.Minute)
			if d := h.mustSync(); d != 6*time.Minute {
				t.Errorf("requeue while running = %v, want 6m (the rest of spec.timeouts.plan)", d)
			}
			if got := h.world.calls(planJob1); got != 1 {
				t.Errorf("Start calls after a second sync = %d, want 1", got)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Case 2: what follows a plan that succeeded.

func TestSyncPlanSucceeded(t *testing.T) {
	for _, tc := range []struct {
		name         string
		mutate       []func(*v1alpha1.TerraformRun)
		wantPhase    v1alpha1.RunPhase
		wantPlanned  metav1.ConditionStatus
		wantReason   string
		wantApproved string // reason of Approved, "" to skip
		wantRequeue  time.Duration
		wantApply    bool
		wantMessage  string
	}{
		{
			name: "manual with changes awaits approval", mutate: []func(*v1alpha1.TerraformRun){withPlan},
			wantPhase: v1alpha1.RunPhaseAwaitingApproval, wantPlanned: metav1.ConditionTrue, wantReason: v1alpha1.ReasonPlanned,
			wantApproved: v1alpha1.ReasonAwaitingApproval, wantRequeue: time.Hour, // plan completed at t0+1m, timeout 1h, now t0+1m
			wantMessage: "Plan: 2 to add, 1 to change, 0 to destroy.",
		},
		{
			name: "auto approves and applies", mutate: []func(*v1alpha1.TerraformRun){withPlan, autoMode},
			wantPhase: v1alpha1.RunPhaseApplying, wantPlanned: metav1.ConditionTrue, wantReason: v1alpha1.ReasonPlanned,
			wantApproved: v1alpha1.ReasonAutoApproved, wantApply: true, wantMessage: "Applying the approved plan.",
		},
		{
			name: "destroy in auto mode applies too", mutate: []func(*v1alpha1.TerraformRun){withPlan, autoMode, func(r *v1alpha1.TerraformRun) { r.Spec.Operation = v1alpha1.OperationDestroy }},
			wantPhase: v1alpha1.RunPhaseApplying, wantPlanned: metav1.ConditionTrue, wantReason: v1alpha1.ReasonPlanned,
			wantApproved: v1alpha1.ReasonAutoApproved, wantApply: true,
		},
		{
			name: "operation Plan is never applied", mutate: []func(*v1alpha1.TerraformRun){withPlan, autoMode, func(r *v1alpha1.TerraformRun) { r.Spec.Operation = v1alpha1.OperationPlan }},
			wantPhase: v1alpha1.RunPhaseSucceeded, wantPlanned: metav1.ConditionTrue, wantReason: v1alpha1.ReasonPlanOnly,
			wantApproved: v1alpha1.ReasonPlanOnly, wantMessage: "speculative plan",
		},
		{
			name: "no changes succeeds", mutate: []func(*v1alpha1.TerraformRun){withPlan, autoMode, func(r *v1alpha1.TerraformRun) {
				r.Status.Plan.HasChanges, r.Status.Plan.Add, r.Status.Plan.Change = false, 0, 0
			}},
			wantPhase: v1alpha1.RunPhaseSucceeded, wantPlanned: metav1.ConditionTrue, wantReason: v1alpha1.ReasonNoChanges,
			wantApproved: v1alpha1.ReasonNoChanges, wantMessage: "No changes",
		},
		{
			name: "no plan uploaded fails", mutate: nil,
			wantPhase: v1alpha1.RunPhaseFailed, wantPlanned: metav1.ConditionFalse, wantReason: v1alpha1.ReasonPlanFailed,
			wantMessage: "without uploading a plan",
		},
		{
			name: "a plan without a digest fails", mutate: []func(*v1alpha1.TerraformRun){withPlan, func(r *v1alpha1.TerraformRun) { r.Status.Plan.Digest = "" }},
			wantPhase: v1alpha1.RunPhaseFailed, wantPlanned: metav1.ConditionFalse, wantReason: v1alpha1.ReasonPlanFailed,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, newRun(append([]func(*v1alpha1.TerraformRun){planning}, tc.mutate...)...))
			h.world.markStarted(planJob1)
			h.world.succeed(planJob1)
			h.clock.SetTime(t0.Add(time.Minute))

			d := h.mustSync()
			run := h.get()
			if run.Status.Phase != tc.wantPhase {
				t.Fatalf("phase = %q (%s), want %q", run.Status.Phase, run.Status.Message, tc.wantPhase)
			}
			if d != tc.wantRequeue {
				t.Errorf("requeue = %v, want %v", d, tc.wantRequeue)
			}
			if !strings.Contains(run.Status.Message, tc.wantMessage) {
				t.Errorf("message = %q, want it to contain %q", run.Status.Message, tc.wantMessage)
			}
			expectCondition(t, run, v1alpha1.ConditionPlanned, tc.wantPlanned, tc.wantReason)
			if tc.wantApproved != "" {
				want := metav1.ConditionFalse
				if tc.wantApproved == v1alpha1.ReasonAutoApproved {
					want = metav1.ConditionTrue
				}
				expectCondition(t, run, v1alpha1.ConditionApproved, want, tc.wantApproved)
			}
			plan := stagesOf(run, v1alpha1.StagePlan)
			if len(plan) != 1 || plan[0].CompletionTime == nil || plan[0].ExitCode == nil || *plan[0].ExitCode != 0 || plan[0].Reason != "Completed" {
				t.Errorf("plan stage = %+v, want one completed with exit code 0", plan)
			}
			switch tc.wantPhase {
			case v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed:
				if run.Status.CompletionTime == nil {
					t.Errorf("completionTime not set in a final phase")
				}
			default:
				if run.Status.CompletionTime != nil {
					t.Errorf("completionTime = %v in phase %s", run.Status.CompletionTime, run.Status.Phase)
				}
			}

			applies := stagesOf(run, v1alpha1.StageApply)
			if !tc.wantApply {
				if len(applies) != 0 || h.world.calls(applyJob1) != 0 {
					t.Errorf("apply recorded (%+v) or started (%d calls); want neither", applies, h.world.calls(applyJob1))
				}
				return
			}
			if run.Status.Approval == nil || run.Status.Approval.ApprovedBy != v1alpha1.AutoApprover || run.Status.Approval.PlanDigest != testDigest {
				t.Errorf("approval = %+v, want approvedBy %q for %s", run.Status.Approval, v1alpha1.AutoApprover, testDigest)
			}
			if len(applies) != 1 || applies[0].Attempt != 1 || applies[0].Job != applyJob1 {
				t.Errorf("apply stages = %+v, want attempt 1 as %s", applies, applyJob1)
			}
			expectCondition(t, run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonApplying)
			if got := h.world.realStarts(applyJob1); got != 1 {
				t.Errorf("apply starts = %d, want 1", got)
			}
			if exs := h.world.startedExecutions(); len(exs) != 1 || exs[0].PlanDigest != testDigest {
				t.Errorf("started executions = %+v, want the apply of %s", exs, testDigest)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Case 3: approvals.

func TestSyncApproval(t *testing.T) {
	for _, tc := range []struct {
		name        string
		mutate      func(*v1alpha1.TerraformRun)
		now         time.Time
		wantPhase   v1alpha1.RunPhase
		wantRequeue time.Duration
		wantApply   bool
	}{
		{name: "approved starts the apply", mutate: approved, now: t0.Add(5 * time.Minute), wantPhase: v1alpha1.RunPhaseApplying, wantApply: true},
		{name: "waits for the rest of the timeout", mutate: awaiting, now: t0.Add(41 * time.Minute), wantPhase: v1alpha1.RunPhaseAwaitingApproval, wantRequeue: 20 * time.Minute},
		{name: "an approval of another digest is no approval", mutate: func(r *v1alpha1.TerraformRun) {
			approved(r)
			r.Status.Approval.PlanDigest = "sha256:stale"
		}, now: t0.Add(31 * time.Minute), wantPhase: v1alpha1.RunPhaseAwaitingApproval, wantRequeue: 30 * time.Minute},
		{name: "Auto's approval of a Manual run is no approval", mutate: func(r *v1alpha1.TerraformRun) {
			approved(r)
			r.Status.Approval.ApprovedBy = v1alpha1.AutoApprover
		}, now: t0.Add(31 * time.Minute), wantPhase: v1alpha1.RunPhaseAwaitingApproval, wantRequeue: 30 * time.Minute},
		{name: "an approval by nobody is no approval", mutate: func(r *v1alpha1.TerraformRun) {
			approved(r)
			r.Status.Approval.ApprovedBy = ""
		}, now: t0.Add(31 * time.Minute), wantPhase: v1alpha1.RunPhaseAwaitingApproval, wantRequeue: 30 * time.Minute},
		{name: "one approval of two is no approval", mutate: func(r *v1alpha1.TerraformRun) {
			approved(r)
			r.Spec.Approval.RequiredApprovals = 2
		}, now: t0.Add(31 * time.Minute), wantPhase: v1alpha1.RunPhaseAwaitingApproval, wantRequeue: 30 * time.Minute},
		{name: "the creator's approval never counts toward two", mutate: func(r *v1alpha1.TerraformRun) {
			approved(r)
			r.Spec.Approval.RequiredApprovals = 2
			r.Spec.Creator = &v1alpha1.Creator{Username: "bob"}
			r.Status.Approvals = []v1alpha1.ApprovalStatus{{ApprovedBy: "bob", PlanDigest: testDigest}, *r.Status.Approval}
		}, now: t0.Add(31 * time.Minute), wantPhase: v1alpha1.RunPhaseAwaitingApproval, wantRequeue: 30 * time.Minute},
		{name: "two of an older digest are no approval", mutate: func(r *v1alpha1.TerraformRun) {
			approved(r)
			r.Spec.Approval.RequiredApprovals = 2
			r.Status.Approvals = []v1alpha1.ApprovalStatus{{ApprovedBy: "bob", PlanDigest: "sha256:stale"}, *r.Status.Approval}
		}, now: t0.Add(31 * time.Minute), wantPhase: v1alpha1.RunPhaseAwaitingApproval, wantRequeue: 30 * time.Minute},
		{name: "two distinct approvals of two start the apply", mutate: func(r *v1alpha1.TerraformRun) {
			approved(r)
			r.Spec.Approval.RequiredApprovals = 2
			r.Spec.Creator = &v1alpha1.Creator{Username: "erin"}
			r.Status.Approvals = []v1alpha1.ApprovalStatus{{ApprovedBy: "bob", PlanDigest: testDigest}, *r.Status.Approval}
		}, now: t0.Add(5 * time.Minute), wantPhase: v1alpha1.RunPhaseApplying, wantApply: true},
		{name: "the deadline counts from creation without plan.completedAt", mutate: func(r *v1alpha1.TerraformRun) {
			awaiting(r)
			r.Status.Plan.CompletedAt = nil
		}, now: t0.Add(45 * time.Minute), wantPhase: v1alpha1.RunPhaseAwaitingApproval, wantRequeue: 15 * time.Minute},
		{name: "expired exactly at the deadline", mutate: awaiting, now: t0.Add(61 * time.Minute), wantPhase: v1alpha1.RunPhaseDiscarded},
		{name: "expired long ago", mutate: awaiting, now: t0.Add(48 * time.Hour), wantPhase: v1alpha1.RunPhaseDiscarded},
		{name: "default timeout is 24h", mutate: func(r *v1alpha1.TerraformRun) {
			awaiting(r)
			r.Spec.Approval.Timeout = nil
		}, now: t0.Add(time.Minute + 23*time.Hour), wantPhase: v1alpha1.RunPhaseAwaitingApproval, wantRequeue: time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, newRun(tc.mutate))
			h.clock.SetTime(tc.now)
			d := h.mustSync()
			run := h.get()
			if run.Status.Phase != tc.wantPhase {
				t.Fatalf("phase = %q (%s), want %q", run.Status.Phase, run.Status.Message, tc.wantPhase)
			}
			if d != tc.wantRequeue {
				t.Errorf("requeue = %v, want %v", d, tc.wantRequeue)
			}
			gotApply := h.world.calls(applyJob1)
			if tc.wantApply != (gotApply == 1) || gotApply > 1 {
				t.Errorf("apply Start calls = %d, want apply %v", gotApply, tc.wantApply)
			}
			switch tc.wantPhase {
			case v1alpha1.RunPhaseApplying:
				applies := stagesOf(run, v1alpha1.StageApply)
				if len(applies) != 1 || applies[0].Attempt != 1 || applies[0].Job != applyJob1 || !applies[0].StartTime.Time.Equal(tc.now) {
					t.Errorf("apply stages = %+v", applies)
				}
				if exs := h.world.startedExecutions(); len(exs) != 1 || exs[0].Stage != v1alpha1.StageApply || exs[0].PlanDigest != testDigest {
					t.Errorf("started = %+v, want the apply of the approved digest", exs)
				}
				expectCondition(t, run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonApplying)
				h.expectEvent("Normal StageStarted Started the apply stage, attempt 1")
			case v1alpha1.RunPhaseDiscarded:
				expectCondition(t, run, v1alpha1.ConditionApproved, metav1.ConditionFalse, v1alpha1.ReasonApprovalExpired)
				expectCondition(t, run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonApprovalExpired)
				if !strings.Contains(run.Status.Message, "No approval within 1h0m0s") {
					t.Errorf("message = %q", run.Status.Message)
				}
				if run.Status.CompletionTime == nil || !run.Status.CompletionTime.Time.Equal(tc.now) {
					t.Errorf("completionTime = %v, want %v", run.Status.CompletionTime, tc.now)
				}
				h.expectEvent("Warning ApprovalExpired")
			default:
				if got := h.occ.accepted; got != 0 {
					t.Errorf("%d status writes while waiting, want none", got)
				}
			}
		})
	}
}

func TestSyncDiscardRequested(t *testing.T) {
	h := newHarness(t, newRun(awaiting, discardRequested))
	h.clock.SetTime(t0.Add(5 * time.Minute))
	if d := h.mustSync(); d != 0 {
		t.Errorf("requeue = %v, want 0", d)
	}
	run := h.get()
	if run.Status.Phase != v1alpha1.RunPhaseDiscarded || run.Status.Message != "Plan discarded by bob: not today" ||
		run.Status.CompletionTime == nil || !run.Status.CompletionTime.Time.Equal(t0.Add(5*time.Minute)) {
		t.Errorf("phase %q message %q completion %v, want Discarded now with the discard message", run.Status.Phase, run.Status.Message, run.Status.CompletionTime)
	}
	expectCondition(t, run, v1alpha1.ConditionApproved, metav1.ConditionFalse, v1alpha1.ReasonDiscarded)
	expectCondition(t, run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonDiscarded)
	// Any end but success: kubectl wait --for=condition=Failed ends too.
	expectCondition(t, run, v1alpha1.ConditionFailed, metav1.ConditionTrue, "Discarded")
	expectCondition(t, run, v1alpha1.ConditionReady, metav1.ConditionFalse, "Discarded")
	if h.world.calls(applyJob1) != 0 {
		t.Errorf("a discarded plan was applied")
	}
	h.expectEvent("Normal Discarded Plan discarded by bob")
}

// ---------------------------------------------------------------------------
// Case 4: a stage that fails.

func TestSyncStageFailed(t *testing.T) {
	output := "Initializing...\n\nError: Unsupported argument\n\n  on main.tf line 3, in resource \"null_resource\" \"a\":\n   3:   bogus = 1\n"
	for _, tc := range []struct {
		name       string
		mutate     func(*v1alpha1.TerraformRun)
		job        string
		stage      v1alpha1.StageName
		status     executor.Status
		wantReason string
		wantCond   string
		wantInMsg  []string
	}{
		{
			name: "plan", mutate: planning, job: planJob1, stage: v1alpha1.StagePlan,
			status:     executor.Status{State: executor.StateFailed, ExitCode: ptr.To[int32](1), Reason: executor.ReasonError, Message: output},
			wantReason: v1alpha1.ReasonPlanFailed, wantCond: v1alpha1.ConditionPlanned,
			wantInMsg: []string{"The plan stage failed (exit code 1): Error: Unsupported argument", "bogus = 1"},
		},
		{
			name: "apply", mutate: applying, job: applyJob1, stage: v1alpha1.StageApply,
			status:     executor.Status{State: executor.StateFailed, ExitCode: ptr.To[int32](1), Reason: executor.ReasonError, Message: "Error: creating: AccessDenied"},
			wantReason: v1alpha1.ReasonApplyFailed, wantCond: v1alpha1.ConditionApplied,
			wantInMsg: []string{"The apply stage failed (exit code 1): Error: creating: AccessDenied"},
		},
		{
			name: "plan without output points to the logs", mutate: planning, job: planJob1, stage: v1alpha1.StagePlan,
			status:     executor.Status{State: executor.StateFailed, ExitCode: ptr.To[int32](2), Reason: executor.ReasonError},
			wantReason: v1alpha1.ReasonPlanFailed, wantCond: v1alpha1.ConditionPlanned,
			wantInMsg: []string{"(exit code 2); see the logs", "logs?stage=plan"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, newRun(tc.mutate))
			h.world.markStarted(tc.job)
			h.world.script(tc.job, tc.status)
			h.clock.Step(5 * time.Minute)
			if d := h.mustSync(); d != 0 {
				t.Errorf("requeue = %v, want 0", d)
			}
			run := h.get()
			if run.Status.Phase != v1alpha1.RunPhaseFailed {
				t.Fatalf("phase = %q, want Failed", run.Status.Phase)
			}
			for _, want := range tc.wantInMsg {
				if !strings.Contains(run.Status.Message, want) {
					t.Errorf("message = %q, want it to contain %q", run.Status.Message, want)
				}
			}
			if strings.Contains(run.Status.Message, "Initializing") {
				t.Errorf("message = %q keeps output before the Error: block", run.Status.Message)
			}
			expectCondition(t, run, tc.wantCond, metav1.ConditionFalse, tc.wantReason)
			if tc.stage == v1alpha1.StagePlan {
				expectCondition(t, run, v1alpha1.ConditionApplied, metav1.ConditionFalse, tc.wantReason)
			}
			sts := stagesOf(run, tc.stage)
			st := sts[len(sts)-1]
			if st.ExitCode == nil || *st.ExitCode != *tc.status.ExitCode || st.CompletionTime == nil || st.Reason != tc.status.Reason {
				t.Errorf("stage = %+v, want exit code %d, completed, reason %q", st, *tc.status.ExitCode, tc.status.Reason)
			}
			if run.Status.CompletionTime == nil {
				t.Errorf("completionTime not set")
			}
			h.expectEvent("Warning " + tc.wantReason)
			if c := h.world.calls(applyJob1); tc.stage == v1alpha1.StagePlan && c != 0 {
				t.Errorf("apply started after a failed plan")
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Case 5: stage timeouts.

func TestSyncStageTimeout(t *testing.T) {
	for _, tc := range []struct {
		name        string
		mutate      func(*v1alpha1.TerraformRun)
		job         string
		now         time.Time
		wantRequeue time.Duration
		wantFailed  bool
		wantCond    string
		wantInMsg   string
	}{
		{name: "plan within its timeout", mutate: planning, job: planJob1, now: t0.Add(4 * time.Minute), wantRequeue: 6 * time.Minute},
		{name: "plan past its timeout", mutate: planning, job: planJob1, now: t0.Add(10 * time.Minute), wantFailed: true, wantCond: v1alpha1.ConditionPlanned, wantInMsg: "spec.timeouts.plan"},
		{name: "apply within its timeout", mutate: applying, job: applyJob1, now: t0.Add(23 * time.Minute), wantRequeue: 10 * time.Minute},
		{name: "apply past its timeout", mutate: applying, job: applyJob1, now: t0.Add(2 * time.Hour), wantFailed: true, wantCond: v1alpha1.ConditionApplied, wantInMsg: "timeout of 30m0s"},
		{name: "default timeout is 1h", mutate: func(r *v1alpha1.TerraformRun) {
			planning(r)
			r.Spec.Timeouts = v1alpha1.Timeouts{}
		}, job: planJob1, now: t0.Add(59 * time.Minute), wantRequeue: time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, newRun(tc.mutate))
			h.world.markStarted(tc.job)
			h.clock.SetTime(tc.now)
			d := h.mustSync()
			run := h.get()
			if d != tc.wantRequeue {
				t.Errorf("requeue = %v, want %v", d, tc.wantRequeue)
			}
			stops := h.world.stopCalls()
			if !tc.wantFailed {
				if len(stops) != 0 || h.occ.accepted != 0 {
					t.Errorf("stops %+v, %d writes within the timeout; want none", stops, h.occ.accepted)
				}
				return
			}
			if len(stops) != 1 || stops[0].name != tc.job || stops[0].grace != 7*time.Second {
				t.Errorf("stops = %+v, want one of %s with grace 7s", stops, tc.job)
			}
			if run.Status.Phase != v1alpha1.RunPhaseFailed || !strings.Contains(run.Status.Message, tc.wantInMsg) {
				t.Errorf("phase %q message %q, want Failed containing %q", run.Status.Phase, run.Status.Message, tc.wantInMsg)
			}
			expectCondition(t, run, tc.wantCond, metav1.ConditionFalse, v1alpha1.ReasonDeadlineExceeded)
			last := run.Status.Stages[len(run.Status.Stages)-1]
			if last.Reason != v1alpha1.ReasonDeadlineExceeded || last.CompletionTime == nil {
				t.Errorf("stage = %+v, want completed with reason DeadlineExceeded", last)
			}
			h.expectEvent("Warning DeadlineExceeded")
		})
	}
}

// TestSyncStartFailed: a stage that cannot start says why, in status, a
// condition and an Event; a reference that cannot work fails the run at once,
// anything else is retried until the stage's timeout.
func TestSyncStartFailed(t *testing.T) {
	t.Run("a missing Secret fails the run", func(t *testing.T) {
		h := newHarness(t, newRun())
		h.world.startErr = fmt.Errorf("execution x: %w", executor.InvalidReference(errors.New(`variable "password": secret "db" not found`)))
		h.mustSync()
		run := h.get()
		want := `The plan stage could not start: execution x: variable "password": secret "db" not found. Fix it, then create a new run.`
		if run.Status.Phase != v1alpha1.RunPhaseFailed || run.Status.Message != want || run.Status.CompletionTime == nil {
			t.Errorf("phase %q, message %q; want Failed with %q", run.Status.Phase, run.Status.Message, want)
		}
		expectCondition(t, run, v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonStartFailed)
		if last := run.Status.Stages[len(run.Status.Stages)-1]; last.Reason != v1alpha1.ReasonStartFailed || last.CompletionTime == nil {
			t.Errorf("stage = %+v, want completed with reason StartFailed", last)
		}
		h.expectEvent("Warning StartFailed The plan stage could not start")
	})

	t.Run("another error is shown and retried", func(t *testing.T) {
		h := newHarness(t, newRun())
		h.world.startErr = errors.New("etcd: request timed out")
		if _, err := h.sync(); err == nil {
			t.Fatal("sync succeeded; want the start error, so that the queue retries with backoff")
		}
		run := h.get()
		if run.Status.Phase != v1alpha1.RunPhasePlanning || run.Status.Message != "The plan stage could not start: etcd: request timed out" {
			t.Errorf("phase %q, message %q", run.Status.Phase, run.Status.Message)
		}
		expectCondition(t, run, v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonStartFailed)
		h.expectEvent("Warning StartFailed The plan stage could not start: etcd: request timed out; retrying.")

		// It starts after all: the message says so.
		h.world.mu.Lock()
		h.world.startErr = nil
		h.world.mu.Unlock()
		h.mustSync()
		run = h.get()
		if run.Status.Phase != v1alpha1.RunPhasePlanning || run.Status.Message != "Planning (attempt 1)." || h.world.realStarts(planJob1) != 1 {
			t.Errorf("after the retry: phase %q, message %q, %d starts", run.Status.Phase, run.Status.Message, h.world.realStarts(planJob1))
		}
		expectCondition(t, run, v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonPlanning)
	})

	t.Run("retries end with the stage's timeout", func(t *testing.T) {
		h := newHarness(t, newRun(planning))
		h.world.startErr = errors.New("connection refused")
		h.clock.SetTime(t0.Add(10 * time.Minute))
		h.mustSync()
		run := h.get()
		if run.Status.Phase != v1alpha1.RunPhaseFailed || !strings.Contains(run.Status.Message, "could not start: connection refused. It kept failing for the stage's timeout of 10m0s (spec.timeouts.plan).") {
			t.Errorf("phase %q, message %q", run.Status.Phase, run.Status.Message)
		}
		expectCondition(t, run, v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonDeadlineExceeded)
	})
}

// ---------------------------------------------------------------------------
// Case 6: cancel.

func TestSyncCancel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.TerraformRun)
		job    string
		cond   string
	}{
		{name: "plan", mutate: planning, job: planJob1, cond: v1alpha1.ConditionPlanned},
		{name: "apply", mutate: applying, job: applyJob1, cond: v1alpha1.ConditionApplied},
	} {
		t.Run(tc.name+"/stops at once", func(t *testing.T) {
			h := newHarness(t, newRun(tc.mutate, cancelRequested))
			h.world.markStarted(tc.job)
			if d := h.mustSync(); d != 0 {
				t.Errorf("requeue = %v, want 0", d)
			}
			if stops := h.world.stopCalls(); len(stops) != 1 || stops[0].name != tc.job || stops[0].grace != 7*time.Second {
				t.Errorf("stops = %+v, want one of %s with grace 7s", stops, tc.job)
			}
			run := h.get()
			if run.Status.Phase != v1alpha1.RunPhaseCanceled || run.Status.Message != "Canceled by bob: wrong workspace" {
				t.Errorf("phase %q message %q, want Canceled with the cancel message", run.Status.Phase, run.Status.Message)
			}
			expectCondition(t, run, tc.cond, metav1.ConditionFalse, v1alpha1.ReasonCanceled)
			last := run.Status.Stages[len(run.Status.Stages)-1]
			if last.Reason != v1alpha1.ReasonCanceled || last.CompletionTime == nil || last.ExitCode == nil || *last.ExitCode != 130 {
				t.Errorf("stage = %+v, want completed, Canceled, exit code 130", last)
			}
			if run.Status.CompletionTime == nil {
				t.Errorf("completionTime not set")
			}
			if h.applied.Load() != 0 {
				t.Errorf("OnApplied called for a canceled run")
			}
		})
		t.Run(tc.name+"/waits for the stage to stop", func(t *testing.T) {
			h := newHarness(t, newRun(tc.mutate, cancelRequested))
			h.world.stopEnds = false
			h.world.markStarted(tc.job)
			if d := h.mustSync(); d != time.Second {
				t.Errorf("requeue = %v, want 1s while the stage stops", d)
			}
			if run := h.get(); run.Status.Phase == v1alpha1.RunPhaseCanceled {
				t.Fatalf("canceled while the stage still runs")
			}
			h.world.script(tc.job, executor.Status{State: executor.StateFailed, ExitCode: ptr.To[int32](130)})
			if d := h.mustSync(); d != 0 {
				t.Errorf("requeue = %v, want 0", d)
			}
			if run := h.get(); run.Status.Phase != v1alpha1.RunPhaseCanceled || run.Status.Message != "Canceled by bob: wrong workspace" {
				t.Errorf("phase %q message %q, want Canceled", run.Status.Phase, run.Status.Message)
			}
			if stops := h.world.stopCalls(); len(stops) != 1 {
				t.Errorf("stops = %+v, want 1 (the stage had stopped by the second sync)", stops)
			}
		})
	}

	t.Run("a pending run ends without starting", func(t *testing.T) {
		h := newHarness(t, newRun(cancelRequested))
		if d := h.mustSync(); d != 0 {
			t.Errorf("requeue = %v, want 0", d)
		}
		run := h.get()
		if run.Status.Phase != v1alpha1.RunPhaseCanceled || run.Status.Message != "Canceled by bob: wrong workspace" || run.Status.CompletionTime == nil {
			t.Errorf("phase %q message %q completion %v, want Canceled with the cancel message", run.Status.Phase, run.Status.Message, run.Status.CompletionTime)
		}
		expectCondition(t, run, v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonCanceled)
		if len(run.Status.Stages) != 0 || h.world.calls(planJob1) != 0 {
			t.Errorf("stages %+v, plan Start calls %d; want none", run.Status.Stages, h.world.calls(planJob1))
		}
	})

	t.Run("a plan that succeeded before the cancel is not applied", func(t *testing.T) {
		h := newHarness(t, newRun(planning, withPlan, autoMode, cancelRequested))
		h.world.markStarted(planJob1)
		h.world.succeed(planJob1)
		h.mustSync()
		if run := h.get(); run.Status.Phase != v1alpha1.RunPhaseCanceled {
			t.Errorf("phase = %q, want Canceled", run.Status.Phase)
		}
		if h.world.calls(applyJob1) != 0 || len(h.world.stopCalls()) != 0 {
			t.Errorf("apply started or an ended plan stopped")
		}
	})

	t.Run("an apply that succeeded before the cancel is reported applied", func(t *testing.T) {
		// The apply ended with exit code 0 (the infrastructure changed) and
		// only then was a cancel requested: the run applied, and saying
		// Canceled would hide that, and skip publishing its outputs.
		h := newHarness(t, newRun(applying, cancelRequested))
		h.world.markStarted(applyJob1)
		h.world.succeed(applyJob1)
		h.mustSync()
		run := h.get()
		if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
			t.Errorf("phase = %q (%s), want Succeeded", run.Status.Phase, run.Status.Message)
		}
		expectCondition(t, run, v1alpha1.ConditionApplied, metav1.ConditionTrue, v1alpha1.ReasonApplied)
		if h.applied.Load() != 1 {
			t.Errorf("OnApplied called %d times, want 1", h.applied.Load())
		}
	})
}

// ---------------------------------------------------------------------------
// Case 7: executions lost with their executor.

func TestSyncExecutorLost(t *testing.T) {
	t.Run("plan is retried up to MaxPlanAttempts", func(t *testing.T) {
		h := newHarness(t, newRun(planning))
		h.world.markStarted(planJob1)
		for attempt := int32(1); attempt <= 3; attempt++ {
			job := fmt.Sprintf("%s-plan-%d", testName, attempt)
			h.world.lose(job)
			h.clock.Step(time.Minute)
			h.mustSync()
			run := h.get()
			plans := stagesOf(run, v1alpha1.StagePlan)
			lost := plans[attempt-1]
			if lost.Attempt != attempt || lost.Reason != v1alpha1.ReasonExecutorLost || lost.CompletionTime == nil {
				t.Errorf("attempt %d = %+v, want completed as ExecutorLost", attempt, lost)
			}
			if attempt < 3 {
				next := fmt.Sprintf("%s-plan-%d", testName, attempt+1)
				if run.Status.Phase != v1alpha1.RunPhasePlanning || len(plans) != int(attempt)+1 {
					t.Fatalf("after losing attempt %d: phase %q, plan stages %+v; want Planning with attempt %d", attempt, run.Status.Phase, plans, attempt+1)
				}
				if st := plans[attempt]; st.Attempt != attempt+1 || st.Job != next || st.CompletionTime != nil || !st.StartTime.Time.Equal(h.clock.Now()) {
					t.Errorf("new attempt = %+v, want %s recorded now", st, next)
				}
				if got := h.world.realStarts(next); got != 1 {
					t.Errorf("starts of %s = %d, want 1", next, got)
				}
				expectCondition(t, run, v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonPlanning)
				h.expectEvent(fmt.Sprintf("Warning ExecutorLost The plan stage attempt %d was lost", attempt))
				continue
			}
			if run.Status.Phase != v1alpha1.RunPhaseFailed || !strings.Contains(run.Status.Message, "No attempts are left") {
				t.Errorf("phase %q message %q, want Failed with no attempts left", run.Status.Phase, run.Status.Message)
			}
			if len(plans) != 3 {
				t.Errorf("plan stages = %+v, want 3", plans)
			}
			expectCondition(t, run, v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonExecutorLost)
		}
		if got := h.world.calls(testName + "-plan-4"); got != 0 {
			t.Errorf("attempt 4 started")
		}
	})

	t.Run("MaxPlanAttempts 1 does not retry", func(t *testing.T) {
		h := newHarness(t, newRun(planning), func(o *Options) { o.MaxPlanAttempts = 1 })
		h.world.markStarted(planJob1)
		h.world.lose(planJob1)
		h.mustSync()
		if run := h.get(); run.Status.Phase != v1alpha1.RunPhaseFailed || len(run.Status.Stages) != 1 {
			t.Errorf("phase %q stages %+v, want Failed with one attempt", run.Status.Phase, run.Status.Stages)
		}
	})

	t.Run("apply is never retried", func(t *testing.T) {
		h := newHarness(t, newRun(applying))
		h.world.markStarted(applyJob1)
		h.world.lose(applyJob1)
		for i := 0; i < 3; i++ {
			h.mustSync()
		}
		run := h.get()
		if run.Status.Phase != v1alpha1.RunPhaseFailed || !strings.Contains(run.Status.Message, "never re-applies") {
			t.Errorf("phase %q message %q, want Failed, never re-applied", run.Status.Phase, run.Status.Message)
		}
		expectCondition(t, run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonExecutorLost)
		applies := stagesOf(run, v1alpha1.StageApply)
		if len(applies) != 1 || applies[0].Reason != v1alpha1.ReasonExecutorLost {
			t.Errorf("apply stages = %+v, want the one lost attempt", applies)
		}
		if got := h.world.calls(applyJob1) + h.world.calls(testName+"-apply-2"); got != 0 {
			t.Errorf("%d apply Start calls after the loss, want 0", got)
		}
		if h.applied.Load() != 0 {
			t.Errorf("OnApplied called for a lost apply")
		}
	})

	t.Run("a forged apply Job is not trusted", func(t *testing.T) {
		// Someone else's Job sits where the apply's belongs (pkg/executor/job
		// reports it Forged): the run fails saying so, and nothing is
		// started or reported applied.
		h := newHarness(t, newRun(applying))
		h.world.markStarted(applyJob1)
		h.world.script(applyJob1, executor.Status{State: executor.StateUnknown, Reason: executor.ReasonForged, Message: "Job ns/x carries this run's labels but is not the one terrarun builds for it"})
		h.mustSync()
		run := h.get()
		if run.Status.Phase != v1alpha1.RunPhaseFailed || !strings.Contains(run.Status.Message, "cannot be trusted: Job ns/x carries") {
			t.Errorf("phase %q message %q, want Failed, naming the forged Job", run.Status.Phase, run.Status.Message)
		}
		expectCondition(t, run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonExecutorForged)
		if got := h.world.calls(applyJob1) + h.world.calls(testName+"-apply-2"); got != 0 {
			t.Errorf("%d apply Start calls, want 0", got)
		}
		if h.applied.Load() != 0 {
			t.Errorf("OnApplied called for a forged apply")
		}
	})

	t.Run("only NotStarted starts an unknown apply", func(t *testing.T) {
		// A backend that spelled its reason differently (a typo, another
		// case, none at all) must not get a lost apply started again: anything
		// but executor.ReasonNotStarted is treated as lost.
		for _, reason := range []string{executor.ReasonExecutorLost, "ExecutorLst", "executorlost", "NotStarted ", ""} {
			h := newHarness(t, newRun(applying))
			h.world.markStarted(applyJob1)
			h.world.script(applyJob1, executor.Status{State: executor.StateUnknown, Reason: reason})
			h.mustSync()
			run := h.get()
			if run.Status.Phase != v1alpha1.RunPhaseFailed {
				t.Errorf("reason %q: phase %q, want Failed", reason, run.Status.Phase)
			}
			if got := h.world.calls(applyJob1) + h.world.calls(testName+"-apply-2"); got != 0 {
				t.Errorf("reason %q: %d apply Start calls, want 0", reason, got)
			}
		}
	})

	t.Run("recorded but never started is started once", func(t *testing.T) {
		// A crash between recording the apply and starting it.
		h := newHarness(t, newRun(applying))
		h.mustSync()
		h.mustSync()
		if got := h.world.realStarts(applyJob1); got != 1 {
			t.Errorf("apply starts = %d, want 1", got)
		}
		if got := h.world.calls(applyJob1); got != 1 {
			t.Errorf("apply Start calls = %d, want 1 (the second sync sees it running)", got)
		}
		if run := h.get(); run.Status.Phase != v1alpha1.RunPhaseApplying || len(run.Status.Stages) != 2 {
			t.Errorf("phase %q stages %+v", run.Status.Phase, run.Status.Stages)
		}
	})

	t.Run("Applying with no apply recorded records attempt 1", func(t *testing.T) {
		h := newHarness(t, newRun(approved, func(r *v1alpha1.TerraformRun) { r.Status.Phase = v1alpha1.RunPhaseApplying }))
		h.mustSync()
		if applies := stagesOf(h.get(), v1alpha1.StageApply); len(applies) != 1 || applies[0].Attempt != 1 {
			t.Errorf("apply stages = %+v", applies)
		}
		if got := h.world.realStarts(applyJob1); got != 1 {
			t.Errorf("apply starts = %d, want 1", got)
		}
	})
}

// ---------------------------------------------------------------------------
// The end of an apply, and runs the controller leaves alone.

func TestSyncApplied(t *testing.T) {
	h := newHarness(t, newRun(applying))
	h.world.markStarted(applyJob1)
	h.world.succeed(applyJob1)
	failing := errors.New("secret exists and is not owned by this run")
	var fail atomic.Bool
	fail.Store(true)
	h.ctrl.opts.OnApplied = func(ctx context.Context, run *v1alpha1.TerraformRun) error {
		h.applied.Add(1)
		if fail.Load() {
			return failing
		}
		return nil
	}
	if _, err := h.sync(); !errors.Is(err, failing) {
		t.Fatalf("sync error = %v, want the OnApplied error (retried with backoff)", err)
	}
	if run := h.get(); run.Status.Phase != v1alpha1.RunPhaseApplying {
		t.Errorf("phase = %q after OnApplied failed, want Applying", run.Status.Phase)
	}
	fail.Store(false)
	h.mustSync()
	run := h.get()
	if run.Status.Phase != v1alpha1.RunPhaseSucceeded || run.Status.Message != "Apply complete: 2 added, 1 changed, 0 destroyed." {
		t.Errorf("phase %q message %q", run.Status.Phase, run.Status.Message)
	}
	expectCondition(t, run, v1alpha1.ConditionApplied, metav1.ConditionTrue, v1alpha1.ReasonApplied)
	// As a Job's: kubectl wait --for=condition=Complete, and Ready.
	expectCondition(t, run, v1alpha1.ConditionComplete, metav1.ConditionTrue, "Succeeded")
	expectCondition(t, run, v1alpha1.ConditionReady, metav1.ConditionTrue, "Succeeded")
	if meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionFailed) != nil {
		t.Errorf("a succeeded run has a Failed condition")
	}
	if h.applied.Load() != 2 {
		t.Errorf("OnApplied called %d times, want 2", h.applied.Load())
	}
	if got := h.world.realStarts(applyJob1); got != 1 {
		t.Errorf("apply starts = %d", got)
	}
}

// TestApplyFinalizerRidesOnStatusWrites: the finalizer that holds a run
// whose apply is in flight costs no write of its own: the status write that
// records the apply adds it, and the one that ends the run removes it. A run
// being deleted keeps it until its end is written, and loses it in a write
// after that, so that its end is seen before it goes.
func TestApplyFinalizerRidesOnStatusWrites(t *testing.T) {
	plainUpdates := func(h *harness) int {
		n := 0
		for _, a := range h.cs.Actions() {
			if u, ok := a.(k8stesting.UpdateAction); ok && u.GetSubresource() == "" {
				n++
			}
		}
		return n
	}
	h := newHarness(t, newRun(approved))
	h.mustSync()
	run := h.get()
	if run.Status.Phase != v1alpha1.RunPhaseApplying || !slices.Contains(run.Finalizers, applyFinalizer) {
		t.Fatalf("phase %q, finalizers %v: want Applying, held by %s", run.Status.Phase, run.Finalizers, applyFinalizer)
	}
	h.world.succeed(applyJob1)
	h.mustSync()
	run = h.get()
	if run.Status.Phase != v1alpha1.RunPhaseSucceeded || slices.Contains(run.Finalizers, applyFinalizer) {
		t.Fatalf("phase %q, finalizers %v: want Succeeded, not held", run.Status.Phase, run.Finalizers)
	}
	if n := plainUpdates(h); n != 0 {
		t.Errorf("%d writes of the run besides its status writes, want none", n)
	}

	h = newHarness(t, newRun(applying, func(r *v1alpha1.TerraformRun) {
		r.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
		r.Finalizers = []string{applyFinalizer}
	}))
	h.world.markStarted(applyJob1)
	h.world.succeed(applyJob1)
	h.mustSync()
	if run := h.get(); run.Status.Phase != v1alpha1.RunPhaseSucceeded || !slices.Contains(run.Finalizers, applyFinalizer) {
		t.Fatalf("being deleted: phase %q, finalizers %v: want Succeeded, still held", run.Status.Phase, run.Finalizers)
	}
	h.mustSync()
	if run := h.get(); slices.Contains(run.Finalizers, applyFinalizer) || plainUpdates(h) != 1 {
		t.Fatalf("being deleted, its end written: finalizers %v after %d writes, want released by one", run.Finalizers, plainUpdates(h))
	}
}

// deleting marks the run as being deleted, held by a finalizer.
func deleting(r *v1alpha1.TerraformRun) {
	r.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	r.Finalizers = []string{"example.com/hold"}
}

// TestSyncBeingDeleted: a run held by a finalizer while it is deleted starts
// no stage (neither its plan nor, even approved, its apply), and a cancel of
// its stage in flight works as for any run.
func TestSyncBeingDeleted(t *testing.T) {
	approved := func(r *v1alpha1.TerraformRun) {
		r.Status.Approval = &v1alpha1.ApprovalStatus{ApprovedBy: "carol", PlanDigest: r.Status.Plan.Digest}
	}
	for _, tc := range []struct {
		name   string
		mutate []func(*v1alpha1.TerraformRun)
		msg    string
	}{
		{name: "pending", msg: "The run is being deleted: its plan stage does not start."},
		{name: "awaiting approval", mutate: []func(*v1alpha1.TerraformRun){awaiting}, msg: "The run is being deleted: its apply stage does not start."},
		{name: "approved", mutate: []func(*v1alpha1.TerraformRun){awaiting, approved}, msg: "The run is being deleted: its apply stage does not start."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, newRun(append(tc.mutate, deleting)...))
			if d := h.mustSync(); d != 0 {
				t.Errorf("requeue = %v", d)
			}
			if started := h.world.startedExecutions(); len(started) != 0 {
				t.Errorf("started %+v, want nothing", started)
			}
			run := h.get()
			if run.Status.Phase != v1alpha1.RunPhaseCanceled || run.Status.Message != tc.msg {
				t.Errorf("phase %q message %q, want Canceled: %s", run.Status.Phase, run.Status.Message, tc.msg)
			}
			expectCondition(t, run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonCanceled)
		})
	}
	t.Run("applying, canceled", func(t *testing.T) {
		h := newHarness(t, newRun(applying, cancelRequested, deleting))
		h.world.markStarted(applyJob1)
		h.mustSync()
		if stops := h.world.stopCalls(); len(stops) != 1 || stops[0].name != applyJob1 {
			t.Errorf("stops = %+v, want the apply stopped", stops)
		}
		if run := h.get(); run.Status.Phase != v1alpha1.RunPhaseCanceled {
			t.Errorf("phase %q, want Canceled", run.Status.Phase)
		}
	})
}

func TestSyncLeavesAlone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.TerraformRun)
	}{
		{name: "succeeded", mutate: func(r *v1alpha1.TerraformRun) { applying(r); r.Status.Phase = v1alpha1.RunPhaseSucceeded }},
		{name: "failed", mutate: func(r *v1alpha1.TerraformRun) { r.Status.Phase = v1alpha1.RunPhaseFailed }},
		{name: "canceled", mutate: func(r *v1alpha1.TerraformRun) { r.Status.Phase = v1alpha1.RunPhaseCanceled }},
		{name: "discarded", mutate: func(r *v1alpha1.TerraformRun) { awaiting(r); r.Status.Phase = v1alpha1.RunPhaseDiscarded }},
		{name: "succeeded and being deleted", mutate: func(r *v1alpha1.TerraformRun) {
			applying(r)
			r.Status.Phase = v1alpha1.RunPhaseSucceeded
			deleting(r)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, newRun(tc.mutate))
			if d := h.mustSync(); d != 0 {
				t.Errorf("requeue = %v", d)
			}
			if h.occ.accepted != 0 || len(h.world.startedExecutions()) != 0 || len(h.world.stopCalls()) != 0 {
				t.Errorf("writes %d, starts %+v, stops %+v; want none", h.occ.accepted, h.world.startedExecutions(), h.world.stopCalls())
			}
		})
	}
	t.Run("missing and malformed keys", func(t *testing.T) {
		h := newHarness(t, newRun())
		for _, key := range []string{testNS + "/nope", "a/b/c"} {
			if d, err := h.ctrl.sync(h.ctx, key); d != 0 || err != nil {
				t.Errorf("sync(%q) = %v, %v", key, d, err)
			}
		}
	})
}

// ---------------------------------------------------------------------------
// The optimistic concurrency reactor itself, since the race tests rely on it.

func TestOptimisticConcurrencyReactor(t *testing.T) {
	cs := fake.NewSimpleClientset(newRun())
	addOptimisticConcurrency(cs)
	runs := cs.TerrarunV1alpha1().TerraformRuns(testNS)
	a, _ := runs.Get(t.Context(), testName, metav1.GetOptions{})
	b := a.DeepCopy()
	a.Status.Phase = v1alpha1.RunPhasePlanning
	updated, err := runs.UpdateStatus(t.Context(), a, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("first update: %v", err)
	}
	if updated.ResourceVersion != "2" {
		t.Fatalf("first update: resourceVersion %q, want 2", updated.ResourceVersion)
	}
	b.Status.Phase = v1alpha1.RunPhaseFailed
	if _, err := runs.UpdateStatus(t.Context(), b, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("stale update: %v, want a Conflict", err)
	}
	b.Labels = map[string]string{"x": "y"}
	if _, err := runs.Update(t.Context(), b, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("stale plain update: %v, want a Conflict", err)
	}
	b.ResourceVersion = "2"
	got, err := runs.Update(t.Context(), b, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("plain update: %v", err)
	}
	if got.Status.Phase != v1alpha1.RunPhasePlanning || got.Labels["x"] != "y" || got.ResourceVersion != "3" {
		t.Fatalf("plain update: %+v; want labels changed, status kept, resourceVersion 3", got)
	}
}

// ---------------------------------------------------------------------------
// Workers, informers and the executor's notifications, end to end.

// replica is one controller with its own informers, as one server replica.
type replica struct {
	ctrl   *Controller
	exec   *fakeExec
	cancel context.CancelFunc
	done   chan struct{}
}

func startReplica(t *testing.T, cs *fake.Clientset, exec *fakeExec, opts Options, workers int) *replica {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	factory := externalversions.NewSharedInformerFactory(cs, 0)
	c, err := New(cs, factory.Terrarun().V1alpha1().TerraformRuns(), exec, nil, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("cache of %v did not sync", typ)
		}
	}
	r := &replica{ctrl: c, exec: exec, cancel: cancel, done: make(chan struct{})}
	if workers > 0 {
		go func() {
			defer close(r.done)
			if err := c.Run(ctx, workers); err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
	} else {
		close(r.done)
	}
	t.Cleanup(func() { r.stop(factory) })
	return r
}

func (r *replica) stop(factory ...externalversions.SharedInformerFactory) {
	r.cancel()
	<-r.done
	for _, f := range factory {
		f.Shutdown()
	}
}

// waitCached waits until the replica's cache holds the stored run.
func (r *replica) waitCached(t *testing.T, cs *fake.Clientset) {
	t.Helper()
	want := getRun(t, cs).ResourceVersion
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		cached, err := r.ctrl.lister.TerraformRuns(testNS).Get(testName)
		return err == nil && cached.ResourceVersion == want, nil
	})
	if err != nil {
		t.Fatalf("the cache never reached resourceVersion %s: %v", want, err)
	}
}

func waitForRun(t *testing.T, cs *fake.Clientset, what string, cond func(*v1alpha1.TerraformRun) bool) *v1alpha1.TerraformRun {
	t.Helper()
	var last *v1alpha1.TerraformRun
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		last = getRun(t, cs)
		return cond(last), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; run status: %+v", what, err, last.Status)
	}
	return last
}

// updateStatus changes the stored run's status as another writer (the
// executor's plan upload, the approve subresource) would.
func updateStatus(t *testing.T, cs *fake.Clientset, change func(*v1alpha1.TerraformRun)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		run, err := cs.TerrarunV1alpha1().TerraformRuns(testNS).Get(t.Context(), testName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(run)
		_, err = cs.TerrarunV1alpha1().TerraformRuns(testNS).UpdateStatus(t.Context(), run, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("updating the status: %v", err)
	}
}

func TestRunWorkersDriveARunToSucceeded(t *testing.T) {
	cs := fake.NewSimpleClientset(newRun())
	addOptimisticConcurrency(cs)
	world := newExecWorld()
	var applied atomic.Int32
	r := startReplica(t, cs, &fakeExec{w: world}, Options{
		Clock: clocktesting.NewFakeClock(t0), Recorder: &record.FakeRecorder{},
		OnApplied: func(context.Context, *v1alpha1.TerraformRun) error { applied.Add(1); return nil },
	}, 2)

	waitForRun(t, cs, "Planning", func(run *v1alpha1.TerraformRun) bool { return run.Status.Phase == v1alpha1.RunPhasePlanning })
	if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return world.realStarts(planJob1) == 1, nil
	}); err != nil {
		t.Fatalf("the plan never started: %v", err)
	}

	// The executor uploads its plan and ends; it notifies the controller.
	updateStatus(t, cs, withPlan)
	world.succeed(planJob1)
	r.exec.changed(t, testNS, testName)
	waitForRun(t, cs, "AwaitingApproval", func(run *v1alpha1.TerraformRun) bool {
		return run.Status.Phase == v1alpha1.RunPhaseAwaitingApproval
	})
	if world.calls(applyJob1) != 0 {
		t.Fatalf("apply started before the approval")
	}

	// The approve subresource records an approval; the informer sees it.
	updateStatus(t, cs, func(run *v1alpha1.TerraformRun) {
		run.Status.Approval = &v1alpha1.ApprovalStatus{ApprovedBy: "alice", PlanDigest: run.Status.Plan.Digest}
	})
	waitForRun(t, cs, "Applying", func(run *v1alpha1.TerraformRun) bool { return run.Status.Phase == v1alpha1.RunPhaseApplying })
	if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return world.realStarts(applyJob1) == 1, nil
	}); err != nil {
		t.Fatalf("the apply never started: %v", err)
	}

	world.succeed(applyJob1)
	r.exec.changed(t, testNS, testName)
	run := waitForRun(t, cs, "Succeeded", func(run *v1alpha1.TerraformRun) bool { return run.Status.Phase == v1alpha1.RunPhaseSucceeded })
	expectCondition(t, run, v1alpha1.ConditionApplied, metav1.ConditionTrue, v1alpha1.ReasonApplied)
	if applied.Load() < 1 {
		t.Errorf("OnApplied never called")
	}
	if got := world.startsOf(v1alpha1.StageApply); len(got) != 1 || got[1] != 1 {
		t.Errorf("apply starts by attempt = %v, want {1:1}", got)
	}
	if got := world.startsOf(v1alpha1.StagePlan); len(got) != 1 || got[1] != 1 {
		t.Errorf("plan starts by attempt = %v, want {1:1}", got)
	}
}

// ---------------------------------------------------------------------------
// Case 8: the race. Several replicas, each with its own cache and executor
// instance over one store and one set of executions, reconcile one approved
// run at once, and one crashes and is replaced midway. The apply is recorded
// once, started once, and never attempted again.

// applyInvariants checks every accepted write: at most one apply stage,
// attempt 1, and once recorded never removed or renamed.
func applyInvariants(t *testing.T, o *occ) {
	o.onWrite = func(old, updated *v1alpha1.TerraformRun) {
		before, after := stagesOf(old, v1alpha1.StageApply), stagesOf(updated, v1alpha1.StageApply)
		if len(after) > 1 {
			t.Errorf("write of resourceVersion %s records %d apply attempts: %+v", updated.ResourceVersion, len(after), after)
		}
		for _, st := range after {
			if st.Attempt != 1 || st.Job != applyJob1 {
				t.Errorf("write of resourceVersion %s records apply %+v", updated.ResourceVersion, st)
			}
		}
		if len(before) > 0 && (len(after) == 0 || !after[0].StartTime.Equal(before[0].StartTime)) {
			t.Errorf("write of resourceVersion %s replaces the recorded apply %+v with %+v", updated.ResourceVersion, before, after)
		}
	}
}

// recordedBeforeStart checks that every Start is of an execution already
// recorded in the stored run.
func recordedBeforeStart(t *testing.T, cs *fake.Clientset, w *execWorld) {
	w.beforeStart = func(ex executor.Execution) {
		obj, err := cs.Tracker().Get(runsGVR, testNS, testName)
		if err != nil {
			t.Errorf("getting the run: %v", err)
			return
		}
		for _, st := range obj.(*v1alpha1.TerraformRun).Status.Stages {
			if st.Name == ex.Stage && st.Attempt == ex.Attempt && st.Job == execName(ex) {
				return
			}
		}
		t.Errorf("Start of %s before it was recorded in status", execName(ex))
	}
}

// hammer runs goroutines goroutines per replica, each calling sync iterations
// times. Conflicts are expected; any other error fails the test. at, when
// set, is called by the first goroutine of the first replica at iteration
// atIteration.
func hammer(t *testing.T, replicas []*replica, goroutines, iterations int, atIteration int, at func()) {
	var wg sync.WaitGroup
	for i, r := range replicas {
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; n < iterations; n++ {
					if i == 0 && g == 0 && n == atIteration && at != nil {
						at()
					}
					if _, err := r.ctrl.sync(t.Context(), testKey); err != nil && !apierrors.IsConflict(err) {
						t.Errorf("sync: %v", err)
					}
					runtime.Gosched()
				}
			}()
		}
	}
	wg.Wait()
}

func TestNoSecondApplyUnderRace(t *testing.T) {
	const iterations = 50
	opts := func() Options {
		return Options{Clock: clocktesting.NewFakeClock(t0.Add(5 * time.Minute)), Recorder: &record.FakeRecorder{}}
	}

	for round := 0; round < 8; round++ {
		t.Run(fmt.Sprintf("two replicas and a crash/%d", round), func(t *testing.T) {
			cs := fake.NewSimpleClientset(newRun(approved))
			o := addOptimisticConcurrency(cs)
			applyInvariants(t, o)
			world := newExecWorld()
			recordedBeforeStart(t, cs, world)

			a := startReplica(t, cs, &fakeExec{w: world}, opts(), 0)
			b := startReplica(t, cs, &fakeExec{w: world}, opts(), 0)

			// Both replicas race for the approved run.
			hammer(t, []*replica{a, b}, 2, iterations/2, -1, nil)
			if got := world.realStarts(applyJob1); got != 1 {
				t.Fatalf("apply starts after the first half = %d, want 1", got)
			}

			// A crashes: its cache and its executor instance are gone. A
			// fresh replica C takes over while B goes on, and midway the
			// apply ends.
			a.stop()
			c := startReplica(t, cs, &fakeExec{w: world}, opts(), 0)
			hammer(t, []*replica{b, c}, 2, iterations/2, iterations/4, func() { world.succeed(applyJob1) })

			// Settle: a last fresh replica, with the latest run in its cache,
			// finishes whatever is left.
			b.stop()
			c.stop()
			d := startReplica(t, cs, &fakeExec{w: world}, opts(), 0)
			for i := 0; i < 3; i++ {
				d.waitCached(t, cs)
				if _, err := d.ctrl.sync(t.Context(), testKey); err != nil {
					t.Fatalf("settling sync: %v", err)
				}
			}

			run := getRun(t, cs)
			if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
				t.Errorf("phase = %q (%s), want Succeeded", run.Status.Phase, run.Status.Message)
			}
			applies := stagesOf(run, v1alpha1.StageApply)
			if len(applies) != 1 || applies[0].Attempt != 1 || applies[0].Job != applyJob1 {
				t.Errorf("apply stages = %+v, want exactly attempt 1", applies)
			}
			if got := world.startsOf(v1alpha1.StageApply); len(got) != 1 || got[1] != 1 {
				t.Errorf("real apply starts by attempt = %v, want {1:1}", got)
			}
			if got := world.calls(testName + "-apply-2"); got != 0 {
				t.Errorf("apply attempt 2 Start calls = %d", got)
			}
			for _, ex := range world.startedExecutions() {
				if ex.PlanDigest != testDigest {
					t.Errorf("apply started with digest %q, want %q", ex.PlanDigest, testDigest)
				}
			}
			t.Logf("accepted writes %d, conflicts %d, apply Start calls %d", o.accepted, o.conflicts, world.calls(applyJob1))
		})
	}

	t.Run("restart after the apply was lost", func(t *testing.T) {
		cs := fake.NewSimpleClientset(newRun(approved))
		o := addOptimisticConcurrency(cs)
		applyInvariants(t, o)
		world := newExecWorld()
		recordedBeforeStart(t, cs, world)

		a := startReplica(t, cs, &fakeExec{w: world}, opts(), 0)
		if _, err := a.ctrl.sync(t.Context(), testKey); err != nil {
			t.Fatalf("sync: %v", err)
		}
		if got := world.realStarts(applyJob1); got != 1 {
			t.Fatalf("apply starts = %d, want 1", got)
		}
		if run := getRun(t, cs); run.Status.Phase != v1alpha1.RunPhaseApplying {
			t.Fatalf("phase = %q, want Applying", run.Status.Phase)
		}
		a.stop()

		// The server restarts: new replicas whose executors have no process
		// for the recorded apply report it lost.
		b := startReplica(t, cs, &fakeExec{w: world, lost: true}, opts(), 0)
		c := startReplica(t, cs, &fakeExec{w: world, lost: true}, opts(), 0)
		b.waitCached(t, cs)
		c.waitCached(t, cs)
		hammer(t, []*replica{b, c}, 2, iterations/2, -1, nil)

		run := getRun(t, cs)
		if run.Status.Phase != v1alpha1.RunPhaseFailed || !strings.Contains(run.Status.Message, "never re-applies") {
			t.Errorf("phase %q message %q, want Failed, never re-applied", run.Status.Phase, run.Status.Message)
		}
		expectCondition(t, run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonExecutorLost)
		if applies := stagesOf(run, v1alpha1.StageApply); len(applies) != 1 || applies[0].Reason != v1alpha1.ReasonExecutorLost {
			t.Errorf("apply stages = %+v, want the one lost attempt", applies)
		}
		if got := world.startsOf(v1alpha1.StageApply); len(got) != 1 || got[1] != 1 {
			t.Errorf("real apply starts by attempt = %v, want {1:1}", got)
		}
		if got := world.calls(applyJob1); got != 1 {
			t.Errorf("apply Start calls = %d, want only the first one", got)
		}
	})

	t.Run("crash between recording and starting", func(t *testing.T) {
		// The apply is recorded, but the replica that recorded it died
		// before Start: replicas that find it never started start it, and
		// the deterministic name makes it one execution.
		cs := fake.NewSimpleClientset(newRun(applying))
		o := addOptimisticConcurrency(cs)
		applyInvariants(t, o)
		world := newExecWorld()
		recordedBeforeStart(t, cs, world)
		b := startReplica(t, cs, &fakeExec{w: world}, opts(), 0)
		c := startReplica(t, cs, &fakeExec{w: world}, opts(), 0)
		hammer(t, []*replica{b, c}, 2, iterations/2, -1, nil)
		if got := world.startsOf(v1alpha1.StageApply); len(got) != 1 || got[1] != 1 {
			t.Errorf("real apply starts by attempt = %v, want {1:1}", got)
		}
		if applies := stagesOf(getRun(t, cs), v1alpha1.StageApply); len(applies) != 1 {
			t.Errorf("apply stages = %+v", applies)
		}
	})

	t.Run("a stale cache cannot record a second apply", func(t *testing.T) {
		// Deterministic: B's cache is stuck on the approved run while A has
		// recorded, started and finished the apply.
		run := newRun(approved)
		cs := fake.NewSimpleClientset(run)
		o := addOptimisticConcurrency(cs)
		applyInvariants(t, o)
		world := newExecWorld()
		a, aCache := newManualController(t, cs, &fakeExec{w: world}, opts())
		b, bCache := newManualController(t, cs, &fakeExec{w: world}, opts())
		if err := bCache.Add(run.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if err := aCache.Update(getRun(t, cs)); err != nil {
				t.Fatal(err)
			}
			if _, err := a.sync(t.Context(), testKey); err != nil {
				t.Fatalf("A sync: %v", err)
			}
			if _, err := b.sync(t.Context(), testKey); !apierrors.IsConflict(err) {
				t.Fatalf("stale B sync: %v, want a Conflict", err)
			}
			world.succeed(applyJob1)
		}
		final := getRun(t, cs)
		if final.Status.Phase != v1alpha1.RunPhaseSucceeded {
			t.Errorf("phase = %q, want Succeeded", final.Status.Phase)
		}
		if got := world.calls(applyJob1); got != 1 {
			t.Errorf("apply Start calls = %d, want 1 (B never reached Start)", got)
		}
		if applies := stagesOf(final, v1alpha1.StageApply); len(applies) != 1 {
			t.Errorf("apply stages = %+v", applies)
		}
	})
}

// TestSyncStageHeldBeforeStart: a stage whose pod cannot start (a missing
// Secret) is reported in status.message, a condition and an Event within
// one sync, looked at again within seconds, written once while nothing
// changes, and failed at its timeout.
func TestSyncStageHeldBeforeStart(t *testing.T) {
	h := newHarness(t, newRun(planning))
	h.world.script(planJob1, executor.Status{State: executor.StateRunning, Reason: "CreateContainerConfigError", Message: `secret "db" not found`})
	if d := h.mustSync(); d != waitingRecheck {
		t.Errorf("requeue = %v, want %v", d, waitingRecheck)
	}
	run := h.get()
	want := `The plan stage cannot start: CreateContainerConfigError: secret "db" not found; it is retried until its timeout of 10m0s (spec.timeouts.plan) runs out.`
	if run.Status.Phase != v1alpha1.RunPhasePlanning || run.Status.Message != want {
		t.Errorf("phase %q message %q, want Planning: %s", run.Status.Phase, run.Status.Message, want)
	}
	expectCondition(t, run, v1alpha1.ConditionPlanned, metav1.ConditionUnknown, v1alpha1.ReasonStartFailed)
	h.expectEvent("Warning StartFailed The plan stage cannot start")

	writes := h.occ.accepted
	h.mustSync()
	if h.occ.accepted != writes {
		t.Errorf("a second sync with nothing new wrote status %d times", h.occ.accepted-writes)
	}

	h.clock.Step(time.Hour)
	h.mustSync()
	if run := h.get(); run.Status.Phase != v1alpha1.RunPhaseFailed || !strings.Contains(run.Status.Message, "exceeded its timeout of 10m0s") {
		t.Errorf("after the timeout: phase %q message %q, want Failed", run.Status.Phase, run.Status.Message)
	}
}

// TestAutoApplyCarriedByThePlanExecution: the plan execution of an
// automatically approved run goes on to apply (runrules.CarriesApply).
// Once its plan is recorded, the controller approves it and records the
// apply stage under the plan execution's name with the plan stage's attempt
// as its carrier, starts nothing, and ends the
// run when that execution ends. The plan's log is the execution's to end
// (after its plan is recorded); the controller closes it with the apply's,
// whether the execution ended it or was lost first. A manually approved run's
// plan stage ends only with its execution.
func TestAutoApplyCarriedByThePlanExecution(t *testing.T) {
	for _, tc := range []struct {
		name      string
		end       func(w *execWorld)
		wantPhase v1alpha1.RunPhase
		wantApply string // reason of Applied
	}{
		{"applied", func(w *execWorld) { w.succeed(planJob1) }, v1alpha1.RunPhaseSucceeded, v1alpha1.ReasonApplied},
		{"apply failed", func(w *execWorld) {
			w.script(planJob1, executor.Status{State: executor.StateFailed, Reason: executor.ReasonError, ExitCode: ptr.To[int32](1), Message: "Error: boom"})
		}, v1alpha1.RunPhaseFailed, v1alpha1.ReasonApplyFailed},
		{"lost while applying", func(w *execWorld) { w.lose(planJob1) }, v1alpha1.RunPhaseFailed, v1alpha1.ReasonExecutorLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, newRun(planning, withPlan, autoMode))
			h.world.markStarted(planJob1)
			h.clock.SetTime(t0.Add(time.Minute))

			h.mustSync()
			run := h.get()
			if run.Status.Phase != v1alpha1.RunPhaseApplying {
				t.Fatalf("phase = %s (%s), want Applying", run.Status.Phase, run.Status.Message)
			}
			expectCondition(t, run, v1alpha1.ConditionApproved, metav1.ConditionTrue, v1alpha1.ReasonAutoApproved)
			plan, applies := stagesOf(run, v1alpha1.StagePlan), stagesOf(run, v1alpha1.StageApply)
			if len(plan) != 1 || plan[0].CompletionTime == nil || plan[0].Reason != executor.ReasonCompleted {
				t.Errorf("plan stage = %+v, want it completed", plan)
			}
			if len(applies) != 1 || applies[0].Job != planJob1 || applies[0].CarrierAttempt != plan[0].Attempt {
				t.Fatalf("apply stages = %+v, want attempt 1 carried by %s (plan attempt %d)", applies, planJob1, plan[0].Attempt)
			}
			if closed := h.logs.list(); len(closed) != 0 {
				t.Errorf("closed logs %v while the plan execution runs on, want none", closed)
			}
			h.mustSync() // still running: nothing changes, nothing starts
			if got := h.get().Status.Phase; got != v1alpha1.RunPhaseApplying || h.world.calls(applyJob1) != 0 || h.world.realStarts(planJob1) != 1 {
				t.Fatalf("phase %s, apply start calls %d, plan starts %d", got, h.world.calls(applyJob1), h.world.realStarts(planJob1))
			}

			tc.end(h.world)
			h.mustSync()
			run = h.get()
			if run.Status.Phase != tc.wantPhase {
				t.Fatalf("phase = %s (%s), want %s", run.Status.Phase, run.Status.Message, tc.wantPhase)
			}
			c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionApplied)
			if c == nil || c.Reason != tc.wantApply {
				t.Errorf("Applied = %+v, want reason %s", c, tc.wantApply)
			}
			if h.world.calls(applyJob1) != 0 || len(stagesOf(run, v1alpha1.StageApply)) != 1 {
				t.Errorf("an apply execution was started (%d calls) or recorded again: %+v", h.world.calls(applyJob1), run.Status.Stages)
			}
			if closed := h.logs.list(); !slices.Equal(closed, []string{"apply/1", "plan/1"}) {
				t.Errorf("closed logs %v, want the apply's and the carrier plan's", closed)
			}
		})
	}

	t.Run("a manually approved run waits for its plan execution to end", func(t *testing.T) {
		h := newHarness(t, newRun(planning, withPlan))
		h.world.markStarted(planJob1)
		h.mustSync()
		if run := h.get(); run.Status.Phase != v1alpha1.RunPhasePlanning || stagesOf(run, v1alpha1.StagePlan)[0].CompletionTime != nil {
			t.Errorf("phase %s, stages %+v: the plan stage ended before its execution", run.Status.Phase, run.Status.Stages)
		}
	})
}

// TestStageSlots: with a bound on concurrent stages, a run waits in phase
// Queued with its position, runs start first in, first out, and a waiting
// run starts once a slot is free; per namespace likewise.
func TestStageSlots(t *testing.T) {
	other := func(ns, name string, created time.Time, phase v1alpha1.RunPhase) *v1alpha1.TerraformRun {
		r := newRun(func(r *v1alpha1.TerraformRun) {
			r.Namespace, r.Name, r.UID = ns, name, types.UID("uid-"+ns+"-"+name)
			r.CreationTimestamp = metav1.NewTime(created)
			r.Status.Phase = phase
			r.Spec.Workspace = "ws-" + name // a state of its own
		})
		return r
	}
	limits := func(max, perNS int) harnessOption {
		return func(o *Options) { o.MaxConcurrentStages, o.MaxConcurrentStagesPerNamespace = max, perNS }
	}

	t.Run("queued while the slot is taken, started once it is free", func(t *testing.T) {
		h := newHarness(t, newRun(), limits(1, 0))
		busy := other(testNS, "busy", t0.Add(-time.Hour), v1alpha1.RunPhasePlanning)
		h.add(busy)
		if d := h.mustSync(); d != queuedRecheck {
			t.Errorf("requeue = %v, want %v", d, queuedRecheck)
		}
		run := h.get()
		if run.Status.Phase != v1alpha1.RunPhaseQueued || !strings.Contains(run.Status.Message, "Queued at position 1") || !strings.Contains(run.Status.Message, "--max-concurrent-stages") {
			t.Fatalf("phase %s: %q", run.Status.Phase, run.Status.Message)
		}
		expectCondition(t, run, v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonQueued)
		h.expectEvent("Normal Queued")
		if len(h.world.startedExecutions()) != 0 {
			t.Fatal("a stage started beyond the bound")
		}
		// Unchanged, it is not written again.
		h.expectNotRewritten("an unchanged queued run")
		h.endRun(busy)
		if run := h.get(); run.Status.Phase != v1alpha1.RunPhasePlanning || h.world.realStarts(planJob1) != 1 {
			t.Fatalf("after the slot was freed: %s, %d starts", run.Status.Phase, h.world.realStarts(planJob1))
		}
	})

	t.Run("first in, first out", func(t *testing.T) {
		h := newHarness(t, newRun(), limits(1, 0))
		h.add(other(testNS, "earlier", t0.Add(-time.Minute), v1alpha1.RunPhaseQueued),
			other("elsewhere", "earliest", t0.Add(-time.Hour), v1alpha1.RunPhasePending),
			other(testNS, "later", t0.Add(time.Minute), v1alpha1.RunPhasePending))
		h.mustSync()
		if run := h.get(); run.Status.Phase != v1alpha1.RunPhaseQueued || !strings.Contains(run.Status.Message, "position 3") {
			t.Fatalf("with two earlier runs waiting: %s %q", run.Status.Phase, run.Status.Message)
		}
	})

	t.Run("per namespace", func(t *testing.T) {
		h := newHarness(t, newRun(), limits(0, 1))
		h.add(other("elsewhere", "busy", t0.Add(-time.Hour), v1alpha1.RunPhaseApplying))
		h.mustSync()
		if run := h.get(); run.Status.Phase != v1alpha1.RunPhasePlanning {
			t.Fatalf("another namespace's stage held this one back: %s %q", run.Status.Phase, run.Status.Message)
		}

		h = newHarness(t, newRun(), limits(0, 1))
		h.add(other(testNS, "busy", t0.Add(-time.Hour), v1alpha1.RunPhaseApplying))
		h.mustSync()
		if run := h.get(); run.Status.Phase != v1alpha1.RunPhaseQueued || !strings.Contains(run.Status.Message, "1 stage per namespace") {
			t.Fatalf("beyond the namespace's bound: %s %q", run.Status.Phase, run.Status.Message)
		}
	})

	t.Run("a run waiting only for its run tasks holds no slot", func(t *testing.T) {
		// An applied run whose PostApply task has not answered, and a
		// speculative plan whose PostPlan task has not: their stages have
		// ended; a late task holds their state, not another tenant's slot.
		applied := other("elsewhere", "applied", t0.Add(-time.Hour), v1alpha1.RunPhaseApplying)
		applied.Status.Stages = []v1alpha1.StageStatus{{Name: v1alpha1.StageApply, Attempt: 1, CompletionTime: &metav1.Time{Time: t0}}}
		applied.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionApplied, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonApplied}}
		speculative := other("elsewhere", "speculative", t0.Add(-time.Hour), v1alpha1.RunPhasePlanning)
		speculative.Spec.Operation = v1alpha1.OperationPlan
		speculative.Status.Plan = &v1alpha1.PlanSummary{Digest: "sha256:" + strings.Repeat("a", 64)}
		speculative.Status.Stages = []v1alpha1.StageStatus{{Name: v1alpha1.StagePlan, Attempt: 1, CompletionTime: &metav1.Time{Time: t0}}}
		for _, waiting := range []*v1alpha1.TerraformRun{applied, speculative} {
			h := newHarness(t, newRun(), limits(1, 1))
			h.add(waiting)
			h.mustSync()
			if run := h.get(); run.Status.Phase != v1alpha1.RunPhasePlanning {
				t.Fatalf("%s, waiting for its run tasks, held the only slot: %s %q", waiting.Name, run.Status.Phase, run.Status.Message)
			}
		}
	})

	t.Run("canceled while queued", func(t *testing.T) {
		h := newHarness(t, newRun(func(r *v1alpha1.TerraformRun) { r.Status.Phase = v1alpha1.RunPhaseQueued }, cancelRequested), limits(1, 0))
		h.add(other(testNS, "busy", t0.Add(-time.Hour), v1alpha1.RunPhasePlanning))
		h.mustSync()
		if run := h.get(); run.Status.Phase != v1alpha1.RunPhaseCanceled {
			t.Fatalf("a canceled queued run: %s", run.Status.Phase)
		}
	})

	t.Run("unbounded", func(t *testing.T) {
		h := newHarness(t, newRun())
		h.add(other(testNS, "busy", t0.Add(-time.Hour), v1alpha1.RunPhasePlanning))
		h.mustSync()
		if run := h.get(); run.Status.Phase != v1alpha1.RunPhasePlanning {
			t.Fatalf("without a bound: %s", run.Status.Phase)
		}
	})
}

// TestAutoPlanEndedBeforeItsApply: the plan execution of an automatically
// approved run ends (lost, failed) after recording its plan and before it is
// granted the apply: it applied nothing, so the plan is applied by a stage of
// its own, started once.
func TestAutoPlanEndedBeforeItsApply(t *testing.T) {
	for name, end := range map[string]func(w *execWorld){
		"lost": func(w *execWorld) { w.lose(planJob1) },
		"failed": func(w *execWorld) {
			w.script(planJob1, executor.Status{State: executor.StateFailed, Reason: executor.ReasonError, ExitCode: ptr.To[int32](1)})
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, newRun(planning, withPlan, autoMode))
			h.world.markStarted(planJob1)
			end(h.world)
			h.mustSync()
			run := h.get()
			applies := stagesOf(run, v1alpha1.StageApply)
			if run.Status.Phase != v1alpha1.RunPhaseApplying || len(applies) != 1 || applies[0].Job != applyJob1 || h.world.realStarts(applyJob1) != 1 {
				t.Fatalf("phase %s, apply stages %+v, %d starts: want an apply stage of its own, started once", run.Status.Phase, applies, h.world.realStarts(applyJob1))
			}
			expectCondition(t, run, v1alpha1.ConditionApproved, metav1.ConditionTrue, v1alpha1.ReasonAutoApproved)
		})
	}
}

// TestStateTurns: runs on one Terraform state take turns: a plan waits for a
// stage in flight on its state, an approved plan waiting to apply, and
// earlier runs; an approved apply waits for a stage in flight; and an
// approved plan that another run's apply made stale is discarded, never
// applied.
func TestStateTurns(t *testing.T) {
	other := func(name string, created time.Time, mutate ...func(*v1alpha1.TerraformRun)) *v1alpha1.TerraformRun {
		return newRun(append([]func(*v1alpha1.TerraformRun){func(r *v1alpha1.TerraformRun) {
			r.Name, r.UID = name, types.UID("uid-"+name)
			r.CreationTimestamp = metav1.NewTime(created)
		}}, mutate...)...)
	}
	phase := func(p v1alpha1.RunPhase) func(*v1alpha1.TerraformRun) {
		return func(r *v1alpha1.TerraformRun) { r.Status.Phase = p }
	}
	expectWaiting := func(t *testing.T, h *harness, want v1alpha1.RunPhase, holder string) {
		t.Helper()
		run := h.get()
		if run.Status.Phase != want || !strings.Contains(run.Status.Message, "run "+holder) || !strings.Contains(run.Status.Message, "workspace default of the default backend") {
			t.Fatalf("phase %s, message %q: want %s waiting for %s", run.Status.Phase, run.Status.Message, want, holder)
		}
		if n := len(h.world.startedExecutions()); n != 0 {
			t.Fatalf("%d executions started while the state was held", n)
		}
	}

	t.Run("a plan waits for a stage on its state, and starts when it ends", func(t *testing.T) {
		h := newHarness(t, newRun())
		busy := other("busy", t0.Add(-time.Hour), planning)
		h.add(busy)
		if d := h.mustSync(); d != queuedRecheck {
			t.Errorf("requeue = %v, want %v", d, queuedRecheck)
		}
		expectWaiting(t, h, v1alpha1.RunPhaseQueued, "busy is planning on it")
		expectCondition(t, h.get(), v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonWaitingForState)
		h.expectEvent("Normal WaitingForState")
		if c := meta.FindStatusCondition(h.get().Status.Conditions, v1alpha1.ConditionPlanned); c == nil || c.Message != h.get().Status.Message {
			t.Errorf("the Planned condition %+v does not say what status.message says", c)
		}
		h.expectNotRewritten("an unchanged waiting run")
		h.endRun(busy)
		if run := h.get(); run.Status.Phase != v1alpha1.RunPhasePlanning || h.world.realStarts(planJob1) != 1 {
			t.Fatalf("after the state was freed: %s, %d starts", run.Status.Phase, h.world.realStarts(planJob1))
		}
	})

	t.Run("other states do not hold it", func(t *testing.T) {
		h := newHarness(t, newRun())
		h.add(
			other("ws", t0.Add(-time.Hour), planning, func(r *v1alpha1.TerraformRun) { r.Spec.Workspace = "staging" }),
			other("backend", t0.Add(-time.Hour), planning, func(r *v1alpha1.TerraformRun) {
				r.Spec.Backend = &v1alpha1.Backend{Type: "s3", Config: map[string]string{"bucket": "b", "key": "k"}}
			}),
			other("unapproved", t0.Add(-time.Hour), awaiting),
			other("done", t0.Add(-time.Hour), applying, phase(v1alpha1.RunPhaseSucceeded)),
			other("later", t0.Add(time.Hour)),
		)
		elsewhere := other("ns", t0.Add(-time.Hour), planning)
		elsewhere.Namespace = "elsewhere"
		h.add(elsewhere)
		h.mustSync()
		if run := h.get(); run.Status.Phase != v1alpha1.RunPhasePlanning {
			t.Fatalf("held back by runs on other states, or not holding it: %s %q", run.Status.Phase, run.Status.Message)
		}
	})

	t.Run("earlier runs and approved plans go first", func(t *testing.T) {
		h := newHarness(t, newRun())
		h.add(other("earlier", t0.Add(-time.Minute), phase(v1alpha1.RunPhaseQueued)))
		h.mustSync()
		expectWaiting(t, h, v1alpha1.RunPhaseQueued, "earlier, created earlier")

		h = newHarness(t, newRun())
		h.add(other("approved", t0.Add(-time.Hour), approved))
		h.mustSync()
		expectWaiting(t, h, v1alpha1.RunPhaseQueued, "approved's approved plan applies first")
	})

	t.Run("an approved apply waits for a stage in flight", func(t *testing.T) {
		h := newHarness(t, newRun(approved))
		busy := other("speculative", t0.Add(time.Hour), planning)
		h.add(busy)
		h.mustSync()
		expectWaiting(t, h, v1alpha1.RunPhaseAwaitingApproval, "speculative is planning on it")
		expectCondition(t, h.get(), v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonWaitingForState)

		h.endRun(busy)
		if run := h.get(); run.Status.Phase != v1alpha1.RunPhaseApplying || h.world.realStarts(applyJob1) != 1 {
			t.Fatalf("after the state was freed: %s, %d apply starts", run.Status.Phase, h.world.realStarts(applyJob1))
		}
	})

	t.Run("an approved plan made stale by another apply is discarded", func(t *testing.T) {
		h := newHarness(t, newRun(approved))
		h.add(other("sneaky", t0.Add(time.Hour), applying, phase(v1alpha1.RunPhaseSucceeded), func(r *v1alpha1.TerraformRun) {
			r.Status.Stages = []v1alpha1.StageStatus{stageAt(v1alpha1.StagePlan, 1, t0.Add(time.Minute)), stageAt(v1alpha1.StageApply, 1, t0.Add(90*time.Second))}
		}))
		h.mustSync()
		run := h.get()
		if run.Status.Phase != v1alpha1.RunPhaseDiscarded || !strings.Contains(run.Status.Message, "run sneaky applied") || h.world.realStarts(applyJob1) != 0 {
			t.Fatalf("phase %s %q, %d apply starts: want Discarded, never applied", run.Status.Phase, run.Status.Message, h.world.realStarts(applyJob1))
		}
		expectCondition(t, run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonStalePlan)

		// An apply that started before this plan, or ended in the second
		// it started (the times' resolution), did not make it stale.
		for name, apply := range map[string]v1alpha1.StageStatus{
			"before":      stageAt(v1alpha1.StageApply, 1, t0.Add(-time.Minute)),
			"same second": completed(stageAt(v1alpha1.StageApply, 1, t0), t0),
		} {
			h = newHarness(t, newRun(approved))
			h.add(other(strings.ReplaceAll(name, " ", "-"), t0.Add(-time.Hour), applying, phase(v1alpha1.RunPhaseSucceeded), func(r *v1alpha1.TerraformRun) {
				r.Status.Stages = []v1alpha1.StageStatus{apply}
			}))
			h.mustSync()
			if run := h.get(); run.Status.Phase != v1alpha1.RunPhaseApplying {
				t.Fatalf("an apply %s the plan: %s %q", name, run.Status.Phase, run.Status.Message)
			}
		}
	})
}
