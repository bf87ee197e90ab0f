package terraformworkspace

import (
	"context"
	"fmt"
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
	"github.com/terrarun/terrarun/pkg/registry/terraformrun"
)

// DestroyFinalizer holds a workspace with spec.destroyOnDelete until its
// Destroy run has succeeded (or an admin abandons the resources).
const DestroyFinalizer = "terrarun.dev/destroy"

// strategy implements the create, update and delete behaviour of workspaces.
type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
	// defaults are the server's defaults of the runs' spec.engine.
	defaults terrarun.ServerDefaults
	deps     *dependencies
	// noHostCluster refuses spec.outputsSecret: no cluster holds Secrets.
	noHostCluster bool
}

func newStrategy(typer runtime.ObjectTyper, defaults terrarun.ServerDefaults) strategy {
	return strategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator, defaults: defaults, deps: &dependencies{}}
}

// NamespaceScoped is true: workspaces live in namespaces.
func (strategy) NamespaceScoped() bool { return true }

// GetResetFields says which fields a write to the main resource never changes.
func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"terrarun.dev/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

// PrepareForCreate clears status, records the creating user as the creator
// of the workspace's runs, applies the built-in defaults and adds the destroy
// finalizer when the spec asks for it.
func (s strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	ws := obj.(*terrarun.TerraformWorkspace)
	ws.Status = terrarun.TerraformWorkspaceStatus{}
	ws.Generation = 1
	ws.Spec.Template.Creator = terraformrun.CreatorFrom(ctx)
	s.setDefaults(&ws.Spec)
	syncFinalizer(ws)
}

// PrepareForUpdate keeps status. A change of spec makes the updating user the
// creator of the runs to come, since they run what she set; an unchanged
// spec keeps the creator.
func (s strategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	ws := obj.(*terrarun.TerraformWorkspace)
	oldWS := old.(*terrarun.TerraformWorkspace)
	ws.Status = oldWS.Status
	s.setDefaults(&ws.Spec)
	ws.Spec.Template.Creator = oldWS.Spec.Template.Creator.DeepCopy()
	ws.Generation = oldWS.Generation
	if !apiequality.Semantic.DeepEqual(ws.Spec, oldWS.Spec) {
		ws.Generation++
		ws.Spec.Template.Creator = terraformrun.CreatorFrom(ctx)
	}
	syncFinalizer(ws)
}

// setDefaults applies the built-in run defaults to the template, with
// spec.approval as the runs' approval.
func (s strategy) setDefaults(spec *terrarun.TerraformWorkspaceSpec) {
	if spec.Template.Approval != (terrarun.Approval{}) {
		return // refused by validation
	}
	run := terrarun.RunTemplate(spec)
	terrarun.SetBuiltinDefaults(&run, s.defaults)
	terrarun.SetRunTemplate(spec, run)
	if spec.DriftPolicy == "" {
		spec.DriftPolicy = terrarun.DriftPolicyReport
	}
}

// syncFinalizer adds the destroy finalizer to a workspace that asks for
// destroyOnDelete, and removes it from one that no longer does, unless it
// is being deleted (then the controller removes it).
func syncFinalizer(ws *terrarun.TerraformWorkspace) {
	if ws.DeletionTimestamp != nil {
		return
	}
	has := slices.Contains(ws.Finalizers, DestroyFinalizer)
	switch {
	case ws.Spec.DestroyOnDelete && !has:
		ws.Finalizers = append(ws.Finalizers, DestroyFinalizer)
	case !ws.Spec.DestroyOnDelete && has:
		ws.Finalizers = slices.DeleteFunc(ws.Finalizers, func(f string) bool { return f == DestroyFinalizer })
	}
}

// Validate validates a new workspace, and refuses a dependency cycle.
func (s strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	ws := obj.(*terrarun.TerraformWorkspace)
	return append(append(validation.ValidateTerraformWorkspace(ws), s.deps.checkCycle(ctx, ws)...), s.checkOutputsSecret(ws)...)
}

func (s strategy) checkOutputsSecret(ws *terrarun.TerraformWorkspace) field.ErrorList {
	if !s.noHostCluster || ws.Spec.OutputsSecret == "" {
		return nil
	}
	return field.ErrorList{field.Forbidden(field.NewPath("spec", "outputsSecret"),
		"this server has no Kubernetes cluster (standalone mode, or no --kubeconfig), so no Secret can receive the outputs; omit it and read them from status.outputs or the runs' outputs subresource")}
}

// WarningsOnCreate returns no warnings.
func (strategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string { return nil }

// AllowCreateOnUpdate is false: a workspace is created with POST only.
func (strategy) AllowCreateOnUpdate(context.Context) bool { return false }

// AllowUnconditionalUpdate is true, as for most built-in resources.
func (strategy) AllowUnconditionalUpdate(context.Context) bool { return true }

// Canonicalize does nothing.
func (strategy) Canonicalize(obj runtime.Object) {}

// ValidateUpdate validates an update, and refuses a dependency cycle.
func (s strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	ws := obj.(*terrarun.TerraformWorkspace)
	return append(append(validation.ValidateTerraformWorkspaceUpdate(ws, old.(*terrarun.TerraformWorkspace)), s.deps.checkCycle(ctx, ws)...), s.checkOutputsSecret(ws)...)
}

// WarningsOnUpdate returns no warnings.
func (strategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string { return nil }

// statusStrategy implements writes of status: the controller's, through the
// status subresource, and, with records set, the rerun handler's.
type statusStrategy struct {
	strategy
	// records lets a write count a rerun request and record who asked.
	records bool
}

// GetResetFields says that /status never changes spec.
func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"terrarun.dev/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}

// PrepareForUpdate keeps spec, and the rerun requests, which only the rerun
// subresource counts.
func (s statusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	ws := obj.(*terrarun.TerraformWorkspace)
	oldWS := old.(*terrarun.TerraformWorkspace)
	ws.Spec = oldWS.Spec
	if !s.records {
		// Who asked for a rerun, or deleted the workspace, is recorded by
		// the server's handlers only: separation of duties relies on it.
		ws.Status.RerunRequests = oldWS.Status.RerunRequests
		ws.Status.RerunRequestedBy = oldWS.Status.RerunRequestedBy
		ws.Status.DeletionRequestedBy = oldWS.Status.DeletionRequestedBy
	}
}

// ValidateUpdate validates a status write.
func (statusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateTerraformWorkspaceStatusUpdate(obj.(*terrarun.TerraformWorkspace), old.(*terrarun.TerraformWorkspace))
}

// GetAttrs returns the labels and selectable fields of a workspace.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	ws, ok := obj.(*terrarun.TerraformWorkspace)
	if !ok {
		return nil, nil, fmt.Errorf("given object is not a TerraformWorkspace but %T", obj)
	}
	return labels.Set(ws.Labels), generic.AddObjectMetaFieldsSet(fields.Set{}, &ws.ObjectMeta, true), nil
}

// Match returns the selection predicate for label and field selectors.
func Match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: GetAttrs}
}
