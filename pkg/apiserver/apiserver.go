// Package apiserver assembles the terrarun API server from its configuration,
// as k8s.io/sample-apiserver does: the scheme, the terrarun.dev API group and
// the storage behind it, the run controller (a post-start hook, leader-elected)
// and the executor's shutdown (a pre-shutdown hook).
package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	restclient "k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/terrarun/terrarun/pkg/admission/initializer"
	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/install"
	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/metrics"
	"github.com/terrarun/terrarun/pkg/registry/terraformnotification"
	"github.com/terrarun/terrarun/pkg/registry/terraformpolicy"
	"github.com/terrarun/terrarun/pkg/registry/terraformrun"
	"github.com/terrarun/terrarun/pkg/registry/terraformruntask"
	"github.com/terrarun/terrarun/pkg/registry/terraformworkspace"
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
	if err := addStandaloneTypes(Scheme); err != nil {
		panic(err)
	}
}

// ExtraConfig is terrarun's configuration beyond the generic server's: where
// runs and their artifacts are kept, what runs their stages, and the
// controllers.
type ExtraConfig struct {
	Storage     StorageConfig
	Executor    ExecutorConfig
	Controllers ControllerConfig
	// Rules lists what a user may do, for SelfSubjectRulesReviews
	// (standalone mode; behind a cluster, kube-apiserver answers them).
	Rules authorizer.RuleResolver

	// applying names the executions that apply now, while this replica's
	// run controller runs; the shutdown gives them time to end.
	applying *applyingExecutions
}

// applyingExecutions holds the run controller's view of the executions that
// apply now, while it runs.
type applyingExecutions struct {
	fn atomic.Pointer[func() []string]
}

// names are the executions that apply now, as the run controller sees them.
func (a *applyingExecutions) names() []string {
	if fn := a.fn.Load(); fn != nil {
		return (*fn)()
	}
	return nil
}

// StorageConfig says where the server keeps runs and workspaces, their
// artifacts and the state it serves, and how it serves them.
type StorageConfig struct {
	// Artifacts stores plans, logs and outputs.
	Artifacts *artifacts.Store
	// States is the state served to the stages of runs that name no
	// backend; nil where the executor keeps that state itself.
	States *terraformrun.StateBackend
	// Runs, when set, is bound to the run store once it is built: the
	// admission plugins read runs through it.
	Runs *initializer.StoreRunGetter
	// MediaType is how objects are stored (--storage-media-type):
	// protobuf by default, JSON or YAML.
	MediaType string
	// ListCacheBytes bounds the encoded runs and workspaces kept for LIST
	// responses (listCachingJSON); 0 keeps none.
	ListCacheBytes int
	// MaxFollowsPerUser caps the log follows and plan waits one user holds
	// open on this server.
	MaxFollowsPerUser int
}

// ExecutorConfig says what runs the stages of runs.
type ExecutorConfig struct {
	// Executor runs the runs' stages.
	Executor executor.Executor
	// Defaults fill a run's spec.engine where neither the run nor the
	// cluster policy sets it.
	Defaults terrarun.ServerDefaults
}

