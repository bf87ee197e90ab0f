package job

import "time"

// Paths inside the executor container.
const (
	// StageDir holds the stage Secret's stage.json and ca.crt.
	StageDir = "/etc/terrarun/stage"
	// StageFile is the stage.Spec handed to terrarun-executor.
	StageFile = StageDir + "/" + StageKey
	// CAFile verifies terrarun-apiserver's serving certificate.
	CAFile = StageDir + "/" + CAKey
	// StageKeyFile holds the stage attempt's key (StageKeys).
	StageKeyFile = StageDir + "/" + StageKeyKey
	// TokenDir holds the projected, audience-bound service-account token.
	TokenDir = "/var/run/secrets/terrarun"
	// TokenFile is the token; the kubelet rotates it, so it is read per request.
	TokenFile = TokenDir + "/token"
	// SourceDir holds inline and ConfigMap configuration files (plan stage).
	SourceDir = "/etc/terrarun/source"
	// GitCredentialsDir holds the keys of spec.source.git.credentialsSecret.
	GitCredentialsDir = "/etc/terrarun/git"
	// OCIDir holds, each in a directory of its own, the keys of an OCI
	// source's credentialsSecret, certSecret and verify.keysSecret.
	OCIDir = "/etc/terrarun/oci"
	// BackendDir holds backend.hcl of spec.backend.configSecret.
	BackendDir = "/etc/terrarun/backend"
	// BackendConfigFile is passed as -backend-config.
	BackendConfigFile = BackendDir + "/" + BackendConfigKey
	// VariablesDir holds one directory per Secret or ConfigMap that variables
	// read from, with one file per variable, named after it.
	VariablesDir = "/etc/terrarun/variables"
	// WorkDir is the private, empty working directory, and HOME.
	WorkDir = "/work"
	// TmpDir is a writable /tmp (the root filesystem is read-only).
	TmpDir = "/tmp"
	// KubeAPIAccessDir is where client-go's in-cluster configuration finds its
	// token, CA and namespace. It is mounted only for the in-cluster kubernetes
	// backend (see the package documentation).
	KubeAPIAccessDir = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// Keys of the stage Secret, and keys read from user Secrets.
const (
	StageKey = "stage.json"
	CAKey    = "ca.crt"
	// StageKeyKey is the stage Secret's key of the stage attempt's key.
	StageKeyKey = "stage-key"
	// SourceKeyPrefix prefixes the keys of inline configuration files.
	SourceKeyPrefix = "src-"
	// BackendConfigKey is the key of spec.backend.configSecret.
	BackendConfigKey = "backend.hcl"
)

// ContainerName is the name of the executor container.
const ContainerName = "executor"

// nonRootID is the user, group and fsGroup of executor pods (distroless's
// "nonroot").
const nonRootID int64 = 65532

// Defaults of JobOptions.
const (
	DefaultAudience               = "terrarun.dev"
	DefaultTokenExpiration        = time.Hour
	DefaultTTLAfterFinished       = time.Hour
	DefaultGracePeriod            = 30 * time.Second
	DefaultNodeLostAfter          = time.Minute
	defaultRequestCPU             = "100m"
	defaultRequestMemory          = "256Mi"
	defaultLimitMemory            = "1Gi"
	stageSecretSuffix             = "-stage"
	volumeStage                   = "stage"
	volumeToken                   = "terrarun-token"
	volumeSource                  = "source"
	volumeGit                     = "git-credentials"
	volumeOCICredentials          = "oci-credentials"
	volumeOCICA                   = "oci-ca"
	volumeOCIKeys                 = "oci-keys"
	volumeOCITrustedRoot          = "oci-trusted-root"
	volumeBackend                 = "backend-config"
	volumeWork                    = "work"
	volumeTmp                     = "tmp"
	volumeKubeAPIAccess           = "kube-api-access"
	volumePluginCache             = "plugin-cache"
	kubeRootCAConfigMap           = "kube-root-ca.crt"
	defaultContainerAnnotationKey = "kubectl.kubernetes.io/default-container"
)

// minTokenExpiration is the shortest expirationSeconds the API accepts.
const minTokenExpiration = 10 * time.Minute

// readable is the mode of files from Secret and ConfigMap volumes: owned by
// root and the pod's fsGroup, readable by the group only.
const readable int32 = 0o440

// JobOptions are the settings of the kubernetes executor that do not come
// from the run. Zero values mean the documented defaults.
type JobOptions struct {
	// ServerURL is terrarun-apiserver's base URL as seen from executor pods,
	// e.g. https://terrarun-apiserver.terrarun-system.svc:443.
	ServerURL string
	// CABundle verifies terrarun-apiserver's serving certificate. When empty,
	// the executor uses the system roots.
	CABundle []byte
	// StageKeys, when set, gives each stage attempt its key, in its stage
	// Secret; the IdentityResolver given the same keys asks for it.
	StageKeys *StageKeys
	// Audience of the projected token that executor pods authenticate with.
	// terrarun-apiserver's authenticator must accept it. Default "terrarun.dev".
	Audience string
	// TokenExpiration of the projected tokens. Default 1h, at least 10m (the
	// API's minimum); the kubelet rotates them at 80% of it.
	TokenExpiration time.Duration
	// TTLAfterFinished is the Job's ttlSecondsAfterFinished. Default 1h.
	TTLAfterFinished time.Duration
	// GracePeriod is the pod's terminationGracePeriodSeconds: the time
	// terraform has after SIGINT to release locks and save state. Default 30s.
	GracePeriod time.Duration
	// Image is the executor image for runs without spec.engine.image.
	Image string
	// ServiceAccountName is the executor pods' service account for runs
	// without spec.executor.serviceAccountName. Default: the namespace's
	// "default" service account.
	ServiceAccountName string
	// SpreadTopologyKey, when set, spreads a namespace's executor pods over
	// the values of this node label (kubernetes.io/hostname: over nodes) with
	// a soft topology spread constraint: runs do not pile onto one node, and
	// still start when they cannot spread. Empty: no constraint.
	SpreadTopologyKey string
	// NodeLostAfter is how long the node of a stage's pod may go without
	// reporting (its Ready condition Unknown) before the stage is reported
	// lost: a plan is then retried on another node, and an apply fails
	// without ever running again. Default 1m (after the node lifecycle
	// controller's grace period, 50s by default, marks the node).
	NodeLostAfter time.Duration
	// PluginCache configures the provider plugin caches of the stages
	// (plugincache.go); the zero value: none.
	PluginCache PluginCacheOptions
	// HostName, when set, is the host name of the pod of the execution
	// named name, which state locks record: the Tekton executor's pods are
	// named, and so host-named, by Tekton. Default: the name itself, which
	// a Job's pod takes as spec.hostname.
	HostName func(name string) string
}

func (o JobOptions) withDefaults() JobOptions {
	if o.Audience == "" {
		o.Audience = DefaultAudience
	}
	if o.TokenExpiration <= 0 {
		o.TokenExpiration = DefaultTokenExpiration
	}
	if o.TokenExpiration < minTokenExpiration {
		o.TokenExpiration = minTokenExpiration
	}
	if o.TTLAfterFinished <= 0 {
		o.TTLAfterFinished = DefaultTTLAfterFinished
	}
	if o.GracePeriod <= 0 {
		o.GracePeriod = DefaultGracePeriod
	}
	if o.NodeLostAfter <= 0 {
		o.NodeLostAfter = DefaultNodeLostAfter
	}
	if o.HostName == nil {
		o.HostName = func(name string) string { return name }
	}
	return o
}

// stageSecretName is the name of the Secret that holds a Job's stage.json.
func stageSecretName(jobName string) string { return jobName + stageSecretSuffix }

// inputsSecretName is the Secret holding the values of a plan stage's
// variables read from run outputs.
func inputsSecretName(jobName string) string { return jobName + "-inputs" }
