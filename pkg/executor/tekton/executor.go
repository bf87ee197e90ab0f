package tekton

import (
	"context"
	"crypto/md5" //nolint:gosec // Tekton's pod names, not cryptography.
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/admission/policy"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/executor/job"
	"github.com/terrarun/terrarun/pkg/stage"
)

// Executor runs each stage execution as a TaskRun in the run's namespace.
// It implements executor.Executor.
type Executor struct {
	jobs     *job.Executor // builds the stage's pod and creates what it mounts
	kube     kubernetes.Interface
	dyn      dynamic.Interface
	opts     job.JobOptions
	claims   *Claims
	template *policy.TaskRunTemplate
	defaults *podDefaults
}

// Options are the Tekton executor's.
type Options struct {
	// Jobs builds each stage's pod, as the Job executor builds its Jobs'.
	Jobs job.JobOptions
	// Template is the cluster policy's taskRunTemplate; nil: none.
	Template *policy.TaskRunTemplate
	// Namespace is Tekton's (tekton-pipelines), where its config-defaults
	// say what its webhook merges into every TaskRun; empty: nothing.
	Namespace string
}

var _ executor.Executor = (*Executor)(nil)

// NewExecutor returns an executor that creates TaskRuns with dyn, and the
// Secrets, claims and pod reads of their stages with kube, as opts say;
// claims holds each stage attempt's pod and shape.
func NewExecutor(kube kubernetes.Interface, dyn dynamic.Interface, claims *Claims, opts Options) *Executor {
	jobs := opts.Jobs
	jobs.HostName = PodName
	return &Executor{jobs: job.NewExecutor(kube, jobs), kube: kube, dyn: dyn, opts: jobs, claims: claims, template: opts.Template,
		defaults: &podDefaults{kube: kube, namespace: opts.Namespace}}
}

// PodName is the name Tekton gives the pod of the TaskRun taskRun, which
// is also its host name: knative's kmeta.ChildName(taskRun, "-pod"), the
// TaskRun's name and "-pod", or when that is longer than 63 characters,
// its first 27 characters, the MD5 of the whole in hex, and "-pod".
func PodName(taskRun string) string {
	const suffix, longest, md5Hex = "-pod", 63, 32
	if len(taskRun) <= longest-len(suffix) {
		return taskRun + suffix
	}
	sum := md5.Sum([]byte(taskRun)) //nolint:gosec
	return taskRun[:longest-md5Hex-len(suffix)] + hex.EncodeToString(sum[:]) + suffix
}

// Name implements executor.Executor: the TaskRun's name, which is the name
// the Job executor gives its Job.
func (e *Executor) Name(ex executor.Execution) string {
	return job.JobName(ex.Run.Name, ex.Stage, ex.Attempt)
}

func (e *Executor) taskRuns(namespace string) dynamic.ResourceInterface {
	return e.dyn.Resource(TaskRuns).Namespace(namespace)
}