// ControllerConfig configures the run and workspace controllers, which run
// on the elected replica only.
type ControllerConfig struct {
	// Enabled runs the controller; without it the server serves the API only
	// and runs stay Pending.
	Enabled bool
	// Etcd elects the leader among the replicas.
	Etcd *clientv3.Client
	// Workers is the number of runs reconciled in parallel.
	Workers int
	// MaxStages and MaxStagesPerNamespace bound the stages that run at
	// once, in all and in one namespace; 0 is no bound.
	MaxStages, MaxStagesPerNamespace int
	// CancelGrace is how long a canceled, timed-out or shut-down stage gets
	// after SIGINT before it is killed.
	CancelGrace time.Duration
	// ApplyGrace is how long a shutdown waits for the applies in flight to
	// end before it stops them.
	ApplyGrace time.Duration
	// Kube is the host cluster, where Events are recorded and outputs
	// Secrets written; nil in standalone mode.
	Kube kubernetes.Interface
	// ConfigMapData reads the ConfigMaps whose content is part of a
	// workspace's hash, where the executor reads them.
	ConfigMapData func(ctx context.Context, namespace, name string) (map[string]string, error)
	// SecretValue reads a key of a Secret where the executor reads them:
	// the run tasks' and notifications' HMAC keys, and Slack URLs.
	SecretValue func(ctx context.Context, namespace, name, key string) ([]byte, error)
	// RunTaskURL is the base URL at which run tasks reach this server.
	RunTaskURL string
	// WebViewURL is the base URL of the web view that notifications link
	// to when they name none; no link when empty.
	WebViewURL string
	// Metadata reads the metadata of the host cluster's objects, to watch
	// the ConfigMaps workspaces read; nil in standalone mode, which reads
	// them again every minute.
	Metadata metadata.Interface
	// Dynamic reads the host cluster's Flux sources (spec.source.sourceRef),
	// accepted only from FluxArtifactHost; nil in standalone mode.
	Dynamic          dynamic.Interface
	FluxArtifactHost string
}

// Config is the configuration of a terrarun API server.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	ExtraConfig   ExtraConfig
}

type completedConfig struct {
	GenericConfig genericapiserver.CompletedConfig
	ExtraConfig   *ExtraConfig
}

// CompletedConfig is a Config with every default filled in; only Complete
// makes one.
type CompletedConfig struct {
	*completedConfig
}

// Complete fills in defaults.
func (c *Config) Complete() CompletedConfig {
	if c.ExtraConfig.Controllers.Workers <= 0 {
		c.ExtraConfig.Controllers.Workers = 4
	}
	if c.ExtraConfig.applying == nil {
		c.ExtraConfig.applying = &applyingExecutions{}
	}
	return CompletedConfig{&completedConfig{GenericConfig: c.GenericConfig.Complete(), ExtraConfig: &c.ExtraConfig}}
}

// Server is a terrarun API server.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
}

