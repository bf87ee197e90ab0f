package server

import (
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/terrarun/terrarun/pkg/admission/plugin/terraformrunpolicy"
	"github.com/terrarun/terrarun/pkg/admission/policy"
	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/executor/job"
	"github.com/terrarun/terrarun/pkg/executor/local"
	"github.com/terrarun/terrarun/pkg/executor/tekton"
	"github.com/terrarun/terrarun/pkg/fluxsource"
	"github.com/terrarun/terrarun/pkg/sandbox"
	"github.com/terrarun/terrarun/pkg/stagelimits"

	genericapiserver "k8s.io/apiserver/pkg/server"
)

// ExecutorOptions configure how runs execute.
type ExecutorOptions struct {
	// Kind is "local" (child processes on this host), "kubernetes" (Jobs)
	// or "tekton" (Tekton TaskRuns).
	Kind string
	// TektonNamespace is Tekton Pipelines' namespace, where its
	// config-defaults are.
	TektonNamespace string
	// Binary is terrarun-executor for the local executor.
	Binary string
	// ServerURL is where executors reach this server; standalone mode fills it in.
	ServerURL string
	// CAFile verifies this server's certificate for executors; standalone mode fills it in.
	CAFile string
	// RunTaskCallbackURL is where run tasks reach this server; ServerURL
	// when empty.
	RunTaskCallbackURL string
	// WebViewURL is the base URL of the web view that notifications link
	// to when they name none.
	WebViewURL string
	// FluxArtifactHost is the host[:port] of Flux source-controller's
	// artifact server: the one place a run's Flux artifact is downloaded
	// from (cluster mode).
	FluxArtifactHost string
	// Workers is the number of run controller workers.
	Workers int
	// MaxConcurrentStages bounds the stages that run at once (-1: the
	// default of the executor, maxStagesDefault), and
	// MaxConcurrentStagesPerNamespace those of one namespace; 0 is no bound.
	MaxConcurrentStages, MaxConcurrentStagesPerNamespace int
	// CancelGrace is how long a stopped stage gets between SIGINT and a kill.
	CancelGrace time.Duration
	// ShutdownApplyGrace is how long a shutdown waits for the applies in
	// flight (local executor) to end before it stops them.
	ShutdownApplyGrace time.Duration
	// ArtifactRetention is the lease of every artifact.
	ArtifactRetention time.Duration
	// MaxLogBytes caps each stage attempt's log.
	MaxLogBytes int64
	// MaxRunLogBytes, MaxNamespaceLogBytes and MaxTotalLogBytes cap the logs
	// of a run, of a namespace and of all runs.
	MaxRunLogBytes, MaxNamespaceLogBytes, MaxTotalLogBytes int64
	// MaxPlanBytes caps the plan text and the redacted plan JSON.
	MaxPlanBytes int64
	// MaxStateBytes, MaxNamespaceStateBytes and StateVersions bound the
	// state served to Job stages (package statestore).
	MaxStateBytes, MaxNamespaceStateBytes int64
	StateVersions                         int
	// DefaultEngine is spec.engine.binary for runs that set none.
	DefaultEngine string
	// SpreadTopologyKey spreads the kubernetes executor's pods over the
	// values of this node label; empty: no spread constraint.
	SpreadTopologyKey string
	// NodeLostAfter is how long an executor pod's node may be silent before
	// its stage is reported lost.
	NodeLostAfter time.Duration
	// PluginCacheStorageClass, when set, gives the kubernetes executor's
	// stages a provider plugin cache per creator and namespace: a
	// ReadWriteMany PersistentVolumeClaim of this class, of
	// PluginCacheSize.
	PluginCacheStorageClass string
	PluginCacheSize         resource.QuantityValue
	// RunController runs the run controller (leader-elected). Without it the
	// server serves the API only and runs stay Pending.
	RunController bool
	// UnsandboxedLocal allows the local executor outside standalone mode,
	// where its stages run on the server's host.
	UnsandboxedLocal bool
	// LocalSandbox sandboxes local stages (package sandbox).
	LocalSandbox bool
	// LocalUser is "UID:GID", the user of sandboxed local stages when the
	// server runs as root.
	LocalUser string
	// LocalMounts are host paths every sandboxed local stage sees: PATH, or
	// PATH:rw for read-write.
	LocalMounts []string
	// LocalEnv are NAME=VALUE entries of every local stage's environment.
	LocalEnv []string
	// LocalStageMemory, LocalStageProcesses, LocalStageCPU and
	// LocalStageDisk bound each local stage, and LocalNamespaceState the
	// state directory of a namespace (package stagelimits).
	LocalStageMemory, LocalStageCPU, LocalStageDisk, LocalNamespaceState resource.QuantityValue
	LocalStageProcesses                                                  int64
}