// Start creates what the stage mounts as the Job executor does
// (job.Executor.Prepare: the plugin cache claim, the inputs and stage
// Secrets, each adopted only when terrarun's), then the TaskRun, shaped by
// the cluster policy's taskRunTemplate as it is now (recorded for the
// stage: shapeFor). A TaskRun of its name may already exist, from an
// earlier Start of the same execution: it is adopted when it is of the run
// and holds what Start builds (checkTaskRun), and an error otherwise, found
// before the stage Secret is written, so that the pod of a TaskRun someone
// made in advance never gets the stage's key. When the API server refuses
// the TaskRun for good (Tekton's webhook, a denial), the stage Secret goes
// again (job.Executor.Unprepare). It returns the TaskRun's name.
func (e *Executor) Start(ctx context.Context, ex executor.Execution) (string, error) {
	if ex.Run == nil {
		return "", fmt.Errorf("no run")
	}
	sh, err := e.shapeFor(ctx, ex, true)
	if err != nil {
		return "", err
	}
	if existing, err := e.getTaskRun(ctx, ex); err != nil || existing != nil {
		// Refused, or terrarun's: an earlier Start made it, and what it
		// mounts.
		if err != nil {
			return "", err
		}
		return existing.GetName(), nil
	}
	built, secret, err := e.jobs.Prepare(ctx, ex)
	if err != nil {
		return "", err
	}
	sh.apply(built, ex.Run)
	tr, err := buildTaskRun(built, sh)
	if err != nil {
		return "", err
	}
	if _, err := e.taskRuns(tr.GetNamespace()).Create(ctx, tr, metav1.CreateOptions{}); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			exists := func(ctx context.Context) (bool, error) {
				_, err := e.taskRuns(tr.GetNamespace()).Get(ctx, tr.GetName(), metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					// Nothing of the attempt ran: its next Start takes the
					// template as it is then.
					return false, e.claims.forgetShape(ctx, identityOf(ex))
				}
				return err == nil, err
			}
			return "", e.jobs.Unprepare(ctx, secret, exists, fmt.Errorf("creating TaskRun %s/%s: %w", tr.GetNamespace(), tr.GetName(), err))
		}
		existing, err := e.taskRuns(tr.GetNamespace()).Get(ctx, tr.GetName(), metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("getting existing TaskRun %s/%s: %w", tr.GetNamespace(), tr.GetName(), err)
		}
		defaults, err := e.defaults.get(ctx)
		if err != nil {
			return "", err
		}
		if err := checkTaskRun(existing, built, secret, ex.Run, sh, defaults); err != nil {
			return "", err
		}
	}
	return tr.GetName(), nil
}

