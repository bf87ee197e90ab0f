package job

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/stage"
)

// jobNameLabel is set by the Job controller on the pods of a Job.
const jobNameLabel = batchv1.JobNameLabel // "batch.kubernetes.io/job-name"

// Executor runs each stage execution as a Job in the run's namespace. It
// implements executor.Executor.
type Executor struct {
	client kubernetes.Interface
	opts   JobOptions
	// nodes, once Run has synced its Node cache, is where Status reads the
	// nodes of running pods (a corev1listers.NodeLister); before, it asks
	// the API.
	nodes atomic.Value
}

var _ executor.Executor = (*Executor)(nil)

// NewExecutor returns an executor that creates Jobs with client, built with
// opts.
func NewExecutor(client kubernetes.Interface, opts JobOptions) *Executor {
	return &Executor{client: client, opts: opts.withDefaults()}
}

// Name implements executor.Executor: the Job's name.
func (e *Executor) Name(ex executor.Execution) string {
	return JobName(ex.Run.Name, ex.Stage, ex.Attempt)
}

// Start creates what the stage mounts (Prepare), then the Job. The Job may
// already exist, from an earlier Start of the same execution (a retried
// reconcile, another replica): it is adopted when its terrarun.dev/run-uid
// label is the run's UID and its content is what Start builds (checkJob),
// and an error otherwise. When the API server refuses the Job for good,
// the stage Secret goes again (Unprepare), so that the attempt is not
// taken for lost. Start returns the Job's name.
func (e *Executor) Start(ctx context.Context, ex executor.Execution) (string, error) {
	job, secret, err := e.Prepare(ctx, ex)
	if err != nil {
		return "", err
	}
	if _, err := e.client.BatchV1().Jobs(job.Namespace).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			exists := func(ctx context.Context) (bool, error) {
				_, err := e.client.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return false, nil
				}
				return err == nil, err
			}
			return "", e.Unprepare(ctx, secret, exists, fmt.Errorf("creating Job %s/%s: %w", job.Namespace, job.Name, err))
		}
		existing, err := e.client.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("getting existing Job %s/%s: %w", job.Namespace, job.Name, err)
		}
		if err := checkJob(existing, job, secret, ex.Run); err != nil {
			return "", err
		}
	}
	return job.Name, nil
}

// Prepare builds the execution's Job (BuildJob) and creates what its pod
// mounts: the claim of the plugin cache of the run's creator when there is
// none (JobOptions.PluginCache), the inputs Secret, and the stage Secret,
// last. A Secret of its name may already exist, from an earlier Start of
// the same execution: it is adopted when its terrarun.dev/run-uid label is
// the run's UID and it holds exactly what Prepare builds (checkSecret), and
// an error otherwise. It returns the Job, not created, and the stage
// Secret: the Job executor creates the Job, the Tekton executor runs its
// pod template as a TaskRun.
func (e *Executor) Prepare(ctx context.Context, ex executor.Execution) (*batchv1.Job, *corev1.Secret, error) {
	job, secret, err := BuildJob(ex, e.opts)
	if err != nil {
		return nil, nil, err
	}
	if err := e.ensurePluginCache(ctx, ex.Run); err != nil {
		return nil, nil, err
	}
	uid := string(ex.Run.UID)
	inputs, err := inputsSecret(ex, secret)
	if err != nil {
		return nil, nil, err
	}
	if inputs != nil {
		if _, err := e.createSecret(ctx, inputs, uid); err != nil {
			return nil, nil, err
		}
	}
	created, err := e.createSecret(ctx, secret, uid)
	if err != nil {
		return nil, nil, err
	}
	// The UID of the stage Secret this call created, for Unprepare; empty
	// when it adopted one.
	secret.UID = created
	return job, secret, nil
}

