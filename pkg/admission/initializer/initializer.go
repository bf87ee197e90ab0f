// Package initializer hands terrarun-specific dependencies to admission
// plugins, the way k8s.io/apiserver/pkg/admission/initializer hands them the
// Kubernetes clients and informers.
package initializer

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
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

// clientRunGetter reads runs through the server's loopback client.
type clientRunGetter struct {
	client versioned.Interface
}

// NewRunGetter returns a RunGetter that reads runs with client, the server's
// loopback client, so that plugins see what a GET would.
func NewRunGetter(client versioned.Interface) RunGetter {
	return clientRunGetter{client: client}
}

// GetRun implements RunGetter.
func (g clientRunGetter) GetRun(ctx context.Context, namespace, name string) (*terrarun.TerraformRun, error) {
	v, err := g.client.TerrarunV1alpha1().TerraformRuns(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	run := &terrarun.TerraformRun{}
	if err := v1alpha1.Convert_v1alpha1_TerraformRun_To_terrarun_TerraformRun(v, run, nil); err != nil {
		return nil, err
	}
	return run, nil
}
