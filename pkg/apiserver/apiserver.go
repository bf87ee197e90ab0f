// Package apiserver assembles the terrarun API server: its scheme, the
// terrarun.dev API group and the storage behind it.
package apiserver

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/install"
	"github.com/terrarun/terrarun/pkg/registry/terraformrun"
)

var (
	// Scheme holds every type the server encodes and decodes.
	Scheme = runtime.NewScheme()
	// Codecs serializes the types of Scheme.
	Codecs = serializer.NewCodecFactory(Scheme)
)

func init() {
	install.Install(Scheme)

	// The generic server decodes query options (ListOptions, GetOptions, ...) as
	// version v1 of the empty group, and serves the discovery types unversioned.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{},
		&metav1.APIVersions{},
		&metav1.APIGroupList{},
		&metav1.APIGroup{},
		&metav1.APIResourceList{},
	)
}

// Config is the configuration of a terrarun API server.
type Config struct {
	// GenericConfig configures the generic API server machinery.
	GenericConfig *genericapiserver.RecommendedConfig
	// Deps are the artifact store and executor identities behind the
	// subresources.
	Deps terraformrun.Deps
}

// CompletedConfig is a Config with every default filled in.
type CompletedConfig struct {
	generic genericapiserver.CompletedConfig
	deps    terraformrun.Deps
}

// Complete fills in defaults. It mutates the receiver.
func (c *Config) Complete() CompletedConfig {
	if c.Deps.Serializer == nil {
		c.Deps.Serializer = Codecs
	}
	return CompletedConfig{generic: c.GenericConfig.Complete(), deps: c.Deps}
}

// Server is a running terrarun API server.
type Server struct {
	// GenericAPIServer serves HTTP.
	GenericAPIServer *genericapiserver.GenericAPIServer
	// Runs is the storage of terraformruns and its subresources.
	Runs *terraformrun.Storage
}

// New builds the server and installs the terrarun.dev API group.
func (c CompletedConfig) New() (*Server, error) {
	generic, err := c.generic.New("terrarun-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("building the generic API server: %w", err)
	}

	runs, err := terraformrun.NewStorage(Scheme, c.generic.RESTOptionsGetter, c.deps)
	if err != nil {
		return nil, err
	}

	group := genericapiserver.NewDefaultAPIGroupInfo(terrarun.GroupName, Scheme, runtime.NewParameterCodec(Scheme), Codecs)
	group.VersionedResourcesStorageMap["v1alpha1"] = map[string]rest.Storage{
		"terraformruns":         runs.Run,
		"terraformruns/status":  runs.Status,
		"terraformruns/approve": runs.Approve,
		"terraformruns/discard": runs.Discard,
		"terraformruns/cancel":  runs.Cancel,
		"terraformruns/plan":    runs.Plan,
		"terraformruns/logs":    runs.Logs,
		"terraformruns/outputs": runs.Outputs,
	}
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, fmt.Errorf("installing the %s API group: %w", terrarun.GroupName, err)
	}
	return &Server{GenericAPIServer: generic, Runs: runs}, nil
}
