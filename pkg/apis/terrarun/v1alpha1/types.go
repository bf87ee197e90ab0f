package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:method=Approve,verb=create,subresource=approve,input=TerraformRunApproval,result=TerraformRun
// +genclient:method=Discard,verb=create,subresource=discard,input=TerraformRunDiscard,result=TerraformRun
// +genclient:method=Cancel,verb=create,subresource=cancel,input=TerraformRunCancel,result=TerraformRun
// +genclient:method=Override,verb=create,subresource=override,input=TerraformRunOverride,result=TerraformRun
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformRun is one execution of Terraform or OpenTofu against one configuration:
// a plan, an optional approval gate, and an apply. Like a Job, a run is executed once;
// its spec is immutable after creation, and running again means creating a new run.
type TerraformRun struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// spec describes what to run. It is immutable after creation.
	Spec TerraformRunSpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	// status is the most recently observed state of the run. It is written only by
	// the run controller, through the status subresource.
	// +optional
	Status TerraformRunStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformRunList is a list of TerraformRuns.
type TerraformRunList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// items is the list of runs.
	Items []TerraformRun `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// Operation is what a run does after it has planned.
// +enum
type Operation string

const (
	// OperationApply plans and applies the configuration. It is the default.
	OperationApply Operation = "Apply"
	// OperationDestroy plans and applies the destruction of every managed resource.
	OperationDestroy Operation = "Destroy"
	// OperationPlan plans only (a speculative plan) and never applies.
	OperationPlan Operation = "Plan"
)

// ApprovalMode says whether a plan waits for a human before it is applied.
// +enum
type ApprovalMode string

const (
	// ApprovalModeManual waits for an approval through the approve subresource. It is the default.
	ApprovalModeManual ApprovalMode = "Manual"
	// ApprovalModeAuto applies a plan as soon as it exists.
	ApprovalModeAuto ApprovalMode = "Auto"
)

// EngineBinary names the command-line tool that executes a run.
// +enum
type EngineBinary string

const (
	// EngineTerraform is HashiCorp Terraform.
	EngineTerraform EngineBinary = "terraform"
	// EngineTofu is OpenTofu.
	EngineTofu EngineBinary = "tofu"
)

// TerraformRunSpec describes one execution.
type TerraformRunSpec struct {
	// operation is what the run does after planning: Apply (the default), Destroy,
	// or Plan (a speculative plan that is never applied).
	// +optional
	Operation Operation `json:"operation,omitempty" protobuf:"bytes,1,opt,name=operation,casttype=Operation"`

	// source is where the Terraform configuration comes from. Exactly one of
	// inline, configMap, git, oci and sourceRef must be set.
	Source Source `json:"source" protobuf:"bytes,2,opt,name=source"`

	// variables are the input variables passed to Terraform. Values that come from
	// Secrets are written to a var-file that is never logged.
	// +optional
	// +listType=map
	// +listMapKey=name
	Variables []Variable `json:"variables,omitempty" protobuf:"bytes,3,rep,name=variables"`

	// backend configures where Terraform state is kept. When unset, the executor's
	// documented default backend is used.
	// +optional
	Backend *Backend `json:"backend,omitempty" protobuf:"bytes,4,opt,name=backend"`

	// forceUnlock is the ID of a state lock to release before planning, as
	// terraform force-unlock does: for a lock that a lost executor left (the
	// run whose plan failed on it names the ID). Releasing a lock that a
	// running stage still holds lets two writers at the state; use it only
	// once the holder is known to be gone. The ID must be the lock's, or the
	// plan fails and releases nothing.
	// +optional
	ForceUnlock string `json:"forceUnlock,omitempty" protobuf:"bytes,5,opt,name=forceUnlock"`

	// workspace is the Terraform workspace to select. Defaults to "default".
	// +optional
	Workspace string `json:"workspace,omitempty" protobuf:"bytes,6,opt,name=workspace"`

	// approval controls the gate between plan and apply.
	// +optional
	Approval Approval `json:"approval,omitempty" protobuf:"bytes,7,opt,name=approval"`

	// engine selects the Terraform-compatible binary and the executor image.
	// +optional
	Engine Engine `json:"engine,omitempty" protobuf:"bytes,8,opt,name=engine"`

	// timeouts bound how long each stage may run.
	// +optional
	Timeouts Timeouts `json:"timeouts,omitempty" protobuf:"bytes,9,opt,name=timeouts"`

	// executor configures the pods that run each stage.
	// +optional
	Executor *ExecutorSpec `json:"executor,omitempty" protobuf:"bytes,10,opt,name=executor"`

	// outputsSecret names a Secret in the run's namespace that receives every
	// output once the run has applied. The Secret is owned by the run.
	// +optional
	OutputsSecret string `json:"outputsSecret,omitempty" protobuf:"bytes,11,opt,name=outputsSecret"`

	// targets limits planning to the given resource addresses (terraform -target).
	// +optional
	// +listType=atomic
	Targets []string `json:"targets,omitempty" protobuf:"bytes,12,rep,name=targets"`

	// replace forces replacement of the given resource addresses (terraform -replace).
	// +optional
	// +listType=atomic
	Replace []string `json:"replace,omitempty" protobuf:"bytes,13,rep,name=replace"`

	// parallelism limits the number of concurrent operations (terraform -parallelism).
	// Between 1 and 256; Terraform's default is 10.
	// +optional
	Parallelism *int32 `json:"parallelism,omitempty" protobuf:"varint,14,opt,name=parallelism"`

	// refresh says whether to refresh state before planning (terraform -refresh).
	// Defaults to true.
	// +optional
	Refresh *bool `json:"refresh,omitempty" protobuf:"varint,15,opt,name=refresh"`

	// creator is the user who created the run. The server records it from the
	// authenticated request at creation; any value sent by a client is replaced,
	// and it can never change afterwards.
	// +optional
	Creator *Creator `json:"creator,omitempty" protobuf:"bytes,16,opt,name=creator"`

	// requestedBy names the users whose request made the server create this
	// run besides its creator, for the runs a TerraformWorkspace creates: who
	// deleted the workspace (its Destroy run) and who asked for its rerun.
	// The server sets it at creation and nothing else can; with separation of
	// duties on, none of them may approve the run, as its creator may not.
	// +optional
	// +listType=atomic
	RequestedBy []string `json:"requestedBy,omitempty" protobuf:"bytes,17,rep,name=requestedBy"`

	// ttlSecondsAfterFinished, when set, deletes the run, with its plans,
	// logs and outputs, that many seconds after it finished, as a Job's
	// field does; 0 deletes it once it has finished. The cluster policy may
	// set a default (per namespace too). The one field of the spec that may
	// change, to keep a run longer or let it go sooner. A workspace's runs
	// are kept by its history limits instead.
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty" protobuf:"varint,18,opt,name=ttlSecondsAfterFinished"`
}

