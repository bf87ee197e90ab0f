// Package terraformrun holds the registry of the terraformruns resource: its
// storage, create/update/status strategies, table printing and subresources.
package terraformrun

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
)

// runStrategy implements create, update and delete behaviour of the main resource.
type runStrategy struct {
	runtime.ObjectTyper
	names.NameGenerator
	// defaults are the server's defaults of a run's spec.
	defaults terrarun.ServerDefaults
	// noHostCluster refuses spec.outputsSecret (Deps.NoHostCluster).
	noHostCluster bool
}

// NewStrategy returns the strategy of the terraformruns resource; defaults
// are the server's defaults of spec.engine.
func NewStrategy(typer runtime.ObjectTyper, defaults terrarun.ServerDefaults) runStrategy {
	return runStrategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator, defaults: defaults}
}

// NamespaceScoped is true: runs live in namespaces.
func (runStrategy) NamespaceScoped() bool { return true }

// GetResetFields says which fields a write to the main resource never changes.
func (runStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"terrarun.dev/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

// PrepareForCreate clears status, records the creating user (or, for a run
// the server creates for a workspace, keeps the workspace's) and applies the
// built-in defaults to whatever the user and the cluster policy left empty.
func (s runStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	run := obj.(*terrarun.TerraformRun)
	run.Status = terrarun.TerraformRunStatus{Phase: terrarun.RunPhasePending}
	run.Generation = 1
	if u, _ := genericapirequest.UserFrom(ctx); run.Spec.Creator == nil || !terrarun.CreatesOnBehalf(u) {
		// Only the server itself, creating a workspace's run, names another
		// creator: the workspace's (admission checks the run as hers).
		run.Spec.Creator = CreatorFrom(ctx)
	}
	delete(run.Annotations, terrarun.AnnotationLabelsAtCreation)
	if len(run.Labels) > 0 {
		snapshot, _ := json.Marshal(run.Labels)
		if run.Annotations == nil {
			run.Annotations = map[string]string{}
		}
		run.Annotations[terrarun.AnnotationLabelsAtCreation] = string(snapshot)
	}
	terrarun.SetBuiltinDefaults(&run.Spec, s.defaults)
}

// CreatorFrom returns the authenticated user of the request. A client-supplied
// creator is always replaced by this value.
func CreatorFrom(ctx context.Context) *terrarun.Creator {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok || u == nil {
		return nil
	}
	c := &terrarun.Creator{Username: u.GetName(), UID: u.GetUID()}
	if groups := u.GetGroups(); len(groups) > 0 {
		c.Groups = append([]string(nil), groups...)
	}
	return c
}

// PrepareForUpdate keeps status, which only /status may write. A spec sent
// without the server-recorded creator (for example by `kubectl replace` with the
// original manifest) inherits it, and the built-in defaults are applied again, so
// that resending the original manifest is not mistaken for a spec change.
func (s runStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newRun := obj.(*terrarun.TerraformRun)
	oldRun := old.(*terrarun.TerraformRun)
	newRun.Status = oldRun.Status
	if newRun.Spec.Creator == nil {
		newRun.Spec.Creator = oldRun.Spec.Creator.DeepCopy()
	}
	if newRun.Spec.RequestedBy == nil {
		newRun.Spec.RequestedBy = slices.Clone(oldRun.Spec.RequestedBy)
	}
	// The labels it was created with stay the server's record, also when
	// the update does not send them (kubectl replace of the manifest).
	if v, ok := oldRun.Annotations[terrarun.AnnotationLabelsAtCreation]; ok {
		if newRun.Annotations == nil {
			newRun.Annotations = map[string]string{}
		}
		newRun.Annotations[terrarun.AnnotationLabelsAtCreation] = v
	} else {
		delete(newRun.Annotations, terrarun.AnnotationLabelsAtCreation)
	}
	terrarun.SetBuiltinDefaults(&newRun.Spec, s.defaults)
	newRun.Generation = oldRun.Generation
	if !terrarun.SameRunSpec(&newRun.Spec, &oldRun.Spec) {
		newRun.Generation = oldRun.Generation + 1
	}
}

// Validate validates a new run.
func (s runStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	run := obj.(*terrarun.TerraformRun)
	allErrs := validation.ValidateTerraformRun(run)
	if s.noHostCluster && run.Spec.OutputsSecret != "" {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("spec", "outputsSecret"),
			"this server has no Kubernetes cluster (standalone mode, or no --kubeconfig), so no Secret can receive the outputs; omit it and read them from the outputs subresource"))
	}
	if u, _ := genericapirequest.UserFrom(ctx); len(run.Spec.RequestedBy) > 0 && !terrarun.CreatesOnBehalf(u) {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("spec", "requestedBy"),
			"is set by the server on the runs a TerraformWorkspace creates (who deleted it, who asked for its rerun), and cannot be chosen by a client; omit it"))
	}
	return append(allErrs, checkWorkspaceMarks(ctx, run, nil)...)
}

