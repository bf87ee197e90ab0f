// Package stage defines what one stage of one TerraformRun is, as handed to
// terrarun-executor, and the HTTP protocol the executor uses to write its
// results back to terrarun-apiserver.
//
// # Handing a stage to the executor
//
// The local and the job executor both write a Spec as JSON to a
// file (a private file in local mode, a Secret volume in Kubernetes mode) and
// start `terrarun-executor --stage-file FILE`. Secret material is never in the
// Spec itself: secret variable values, git and registry credentials and backend
// configuration are files whose paths the Spec names.
//
// # Writing results back
//
// The executor authenticates with `Authorization: Bearer <token>`: a
// per-stage secret token read once from the descriptor Spec.TokenFD in local
// mode, a projected, pod-bound service-account token read from
// Spec.TokenFile in Kubernetes mode. The server
// accepts a write only from the identity of the run's current stage attempt.
// All paths are relative to
// /apis/terrarun.dev/v1alpha1/namespaces/{namespace}/terraformruns/{name}:
//
//	POST /logs?stage=S&attempt=N          streamed text body; appended as it arrives
//	POST /plan?attempt=N&part=P           P is file (binary plan file), text (terraform show),
//	                                      json (redacted terraform show -json), or source
//	                                      (tar.gz of the configuration directory)
//	POST /plan?attempt=N&part=result      JSON Result; last write of a plan stage
//	GET  /plan?format=file                apply stage only: the approved plan file; with
//	                                      &wait=true, a plan stage with ApplyAfterPlan waits
//	                                      until it is granted the apply stage (or refused)
//	GET  /plan?format=source              apply stage only: the planned configuration
//	POST /outputs?attempt=N               JSON of `terraform output -json`
//
// The query parameters are the API's TerraformRunLogOptions,
// TerraformRunPlanOptions (the parts are v1alpha1.PlanPart*, the formats
// v1alpha1.PlanFormat*) and TerraformRunOutputsOptions. Every write returns
// 2xx, or a Status error; 403 means the identity is not this run's current
// stage and the executor must stop, and 503 that the server could not verify
// the identity now and the executor should retry.
package stage

import (
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/engineversion"
)

