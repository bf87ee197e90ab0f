// Package terraformrun is the run controller: it drives every TerraformRun
// through Pending → Planning → AwaitingApproval → Applying → Succeeded (or
// Failed, Canceled, Discarded), starting one execution per stage through an
// executor.Executor. It is the only writer of a run's phase: the approve,
// discard and cancel subresources record what a user asked for
// (status.approval and the DiscardRequested and CancelRequested conditions),
// the executors' uploads record status.plan and status.outputs, and the
// controller acts on them. It follows client-go's informer and rate-limited
// workqueue pattern: it reacts to changes of runs and of executions, and never
// polls.
package terraformrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/pkg/controller/reconcile"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
	informers "github.com/terrarun/terrarun/pkg/generated/informers/externalversions/terrarun/v1alpha1"
	listers "github.com/terrarun/terrarun/pkg/generated/listers/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/metrics"
	"github.com/terrarun/terrarun/pkg/runrules"
	"github.com/terrarun/terrarun/pkg/stage"
)

// Options configure a Controller.
type Options struct {
	// MaxPlanAttempts bounds retries of a plan stage lost with its executor.
	// An apply is never retried.
	MaxPlanAttempts int32
	// CancelGrace is how long a canceled or timed-out stage may take to stop
	// after SIGINT before it is killed.
	CancelGrace time.Duration
	// Recorder records Events on runs; nil records none.
	Recorder record.EventRecorder
	// OnApplied, when set, is called after a run has applied, for example to
	// publish its outputs to the Secret named by spec.outputsSecret.
	OnApplied func(ctx context.Context, run *v1alpha1.TerraformRun) error
	// Clock is the controller's clock; nil is the real clock.
	Clock clock.Clock
	// MaxConcurrentStages bounds the stages that run at once, and
	// MaxConcurrentStagesPerNamespace those of one namespace; runs wait in
	// phase Queued for a slot, first in first out. 0 is no bound.
	MaxConcurrentStages             int
	MaxConcurrentStagesPerNamespace int
	// Tasks calls the namespaces' run tasks; nil calls none.
	Tasks *Tasks
	// Sources reads the Flux sources that runs name; nil (standalone
	// mode) fails a run that names one.
	Sources Sources
}

// Controller reconciles TerraformRuns.
type Controller struct {
	client  versioned.Interface
	lister  listers.TerraformRunLister
	indexer cache.Indexer
	// synced are the informers a run waits for: runs and run tasks.
	synced []cache.InformerSynced
	// seen is the resourceVersion of the last change of runs the informer
	// received (observedRevision).
	seen      func() string
	queue     workqueue.TypedRateLimitingInterface[string]
	exec      executor.Executor
	artifacts Artifacts
	opts      Options
	slots     slots
	tokens    taskTokens
}

// New returns a controller for the runs of informer.
func New(client versioned.Interface, informer informers.TerraformRunInformer, exec executor.Executor, store Artifacts, opts Options) (*Controller, error) {
	if opts.MaxPlanAttempts <= 0 {
		opts.MaxPlanAttempts = 3
	}
	if opts.CancelGrace <= 0 {
		opts.CancelGrace = 20 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Recorder == nil {
		opts.Recorder = &record.FakeRecorder{}
	}
	c := &Controller{
		client:    client,
		lister:    informer.Lister(),
		indexer:   informer.Informer().GetIndexer(),
		synced:    []cache.InformerSynced{informer.Informer().HasSynced},
		seen:      informer.Informer().LastSyncResourceVersion,
		queue:     workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "terraformruns"}),
		exec:      exec,
		artifacts: store,
		opts:      opts,
		slots:     slots{admitted: map[string]bool{}, written: map[string]time.Time{}},
	}
	if t := opts.Tasks; t != nil && t.Informer != nil {
		// Registered before the factory starts; a run planned before the
		// tasks are known would skip them.
		c.synced = append(c.synced, t.Informer.Informer().HasSynced)
	}
	if err := informer.Informer().AddIndexers(runrules.StateIndexers); err != nil {
		return nil, err
	}
	_, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueue,
		UpdateFunc: func(old, obj interface{}) {
			c.enqueue(obj)
			o, n := old.(*v1alpha1.TerraformRun), obj.(*v1alpha1.TerraformRun)
			if holdsSlot(o) && !holdsSlot(n) {
				c.released()
			}
			if runrules.Phase(o) == runrules.Phase(n) && (o.Status.Approval == nil) == (n.Status.Approval == nil) {
				return
			}
			c.forget(n, false)
			c.stateFreed(n)
		},
		DeleteFunc: func(obj interface{}) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			run, ok := obj.(*v1alpha1.TerraformRun)
			if !ok {
				return
			}
			c.forget(run, true)
			if holdsSlot(run) {
				c.released()
			}
			c.stateFreed(run)
		},
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Controller) enqueue(obj interface{}) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// notify enqueues a run whose execution changed: the executor.Notifier that
// Run hands to the executor.
func (c *Controller) notify(namespace, name string) {
	c.queue.Add(namespace + "/" + name)
}

// Run watches the executor's executions and processes runs with workers
// goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting the run controller")
	go func() {
		if err := c.exec.Run(ctx, c.notify); err != nil {
			logger.Error(err, "Watching executions; runs are reconciled only when they change")
		}
	}()
	if !cache.WaitForNamedCacheSync("terraformruns", ctx.Done(), c.synced...) {
		return fmt.Errorf("the terraformruns cache did not sync")
	}
	reconcile.Start(ctx, c.queue, workers, c.sync, "Reconciling run", "run")
	<-ctx.Done()
	logger.Info("Stopping the run controller")
	return nil
}