// Source is where the configuration comes from. Exactly one member must be set.
type Source struct {
	// inline maps file names to their contents. Only *.tf, *.tf.json and *.tfvars
	// files, and the dependency lock file .terraform.lock.hcl, are allowed, and
	// the total size is capped at 256 KiB.
	// +optional
	Inline map[string]string `json:"inline,omitempty" protobuf:"bytes,1,rep,name=inline"`

	// configMap names a ConfigMap in the run's namespace whose keys are file names
	// and whose values are file contents.
	// +optional
	ConfigMap *ConfigMapSource `json:"configMap,omitempty" protobuf:"bytes,2,opt,name=configMap"`

	// git fetches the configuration from a git repository.
	// +optional
	Git *GitSource `json:"git,omitempty" protobuf:"bytes,3,opt,name=git"`

	// oci fetches the configuration from an OCI artifact in a registry, such
	// as one pushed with `flux push artifact` or `oras push`.
	// +optional
	OCI *OCISource `json:"oci,omitempty" protobuf:"bytes,4,opt,name=oci"`

	// sourceRef uses the artifact that Flux's source-controller fetched for
	// a GitRepository, OCIRepository or Bucket of the run's namespace
	// (cluster mode only). Its revision and digest are pinned when the
	// plan starts, recorded in status.source, and checked by the plan
	// stage when it downloads the artifact.
	// +optional
	SourceRef *SourceReference `json:"sourceRef,omitempty" protobuf:"bytes,5,opt,name=sourceRef"`
}

// SourceReference names a Flux source (source.toolkit.fluxcd.io/v1) in the
// run's namespace.
type SourceReference struct {
	// kind of the source: GitRepository, OCIRepository or Bucket.
	Kind string `json:"kind" protobuf:"bytes,1,opt,name=kind"`
	// name of the source in the run's namespace.
	Name string `json:"name" protobuf:"bytes,2,opt,name=name"`
	// path is the directory inside the artifact that holds the
	// configuration. It is relative and may not leave the artifact.
	// Defaults to the root.
	// +optional
	Path string `json:"path,omitempty" protobuf:"bytes,3,opt,name=path"`
}

// Kinds of spec.source.sourceRef, all of the group
// source.toolkit.fluxcd.io, version v1.
const (
	SourceKindGitRepository = "GitRepository"
	SourceKindOCIRepository = "OCIRepository"
	SourceKindBucket        = "Bucket"
)

// FluxSourceGroup is the API group of the objects spec.source.sourceRef names.
const FluxSourceGroup = "source.toolkit.fluxcd.io"

// ConfigMapSource references a ConfigMap holding the configuration files.
type ConfigMapSource struct {
	// name of the ConfigMap in the run's namespace.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
}

// GitSource fetches the configuration from a git repository.
type GitSource struct {
	// url of the repository. Only https:// and ssh:// URLs are accepted, and the URL
	// must not carry credentials: use credentialsSecret instead.
	URL string `json:"url" protobuf:"bytes,1,opt,name=url"`
	// ref is the branch, tag or commit to check out. The resolved commit is
	// recorded in status.source.revision, and the apply uses exactly that commit.
	Ref string `json:"ref" protobuf:"bytes,2,opt,name=ref"`
	// path is the directory inside the repository that holds the configuration.
	// It is relative and may not leave the repository. Defaults to the root.
	// +optional
	Path string `json:"path,omitempty" protobuf:"bytes,3,opt,name=path"`
	// credentialsSecret names a Secret in the run's namespace with the keys
	// "username" and "password" (https) or "identity" and "known_hosts" (ssh).
	// The credentials are mounted as files and handed to git through GIT_ASKPASS;
	// they never appear in arguments, environment or logs.
	// +optional
	CredentialsSecret string `json:"credentialsSecret,omitempty" protobuf:"bytes,4,opt,name=credentialsSecret"`
}

