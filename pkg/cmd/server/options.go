// Package server holds the options of terrarun-apiserver and turns them into
// a running server, in the sample-apiserver way: Options → Complete →
// Validate → Config (an apiserver.Config) → Complete().New() →
// PrepareRun().RunWithContext. It serves both modes: an aggregated API server
// behind a Kubernetes cluster, and the self-contained standalone mode
// (standalone.go).
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/klog/v2"

	tradmission "github.com/terrarun/terrarun/pkg/admission"
	"github.com/terrarun/terrarun/pkg/admission/initializer"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/apiserver"
	generatedopenapi "github.com/terrarun/terrarun/pkg/generated/openapi"
	"github.com/terrarun/terrarun/pkg/registry/terraformrun"
)

const (
	etcdPathPrefix    = "/registry/terrarun.dev"
	defaultSecurePort = 8443
	defaultDataDir    = ".terrarun"
)

// Options are the flags of terrarun-apiserver. Complete fills them in;
// nothing after it changes them.
type Options struct {
	// Recommended are the generic API server options: etcd, serving,
	// delegated authentication and authorization, admission, audit.
	Recommended *genericoptions.RecommendedOptions
	// Standalone runs without a cluster: embedded etcd, a private CA, client
	// certificate authentication, and terrarun's roles granted by certificate
	// groups (standalone.NewAuthorizer). It is a development mode.
	Standalone bool
	// EtcdQuotaBytes is the embedded etcd's space quota in standalone mode;
	// 0 keeps etcd's default of 2 GiB.
	EtcdQuotaBytes int64
	// DataDir holds standalone mode's etcd data, PKI and kubeconfig files.
	DataDir string
	// AdmissionPolicyDir holds standalone mode's admission policies and
	// bindings; empty: none.
	AdmissionPolicyDir string
	// Executor configures how runs execute.
	Executor *ExecutorOptions
	// Artifacts say where plan parts and outputs are kept.
	Artifacts ArtifactStoreOptions
	// MaxFollowsPerUser caps the log follows and plan waits one user holds
	// open on one server.
	MaxFollowsPerUser int
	// ListCacheBytes bounds the encoded runs and workspaces a server keeps
	// for its LIST responses.
	ListCacheBytes int

	// Out receives the startup banner.
	Out io.Writer

	// bindAddressSet records that --bind-address was given (standalone mode
	// otherwise listens on loopback only).
	bindAddressSet bool
}

// NewOptions returns options with terrarun's defaults.
func NewOptions(out io.Writer) *Options {
	o := &Options{
		Recommended: genericoptions.NewRecommendedOptions(etcdPathPrefix,
			apiserver.Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion)),
		DataDir:           defaultDataDir,
		Executor:          newExecutorOptions(),
		MaxFollowsPerUser: terraformrun.DefaultMaxFollowsPerUser,
		ListCacheBytes:    apiserver.DefaultListCacheBytes,
		Out:               out,
	}
	o.Recommended.Etcd.StorageConfig.EncodeVersioner = runtime.NewMultiGroupVersioner(
		v1alpha1.SchemeGroupVersion, schema.GroupKind{Group: v1alpha1.GroupName})
	// Objects are stored in protobuf, as Kubernetes stores its built-in
	// types: smaller and faster to encode and decode than JSON. Objects
	// stored in JSON by earlier versions are still read (Complete builds
	// the codec).
	o.Recommended.Etcd.DefaultStorageMediaType = runtime.ContentTypeProtobuf
	o.Recommended.SecureServing.BindPort = defaultSecurePort
	// kube-apiserver applies priority and fairness to every request before
	// the aggregator proxies it here; terrarun limits concurrency with
	// max-in-flight and does not contend for the FlowSchema status that
	// kube-apiserver maintains. --enable-priority-and-fairness turns it on.
	o.Recommended.Features.EnablePriorityAndFairness = false

	// Only native, in-process admission: no webhooks. Kubernetes' own
	// admission policies are evaluated in-process too: mutating ones
	// before terrarun's plugins, validating ones after.
	plugins := admission.NewPlugins()
	lifecycle.Register(plugins)
	tradmission.Register(plugins)
	registerAdmissionPolicies(plugins)
	o.Recommended.Admission.Plugins = plugins
	order := []string{lifecycle.PluginName, mutating.PluginName}
	order = append(order, tradmission.PluginOrder...)
	o.Recommended.Admission.RecommendedPluginOrder = append(order, validating.PluginName)
	return o
}