func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	cached, err := c.lister.TerraformRuns(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	// A run being deleted (held by a finalizer) still finishes the stage in
	// flight, which may be canceled, but starts no other.
	run := cached.DeepCopy()
	if slices.Contains(run.Finalizers, applyFinalizer) && runrules.Phase(run) != v1alpha1.RunPhaseApplying {
		// Its apply has ended (and the run is being deleted, or its end
		// was written by an older server): a delete need not wait any
		// more.
		return 0, c.removeApplyFinalizer(ctx, run)
	}
	if run.DeletionTimestamp != nil && runrules.Phase(run) == v1alpha1.RunPhaseApplying && !strings.HasPrefix(run.Status.Message, beingDeleted) {
		// Said, and then the apply goes on as before (or is canceled).
		run.Status.Message = beingDeleted + run.Status.Message
		updated, err := c.client.TerrarunV1alpha1().TerraformRuns(run.Namespace).UpdateStatus(ctx, run, metav1.UpdateOptions{})
		if err != nil {
			return 0, err
		}
		c.opts.Recorder.Event(updated, "Normal", "Deleting", "The run was deleted while it applies: it goes once its apply ends; cancel it to interrupt the apply.")
		run = updated
	}
	switch run.Status.Phase {
	case "", v1alpha1.RunPhasePending, v1alpha1.RunPhaseQueued:
		if cond := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionCancelRequested); cond != nil && cond.Status == metav1.ConditionTrue {
			// Canceled before any stage started.
			return 0, c.endBeforePlan(ctx, run, v1alpha1.RunPhaseCanceled, v1alpha1.ReasonCanceled, cond.Message)
		}
		if run.DeletionTimestamp == nil {
			if run.Status.Phase == "" {
				run.Status.Phase = v1alpha1.RunPhasePending
			}
			if stop, wait, err := c.gateTasks(ctx, run, v1alpha1.RunTaskPrePlan); stop {
				return wait, err
			}
			if wait, ok, err := c.pinSource(ctx, run); !ok {
				return wait, err
			}
			admitted, ahead, holder, err := c.admit(run)
			switch {
			case err != nil:
				return 0, err
			case holder != nil:
				return c.waitForState(ctx, run, holder, v1alpha1.StagePlan)
			case !admitted:
				return c.queued(ctx, run, ahead)
			}
		}
		return c.startStage(ctx, run, v1alpha1.StagePlan, 1, nil)
	case v1alpha1.RunPhasePlanning:
		return c.syncStage(ctx, run, v1alpha1.StagePlan)
	case v1alpha1.RunPhaseAwaitingApproval:
		return c.syncApproval(ctx, run)
	case v1alpha1.RunPhaseApplying:
		return c.syncStage(ctx, run, v1alpha1.StageApply)
	default:
		return 0, nil
	}
}

// applyFinalizer holds a run whose apply is in flight: deleting it waits for
// the apply to end (cancel interrupts it), rather than cut terraform off
// and leave its resources tainted. The status write that records the apply
// stage adds it, and the one that ends the run removes it (finish), so that
// it costs no write of its own; a run being deleted keeps it until its end
// is written, and sync removes it then, so that its end is seen before it
// goes.
const applyFinalizer = "terrarun.dev/apply"

// beingDeleted starts the message of a run deleted while it applies.
const beingDeleted = "Being deleted once its apply ends (cancel interrupts it). "

