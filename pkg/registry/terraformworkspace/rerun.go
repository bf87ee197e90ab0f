package terraformworkspace

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/util/dryrun"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
)

// rerunWait bounds how long a rerun waits for the controller to create its
// run.
const rerunWait = 30 * time.Second

// RerunREST serves terraformworkspaces/rerun: POST a TerraformWorkspaceRerun
// to start a run now, whatever the hash says. It counts the request in
// status.rerunRequests, which only it may write; the workspace controller
// creates the run, and the response is that run. RBAC on the subresource
// (create terraformworkspaces/rerun) decides who may rerun.
type RerunREST struct {
	workspaces *genericregistry.Store
	runs       rest.Watcher
}

var _ rest.NamedCreater = &RerunREST{}

// New returns an empty body.
func (r *RerunREST) New() runtime.Object { return &terrarun.TerraformWorkspaceRerun{} }

// Destroy does nothing.
func (r *RerunREST) Destroy() {}

// Create records a rerun of the workspace name and returns its run. A dry
// run is refused: the answer is the run the rerun starts, which a dry run
// cannot have, and it must never record a rerun.
func (r *RerunREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, opts *metav1.CreateOptions) (runtime.Object, error) {
	body, ok := obj.(*terrarun.TerraformWorkspaceRerun)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a TerraformWorkspaceRerun, got %T", obj))
	}
	if opts != nil && dryrun.IsDryRun(opts.DryRun) {
		return nil, apierrors.NewBadRequest("terraformworkspaces/rerun does not take dryRun: its answer is the run it starts; to check that you may rerun, ask kubectl auth can-i create terraformworkspaces --subresource=rerun")
	}
	if n := body.Name; n != "" && n != name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("TerraformWorkspaceRerun names workspace %q but was sent to workspace %q; omit metadata.name or make it match", n, name))
	}
	if errs := validation.ValidateTerraformWorkspaceRerun(body); len(errs) > 0 {
		return nil, apierrors.NewInvalid(terrarun.Kind("TerraformWorkspaceRerun"), name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, body); err != nil {
			return nil, err
		}
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok || u.GetName() == "" {
		return nil, apierrors.NewForbidden(terrarun.Resource("terraformworkspaces/rerun"), name, fmt.Errorf("a rerun requires an authenticated user"))
	}
	user := u.GetName()
	var request int64
	_, _, err := r.workspaces.Update(ctx, name, rest.DefaultUpdatedObjectInfo(nil,
		func(_ context.Context, _, oldObj runtime.Object) (runtime.Object, error) {
			ws := oldObj.(*terrarun.TerraformWorkspace).DeepCopy()
			conflict := func(format string, args ...any) error {
				return apierrors.NewConflict(terrarun.Resource("terraformworkspaces"), name, fmt.Errorf(format, args...))
			}
			switch {
			case ws.DeletionTimestamp != nil:
				return nil, conflict("the workspace is being deleted")
			case ws.Spec.Suspend:
				return nil, conflict("the workspace is suspended; set spec.suspend to false first")
			case ws.Status.CurrentRun != "":
				return nil, conflict("run %s of this workspace is under way; rerun once it has ended: approve or discard its plan if it waits for approval, or cancel its stage in flight (the discard and cancel subresources of terraformruns/%s)",
					ws.Status.CurrentRun, ws.Status.CurrentRun)
			}
			ws.Status.RerunRequests++
			ws.Status.RerunRequestedBy = user
			request = ws.Status.RerunRequests
			return ws, nil
		}), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return r.waitForRun(ctx, name, request)
}

// waitForRun returns the run that the controller creates for rerun request
// n of workspace name. It watches the workspace's runs from the runs there
// are now (resourceVersion "0": the watch starts with them), so that a run
// created before the watch began is seen as well as one created after.
func (r *RerunREST) waitForRun(ctx context.Context, name string, n int64) (runtime.Object, error) {
	wctx, cancel := context.WithTimeout(ctx, rerunWait)
	defer cancel()
	selector := labels.SelectorFromSet(labels.Set{terrarun.LabelWorkspace: name})
	want := strconv.FormatInt(n, 10)
	for {
		run, err := r.watchForRun(wctx, selector, want)
		switch {
		case run != nil:
			return run, nil
		case err == nil:
			// The watch ended early (its cache was re-initialized): again.
			continue
		case ctx.Err() == nil && wctx.Err() != nil:
			return nil, apierrors.NewTimeoutError(fmt.Sprintf("rerun request %d of workspace %s is recorded, but the workspace controller has not started its run within %s; it starts when the controller runs: kubectl get terraformruns -l %s=%s",
				n, name, rerunWait, terrarun.LabelWorkspace, name), 0)
		case ctx.Err() != nil:
			return nil, err // the client went away
		default:
			// The request is recorded: a retry would ask for a second run.
			return nil, recordedButUnseen(err, fmt.Sprintf("rerun request %d of workspace %s is recorded, and its run starts without a retry; watching for it failed: follow it with kubectl get terraformruns -l %s=%s",
				n, name, terrarun.LabelWorkspace, name))
		}
	}
}

// recordedButUnseen returns err, an error that ended the wait for a
// recorded request's run, with msg before its message and its status code
// kept.
func recordedButUnseen(err error, msg string) error {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return apierrors.NewInternalError(fmt.Errorf("%s: %w", msg, err))
	}
	st := status.Status()
	st.Message = msg + ": " + st.Message
	return &apierrors.StatusError{ErrStatus: st}
}

// watchForRun watches the runs selector matches until one serves rerun
// request want, and returns it; it returns nil and no error when the watch
// ends without one.
func (r *RerunREST) watchForRun(ctx context.Context, selector labels.Selector, want string) (*terrarun.TerraformRun, error) {
	// The request names the workspace, and the watch cache takes a
	// request's name for the name of the objects watched: the runs' watch
	// is a request of its own, which names none.
	info := &genericapirequest.RequestInfo{}
	if ri, ok := genericapirequest.RequestInfoFrom(ctx); ok {
		*info = *ri
	}
	info.Verb, info.Resource, info.Subresource, info.Name = "watch", "terraformruns", "", ""
	ctx = genericapirequest.WithRequestInfo(ctx, info)
	w, err := r.runs.Watch(ctx, &metainternalversion.ListOptions{LabelSelector: selector, ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, nil
			}
			obj := ev.Object
			if c, ok := obj.(runtime.CacheableObject); ok {
				// The watch cache wraps what it sends to several watchers.
				obj = c.GetObject()
			}
			switch ev.Type {
			case watch.Error:
				return nil, apierrors.FromObject(obj)
			case watch.Added, watch.Modified:
				if run, ok := obj.(*terrarun.TerraformRun); ok && run.Annotations[terrarun.AnnotationRerunRequest] == want {
					return run, nil
				}
			}
		}
	}
}