// getTaskRun returns the execution's TaskRun, nil when there is none, and
// an error when the TaskRun of its name is not the one Start builds.
func (e *Executor) getTaskRun(ctx context.Context, ex executor.Execution) (*unstructured.Unstructured, error) {
	if ex.Run == nil {
		return nil, fmt.Errorf("no run")
	}
	name := e.Name(ex)
	tr, err := e.taskRuns(ex.Run.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("getting TaskRun %s/%s: %w", ex.Run.Namespace, name, err)
	}
	sh, err := e.shapeFor(ctx, ex, false)
	if err != nil {
		return nil, err
	}
	built, secret, err := job.BuildJob(ex, e.opts)
	if err != nil {
		return nil, err
	}
	sh.apply(built, ex.Run)
	defaults, err := e.defaults.get(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkTaskRun(tr, built, secret, ex.Run, sh, defaults); err != nil {
		return nil, err
	}
	return tr, nil
}

// taskRunStatus is what Status reads of a TaskRun's status.
type taskRunStatus struct {
	PodName        string       `json:"podName"`
	StartTime      *metav1.Time `json:"startTime"`
	CompletionTime *metav1.Time `json:"completionTime"`
	Conditions     []struct {
		Type    string `json:"type"`
		Status  string `json:"status"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"conditions"`
	Steps []stepState `json:"steps"`
}

// stepState is what Status reads of a step's state in a TaskRun's status.
type stepState struct {
	Name       string                           `json:"name"`
	Terminated *corev1.ContainerStateTerminated `json:"terminated"`
	// TerminationReason is Tekton's: Skipped for a step it skipped after
	// one before it failed.
	TerminationReason string `json:"terminationReason"`
}

func readStatus(tr *unstructured.Unstructured) (taskRunStatus, error) {
	var st taskRunStatus
	raw, ok := tr.Object["status"]
	if !ok {
		return st, nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("TaskRun %s/%s: reading its status: %w", tr.GetNamespace(), tr.GetName(), err)
	}
	return st, nil
}

// succeeded is the TaskRun's Succeeded condition: status "" while there is
// none.
func (s taskRunStatus) succeeded() (status, reason, message string) {
	for _, c := range s.Conditions {
		if c.Type == "Succeeded" {
			return c.Status, c.Reason, c.Message
		}
	}
	return "", "", ""
}

// Reasons of Tekton's Succeeded condition that Status maps.
const (
	reasonTimeout   = "TaskRunTimeout"
	reasonCancelled = "TaskRunCancelled"
	// reasonSkipped is the reason of a step that Tekton skipped because
	// one before it failed.
	reasonSkipped = "Skipped"
)

// neverRan are the reasons of a failed TaskRun whose step's container
// never ran: nothing of the stage happened, and the failure is the
// platform's, passed through.
var neverRan = map[string]bool{
	"TaskRunImagePullFailed":     true,
	"CreateContainerConfigError": true,
	"ExceededResourceQuota":      true,
	"ExceededNodeResources":      true,
	"TaskRunValidationFailed":    true,
	"PodCreationFailed":          true,
	"PodAdmissionFailed":         true,
	"FailedValidation":           true,
}

// Status maps the TaskRun's Succeeded condition, its step's termination
// and its pod to an executor.Status. A TaskRun that does not exist is
// reported as the Job executor reports a missing Job (job.Executor.Missing).
// While it runs, Reason and Message report why its container waits.
//
// It is lost (StateUnknown, ReasonExecutorLost) when its pod is not the
// pod that first proved the stage (Claims), whatever Tekton says of it
// since: Tekton starts a gone pod again, and what the replacement did (it
// is refused as the stage) says nothing of the stage. It is lost too when
// its pod went with its node or is gone while it runs, and when it failed
// before its step ended although its pod had spoken. A running TaskRun
// found lost is canceled (with lostMessage), so that Tekton runs nothing
// more of it, and reads as lost afterwards too; and its attempt is claimed
// for no pod, so that no pod Tekton starts again is ever the stage. A
// TaskRun that succeeded although no pod of it proved the stage key is
// lost too: the stage's executor always speaks to terrarun.
func (e *Executor) Status(ctx context.Context, ex executor.Execution) (executor.Status, error) {
	tr, err := e.getTaskRun(ctx, ex)
	if name, ok := job.Forged(err); ok {
		return executor.Status{State: executor.StateUnknown, Name: name, Reason: executor.ReasonForged, Message: err.Error()}, nil
	}
	if err != nil {
		return executor.Status{}, err
	}
	if tr == nil {
		return e.jobs.Missing(ctx, ex, kind)
	}
	trs, err := readStatus(tr)
	if err != nil {
		return executor.Status{}, err
	}
	st := executor.Status{State: executor.StateRunning, Name: tr.GetName()}
	if t := trs.StartTime; t != nil {
		st.StartTime = ptr.To(t.Time)
	}
	lostStatus := func(message string) executor.Status {
		return executor.Status{State: executor.StateUnknown, Name: tr.GetName(), Reason: executor.ReasonExecutorLost, Message: message}
	}
	var pod *corev1.Pod
	var claimed string
	if trs.PodName != "" {
		p, err := e.kube.CoreV1().Pods(tr.GetNamespace()).Get(ctx, trs.PodName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return executor.Status{}, fmt.Errorf("getting pod %s/%s of TaskRun %s: %w", tr.GetNamespace(), trs.PodName, tr.GetName(), err)
		default:
			pod = p
		}
		if claimed, err = e.claims.Pod(ctx, identityOf(ex)); err != nil {
			return executor.Status{}, err
		}
	}
	status, reason, message := trs.succeeded()
	var replaced string
	if claimed != "" && pod != nil && string(pod.UID) != claimed {
		replaced = fmt.Sprintf("pod %s of TaskRun %s (UID %s) is not the stage's first pod (UID %s), which is gone", pod.Name, tr.GetName(), pod.UID, claimed)
		if status == "True" || status == "False" {
			return lostStatus(replaced), nil
		}
	}
	terminated := stepTerminated(trs, pod)
	if terminated != nil {
		st.ExitCode = ptr.To(terminated.ExitCode)
	}

	switch status {
	case "True":
		if claimed == "" {
			return lostStatus(fmt.Sprintf("TaskRun %s/%s succeeded, but no pod of it ever proved the stage's key: what ran is not the stage", tr.GetNamespace(), tr.GetName())), nil
		}
		st.State, st.Reason = executor.StateSucceeded, executor.ReasonCompleted
		if st.ExitCode == nil {
			st.ExitCode = ptr.To[int32](0)
		}
		st.CompletionTime = completion(trs)
		return st, nil
	case "False":
		st.State, st.Reason, st.Message = executor.StateFailed, reason, message
		st.CompletionTime = completion(trs)
		switch {
		case reason == reasonCancelled && lostCancel(tr):
			return lostStatus(fmt.Sprintf("TaskRun %s/%s: %s", tr.GetNamespace(), tr.GetName(), lostMessage)), nil
		case reason == reasonTimeout:
			st.Reason = executor.ReasonDeadlineExceeded
		case reason == reasonCancelled:
			st.Reason = executor.ReasonCanceled
		case taskStepFailed(trs) != "":
			// A step of the cluster policy's Task failed, before the
			// stage (which then never ran) or after it.
			st.Reason, st.Message = reasonStepFailed, taskStepFailed(trs)
		case terminated == nil && neverRan[reason] && claimed == "":
			// The platform's reason, passed through: no pod of the stage
			// ever spoke.
		case terminated == nil:
			// The pod ended without its step ever ending: deleted, or
			// evicted with its node. What it did, if anything, is unknown.
			return lostStatus(fmt.Sprintf("TaskRun %s/%s failed before its step ended (%s: %s)", tr.GetNamespace(), tr.GetName(), reason, message)), nil
		case terminated.ExitCode == stage.ExitForged:
			// terrarun-executor found that what it was handed is not what
			// terrarun wrote: it ran nothing, and the stage is not trusted.
			// (Its reason is in the stage's log, not here: see resultOutcome.)
			return executor.Status{State: executor.StateUnknown, Name: tr.GetName(), Reason: executor.ReasonForged,
				Message: fmt.Sprintf("its executor refused to run it: what it was handed is not what terrarun wrote (see the log of the %s stage)", ex.Stage)}, nil
		case terminated.Reason != "" && terminated.Reason != executor.ReasonError && terminated.Reason != executor.ReasonCompleted:
			// OOMKilled, ContainerCannotRun, ...
			st.Reason = terminated.Reason
		case terminated.ExitCode != 0:
			st.Reason = executor.ReasonError
			st.Message = fmt.Sprintf("terrarun-executor exited with code %d (its log says why)", terminated.ExitCode)
		}
		if st.Reason == "" {
			st.Reason = executor.ReasonFailed
		}
		return st, nil
	}

	// Running, or about to.
	if trs.PodName != "" {
		lost := replaced
		switch {
		case lost != "":
		case pod == nil:
			lost = fmt.Sprintf("pod %s of TaskRun %s no longer exists", trs.PodName, tr.GetName())
		default:
			if lost, st.Recheck, err = e.jobs.NodeLost(ctx, pod); err != nil {
				return executor.Status{}, err
			}
		}
		if lost != "" {
			// No pod is the attempt's from now on, the first one's being
			// gone: one that has not spoken yet never will.
			if _, err := e.claims.Claim(ctx, identityOf(ex), noPod); err != nil {
				return executor.Status{}, err
			}
			// Tekton starts the pod of a TaskRun again when it is gone:
			// cancel it, so that it runs nothing more. Were the cancel
			// refused, the stage is lost all the same: a pod Tekton starts
			// again is refused as the stage.
			if err := e.cancel(ctx, tr, lostMessage); err != nil {
				return lostStatus(fmt.Sprintf("%s; canceling its TaskRun failed (%v): its pods are refused as the stage", lost, err)), nil
			}
			return lostStatus(lost + "; its TaskRun is canceled, so that Tekton does not run the stage again"), nil
		}
		if st.Reason, st.Message, err = e.jobs.Waiting(ctx, pod, containerName); err != nil {
			return executor.Status{}, err
		}
	}
	return st, nil
}

// lostMessage is the statusMessage of a TaskRun that Status canceled
// because its stage was lost; stopMessage that of one Stop canceled.
const (
	lostMessage = "terrarun canceled it: its stage was lost"
	stopMessage = "terrarun stopped the stage"
)

// lostCancel says whether tr was canceled by Status as lost.
func lostCancel(tr *unstructured.Unstructured) bool {
	msg, _, _ := unstructured.NestedString(tr.Object, "spec", "statusMessage")
	return msg == lostMessage
}

// reasonStepFailed is the reason of a stage whose TaskRun failed because
// a step of the cluster policy's Task (taskRunTemplate.task) did.
const reasonStepFailed = "StepFailed"

// taskStepFailed says which step of the cluster policy's Task failed the
// TaskRun, and where it ran: one before the stage, when the stage's step
// was skipped or never ended; one after it, when the stage's step exited
// 0. "" otherwise: when the stage's own step failed, that is the failure.
// Tekton skips the steps after a failed one (terminationReason Skipped).
func taskStepFailed(trs taskRunStatus) string {
	ours := slices.IndexFunc(trs.Steps, func(s stepState) bool { return s.Name == stepName })
	if ours < 0 {
		return ""
	}
	own := trs.Steps[ours]
	var candidates []stepState
	var where string
	switch {
	case own.Terminated == nil || own.TerminationReason == reasonSkipped:
		candidates, where = trs.Steps[:ours], "before the stage, which did not run"
	case own.Terminated.ExitCode == 0:
		candidates, where = trs.Steps[ours+1:], "after the stage, which succeeded"
	}
	for _, s := range candidates {
		if t := s.Terminated; t != nil && t.ExitCode != 0 && s.TerminationReason != reasonSkipped {
			return fmt.Sprintf("step %q of the cluster policy's Task (taskRunTemplate.task) exited with code %d %s", s.Name, t.ExitCode, where)
		}
	}
	return ""
}

// stepTerminated is how the stage's step ended: as the TaskRun records it,
// else as its pod does; nil while it has not.
func stepTerminated(trs taskRunStatus, pod *corev1.Pod) *corev1.ContainerStateTerminated {
	for _, s := range trs.Steps {
		if s.Name == stepName && s.Terminated != nil {
			return s.Terminated
		}
	}
	if pod == nil {
		return nil
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == containerName && cs.State.Terminated != nil {
			return cs.State.Terminated
		}
	}
	return nil
}

func completion(trs taskRunStatus) *time.Time {
	if t := trs.CompletionTime; t != nil {
		return ptr.To(t.Time)
	}
	return nil
}

// cancel cancels tr (spec.status TaskRunCancelled, with message as its
// spec.statusMessage), unless it has ended: Tekton then stops its pod, and
// starts none again. The patch tests tr's UID, so that it never cancels
// another TaskRun of the name. A TaskRun found gone, replaced or ended once
// the patch fails needs no cancel.
func (e *Executor) cancel(ctx context.Context, tr *unstructured.Unstructured, message string) error {
	if spec, _, _ := unstructured.NestedString(tr.Object, "spec", "status"); spec == cancelled {
		return nil
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": tr.GetUID()},
		{"op": "add", "path": "/spec/status", "value": cancelled},
		{"op": "add", "path": "/spec/statusMessage", "value": message},
	})
	if err != nil {
		return err
	}
	client := e.taskRuns(tr.GetNamespace())
	_, err = client.Patch(ctx, tr.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{})
	if err == nil || apierrors.IsNotFound(err) {
		return nil
	}
	now, gerr := client.Get(ctx, tr.GetName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(gerr):
		return nil
	case gerr != nil:
	case now.GetUID() != tr.GetUID():
		return nil
	default:
		trs, rerr := readStatus(now)
		if status, _, _ := trs.succeeded(); rerr == nil && (status == "True" || status == "False") {
			return nil
		}
	}
	return fmt.Errorf("canceling TaskRun %s/%s: %w", tr.GetNamespace(), tr.GetName(), err)
}

// Stop cancels the execution's TaskRun, then deletes its pod with grace
// as the pod's grace period: the kubelet sends SIGTERM, which Tekton's
// entrypoint passes to terrarun-executor, which passes it to terraform as
// SIGINT so that it releases its state lock, and SIGKILL after grace.
// Tekton deletes the pod of a canceled TaskRun too, with the pod's own
// grace period (Kubernetes' default, 30s; a TaskRun cannot set it): a
// longer grace is cut to that. The TaskRun is canceled first, so that
// Tekton does not start its pod again. Stopping an ended or missing
// TaskRun does nothing.
func (e *Executor) Stop(ctx context.Context, ex executor.Execution, grace time.Duration) error {
	tr, err := e.getTaskRun(ctx, ex)
	if err != nil || tr == nil {
		return err
	}
	trs, err := readStatus(tr)
	if err != nil {
		return err
	}
	if status, _, _ := trs.succeeded(); status == "True" || status == "False" {
		return nil
	}
	if err := e.cancel(ctx, tr, stopMessage); err != nil {
		return err
	}
	if trs.PodName == "" {
		return nil
	}
	pod, err := e.kube.CoreV1().Pods(tr.GetNamespace()).Get(ctx, trs.PodName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting pod %s/%s: %w", tr.GetNamespace(), trs.PodName, err)
	}
	if ref := metav1.GetControllerOf(pod); ref == nil || ref.Kind != kind || ref.UID != tr.GetUID() {
		return nil // not the TaskRun's pod
	}
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(pod.UID)}}
	if grace > 0 {
		opts.GracePeriodSeconds = ptr.To(int64(grace.Round(time.Second).Seconds()))
	}
	if err := e.kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, opts); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// Shutdown does nothing: TaskRuns run in the cluster, not in this process,