// removeApplyFinalizer removes applyFinalizer from run and writes it.
func (c *Controller) removeApplyFinalizer(ctx context.Context, run *v1alpha1.TerraformRun) error {
	run.Finalizers = slices.DeleteFunc(run.Finalizers, func(f string) bool { return f == applyFinalizer })
	_, err := c.client.TerrarunV1alpha1().TerraformRuns(run.Namespace).Update(ctx, run, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// startStage records a new stage attempt in status, then starts it. Recording
// first means the write that wins the resourceVersion race is the only one
// that starts: a second controller or a restarted one sees the recorded
// attempt and adopts it instead of starting another. The stage is carried by
// the running execution of the plan stage carrier when that is not nil: the
// apply stage of a plan execution that goes on to apply
// (runrules.CarriesApply).
func (c *Controller) startStage(ctx context.Context, run *v1alpha1.TerraformRun, stageName v1alpha1.StageName, attempt int32, carrier *v1alpha1.StageStatus) (time.Duration, error) {
	if run.DeletionTimestamp != nil {
		msg := fmt.Sprintf("The run is being deleted: its %s stage does not start.", stageName)
		if stageName == v1alpha1.StagePlan {
			c.setCondition(run, v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonCanceled, msg)
		}
		c.setCondition(run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonCanceled, "Nothing was applied.")
		c.finish(run, v1alpha1.RunPhaseCanceled, msg)
		return 0, c.writeStatus(ctx, run, v1alpha1.ReasonCanceled, msg)
	}
	if stageName == v1alpha1.StageApply && !slices.Contains(run.Finalizers, applyFinalizer) {
		// In the write that records the apply, so before it can start: a
		// delete from now on waits for it.
		run.Finalizers = append(run.Finalizers, applyFinalizer)
	}
	now := metav1.NewTime(c.opts.Clock.Now())
	st := v1alpha1.StageStatus{
		Name:          stageName,
		Attempt:       attempt,
		Job:           c.exec.Name(executor.Execution{Run: run, Stage: stageName, Attempt: attempt}),
		StartTime:     &now,
		StartRevision: c.observedRevision(),
	}
	if carrier != nil {
		st.Job, st.CarrierAttempt = carrier.Job, carrier.Attempt
	}
	run.Status.Stages = append(run.Status.Stages, st)
	if run.Status.StartTime == nil {
		run.Status.StartTime = &now
	}
	run.Status.ObservedGeneration = run.Generation
	c.markRunning(run, stageName, attempt)
	updated, err := c.client.TerrarunV1alpha1().TerraformRuns(run.Namespace).UpdateStatus(ctx, run, metav1.UpdateOptions{})
	if err != nil {
		return 0, err
	}
	c.opts.Recorder.Eventf(updated, "Normal", "StageStarted", "Started the %s stage, attempt %d", stageName, attempt)
	if stageName == v1alpha1.StagePlan && attempt == 1 {
		metrics.QueueWait.Observe(now.Sub(run.CreationTimestamp.Time).Seconds())
	}
	return c.syncStage(ctx, updated, stageName)
}

// observedRevision is the resourceVersion of the last change of runs the
// controller has received, 0 when it is unknown. Every decision to start a
// stage on a state follows the changes it rests on (the end of the stage
// before it), and comes before the write that records the stage, so stages
// on one state start in the order of their observed revisions, with no
// ties (runrules.ChangedStateAfter).
func (c *Controller) observedRevision() int64 {
	rv, err := strconv.ParseInt(c.seen(), 10, 64)
	if err != nil {
		return 0
	}
	return rv
}

// waitingRecheck is how often a stage held before it starts is looked at
// again.
const waitingRecheck = 5 * time.Second

func startFailedPrefix(stageName v1alpha1.StageName) string {
	return fmt.Sprintf("The %s stage could not start: ", stageName)
}

// startFailed acts on a stage that could not start. One that cannot start
// as the run is (executor.ErrInvalidReference: a missing Secret, say) fails
// the run at once; any other error is shown in status and as an Event, and
// retried with backoff until the stage's timeout, start included, is spent.
func (c *Controller) startFailed(ctx context.Context, run *v1alpha1.TerraformRun, st *v1alpha1.StageStatus, startErr error) (time.Duration, error) {
	msg := fmt.Sprintf("%s%v", startFailedPrefix(st.Name), startErr)
	timeout := executor.StageTimeout(run, st.Name)
	expired := c.opts.Clock.Since(st.StartTime.Time) >= timeout
	if errors.Is(startErr, executor.ErrInvalidReference) || expired {
		reason := v1alpha1.ReasonStartFailed
		if errors.Is(startErr, executor.ErrInvalidReference) {
			msg += ". Fix it, then create a new run."
		} else {
			reason = v1alpha1.ReasonDeadlineExceeded
			msg += fmt.Sprintf(". It kept failing for the stage's timeout of %s (spec.timeouts.%s).", timeout, st.Name)
		}
		c.completeStage(ctx, run, st, executor.Status{State: executor.StateFailed}, reason)
		c.setStageCondition(run, st.Name, metav1.ConditionFalse, reason, msg)
		c.finish(run, v1alpha1.RunPhaseFailed, msg)
		return 0, c.writeStatus(ctx, run, reason, msg)
	}
	if run.Status.Message != msg {
		run.Status.Message = msg
		c.setStageCondition(run, st.Name, metav1.ConditionFalse, v1alpha1.ReasonStartFailed, msg+"; retrying.")
		updated, err := c.client.TerrarunV1alpha1().TerraformRuns(run.Namespace).UpdateStatus(ctx, run, metav1.UpdateOptions{})
		if err != nil {
			return 0, err
		}
		c.opts.Recorder.Event(updated, "Warning", v1alpha1.ReasonStartFailed, msg+"; retrying.")
	}
	// Retried with the queue's backoff.
	return 0, startErr
}

// markRunning sets the phase, message and condition of a running stage.
func (c *Controller) markRunning(run *v1alpha1.TerraformRun, stageName v1alpha1.StageName, attempt int32) {
	if stageName == v1alpha1.StagePlan {
		run.Status.Phase = v1alpha1.RunPhasePlanning
		run.Status.Message = fmt.Sprintf("Planning (attempt %d).", attempt)
		c.setCondition(run, v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonPlanning, "The plan stage is running.")
		return
	}
	run.Status.Phase = v1alpha1.RunPhaseApplying
	run.Status.Message = "Applying the approved plan."
	c.setCondition(run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonApplying, "The apply stage is running.")
}

// execution returns the execution that runs st, and whether it is a plan
// execution that carries st, an apply stage (runrules.Execution).
func (c *Controller) execution(run *v1alpha1.TerraformRun, st *v1alpha1.StageStatus) (executor.Execution, bool) {
	ex := executor.Execution{Run: run}
	var carried bool
	ex.Stage, ex.Attempt, carried = runrules.Execution(st)
	if run.Status.Approval != nil {
		ex.PlanDigest = run.Status.Approval.PlanDigest
	}
	return ex, carried
}

// syncStage observes the current execution of stageName and acts on its end.
func (c *Controller) syncStage(ctx context.Context, run *v1alpha1.TerraformRun, stageName v1alpha1.StageName) (time.Duration, error) {
	st := runrules.CurrentStage(run, stageName)
	if st == nil {
		// The phase says the stage runs but none is recorded: record attempt 1.
		return c.startStage(ctx, run, stageName, 1, nil)
	}
	switch {
	case runrules.WaitsForTasksOnly(run) && stageName == v1alpha1.StageApply:
		// Applied, and waiting for its PostApply run tasks.
		return c.applied(ctx, run)
	case runrules.WaitsForTasksOnly(run):
		// A speculative plan waiting for its PostPlan run tasks.
		return c.planned(ctx, run, nil)
	}
	ex, carried := c.execution(run, st)
	status, err := c.exec.Status(ctx, ex)
	if err != nil {
		return 0, err
	}

	if meta.IsStatusConditionTrue(run.Status.Conditions, v1alpha1.ConditionCancelRequested) {
		if status.State == executor.StateRunning {
			if err := c.exec.Stop(ctx, ex, c.opts.CancelGrace); err != nil {
				return 0, err
			}
			if status, err = c.exec.Status(ctx, ex); err != nil {
				return 0, err
			}
			if status.State == executor.StateRunning {
				return time.Second, nil
			}
		}
		// An apply that ended with exit code 0 before the cancel took effect
		// has changed the infrastructure: report it applied (below), not
		// Canceled.
		if stageName != v1alpha1.StageApply || status.State != executor.StateSucceeded {
			cond := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionCancelRequested)
			c.completeStage(ctx, run, st, status, v1alpha1.ReasonCanceled)
			c.finish(run, v1alpha1.RunPhaseCanceled, cond.Message)
			c.setStageCondition(run, stageName, metav1.ConditionFalse, v1alpha1.ReasonCanceled, cond.Message)
			return 0, c.writeStatus(ctx, run, "Canceled", cond.Message)
		}
	}

	if stageName == v1alpha1.StagePlan && runrules.CarriesApply(run) && run.Status.Plan != nil && run.Status.Plan.Digest != "" {
		switch {
		case status.State == executor.StateRunning:
			// The plan is recorded and its execution waits to apply it. It
			// ends the plan's log itself, with the line that says so; the
			// apply stage's end closes it otherwise (closeLogs).
			c.endStage(run, st, executor.Status{State: executor.StateSucceeded}, executor.ReasonCompleted)
			return c.planned(ctx, run, st)
		case status.State != executor.StateSucceeded && !status.Startable():
			// It ended after recording its plan and before it was granted
			// the apply, so it applied nothing: the plan stands, and is
			// applied by a stage of its own.
			c.completeStage(ctx, run, st, status, v1alpha1.ReasonPlanned)
			c.opts.Recorder.Eventf(run, "Warning", v1alpha1.ReasonPlanned, "The plan stage's execution ended (%s) after recording plan %s and before its apply; the apply runs as a stage of its own", status.Reason, run.Status.Plan.Digest)
			return c.planned(ctx, run, nil)
		}
	}
	switch status.State {
	case executor.StateRunning:
		timeout := executor.StageTimeout(run, stageName)
		elapsed := c.opts.Clock.Since(st.StartTime.Time)
		if elapsed < timeout && status.Reason != "" {
			// The stage is held before it starts (a missing Secret, an image
			// that cannot be pulled): say why where users look, and look again
			// soon; its timeout bounds the wait.
			msg := fmt.Sprintf("The %s stage cannot start: %s: %s; it is retried until its timeout of %s (spec.timeouts.%s) runs out.",
				stageName, status.Reason, status.Message, timeout, stageName)
			if run.Status.Message != msg {
				run.Status.Message = msg
				c.setStageCondition(run, stageName, metav1.ConditionUnknown, v1alpha1.ReasonStartFailed, msg)
				if err := c.writeStatus(ctx, run, v1alpha1.ReasonStartFailed, msg); err != nil {
					return 0, err
				}
			}
			return min(timeout-elapsed, waitingRecheck), nil
		}
		if elapsed < timeout {
			if status.Recheck > 0 {
				return min(timeout-elapsed, status.Recheck), nil
			}
			return timeout - elapsed, nil
		}
		if err := c.exec.Stop(ctx, ex, c.opts.CancelGrace); err != nil {
			return 0, err
		}
		msg := fmt.Sprintf("The %s stage exceeded its timeout of %s and was stopped; raise spec.timeouts.%s if it needs longer.", stageName, timeout, stageName)
		status.State, status.Reason = executor.StateFailed, executor.ReasonDeadlineExceeded
		c.completeStage(ctx, run, st, status, v1alpha1.ReasonDeadlineExceeded)
		c.setStageCondition(run, stageName, metav1.ConditionFalse, v1alpha1.ReasonDeadlineExceeded, msg)
		c.finish(run, v1alpha1.RunPhaseFailed, msg)
		return 0, c.writeStatus(ctx, run, v1alpha1.ReasonDeadlineExceeded, msg)

	case executor.StateUnknown:
		if status.Startable() && !carried {
			// Recorded and not started yet (or a crash between the two): start it.
			if stageName == v1alpha1.StagePlan {
				var err error
				if ex.Inputs, err = c.resolveInputs(ctx, run); err != nil {
					return c.startFailed(ctx, run, st, err)
				}
			}
			if _, err := c.exec.Start(ctx, ex); err != nil {
				metrics.ExecutorStarts.WithLabelValues(string(st.Name), "error").Inc()
				return c.startFailed(ctx, run, st, err)
			}
			metrics.ExecutorStarts.WithLabelValues(string(st.Name), "ok").Inc()
			if strings.HasPrefix(run.Status.Message, startFailedPrefix(st.Name)) {
				// Started after all: say so instead of the last start error.
				c.markRunning(run, st.Name, st.Attempt)
				_, err := c.client.TerrarunV1alpha1().TerraformRuns(run.Namespace).UpdateStatus(ctx, run, metav1.UpdateOptions{})
				return 0, err
			}
			return 0, nil
		}
		// Anything else may have run: never start it again.
		reason, what := v1alpha1.ReasonExecutorLost, "was lost with its executor"
		if status.Reason == executor.ReasonForged {
			// Someone else's Job or stage Secret sits where this execution's
			// belongs: what it reports is not trusted.
			reason, what = v1alpha1.ReasonExecutorForged, "cannot be trusted: "+status.Message
		}
		if reason == v1alpha1.ReasonExecutorLost {
			if status.Message != "" {
				what += " (" + status.Message + ")"
			}
			// What is left of it (a Job whose pod is on a node that stopped
			// reporting) goes once the node is back or gone.
			if err := c.exec.Stop(ctx, ex, c.opts.CancelGrace); err != nil {
				return 0, err
			}
		}
		c.completeStage(ctx, run, st, status, reason)
		if stageName == v1alpha1.StagePlan && st.Attempt < c.opts.MaxPlanAttempts {
			// A plan changes nothing: run it again.
			c.opts.Recorder.Eventf(run, "Warning", reason, "The plan stage attempt %d %s; retrying", st.Attempt, what)
			return c.startStage(ctx, run, v1alpha1.StagePlan, st.Attempt+1, nil)
		}
		msg := fmt.Sprintf("The %s stage attempt %d %s. ", stageName, st.Attempt, what)
		if stageName == v1alpha1.StageApply {
			msg += "terrarun never re-applies automatically: check the state, then create a new run. " +
				"If the lost apply held the state lock, it still does: that run's plan fails on the lock and names its ID; " +
				"once the lost executor is known to be gone, set spec.forceUnlock to that ID to release it."
		} else {
			msg += "No attempts are left; create a new run."
		}
		c.setStageCondition(run, stageName, metav1.ConditionFalse, reason, msg)
		c.finish(run, v1alpha1.RunPhaseFailed, msg)
		return 0, c.writeStatus(ctx, run, reason, msg)

	case executor.StateFailed:
		reason := v1alpha1.ReasonPlanFailed
		if stageName == v1alpha1.StageApply {
			reason = v1alpha1.ReasonApplyFailed
		}
		switch {
		case status.Reason == executor.ReasonDeadlineExceeded:
			// The executor enforced the stage timeout before this controller did.
			reason = v1alpha1.ReasonDeadlineExceeded
		case stageName == v1alpha1.StagePlan && status.ExitCode != nil && *status.ExitCode == stage.ExitVerificationFailed:
			// The plan stage refused its source before unpacking it; its
			// message names the reference and the keys.
			reason = v1alpha1.ReasonVerificationFailed
		}
		c.completeStage(ctx, run, st, status, status.Reason)
		msg := fmt.Sprintf("The %s stage failed", stageName)
		if status.ExitCode != nil {
			msg += fmt.Sprintf(" (exit code %d)", *status.ExitCode)
		}
		if status.Reason == executor.ReasonLimitExceeded {
			// The executor's first line names the limit and its setting.
			first, _, _ := strings.Cut(status.Message, "\n")
			msg += " at a limit of its executor: " + first
		} else if detail := summarizeFailure(status.Message); detail != "" {
			msg += ": " + detail
		} else {
			msg += "; see the logs: kubectl get --raw .../terraformruns/" + run.Name + "/logs?stage=" + string(stageName)
		}
		c.setStageCondition(run, stageName, metav1.ConditionFalse, reason, msg)
		c.finish(run, v1alpha1.RunPhaseFailed, msg)
		return 0, c.writeStatus(ctx, run, reason, msg)

	case executor.StateSucceeded:
		c.completeStage(ctx, run, st, status, executor.ReasonCompleted)
		if stageName == v1alpha1.StagePlan {
			return c.planned(ctx, run, nil)
		}
		return c.applied(ctx, run)
	}
	return 0, fmt.Errorf("unknown execution state %q", status.State)
}

// planned decides what follows a successful plan. An automatically approved
// apply is carried by the execution of the plan stage carrier, which is still
// running, when that is not nil.
func (c *Controller) planned(ctx context.Context, run *v1alpha1.TerraformRun, carrier *v1alpha1.StageStatus) (time.Duration, error) {
	p := run.Status.Plan
	if p == nil || p.Digest == "" {
		msg := "The plan stage ended without uploading a plan; see the plan stage's logs."
		c.setCondition(run, v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonPlanFailed, msg)
		c.finish(run, v1alpha1.RunPhaseFailed, msg)
		return 0, c.writeStatus(ctx, run, v1alpha1.ReasonPlanFailed, msg)
	}
	summary := fmt.Sprintf("Plan: %d to add, %d to change, %d to destroy.", p.Add, p.Change, p.Destroy)
	if !p.HasChanges {
		msg := "No changes: the infrastructure matches the configuration."
		c.setCondition(run, v1alpha1.ConditionPlanned, metav1.ConditionTrue, v1alpha1.ReasonNoChanges, msg)
		c.setCondition(run, v1alpha1.ConditionApproved, metav1.ConditionFalse, v1alpha1.ReasonNoChanges, "Nothing to approve.")
		c.setCondition(run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonNoChanges, "Nothing to apply.")
		c.finish(run, v1alpha1.RunPhaseSucceeded, msg)
		return 0, c.writeStatus(ctx, run, v1alpha1.ReasonNoChanges, msg)
	}
	if run.Spec.Operation == v1alpha1.OperationPlan {
		// Its run tasks see it as HCP Terraform's see a speculative plan.
		c.setCondition(run, v1alpha1.ConditionPlanned, metav1.ConditionTrue, v1alpha1.ReasonPlanOnly, summary)
		if stop, wait, err := c.gateTasks(ctx, run, v1alpha1.RunTaskPostPlan); stop {
			return wait, err
		}
	}
	denied, held := c.checkPolicy(run)
	switch {
	case run.Spec.Operation == v1alpha1.OperationPlan:
		msg := summary + " This is a speculative plan (operation Plan) and is never applied."
		if denied != "" || held != "" {
			msg += " An apply of it would be held by policy: " + denied + held
		}
		c.setCondition(run, v1alpha1.ConditionPlanned, metav1.ConditionTrue, v1alpha1.ReasonPlanOnly, summary)
		c.setCondition(run, v1alpha1.ConditionApproved, metav1.ConditionFalse, v1alpha1.ReasonPlanOnly, "A speculative plan is not approved.")
		c.setCondition(run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonPlanOnly, "A speculative plan is not applied.")
		c.finish(run, v1alpha1.RunPhaseSucceeded, msg)
		return 0, c.writeStatus(ctx, run, v1alpha1.ReasonPlanOnly, msg)
	case denied != "":
		c.setCondition(run, v1alpha1.ConditionPlanned, metav1.ConditionTrue, v1alpha1.ReasonPlanned, summary)
		c.setCondition(run, v1alpha1.ConditionApproved, metav1.ConditionFalse, v1alpha1.ReasonPolicyDenied, denied)
		c.setCondition(run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonPolicyDenied, "The plan was denied by policy and will not be applied.")
		c.finish(run, v1alpha1.RunPhaseFailed, denied)
		return 0, c.writeStatus(ctx, run, v1alpha1.ReasonPolicyDenied, denied)
	}
	c.setCondition(run, v1alpha1.ConditionPlanned, metav1.ConditionTrue, v1alpha1.ReasonPlanned, summary)
	// Calls already made count even if their task is gone since.
	tasks := c.tasksAhead(run) || calledAt(run, v1alpha1.RunTaskPostPlan)
	if tasks {
		// Its run tasks are called while it waits in AwaitingApproval
		// (syncApproval calls planned again until the PostPlan ones have
		// answered); an Auto run's plan execution does not go on to apply,
		// and is refused the apply stage it waits for.
		carrier = nil
		if run.Status.Phase != v1alpha1.RunPhaseAwaitingApproval {
			c.setCondition(run, v1alpha1.ConditionApproved, metav1.ConditionFalse, v1alpha1.ReasonAwaitingTasks, summary+" It can be approved once its run tasks have answered.")
		}
		run.Status.Phase = v1alpha1.RunPhaseAwaitingApproval
		if stop, wait, err := c.gateTasks(ctx, run, v1alpha1.RunTaskPostPlan); stop {
			return wait, err
		}
	}
	switch {
	case runrules.AutoApproves(run, p.Digest):
		c.approveAuto(run)
		if tasks {
			// The apply waits for the PreApply run tasks, and runs as a
			// stage of its own (syncApproval).
			run.Status.Phase = v1alpha1.RunPhaseAwaitingApproval
			return c.syncApproval(ctx, run)
		}
		return c.startStage(ctx, run, v1alpha1.StageApply, 1, carrier)
	default:
		c.setCondition(run, v1alpha1.ConditionPlanned, metav1.ConditionTrue, v1alpha1.ReasonPlanned, summary)
		reason, msg := v1alpha1.ReasonAwaitingApproval, summary+" Review it (the plan subresource) and approve its digest (the approve subresource), or discard it."
		approvalMsg := fmt.Sprintf("Waiting for an approval of plan %s, until %s.", p.Digest, approvalDeadline(run).UTC().Format(time.RFC3339))
		switch {
		case held != "":
			reason, msg = v1alpha1.ReasonPolicyOverrideRequired, summary+" "+held
			approvalMsg = held
		case run.Spec.Approval.Mode == v1alpha1.ApprovalModeAuto:
			msg = summary + " Policy requires approvals although the approval mode is Auto: " + strings.Join(runrules.MissingApprovals(run, p.Digest), " and ") + "."
		case len(runrules.PolicyApprovals(run)) > 0:
			msg += " Policy requires " + strings.Join(runrules.MissingApprovals(run, p.Digest), " and ") + "."
		}
		c.setCondition(run, v1alpha1.ConditionApproved, metav1.ConditionFalse, v1alpha1.ReasonAwaitingApproval, approvalMsg)
		run.Status.Phase = v1alpha1.RunPhaseAwaitingApproval
		run.Status.Message = msg
		if err := c.writeStatus(ctx, run, reason, msg); err != nil {
			return 0, err
		}
		return approvalDeadline(run).Sub(c.opts.Clock.Now()), nil
	}
}

// approveAuto records Auto mode's approval of run's plan.
func (c *Controller) approveAuto(run *v1alpha1.TerraformRun) {
	now := metav1.NewTime(c.opts.Clock.Now())
	run.Status.Approval = &v1alpha1.ApprovalStatus{ApprovedBy: v1alpha1.AutoApprover, ApprovedAt: &now, PlanDigest: run.Status.Plan.Digest}
	c.setCondition(run, v1alpha1.ConditionApproved, metav1.ConditionTrue, v1alpha1.ReasonAutoApproved, "Approved automatically (approval.mode Auto).")
}

// checkPolicy sets the PolicyChecked condition from what the policies said
// of run's plan (status.policy, recorded with it), and says why they deny
// it or hold it for an override, when they do.
func (c *Controller) checkPolicy(run *v1alpha1.TerraformRun) (denied, held string) {
	pol, digest := run.Status.Policy, run.Status.Plan.Digest
	if pol == nil {
		return "", ""
	}
	if d := runrules.PolicyDenials(run, digest); len(d) > 0 {
		denied = "Denied by policy: " + runrules.DescribeResults(d) + ". Change the configuration and create a new run."
		c.setCondition(run, v1alpha1.ConditionPolicyChecked, metav1.ConditionFalse, v1alpha1.ReasonPolicyDenied, denied)
		return denied, ""
	}
	if pending := runrules.PendingOverrides(run, digest); len(pending) > 0 {
		held = "Held by soft-mandatory policy: " + runrules.DescribeResults(pending) +
			". A user allowed to override (create on terraformruns/override) may override it with a justification; then it can be approved."
		c.setCondition(run, v1alpha1.ConditionPolicyChecked, metav1.ConditionFalse, v1alpha1.ReasonPolicyOverrideRequired, held)
		return "", held
	}
	if !runrules.PolicyCleared(run, digest) {
		denied = fmt.Sprintf("The policy results recorded are of plan %s, not of this plan; create a new run.", pol.PlanDigest)
		c.setCondition(run, v1alpha1.ConditionPolicyChecked, metav1.ConditionFalse, v1alpha1.ReasonPolicyDenied, denied)
		return denied, ""
	}
	if meta.IsStatusConditionTrue(run.Status.Conditions, v1alpha1.ConditionPolicyChecked) {
		return "", "" // overridden: the override recorded why
	}
	msg := fmt.Sprintf("%d policies checked; no mandatory validation failed.", len(pol.Policies))
	var advisory []v1alpha1.PolicyResult
	for _, r := range pol.Results {
		if r.Enforcement == v1alpha1.EnforcementAdvisory && r.Outcome != v1alpha1.PolicyPassed {
			advisory = append(advisory, r)
		}
	}
	if len(advisory) > 0 {
		msg += " Advisory: " + runrules.DescribeResults(advisory) + "."
	}
	c.setCondition(run, v1alpha1.ConditionPolicyChecked, metav1.ConditionTrue, v1alpha1.ReasonPolicyPassed, msg)
	return "", ""
}

// syncApproval starts the apply once the plan is approved, and discards the
// run when a discard was requested or the approval times out.
func (c *Controller) syncApproval(ctx context.Context, run *v1alpha1.TerraformRun) (time.Duration, error) {
	if cond := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionDiscardRequested); cond != nil && cond.Status == metav1.ConditionTrue {
		// The discard subresource refuses an approved plan, and approve a
		// discarded one: the request stands alone.
		reason := v1alpha1.ReasonDiscarded
		if cond.Reason != v1alpha1.ReasonDiscardRequested {
			reason = cond.Reason // the discard's own, such as Superseded
		}
		c.setCondition(run, v1alpha1.ConditionApproved, metav1.ConditionFalse, reason, cond.Message)
		c.setCondition(run, v1alpha1.ConditionApplied, metav1.ConditionFalse, reason, "The plan was discarded and will not be applied.")
		c.finish(run, v1alpha1.RunPhaseDiscarded, cond.Message)
		return 0, c.writeStatus(ctx, run, reason, cond.Message)
	}
	if run.DeletionTimestamp != nil {
		// startStage ends a run being deleted instead.
		return c.startStage(ctx, run, v1alpha1.StageApply, 1, nil)
	}
	if _, waiting := runrules.TasksHold(run); waiting && run.Status.Approval == nil {
		// Its PostPlan run tasks have not all answered: planned goes on
		// once they have.
		return c.planned(ctx, run, nil)
	}
	if p := run.Status.Plan; p != nil && run.Status.Approval == nil && runrules.AutoApproves(run, p.Digest) {
		// Its soft-mandatory failures were overridden: Auto mode approves.
		c.approveAuto(run)
	}
	if p := run.Status.Plan; p != nil && runrules.Approved(run, p.Digest) {
		if stop, wait, err := c.gateTasks(ctx, run, v1alpha1.RunTaskPreApply); stop {
			return wait, err
		}
		return c.startApproved(ctx, run)
	}
	if stale, _ := runrules.AppliedSince(run, c.sameState(run), true); stale != nil {
		// Approving it would be refused: it ends now rather than wait for
		// its timeout.
		msg := fmt.Sprintf("The plan is stale: run %s applied to the same state (%s) after this plan was made, so it can no longer be applied. Create a new run to plan again.", stale.Name, runrules.DescribeState(run))
		c.setCondition(run, v1alpha1.ConditionApproved, metav1.ConditionFalse, v1alpha1.ReasonStalePlan, msg)
		c.setCondition(run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonStalePlan, msg)
		c.finish(run, v1alpha1.RunPhaseDiscarded, msg)
		return 0, c.writeStatus(ctx, run, v1alpha1.ReasonStalePlan, msg)
	}
	if wait := approvalDeadline(run).Sub(c.opts.Clock.Now()); wait > 0 {
		return wait, nil
	}
	msg := fmt.Sprintf("No approval within %s; the plan was discarded. Create a new run to plan again.", approvalTimeout(run))
	c.setCondition(run, v1alpha1.ConditionApproved, metav1.ConditionFalse, v1alpha1.ReasonApprovalExpired, msg)
	c.setCondition(run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonApprovalExpired, "The plan was not approved in time.")
	c.finish(run, v1alpha1.RunPhaseDiscarded, msg)
	return 0, c.writeStatus(ctx, run, v1alpha1.ReasonApprovalExpired, msg)
}

