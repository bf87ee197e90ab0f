// Package server holds the options and the run loop of terrarun-apiserver, in
// both its modes: an aggregated API server behind a Kubernetes cluster, and the
// self-contained standalone mode.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	apiserverconfig "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"

	tradmission "github.com/terrarun/terrarun/pkg/admission"
	"github.com/terrarun/terrarun/pkg/admission/initializer"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/apiserver"
	generatedopenapi "github.com/terrarun/terrarun/pkg/generated/openapi"
	"github.com/terrarun/terrarun/pkg/registry/terraformrun"
	"github.com/terrarun/terrarun/pkg/standalone"
)

const (
	etcdPathPrefix     = "/registry/terrarun.dev"
	defaultSecurePort  = 8443
	defaultDataDir     = ".terrarun"
	standaloneBindAddr = "127.0.0.1"
)

// Options are the flags of terrarun-apiserver.
type Options struct {
	// Recommended are the generic API server options: etcd, serving,
	// delegated authentication and authorization, admission, audit.
	Recommended *genericoptions.RecommendedOptions
	// Standalone runs without a cluster: embedded etcd, a private CA, client
	// certificate authentication, and an authorizer that admits every
	// authenticated user. It is a development mode.
	Standalone bool
	// DataDir holds standalone mode's etcd data, PKI and kubeconfig files.
	DataDir string
	// Executor configures how runs execute.
	Executor *ExecutorOptions

	// Out receives the startup banner.
	Out io.Writer

	bindAddressSet bool
}

// NewOptions returns options with terrarun's defaults.
func NewOptions(out io.Writer) *Options {
	o := &Options{
		Recommended: genericoptions.NewRecommendedOptions(etcdPathPrefix,
			apiserver.Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion)),
		DataDir:  defaultDataDir,
		Executor: newExecutorOptions(),
		Out:      out,
	}
	o.Recommended.Etcd.StorageConfig.EncodeVersioner = runtime.NewMultiGroupVersioner(
		v1alpha1.SchemeGroupVersion, schema.GroupKind{Group: v1alpha1.GroupName})
	// terrarun's types have no protobuf encoding.
	o.Recommended.Etcd.DefaultStorageMediaType = "application/json"
	o.Recommended.SecureServing.BindPort = defaultSecurePort
	// kube-apiserver applies priority and fairness to every request before
	// the aggregator proxies it here; terrarun limits concurrency with
	// max-in-flight and does not contend for the FlowSchema status that
	// kube-apiserver maintains. --enable-priority-and-fairness turns it on.
	o.Recommended.Features.EnablePriorityAndFairness = false

	// Only native, in-process admission: no webhooks, no admission policies.
	plugins := admission.NewPlugins()
	lifecycle.Register(plugins)
	tradmission.Register(plugins)
	o.Recommended.Admission.Plugins = plugins
	o.Recommended.Admission.RecommendedPluginOrder = append([]string{lifecycle.PluginName}, tradmission.PluginOrder...)
	return o
}

// AddFlags adds every flag to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Recommended.AddFlags(fs)
	o.Executor.AddFlags(fs)
	fs.BoolVar(&o.Standalone, "standalone", o.Standalone, "Run without a Kubernetes cluster: embedded etcd, self-signed certificates, "+
		"client-certificate authentication with a generated admin kubeconfig, and every authenticated user authorized. A development mode; it listens on 127.0.0.1 unless --bind-address is set.")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "Standalone mode: directory for etcd data, the CA and kubeconfig files. Objects survive restarts on the same directory.")
}

// Complete records which flags the user set.
func (o *Options) Complete(fs *pflag.FlagSet) {
	o.bindAddressSet = fs.Changed("bind-address")
}

// Validate reports every invalid combination of flags.
func (o *Options) Validate() error {
	var errs []error
	if o.Standalone {
		if len(o.Recommended.Etcd.StorageConfig.Transport.ServerList) > 0 {
			errs = append(errs, errors.New("--etcd-servers cannot be combined with --standalone, which runs its own etcd in --data-dir"))
		}
		if o.DataDir == "" {
			errs = append(errs, errors.New("--data-dir is required with --standalone"))
		}
		// Checked by Run once embedded etcd has started.
		saved := o.Recommended.Etcd.StorageConfig.Transport.ServerList
		o.Recommended.Etcd.StorageConfig.Transport.ServerList = []string{"http://placeholder"}
		defer func() { o.Recommended.Etcd.StorageConfig.Transport.ServerList = saved }()
	}
	errs = append(errs, o.Recommended.Validate()...)
	errs = append(errs, o.Executor.Validate()...)
	return errors.Join(errs...)
}

