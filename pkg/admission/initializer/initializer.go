// Package initializer hands terrarun-specific dependencies to admission
// plugins, the way k8s.io/apiserver/pkg/admission/initializer hands them the
// Kubernetes clients and informers.
package initializer

import (
	"context"

	"k8s.io/apiserver/pkg/admission"
)

// NamespaceLabeler returns the labels of a namespace. Package runpolicy holds
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

type pluginInitializer struct {
	labeler NamespaceLabeler
}

var _ admission.PluginInitializer = pluginInitializer{}

// NewInitializer returns a plugin initializer that gives l to every plugin
// implementing WantsNamespaceLabeler. A nil l sets nothing, so that plugins
// fall back to the Kubernetes informer factory when they have one.
func NewInitializer(l NamespaceLabeler) admission.PluginInitializer {
	return pluginInitializer{labeler: l}
}

// Initialize implements admission.PluginInitializer.
func (i pluginInitializer) Initialize(plugin admission.Interface) {
	if i.labeler == nil {
		return
	}
	if wants, ok := plugin.(WantsNamespaceLabeler); ok {
		wants.SetNamespaceLabeler(i.labeler)
	}
}
