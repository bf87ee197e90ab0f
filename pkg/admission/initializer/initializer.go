// Package initializer hands terrarun-specific dependencies to admission
// plugins, the way k8s.io/apiserver/pkg/admission/initializer hands them the
// Kubernetes clients and informers.
package initializer

import (
	"context"
	"fmt"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// NamespaceLabeler returns the labels of a namespace. Package terraformrunpolicy holds
// the implementations: one backed by a namespace informer (cluster mode) and
// one that knows only the name label (standalone mode).
type NamespaceLabeler interface {
	NamespaceLabels(ctx context.Context, namespace string) (map[string]string, error)
}

// WantsNamespaceLabeler is implemented by admission plugins that need the
// labels of namespaces.
type WantsNamespaceLabeler interface {
	SetNamespaceLabeler(NamespaceLabeler)
	admission.InitializationValidator
}

// RunGetter reads a run from the server's own storage.
type RunGetter interface {
	GetRun(ctx context.Context, namespace, name string) (*terrarun.TerraformRun, error)
}

// WantsRunGetter is implemented by admission plugins that need to read the
// run a subresource request is for, such as the approve subresource.
type WantsRunGetter interface {
	SetRunGetter(RunGetter)
}

type pluginInitializer struct {
	labeler NamespaceLabeler
	runs    RunGetter
}

var _ admission.PluginInitializer = pluginInitializer{}

// NewInitializer returns a plugin initializer that gives l to every plugin
// implementing WantsNamespaceLabeler and runs to every plugin implementing
// WantsRunGetter. A nil l sets nothing, so that plugins fall back to the
// Kubernetes informer factory when they have one.
func NewInitializer(l NamespaceLabeler, runs RunGetter) admission.PluginInitializer {
	return pluginInitializer{labeler: l, runs: runs}
}

// Initialize implements admission.PluginInitializer.
func (i pluginInitializer) Initialize(plugin admission.Interface) {
	if wants, ok := plugin.(WantsRunGetter); ok && i.runs != nil {
		wants.SetRunGetter(i.runs)
	}
	if i.labeler == nil {
		return
	}
	if wants, ok := plugin.(WantsNamespaceLabeler); ok {
		wants.SetNamespaceLabeler(i.labeler)
	}
}

// StoreRunGetter reads runs from the server's own run store, in process, as
// a GET would see them, with no request looping back into the server.
// Admission is configured before the store exists: the server binds the
// getter to the store once it has built it (Bind).
type StoreRunGetter struct {
	store atomic.Pointer[rest.Getter]
}

// NewStoreRunGetter returns a StoreRunGetter bound to no store yet.
func NewStoreRunGetter() *StoreRunGetter { return &StoreRunGetter{} }

// Bind makes g read runs from store, the terraformruns registry store.
func (g *StoreRunGetter) Bind(store rest.Getter) { g.store.Store(&store) }

// GetRun implements RunGetter.
func (g *StoreRunGetter) GetRun(ctx context.Context, namespace, name string) (*terrarun.TerraformRun, error) {
	store := g.store.Load()
	if store == nil {
		return nil, apierrors.NewServiceUnavailable("the server is still starting and cannot read runs yet; try again")
	}
	obj, err := (*store).Get(genericapirequest.WithNamespace(ctx, namespace), name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	run, ok := obj.(*terrarun.TerraformRun)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("the run store returned a %T, not a TerraformRun", obj))
	}
	return run, nil
}
