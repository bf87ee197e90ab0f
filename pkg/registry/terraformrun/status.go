package terraformrun

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runrules"
)

// StatusREST serves terraformruns/status: get, update and patch of status only.
type StatusREST struct {
	store *genericregistry.Store
}

var _ rest.Patcher = &StatusREST{}

// New returns an empty run.
func (r *StatusREST) New() runtime.Object { return &terrarun.TerraformRun{} }

// Destroy does nothing: the main resource owns the store.
func (r *StatusREST) Destroy() {}

// Get returns the run.
func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update writes the status of a run and nothing else.
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// Status writes never create a run.
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// GetResetFields says that /status never changes spec.
func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable prints runs as the main resource does.
func (r *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

// statusWriter reads runs, and changes their status through the status
// store, with the status strategy's validation and optimistic-concurrency
// retries. Every subresource but status itself writes through it.
type statusWriter struct {
	store *genericregistry.Store
}

// update applies mutate to the current run and stores the result. mutate may
// return an API error (for example a Conflict) to abort.
func (w statusWriter) update(ctx context.Context, name string, mutate func(*terrarun.TerraformRun) error) (*terrarun.TerraformRun, error) {
	obj, _, err := w.store.Update(ctx, name, rest.DefaultUpdatedObjectInfo(nil,
		func(_ context.Context, _, oldObj runtime.Object) (runtime.Object, error) {
			run := oldObj.(*terrarun.TerraformRun).DeepCopy()
			if err := mutate(run); err != nil {
				return nil, err
			}
			return run, nil
		}), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return obj.(*terrarun.TerraformRun), nil
}

func (w statusWriter) get(ctx context.Context, name string) (*terrarun.TerraformRun, error) {
	obj, err := w.store.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return obj.(*terrarun.TerraformRun), nil
}

func requestUser(ctx context.Context) string {
	if u, ok := genericapirequest.UserFrom(ctx); ok && u != nil {
		return u.GetName()
	}
	return ""
}

func conflict(name string, format string, args ...interface{}) error {
	return apierrors.NewConflict(terrarun.Resource("terraformruns"), name, fmt.Errorf(format, args...))
}

// phase is runrules.Phase of a run of the internal types.
func phase(run *terrarun.TerraformRun) v1alpha1.RunPhase {
	return runrules.PhaseOf(v1alpha1.RunPhase(run.Status.Phase))
}

// finished is runrules.Finished of a run of the internal types.
func finished(run *terrarun.TerraformRun) bool {
	return runrules.Final(v1alpha1.RunPhase(run.Status.Phase))
}

// watchUntil watches the run from its resourceVersion until done holds for
// it, and returns it then. A deletion ends the watch with a Gone error. When
// that version has left the watch's history (the run was last written before
// this replica's watch cache began, or before a compaction), it watches from
// the run as it is now instead.
func (w statusWriter) watchUntil(ctx context.Context, run *terrarun.TerraformRun, done func(*terrarun.TerraformRun) bool) (*terrarun.TerraformRun, error) {
	rv := run.ResourceVersion
	for !done(run) {
		wi, err := w.store.Watch(ctx, &metainternalversion.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", run.Name),
			ResourceVersion: rv,
		})
		for err == nil && !done(run) {
			var next *terrarun.TerraformRun
			if next, err = nextRunEvent(ctx, wi); err == nil {
				run = next
			}
		}
		if wi != nil {
			wi.Stop()
		}
		switch {
		case err == nil:
		case apierrors.IsResourceExpired(err) && rv != anyVersion:
			// Its first event is the run as it is now.
			rv = anyVersion
		default:
			return nil, err
		}
	}
	return run, nil
}

// anyVersion is the resourceVersion of a watch that starts with the object
// as it is now.
const anyVersion = "0"