// and a later leader adopts them by their deterministic names.
func (e *Executor) Shutdown(context.Context, executor.ShutdownOptions) error { return nil }

// Forget removes the claims of a deleted run's stage pods. The run's
// ownerReferences let the host's garbage collector delete its TaskRuns and
// Secrets.
func (e *Executor) Forget(ctx context.Context, namespace, name string, uid string) error {
	return e.claims.Forget(ctx, uid)
}

// Run watches the TaskRuns and pods labeled terrarun.dev/run, in every
// namespace, and the Nodes (job.Executor.WatchNodes), and calls notify with
// the run's namespace and name whenever one changes or is deleted. It
// blocks until ctx is done, and returns an error only when a cache cannot
// sync, such as when Tekton's CRDs are not installed.
func (e *Executor) Run(ctx context.Context, notify executor.Notifier) error {
	tweak := func(o *metav1.ListOptions) { o.LabelSelector = job.LabelRun }
	handle := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		m, err := metaOf(obj)
		if err != nil {
			return
		}
		label, ok := m.GetLabels()[job.LabelRun]
		if !ok {
			return
		}
		name := m.GetAnnotations()[job.AnnotationRunName]
		if name == "" {
			name = label
		}
		notify(m.GetNamespace(), name)
	}
	handlers := cache.ResourceEventHandlerFuncs{AddFunc: handle, UpdateFunc: func(_, obj any) { handle(obj) }, DeleteFunc: handle}

	trs := dynamicinformer.NewFilteredDynamicSharedInformerFactory(e.dyn, 0, metav1.NamespaceAll, tweak)
	if _, err := trs.ForResource(TaskRuns).Informer().AddEventHandler(handlers); err != nil {
		return fmt.Errorf("watching TaskRuns: %w", err)
	}
	// A pod gone (deleted, evicted) changes its TaskRun only once Tekton
	// has seen it; the run looks at once.
	pods := informers.NewSharedInformerFactoryWithOptions(e.kube, 0, informers.WithTweakListOptions(tweak))
	if _, err := pods.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: handle}); err != nil {
		return fmt.Errorf("watching pods: %w", err)
	}
	trs.Start(ctx.Done())
	defer trs.Shutdown()
	pods.Start(ctx.Done())
	defer pods.Shutdown()
	for typ, ok := range trs.WaitForCacheSync(ctx.Done()) {
		if !ok && ctx.Err() == nil {
			return fmt.Errorf("syncing the %v cache failed: are Tekton Pipelines' CRDs installed (TaskRuns of tekton.dev/v1), and may terrarun list and watch them?", typ)
		}
	}
	for typ, ok := range pods.WaitForCacheSync(ctx.Done()) {
		if !ok && ctx.Err() == nil {
			return fmt.Errorf("syncing the %v cache failed", typ)
		}
	}
	return e.jobs.WatchNodes(ctx, notify)
}

// metaOf is the object metadata of a watched TaskRun or pod.
func metaOf(obj any) (metav1.Object, error) {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		return o, nil
	case *corev1.Pod:
		return o, nil
	}
	return nil, errors.New("not a TaskRun or pod")
}
