package terraformrun

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
)

// statusWriter changes the status of a run through the status store, with the
// status strategy's validation and optimistic-concurrency retries.
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

func checkBodyName(kind, name string, obj metav1.Object) error {
	if n := obj.GetName(); n != "" && n != name {
		return apierrors.NewBadRequest(fmt.Sprintf("%s names run %q but was sent to run %q; omit metadata.name or make it match", kind, n, name))
	}
	return nil
}

// ApproveREST serves terraformruns/approve: POST a TerraformRunApproval to
// approve the plan with the given digest. The approver is the authenticated
// user. Separation of duties is enforced by the TerraformRunPolicy admission
// plugin, which sees this request as a create of the approve subresource.
type ApproveREST struct {
	status statusWriter
}

var _ rest.NamedCreater = &ApproveREST{}

// New returns an empty approval.
func (r *ApproveREST) New() runtime.Object { return &terrarun.TerraformRunApproval{} }

// Destroy does nothing.
func (r *ApproveREST) Destroy() {}

// Create approves the run named name.
func (r *ApproveREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	approval, ok := obj.(*terrarun.TerraformRunApproval)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a TerraformRunApproval, got %T", obj))
	}
	if err := checkBodyName("TerraformRunApproval", name, approval); err != nil {
		return nil, err
	}
	if errs := validation.ValidateTerraformRunApproval(approval); len(errs) > 0 {
		return nil, apierrors.NewInvalid(terrarun.Kind("TerraformRunApproval"), name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj); err != nil {
			return nil, err
		}
	}
	approver := requestUser(ctx)
	if approver == "" {
		return nil, apierrors.NewForbidden(terrarun.Resource("terraformruns"), name, fmt.Errorf("approvals require an authenticated user"))
	}
	return r.status.update(ctx, name, func(run *terrarun.TerraformRun) error {
		if run.Status.Phase != terrarun.RunPhaseAwaitingApproval {
			return conflict(name, "the run is %s; a plan can be approved only while the run is AwaitingApproval", phaseOrPending(run))
		}
		if run.Status.Plan == nil || run.Status.Plan.Digest != approval.PlanDigest {
			current := "none"
			if run.Status.Plan != nil {
				current = run.Status.Plan.Digest
			}
			return conflict(name, "stale plan digest: you approved %s but the run's plan is %s; review the current plan and approve its digest (status.plan.digest)", approval.PlanDigest, current)
		}
		now := metav1.Now()
		run.Status.Approval = &terrarun.ApprovalStatus{
			ApprovedBy: approver,
			ApprovedAt: &now,
			PlanDigest: approval.PlanDigest,
			Comment:    approval.Comment,
		}
		meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
			Type:               terrarun.ConditionApproved,
			Status:             metav1.ConditionTrue,
			Reason:             terrarun.ReasonApproved,
			Message:            fmt.Sprintf("Plan %s approved by %s.", shortDigest(approval.PlanDigest), approver),
			ObservedGeneration: run.Generation,
		})
		run.Status.Message = fmt.Sprintf("Approved by %s; the apply starts shortly.", approver)
		return nil
	})
}

// DiscardREST serves terraformruns/discard: POST a TerraformRunDiscard to
// reject a plan that waits for approval.
type DiscardREST struct {
	status statusWriter
}

var _ rest.NamedCreater = &DiscardREST{}

// New returns an empty discard request.
func (r *DiscardREST) New() runtime.Object { return &terrarun.TerraformRunDiscard{} }

// Destroy does nothing.
func (r *DiscardREST) Destroy() {}