// Run starts the server and blocks until ctx is canceled and the server has
// shut down gracefully.
func (o *Options) Run(ctx context.Context) error {
	var pki *standalone.PKI
	admissionOptions := o.Recommended.Admission
	if o.Standalone {
		var (
			etcd *standalone.Etcd
			err  error
		)
		pki, etcd, err = o.prepareStandalone(ctx)
		if err != nil {
			return err
		}
		defer etcd.Close()
		// Built by applyStandaloneAdmission below, without a cluster.
		o.Recommended.Admission = nil
		defer func() { o.Recommended.Admission = admissionOptions }()
	}

	runs := &lazyRunGetter{}
	if !o.Standalone {
		o.Recommended.ExtraAdmissionInitializers = func(*genericapiserver.RecommendedConfig) ([]admission.PluginInitializer, error) {
			return []admission.PluginInitializer{initializer.NewInitializer(nil, runs)}, nil
		}
	}

	config := genericapiserver.NewRecommendedConfig(apiserver.Codecs)
	namer := openapi.NewDefinitionNamer(apiserver.Scheme)
	config.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(generatedopenapi.GetOpenAPIDefinitions, namer)
	config.OpenAPIConfig.Info.Title = "terrarun"
	config.OpenAPIConfig.Info.Version = "v1alpha1"
	config.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(generatedopenapi.GetOpenAPIDefinitions, namer)
	config.OpenAPIV3Config.Info.Title = "terrarun"
	config.OpenAPIV3Config.Info.Version = "v1alpha1"
	config.FeatureGate = utilfeature.DefaultFeatureGate
	config.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	setLongRunning(config)

	if err := o.Recommended.ApplyTo(config); err != nil {
		return fmt.Errorf("applying options: %w", err)
	}

	var kubeconfig string
	if o.Standalone {
		var err error
		if kubeconfig, err = o.applyStandaloneAuth(config, pki); err != nil {
			return err
		}
		if err := applyStandaloneAdmission(config, admissionOptions, runs); err != nil {
			return err
		}
		if o.Executor.ServerURL == "" {
			o.Executor.ServerURL = config.LoopbackClientConfig.Host
		}
		if o.Executor.CAFile == "" {
			o.Executor.CAFile = pki.CAFile()
		}
	}

	etcdClient, err := newEtcdClient(o)
	if err != nil {
		return err
	}
	defer etcdClient.Close()
	store, err := newArtifactStore(ctx, o, etcdClient)
	if err != nil {
		return err
	}
	ctrl := &controllerHandle{}
	exec, identities, err := o.newExecutor(config, etcdClient, ctrl.notify)
	if err != nil {
		return err
	}
	if err := addExecutorAuthorization(config, identities); err != nil {
		return err
	}

	server, err := (&apiserver.Config{GenericConfig: config, Deps: terraformrun.Deps{
		Artifacts:     store,
		Identities:    identities,
		DefaultEngine: o.Executor.defaultEngine(),
		OnDelete: func(ctx context.Context, namespace, name, uid string) {
			if err := exec.Forget(ctx, namespace, name, uid); err != nil {
				klog.ErrorS(err, "Stopping the executions of a deleted run", "run", klog.KRef(namespace, name))
			}
		},
	}}).Complete().New()
	if err != nil {
		return err
	}
	runs.store.Store(server.Runs.Run.Store)

	if o.Executor.RunController {
		server.GenericAPIServer.AddPostStartHookOrDie("terrarun-run-controller", func(hook genericapiserver.PostStartHookContext) error {
			return o.startController(hook, config, etcdClient, exec, store, ctrl)
		})
	}
	if o.Standalone {
		server.GenericAPIServer.AddPostStartHookOrDie("terrarun-standalone-banner", func(genericapiserver.PostStartHookContext) error {
			fmt.Fprintf(o.Out, "terrarun is serving in standalone mode at %s\nkubeconfig: %s\ntry:        kubectl --kubeconfig %s get terraformruns\n",
				config.LoopbackClientConfig.Host, kubeconfig, kubeconfig)
			return nil
		})
	}
	runErr := server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
	// Stages in flight get SIGINT and a grace period to release their state
	// locks before this process exits; a restarted server finds them lost,
	// retries a plan and never re-applies.
	if s, ok := exec.(interface {
		Shutdown(context.Context, time.Duration) error
	}); ok {
		stopCtx, cancel := context.WithTimeout(context.Background(), o.Executor.CancelGrace+10*time.Second)
		defer cancel()
		if err := s.Shutdown(stopCtx, o.Executor.CancelGrace); err != nil {
			klog.ErrorS(err, "Stopping the stages in flight")
		}
	}
	return runErr
}