// AddFlags adds every flag to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Recommended.AddFlags(fs)
	o.Executor.AddFlags(fs)
	o.Artifacts.AddFlags(fs)
	// The generic server's feature gates, such as CBORServingAndStorage
	// (CBOR besides JSON and YAML).
	utilfeature.DefaultMutableFeatureGate.AddFlag(fs)
	fs.BoolVar(&o.Standalone, "standalone", o.Standalone, "Run without a Kubernetes cluster: embedded etcd, self-signed certificates, "+
		"client-certificate authentication with a generated admin kubeconfig, and terrarun's roles granted by the groups terrarun:viewers, terrarun:editors and terrarun:approvers. A development mode; it listens on 127.0.0.1 unless --bind-address is set.")
	fs.IntVar(&o.MaxFollowsPerUser, "max-follows-per-user", o.MaxFollowsPerUser, "Log follows (logs?follow=true) and plan waits (plan?wait=true) one user may hold open on this server at once; more are refused with 429.")
	fs.IntVar(&o.ListCacheBytes, "list-cache-bytes", o.ListCacheBytes, "Bytes of runs' and workspaces' encodings (JSON, protobuf) kept for LIST responses: a LIST encodes only the objects that changed since an earlier one; the least recently listed go first. 0 keeps none.")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "Standalone mode: directory for etcd data, the CA and kubeconfig files. Objects survive restarts on the same directory.")
	fs.StringVar(&o.AdmissionPolicyDir, "admission-policy-dir", o.AdmissionPolicyDir, "Standalone mode: a directory of ValidatingAdmissionPolicies, MutatingAdmissionPolicies and their bindings (YAML or JSON, names ending in .static.k8s.io) that apply to terrarun's resources, as the host cluster's do in cluster mode; re-read when it changes.")
	fs.Int64Var(&o.EtcdQuotaBytes, "embedded-etcd-quota-bytes", o.EtcdQuotaBytes, "Standalone mode: the embedded etcd's space quota in bytes (etcd's --quota-backend-bytes); 0: etcd's default, 2 GiB. "+
		"Past it etcd refuses writes until space is freed; at most 8 GiB is advised.")
}

// Complete records which flags fs says the user set, and fills in what
// follows from them: the storage codec of --storage-media-type, and a
// relative --data-dir made absolute, as the stages' sandbox and the
// kubeconfig files name it.
func (o *Options) Complete(fs *pflag.FlagSet) error {
	o.bindAddressSet = fs.Changed("bind-address")
	codec, err := apiserver.StorageCodec(o.Recommended.Etcd.DefaultStorageMediaType, v1alpha1.SchemeGroupVersion)
	if err != nil {
		return err
	}
	o.Recommended.Etcd.StorageConfig.Codec = codec
	if o.DataDir != "" {
		abs, err := filepath.Abs(o.DataDir)
		if err != nil {
			return fmt.Errorf("--data-dir %s: %w", o.DataDir, err)
		}
		o.DataDir = abs
	}
	if o.AdmissionPolicyDir != "" {
		abs, err := filepath.Abs(o.AdmissionPolicyDir)
		if err != nil {
			return fmt.Errorf("--admission-policy-dir %s: %w", o.AdmissionPolicyDir, err)
		}
		o.AdmissionPolicyDir = abs
	}
	return nil
}

// maxEtcdQuota is the largest space quota etcd advises (8 GiB).
const maxEtcdQuota = 8 << 30

// Validate reports every invalid flag and combination of flags.
func (o *Options) Validate() error {
	var errs []error
	recommended := o.Recommended
	if o.MaxFollowsPerUser < 1 {
		errs = append(errs, fmt.Errorf("--max-follows-per-user must be at least 1, not %d", o.MaxFollowsPerUser))
	}
	errs = append(errs, o.Artifacts.Validate()...)
	if o.ListCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("--list-cache-bytes must be 0 (no cache) or more, not %d", o.ListCacheBytes))
	}
	if o.Standalone {
		if len(o.Recommended.Etcd.StorageConfig.Transport.ServerList) > 0 {
			errs = append(errs, errors.New("--etcd-servers cannot be combined with --standalone, which runs its own etcd in --data-dir"))
		}
		if o.DataDir == "" {
			errs = append(errs, errors.New("--data-dir is required with --standalone"))
		}
		if o.EtcdQuotaBytes < 0 || o.EtcdQuotaBytes > maxEtcdQuota {
			errs = append(errs, fmt.Errorf("--embedded-etcd-quota-bytes must be between 0 (etcd's default, 2 GiB) and %d (8 GiB), not %d", int64(maxEtcdQuota), o.EtcdQuotaBytes))
		}
		// Embedded etcd provides the servers.
		copied := *recommended
		etcd := *copied.Etcd
		etcd.StorageConfig.Transport.ServerList = []string{"http://embedded-etcd"}
		copied.Etcd = &etcd
		recommended = &copied
	} else {
		if o.EtcdQuotaBytes != 0 {
			errs = append(errs, errors.New("--embedded-etcd-quota-bytes applies to --standalone only; set the quota on the etcd cluster itself (--quota-backend-bytes)"))
		}
		if o.AdmissionPolicyDir != "" {
			errs = append(errs, errors.New("--admission-policy-dir applies to --standalone only; in a cluster, terrarun evaluates the cluster's ValidatingAdmissionPolicies and MutatingAdmissionPolicies (or give a staticManifestsDir in --admission-control-config-file)"))
		}
	}
	errs = append(errs, recommended.Validate()...)
	errs = append(errs, o.Executor.Validate(o.Standalone)...)
	return errors.Join(errs...)
}