func newExecutorOptions() *ExecutorOptions {
	return &ExecutorOptions{
		Kind:                "local",
		RunController:       true,
		Workers:             4,
		FluxArtifactHost:    fluxsource.DefaultArtifactHost,
		MaxConcurrentStages: -1,
		CancelGrace:         20 * time.Second,
		ShutdownApplyGrace:  5 * time.Minute,
		ArtifactRetention:   30 * 24 * time.Hour,
		LocalSandbox:        true,
		LocalUser:           "65532:65532",
		SpreadTopologyKey:   corev1.LabelHostname,
		NodeLostAfter:       job.DefaultNodeLostAfter,
		TektonNamespace:     "tekton-pipelines",
		PluginCacheSize:     resource.QuantityValue{Quantity: job.DefaultPluginCacheSize},
		LocalStageMemory:    resource.QuantityValue{Quantity: resource.MustParse("2Gi")},
		LocalStageCPU:       resource.QuantityValue{Quantity: resource.MustParse("2")},
		LocalStageDisk:      resource.QuantityValue{Quantity: resource.MustParse("4Gi")},
		LocalNamespaceState: resource.QuantityValue{Quantity: resource.MustParse("1Gi")},
		LocalStageProcesses: 1024,
	}
}

// Flags of the local stage limits, named in the messages of the limits.
var localLimitFlags = stagelimits.Flags{
	Memory: "--local-stage-memory", Processes: "--local-stage-processes",
	Disk: "--local-stage-disk", NamespaceState: "--local-namespace-state-size",
}

// localLimits are the limits of local stages that the flags set.
func (o *ExecutorOptions) localLimits() stagelimits.Limits {
	return stagelimits.Limits{
		Memory:         o.LocalStageMemory.Value(),
		Processes:      o.LocalStageProcesses,
		CPUMillis:      o.LocalStageCPU.MilliValue(),
		Disk:           o.LocalStageDisk.Value(),
		NamespaceState: o.LocalNamespaceState.Value(),
	}
}

// maxStages is the bound on concurrent stages: the flag's, or by default,
// with the local executor, two stages per CPU of this host and at most one
// per 512 MiB of its memory (a stage is an engine with its providers), and
// with Jobs none: the cluster's scheduler and quotas bound them.
func (o *ExecutorOptions) maxStages() int {
	if o.MaxConcurrentStages >= 0 || o.Kind != "local" {
		return max(o.MaxConcurrentStages, 0)
	}
	n := 2 * runtime.NumCPU()
	if mem := memTotal(); mem > 0 {
		n = min(n, int(mem/(512<<20)))
	}
	return max(n, 1)
}