// applied completes a run whose apply succeeded.
func (c *Controller) applied(ctx context.Context, run *v1alpha1.TerraformRun) (time.Duration, error) {
	p := run.Status.Plan
	msg := "Applied."
	if p != nil {
		msg = fmt.Sprintf("Apply complete: %d added, %d changed, %d destroyed.", p.Add, p.Change, p.Destroy)
	}
	if !runrules.Applied(run) {
		if c.opts.OnApplied != nil {
			if err := c.opts.OnApplied(ctx, run); err != nil {
				return 0, fmt.Errorf("publishing the outputs of %s/%s: %w", run.Namespace, run.Name, err)
			}
		}
		c.setCondition(run, v1alpha1.ConditionApplied, metav1.ConditionTrue, v1alpha1.ReasonApplied, msg)
	}
	// The run holds its slot and its state until its PostApply run tasks
	// have answered.
	if stop, wait, err := c.gateTasks(ctx, run, v1alpha1.RunTaskPostApply); stop {
		return wait, err
	}
	c.finish(run, v1alpha1.RunPhaseSucceeded, msg)
	return 0, c.writeStatus(ctx, run, v1alpha1.ReasonApplied, msg)
}

// completeStage records how a stage ended and closes its logs, so followers end.
func (c *Controller) completeStage(ctx context.Context, run *v1alpha1.TerraformRun, st *v1alpha1.StageStatus, status executor.Status, reason string) {
	c.endStage(run, st, status, reason)
	c.closeLogs(ctx, run, st)
}

