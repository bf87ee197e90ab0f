package server

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	admissionmetrics "k8s.io/apiserver/pkg/admission/metrics"
	apiserverinstall "k8s.io/apiserver/pkg/apis/apiserver/install"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	"github.com/terrarun/terrarun/pkg/admission/initializer"
	"github.com/terrarun/terrarun/pkg/admission/plugin/terraformrunpolicy"
)

// admissionConfigScheme decodes AdmissionConfiguration files.
var admissionConfigScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	apiserverinstall.Install(s)
	return s
}()

// applyStandaloneAdmission builds the admission chain of standalone mode. The
// generic AdmissionOptions.ApplyTo needs a Kubernetes client and informers,
// which standalone mode does not have; terrarun's plugins need neither. It
// honours --enable-admission-plugins, --disable-admission-plugins and
// --admission-control-config-file as cluster mode does.
func applyStandaloneAdmission(c *genericapiserver.RecommendedConfig, a *genericoptions.AdmissionOptions, runs initializer.RunGetter) error {
	var names []string
	for _, name := range a.RecommendedPluginOrder {
		if !slices.Contains(a.DisablePlugins, name) && (!a.DefaultOffPlugins.Has(name) || slices.Contains(a.EnablePlugins, name)) {
			names = append(names, name)
		}
	}
	provider, err := admission.ReadAdmissionConfiguration(names, a.ConfigFile, admissionConfigScheme)
	if err != nil {
		return fmt.Errorf("reading --admission-control-config-file: %w", err)
	}
	initializers := admission.PluginInitializers{initializer.NewInitializer(terraformrunpolicy.NameOnlyNamespaceLabeler{}, runs)}
	chain, err := a.Plugins.NewFromPlugins(names, provider, initializers, a.Decorators)
	if err != nil {
		return err
	}
	c.AdmissionControl = admissionmetrics.WithStepMetrics(chain)
	return nil
}