// OCISource fetches the configuration from an OCI artifact: its one layer
// of a tar+gzip media type (`flux push artifact`'s
// application/vnd.cncf.flux.content.v1.tar+gzip, or a plain tar+gzip one),
// unpacked with limits on size and file count. The artifact's manifest
// digest is recorded in status.source.revision (as tag@sha256:...), and the
// apply uses exactly the configuration that the plan unpacked.
type OCISource struct {
	// url of the repository, as oci://host[:port]/path, without a tag or a
	// digest: ref selects the artifact.
	URL string `json:"url" protobuf:"bytes,1,opt,name=url"`
	// ref selects the artifact: a tag, the newest tag that matches a semver
	// range, or a digest. Defaults to the tag "latest".
	// +optional
	Ref *OCIReference `json:"ref,omitempty" protobuf:"bytes,2,opt,name=ref"`
	// path is the directory inside the artifact that holds the
	// configuration. It is relative and may not leave the artifact. Defaults
	// to the root.
	// +optional
	Path string `json:"path,omitempty" protobuf:"bytes,3,opt,name=path"`
	// credentialsSecret names a Secret of type kubernetes.io/dockerconfigjson
	// in the run's namespace, whose auths entry for the registry's host is
	// used to pull. It is mounted as a file and never appears in arguments,
	// environment or logs.
	// +optional
	CredentialsSecret string `json:"credentialsSecret,omitempty" protobuf:"bytes,4,opt,name=credentialsSecret"`
	// certSecret names a Secret in the run's namespace with the key "ca.crt":
	// the CA certificates that the registry's TLS certificate is verified
	// with, besides the system's.
	// +optional
	CertSecret string `json:"certSecret,omitempty" protobuf:"bytes,5,opt,name=certSecret"`
	// insecure allows the registry to be reached over plain HTTP (a
	// registry on a private network, or one started for a test). Never
	// with credentials.
	// +optional
	Insecure bool `json:"insecure,omitempty" protobuf:"varint,6,opt,name=insecure"`
	// verify checks the artifact's signature before anything of it is
	// unpacked. A run whose artifact fails it ends Failed with reason
	// VerificationFailed.
	// +optional
	Verify *OCIVerification `json:"verify,omitempty" protobuf:"bytes,7,opt,name=verify"`
}

// OCIReference selects an artifact of a repository. At most one member is
// set; none means the tag "latest".
type OCIReference struct {
	// tag is a tag of the repository, such as v1.2.0 or latest.
	// +optional
	Tag string `json:"tag,omitempty" protobuf:"bytes,1,opt,name=tag"`
	// semver is a range of semantic versions, such as ">=1.0.0 <2.0.0" or
	// "~1.2": the newest tag in it is used.
	// +optional
	Semver string `json:"semver,omitempty" protobuf:"bytes,2,opt,name=semver"`
	// digest is a manifest digest, sha256:<64 hex digits>.
	// +optional
	Digest string `json:"digest,omitempty" protobuf:"bytes,3,opt,name=digest"`
}

// OCIVerification says how an OCI artifact's signature is checked.
type OCIVerification struct {
	// provider is the signature format. Only cosign is supported (the
	// default): a signature stored as cosign stores it, under the tag
	// sha256-<digest>.sig, over the artifact's manifest digest.
	// +optional
	Provider string `json:"provider,omitempty" protobuf:"bytes,1,opt,name=provider"`
	// keysSecret names a Secret in the run's namespace with the key
	// "cosign.pub": one or more PEM public keys (ECDSA, Ed25519 or RSA); a
	// valid signature by any of them verifies the artifact. Required
	// unless the cluster policy lists trusted keys (trustedKeys) or the
	// verification is keyless (matchOIDCIdentity).
	// +optional
	KeysSecret string `json:"keysSecret,omitempty" protobuf:"bytes,2,opt,name=keysSecret"`
	// trustedKeys are the cluster policy's trustedSourceKeys (PEM public
	// keys), copied when the run is created: the artifact must then carry
	// a signature by one of them, and by one of keysSecret's when that is
	// set too. Set by the server, never by a user.
	// +optional
	TrustedKeys string `json:"trustedKeys,omitempty" protobuf:"bytes,3,opt,name=trustedKeys"`
	// matchOIDCIdentity makes the verification keyless, as Flux's
	// OCIRepository names it: the artifact must carry a cosign signature
	// made with a Fulcio certificate of one of these identities and logged
	// in Rekor, both checked against the trusted root of
	// trustedRootSecret, offline (no Fulcio, Rekor or TUF server is
	// asked). Mutually exclusive with keysSecret.
	// +optional
	// +listType=atomic
	MatchOIDCIdentity []OIDCIdentityMatch `json:"matchOIDCIdentity,omitempty" protobuf:"bytes,4,rep,name=matchOIDCIdentity"`
	// trustedRootSecret names a Secret in the run's namespace with the key
	// "trusted_root.json": the Sigstore trusted root (Fulcio certificate
	// authorities and Rekor logs) that keyless signatures are checked
	// against, as cosign trusted-root create writes it or Sigstore's TUF
	// repository serves it. Required with matchOIDCIdentity.
	// +optional
	TrustedRootSecret string `json:"trustedRootSecret,omitempty" protobuf:"bytes,5,opt,name=trustedRootSecret"`
}

// OIDCIdentityMatch is who may sign keylessly: the OIDC issuer and the
// subject of a signature's Fulcio certificate.
type OIDCIdentityMatch struct {
	// issuer is a regular expression (RE2) that the certificate's OIDC
	// issuer must match whole, such as
	// https://token\.actions\.githubusercontent\.com.
	Issuer string `json:"issuer" protobuf:"bytes,1,opt,name=issuer"`
	// subject is a regular expression (RE2) that the certificate's subject
	// (an email address or a URI, such as a workflow's) must match whole.
	Subject string `json:"subject" protobuf:"bytes,2,opt,name=subject"`
}

// OCIVerificationProviderCosign is the one provider of spec.source.oci.verify.
const OCIVerificationProviderCosign = "cosign"

// Keys of the Secrets that an OCI source reads.
const (
	// OCICosignKeysKey is the key of spec.source.oci.verify.keysSecret.
	OCICosignKeysKey = "cosign.pub"
	// OCITrustedRootKey is the key of spec.source.oci.verify.trustedRootSecret.
	OCITrustedRootKey = "trusted_root.json"
	// OCICAKey is the key of spec.source.oci.certSecret.
	OCICAKey = "ca.crt"
)

// Variable is one Terraform input variable.
type Variable struct {
	// name of the variable: a Terraform identifier.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// value is the literal value. Exactly one of value and valueFrom is set
	// (an empty string is value: '""' with hcl: true).
	// +optional
	Value string `json:"value,omitempty" protobuf:"bytes,2,opt,name=value"`
	// valueFrom reads the value from a Secret or ConfigMap key. Mutually exclusive
	// with value.
	// +optional
	ValueFrom *VariableSource `json:"valueFrom,omitempty" protobuf:"bytes,3,opt,name=valueFrom"`
	// hcl says that the value is an HCL expression (a number, list, map or object)
	// rather than a string.
	// +optional
	HCL bool `json:"hcl,omitempty" protobuf:"varint,4,opt,name=hcl"`
}

