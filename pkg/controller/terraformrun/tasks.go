package terraformrun

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	informers "github.com/terrarun/terrarun/pkg/generated/informers/externalversions/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/metrics"
	"github.com/terrarun/terrarun/pkg/runtask"
)

// Tasks is what the controller needs to call run tasks.
type Tasks struct {
	// Informer watches the TerraformRunTasks; the controller starts no
	// run before it has synced.
	Informer informers.TerraformRunTaskInformer
	// SecretValue reads the value of a key of a Secret of a namespace: the
	// tasks' HMAC keys.
	SecretValue func(ctx context.Context, namespace, name, key string) ([]byte, error)
	// CallbackURL is the base URL at which tasks reach this server, for the
	// payload's callback and plan URLs.
	CallbackURL string
}

// maxSendTime bounds the POST of one payload; the task answers later,
// through the callback.
const maxSendTime = 30 * time.Second

// taskTokens holds the access tokens of the calls recorded and not sent
// yet, by run and token hash. A token is sent only once the write that
// records its hash is stored, and the controller has seen it, so that the
// task can use it at once; a token lost with the leader is never sent, and
// its call errors at its deadline. A token whose call was never stored (its
// write failed) is forgotten after the longest timeout.
type taskTokens struct {
	mu     sync.Mutex
	tokens map[string]map[string]heldToken
}

type heldToken struct {
	token string
	made  time.Time
}