// memTotal is the host's memory in bytes, or 0 when unknown.
func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// AddFlags adds the executor flags.
func (o *ExecutorOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kind, "executor", o.Kind, "Where stages run: local (child processes of this server; the standalone default), kubernetes (one Job per stage) or tekton (one Tekton Pipelines TaskRun per stage, tekton.dev/v1; Tekton must be installed).")
	fs.StringVar(&o.Binary, "executor-binary", o.Binary, "Local executor: path of terrarun-executor. Default: beside this binary, else on PATH.")
	fs.StringVar(&o.ServerURL, "executor-server-url", o.ServerURL, "URL at which executors reach this server. Standalone mode sets it.")
	fs.StringVar(&o.FluxArtifactHost, "flux-artifact-host", o.FluxArtifactHost, "Cluster mode: host[:port] of Flux source-controller's artifact server (its --storage-adv-addr). A run from a Flux source (spec.source.sourceRef) downloads the source's artifact only when its URL is on this host, below that source's own path.")
	fs.StringVar(&o.WebViewURL, "web-view-url", o.WebViewURL, "Base URL of the web view of runs that notifications (TerraformNotification) link to when they set no spec.webViewURL: a run's page is URL/namespaces/NS/terraformruns/NAME. No link when empty.")
	fs.StringVar(&o.RunTaskCallbackURL, "run-task-callback-url", o.RunTaskCallbackURL, "URL at which run tasks (TerraformRunTask) reach this server: the base of the callback and plan URLs of their payloads. Default: --executor-server-url.")
	fs.StringVar(&o.CAFile, "executor-ca-file", o.CAFile, "CA bundle executors use to verify this server. Standalone mode sets it.")
	fs.StringVar(&o.SpreadTopologyKey, "executor-spread-topology-key", o.SpreadTopologyKey, "Kubernetes executor: spread each namespace's executor pods over the values of this node label, softly "+
		"(a topology spread constraint with ScheduleAnyway), so that runs do not pile onto one node; empty: no constraint.")
	fs.StringVar(&o.TektonNamespace, "tekton-namespace", o.TektonNamespace, "Tekton executor: the namespace of Tekton Pipelines, whose ConfigMap config-defaults says what its webhook adds to every TaskRun (default-pod-template), which terrarun then takes for Tekton's, not a forgery.")
	fs.DurationVar(&o.NodeLostAfter, "executor-node-lost-after", o.NodeLostAfter, "Kubernetes executor: how long the node of a stage's pod may go without reporting (Ready Unknown) before the stage is reported lost: "+
		"a plan is then retried on another node, and an apply fails and is never run again.")
	fs.StringVar(&o.PluginCacheStorageClass, "executor-plugin-cache-storage-class", o.PluginCacheStorageClass, "Kubernetes executor: give each creator's stages in a namespace a provider plugin cache, "+
		"a PersistentVolumeClaim of this StorageClass that terrarun creates: providers are installed once, and later stages, an approved apply's included, link them from it. "+
		"Its volumes must be ReadWriteMany, writable by group 65532 and support flock. Empty: no cache; every stage installs its providers again.")
	fs.Var(&o.PluginCacheSize, "executor-plugin-cache-size", "Kubernetes executor: the storage each plugin cache claims, such as 5Gi.")
	fs.StringVar(&o.DefaultEngine, "default-engine", o.DefaultEngine, "spec.engine.binary of runs that set none and get none from the cluster policy: terraform or tofu. "+
		"Default: terraform, except with the local executor when only tofu is on PATH.")
	fs.BoolVar(&o.UnsandboxedLocal, "allow-unsandboxed-local-executor", o.UnsandboxedLocal, "Allow --executor=local outside standalone mode. Its stages run on this server's host and share its kernel and network, "+
		"outside any cluster policy, pod security or resource limit (and with its user and whole view of the host with --local-executor-sandbox=false): only for a trusted, single-tenant host.")
	fs.BoolVar(&o.LocalSandbox, "local-executor-sandbox", o.LocalSandbox, "Run each local stage in a sandbox: its own mount and PID namespaces in which it sees only the system, its PATH, "+
		"its work directory and its namespace's state, as an unprivileged user; every process of the stage ends with it. "+
		"false runs stages as plain child processes of this server, with its user and its view of the host.")
	fs.StringVar(&o.LocalUser, "local-executor-user", o.LocalUser, "UID:GID that sandboxed local stages run as when this server runs as root (neither 0). "+
		"Without root they run as this server's user, in a user namespace.")
	fs.StringSliceVar(&o.LocalMounts, "local-executor-mount", o.LocalMounts, "Host paths every sandboxed local stage sees, read-only (PATH) or read-write (PATH:rw): "+
		"a provider mirror, a plugin cache, a CLI configuration file. Repeatable.")
	fs.StringArrayVar(&o.LocalEnv, "local-executor-env", o.LocalEnv, "NAME=VALUE in every local stage's environment, such as TF_CLI_CONFIG_FILE=/etc/terrarun/terraformrc "+
		"(with --local-executor-mount for the file) or a proxy. Never a secret: the server's arguments are visible on its host. Repeatable.")
	fs.BoolVar(&o.RunController, "run-controller", o.RunController, "Run the run controller (leader-elected through etcd, so several replicas are safe). "+
		"false serves the API only and leaves runs Pending: for API-only replicas and API benchmarks.")
	fs.IntVar(&o.Workers, "controller-workers", o.Workers, "Runs reconciled in parallel by the run controller.")
	fs.IntVar(&o.MaxConcurrentStages, "max-concurrent-stages", o.MaxConcurrentStages, "Stages that run at once; more runs wait in phase Queued and start first in, first out. "+
		"-1: with the local executor two per CPU, at most one per 512 MiB of memory; with Jobs, no bound. 0: no bound.")
	fs.IntVar(&o.MaxConcurrentStagesPerNamespace, "max-concurrent-stages-per-namespace", o.MaxConcurrentStagesPerNamespace, "Stages of one namespace that run at once; 0: no bound.")
	fs.DurationVar(&o.CancelGrace, "cancel-grace-period", o.CancelGrace, "Time a canceled or timed-out stage gets after SIGINT to release state locks before it is killed.")
	fs.DurationVar(&o.ShutdownApplyGrace, "shutdown-apply-grace-period", o.ShutdownApplyGrace, "On SIGTERM or Ctrl-C, how long the server waits for the applies in flight of its local executor to end before it interrupts them (an apply cut off leaves its resources tainted); it starts no stage meanwhile, and plans in flight are stopped at once. 0: interrupt them at once.")
	fs.DurationVar(&o.ArtifactRetention, "artifact-retention", o.ArtifactRetention, "How long plans, logs and outputs are kept (an etcd lease); they are also removed with their run.")
	fs.Int64Var(&o.MaxLogBytes, "max-log-bytes", o.MaxLogBytes, "Size cap of one stage attempt's log; past it the log ends with a truncation marker. 0: 64 MiB.")
	fs.Int64Var(&o.MaxRunLogBytes, "max-run-log-bytes", o.MaxRunLogBytes, "Size cap of all logs of one run together; past it its log ends with a truncation marker. 0: 256 MiB.")
	fs.Int64Var(&o.MaxNamespaceLogBytes, "max-namespace-log-bytes", o.MaxNamespaceLogBytes, "Size cap of all logs of the runs of one namespace; past it logs end with a truncation marker until runs are deleted. 0: 1 GiB.")
	fs.Int64Var(&o.MaxTotalLogBytes, "max-total-log-bytes", o.MaxTotalLogBytes, "Size cap of all logs in etcd, kept under etcd's space quota (--quota-backend-bytes of etcd, 2 GiB by default) so that logs cannot make etcd read-only. 0: 1.5 GiB.")
	fs.Var(&o.LocalStageMemory, "local-stage-memory", "Memory of each local stage, page cache and tmpfs included, in a cgroup of its own (cgroup v2 when delegated to the server, else v1; the server logs at start whether it can); a stage killed at it fails with reason LimitExceeded. 0: no bound.")
	fs.Int64Var(&o.LocalStageProcesses, "local-stage-processes", o.LocalStageProcesses, "Processes and threads of each local stage, in its cgroup; a fork over it is refused. 0: no bound.")
	fs.Var(&o.LocalStageCPU, "local-stage-cpu", "CPU of each local stage, in its cgroup (500m: half a CPU); a stage over it is throttled. 0: no bound.")
	fs.Var(&o.LocalStageDisk, "local-stage-disk", "Bytes each local stage may leave in its work directory and add to its namespace's state directory and plugin cache, measured every 2s and when it ends; a stage over it is stopped and fails with reason LimitExceeded, and what a plan added is removed. 0: no bound.")
	fs.Var(&o.LocalNamespaceState, "local-namespace-state-size", "Size of a namespace's state directory (standalone and local executor); a stage that grows it past this fails with reason LimitExceeded. 0: no bound.")
	fs.Int64Var(&o.MaxStateBytes, "max-state-bytes", o.MaxStateBytes, "With --executor=kubernetes or tekton, size cap of one version of a state that terrarun serves (runs that name no backend); a larger one fails the apply's state write. 0: 64 MiB.")
	fs.Int64Var(&o.MaxNamespaceStateBytes, "max-namespace-state-bytes", o.MaxNamespaceStateBytes, "With --executor=kubernetes or tekton, cap of the stored (compressed) bytes of every kept version of every state that terrarun serves to one namespace. 0: 256 MiB.")
	fs.IntVar(&o.StateVersions, "state-versions", o.StateVersions, "With --executor=kubernetes or tekton, versions kept of each state that terrarun serves. 0: 10.")
	fs.Int64Var(&o.MaxPlanBytes, "max-plan-bytes", o.MaxPlanBytes, "Size cap of the plan text and of the redacted plan JSON; past it they end with a truncation marker. 0: 32 MiB for text, 64 MiB for JSON.")
}