// VariableSource selects the origin of a variable's value. Exactly one member must be set.
type VariableSource struct {
	// secretKeyRef selects a key of a Secret in the run's namespace.
	// +optional
	SecretKeyRef *KeySelector `json:"secretKeyRef,omitempty" protobuf:"bytes,1,opt,name=secretKeyRef"`
	// configMapKeyRef selects a key of a ConfigMap in the run's namespace.
	// +optional
	ConfigMapKeyRef *KeySelector `json:"configMapKeyRef,omitempty" protobuf:"bytes,2,opt,name=configMapKeyRef"`
	// runOutput selects an output of a run in the same namespace that has
	// applied. Its creator must be allowed to read that run's outputs. A
	// sensitive output stays sensitive.
	// +optional
	RunOutput *OutputSelector `json:"runOutput,omitempty" protobuf:"bytes,3,opt,name=runOutput"`
	// workspaceOutput selects an output of another workspace of the
	// namespace, listed in spec.dependsOn: of the run that applied it last.
	// Only in a TerraformWorkspace's spec.template; each run the workspace
	// creates reads it as a runOutput.
	// +optional
	WorkspaceOutput *OutputSelector `json:"workspaceOutput,omitempty" protobuf:"bytes,4,opt,name=workspaceOutput"`
}

// OutputSelector selects one output of a run or a workspace.
type OutputSelector struct {
	// name of the run or workspace, in the same namespace.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// output is the name of the output.
	Output string `json:"output" protobuf:"bytes,2,opt,name=output"`
}

// KeySelector selects one key of a Secret or ConfigMap in the run's namespace.
type KeySelector struct {
	// name of the Secret or ConfigMap.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// key within it.
	Key string `json:"key" protobuf:"bytes,2,opt,name=key"`
}

// Backend configures Terraform's state backend.
type Backend struct {
	// type is the backend type, such as "kubernetes", "s3" or "local".
	Type string `json:"type" protobuf:"bytes,1,opt,name=type"`
	// config holds non-secret backend settings, passed as -backend-config key=value.
	// Credentials are refused here: put them in configSecret.
	// +optional
	Config map[string]string `json:"config,omitempty" protobuf:"bytes,2,rep,name=config"`
	// configSecret names a Secret in the run's namespace with a "backend.hcl" key.
	// It is mounted as a file and passed with -backend-config.
	// +optional
	ConfigSecret string `json:"configSecret,omitempty" protobuf:"bytes,3,opt,name=configSecret"`
}

// Approval controls the gate between plan and apply.
type Approval struct {
	// mode is Manual (the default: wait for an approval through the approve
	// subresource) or Auto (apply as soon as the plan exists).
	// +optional
	Mode ApprovalMode `json:"mode,omitempty" protobuf:"bytes,1,opt,name=mode,casttype=ApprovalMode"`
	// timeout is how long a plan waits for approval before the run is discarded.
	// Defaults to 24h; at most 720h.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty" protobuf:"bytes,2,opt,name=timeout"`
	// requiredApprovals is how many distinct users must approve the plan before
	// it is applied (Manual mode only). Defaults to 1 (or the cluster policy's
	// default); at most 10. With more than one, the run's creator may not
	// approve it, and her approval would never count.
	// +optional
	RequiredApprovals int32 `json:"requiredApprovals,omitempty" protobuf:"varint,3,opt,name=requiredApprovals"`
}

// Engine selects the binary and the executor image.
type Engine struct {
	// binary is terraform (the default) or tofu.
	// +optional
	Binary EngineBinary `json:"binary,omitempty" protobuf:"bytes,1,opt,name=binary,casttype=EngineBinary"`
	// image is the executor container image used by the kubernetes executor
	// (the cluster policy's default, else ghcr.io/terrarun/terrarun-executor
	// at this release). The local executor runs no image; its runs have none.
	// +optional
	Image string `json:"image,omitempty" protobuf:"bytes,2,opt,name=image"`
	// imageDigest is the digest of image that the cluster policy's image
	// verification checked when the run was created (sha256:<hex>); the
	// stage Jobs run the image by it. Set by the server, never by a user.
	// +optional
	ImageDigest string `json:"imageDigest,omitempty" protobuf:"bytes,3,opt,name=imageDigest"`
}

// Timeouts bound the stages of a run. A stage that exceeds its timeout is stopped
// and the run fails.
type Timeouts struct {
	// plan bounds the plan stage (source fetch, init and plan). Defaults to 1h; at most 24h.
	// +optional
	Plan *metav1.Duration `json:"plan,omitempty" protobuf:"bytes,1,opt,name=plan"`
	// apply bounds the apply stage. Defaults to 1h; at most 24h.
	// +optional
	Apply *metav1.Duration `json:"apply,omitempty" protobuf:"bytes,2,opt,name=apply"`
}

// ExecutorSpec configures the pods that run each stage in Kubernetes mode.
type ExecutorSpec struct {
	// serviceAccountName is the service account of the executor pods.
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty" protobuf:"bytes,1,opt,name=serviceAccountName"`
	// resources are the executor container's requests and limits.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty" protobuf:"bytes,2,opt,name=resources"`
	// nodeSelector constrains the executor pods to nodes with these labels.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty" protobuf:"bytes,3,rep,name=nodeSelector"`
	// tolerations of the executor pods.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty" protobuf:"bytes,4,rep,name=tolerations"`
}