// matchingTasks returns the run tasks of run's namespace that run at stage
// and select run, by name.
func (c *Controller) matchingTasks(run *v1alpha1.TerraformRun, stage v1alpha1.RunTaskStage) []*v1alpha1.TerraformRunTask {
	if c.opts.Tasks == nil || c.opts.Tasks.Informer == nil {
		return nil
	}
	all, err := c.opts.Tasks.Informer.Lister().TerraformRunTasks(run.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	// A run is selected by its labels now, or as it was created: an editor
	// who removes a label after the plan does not take the run out of a
	// task's later stages.
	var created map[string]string
	if v, ok := run.Annotations[v1alpha1.AnnotationLabelsAtCreation]; ok {
		_ = json.Unmarshal([]byte(v), &created)
	}
	var tasks []*v1alpha1.TerraformRunTask
	for _, t := range all {
		if !slices.Contains(t.Spec.Stages, stage) {
			continue
		}
		if sel := t.Spec.RunSelector; sel != nil {
			s, err := metav1.LabelSelectorAsSelector(sel)
			if err != nil || !s.Matches(labels.Set(run.Labels)) && !(created != nil && s.Matches(labels.Set(created))) {
				continue
			}
		}
		tasks = append(tasks, t)
	}
	slices.SortFunc(tasks, func(a, b *v1alpha1.TerraformRunTask) int { return strings.Compare(a.Name, b.Name) })
	return tasks
}

// tasksAhead says whether run tasks run between run's plan and its apply:
// then an Auto run's plan execution does not go on to apply, and the apply
// waits for them.
func (c *Controller) tasksAhead(run *v1alpha1.TerraformRun) bool {
	return len(c.matchingTasks(run, v1alpha1.RunTaskPostPlan)) > 0 || len(c.matchingTasks(run, v1alpha1.RunTaskPreApply)) > 0
}

// calledAt says whether run has calls at stage.
func calledAt(run *v1alpha1.TerraformRun, stage v1alpha1.RunTaskStage) bool {
	return slices.ContainsFunc(run.Status.Tasks, func(c v1alpha1.RunTaskCall) bool { return c.Stage == stage })
}

// endCalls ends the calls of run still Running when the run ends: their
// tokens are worth nothing from then on.
func (c *Controller) endCalls(run *v1alpha1.TerraformRun, phase v1alpha1.RunPhase) {
	now := c.opts.Clock.Now()
	for i := range run.Status.Tasks {
		if call := &run.Status.Tasks[i]; call.Status == v1alpha1.RunTaskRunning {
			completeCall(call, v1alpha1.RunTaskErrored, fmt.Sprintf("The run ended %s before the task answered.", phase), now)
		}
	}
}

func findCall(run *v1alpha1.TerraformRun, task string, stage v1alpha1.RunTaskStage) *v1alpha1.RunTaskCall {
	for i := range run.Status.Tasks {
		if c := &run.Status.Tasks[i]; c.Task == task && c.Stage == stage {
			return c
		}
	}
	return nil
}

// gateTasks calls the run tasks of stage, once each, and acts on their
// answers. It returns stop when the run waits for them (its message and
// the TasksChecked condition say so, and wait is when to look again) or
// when a Mandatory one failed (the run has ended Failed). Either way it has
// written the run's status when it changed. It returns !stop when every
// call has answered and none Mandatory failed, with the condition True and
// status not yet written: the caller goes on and writes it.
func (c *Controller) gateTasks(ctx context.Context, run *v1alpha1.TerraformRun, stage v1alpha1.RunTaskStage) (stop bool, wait time.Duration, err error) {
	c.sendRecorded(ctx, run)
	now := c.opts.Clock.Now()
	changed := false
	for _, t := range c.matchingTasks(run, stage) {
		if findCall(run, t.Name, stage) != nil {
			continue
		}
		token, hash, err := runtask.NewToken(run.Namespace, run.Name)
		if err != nil {
			return true, 0, err
		}
		timeout := v1alpha1.DefaultRunTaskTimeout
		if t.Spec.Timeout != nil {
			timeout = t.Spec.Timeout.Duration
		}
		started, deadline := metav1.NewTime(now), metav1.NewTime(now.Add(timeout))
		run.Status.Tasks = append(run.Status.Tasks, v1alpha1.RunTaskCall{
			Task: t.Name, Stage: stage, Enforcement: t.Spec.Enforcement, Status: v1alpha1.RunTaskRunning,
			Message: "Called.", StartedAt: &started, Deadline: &deadline, TokenHash: hash,
		})
		c.tokens.add(runKey(run), hash, token, now)
		changed = true
	}
	var pending, failed, names, advisory []string
	for i := range run.Status.Tasks {
		call := &run.Status.Tasks[i]
		if call.Stage != stage {
			continue
		}
		names = append(names, call.Task)
		if call.Status == v1alpha1.RunTaskRunning && call.Deadline != nil && !now.Before(call.Deadline.Time) {
			completeCall(call, v1alpha1.RunTaskErrored, fmt.Sprintf("No answer within its timeout (until %s).", call.Deadline.UTC().Format(time.RFC3339)), now)
			changed = true
		}
		switch {
		case call.Status == v1alpha1.RunTaskRunning:
			pending = append(pending, call.Task)
			if d := call.Deadline.Sub(now); wait == 0 || d < wait {
				wait = d
			}
		case call.Status == v1alpha1.RunTaskPassed:
		case call.Enforcement == v1alpha1.RunTaskAdvisory:
			advisory = append(advisory, describeCall(call))
		default:
			failed = append(failed, describeCall(call))
		}
	}
	switch {
	case len(failed) > 0:
		msg := fmt.Sprintf("Stopped by run tasks at %s: %s.", stage, strings.Join(failed, "; "))
		c.setCondition(run, v1alpha1.ConditionTasksChecked, metav1.ConditionFalse, v1alpha1.ReasonTaskFailed, msg)
		switch stage {
		case v1alpha1.RunTaskPrePlan:
			c.setCondition(run, v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonTaskFailed, msg)
			c.setCondition(run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonTaskFailed, "Nothing was applied.")
		case v1alpha1.RunTaskPostPlan, v1alpha1.RunTaskPreApply:
			c.setCondition(run, v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.ReasonTaskFailed, "The plan was stopped by a run task and will not be applied.")
		case v1alpha1.RunTaskPostApply:
			msg += " The apply itself succeeded."
		}
		c.finish(run, v1alpha1.RunPhaseFailed, msg)
		return true, 0, c.writeStatus(ctx, run, v1alpha1.ReasonTaskFailed, msg)
	case len(pending) > 0:
		msg := fmt.Sprintf("Waiting for run tasks at %s: %s.", stage, strings.Join(pending, ", "))
		if c.setCondition(run, v1alpha1.ConditionTasksChecked, metav1.ConditionFalse, v1alpha1.ReasonAwaitingTasks, msg) || changed || run.Status.Message != msg {
			run.Status.Message = msg
			if err := c.writeStatus(ctx, run, v1alpha1.ReasonAwaitingTasks, msg); err != nil {
				return true, 0, err
			}
		}
		return true, wait, nil
	case len(names) > 0:
		msg := fmt.Sprintf("Run tasks passed at %s: %s.", stage, strings.Join(names, ", "))
		if len(advisory) > 0 {
			msg += " Advisory failures: " + strings.Join(advisory, "; ") + "."
		}
		c.setCondition(run, v1alpha1.ConditionTasksChecked, metav1.ConditionTrue, v1alpha1.ReasonTasksPassed, msg)
	}
	return false, 0, nil
}

// describeCall names a call that did not pass, and what it said.
func describeCall(call *v1alpha1.RunTaskCall) string {
	s := fmt.Sprintf("%s (%s) %s", call.Task, call.Enforcement, strings.ToLower(string(call.Status)))
	if call.Message != "" {
		s += ": " + call.Message
	}
	return s
}

func completeCall(call *v1alpha1.RunTaskCall, status v1alpha1.RunTaskCallStatus, msg string, now time.Time) {
	t := metav1.NewTime(now)
	call.Status, call.Message, call.CompletedAt = status, msg, &t
	if call.StartedAt != nil {
		metrics.RunTaskSeconds.WithLabelValues(string(call.Stage), string(status)).Observe(now.Sub(call.StartedAt.Time).Seconds())
	}
}

func (t *taskTokens) add(run, hash, token string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tokens == nil {
		t.tokens = map[string]map[string]heldToken{}
	}
	if t.tokens[run] == nil {
		t.tokens[run] = map[string]heldToken{}
	}
	t.tokens[run][hash] = heldToken{token: token, made: now}
}

// take returns, and forgets, the tokens held for run's calls that are
// Running as run (read from the cache) records them. It keeps the others,
// whose write the cache may not show yet, until the longest timeout has
// passed.
func (t *taskTokens) take(run *v1alpha1.TerraformRun, now time.Time) map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	held := t.tokens[runKey(run)]
	if len(held) == 0 {
		return nil
	}
	taken := map[string]string{}
	for i := range run.Status.Tasks {
		call := &run.Status.Tasks[i]
		if h, ok := held[call.TokenHash]; ok && call.Status == v1alpha1.RunTaskRunning {
			taken[call.TokenHash] = h.token
			delete(held, call.TokenHash)
		}
	}
	for hash, h := range held {
		if now.Sub(h.made) > v1alpha1.MaxRunTaskTimeout {
			delete(held, hash)
		}
	}
	if len(held) == 0 {
		delete(t.tokens, runKey(run))
	}
	return taken
}