// prepareStandalone creates the data directory, the CA and the serving
// certificate, starts embedded etcd, and replaces the cluster-bound options.
func (o *Options) prepareStandalone(ctx context.Context) (*standalone.PKI, *standalone.Etcd, error) {
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("creating --data-dir %s: %w", o.DataDir, err)
	}
	pki, err := standalone.LoadOrCreatePKI(filepath.Join(o.DataDir, "pki"))
	if err != nil {
		return nil, nil, err
	}

	serving := o.Recommended.SecureServing
	if !o.bindAddressSet {
		serving.BindAddress = netutils.ParseIPSloppy(standaloneBindAddr)
	}
	hosts := []string{"localhost"}
	ips := []net.IP{netutils.ParseIPSloppy("127.0.0.1"), net.IPv6loopback}
	if !serving.BindAddress.IsUnspecified() && !serving.BindAddress.IsLoopback() {
		ips = append(ips, serving.BindAddress)
	}
	if serving.ServerCert.CertKey.CertFile == "" {
		cert, key, err := pki.ServingCert(hosts, ips)
		if err != nil {
			return nil, nil, err
		}
		serving.ServerCert.CertKey.CertFile, serving.ServerCert.CertKey.KeyFile = cert, key
	}

	etcd, err := standalone.StartEtcd(ctx, filepath.Join(o.DataDir, "etcd"))
	if err != nil {
		return nil, nil, err
	}
	o.Recommended.Etcd.StorageConfig.Transport.ServerList = []string{etcd.ClientURL()}

	// No cluster to delegate to: authentication and authorization are set up by
	// applyStandaloneAuth, and there is no core API for informers or priority
	// and fairness.
	o.Recommended.Authentication = nil
	o.Recommended.Authorization = nil
	o.Recommended.CoreAPI = nil
	o.Recommended.Features.EnablePriorityAndFairness = false
	o.Recommended.Admission.RecommendedPluginOrder = slices.DeleteFunc(
		slices.Clone(o.Recommended.Admission.RecommendedPluginOrder),
		func(name string) bool { return name == lifecycle.PluginName })
	return pki, etcd, nil
}

// applyStandaloneAuth authenticates client certificates signed by the data
// directory's CA, authorizes every authenticated user, and writes the admin
// kubeconfig. It returns the kubeconfig's path.
func (o *Options) applyStandaloneAuth(config *genericapiserver.RecommendedConfig, pki *standalone.PKI) (string, error) {
	ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", pki.CAFile())
	if err != nil {
		return "", fmt.Errorf("loading the standalone CA: %w", err)
	}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                          &apiserverconfig.AnonymousAuthConfig{Enabled: false},
		ClientCertificateCAContentProvider: ca,
	}.New()
	if err != nil {
		return "", fmt.Errorf("building the client-certificate authenticator: %w", err)
	}
	config.Authentication.Authenticator = authn
	if err := config.Authentication.ApplyClientCert(ca, config.SecureServing); err != nil {
		return "", fmt.Errorf("requesting client certificates: %w", err)
	}
	config.Authorization.Authorizer = authenticatedAuthorizer

	addr := config.SecureServing.Listener.Addr().(*net.TCPAddr)
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	server := "https://" + net.JoinHostPort(host, fmt.Sprint(addr.Port))
	path := filepath.Join(o.DataDir, standalone.AdminKubeconfigFile)
	if err := pki.WriteKubeconfig(path, server, standalone.AdminUser, standalone.AdminGroups); err != nil {
		return "", err
	}
	return path, nil
}

// authenticatedAuthorizer allows every request of an authenticated user. It is
// standalone mode's authorizer.
var authenticatedAuthorizer = authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if u := a.GetUser(); u != nil && slices.Contains(u.GetGroups(), user.AllAuthenticated) {
		return authorizer.DecisionAllow, "standalone mode authorizes every authenticated user", nil
	}
	return authorizer.DecisionNoOpinion, "standalone mode authorizes only authenticated users", nil
})
