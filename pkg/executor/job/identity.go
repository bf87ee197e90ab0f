package job

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/executor/auth"
)

// IdentityResolver maps the user of a pod-bound service-account token (the
// projected token of an executor pod) to the stage execution whose Job
// created that pod. It implements auth.Resolver.
//
// A request is from an executor when its user is a service account and
// carries the pod-name and pod-uid extras of a pod-bound token, and that pod
// is labeled terrarun.dev/run. The claim then holds only when the pod still
// exists with that UID and runs as that service account, and it is controlled
// by the Job JobName(run, stage, attempt) of its labels, which exists with that
// UID, carries the same run-uid label and is controlled by the run.
//
// Anyone allowed to create pods in a namespace can run them as any service
// account of the namespace, and can copy labels and ownerReferences; what no
// one can forge is the Job itself, which the Job name and UID checks pin.
//
// With keys, each request must also carry its stage attempt's key
// (ProveRequest), which a token minted for the pod does not.
type IdentityResolver struct {
	client kubernetes.Interface
	keys   *StageKeys
}

var (
	_ auth.Resolver      = (*IdentityResolver)(nil)
	_ auth.RequestProver = (*IdentityResolver)(nil)
)

// NewIdentityResolver returns a resolver that reads pods and Jobs with
// client, and asks for the stage key derived from keys, when not nil.
func NewIdentityResolver(client kubernetes.Interface, keys *StageKeys) *IdentityResolver {
	return &IdentityResolver{client: client, keys: keys}
}

// ExecutorIdentity returns the stage execution whose pod holds u's token. It
// returns false and no error when u makes no claim to be an executor (not a
// pod-bound service-account token, or a pod without the terrarun.dev/run
// label), and an error wrapping auth.ErrRejected when the claim fails.
func (r *IdentityResolver) ExecutorIdentity(ctx context.Context, u user.Info) (executor.Identity, bool, error) {
	pod, serviceAccount, err := TokenPod(ctx, r.client, u)
	if err != nil || pod == nil {
		return executor.Identity{}, false, err
	}
	id, ok, err := PodIdentity(pod, serviceAccount)
	if err != nil || !ok {
		return executor.Identity{}, false, err
	}
	namespace, podName := pod.Namespace, pod.Name
	reject := func(format string, args ...any) (executor.Identity, bool, error) {
		return executor.Identity{}, false, fmt.Errorf("%w: pod %s/%s: %s", auth.ErrRejected, namespace, podName, fmt.Sprintf(format, args...))
	}
	runName, runUID, stageName, attempt := id.Name, id.UID, id.Stage, id.Attempt

	jobName := JobName(runName, stageName, attempt)
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.APIVersion != "batch/v1" || ref.Kind != "Job" || ref.Name != jobName {
		return reject("is not controlled by Job %s", jobName)
	}
	job, err := r.client.BatchV1().Jobs(namespace).Get(ctx, jobName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return reject("Job %s not found", jobName)
	}
	if err != nil {
		return executor.Identity{}, false, fmt.Errorf("getting Job %s/%s: %w", namespace, jobName, err)
	}
	if job.UID != ref.UID {
		return reject("is controlled by Job UID %s, Job %s has UID %s", ref.UID, jobName, job.UID)
	}
	if job.Labels[LabelRunUID] != runUID {
		return reject("label %s=%s, Job %s has %q", LabelRunUID, runUID, jobName, job.Labels[LabelRunUID])
	}
	owner := metav1.GetControllerOf(job)
	if owner == nil || owner.APIVersion != v1alpha1.SchemeGroupVersion.String() || owner.Kind != "TerraformRun" ||
		owner.Name != runName || string(owner.UID) != runUID {
		return reject("Job %s is not controlled by TerraformRun %s (UID %s)", jobName, runName, runUID)
	}
	return id, true, nil
}

// TokenPod is the pod that u's token is bound to, and the token's service
// account: nil and no error when u is not the user of a pod-bound
// service-account token, an error wrapping auth.ErrRejected when that pod
// no longer exists or has another UID.
func TokenPod(ctx context.Context, client kubernetes.Interface, u user.Info) (*corev1.Pod, string, error) {
	if u == nil {
		return nil, "", nil
	}
	namespace, serviceAccount, err := serviceaccount.SplitUsername(u.GetName())
	if err != nil {
		return nil, "", nil
	}
	podName, podUID := single(u.GetExtra()[serviceaccount.PodNameKey]), single(u.GetExtra()[serviceaccount.PodUIDKey])
	if podName == "" || podUID == "" {
		// Not a pod-bound token.
		return nil, "", nil
	}
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, podName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, "", fmt.Errorf("%w: pod %s/%s: not found", auth.ErrRejected, namespace, podName)
	}
	if err != nil {
		return nil, "", fmt.Errorf("getting pod %s/%s: %w", namespace, podName, err)
	}
	if string(pod.UID) != podUID {
		return nil, "", fmt.Errorf("%w: pod %s/%s: the token is bound to pod UID %s, the pod's UID is %s", auth.ErrRejected, namespace, podName, podUID, pod.UID)
	}
	return pod, serviceAccount, nil
}

// PodIdentity is the stage execution that pod, whose token of service
// account serviceAccount made a request, claims to be by its labels and
// annotations: false and no error when it is no executor's pod (no
// terrarun.dev/run label), an error wrapping auth.ErrRejected when its claim
// is malformed or it runs as another service account. What the claim is
// worth is for the caller to check: the object (Job or TaskRun) that
// controls the pod, and that object's owner.
func PodIdentity(pod *corev1.Pod, serviceAccount string) (executor.Identity, bool, error) {
	reject := func(format string, args ...any) (executor.Identity, bool, error) {
		return executor.Identity{}, false, fmt.Errorf("%w: pod %s/%s: %s", auth.ErrRejected, pod.Namespace, pod.Name, fmt.Sprintf(format, args...))
	}
	runLabel, ok := pod.Labels[LabelRun]
	if !ok {
		// A pod, but not an executor's.
		return executor.Identity{}, false, nil
	}
	if sa := pod.Spec.ServiceAccountName; sa != serviceAccount && !(sa == "" && serviceAccount == "default") {
		return reject("runs as service account %q, the token is of %q", pod.Spec.ServiceAccountName, serviceAccount)
	}
	runName := pod.Annotations[AnnotationRunName]
	if runName == "" {
		runName = runLabel
	}
	if runLabelValue(runName) != runLabel {
		return reject("label %s=%q does not match run %q", LabelRun, runLabel, runName)
	}
	runUID := pod.Labels[LabelRunUID]
	if runUID == "" {
		return reject("no label %s", LabelRunUID)
	}
	stageName := v1alpha1.StageName(pod.Labels[LabelStage])
	if stageName != v1alpha1.StagePlan && stageName != v1alpha1.StageApply {
		return reject("label %s=%q is not a stage", LabelStage, stageName)
	}
	attempt, err := strconv.ParseInt(pod.Labels[LabelAttempt], 10, 32)
	if err != nil || attempt < 1 {
		return reject("label %s=%q is not an attempt", LabelAttempt, pod.Labels[LabelAttempt])
	}
	return executor.Identity{Namespace: pod.Namespace, Name: runName, UID: runUID, Stage: stageName, Attempt: int32(attempt)}, true, nil
}

// single returns the only value of an extra, or "".
func single(values []string) string {
	if len(values) != 1 {
		return ""
	}
	return values[0]
}