// New builds the server: it installs the terrarun.dev API group, the run
// controller's post-start hook, and a pre-shutdown hook that stops the stages
// this process runs, while the server still accepts their last uploads.
func (c CompletedConfig) New() (*Server, error) {
	generic, err := c.GenericConfig.New("terrarun-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("building the generic API server: %w", err)
	}
	extra := c.ExtraConfig
	metrics.Register()
	own, err := newLoopbackInformers(generic, c.GenericConfig.LoopbackClientConfig)
	if err != nil {
		return nil, err
	}
	deps := terraformrun.Deps{
		RunsOnState:       own.runsOnState,
		CheckPolicy:       own.policyCheck(extra.Controllers.Kube),
		States:            extra.Storage.States,
		Defaults:          extra.Executor.Defaults,
		NoHostCluster:     extra.Controllers.Kube == nil,
		MaxFollowsPerUser: extra.Storage.MaxFollowsPerUser,
		OnDelete: func(ctx context.Context, namespace, name, uid string) {
			if err := extra.Executor.Executor.Forget(ctx, namespace, name, uid); err != nil {
				klog.FromContext(ctx).Error(err, "Stopping the executions of a deleted run", "run", klog.KRef(namespace, name))
			}
		},
	}
	if extra.Storage.Artifacts != nil {
		deps.Artifacts = extra.Storage.Artifacts
	}
	runs, err := terraformrun.NewStorage(Scheme, c.GenericConfig.RESTOptionsGetter, deps)
	if err != nil {
		return nil, err
	}
	if extra.Storage.Runs != nil {
		extra.Storage.Runs.Bind(runs.Run)
	}

	workspaces, err := terraformworkspace.NewStorage(Scheme, c.GenericConfig.RESTOptionsGetter, extra.Executor.Defaults, extra.Controllers.Kube == nil, runs.Run)
	if err != nil {
		return nil, err
	}

	policies, err := terraformpolicy.NewREST(Scheme, c.GenericConfig.RESTOptionsGetter)
	if err != nil {
		return nil, err
	}
	runTasks, err := terraformruntask.NewREST(Scheme, c.GenericConfig.RESTOptionsGetter)
	if err != nil {
		return nil, err
	}
	notifications, err := terraformnotification.NewStorage(Scheme, c.GenericConfig.RESTOptionsGetter)
	if err != nil {
		return nil, err
	}

	group := genericapiserver.NewDefaultAPIGroupInfo(terrarun.GroupName, Scheme, runtime.NewParameterCodec(Scheme), Codecs)
	// The group's serializer serves JSON, YAML and protobuf, streams lists,
	// and serves CBOR when the CBORServingAndStorage feature gate is on.
	group.NegotiatedSerializer = groupSerializer{group.NegotiatedSerializer, newEncodingCache(extra.Storage.ListCacheBytes)}
	group.VersionedResourcesStorageMap["v1alpha1"] = map[string]rest.Storage{
		"terraformruns":            runs.Run,
		"terraformruns/status":     runs.Status,
		"terraformruns/approve":    runs.Approve,
		"terraformruns/override":   runs.Override,
		"terraformruns/discard":    runs.Discard,
		"terraformruns/cancel":     runs.Cancel,
		"terraformruns/plan":       runs.Plan,
		"terraformruns/logs":       runs.Logs,
		"terraformruns/outputs":    runs.Outputs,
		"terraformruns/state":      runs.State,
		"terraformruns/statelock":  runs.StateLock,
		"terraformruns/taskresult": runs.TaskResult,

		"terraformworkspaces":        workspaces.Workspace,
		"terraformworkspaces/status": workspaces.Status,
		"terraformworkspaces/rerun":  workspaces.Rerun,

		"terraformpolicies": policies,
		"terraformruntasks": runTasks,

		"terraformnotifications":        notifications.Notification,
		"terraformnotifications/status": notifications.Status,
	}
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, fmt.Errorf("installing the %s API group: %w", terrarun.GroupName, err)
	}
	if extra.Controllers.Kube == nil {
		if err := installStandaloneAPIs(generic, c.GenericConfig.RESTOptionsGetter, extra.Storage.MediaType, c.GenericConfig.Authorization.Authorizer, extra.Rules); err != nil {
			return nil, err
		}
	}

	if extra.Controllers.Enabled {
		if err := generic.AddPostStartHook("terrarun-run-controller", func(hook genericapiserver.PostStartHookContext) error {
			return extra.startControllers(hook)
		}); err != nil {
			return nil, err
		}
	}
	// Stages in flight get SIGINT and a grace period to release their state
	// locks; a restarted server finds them lost, retries a plan and never
	// re-applies.
	// Follows and plan waits end at once rather than hold the shutdown up.
	if err := generic.AddPreShutdownHook("terrarun-end-waits", func() error {
		runs.EndWaits()
		return nil
	}); err != nil {
		return nil, err
	}
	if err := generic.AddPreShutdownHook("terrarun-executor-shutdown", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), extra.Controllers.ApplyGrace+extra.Controllers.CancelGrace+10*time.Second)
		defer cancel()
		return extra.Executor.Executor.Shutdown(ctx, executor.ShutdownOptions{
			Grace:      extra.Controllers.CancelGrace,
			Applying:   extra.applying.names,
			ApplyGrace: extra.Controllers.ApplyGrace,
		})
	}); err != nil {
		return nil, err
	}
	return &Server{GenericAPIServer: generic}, nil
}