// Spec is everything terrarun-executor needs to run one stage.
type Spec struct {
	// Server is the base URL of terrarun-apiserver, e.g. https://127.0.0.1:8443.
	Server string `json:"server"`
	// CAFile verifies the server's certificate.
	CAFile string `json:"caFile"`
	// TokenFile holds the bearer token of this stage's identity; it is read
	// for every request, as the kubelet rotates it.
	TokenFile string `json:"tokenFile,omitempty"`
	// TokenFD, when set, is an inherited descriptor from which the token is
	// read once, at start, instead of TokenFile: the local executor's way,
	// whose sandbox hides the token file from every process of the stage.
	TokenFD int `json:"tokenFD,omitempty"`

	// Namespace, Name and UID identify the run.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// Stage is plan or apply.
	Stage v1alpha1.StageName `json:"stage"`
	// Attempt counts executions of this stage, from 1.
	Attempt int32 `json:"attempt"`

	// Binary is the engine to run: a path, or terraform / tofu looked up on PATH.
	Binary string `json:"binary"`
	// EngineVersion, when set, is the version of the engine at Binary (a
	// path), recorded when the executor first ran that binary: the stage
	// takes it instead of asking the engine, while the binary still has the
	// recorded size and modification time.
	EngineVersion *engineversion.Record `json:"engineVersion,omitempty"`
	// WorkDir is an empty, private directory the executor may use.
	WorkDir string `json:"workDir"`
	// StageKeyFile, when set, holds the stage's key, which the executor
	// sends with every request in StageKeyHeader (Kubernetes mode).
	StageKeyFile string `json:"stageKeyFile,omitempty"`
	// Bound lists the files, besides the stage file, that terrarun wrote for
	// this stage into Secrets of its own (inline sources, the CA, values of
	// other runs' outputs): BindingEnv's digest covers them.
	Bound []string `json:"bound,omitempty"`

	// Operation is Apply, Destroy or Plan (the run's spec.operation).
	Operation string `json:"operation"`
	// Source says where the configuration comes from (plan stage only; the
	// apply stage downloads the planned configuration).
	Source Source `json:"source"`
	// Registry, when set, is how the stage reaches the OCI registry of the
	// run's OCI source, in both stages: the plan stage pulls the source with
	// it, and OpenTofu installs oci:// modules with it (both stages run
	// init).
	Registry *RegistryAccess `json:"registry,omitempty"`
	// Variables are the run's input variables.
	Variables []Variable `json:"variables,omitempty"`
	// Backend is the state backend; never empty: each executor fills in its
	// documented default.
	Backend Backend `json:"backend"`
	// Workspace is the Terraform workspace to select or create.
	Workspace string `json:"workspace"`
	// PluginCacheDir, when set, is the provider plugin cache
	// (TF_PLUGIN_CACHE_DIR) that the stage shares with other runs of its
	// namespace on this host. The engine uses a cached provider only when the
	// dependency lock file records its checksum (as from the plan stage for
	// the apply stage, or a lock file in the configuration); the runner
	// serializes the inits that may write to it.
	PluginCacheDir string `json:"pluginCacheDir,omitempty"`

	// Targets, Replace, Parallelism and Refresh are the usual terraform flags.
	Targets     []string `json:"targets,omitempty"`
	Replace     []string `json:"replace,omitempty"`
	Parallelism *int32   `json:"parallelism,omitempty"`
	Refresh     *bool    `json:"refresh,omitempty"`

	// ApplyAfterPlan says that a plan stage with changes goes on to apply its
	// own plan (an automatically approved run): after uploading the plan it
	// waits for the server to grant it the run's apply stage, which it
	// learns by downloading the approved plan file (GET /plan?format=file&wait=true),
	// and then writes the apply stage's logs (stage=apply, attempt 1) and
	// outputs with its own identity. The plan's engine, initialized once,
	// applies it.
	ApplyAfterPlan bool `json:"applyAfterPlan,omitempty"`

	// ForceUnlock, when set, is the ID of a state lock that the plan stage
	// releases (terraform force-unlock) before it plans: the run's
	// spec.forceUnlock.
	ForceUnlock string `json:"forceUnlock,omitempty"`
	// LostPlanHosts are the host names of this run's earlier plan attempts,
	// each lost with its executor. A state lock that one of them holds for a
	// plan is theirs, and a plan writes no state: the plan stage releases it
	// when the lock is in its way. A lock held for anything else is left.
	LostPlanHosts []string `json:"lostPlanHosts,omitempty"`

	// PlanDigest is the approved plan's digest (apply stage), and PlanParts
	// the digests of its parts it was computed from (PlanDigest): the executor
	// applies a downloaded plan file and configuration only when they are
	// these.
	PlanDigest string                    `json:"planDigest,omitempty"`
	PlanParts  *v1alpha1.PlanPartDigests `json:"planParts,omitempty"`
}

// Source is where the plan stage gets the configuration. Exactly one is set.
type Source struct {
	// Dir is a directory that already holds the configuration files (inline
	// and ConfigMap sources, written there by the executor that started the stage).
	Dir string `json:"dir,omitempty"`
	// Git clones a repository.
	Git *GitSource `json:"git,omitempty"`
	// OCI pulls an artifact.
	OCI *OCISource `json:"oci,omitempty"`
	// Artifact downloads the Flux artifact that the server pinned
	// (spec.source.sourceRef).
	Artifact *ArtifactSource `json:"artifact,omitempty"`
}

// ArtifactSource is a tar+gzip archive that Flux's source-controller
// serves, pinned by the server from the source's status.artifact: the stage
// downloads it from URL and unpacks it only when its sha256 is Digest.
type ArtifactSource struct {
	URL    string `json:"url"`
	Digest string `json:"digest"`
	// Revision is the source's revision of it, such as main@sha1:<commit>.
	Revision string `json:"revision"`
	Path     string `json:"path,omitempty"`
	// Source names the Flux source, for messages, such as
	// GitRepository team-a/infra.
	Source string `json:"source"`
}