// endStage records how a stage ended.
func (c *Controller) endStage(run *v1alpha1.TerraformRun, st *v1alpha1.StageStatus, status executor.Status, reason string) {
	now := metav1.NewTime(c.opts.Clock.Now())
	if status.CompletionTime != nil {
		now = metav1.NewTime(*status.CompletionTime)
	}
	st.CompletionTime = &now
	st.ExitCode = status.ExitCode
	st.Reason = reason
	if st.StartTime != nil {
		metrics.StageDuration.WithLabelValues(string(st.Name), reason).Observe(now.Sub(st.StartTime.Time).Seconds())
	}
	switch reason {
	case executor.ReasonCompleted, v1alpha1.ReasonPlanned, v1alpha1.ReasonCanceled:
	default:
		metrics.ExecutorFailures.WithLabelValues(string(st.Name), reason).Inc()
	}
}

// Artifacts is what the run controller does with the artifact store: it
// reads the outputs of the runs a run's variables read (OutputsReader), and
// closes the log of a run's stage attempt that ended, so that its followers
// end (closing a closed log is no error). Nil where the server stores no
// artifacts.
type Artifacts interface {
	OutputsReader
	CloseLog(ctx context.Context, run artifacts.RunRef, stage string, attempt int32) error
}

// OutputsReader reads a run's artifacts, such as its outputs.
type OutputsReader interface {
	Get(ctx context.Context, run artifacts.RunRef, kind artifacts.Kind) (io.ReadCloser, artifacts.Meta, error)
}