// Creator identifies the user who created a run.
type Creator struct {
	// username of the creating user.
	Username string `json:"username" protobuf:"bytes,1,opt,name=username"`
	// uid of the creating user, when the authenticator provides one.
	// +optional
	UID string `json:"uid,omitempty" protobuf:"bytes,2,opt,name=uid"`
	// groups of the creating user.
	// +optional
	// +listType=atomic
	Groups []string `json:"groups,omitempty" protobuf:"bytes,3,rep,name=groups"`
}

// RunPhase is a simple, high-level summary of where a run is in its lifecycle.
// +enum
type RunPhase string

const (
	// RunPhasePending means the run is accepted and waits for its plan stage.
	RunPhasePending RunPhase = "Pending"
	// RunPhaseQueued means the run waits for a stage slot: the server runs at
	// most --max-concurrent-stages stages at once (and per namespace, at most
	// --max-concurrent-stages-per-namespace), and starts waiting runs in the
	// order they were created; status.message gives its position.
	RunPhaseQueued RunPhase = "Queued"
	// RunPhasePlanning means the plan stage is running.
	RunPhasePlanning RunPhase = "Planning"
	// RunPhaseAwaitingApproval means a plan with changes waits for an approval.
	RunPhaseAwaitingApproval RunPhase = "AwaitingApproval"
	// RunPhaseApplying means the apply stage is running.
	RunPhaseApplying RunPhase = "Applying"
	// RunPhaseSucceeded means the run finished: applied, or planned with no changes, or planned only.
	RunPhaseSucceeded RunPhase = "Succeeded"
	// RunPhaseFailed means a stage failed; status.message says why.
	RunPhaseFailed RunPhase = "Failed"
	// RunPhaseCanceled means a stage was stopped on request.
	RunPhaseCanceled RunPhase = "Canceled"
	// RunPhaseDiscarded means the plan was rejected, or its approval timed out.
	RunPhaseDiscarded RunPhase = "Discarded"
)

// The condition of a run whose artifacts wait for the object store, and
// its reason.
const (
	// ConditionArtifactsStored is False while a stage's upload waits for the
	// artifact store (--artifact-store=s3), which the stage retries; it goes
	// once the upload is stored.
	ConditionArtifactsStored = "ArtifactsStored"
	// ReasonArtifactStoreUnavailable: the artifact store does not answer.
	ReasonArtifactStoreUnavailable = "ArtifactStoreUnavailable"
)

// Condition types of a TerraformRun.
const (
	// ConditionPlanned is True once a plan exists.
	ConditionPlanned = "Planned"
	// ConditionApproved is True once the plan is approved, by a user or by Auto mode.
	ConditionApproved = "Approved"
	// ConditionApplied is True once the plan is applied.
	ConditionApplied = "Applied"
	// ConditionCancelRequested is True once a cancel was requested through the
	// cancel subresource; the controller then stops the running stage, or ends
	// a run that has not started one, Canceled.
	ConditionCancelRequested = "CancelRequested"
	// ConditionDiscardRequested is True once a discard of the plan waiting for
	// approval was requested through the discard subresource; the controller
	// then ends the run Discarded.
	ConditionDiscardRequested = "DiscardRequested"
	// ConditionComplete is True once the run has Succeeded, as a Job's
	// Complete is: kubectl wait --for=condition=Complete.
	ConditionComplete = "Complete"
	// ConditionFailed is True once the run has ended any other way (Failed,
	// Canceled or Discarded, the reason says which), as a Job's Failed is:
	// kubectl wait --for=condition=Failed.
	ConditionFailed = "Failed"
	// ConditionReady is set when the run ends: True when it Succeeded,
	// False with the final phase as reason otherwise, for tools that read
	// Ready (kstatus, Flux, Argo CD).
	ConditionReady = "Ready"
)

// AutoApprover is status.approval.approvedBy of a run approved by its
// approval mode Auto. Only the controller records it, and only for such a run.
const AutoApprover = "auto"

// Condition reasons of a TerraformRun.
const (
	ReasonPending = "Pending"
	ReasonQueued  = "Queued"
	// ReasonWaitingForState: another run uses the run's Terraform state; it
	// takes its turn when that run is done with it.
	ReasonWaitingForState = "WaitingForState"
	// ReasonStalePlan: another run applied to the state after the plan was
	// made; the plan is not applied.
	ReasonStalePlan        = "StalePlan"
	ReasonPlanning         = "Planning"
	ReasonPlanned          = "Planned"
	ReasonNoChanges        = "NoChanges"
	ReasonPlanOnly         = "PlanOnly"
	ReasonPlanFailed       = "PlanFailed"
	ReasonAwaitingApproval = "AwaitingApproval"
	ReasonApproved         = "Approved"
	ReasonAutoApproved     = "AutoApproved"
	ReasonApprovalExpired  = "ApprovalExpired"
	ReasonDiscarded        = "Discarded"
	ReasonApplying         = "Applying"
	ReasonApplied          = "Applied"
	ReasonApplyFailed      = "ApplyFailed"
	ReasonCanceled         = "Canceled"
	ReasonCancelRequested  = "CancelRequested"
	ReasonDiscardRequested = "DiscardRequested"
	ReasonDeadlineExceeded = "DeadlineExceeded"
	ReasonExecutorLost     = "ExecutorLost"
	ReasonExecutorForged   = "ExecutorForged"
	ReasonStartFailed      = "StartFailed"
	// ReasonVerificationFailed: the signature of the run's OCI source did
	// not verify (spec.source.oci.verify), or its Flux artifact was not the
	// one its source reported; nothing of it was unpacked.
	ReasonVerificationFailed = "VerificationFailed"
	// ReasonSourceNotReady: the Flux source the run names
	// (spec.source.sourceRef) has no Ready artifact yet; the run waits.
	ReasonSourceNotReady = "SourceNotReady"
)