// OCISource is an artifact to pull (spec.source.oci): at most one of Tag,
// Semver and Digest is set, none meaning the tag latest. The registry's
// credentials and CA are the stage's Registry.
type OCISource struct {
	URL      string `json:"url"`
	Tag      string `json:"tag,omitempty"`
	Semver   string `json:"semver,omitempty"`
	Digest   string `json:"digest,omitempty"`
	Path     string `json:"path,omitempty"`
	Insecure bool   `json:"insecure,omitempty"`
	// KeysFile holds the cosign public keys of verify.keysSecret, and
	// KeysSecret names that Secret (for messages); without KeysFile the
	// artifact is not verified.
	KeysFile   string `json:"keysFile,omitempty"`
	KeysSecret string `json:"keysSecret,omitempty"`
	// TrustedKeys are the PEM public keys of the cluster policy
	// (spec.source.oci.verify.trustedKeys, public): when set, the artifact
	// must carry a signature by one of them too.
	TrustedKeys string `json:"trustedKeys,omitempty"`
	// TrustedRootFile holds the Sigstore trusted root of
	// verify.trustedRootSecret, and TrustedRootSecret names that Secret:
	// with them, the artifact must carry a keyless signature by one of
	// Identities (verify.matchOIDCIdentity).
	TrustedRootFile   string     `json:"trustedRootFile,omitempty"`
	TrustedRootSecret string     `json:"trustedRootSecret,omitempty"`
	Identities        []Identity `json:"identities,omitempty"`
}

// Identity is a keyless signer: regular expressions of its certificate's
// OIDC issuer and subject.
type Identity struct {
	Issuer  string `json:"issuer"`
	Subject string `json:"subject"`
}

// Identities are the stage's form of spec.source.oci.verify.matchOIDCIdentity.
func Identities(ids []v1alpha1.OIDCIdentityMatch) []Identity {
	if len(ids) == 0 {
		return nil
	}
	out := make([]Identity, len(ids))
	for i, id := range ids {
		out[i] = Identity{Issuer: id.Issuer, Subject: id.Subject}
	}
	return out
}

// GitSource is a repository to clone.
type GitSource struct {
	URL  string `json:"url"`
	Ref  string `json:"ref"`
	Path string `json:"path,omitempty"`
	// CredentialsDir holds the files "host" (the one host they are for),
	// "username" and "password" (https) or "identity" and "known_hosts"
	// (ssh), and optionally "ca.crt" (CA certificates for the host's https
	// server). They reach git through GIT_ASKPASS, GIT_SSH_COMMAND and
	// GIT_SSL_CAINFO, never through the URL, arguments or logs.
	CredentialsDir string `json:"credentialsDir,omitempty"`
}

// RegistryAccess is the credentials and CA of an OCI source's registry.
type RegistryAccess struct {
	// CredentialsFile holds the .dockerconfigjson of credentialsSecret; its
	// entry for a registry's host is offered to that host only.
	CredentialsFile string `json:"credentialsFile,omitempty"`
	// CAFile holds the certSecret's ca.crt.
	CAFile string `json:"caFile,omitempty"`
}

// Variable is one input variable. Exactly one of Value and File is used.
type Variable struct {
	Name string `json:"name"`
	// Value is a literal, non-secret value from the run's spec.
	Value string `json:"value,omitempty"`
	// File holds the value (from a Secret or ConfigMap). Values from Secrets are
	// redacted from every log line.
	File string `json:"file,omitempty"`
	// Secret says the value came from a Secret.
	Secret bool `json:"secret,omitempty"`
	// HCL says the value is an HCL expression rather than a string.
	HCL bool `json:"hcl,omitempty"`
	// JSON says the value is a JSON value (another run's output), which
	// the runner renders as the HCL expression of the same value.
	JSON bool `json:"json,omitempty"`
}

// ServedBackend is the Backend.Type of the state that terrarun serves
// through the run's state and statelock subresources, with the stage's own
// identity: the runner gives the engine its http backend, pointed at a
// proxy on the loopback interface that adds the stage's credentials. The
// state is kept for the run's workspace in its namespace; no Kubernetes
// credential is involved.
const ServedBackend = "terrarun"

// Backend is the state backend configuration.
type Backend struct {
	Type string `json:"type"`
	// Config is passed as -backend-config key=value.
	Config map[string]string `json:"config,omitempty"`
	// ConfigFile, when set, is passed as -backend-config FILE (from a Secret).
	ConfigFile string `json:"configFile,omitempty"`
}

// Result is what a plan stage reports last, after every part is uploaded.
type Result struct {
	// SourceRevision is the resolved git commit, the OCI artifact as
	// tag@sha256:<manifest digest> (or its digest alone), or the sha256 of the
	// configuration tarball for inline and ConfigMap sources.
	SourceRevision string `json:"sourceRevision"`
	// Add, Change, Destroy and Import count resource changes.
	Add     int32 `json:"add"`
	Change  int32 `json:"change"`
	Destroy int32 `json:"destroy"`
	Import  int32 `json:"import"`
	// HasChanges is true when applying would change anything, outputs included.
	HasChanges bool `json:"hasChanges"`
}
