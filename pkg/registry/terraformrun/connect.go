package terraformrun

import (
	"context"
	"errors"
	"fmt"
	"k8s.io/apimachinery/pkg/api/meta"
	"net/http"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/pkg/artifacts/objectstore"
)

// connectBase is shared by the plan, logs and outputs subresources: they are
// rest.Connecters, like pods/exec, because they stream bytes rather than
// objects. GET is authorized as verb get and POST as verb create on the
// subresource, so RBAC sees each one separately; a POST is a write of the
// run's current stage executor.
//
// The generic handler decodes the query into the options type that
// NewConnectOptions returns, answering 400 when it does not parse. Connect
// then validates the options, loads the run and checks the executor, and
// returns those errors to the handler; errors met while serving are written
// with the rest.Responder that Connect was given.
type connectBase struct {
	status    statusWriter
	artifacts Artifacts
	waiters   *waiters
}

// New returns an empty run: the subresource has no object of its own.
func (b *connectBase) New() runtime.Object { return &terrarun.TerraformRun{} }

// Destroy does nothing.
func (b *connectBase) Destroy() {}

// ConnectMethods are GET (read) and POST (the executor's writes).
func (b *connectBase) ConnectMethods() []string { return []string{http.MethodGet, http.MethodPost} }

// isUpload says whether the request being connected is a POST, the
// executor's write, rather than a GET. Connect is not given the request, so
// this reads the verb of its RequestInfo: create for POST, get for GET.
func isUpload(ctx context.Context) (bool, error) {
	info, ok := genericapirequest.RequestInfoFrom(ctx)
	if !ok {
		return false, apierrors.NewInternalError(errors.New("the request has no RequestInfo"))
	}
	switch info.Verb {
	case "create":
		return true, nil
	case "get":
		return false, nil
	}
	return false, apierrors.NewMethodNotSupported(terrarun.Resource("terraformruns/"+info.Subresource), info.Verb)
}

// uploadHandler answers a POST with 204 No Content once write has consumed
// its body, or with write's error.
func uploadHandler(responder rest.Responder, write func(req *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if err := write(req); err != nil {
			responder.Error(err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

func runRef(run *terrarun.TerraformRun) artifacts.RunRef {
	return artifacts.RunRef{Namespace: run.Namespace, Name: run.Name, UID: string(run.UID)}
}

// notFound is a 404 about the subresource what of run name, whose message
// says what to do.
func notFound(name, what, message string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusNotFound,
		Reason:  metav1.StatusReasonNotFound,
		Message: message,
		Details: &metav1.StatusDetails{Name: name, Group: terrarun.GroupName, Kind: "terraformruns/" + what},
	}}
}

// artifactError maps an error of the artifact store, met while serving the
// subresource what (plan, logs or outputs) of run name, to the API error that
// answers it:
//
//   - artifacts.ErrTooLarge: 413 Request Entity Too Large;
//   - artifacts.ErrDigestMismatch: 400 Bad Request;
//   - artifacts.ErrNotFound: 404 Not Found with message, which says what to do;
//   - artifacts.ErrLogClosed: 409 Conflict with message;
//   - an etcd timeout or unavailability, or an object store that does not
//     answer: 503 Service Unavailable with Retry-After, which
//     clients, terrarun-executor among them, retry;
//   - anything else: 500 Internal Server Error.
//
// message is for the two errors that the caller can expect; without one, the
// store's error is the message.
func artifactError(err error, name, what, message string) error {
	if message == "" {
		message = err.Error()
	}
	switch {
	case errors.Is(err, artifacts.ErrTooLarge):
		return apierrors.NewRequestEntityTooLargeError(err.Error())
	case errors.Is(err, artifacts.ErrDigestMismatch):
		return apierrors.NewBadRequest(err.Error())
	case errors.Is(err, artifacts.ErrNotFound):
		return notFound(name, what, message)
	case errors.Is(err, artifacts.ErrLogClosed):
		return conflict(name, "%s", message)
	case errors.Is(err, rpctypes.ErrNoSpace):
		return apierrors.NewServiceUnavailable("etcd is out of space (its NOSPACE alarm is raised) and accepts only reads and deletes: " +
			"delete old runs, whose logs and plans go with them; then an administrator compacts, defragments and disarms etcd (standalone mode does this itself within 10 minutes)")
	case storeUnavailable(err), errors.Is(err, objectstore.ErrUnavailable):
		unavailable := apierrors.NewServiceUnavailable(fmt.Sprintf("the artifact store is unavailable, try again: %v", err))
		unavailable.ErrStatus.Details = &metav1.StatusDetails{Name: name, RetryAfterSeconds: 5}
		return unavailable
	}
	return apierrors.NewInternalError(err)
}

// storeUnavailable says whether err is etcd timing out or being unavailable,
// rather than refusing the request: a deadline, or gRPC code Unavailable or
// DeadlineExceeded, which the etcd client reports as an rpctypes.EtcdError
// for the errors of the server (no leader, request timed out) and as a gRPC
// status for those of the connection.
func storeUnavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	code := codes.OK
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		code = etcdErr.Code()
	} else if s, ok := status.FromError(err); ok {
		code = s.Code()
	}
	return code == codes.Unavailable || code == codes.DeadlineExceeded
}

// prepare starts every Connect: it takes the options, of type O, validates
// them with validate for a read or an upload, and loads the run.
func prepare[O runtime.Object](ctx context.Context, b *connectBase, name string, options runtime.Object,
	kind string, validate func(O, bool) field.ErrorList) (opts O, upload bool, run *terrarun.TerraformRun, err error) {
	opts, ok := options.(O)
	if !ok {
		return opts, false, nil, apierrors.NewInternalError(fmt.Errorf("invalid options object: %T", options))
	}
	if upload, err = isUpload(ctx); err != nil {
		return opts, false, nil, err
	}
	if errs := validate(opts, upload); len(errs) > 0 {
		return opts, false, nil, apierrors.NewInvalid(terrarun.Kind(kind), name, errs)
	}
	run, err = b.status.get(ctx, name)
	return opts, upload, run, err
}

// errUnchanged aborts a status write that would change nothing.
var errUnchanged = errors.New("unchanged")

// waitsForStore records in run's ArtifactsStored condition that a stage's
// upload of what waits for the artifact store, which err says does not
// answer, and which the stage retries: the run's status says what it waits
// for. Other errors record nothing.
func (b *connectBase) waitsForStore(ctx context.Context, run *terrarun.TerraformRun, what string, err error) {
	if !errors.Is(err, objectstore.ErrUnavailable) {
		return
	}
	msg := fmt.Sprintf("The %s waits for the artifact store, which does not answer; the stage retries its upload: %v", what, err)
	_, _ = b.status.update(context.WithoutCancel(ctx), run.Name, func(run *terrarun.TerraformRun) error {
		if c := meta.FindStatusCondition(run.Status.Conditions, terrarun.ConditionArtifactsStored); c != nil && c.Message == msg {
			return errUnchanged
		}
		meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: terrarun.ConditionArtifactsStored, Status: metav1.ConditionFalse,
			Reason: terrarun.ReasonArtifactStoreUnavailable, Message: msg, ObservedGeneration: run.Generation})
		return nil
	})
}