// inCluster says whether stages run in the cluster, as Jobs or as Tekton
// TaskRuns, from the executor image, in pods that authenticate with their
// projected tokens.
func (o *ExecutorOptions) inCluster() bool { return o.Kind == "kubernetes" || o.Kind == "tekton" }

// Validate reports invalid executor flags.
func (o *ExecutorOptions) Validate(standalone bool) []error {
	var errs []error
	if o.Kind == "local" && !standalone && !o.UnsandboxedLocal {
		errs = append(errs, fmt.Errorf("--executor=local outside standalone mode runs every stage on this server's host, sharing its kernel and network, "+
			"outside the cluster's policies and resource limits; use --executor=kubernetes, or accept the risk with --allow-unsandboxed-local-executor"))
	}
	if o.Kind == "local" && !standalone && (o.ServerURL == "" || o.CAFile == "") {
		errs = append(errs, fmt.Errorf("--executor=local needs --executor-server-url and --executor-ca-file outside standalone mode"))
	}
	if o.inCluster() && o.ServerURL == "" {
		errs = append(errs, fmt.Errorf("--executor=%s needs --executor-server-url: the URL at which executor pods reach this server, e.g. https://terrarun-apiserver.terrarun-system.svc", o.Kind))
	}
	if o.Kind == "local" && o.LocalSandbox {
		if _, err := o.localSandbox(); err != nil {
			errs = append(errs, err)
		}
	}
	if o.Kind != "local" && !o.inCluster() {
		errs = append(errs, fmt.Errorf("--executor must be local, kubernetes or tekton, not %q", o.Kind))
	}
	if o.DefaultEngine != "" && o.DefaultEngine != "terraform" && o.DefaultEngine != "tofu" {
		errs = append(errs, fmt.Errorf("--default-engine must be terraform or tofu, not %q", o.DefaultEngine))
	}
	if o.FluxArtifactHost == "" || strings.ContainsAny(o.FluxArtifactHost, "/ ") {
		errs = append(errs, fmt.Errorf("--flux-artifact-host must be a host[:port], such as %s, not %q", fluxsource.DefaultArtifactHost, o.FluxArtifactHost))
	}
	if o.WebViewURL != "" {
		if u, err := url.Parse(o.WebViewURL); err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
			errs = append(errs, fmt.Errorf("--web-view-url must be an absolute http or https URL, such as https://terrarun.example.com, not %q", o.WebViewURL))
		}
	}
	if o.NodeLostAfter <= 0 {
		errs = append(errs, fmt.Errorf("--executor-node-lost-after must be a positive duration, such as 1m, not %s", o.NodeLostAfter))
	}
	if o.PluginCacheStorageClass != "" && !o.inCluster() {
		errs = append(errs, fmt.Errorf("--executor-plugin-cache-storage-class applies to --executor=kubernetes and tekton only: the local executor keeps each creator's plugin cache on its host"))
	}
	if o.PluginCacheStorageClass != "" {
		for _, msg := range validation.IsDNS1123Subdomain(o.PluginCacheStorageClass) {
			errs = append(errs, fmt.Errorf("--executor-plugin-cache-storage-class %q is not a StorageClass name: %s", o.PluginCacheStorageClass, msg))
		}
	}
	if o.PluginCacheStorageClass != "" && o.PluginCacheSize.Sign() <= 0 {
		errs = append(errs, fmt.Errorf("--executor-plugin-cache-size must be a positive quantity, such as 5Gi, not %s", o.PluginCacheSize.String()))
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--controller-workers must be at least 1"))
	}
	if o.MaxConcurrentStages < -1 {
		errs = append(errs, fmt.Errorf("--max-concurrent-stages must be -1 (the executor's default), 0 (no bound) or more, not %d", o.MaxConcurrentStages))
	}
	if o.ShutdownApplyGrace < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-apply-grace-period must not be negative (0 interrupts applies at once)"))
	}
	for name, q := range map[string]resource.QuantityValue{"--local-stage-memory": o.LocalStageMemory, "--local-stage-cpu": o.LocalStageCPU,
		"--local-stage-disk": o.LocalStageDisk, "--local-namespace-state-size": o.LocalNamespaceState} {
		if q.Sign() < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative (0: no bound), not %s", name, q.String()))
		}
	}
	if o.LocalStageProcesses < 0 {
		errs = append(errs, fmt.Errorf("--local-stage-processes must not be negative (0: no bound), not %d", o.LocalStageProcesses))
	}
	if o.MaxConcurrentStagesPerNamespace < 0 {
		errs = append(errs, fmt.Errorf("--max-concurrent-stages-per-namespace must be 0 (no bound) or more, not %d", o.MaxConcurrentStagesPerNamespace))
	}
	for name, v := range map[string]int64{"--max-log-bytes": o.MaxLogBytes, "--max-plan-bytes": o.MaxPlanBytes,
		"--max-run-log-bytes": o.MaxRunLogBytes, "--max-namespace-log-bytes": o.MaxNamespaceLogBytes, "--max-total-log-bytes": o.MaxTotalLogBytes,
		"--max-state-bytes": o.MaxStateBytes, "--max-namespace-state-bytes": o.MaxNamespaceStateBytes, "--state-versions": int64(o.StateVersions)} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative (0 means the default)", name))
		}
	}
	for _, kv := range o.LocalEnv {
		name, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok || !envNameRegexp.MatchString(name):
			errs = append(errs, fmt.Errorf("--local-executor-env %q must be NAME=VALUE, with a NAME of letters, digits and '_'", kv))
		case name == "HOME" || name == "TMPDIR" || strings.HasPrefix(name, "TERRARUN_"):
			errs = append(errs, fmt.Errorf("--local-executor-env %s: each stage gets its own %s; it cannot be set", name, name))
		}
	}
	return errs
}

