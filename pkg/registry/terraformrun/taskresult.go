package terraformrun

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/metrics"
	"github.com/terrarun/terrarun/pkg/runtask"
)

// TaskResultREST serves terraformruns/taskresult, the callback of run tasks:
// a task PATCHes (or POSTs) the JSON:API task-results document HCP
// Terraform's run tasks send, with the access token of its call as a bearer
// token. The token says which call it answers; no one else may answer it.
type TaskResultREST struct {
	status statusWriter
	now    func() time.Time
}

var _ rest.Connecter = &TaskResultREST{}

// New returns an empty run: the subresource has no object of its own.
func (r *TaskResultREST) New() runtime.Object { return &terrarun.TerraformRun{} }

// Destroy does nothing.
func (r *TaskResultREST) Destroy() {}

// ConnectMethods are PATCH, as HCP Terraform's callback is sent, and POST.
func (r *TaskResultREST) ConnectMethods() []string {
	return []string{http.MethodPatch, http.MethodPost}
}

// NewConnectOptions returns no options: the token names the call.
func (r *TaskResultREST) NewConnectOptions() (runtime.Object, bool, string) { return nil, false, "" }

// Connect checks that the request comes with the token of a call of run
// name, and returns the handler that records the answer.
func (r *TaskResultREST) Connect(ctx context.Context, name string, _ runtime.Object, responder rest.Responder) (http.Handler, error) {
	id, ok := runtask.CallFrom(ctx)
	if !ok || id.Run != name {
		return nil, apierrors.NewForbidden(terrarun.Resource("terraformruns/taskresult"), name,
			fmt.Errorf("only a run task answers through taskresult, with the access_token of its call as a bearer token"))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(io.LimitReader(req.Body, runtask.MaxResultBytes+1))
		if err != nil {
			responder.Error(apierrors.NewBadRequest(fmt.Sprintf("reading the answer: %v", err)))
			return
		}
		if len(body) > runtask.MaxResultBytes {
			responder.Error(apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("an answer holds at most %d bytes", runtask.MaxResultBytes)))
			return
		}
		result, err := runtask.ParseResult(body)
		if err != nil {
			responder.Error(apierrors.NewBadRequest(err.Error()))
			return
		}
		if _, err := r.status.update(ctx, name, func(run *terrarun.TerraformRun) error {
			return recordTaskResult(run, id, result, r.now())
		}); err != nil {
			responder.Error(err)
			return
		}
		w.WriteHeader(http.StatusOK)
	}), nil
}

// recordTaskResult records result in the call id of run: its final status
// when result is passed or failed, its message and link when it is running.
func recordTaskResult(run *terrarun.TerraformRun, id runtask.CallID, result runtask.Result, now time.Time) error {
	call := runtask.FindCall(run, id, now)
	if call == nil {
		return conflict(run.Name, "the call of run task %s at %s has been answered, or its deadline has passed; its answer is no longer taken", id.Task, id.Stage)
	}
	call.Message, call.URL = result.Message, result.URL
	switch result.Status {
	case "passed":
		call.Status = terrarun.RunTaskPassed
	case "failed":
		call.Status = terrarun.RunTaskFailed
	default:
		return nil
	}
	t := metav1.NewTime(now)
	call.CompletedAt = &t
	if call.StartedAt != nil {
		metrics.RunTaskSeconds.WithLabelValues(string(call.Stage), string(call.Status)).Observe(now.Sub(call.StartedAt.Time).Seconds())
	}
	return nil
}