// checkWorkspaceMarks refuses a change, by anyone but the server, of what
// makes a run part of a workspace's history and says how it came to be:
// every label and annotation of terrarun's own domain (terrarun.dev/ and
// its subdomains: the workspace, the trigger, the spec hash, the rerun
// request it serves, the ConfigMaps' digest) and an ownerReference to a
// TerraformWorkspace. The workspace controller trusts its history (its last
// apply's outputs reach the workspace's status, its outputs Secret and its
// dependents; a Destroy run's success releases the workspace's finalizer)
// and deletes the runs of a workspace that is gone, so only the runs it
// creates may carry them. oldRun is nil on create.
func checkWorkspaceMarks(ctx context.Context, run, oldRun *terrarun.TerraformRun) field.ErrorList {
	if u, _ := genericapirequest.UserFrom(ctx); terrarun.CreatesOnBehalf(u) {
		return nil
	}
	owners := func(r *terrarun.TerraformRun) []metav1.OwnerReference {
		if r == nil {
			return nil
		}
		var refs []metav1.OwnerReference
		for _, ref := range r.OwnerReferences {
			if ref.Kind == "TerraformWorkspace" {
				refs = append(refs, ref)
			}
		}
		return refs
	}
	const msg = "is set by the server on the runs a TerraformWorkspace creates, and cannot be set, changed or removed otherwise; to run again, rerun the workspace"
	var oldLabels, oldAnnotations map[string]string
	if oldRun != nil {
		oldLabels, oldAnnotations = oldRun.Labels, oldRun.Annotations
	} else if v, ok := run.Annotations[terrarun.AnnotationLabelsAtCreation]; ok {
		// PrepareForCreate has just set it.
		oldAnnotations = map[string]string{terrarun.AnnotationLabelsAtCreation: v}
	}
	allErrs := serverKeysChanged(field.NewPath("metadata", "labels"), run.Labels, oldLabels, msg)
	allErrs = append(allErrs, serverKeysChanged(field.NewPath("metadata", "annotations"), run.Annotations, oldAnnotations, msg)...)
	if !apiequality.Semantic.DeepEqual(owners(run), owners(oldRun)) {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("metadata", "ownerReferences"), "an ownerReference to a TerraformWorkspace "+msg))
	}
	return allErrs
}

// serverKeysChanged refuses each key of terrarun's own domain that differs
// between m and old (set, changed or removed).
func serverKeysChanged(path *field.Path, m, old map[string]string, msg string) field.ErrorList {
	var allErrs field.ErrorList
	keys := sets.New[string]()
	for k := range m {
		keys.Insert(k)
	}
	for k := range old {
		keys.Insert(k)
	}
	for _, k := range sets.List(keys) {
		v, ok := m[k]
		ov, oldOK := old[k]
		if terrarun.ServerKey(k) && (v != ov || ok != oldOK) {
			allErrs = append(allErrs, field.Forbidden(path.Key(k), msg))
		}
	}
	return allErrs
}