// envNameRegexp matches an environment variable's name.
var envNameRegexp = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// localSandbox is the sandbox of local stages that the flags describe.
func (o *ExecutorOptions) localSandbox() (local.SandboxOptions, error) {
	so := local.SandboxOptions{Disabled: !o.LocalSandbox}
	u, g, ok := strings.Cut(o.LocalUser, ":")
	uid, uerr := strconv.ParseUint(u, 10, 32)
	gid, gerr := strconv.ParseUint(g, 10, 32)
	if !ok || uerr != nil || gerr != nil || uid == 0 || gid == 0 {
		return so, fmt.Errorf("--local-executor-user must be UID:GID with numbers, neither 0 (root), not %q", o.LocalUser)
	}
	so.UID, so.GID = uint32(uid), uint32(gid)
	for _, m := range o.LocalMounts {
		path, mode, _ := strings.Cut(m, ":")
		if !filepath.IsAbs(path) || filepath.Clean(path) != path || path == "/" || (mode != "" && mode != "rw") {
			return so, fmt.Errorf("--local-executor-mount %q must be a clean absolute path other than /, optionally followed by :rw", m)
		}
		so.Mounts = append(so.Mounts, sandbox.Mount{Source: path, Writable: mode == "rw"})
	}
	return so, nil
}

