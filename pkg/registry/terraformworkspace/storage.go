package terraformworkspace

import (
	"context"
	"fmt"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// Storage bundles the REST storage of terraformworkspaces and its
// subresources.
type Storage struct {
	// Workspace serves the main resource.
	Workspace *REST
	// Status serves terraformworkspaces/status.
	Status *StatusREST
	// Rerun serves terraformworkspaces/rerun.
	Rerun *RerunREST
}

// REST serves the terraformworkspaces resource.
type REST struct {
	*genericregistry.Store
}

var (
	_ rest.ShortNamesProvider   = &REST{}
	_ rest.CategoriesProvider   = &REST{}
	_ rest.SingularNameProvider = &REST{}
)

// Delete deletes the workspace. One that destroys what it manages before it
// goes (its destroy finalizer) records who deleted it in
// status.deletionRequestedBy, in the same write that marks it deleted (the
// store hands deleteValidation the object that write stores): its Destroy
// run names them in spec.requestedBy, so that separation of duties keeps
// them from approving it.
func (r *REST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	return r.Store.Delete(ctx, name, recordDeleter(ctx, deleteValidation), options)
}

// DeleteCollection deletes the workspaces listOptions select, recording who
// deleted each, as Delete does.
func (r *REST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	return r.Store.DeleteCollection(ctx, recordDeleter(ctx, deleteValidation), options, listOptions)
}

// recordDeleter is deleteValidation that also records the requesting user
// in status.deletionRequestedBy of a workspace not yet being deleted.
func recordDeleter(ctx context.Context, deleteValidation rest.ValidateObjectFunc) rest.ValidateObjectFunc {
	var user string
	if u, ok := genericapirequest.UserFrom(ctx); ok {
		user = u.GetName()
	}
	return func(ctx context.Context, obj runtime.Object) error {
		if deleteValidation != nil {
			if err := deleteValidation(ctx, obj); err != nil {
				return err
			}
		}
		if ws, ok := obj.(*terrarun.TerraformWorkspace); ok && ws.DeletionTimestamp == nil && user != "" {
			ws.Status.DeletionRequestedBy = user
		}
		return nil
	}
}

// ShortNames lets kubectl resolve `tfws`.
func (r *REST) ShortNames() []string { return []string{"tfws"} }

// Categories puts workspaces in `kubectl get terraform`.
func (r *REST) Categories() []string { return []string{"terraform"} }

// NewStorage builds the store of terraformworkspaces and its subresources.
// runs lists the runs that a rerun waits for.
// Without a host cluster (noHostCluster), spec.outputsSecret is refused.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, defaults terrarun.ServerDefaults, noHostCluster bool, runs rest.Watcher) (*Storage, error) {
	s := newStrategy(scheme, defaults)
	s.noHostCluster = noHostCluster
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &terrarun.TerraformWorkspace{} },
		NewListFunc:               func() runtime.Object { return &terrarun.TerraformWorkspaceList{} },
		PredicateFunc:             Match,
		DefaultQualifiedResource:  terrarun.Resource("terraformworkspaces"),
		SingularQualifiedResource: terrarun.Resource("terraformworkspace"),

		CreateStrategy:      s,
		UpdateStrategy:      s,
		DeleteStrategy:      s,
		ResetFieldsStrategy: s,

		TableConvertor: TableConvertor{},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}); err != nil {
		return nil, fmt.Errorf("building terraformworkspaces storage: %w", err)
	}
	s.deps.get = func(ctx context.Context, name string) (*terrarun.TerraformWorkspace, error) {
		obj, err := store.Get(ctx, name, &metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return obj.(*terrarun.TerraformWorkspace), nil
	}
	statusStore := *store
	statusStore.UpdateStrategy = statusStrategy{strategy: s}
	statusStore.ResetFieldsStrategy = statusStrategy{strategy: s}
	recordStore := *store
	recordStore.UpdateStrategy = statusStrategy{strategy: s, records: true}
	recordStore.ResetFieldsStrategy = statusStrategy{strategy: s, records: true}
	return &Storage{
		Workspace: &REST{store},
		Status:    &StatusREST{store: &statusStore},
		Rerun:     &RerunREST{workspaces: &recordStore, runs: runs},
	}, nil
}

// StatusREST serves terraformworkspaces/status.
type StatusREST struct {
	store *genericregistry.Store
}

var _ rest.Patcher = &StatusREST{}

// New returns an empty workspace.
func (r *StatusREST) New() runtime.Object { return &terrarun.TerraformWorkspace{} }

// Destroy does nothing: the main resource owns the store.
func (r *StatusREST) Destroy() {}

// Get returns the workspace.
func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update writes the status of a workspace and nothing else.
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, _ bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// GetResetFields says that /status never changes spec.
func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable prints workspaces as the main resource does.
func (r *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}