// TerraformRunStatus is the observed state of a run.
type TerraformRunStatus struct {
	// phase is a high-level summary of the run's lifecycle.
	// +optional
	Phase RunPhase `json:"phase,omitempty" protobuf:"bytes,1,opt,name=phase,casttype=RunPhase"`
	// conditions are Planned, Approved and Applied, with reasons such as
	// NoChanges, PlanFailed and ApprovalExpired.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,2,rep,name=conditions"`
	// observedGeneration is the generation the controller last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,3,opt,name=observedGeneration"`
	// plan summarizes the plan once it exists.
	// +optional
	Plan *PlanSummary `json:"plan,omitempty" protobuf:"bytes,4,opt,name=plan"`
	// approval records the approval that completed the plan's approval: with
	// spec.approval.requiredApprovals of N, the Nth distinct approval of the
	// plan's digest (or Auto mode's). Only the approve subresource (and the
	// controller, for Auto mode) records it.
	// +optional
	Approval *ApprovalStatus `json:"approval,omitempty" protobuf:"bytes,5,opt,name=approval"`
	// approvals lists every approval accepted by the approve subresource,
	// oldest first: who approved which digest, when, and why.
	// +optional
	// +listType=atomic
	Approvals []ApprovalStatus `json:"approvals,omitempty" protobuf:"bytes,6,rep,name=approvals"`
	// policy is what the TerraformPolicies said of the plan, recorded by
	// the server with the plan, and the overrides of its soft-mandatory
	// failures (the override subresource). No status write changes it.
	// +optional
	Policy *PolicyStatus `json:"policy,omitempty" protobuf:"bytes,13,opt,name=policy"`
	// tasks are the calls of the namespace's TerraformRunTasks at each
	// stage, recorded by the server (the controller when it calls, the
	// taskresult subresource when a task answers). No status write changes
	// them.
	// +optional
	// +listType=atomic
	Tasks []RunTaskCall `json:"tasks,omitempty" protobuf:"bytes,14,rep,name=tasks"`
	// source records the resolved source.
	// +optional
	Source *SourceStatus `json:"source,omitempty" protobuf:"bytes,7,opt,name=source"`
	// stages lists every stage execution, oldest first.
	// +optional
	// +listType=atomic
	Stages []StageStatus `json:"stages,omitempty" protobuf:"bytes,8,rep,name=stages"`
	// outputs lists the run's outputs. Sensitive values are never shown here; read
	// them through the outputs subresource.
	// +optional
	// +listType=map
	// +listMapKey=name
	Outputs []OutputStatus `json:"outputs,omitempty" protobuf:"bytes,9,rep,name=outputs"`
	// startTime is when the first stage started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty" protobuf:"bytes,10,opt,name=startTime"`
	// completionTime is when the run reached a final phase.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty" protobuf:"bytes,11,opt,name=completionTime"`
	// message is a human-readable explanation of the current phase.
	// +optional
	Message string `json:"message,omitempty" protobuf:"bytes,12,opt,name=message"`
}

// PlanSummary summarizes a plan.
type PlanSummary struct {
	// digest is "sha256:" followed by the hex sha256 of the plan's part
	// digests (see parts): it covers the plan file, the planned configuration
	// and the text and JSON that approvers read. An approval must name this
	// digest, and approves exactly those bytes.
	// +optional
	Digest string `json:"digest,omitempty" protobuf:"bytes,1,opt,name=digest"`
	// parts are the digests of the plan's stored parts, from which digest is
	// computed. The plan subresource serves a part only while its stored
	// bytes are these, with the plan's digest in the X-Terrarun-Plan-Digest
	// header; the apply stage applies a plan file and configuration only
	// when they are these.
	// +optional
	Parts *PlanPartDigests `json:"parts,omitempty" protobuf:"bytes,2,opt,name=parts"`
	// add is the number of resources to create.
	Add int32 `json:"add" protobuf:"varint,3,opt,name=add"`
	// change is the number of resources to update in place.
	Change int32 `json:"change" protobuf:"varint,4,opt,name=change"`
	// destroy is the number of resources to destroy.
	Destroy int32 `json:"destroy" protobuf:"varint,5,opt,name=destroy"`
	// import is the number of resources to import.
	// +optional
	Import int32 `json:"import,omitempty" protobuf:"varint,6,opt,name=import"`
	// hasChanges is true when applying the plan would change anything, outputs included.
	HasChanges bool `json:"hasChanges" protobuf:"varint,7,opt,name=hasChanges"`
	// completedAt is when the plan was written.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty" protobuf:"bytes,8,opt,name=completedAt"`
}

// PlanPartDigests are the digests of a plan's parts, each "sha256:" followed
// by the hex sha256 of the stored bytes.
type PlanPartDigests struct {
	// file is the digest of the binary plan file.
	File string `json:"file" protobuf:"bytes,1,opt,name=file"`
	// source is the digest of the planned configuration (a tar.gz).
	Source string `json:"source" protobuf:"bytes,2,opt,name=source"`
	// text is the digest of the plan text (terraform show).
	Text string `json:"text" protobuf:"bytes,3,opt,name=text"`
	// json is the digest of the redacted plan JSON (terraform show -json).
	JSON string `json:"json" protobuf:"bytes,4,opt,name=json"`
}

// ApprovalStatus records an approval.
type ApprovalStatus struct {
	// approvedBy is the authenticated user who approved, or "auto" in Auto mode.
	ApprovedBy string `json:"approvedBy" protobuf:"bytes,1,opt,name=approvedBy"`
	// approvedAt is when the approval was accepted.
	// +optional
	ApprovedAt *metav1.Time `json:"approvedAt,omitempty" protobuf:"bytes,2,opt,name=approvedAt"`
	// planDigest is the digest of the approved plan.
	PlanDigest string `json:"planDigest" protobuf:"bytes,3,opt,name=planDigest"`
	// comment is the approver's comment.
	// +optional
	Comment string `json:"comment,omitempty" protobuf:"bytes,4,opt,name=comment"`
	// groups are the approver's groups when they approved, against which
	// the groups of policy approval rules are matched.
	// +optional
	// +listType=atomic
	Groups []string `json:"groups,omitempty" protobuf:"bytes,5,rep,name=groups"`
}