// executorBinary finds terrarun-executor.
func (o *ExecutorOptions) executorBinary() string {
	if o.Binary != "" {
		return o.Binary
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), "terrarun-executor")
		if _, err := os.Stat(beside); err == nil {
			return beside
		}
	}
	return "terrarun-executor"
}

// workRoot is where the local executor keeps work directories, state and
// values: the data directory in standalone mode.
func (o *Options) workRoot() string {
	if o.Standalone {
		return o.DataDir
	}
	return filepath.Join(os.TempDir(), "terrarun")
}

// longRunningSubresources are exempt from request timeouts, as watches are:
// log streams, and plan waits and uploads.
var longRunningSubresources = sets.NewString("logs", "plan")

// setLongRunning marks watches and longRunningSubresources as long-running.
func setLongRunning(config *genericapiserver.RecommendedConfig) {
	config.LongRunningFunc = genericfilters.BasicLongRunningRequestCheck(
		sets.NewString("watch"), longRunningSubresources)
}

// newExecutor builds the configured executor, and the credentials its
// stages prove themselves with (applyExecutorAuth lets them in). Job stages
// also prove themselves with their key (loadStageKeys). serverURL and
// caFile are where executors reach this server.
func (o *ExecutorOptions) newExecutor(kube kubernetes.Interface, dyn dynamic.Interface, etcd *clientv3.Client,
	root, serverURL, caFile, admissionConfig string) (executor.Executor, stageCredentials, error) {
	var (
		exec  executor.Executor
		creds stageCredentials
	)
	switch o.Kind {
	case "local":
		so, err := o.localSandbox()
		if err != nil {
			return nil, stageCredentials{}, err
		}
		// Nothing of the data directory is for stages: not the PKI, not
		// etcd's data, not values, other runs' work or other namespaces' state.
		so.Hidden = []string{root}
		l, err := local.New(local.Options{
			ExecutorBinary:  o.executorBinary(),
			WorkRoot:        filepath.Join(root, "work"),
			StateRoot:       filepath.Join(root, "state"),
			PluginCacheRoot: filepath.Join(root, "plugin-cache"),
			ValuesRoot:      filepath.Join(root, "values"),
			ServerURL:       serverURL,
			CAFile:          caFile,
			Etcd:            etcd,
			Sandbox:         so,
			Env:             o.LocalEnv,
			Limits:          o.localLimits(),
			LimitFlags:      localLimitFlags,
		})
		if err != nil {
			if o.LocalSandbox {
				err = fmt.Errorf("%w (check --local-executor-user and --local-executor-mount, or run stages unsandboxed with --local-executor-sandbox=false)", err)
			}
			return nil, stageCredentials{}, err
		}
		exec, creds = l, stageCredentials{tokens: bearertoken.New(l.Tokens()), identities: l.Tokens(), first: true}
	default:
		if kube == nil {
			return nil, stageCredentials{}, fmt.Errorf("--executor=%s needs the cluster's API: run in-cluster or pass --kubeconfig", o.Kind)
		}
		var caBundle []byte
		if caFile != "" {
			var err error
			if caBundle, err = os.ReadFile(caFile); err != nil {
				return nil, stageCredentials{}, fmt.Errorf("reading --executor-ca-file: %w", err)
			}
		}
		var err error
		if creds.tokens, err = podTokenAuthenticator(kube); err != nil {
			return nil, stageCredentials{}, err
		}
		keys, err := loadStageKeys(etcd)
		if err != nil {
			return nil, stageCredentials{}, err
		}
		opts := job.JobOptions{ServerURL: serverURL, CABundle: caBundle, SpreadTopologyKey: o.SpreadTopologyKey, NodeLostAfter: o.NodeLostAfter,
			PluginCache: job.PluginCacheOptions{StorageClassName: o.PluginCacheStorageClass, Size: o.PluginCacheSize.Quantity}, StageKeys: keys}
		if o.Kind == "tekton" {
			if dyn == nil {
				return nil, stageCredentials{}, fmt.Errorf("--executor=tekton needs the cluster's API: run in-cluster or pass --kubeconfig")
			}
			template, err := taskRunTemplate(admissionConfig)
			if err != nil {
				return nil, stageCredentials{}, err
			}
			claims := tekton.NewClaims(etcd)
			exec = tekton.NewExecutor(kube, dyn, claims, tekton.Options{Jobs: opts, Template: template, Namespace: o.TektonNamespace})
			creds.identities = tekton.NewIdentityResolver(kube, dyn, keys, claims)
			break
		}
		exec = job.NewExecutor(kube, opts)
		creds.identities = job.NewIdentityResolver(kube, keys)
	}

	return exec, creds, nil
}

