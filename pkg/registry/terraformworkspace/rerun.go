package terraformworkspace

import (
	"context"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

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
	runs       rest.Lister
}

var _ rest.NamedCreater = &RerunREST{}

// New returns an empty body.
func (r *RerunREST) New() runtime.Object { return &terrarun.TerraformWorkspaceRerun{} }

// Destroy does nothing.
func (r *RerunREST) Destroy() {}

// Create records a rerun of the workspace name and returns its run.
func (r *RerunREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	body, ok := obj.(*terrarun.TerraformWorkspaceRerun)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a TerraformWorkspaceRerun, got %T", obj))
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
// n of workspace name.
func (r *RerunREST) waitForRun(ctx context.Context, name string, n int64) (runtime.Object, error) {
	selector := labels.SelectorFromSet(labels.Set{terrarun.LabelWorkspace: name})
	want := strconv.FormatInt(n, 10)
	var found runtime.Object
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, rerunWait, true, func(ctx context.Context) (bool, error) {
		obj, err := r.runs.List(ctx, &metainternalversion.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		for i, run := range obj.(*terrarun.TerraformRunList).Items {
			if run.Annotations[terrarun.AnnotationRerunRequest] == want {
				found = &obj.(*terrarun.TerraformRunList).Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		if ctx.Err() == nil {
			return nil, apierrors.NewTimeoutError(fmt.Sprintf("rerun request %d of workspace %s is recorded, but the workspace controller has not started its run within %s; it starts when the controller runs: kubectl get terraformruns -l %s=%s",
				n, name, rerunWait, terrarun.LabelWorkspace, name), 0)
		}
		return nil, err
	}
	return found, nil
}