// SourceStatus records the resolved source.
type SourceStatus struct {
	// revision is the resolved git commit, the OCI artifact as tag@sha256:<manifest digest> (or its digest alone), or a content digest for inline and ConfigMap sources.
	// +optional
	Revision string `json:"revision,omitempty" protobuf:"bytes,1,opt,name=revision"`
	// artifact is the Flux artifact (spec.source.sourceRef) that the run
	// pinned when its plan started: the plan stage downloads it and checks
	// its digest, and a retried plan uses it again.
	// +optional
	Artifact *SourceArtifact `json:"artifact,omitempty" protobuf:"bytes,2,opt,name=artifact"`
}

// SourceArtifact is an artifact that Flux's source-controller serves.
type SourceArtifact struct {
	// url the artifact is downloaded from, on the source-controller's
	// artifact server.
	URL string `json:"url" protobuf:"bytes,1,opt,name=url"`
	// digest of the artifact's tarball, as source-controller computed it
	// (sha256:<hex>).
	Digest string `json:"digest" protobuf:"bytes,2,opt,name=digest"`
}

// StageName names a stage of a run.
// +enum
type StageName string

const (
	// StagePlan fetches the source, initializes and plans.
	StagePlan StageName = "plan"
	// StageApply applies the approved plan file.
	StageApply StageName = "apply"
)

// StageStatus is one execution of one stage.
type StageStatus struct {
	// name of the stage: plan or apply.
	Name StageName `json:"name" protobuf:"bytes,1,opt,name=name,casttype=StageName"`
	// attempt counts executions of this stage, from 1.
	Attempt int32 `json:"attempt" protobuf:"varint,2,opt,name=attempt"`
	// job is the name of the Job (kubernetes executor) or process (local executor).
	// +optional
	Job string `json:"job,omitempty" protobuf:"bytes,3,opt,name=job"`
	// startTime is when the stage started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty" protobuf:"bytes,4,opt,name=startTime"`
	// completionTime is when the stage ended.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty" protobuf:"bytes,5,opt,name=completionTime"`
	// exitCode of the executor, once it has ended.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty" protobuf:"varint,6,opt,name=exitCode"`
	// reason is a CamelCase word for how the stage ended.
	// +optional
	Reason string `json:"reason,omitempty" protobuf:"bytes,7,opt,name=reason"`
	// startRevision is the resourceVersion of the runs the controller had
	// seen when it started the stage: stages on one state start in its order,
	// which, unlike startTime's seconds, cannot tie. It decides whether
	// another run's apply made a plan stale.
	// +optional
	StartRevision int64 `json:"startRevision,omitempty" protobuf:"varint,8,opt,name=startRevision"`
	// carrierAttempt is set on an apply stage that the execution of a plan
	// stage carries (approval mode Auto: one engine, initialized once, plans
	// and then applies its own plan): the attempt of that plan stage. It is 0
	// when the apply runs in an execution of its own.
	// +optional
	CarrierAttempt int32 `json:"carrierAttempt,omitempty" protobuf:"varint,9,opt,name=carrierAttempt"`
}

// OutputStatus describes one Terraform output.
type OutputStatus struct {
	// name of the output.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// type is the output's Terraform type, in Terraform's JSON form (for
	// example "string", or ["list","number"]).
	// +optional
	Type *JSON `json:"type,omitempty" protobuf:"bytes,2,opt,name=type"`
	// sensitive is true when the output is marked sensitive; its value is then omitted.
	// +optional
	Sensitive bool `json:"sensitive,omitempty" protobuf:"varint,3,opt,name=sensitive"`
	// value is the output's value, as it is (a string, a number, a list,
	// an object...), present only when the output is neither sensitive nor
	// larger than 4 KiB in JSON (valueOmitted says which). The outputs
	// subresource serves every value.
	// +optional
	Value *JSON `json:"value,omitempty" protobuf:"bytes,4,opt,name=value"`
	// valueOmitted says why value is absent: Sensitive, or TooLarge (the
	// value, or the outputs together, are too large for the run's status).
	// +optional
	ValueOmitted OutputValueOmitted `json:"valueOmitted,omitempty" protobuf:"bytes,5,opt,name=valueOmitted,casttype=OutputValueOmitted"`
}

// OutputValueOmitted says why an output's value is not in status.
type OutputValueOmitted string

const (
	// OutputSensitive: the output is sensitive, or holds a secret value.
	OutputSensitive OutputValueOmitted = "Sensitive"
	// OutputTooLarge: the value is over 4 KiB, or the values before it
	// already fill the status's 64 KiB for outputs.
	OutputTooLarge OutputValueOmitted = "TooLarge"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformRunApproval is the body of a POST to the approve subresource. The
// approver is the authenticated user of the request; it is never read from the body.
type TerraformRunApproval struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata; name, when set, must match the run.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// planDigest is the digest of the plan being approved, from status.plan.digest.
	// An approval of any other plan is refused with 409 Conflict.
	PlanDigest string `json:"planDigest" protobuf:"bytes,2,opt,name=planDigest"`
	// comment is an optional note recorded in status.approval.comment.
	// +optional
	Comment string `json:"comment,omitempty" protobuf:"bytes,3,opt,name=comment"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformRunDiscard is the body of a POST to the discard subresource: it
// rejects a plan that waits for approval, and the run ends Discarded.
type TerraformRunDiscard struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata; name, when set, must match the run.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// comment is an optional note recorded in status.message.
	// +optional
	Comment string `json:"comment,omitempty" protobuf:"bytes,2,opt,name=comment"`
	// reason is an optional CamelCase word for why, the reason of the run's
	// final conditions (Discarded when empty); a workspace discards a plan
	// that its newer spec supersedes with Superseded.
	// +optional
	Reason string `json:"reason,omitempty" protobuf:"bytes,3,opt,name=reason"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformRunCancel is the body of a POST to the cancel subresource: it stops
// the stage in flight (SIGINT to terraform, then a kill after a grace period),
// or ends a run that has not started a stage yet, and the run ends Canceled.
type TerraformRunCancel struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata; name, when set, must match the run.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// comment is an optional note recorded in status.message.
	// +optional
	Comment string `json:"comment,omitempty" protobuf:"bytes,2,opt,name=comment"`
}