// taskRunTemplate is the taskRunTemplate of the cluster policy, the
// configuration of the TerraformRunPolicy plugin in the admission
// configuration file configFile (--admission-control-config-file); nil
// when there is none.
func taskRunTemplate(configFile string) (*policy.TaskRunTemplate, error) {
	if configFile == "" {
		return nil, nil
	}
	read, err := admission.ReadAdmissionConfiguration([]string{terraformrunpolicy.PluginName}, configFile, admissionConfigScheme)
	if err != nil {
		return nil, fmt.Errorf("reading --admission-control-config-file: %w", err)
	}
	config, err := read.ConfigFor(terraformrunpolicy.PluginName)
	if err != nil {
		return nil, fmt.Errorf("reading the %s configuration of --admission-control-config-file: %w", terraformrunpolicy.PluginName, err)
	}
	cfg, err := policy.Load(config)
	if err != nil {
		return nil, err
	}
	return cfg.TaskRunTemplate, nil
}

// defaultEngine is --default-engine, or with the local executor the engine
// this host has: terraform when it is on PATH, else tofu when that is.
func (o *ExecutorOptions) defaultEngine() terrarun.EngineBinary {
	if o.DefaultEngine != "" || o.Kind != "local" {
		return terrarun.EngineBinary(o.DefaultEngine)
	}
	if _, err := exec.LookPath("terraform"); err != nil {
		if _, err := exec.LookPath("tofu"); err == nil {
			return terrarun.EngineTofu
		}
	}
	return terrarun.EngineTerraform
}