// closeLogs closes the log of the ended stage st and, when st is an apply
// stage carried by a plan stage's execution, that plan stage's log too,
// which the execution ends itself unless it was lost first. Closing an ended
// log writes nothing.
func (c *Controller) closeLogs(ctx context.Context, run *v1alpha1.TerraformRun, st *v1alpha1.StageStatus) {
	if c.artifacts == nil {
		return
	}
	ref := artifacts.RunRef{Namespace: run.Namespace, Name: run.Name, UID: string(run.UID)}
	closeLog := func(stageName v1alpha1.StageName, attempt int32) {
		if err := c.artifacts.CloseLog(ctx, ref, string(stageName), attempt); err != nil {
			klog.FromContext(ctx).Error(err, "Closing a stage log", "run", klog.KObj(run), "stage", stageName, "attempt", attempt)
		}
	}
	closeLog(st.Name, st.Attempt)
	if ex, carried := c.execution(run, st); carried {
		closeLog(ex.Stage, ex.Attempt)
	}
}

// finish ends the run in phase, with the conditions that tools wait on: a
// Job's Complete or Failed, and Ready.
func (c *Controller) finish(run *v1alpha1.TerraformRun, phase v1alpha1.RunPhase, msg string) {
	c.endCalls(run, phase)
	if run.DeletionTimestamp == nil {
		// The write of its end lets a delete go at once.
		run.Finalizers = slices.DeleteFunc(run.Finalizers, func(f string) bool { return f == applyFinalizer })
	}
	now := metav1.NewTime(c.opts.Clock.Now())
	run.Status.Phase = phase
	run.Status.Message = msg
	run.Status.CompletionTime = &now
	if phase == v1alpha1.RunPhaseSucceeded {
		c.setCondition(run, v1alpha1.ConditionComplete, metav1.ConditionTrue, string(phase), msg)
		c.setCondition(run, v1alpha1.ConditionReady, metav1.ConditionTrue, string(phase), msg)
		return
	}
	c.setCondition(run, v1alpha1.ConditionFailed, metav1.ConditionTrue, string(phase), msg)
	c.setCondition(run, v1alpha1.ConditionReady, metav1.ConditionFalse, string(phase), msg)
}