// sendRecorded sends the payloads of run's calls that are recorded, as run
// was read from the cache, and not sent yet.
func (c *Controller) sendRecorded(ctx context.Context, run *v1alpha1.TerraformRun) {
	for hash, token := range c.tokens.take(run, c.opts.Clock.Now()) {
		for i := range run.Status.Tasks {
			if call := run.Status.Tasks[i]; call.TokenHash == hash {
				go c.send(ctx, run.DeepCopy(), call, token)
			}
		}
	}
}

// send POSTs the payload of call, and records the call Errored when the
// task cannot be reached or refuses it.
func (c *Controller) send(ctx context.Context, run *v1alpha1.TerraformRun, call v1alpha1.RunTaskCall, token string) {
	callErr := func() error {
		task, err := c.opts.Tasks.Informer.Lister().TerraformRunTasks(run.Namespace).Get(call.Task)
		if err != nil {
			return fmt.Errorf("the TerraformRunTask is gone: %v", err)
		}
		var key []byte
		if k := task.Spec.HMACKey; k != nil {
			if key, err = c.opts.Tasks.SecretValue(ctx, run.Namespace, k.Name, k.Key); err != nil {
				return fmt.Errorf("its HMAC key (key %q of Secret %q, spec.hmacKey) cannot be read: %v", k.Key, k.Name, err)
			}
		}
		// The POST must end by the call's deadline, and soon: the task
		// answers later, through the callback.
		sendCtx, cancel := context.WithTimeout(ctx, min(call.Deadline.Sub(c.opts.Clock.Now()), maxSendTime))
		defer cancel()
		if err := runtask.Send(sendCtx, task.Spec.URL, task.Spec.CABundle, key, runtask.NewPayload(run, &call, token, c.opts.Tasks.CallbackURL)); err != nil {
			return fmt.Errorf("calling %s: %v", task.Spec.URL, err)
		}
		return nil
	}()
	if callErr == nil || ctx.Err() != nil {
		return
	}
	c.opts.Recorder.Eventf(run, "Warning", v1alpha1.ReasonTaskFailed, "Run task %s at %s: %v", call.Task, call.Stage, callErr)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := c.client.TerrarunV1alpha1().TerraformRuns(run.Namespace).Get(ctx, run.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		recorded := findCall(current, call.Task, call.Stage)
		if current.UID != run.UID || recorded == nil || recorded.TokenHash != call.TokenHash || recorded.Status != v1alpha1.RunTaskRunning {
			return nil
		}
		completeCall(recorded, v1alpha1.RunTaskErrored, "Could not be called: "+callErr.Error(), c.opts.Clock.Now())
		_, err = c.client.TerrarunV1alpha1().TerraformRuns(run.Namespace).UpdateStatus(ctx, current, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		klog.FromContext(ctx).Error(err, "Recording a run task call that failed", "run", klog.KObj(run), "task", call.Task)
	}
}