// serverDefaults are the defaults of a run's spec.engine: the default
// engine, and the executor image where stages run in Jobs (the local
// executor runs none, and a run there shows none).
func (o *ExecutorOptions) serverDefaults() terrarun.ServerDefaults {
	d := terrarun.ServerDefaults{Engine: o.defaultEngine()}
	if o.Kind != "local" {
		d.Image = terrarun.DefaultExecutorImage
	}
	return d
}

// missingEngine says how to fix a local executor whose runs' default
// engine is not on PATH, where every run would fail; "" when it is there
// (or stages run in Jobs, whose image has it).
func (o *ExecutorOptions) missingEngine() string {
	if o.Kind != "local" {
		return ""
	}
	engine := string(o.defaultEngine())
	if _, err := exec.LookPath(engine); err == nil {
		return ""
	}
	if o.DefaultEngine != "" {
		return fmt.Sprintf("--default-engine=%s, but %s is not on PATH: runs that do not name spec.engine.binary will fail; install it, or put it on PATH", engine, engine)
	}
	return "neither terraform nor tofu is on PATH: every run will fail until one is; install one and put it on PATH, " +
		"or start the server with make run, which builds OpenTofu into .cache/engine (hack/engine.sh) and puts it on PATH"
}

// secretValue reads a key of a Secret where the executor reads Secrets: the
// host cluster's for Jobs, the data directory's files for the local
// executor.
func (o *ExecutorOptions) secretValue(kube kubernetes.Interface, root string) func(ctx context.Context, namespace, name, key string) ([]byte, error) {
	if o.Kind == "local" || kube == nil {
		return local.FileValues{Root: filepath.Join(root, "values")}.SecretValue
	}
	return func(ctx context.Context, namespace, name, key string) ([]byte, error) {
		secret, err := kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		value, ok := secret.Data[key]
		if !ok {
			return nil, fmt.Errorf("secret %q has no key %q", name, key)
		}
		return value, nil
	}
}

// configMapData reads ConfigMaps where the executor reads them: the host
// cluster's for Jobs, the data directory's files for the local executor.
func (o *ExecutorOptions) configMapData(kube kubernetes.Interface, root string) func(ctx context.Context, namespace, name string) (map[string]string, error) {
	if o.Kind == "local" || kube == nil {
		return local.FileValues{Root: filepath.Join(root, "values")}.ConfigMapData
	}
	return func(ctx context.Context, namespace, name string) (map[string]string, error) {
		cm, err := kube.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		data := maps.Clone(cm.Data)
		if data == nil {
			data = map[string]string{}
		}
		for k, v := range cm.BinaryData {
			data[k] = string(v)
		}
		return data, nil
	}
}

// stageKeySecret is the etcd key of the secret that derives the Job stages'
// keys: one secret for every replica, made by the first.
const stageKeySecret = "/terrarun/stage-key-secret"

// loadStageKeys reads the stage keys' secret from terrarun's etcd, making
// it on first use.
func loadStageKeys(etcd *clientv3.Client) (*job.StageKeys, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	resp, err := etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(stageKeySecret), "=", 0)).
		Then(clientv3.OpPut(stageKeySecret, string(secret))).
		Else(clientv3.OpGet(stageKeySecret)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("reading the stage keys' secret from etcd (%s): %w", stageKeySecret, err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) != 1 {
			return nil, fmt.Errorf("the stage keys' secret %s vanished while it was read; start again", stageKeySecret)
		}
		secret = kvs[0].Value
	}
	return job.NewStageKeys(secret)
}
