package terraformrun

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/pkg/executor"
)

// Storage bundles the REST storage of terraformruns and its subresources.
type Storage struct {
	// Run serves the main resource.
	Run *REST
	// Status serves terraformruns/status.
	Status *StatusREST
	// Approve, Discard and Cancel serve the action subresources.
	Approve *ApproveREST
	Discard *DiscardREST
	Cancel  *CancelREST
	// Plan, Logs and Outputs serve the streamed subresources.
	Plan    *PlanREST
	Logs    *LogsREST
	Outputs *OutputsREST
}

// Deps are what the subresources need besides the object store.
type Deps struct {
	// Artifacts stores plans, logs and outputs.
	Artifacts *artifacts.Store
	// Identities recognizes executors, the only writers of plans, logs and outputs.
	Identities executor.IdentityResolver
	// Serializer encodes error responses of the streamed subresources.
	Serializer runtime.NegotiatedSerializer
	// DefaultEngine is spec.engine.binary when neither the run nor the
	// cluster policy sets it; terraform when empty.
	DefaultEngine terrarun.EngineBinary
	// OnDelete, when set, is called after a run is deleted, for example to stop
	// its executions. Artifacts are removed by the storage itself.
	OnDelete func(ctx context.Context, namespace, name, uid string)
}

// REST serves the terraformruns resource from the generic registry store.
type REST struct {
	*genericregistry.Store
}

var (
	_ rest.ShortNamesProvider   = &REST{}
	_ rest.CategoriesProvider   = &REST{}
	_ rest.SingularNameProvider = &REST{}
)

// ShortNames lets kubectl resolve `tfrun` and `tfr`.
func (r *REST) ShortNames() []string { return []string{"tfrun", "tfr"} }

// Categories puts runs in `kubectl get terraform`.
func (r *REST) Categories() []string { return []string{"terraform"} }

// NewStorage builds the store of terraformruns and its status subresource. The
// store uses the watch cache whenever optsGetter enables it.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, deps Deps) (*Storage, error) {
	strategy := NewStrategy(scheme, deps.DefaultEngine)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &terrarun.TerraformRun{} },
		NewListFunc:               func() runtime.Object { return &terrarun.TerraformRunList{} },
		PredicateFunc:             Match,
		DefaultQualifiedResource:  terrarun.Resource("terraformruns"),
		SingularQualifiedResource: terrarun.Resource("terraformrun"),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: TableConvertor{},
	}
	// Artifacts live in etcd beside the object, not in it: remove them with the
	// run. Their lease removes them anyway if this is missed.
	store.AfterDelete = func(obj runtime.Object, _ *metav1.DeleteOptions) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		run, ok := obj.(*terrarun.TerraformRun)
		if !ok {
			return
		}
		if deps.OnDelete != nil {
			deps.OnDelete(ctx, run.Namespace, run.Name, string(run.UID))
		}
		if deps.Artifacts == nil {
			return
		}
		ref := artifacts.RunRef{Namespace: run.Namespace, Name: run.Name, UID: string(run.UID)}
		if err := deps.Artifacts.DeleteRun(ctx, ref); err != nil {
			klog.ErrorS(err, "Removing the artifacts of a deleted run; their retention lease removes them later", "run", klog.KObj(run))
		}
	}
	options := &generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}
	if err := store.CompleteWithOptions(options); err != nil {
		return nil, fmt.Errorf("building terraformruns storage: %w", err)
	}

	statusStore := *store
	statusStrategy := NewStatusStrategy(strategy)
	statusStore.UpdateStrategy = statusStrategy
	statusStore.ResetFieldsStrategy = statusStrategy

	status := statusWriter{store: &statusStore}
	base := streamBase{status: status, artifacts: deps.Artifacts, identities: deps.Identities, serializer: deps.Serializer}
	return &Storage{
		Run:     &REST{store},
		Status:  &StatusREST{store: &statusStore},
		Approve: &ApproveREST{status: status},
		Discard: &DiscardREST{status: status},
		Cancel:  &CancelREST{status: status},
		Plan:    &PlanREST{streamBase: base},
		Logs:    &LogsREST{streamBase: base},
		Outputs: &OutputsREST{streamBase: base},
	}, nil
}

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