// Config builds the server's configuration. In standalone mode it starts
// embedded etcd first. The returned cleanup releases what Config started
// (once, however often it is called); call it after the server has stopped,
// also when Config fails.
func (o *Options) Config(ctx context.Context) (_ *apiserver.Config, cleanup func(), err error) {
	var (
		cleanups []func()
		once     sync.Once
	)
	cleanup = func() {
		once.Do(func() {
			for i := len(cleanups) - 1; i >= 0; i-- {
				cleanups[i]()
			}
		})
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()

	recommended := o.Recommended
	// Bound to the run store by apiserver.New.
	runs := initializer.NewStoreRunGetter()
	var sa *standaloneConfig
	if o.Standalone {
		if sa, err = o.startStandalone(ctx); err != nil {
			return nil, cleanup, err
		}
		cleanups = append(cleanups, sa.unlock, sa.etcd.Close)
		recommended = o.standaloneOptions(sa.etcd)
		recommended.SecureServing = sa.serving
	} else {
		// Admission plugins read runs from the run store (the approve
		// subresource's separation of duties).
		copied := *recommended
		copied.ExtraAdmissionInitializers = func(c *genericapiserver.RecommendedConfig) ([]admission.PluginInitializer, error) {
			// manifestLoaders: a staticManifestsDir of the admission
			// policy plugins' configuration is read as in standalone mode.
			return []admission.PluginInitializer{initializer.NewInitializer(nil, runs), manifestLoaders{}}, nil
		}
		recommended = &copied
	}

	config := genericapiserver.NewRecommendedConfig(apiserver.Codecs)
	namer := openapi.NewDefinitionNamer(apiserver.Scheme)
	definitions := withoutRepeatedDescriptions(generatedopenapi.GetOpenAPIDefinitions)
	config.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(definitions, namer)
	config.OpenAPIConfig.Info.Title = "terrarun"
	config.OpenAPIConfig.Info.Version = "v1alpha1"
	config.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(definitions, namer)
	config.OpenAPIV3Config.Info.Title = "terrarun"
	config.OpenAPIV3Config.Info.Version = "v1alpha1"
	config.FeatureGate = utilfeature.DefaultFeatureGate
	config.BuildHandlerChainFunc = func(h http.Handler, c *genericapiserver.Config) http.Handler {
		return genericapiserver.DefaultBuildHandlerChain(apiserver.WithBoundedYAML(terraformrun.WithActionResult(h, apiserver.Codecs), c.MaxRequestBodyBytes), c)
	}
	config.EffectiveVersion = serverVersion{compatibility.DefaultBuildEffectiveVersion()}
	setLongRunning(config)
	port := recommended.SecureServing.BindPort // ApplyTo zeroes it when the listener fails
	if err := recommended.ApplyTo(config); err != nil {
		return nil, cleanup, portInUse(fmt.Errorf("applying options: %w", err), port)
	}

	executorServer := o.Executor.ServerURL
	executorCA := o.Executor.CAFile
	var rules authorizer.RuleResolver
	if sa != nil {
		var kubeconfig string
		kubeconfig, rules, err = o.applyStandalone(config, sa, runs)
		if err != nil {
			return nil, cleanup, err
		}
		if executorServer == "" {
			executorServer = config.LoopbackClientConfig.Host
		}
		if executorCA == "" {
			executorCA = sa.pki.CAFile()
		}
		if err := config.AddPostStartHook("terrarun-standalone-banner", func(genericapiserver.PostStartHookContext) error {
			fmt.Fprintf(o.Out, "terrarun is serving in standalone mode at %s\nkubeconfig: %s\ntry:        kubectl --kubeconfig %s get terraformruns\n",
				config.LoopbackClientConfig.Host, kubeconfig, kubeconfig)
			return nil
		}); err != nil {
			return nil, cleanup, err
		}
	}

	etcdClient, err := newEtcdClient(recommended.Etcd)
	if err != nil {
		return nil, cleanup, err
	}
	cleanups = append(cleanups, func() { _ = etcdClient.Close() })
	store, err := newArtifactStore(ctx, recommended.Etcd, o.Executor, &o.Artifacts, etcdClient)
	if err != nil {
		return nil, cleanup, err
	}
	if err := config.AddPostStartHook("terrarun-artifact-objects", func(hook genericapiserver.PostStartHookContext) error {
		go store.RunObjectMaintenance(hook)
		if o.Artifacts.Kind == "s3" && o.Artifacts.Migrate {
			go migrateArtifacts(hook, store)
		}
		return nil
	}); err != nil {
		return nil, cleanup, err
	}
	var (
		kube kubernetes.Interface
		meta metadata.Interface
		dyn  dynamic.Interface
	)
	if config.ClientConfig != nil {
		if kube, err = kubernetes.NewForConfig(config.ClientConfig); err != nil {
			return nil, cleanup, err
		}
		// Flux sources (spec.source.sourceRef) are the cluster's.
		if dyn, err = dynamic.NewForConfig(config.ClientConfig); err != nil {
			return nil, cleanup, err
		}
		// The ConfigMaps workspaces read are the cluster's, and watched,
		// where the executor reads them there (configMapData).
		if o.Executor.Kind != "local" {
			if meta, err = metadata.NewForConfig(config.ClientConfig); err != nil {
				return nil, cleanup, err
			}
		}
	}
	exec, creds, err := o.Executor.newExecutor(kube, dyn, etcdClient, o.workRoot(), executorServer, executorCA, o.Recommended.Admission.ConfigFile)
	if err != nil {
		return nil, cleanup, err
	}
	if msg := o.Executor.missingEngine(); msg != "" {
		klog.Warning("The local executor has no engine: " + msg)
	}
	if err := applyExecutorAuth(config, creds, runs); err != nil {
		return nil, cleanup, err
	}
	var states *terraformrun.StateBackend
	if o.Executor.inCluster() {
		if states, err = o.Executor.newStateBackend(ctx, config, recommended.Etcd, etcdClient, kube); err != nil {
			return nil, cleanup, err
		}
	}
	return &apiserver.Config{
		GenericConfig: config,
		ExtraConfig: apiserver.ExtraConfig{
			Rules: rules,
			Storage: apiserver.StorageConfig{
				Artifacts:         store,
				States:            states,
				Runs:              runs,
				MediaType:         o.Recommended.Etcd.DefaultStorageMediaType,
				ListCacheBytes:    o.ListCacheBytes,
				MaxFollowsPerUser: o.MaxFollowsPerUser,
			},
			Executor: apiserver.ExecutorConfig{
				Executor: exec,
				Defaults: o.Executor.serverDefaults(),
			},
			Controllers: apiserver.ControllerConfig{
				Enabled:               o.Executor.RunController,
				Etcd:                  etcdClient,
				Workers:               o.Executor.Workers,
				MaxStages:             o.Executor.maxStages(),
				MaxStagesPerNamespace: o.Executor.MaxConcurrentStagesPerNamespace,
				CancelGrace:           o.Executor.CancelGrace,
				ApplyGrace:            o.Executor.ShutdownApplyGrace,
				Kube:                  kube,
				ConfigMapData:         o.Executor.configMapData(kube, o.workRoot()),
				SecretValue:           o.Executor.secretValue(kube, o.workRoot()),
				RunTaskURL:            cmp.Or(o.Executor.RunTaskCallbackURL, executorServer),
				WebViewURL:            o.Executor.WebViewURL,
				Metadata:              meta,
				Dynamic:               dyn,
				FluxArtifactHost:      o.Executor.FluxArtifactHost,
			},
		},
	}, cleanup, nil
}

// Run starts the server and blocks until ctx is canceled and the server has
// shut down gracefully.
func (o *Options) Run(ctx context.Context) error {
	config, cleanup, err := o.Config(ctx)
	defer cleanup()
	if err != nil {
		return err
	}
	server, err := config.Complete().New()
	if err != nil {
		return err
	}
	return server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}

// portInUse adds the fix to err when it says that port is taken: the
// generic server reports the listener's error as text only.
func portInUse(err error, port int) error {
	if !strings.Contains(err.Error(), syscall.EADDRINUSE.Error()) {
		return err
	}
	return fmt.Errorf("%w: port %d is taken (is another terrarun running?); stop what listens there, or choose another port with --secure-port (make run RUN_FLAGS=--secure-port=%d)",
		err, port, port+1)
}