// Create discards the run's plan.
func (r *DiscardREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	body, ok := obj.(*terrarun.TerraformRunDiscard)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a TerraformRunDiscard, got %T", obj))
	}
	if err := checkBodyName("TerraformRunDiscard", name, body); err != nil {
		return nil, err
	}
	if errs := validateComment(body.Comment); len(errs) > 0 {
		return nil, apierrors.NewInvalid(terrarun.Kind("TerraformRunDiscard"), name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj); err != nil {
			return nil, err
		}
	}
	who := requestUser(ctx)
	return r.status.update(ctx, name, func(run *terrarun.TerraformRun) error {
		if run.Status.Phase != terrarun.RunPhaseAwaitingApproval {
			hint := ""
			if run.Status.Phase == terrarun.RunPhasePlanning || run.Status.Phase == terrarun.RunPhaseApplying || run.Status.Phase == terrarun.RunPhasePending {
				hint = "; to stop a stage in flight, use cancel"
			}
			return conflict(name, "the run is %s; only a plan that is AwaitingApproval can be discarded%s", phaseOrPending(run), hint)
		}
		msg := fmt.Sprintf("Plan discarded by %s.", who)
		if body.Comment != "" {
			msg = fmt.Sprintf("Plan discarded by %s: %s", who, body.Comment)
		}
		finish(run, terrarun.RunPhaseDiscarded, msg)
		meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
			Type: terrarun.ConditionApproved, Status: metav1.ConditionFalse, Reason: terrarun.ReasonDiscarded,
			Message: msg, ObservedGeneration: run.Generation,
		})
		meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
			Type: terrarun.ConditionApplied, Status: metav1.ConditionFalse, Reason: terrarun.ReasonDiscarded,
			Message: "The plan was discarded and will not be applied.", ObservedGeneration: run.Generation,
		})
		return nil
	})
}

// CancelREST serves terraformruns/cancel: POST a TerraformRunCancel to stop
// the stage in flight. A run that has not started a stage ends at once;
// otherwise the controller stops the stage gracefully and the run ends
// Canceled.
type CancelREST struct {
	status statusWriter
}

var _ rest.NamedCreater = &CancelREST{}

// New returns an empty cancel request.
func (r *CancelREST) New() runtime.Object { return &terrarun.TerraformRunCancel{} }

// Destroy does nothing.
func (r *CancelREST) Destroy() {}

// Create requests cancellation of the run.
func (r *CancelREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	body, ok := obj.(*terrarun.TerraformRunCancel)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a TerraformRunCancel, got %T", obj))
	}
	if err := checkBodyName("TerraformRunCancel", name, body); err != nil {
		return nil, err
	}
	if errs := validateComment(body.Comment); len(errs) > 0 {
		return nil, apierrors.NewInvalid(terrarun.Kind("TerraformRunCancel"), name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj); err != nil {
			return nil, err
		}
	}
	who := requestUser(ctx)
	return r.status.update(ctx, name, func(run *terrarun.TerraformRun) error {
		msg := fmt.Sprintf("Canceled by %s.", who)
		if body.Comment != "" {
			msg = fmt.Sprintf("Canceled by %s: %s", who, body.Comment)
		}
		switch run.Status.Phase {
		case "", terrarun.RunPhasePending:
			finish(run, terrarun.RunPhaseCanceled, msg)
			return nil
		case terrarun.RunPhasePlanning, terrarun.RunPhaseApplying:
			if meta.IsStatusConditionTrue(run.Status.Conditions, terrarun.ConditionCancelRequested) {
				return nil
			}
			meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
				Type: terrarun.ConditionCancelRequested, Status: metav1.ConditionTrue, Reason: terrarun.ReasonCancelRequested,
				Message: msg, ObservedGeneration: run.Generation,
			})
			run.Status.Message = msg + " Stopping the running stage."
			return nil
		case terrarun.RunPhaseAwaitingApproval:
			return conflict(name, "the run is AwaitingApproval and no stage is running; to reject the plan, use discard")
		default:
			return conflict(name, "the run already ended %s; there is nothing to cancel", run.Status.Phase)
		}
	})
}

func validateComment(c string) field.ErrorList {
	if len(c) > 1024 {
		return field.ErrorList{field.TooLong(field.NewPath("comment"), "", 1024)}
	}
	return nil
}

func phaseOrPending(run *terrarun.TerraformRun) terrarun.RunPhase {
	if run.Status.Phase == "" {
		return terrarun.RunPhasePending
	}
	return run.Status.Phase
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

// finish puts the run in a final phase with a completion time and message.
func finish(run *terrarun.TerraformRun, phase terrarun.RunPhase, message string) {
	now := metav1.NewTime(time.Now())
	run.Status.Phase = phase
	run.Status.Message = message
	if run.Status.CompletionTime == nil {
		run.Status.CompletionTime = &now
	}
}