// Unprepare is what Start does when creating the stage's Job or TaskRun
// failed with err: when the API server refused it for good (a denial, an
// invalid object, an admission webhook that failed), and it does not
// exist (exists: created meanwhile by another replica, it is the stage's),
// it deletes the stage Secret that this Prepare created (secret, with its
// UID as the precondition; one adopted from an earlier Start, whose UID
// Prepare leaves empty, stays), so that the attempt reads as never started
// (Missing) rather than lost, and starts again. It returns err, with what
// the deletion said when it failed.
func (e *Executor) Unprepare(ctx context.Context, secret *corev1.Secret, exists func(context.Context) (bool, error), err error) error {
	if !refused(err) || secret.UID == "" {
		return err
	}
	if there, xerr := exists(ctx); xerr != nil || there {
		return err
	}
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(secret.UID)}}
	if derr := e.client.CoreV1().Secrets(secret.Namespace).Delete(ctx, secret.Name, opts); derr != nil && !apierrors.IsNotFound(derr) && !apierrors.IsConflict(derr) {
		return fmt.Errorf("%w; deleting its stage Secret %s/%s: %v", err, secret.Namespace, secret.Name, derr)
	}
	return err
}

// refused reports whether err, of a create, says that the object was not
// created and that no retry of the same request creates it now: a 4xx
// answer other than a conflict, a timeout or throttling, or an admission
// webhook that could not be called (which kube-apiserver answers with a
// 500 before anything is stored). A timeout or a lost connection says
// nothing of whether the object exists.
func refused(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	s := status.Status()
	switch {
	case s.Code == http.StatusInternalServerError:
		return strings.Contains(s.Message, "failed calling webhook")
	case s.Code >= 400 && s.Code < 500:
		return s.Code != http.StatusConflict && s.Code != http.StatusRequestTimeout && s.Code != http.StatusTooManyRequests
	}
	return false
}

