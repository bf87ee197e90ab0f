package terraformrun

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/util/dryrun"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// actionBody is the body of an action subresource: TerraformRunApproval,
// TerraformRunOverride, TerraformRunDiscard or TerraformRunCancel.
type actionBody interface {
	runtime.Object
	metav1.Object
}

// actionREST serves an action subresource (approve, override, discard,
// cancel), as
// pods/eviction is served: POST a body of type B to the run, which validates
// it, passes it to admission, and records what it asks for in the run's
// status with record. It answers with the run, or a short Status when the
// client asks for it (?result=short, WithActionResult).
type actionREST[B actionBody] struct {
	status statusWriter
	// kind is B's kind, for errors.
	kind     string
	newBody  func() B
	validate func(B) field.ErrorList
	// record changes the run's status, or returns an API error (a Conflict,
	// say) to refuse; user is the requesting user.
	record func(run *terrarun.TerraformRun, body B, user user.Info) error
	// check, when set, refuses an action that record accepts, for reasons
	// beyond the run itself (another run on its state, say). It runs before
	// the update, as pods/eviction checks a disruption budget, so that it
	// reads other objects once, and never inside the update's retries.
	check func(ctx context.Context, run *terrarun.TerraformRun) error
}

var _ rest.NamedCreater = &actionREST[*terrarun.TerraformRunApproval]{}

// New returns an empty body.
func (r *actionREST[B]) New() runtime.Object { return r.newBody() }

// Destroy does nothing.
func (r *actionREST[B]) Destroy() {}

// Create performs the action on the run named name. A dry run (dryRun=All)
// answers as the action would, refusals and all, and records nothing.
func (r *actionREST[B]) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, opts *metav1.CreateOptions) (runtime.Object, error) {
	body, ok := obj.(B)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a %s, got %T", r.kind, obj))
	}
	if n := body.GetName(); n != "" && n != name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%s names run %q but was sent to run %q; omit metadata.name or make it match", r.kind, n, name))
	}
	if errs := r.validate(body); len(errs) > 0 {
		return nil, apierrors.NewInvalid(terrarun.Kind(r.kind), name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, body); err != nil {
			return nil, err
		}
	}
	user, _ := genericapirequest.UserFrom(ctx)
	if user == nil || user.GetName() == "" {
		return nil, apierrors.NewForbidden(terrarun.Resource("terraformruns"), name, fmt.Errorf("%s requires an authenticated user", r.kind))
	}
	dryRun := opts != nil && dryrun.IsDryRun(opts.DryRun)
	if r.check != nil || dryRun {
		obj, err := r.status.store.Get(ctx, name, &metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		// The run's own refusals come first: they say what is wrong with it.
		run := obj.(*terrarun.TerraformRun)
		done := run.DeepCopy()
		if err := r.record(done, body, user); err != nil {
			return nil, err
		}
		if r.check != nil {
			if err := r.check(ctx, run); err != nil {
				return nil, err
			}
		}
		if dryRun {
			return result(ctx, done, r.kind), nil
		}
	}
	run, err := r.status.update(ctx, name, func(run *terrarun.TerraformRun) error {
		return r.record(run, body, user)
	})
	if err != nil {
		return nil, err
	}
	return result(ctx, run, r.kind), nil
}