// WarningsOnCreate returns no warnings.
func (runStrategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string { return nil }

// AllowCreateOnUpdate is false: a run is created with POST only.
func (runStrategy) AllowCreateOnUpdate(context.Context) bool { return false }

// AllowUnconditionalUpdate is true, as for most built-in resources.
func (runStrategy) AllowUnconditionalUpdate(context.Context) bool { return true }

// Canonicalize does nothing.
func (runStrategy) Canonicalize(obj runtime.Object) {}

// ValidateUpdate refuses any change of spec, and of what ties a run to a
// workspace.
func (runStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	run, oldRun := obj.(*terrarun.TerraformRun), old.(*terrarun.TerraformRun)
	return append(validation.ValidateTerraformRunUpdate(run, oldRun), checkWorkspaceMarks(ctx, run, oldRun)...)
}

// WarningsOnUpdate returns no warnings.
func (runStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

// statusStrategy implements updates of status: through the status
// subresource (the controller's writes), and, with records set, the writes of
// the server's own handlers.
type statusStrategy struct {
	runStrategy
	// records lets a write change what only the server's handlers record: the
	// approval (approve), the plan, its policy results and the source
	// revision (the plan stage's upload), the overrides (override), and the
	// outputs (the apply stage's upload).
	records bool
}

// NewStatusStrategy returns the strategy of the terraformruns/status
// subresource, which keeps the handlers' records.
func NewStatusStrategy(s runStrategy) statusStrategy { return statusStrategy{runStrategy: s} }

// recordStrategy is the strategy of the handlers' own status writes.
func recordStrategy(s runStrategy) statusStrategy {
	return statusStrategy{runStrategy: s, records: true}
}

// GetResetFields says that /status never changes spec.
func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"terrarun.dev/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}

// PrepareForUpdate keeps spec: /status writes only status. Without records it
// also keeps what only the server's handlers record, so that no status write
// approves a plan, or replaces the plan approvers read or the outputs; the one
// exception is the approval of a run in approval mode Auto, of its recorded
// plan, by terrarun.AutoApprover, which the controller records.
func (s statusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newRun := obj.(*terrarun.TerraformRun)
	oldRun := old.(*terrarun.TerraformRun)
	newRun.Spec = oldRun.Spec
	if s.records {
		return
	}
	if !autoApproval(newRun, oldRun) {
		newRun.Status.Approval = oldRun.Status.Approval
	}
	newRun.Status.Approvals = oldRun.Status.Approvals
	newRun.Status.Plan = oldRun.Status.Plan
	newRun.Status.Policy = oldRun.Status.Policy
	newRun.Status.Outputs = oldRun.Status.Outputs
	u, _ := genericapirequest.UserFrom(ctx)
	// The run controller pins a Flux source's artifact before the plan,
	// through the loopback; the plan handler records any other source.
	if !terrarun.CreatesOnBehalf(u) || !pinsArtifact(newRun, oldRun) {
		newRun.Status.Source = oldRun.Status.Source
	}
	// The run controller calls run tasks and records its calls, through
	// the loopback; their answers come through taskresult.
	if !terrarun.CreatesOnBehalf(u) {
		newRun.Status.Tasks = oldRun.Status.Tasks
	}
	// The Approved condition is True only with an approval record.
	if newRun.Status.Approval == nil && meta.IsStatusConditionTrue(newRun.Status.Conditions, terrarun.ConditionApproved) {
		meta.RemoveStatusCondition(&newRun.Status.Conditions, terrarun.ConditionApproved)
		if c := meta.FindStatusCondition(oldRun.Status.Conditions, terrarun.ConditionApproved); c != nil {
			newRun.Status.Conditions = append(newRun.Status.Conditions, *c)
		}
	}
}

// pinsArtifact says whether newRun pins the artifact of its Flux source
// (spec.source.sourceRef), where oldRun, which no stage has read yet, has
// none pinned.
func pinsArtifact(newRun, oldRun *terrarun.TerraformRun) bool {
	return newRun.Spec.Source.SourceRef != nil && len(oldRun.Status.Stages) == 0 &&
		(oldRun.Status.Source == nil || oldRun.Status.Source.Artifact == nil) &&
		newRun.Status.Source != nil && newRun.Status.Source.Artifact != nil
}

// autoApproval says whether newRun records Auto mode's approval of oldRun's
// plan, where oldRun has none.
func autoApproval(newRun, oldRun *terrarun.TerraformRun) bool {
	a, p := newRun.Status.Approval, oldRun.Status.Plan
	return oldRun.Status.Approval == nil && a != nil && p != nil &&
		oldRun.Spec.Approval.Mode == terrarun.ApprovalModeAuto &&
		a.ApprovedBy == terrarun.AutoApprover && a.PlanDigest == p.Digest
}

// ValidateUpdate validates a status write.
func (statusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateTerraformRunStatusUpdate(obj.(*terrarun.TerraformRun), old.(*terrarun.TerraformRun))
}

// WarningsOnUpdate returns no warnings.
func (statusStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

// GetAttrs returns the labels and selectable fields of a run.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	run, ok := obj.(*terrarun.TerraformRun)
	if !ok {
		return nil, nil, fmt.Errorf("given object is not a TerraformRun but %T", obj)
	}
	return labels.Set(run.Labels), selectableFields(run), nil
}

// selectableFields are the fields a field selector may use: metadata.name,
// metadata.namespace and status.phase.
func selectableFields(run *terrarun.TerraformRun) fields.Set {
	return generic.AddObjectMetaFieldsSet(fields.Set{
		"status.phase": string(run.Status.Phase),
	}, &run.ObjectMeta, true)
}

// Match returns the selection predicate for label and field selectors.
func Match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{
		Label:    label,
		Field:    field,
		GetAttrs: GetAttrs,
	}
}