// Formats of the plan subresource, the values of TerraformRunPlanOptions.Format.
const (
	// PlanFormatText is the plan as terraform show prints it. It is the default.
	PlanFormatText = "text"
	// PlanFormatJSON is terraform show -json with every sensitive value redacted.
	PlanFormatJSON = "json"
	// PlanFormatFile is the binary plan file, served only to the run's apply stage.
	PlanFormatFile = "file"
	// PlanFormatSource is a tar.gz of the planned configuration, served only to
	// the run's apply stage.
	PlanFormatSource = "source"
)

// Parts of a plan upload, the values of TerraformRunPlanOptions.Part.
const (
	// PlanPartFile is the binary plan file.
	PlanPartFile = "file"
	// PlanPartText is the output of terraform show.
	PlanPartText = "text"
	// PlanPartJSON is the redacted output of terraform show -json.
	PlanPartJSON = "json"
	// PlanPartSource is a tar.gz of the configuration directory.
	PlanPartSource = "source"
	// PlanPartResult is the plan stage's result document, uploaded last.
	PlanPartResult = "result"
	// PlanPartAll is an upload of several parts in one multipart/form-data
	// body, each part named by its form name (file, text, json, source and,
	// last, result if it is part of it): the parts are stored together, in
	// one transaction where they fit.
	PlanPartAll = "all"
)

// +k8s:conversion-gen:explicit-from=net/url.Values
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformRunLogOptions are the query options of the logs subresource. A GET
// reads the log of one stage attempt; a POST, allowed only to the executor of
// that attempt, appends its body to it.
type TerraformRunLogOptions struct {
	metav1.TypeMeta `json:",inline"`

	// stage is plan or apply. A GET defaults to the run's latest stage; a POST
	// must set it.
	// +optional
	Stage string `json:"stage,omitempty" protobuf:"bytes,1,opt,name=stage"`
	// attempt is the attempt of the stage, from 1. A GET defaults to the
	// stage's latest attempt; a POST must set it.
	// +optional
	Attempt *int32 `json:"attempt,omitempty" protobuf:"varint,2,opt,name=attempt"`
	// follow streams the log until the stage attempt ends (GET only).
	// +optional
	Follow bool `json:"follow,omitempty" protobuf:"varint,3,opt,name=follow"`
	// tailLines, when set, starts with the last tailLines lines of the log (GET only).
	// +optional
	TailLines *int64 `json:"tailLines,omitempty" protobuf:"varint,4,opt,name=tailLines"`
	// limitBytes, when set, stops after limitBytes bytes (GET only).
	// +optional
	LimitBytes *int64 `json:"limitBytes,omitempty" protobuf:"varint,5,opt,name=limitBytes"`
	// end, on a POST, makes the stream the whole log of the stage attempt:
	// when its body ends cleanly, its last bytes and the log's end are one
	// write, and followers end. A stream that breaks leaves the log open
	// (the run controller ends it with the stage). POST only.
	// +optional
	End bool `json:"end,omitempty" protobuf:"varint,6,opt,name=end"`
}

// +k8s:conversion-gen:explicit-from=net/url.Values
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformRunPlanOptions are the query options of the plan subresource. A GET
// reads the plan; a POST, allowed only to the executor of the run's current
// plan stage attempt, uploads one part of it.
type TerraformRunPlanOptions struct {
	metav1.TypeMeta `json:",inline"`

	// format is text (the default), json (redacted), file or source (GET only).
	// file and source are served only to the executor of the run's apply stage.
	// +optional
	Format string `json:"format,omitempty" protobuf:"bytes,1,opt,name=format"`
	// wait blocks until the plan exists or the plan stage has ended without
	// one (GET only).
	// +optional
	Wait bool `json:"wait,omitempty" protobuf:"varint,2,opt,name=wait"`
	// attempt is the plan stage attempt that uploads; a POST must set it.
	// +optional
	Attempt *int32 `json:"attempt,omitempty" protobuf:"varint,3,opt,name=attempt"`
	// part is the uploaded part: file, text, json, source, or result, which is
	// uploaded last; or all, several of them in one multipart/form-data body.
	// A POST must set it.
	// +optional
	Part string `json:"part,omitempty" protobuf:"bytes,4,opt,name=part"`
}

// +k8s:conversion-gen:explicit-from=net/url.Values
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformRunOutputsOptions are the query options of the outputs subresource.
// A GET takes none; a POST, allowed only to the executor of the run's current
// apply stage attempt, uploads the outputs.
type TerraformRunOutputsOptions struct {
	metav1.TypeMeta `json:",inline"`

	// attempt is the apply stage attempt that uploads; a POST must set it.
	// +optional
	Attempt *int32 `json:"attempt,omitempty" protobuf:"varint,1,opt,name=attempt"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +k8s:conversion-gen:explicit-from=net/url.Values

// TerraformRunStateOptions are the query options of the state and statelock
// subresources, which only the executor of the run's current stage may use,
// when the run keeps its state in the backend terrarun serves. GET state
// reads the state, POST state writes a version of it, GET statelock reads
// its lock, POST statelock takes the lock and DELETE statelock releases it.
type TerraformRunStateOptions struct {
	metav1.TypeMeta `json:",inline"`

	// lockID is the ID of the state lock this stage holds: a POST of the
	// state and a DELETE of the lock must set it.
	// +optional
	LockID string `json:"lockID,omitempty" protobuf:"bytes,1,opt,name=lockID"`
}