// endBeforePlan ends run in phase, before any stage started, for reason,
// and writes it.
func (c *Controller) endBeforePlan(ctx context.Context, run *v1alpha1.TerraformRun, phase v1alpha1.RunPhase, reason, msg string) error {
	c.setCondition(run, v1alpha1.ConditionPlanned, metav1.ConditionFalse, reason, msg)
	c.setCondition(run, v1alpha1.ConditionApplied, metav1.ConditionFalse, reason, "Nothing was applied.")
	c.finish(run, phase, msg)
	return c.writeStatus(ctx, run, reason, msg)
}

// setCondition sets a condition of run, and says whether it changed.
func (c *Controller) setCondition(run *v1alpha1.TerraformRun, typ string, status metav1.ConditionStatus, reason, msg string) bool {
	return meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: run.Generation,
	})
}

func (c *Controller) setStageCondition(run *v1alpha1.TerraformRun, stageName v1alpha1.StageName, status metav1.ConditionStatus, reason, msg string) {
	if stageName == v1alpha1.StagePlan {
		c.setCondition(run, v1alpha1.ConditionPlanned, status, reason, msg)
		c.setCondition(run, v1alpha1.ConditionApplied, metav1.ConditionFalse, reason, "Nothing was applied.")
		return
	}
	c.setCondition(run, v1alpha1.ConditionApplied, status, reason, msg)
}