// createSecret creates secret, or adopts the one of its name that holds
// exactly what it holds (checkSecret). It returns the UID of the Secret it
// created, "" when it adopted one.
func (e *Executor) createSecret(ctx context.Context, secret *corev1.Secret, uid string) (types.UID, error) {
	created, err := e.client.CoreV1().Secrets(secret.Namespace).Create(ctx, secret, metav1.CreateOptions{})
	if err == nil {
		return created.UID, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating Secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	existing, err := e.client.CoreV1().Secrets(secret.Namespace).Get(ctx, secret.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("getting existing Secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	return "", checkSecret(existing, secret, uid)
}

// getJob returns the execution's Job, nil when there is none, and an error
// when the Job of its name is not the one Start builds: the state of a Job
// that someone put in its place says nothing about the stage.
func (e *Executor) getJob(ctx context.Context, ex executor.Execution) (*batchv1.Job, error) {
	if ex.Run == nil {
		return nil, fmt.Errorf("no run")
	}
	built, secret, err := BuildJob(ex, e.opts)
	if err != nil {
		return nil, err
	}
	name := built.Name
	job, err := e.client.BatchV1().Jobs(ex.Run.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("getting Job %s/%s: %w", ex.Run.Namespace, name, err)
	}
	if err := checkJob(job, built, secret, ex.Run); err != nil {
		return nil, err
	}
	return job, nil
}

// Status maps the Job's Complete and Failed conditions, and the executor
// container's termination, to an executor.Status. A Job that does not exist
// (never started, deleted by Stop, or cleaned up after its TTL) is
// StateUnknown. While running, Reason and Message report why the container
// is waiting (ImagePullBackOff, CreateContainerConfigError for a missing
// Secret, ...).
func (e *Executor) Status(ctx context.Context, ex executor.Execution) (executor.Status, error) {
	job, err := e.getJob(ctx, ex)
	var forged *forgedError
	if errors.As(err, &forged) {
		return executor.Status{State: executor.StateUnknown, Name: forged.name, Reason: executor.ReasonForged, Message: err.Error()}, nil
	}
	if err != nil {
		return executor.Status{}, err
	}
	if job == nil {
		return e.Missing(ctx, ex, "Job")
	}
	st := executor.Status{State: executor.StateRunning, Name: job.Name}
	if t := job.Status.StartTime; t != nil {
		st.StartTime = ptr.To(t.Time)
	}
	pod, err := e.latestPod(ctx, job)
	if err != nil {
		return executor.Status{}, err
	}
	cs := containerStatus(pod)
	var terminated *corev1.ContainerStateTerminated
	if cs != nil {
		terminated = cs.State.Terminated
		if terminated == nil {
			terminated = cs.LastTerminationState.Terminated
		}
	}
	if terminated != nil {
		st.ExitCode = ptr.To(terminated.ExitCode)
	}

	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			st.State = executor.StateSucceeded
			st.Reason = executor.ReasonCompleted
			if st.ExitCode == nil {
				st.ExitCode = ptr.To[int32](0)
			}
			st.CompletionTime = completionTime(job, c)
			return st, nil
		case batchv1.JobFailed:
			if terminated == nil && c.Reason != batchv1.JobReasonDeadlineExceeded {
				// The pod ended without its container ever ending: deleted
				// (evicted from a node that stopped reporting) or rejected by
				// its node. What it did, if anything, is unknown.
				return executor.Status{State: executor.StateUnknown, Name: job.Name, Reason: executor.ReasonExecutorLost,
					Message: fmt.Sprintf("Job %s/%s failed before its container ended (%s: %s)", job.Namespace, job.Name, c.Reason, c.Message)}, nil
			}
			st.State = executor.StateFailed
			st.Reason, st.Message = c.Reason, c.Message
			switch {
			case c.Reason == batchv1.JobReasonDeadlineExceeded:
				// The stage timed out (activeDeadlineSeconds is StageTimeout),
				// whatever the container did.
				st.Reason = executor.ReasonDeadlineExceeded
			case terminated != nil && terminated.Reason != "" && terminated.Reason != executor.ReasonError && terminated.Reason != executor.ReasonCompleted:
				// OOMKilled, ContainerCannotRun, ...
				st.Reason = terminated.Reason
				if terminated.Message != "" {
					st.Message = terminated.Message
				}
			case terminated != nil && terminated.ExitCode == stage.ExitForged:
				// terrarun-executor found that what it was handed is not what
				// terrarun wrote (a stage Secret replaced under its name): it
				// ran nothing, and the stage is not trusted.
				return executor.Status{State: executor.StateUnknown, Name: job.Name, Reason: executor.ReasonForged,
					Message: fmt.Sprintf("its executor refused to run it: %s", terminated.Message)}, nil
			case terminated != nil && terminated.ExitCode != 0:
				st.Reason = executor.ReasonError
				st.Message = fmt.Sprintf("terrarun-executor exited with code %d", terminated.ExitCode)
				if terminated.Message != "" {
					// terrarun-executor's termination message: why.
					st.Message += ": " + terminated.Message
				}
			}
			if st.Reason == "" {
				st.Reason = executor.ReasonFailed
			}
			st.CompletionTime = completionTime(job, c)
			return st, nil
		}
	}
	if st.Reason, st.Message, err = e.Waiting(ctx, pod, ContainerName); err != nil {
		return executor.Status{}, err
	}
	if pod != nil && terminated == nil {
		lost, recheck, err := e.nodeLost(ctx, pod)
		if err != nil {
			return executor.Status{}, err
		}
		if lost != "" {
			return executor.Status{State: executor.StateUnknown, Name: job.Name, Reason: executor.ReasonExecutorLost, Message: lost}, nil
		}
		st.Recheck = recheck
	}
	return st, nil
}

// Missing is the status of an execution whose object (its Job, or the
// TaskRun of kind) does not exist. Prepare creates the stage Secret before
// that object: with the Secret present the object existed, or was being
// created, and is gone (deleted, or removed by its TTL). Reporting it lost,
// rather than not started, keeps the controller from ever starting an apply
// a second time.
func (e *Executor) Missing(ctx context.Context, ex executor.Execution, kind string) (executor.Status, error) {
	_, built, err := BuildJob(ex, e.opts)
	if err != nil {
		return executor.Status{}, err
	}
	name := JobName(ex.Run.Name, ex.Stage, ex.Attempt)
	secret, err := e.client.CoreV1().Secrets(ex.Run.Namespace).Get(ctx, built.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return executor.Status{State: executor.StateUnknown, Name: name, Reason: executor.ReasonNotStarted}, nil
	case err != nil:
		return executor.Status{}, err
	}
	if err := checkSecret(secret, built, string(ex.Run.UID)); err != nil {
		return executor.Status{State: executor.StateUnknown, Name: name, Reason: executor.ReasonForged, Message: err.Error()}, nil
	}
	return executor.Status{State: executor.StateUnknown, Name: name, Reason: executor.ReasonExecutorLost,
		Message: fmt.Sprintf("%s %s/%s no longer exists", kind, ex.Run.Namespace, name)}, nil
}

// Waiting says why container of pod, which has not ended, waits: the
// kubelet's reason (ImagePullBackOff, CreateContainerConfigError, ...), or
// VolumeNotFound naming a Secret or ConfigMap the pod mounts that does not
// exist; "" when it does not wait, or only to be created.
func (e *Executor) Waiting(ctx context.Context, pod *corev1.Pod, container string) (reason, message string, err error) {
	if pod == nil {
		return "", "", nil
	}
	cs := podContainerStatus(pod, container)
	if cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason != "ContainerCreating" && cs.State.Waiting.Reason != "PodInitializing" {
		return cs.State.Waiting.Reason, cs.State.Waiting.Message, nil
	}
	if pod.Status.Phase == corev1.PodPending && (cs == nil || cs.State.Waiting != nil) {
		// The kubelet retries a mount of a Secret or ConfigMap that does not
		// exist, and only its Events say so: say it here, with the name.
		msg, err := e.missingVolume(ctx, pod)
		if err != nil || msg == "" {
			return "", "", err
		}
		return reasonVolumeNotFound, msg, nil
	}
	return "", "", nil
}

// NodeLost says whether pod, whose stage has not ended, went with its node
// (nodeLost), and when to look again when its node is silent but not yet
// for long enough.
func (e *Executor) NodeLost(ctx context.Context, pod *corev1.Pod) (lost string, recheck time.Duration, err error) {
	return e.nodeLost(ctx, pod)
}

// nodeLost says whether pod went with its node: the node is gone, or has not
// reported for NodeLostAfter (its Ready condition is Unknown: the kubelet
// stopped posting status). Its message names the pod and the node. While the
// node is silent for less than that, recheck is the time left.
func (e *Executor) nodeLost(ctx context.Context, pod *corev1.Pod) (lost string, recheck time.Duration, err error) {
	name := pod.Spec.NodeName
	if name == "" {
		return "", 0, nil
	}
	var node *corev1.Node
	if nodes, ok := e.nodes.Load().(corev1listers.NodeLister); ok {
		node, err = nodes.Get(name)
	} else {
		node, err = e.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("pod %s ran on node %s, which no longer exists", pod.Name, name), 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("getting node %s of pod %s/%s: %w", name, pod.Namespace, pod.Name, err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady || c.Status != corev1.ConditionUnknown {
			continue
		}
		silent := time.Since(c.LastTransitionTime.Time)
		if silent < e.opts.NodeLostAfter {
			return "", e.opts.NodeLostAfter - silent, nil
		}
		return fmt.Sprintf("pod %s ran on node %s, which stopped reporting at %s (%s)",
			pod.Name, name, c.LastTransitionTime.UTC().Format(time.RFC3339), c.Message), 0, nil
	}
	return "", 0, nil
}

func completionTime(job *batchv1.Job, c batchv1.JobCondition) *time.Time {
	if t := job.Status.CompletionTime; t != nil {
		return ptr.To(t.Time)
	}
	if !c.LastTransitionTime.IsZero() {
		return ptr.To(c.LastTransitionTime.Time)
	}
	return nil
}

// latestPod returns the newest pod of job (there is one: backoffLimit is 0),
// or nil.
func (e *Executor) latestPod(ctx context.Context, job *batchv1.Job) (*corev1.Pod, error) {
	pods, err := e.jobPods(ctx, job)
	if err != nil || len(pods) == 0 {
		return nil, err
	}
	sort.Slice(pods, func(i, j int) bool {
		return pods[j].CreationTimestamp.Before(&pods[i].CreationTimestamp)
	})
	return &pods[0], nil
}

// jobPods lists the pods of job: those with its job-name label that it controls.
func (e *Executor) jobPods(ctx context.Context, job *batchv1.Job) ([]corev1.Pod, error) {
	list, err := e.client.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{jobNameLabel: job.Name}).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing pods of Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == "Job" && ref.Name == job.Name && (job.UID == "" || ref.UID == job.UID) {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

// reasonVolumeNotFound: the stage's pod waits for a Secret or ConfigMap
// that it mounts and that does not exist.
const reasonVolumeNotFound = "VolumeNotFound"

// missingVolume says which Secret or ConfigMap that pod mounts does not
// exist, or "".
func (e *Executor) missingVolume(ctx context.Context, pod *corev1.Pod) (string, error) {
	for _, v := range pod.Spec.Volumes {
		var err error
		var kind, name string
		switch {
		case v.Secret != nil && (v.Secret.Optional == nil || !*v.Secret.Optional):
			kind, name = "Secret", v.Secret.SecretName
			_, err = e.client.CoreV1().Secrets(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		case v.ConfigMap != nil && (v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional):
			kind, name = "ConfigMap", v.ConfigMap.Name
			_, err = e.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		default:
			continue
		}
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Sprintf("%s %s/%s not found: the stage waits until it exists (create it, or correct the run's reference to it; the pod mounts it as volume %s)",
				kind, pod.Namespace, name, v.Name), nil
		case err != nil:
			return "", fmt.Errorf("reading %s %s/%s of pod %s: %w", kind, pod.Namespace, name, pod.Name, err)
		}
	}
	return "", nil
}

func containerStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	return podContainerStatus(pod, ContainerName)
}

// podContainerStatus is the status of pod's container name, or nil.
func podContainerStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	if pod == nil {
		return nil
	}
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == name {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// Stop deletes the execution's Job (propagation Background) and its pods,
// with grace as the pods' grace period: the kubelet sends SIGTERM, which
// terrarun-executor forwards to terraform as SIGINT so that it releases its
// state lock, and SIGKILL after grace. A zero or negative grace means the
// pod's terminationGracePeriodSeconds (JobOptions.GracePeriod). Stopping a
// finished or missing Job does nothing.
func (e *Executor) Stop(ctx context.Context, ex executor.Execution, grace time.Duration) error {
	job, err := e.getJob(ctx, ex)
	if err != nil || job == nil {
		return err
	}
	if finished(job) {
		return nil
	}
	var gracePeriod *int64
	if grace > 0 {
		gracePeriod = ptr.To(seconds(grace))
	}
	// Pods are deleted explicitly: the garbage collector deletes the
	// dependents of a deleted Job with their default grace period, not ours.
	pods, err := e.jobPods(ctx, job)
	if err != nil {
		return err
	}
	err = e.client.BatchV1().Jobs(job.Namespace).Delete(ctx, job.Name, metav1.DeleteOptions{
		PropagationPolicy:  ptr.To(metav1.DeletePropagationBackground),
		GracePeriodSeconds: gracePeriod,
		Preconditions:      uidPrecondition(job.UID),
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	for _, p := range pods {
		err := e.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: gracePeriod,
			Preconditions:      uidPrecondition(p.UID),
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return nil
}

func uidPrecondition(uid types.UID) *metav1.Preconditions {
	if uid == "" {
		return nil
	}
	return &metav1.Preconditions{UID: ptr.To(uid)}
}

func finished(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// Shutdown does nothing: Jobs run in the cluster, not in this process, and a
// later leader adopts them by their deterministic names.
func (e *Executor) Shutdown(context.Context, executor.ShutdownOptions) error { return nil }

// Forget does nothing: the run's ownerReferences let the host's garbage
// collector delete its Jobs and Secrets, and ttlSecondsAfterFinished removes
// finished Jobs in any case.
func (e *Executor) Forget(ctx context.Context, namespace, name string, uid string) error {
	return nil
}

// Run watches the Jobs labeled terrarun.dev/run, in every namespace, and
// calls notify with the run's namespace and name whenever one is added,
// changes or is deleted. It blocks until ctx is done, and returns an error
// only when the informer cache cannot sync.
func (e *Executor) Run(ctx context.Context, notify executor.Notifier) error {
	factory := informers.NewSharedInformerFactoryWithOptions(e.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelRun }))
	informer := factory.Batch().V1().Jobs().Informer()
	handle := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		job, ok := obj.(*batchv1.Job)
		if !ok {
			return
		}
		if _, ok := job.Labels[LabelRun]; !ok {
			return
		}
		name := job.Annotations[AnnotationRunName]
		if name == "" {
			name = job.Labels[LabelRun]
		}
		notify(job.Namespace, name)
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
		DeleteFunc: handle,
	}); err != nil {
		return fmt.Errorf("watching Jobs: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok && ctx.Err() == nil {
			return fmt.Errorf("syncing the %v cache failed", typ)
		}
	}
	return e.WatchNodes(ctx, notify)
}

// WatchNodes watches the Nodes until ctx is done: a node that stops
// reporting, or is deleted, changes no Job or TaskRun, so the runs with an
// executor pod on it are told (notify), and look again after NodeLostAfter
// (Status.Recheck). Once its cache has synced, NodeLost reads nodes from it.
// It returns an error only when the cache cannot sync.
func (e *Executor) WatchNodes(ctx context.Context, notify executor.Notifier) error {
	nodes := informers.NewSharedInformerFactory(e.client, 0)
	silent := func(obj any) bool {
		node, ok := obj.(*corev1.Node)
		if !ok {
			return true // a deleted node's final state unknown
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionUnknown
			}
		}
		return false
	}
	nodeChanged := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if node, ok := obj.(*corev1.Node); ok {
			e.notifyNode(ctx, node.Name, notify)
		}
	}
	nodeInformer := nodes.Core().V1().Nodes()
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj any) {
			if silent(obj) && !silent(old) {
				nodeChanged(obj)
			}
		},
		DeleteFunc: nodeChanged,
	}); err != nil {
		return fmt.Errorf("watching Nodes: %w", err)
	}
	nodes.Start(ctx.Done())
	defer nodes.Shutdown()
	for typ, ok := range nodes.WaitForCacheSync(ctx.Done()) {
		if !ok && ctx.Err() == nil {
			return fmt.Errorf("syncing the %v cache failed", typ)
		}
	}
	if ctx.Err() == nil {
		e.nodes.Store(nodeInformer.Lister())
	}
	<-ctx.Done()
	return nil
}

// notifyNode notifies the runs that have an executor pod on node.
func (e *Executor) notifyNode(ctx context.Context, node string, notify executor.Notifier) {
	pods, err := e.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		LabelSelector: LabelRun,
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing the executor pods of a node that stopped reporting", "node", node)
		return
	}
	for _, p := range pods.Items {
		name := p.Annotations[AnnotationRunName]
		if name == "" {
			name = p.Labels[LabelRun]
		}
		notify(p.Namespace, name)
	}
}