// StorageCodec stores objects in version gv encoded as mediaType, one of the
// media types the group serves (protobuf, JSON or YAML), and reads back
// objects stored in any of them, converted to the internal version: a
// server started with another --storage-media-type reads what earlier ones
// stored. The strings that repeat across decoded runs share one copy
// (interningCodec).
func StorageCodec(mediaType string, gv schema.GroupVersion) (runtime.Codec, error) {
	info, ok := runtime.SerializerInfoForMediaType(Codecs.SupportedMediaTypes(), mediaType)
	if !ok || mediaType == runtime.ContentTypeCBOR {
		return nil, fmt.Errorf("--storage-media-type %q: objects can be stored as %s, %s or %s", mediaType, runtime.ContentTypeProtobuf, runtime.ContentTypeJSON, runtime.ContentTypeYAML)
	}
	codec := Codecs.CodecForVersions(info.Serializer, Codecs.UniversalDeserializer(), schema.GroupVersions{gv}, runtime.InternalGroupVersioner)
	return interningCodec{Codec: codec, table: &internTable{}}, nil
}

// ProtobufClientConfig returns a copy of c for the server's clients of
// itself (the controllers, admission): they send and accept protobuf, the
// encoding cheapest to produce and read, and accept JSON for anything that
// has no protobuf encoding.
func ProtobufClientConfig(c *restclient.Config) *restclient.Config {
	c = restclient.CopyConfig(c)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}

// groupSerializer is the group's serializer with a JSON decoder that reads
// YAML too (yamlTolerantJSON), and JSON and protobuf encoders that encode
// the items of lists once per resourceVersion (listCaching).
type groupSerializer struct {
	runtime.NegotiatedSerializer
	lists *encodingCache
}

// SupportedMediaTypes is the embedded serializer's media types, JSON's and
// protobuf's wrapped.
func (s groupSerializer) SupportedMediaTypes() []runtime.SerializerInfo {
	infos := slices.Clone(s.NegotiatedSerializer.SupportedMediaTypes())
	for i, info := range infos {
		if info.MediaType == runtime.ContentTypeProtobuf {
			infos[i].Serializer = listCaching{info.Serializer, protobufList, s.lists}
		}
		if info.MediaType != runtime.ContentTypeJSON {
			continue
		}
		infos[i].Serializer = yamlTolerantJSON{listCaching{info.Serializer, jsonList, s.lists}}
		if info.StrictSerializer != nil {
			infos[i].StrictSerializer = yamlTolerantJSON{info.StrictSerializer}
		}
	}
	return infos
}

// yamlTolerantJSON decodes a body sent as JSON that is YAML, as `kubectl
// create --raw -f file.yaml` sends a file whatever it holds: the action
// subresources' bodies are small documents users write by hand. JSON is
// decoded as it is; anything else is converted from YAML first, and still
// refused when it is neither.
type yamlTolerantJSON struct{ runtime.Serializer }

// Decode implements runtime.Decoder. A duration that does not parse is
// named by its field: the JSON decoder says only what is wrong with it.
func (s yamlTolerantJSON) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] != '{' {
		if js, err := yaml.YAMLToJSON(data); err == nil {
			data = js
		}
	}
	obj, gvk, err := s.Serializer.Decode(data, defaults, into)
	if err != nil && strings.Contains(err.Error(), "time: ") {
		if path := badDuration(data, err.Error()); path != "" {
			err = fmt.Errorf("%s: %w; write a duration such as 30m, 1h or 1h30m", path, err)
		}
	}
	return obj, gvk, err
}

// badDuration returns the path of the first string in the JSON document
// data that time.ParseDuration refuses with the error msg mentions, or "".
func badDuration(data []byte, msg string) string {
	var doc any
	if json.Unmarshal(data, &doc) != nil {
		return ""
	}
	var walk func(v any, path *field.Path) string
	walk = func(v any, path *field.Path) string {
		switch v := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(v)) {
				if p := walk(v[k], path.Child(k)); p != "" {
					return p
				}
			}
		case []any:
			for i, e := range v {
				if p := walk(e, path.Index(i)); p != "" {
					return p
				}
			}
		case string:
			if _, err := time.ParseDuration(v); err != nil && strings.Contains(msg, err.Error()) {
				return path.String()
			}
		}
		return ""
	}
	return walk(doc, nil)
}