// writeStatus stores run.Status and records an Event.
func (c *Controller) writeStatus(ctx context.Context, run *v1alpha1.TerraformRun, reason, msg string) error {
	run.Status.ObservedGeneration = run.Generation
	updated, err := c.client.TerrarunV1alpha1().TerraformRuns(run.Namespace).UpdateStatus(ctx, run, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	eventType := "Normal"
	if updated.Status.Phase == v1alpha1.RunPhaseFailed || reason == v1alpha1.ReasonApprovalExpired || reason == v1alpha1.ReasonStartFailed || reason == v1alpha1.ReasonStalePlan {
		eventType = "Warning"
	}
	c.opts.Recorder.Event(updated, eventType, reason, msg)
	return nil
}

func approvalTimeout(run *v1alpha1.TerraformRun) time.Duration {
	if t := run.Spec.Approval.Timeout; t != nil && t.Duration > 0 {
		return t.Duration
	}
	return 24 * time.Hour
}

func approvalDeadline(run *v1alpha1.TerraformRun) time.Time {
	start := run.CreationTimestamp.Time
	if p := run.Status.Plan; p != nil && p.CompletedAt != nil {
		start = p.CompletedAt.Time
	}
	return start.Add(approvalTimeout(run))
}

// summarizeFailure keeps the end of an executor's output that explains a
// failure: terraform's "Error:" block when there is one.
func summarizeFailure(output string) string {
	output = strings.TrimSpace(output)
	if i := strings.LastIndex(output, "Error:"); i >= 0 {
		output = output[i:]
	}
	const max = 1024
	if len(output) > max {
		output = output[:max] + "…"
	}
	return output
}
