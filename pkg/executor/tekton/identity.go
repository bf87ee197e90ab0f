package tekton

import (
	"context"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/executor/auth"
	"github.com/terrarun/terrarun/pkg/executor/job"
)

// IdentityResolver maps the user of a pod-bound service-account token (the
// projected token of a TaskRun's pod) to the stage execution whose TaskRun
// created that pod. It implements auth.Resolver, and, as the Job executor's
// resolver does, auth.RequestProver: each request must also carry its stage
// attempt's key.
//
// The claim holds only when the pod still exists with the token's UID and
// runs as its service account (job.TokenPod, job.PodIdentity), bears the
// name Tekton gives the pod of the TaskRun JobName(run, stage, attempt) of
// its labels (PodName) and is controlled by that TaskRun, which exists with
// that UID, names no other pod, carries the same run-uid label and is
// controlled by the run; and, once the request proved its stage key, when
// it is the attempt's first pod to speak (Claims): Tekton starts a
// TaskRun's pod again when it is gone, and that second pod must never run
// the stage a second time. Only a proven request claims: a token minted
// for a pending pod, without the key, claims nothing.
type IdentityResolver struct {
	keys   *job.IdentityResolver // ProveRequest: the stage key
	kube   kubernetes.Interface
	dyn    dynamic.Interface
	claims *Claims
}

var (
	_ auth.Resolver      = (*IdentityResolver)(nil)
	_ auth.RequestProver = (*IdentityResolver)(nil)
)

// NewIdentityResolver returns a resolver that reads pods with kube and
// TaskRuns with dyn, asks for the stage key derived from keys (when not
// nil), and records each attempt's pod in claims.
func NewIdentityResolver(kube kubernetes.Interface, dyn dynamic.Interface, keys *job.StageKeys, claims *Claims) *IdentityResolver {
	return &IdentityResolver{keys: job.NewIdentityResolver(kube, keys), kube: kube, dyn: dyn, claims: claims}
}

// ExecutorIdentity returns the stage execution whose TaskRun's pod holds
// u's token. It returns false and no error when u makes no claim to be an
// executor, and an error wrapping auth.ErrRejected when the claim fails.
// It records nothing: ProveRequest claims the attempt.
func (r *IdentityResolver) ExecutorIdentity(ctx context.Context, u user.Info) (executor.Identity, bool, error) {
	pod, serviceAccount, err := job.TokenPod(ctx, r.kube, u)
	if err != nil || pod == nil {
		return executor.Identity{}, false, err
	}
	id, ok, err := job.PodIdentity(pod, serviceAccount)
	if err != nil || !ok {
		return executor.Identity{}, false, err
	}
	reject := func(format string, args ...any) (executor.Identity, bool, error) {
		return executor.Identity{}, false, fmt.Errorf("%w: pod %s/%s: %s", auth.ErrRejected, pod.Namespace, pod.Name, fmt.Sprintf(format, args...))
	}
	name := job.JobName(id.Name, id.Stage, id.Attempt)
	if pod.Name != PodName(name) {
		return reject("is not the pod Tekton names for TaskRun %s (%s)", name, PodName(name))
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.APIVersion != apiVersion || ref.Kind != kind || ref.Name != name {
		return reject("is not controlled by TaskRun %s", name)
	}
	tr, err := r.dyn.Resource(TaskRuns).Namespace(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return reject("TaskRun %s not found", name)
	}
	if err != nil {
		return executor.Identity{}, false, fmt.Errorf("getting TaskRun %s/%s: %w", pod.Namespace, name, err)
	}
	if tr.GetUID() != ref.UID {
		return reject("is controlled by TaskRun UID %s, TaskRun %s has UID %s", ref.UID, name, tr.GetUID())
	}
	if podName, _, _ := unstructured.NestedString(tr.Object, "status", "podName"); podName != "" && podName != pod.Name {
		return reject("TaskRun %s runs pod %s", name, podName)
	}
	if got := tr.GetLabels()[job.LabelRunUID]; got != id.UID {
		return reject("label %s=%s, TaskRun %s has %q", job.LabelRunUID, id.UID, name, got)
	}
	owner := metav1.GetControllerOfNoCopy(tr)
	if owner == nil || owner.APIVersion != v1alpha1.SchemeGroupVersion.String() || owner.Kind != "TerraformRun" ||
		owner.Name != id.Name || string(owner.UID) != id.UID {
		return reject("TaskRun %s is not controlled by TerraformRun %s (UID %s)", name, id.Name, id.UID)
	}
	return id, true, nil
}

// ProveRequest implements auth.RequestProver: req carries the key of id's
// stage attempt (job.IdentityResolver.ProveRequest), and then the pod of
// u's token is the attempt's, the first that proved it, recorded now when
// none did before.
func (r *IdentityResolver) ProveRequest(req *http.Request, u user.Info, id executor.Identity) error {
	if err := r.keys.ProveRequest(req, u, id); err != nil {
		return err
	}
	podUID := u.GetExtra()[serviceaccount.PodUIDKey]
	if len(podUID) != 1 || podUID[0] == "" {
		return fmt.Errorf("%w: the token of the %s stage of run %s/%s is bound to no pod", auth.ErrRejected, id.Stage, id.Namespace, id.Name)
	}
	first, err := r.claims.Claim(req.Context(), id, podUID[0])
	if err != nil {
		return err
	}
	if !first {
		name := job.JobName(id.Name, id.Stage, id.Attempt)
		return fmt.Errorf("%w: pod %s/%s (UID %s) is not the first pod of TaskRun %s: Tekton started it again after the first was gone, and a stage never runs twice",
			auth.ErrRejected, id.Namespace, PodName(name), podUID[0], name)
	}
	return nil
}
