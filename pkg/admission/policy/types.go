// Package policy defines the cluster policy file read by terrarun's admission
// plugins (TerraformRunDefaults and TerraformRunPolicy), and loads and
// validates it.
//
// The file is YAML or JSON:
//
//	apiVersion: admission.terrarun.dev/v1alpha1
//	kind: TerraformRunPolicy
//	defaults:
//	  engine: {binary: tofu, image: registry.example.com/terrarun-executor:v1}
//	  approval: {mode: Manual, timeout: 24h}
//	  timeouts: {plan: 30m, apply: 1h}
//	  ttlSecondsAfterFinished: 2592000
//	allowedGitHosts: ["github.com", "*.corp.example.com"]
//	requireVerifiedSources: true
//	trustedSourceKeys: |
//	  -----BEGIN PUBLIC KEY-----
//	  ...
//	allowedImages: ["registry.example.com/terrarun-executor:*"]
//	imageVerification:
//	  images: ["registry.example.com/*"]
//	  publicKeys: |
//	    -----BEGIN PUBLIC KEY-----
//	    ...
//	allowedServiceAccounts: ["terraform-deployer"]
//	allowedBackends: ["kubernetes", "s3"]
//	manualApprovalNamespaceSelector: {matchLabels: {env: prod}}
//	maxTimeouts: {plan: 2h, apply: 4h, approval: 72h}
//	retention:
//	- namespaceSelector: {matchLabels: {env: dev}}
//	  ttlSecondsAfterFinished: 604800
//	separationOfDuties: true
//	taskRunTemplate:
//	  serviceAccountName: terraform-stages
//	  podTemplate:
//	    nodeSelector: {pool: terraform}
//	    tolerations: [{key: dedicated, value: terraform, effect: NoSchedule}]
//	  task: {namespace: terrarun-system, name: stage-with-scanner}
//
// Every field is optional. An empty file, or no file at all, is the zero
// policy: no defaults, no restrictions, and separation of duties on.
package policy

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

const (
	// APIVersion is the only accepted apiVersion of a policy file.
	APIVersion = "admission.terrarun.dev/v1alpha1"
	// Kind is the only accepted kind of a policy file.
	Kind = "TerraformRunPolicy"
)

// Config is the cluster policy for TerraformRuns. Its zero value (and a nil
// *Config) is a valid policy that sets no defaults, imposes no restrictions and
// enforces separation of duties.
type Config struct {
	// TypeMeta holds apiVersion and kind, which must be exactly
	// admission.terrarun.dev/v1alpha1 and TerraformRunPolicy.
	metav1.TypeMeta `json:",inline"`

	// Defaults are applied by the TerraformRunDefaults plugin, at creation, to
	// the fields of a run that its author left empty. A value set by the user is
	// never overwritten.
	// +optional
	Defaults Defaults `json:"defaults,omitempty"`

	// AllowedGitHosts lists the hosts that spec.source.git.url may point to.
	// An entry is a host name ("github.com") that matches exactly, or a wildcard
	// "*.example.com" that matches every subdomain of example.com (at any depth)
	// but not example.com itself. Matching is case-insensitive and ignores the
	// port. An empty list allows any host.
	// +optional
	AllowedGitHosts []string `json:"allowedGitHosts,omitempty"`

	// AllowedOCIRegistries lists the registry hosts that spec.source.oci.url
	// may point to, matched as allowedGitHosts are. An empty list allows
	// any registry.
	// +optional
	AllowedOCIRegistries []string `json:"allowedOCIRegistries,omitempty"`

	// RequireVerifiedSources refuses a run whose OCI source does not set
	// spec.source.oci.verify: every artifact must carry a signature that
	// verifies before anything of it is unpacked. A run from a Flux
	// OCIRepository (spec.source.sourceRef) is refused too: terrarun
	// cannot tell whether source-controller verified it.
	// +optional
	RequireVerifiedSources bool `json:"requireVerifiedSources,omitempty"`

	// TrustedSourceKeys holds PEM public keys (the content of cosign.pub
	// files) that every OCI source (spec.source.oci) must be signed by:
	// the server copies them into each new run's
	// spec.source.oci.verify.trustedKeys, and the plan stage verifies the
	// artifact's cosign signature against them before unpacking it (and
	// against verify.keysSecret's too, when the run names one). A
	// tenant's own keys then never suffice. It satisfies
	// requireVerifiedSources.
	// +optional
	TrustedSourceKeys string `json:"trustedSourceKeys,omitempty"`

	// AllowedImages lists the executor images (spec.engine.image, after
	// defaults) a run may use. An entry matches an image exactly, or, when it
	// ends in "*", every image that starts with what precedes the "*"
	// ("registry.example.com/terrarun-executor:*"). A run that names no
	// image gets defaults.engine.image (else the built-in default image),
	// which must be allowed too. An empty list allows any image.
	// +optional
	AllowedImages []string `json:"allowedImages,omitempty"`

	// ImageVerification, in cluster mode, checks the cosign signature of
	// every executor image it covers when a run is created, and pins the
	// run to the digest it verified (spec.engine.imageDigest): the stage
	// Jobs run the image by that digest, so what was verified is what
	// runs. A run whose image does not verify is refused. Standalone
	// runs no image and checks none.
	// +optional
	ImageVerification *ImageVerification `json:"imageVerification,omitempty"`

	// AllowedServiceAccounts lists the ServiceAccounts that
	// spec.executor.serviceAccountName may name. A run that names none runs
	// as the executor's default ServiceAccount, which is always allowed. An
	// empty list allows any ServiceAccount (that the creator may use).
	// +optional
	AllowedServiceAccounts []string `json:"allowedServiceAccounts,omitempty"`

	// AllowedBackends lists the backend types (spec.backend.type) a run may
	// use. A run that sets no backend uses the executor's default backend,
	// which is always allowed. An empty list allows any backend.
	// +optional
	AllowedBackends []string `json:"allowedBackends,omitempty"`

	// ManualApprovalNamespaceSelector selects the namespaces in which
	// spec.approval.mode Auto is forbidden, so that every plan there waits for a
	// human approval. It is matched against the namespace's labels; every
	// namespace carries kubernetes.io/metadata.name=<name>, which also works in
	// standalone mode. Unset selects no namespace; an empty selector ({})
	// selects every namespace.
	// +optional
	ManualApprovalNamespaceSelector *metav1.LabelSelector `json:"manualApprovalNamespaceSelector,omitempty"`

	// MaxTimeouts are upper bounds on the timeouts a run may ask for. Note that
	// the server's own defaults (1h per stage, 24h for approval) apply to runs
	// that set no timeout and that no policy default covers, so a maximum below
	// those should come with a matching entry in defaults.
	// +optional
	MaxTimeouts MaxTimeouts `json:"maxTimeouts,omitempty"`

	// MinRequiredApprovals is the least spec.approval.requiredApprovals a
	// Manual run may ask for, from 1 to 10; runs asking for fewer are refused.
	// Set defaults.approval.requiredApprovals to at least this value, so that
	// runs that ask for nothing are accepted.
	// +optional
	MinRequiredApprovals int32 `json:"minRequiredApprovals,omitempty"`

	// Retention sets, per namespace, how long finished runs are kept: the
	// first entry whose namespaceSelector matches a run's namespace gives
	// its default spec.ttlSecondsAfterFinished.
	// +optional
	Retention []NamespaceRetention `json:"retention,omitempty"`

	// SeparationOfDuties, when true (the default), forbids the creator of a run
	// to approve it through the approve subresource. Set it to false only where
	// a single identity must both create and approve (for example a standalone
	// server without authentication, where every request is anonymous).
	// +optional
	SeparationOfDuties *bool `json:"separationOfDuties,omitempty"`

	// TaskRunTemplate shapes every stage's TaskRun when stages run on
	// Tekton (--executor=tekton); other executors ignore it.
	// +optional
	TaskRunTemplate *TaskRunTemplate `json:"taskRunTemplate,omitempty"`
}

// TaskRunTemplate is what the Tekton executor gives the TaskRun of every
// stage, besides what terrarun builds for it.
type TaskRunTemplate struct {
	// ServiceAccountName is the ServiceAccount of the stages of runs that
	// name none (spec.executor.serviceAccountName), over the server's
	// --executor-service-account.
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// PodTemplate says where the stages' pods run.
	// +optional
	PodTemplate *StagePodTemplate `json:"podTemplate,omitempty"`
	// Task names a Tekton Task (tekton.dev/v1) whose steps run around the
	// stage, in the stage's pod: a scanner before a plan, a notifier after
	// an apply. Its step named "stage" marks the stage's place (its image
	// and script are not used): the steps before it run before the stage,
	// those after it after the stage, and only once it succeeded. A step
	// that fails fails the stage. The Task is read when each stage starts;
	// keep it in a namespace that only operators may write, for its steps
	// run beside the stage's credentials.
	// +optional
	Task *TaskReference `json:"task,omitempty"`
}

// StagePodTemplate are the scheduling fields of the stages' pods: the
// run's own spec.executor.nodeSelector and tolerations are added to them,
// and a key of nodeSelector set here wins over the run's.
type StagePodTemplate struct {
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// RuntimeClassName runs the stages with this RuntimeClass (gVisor,
	// Kata): a sandbox around the run's code.
	// +optional
	RuntimeClassName string `json:"runtimeClassName,omitempty"`
	// +optional
	SchedulerName string `json:"schedulerName,omitempty"`
	// ImagePullSecrets lets the stages' pods pull a private executor
	// image; the Secrets must exist in each run's namespace.
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
}

// TaskReference names a Tekton Task.
type TaskReference struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// ImageVerification says which executor images must carry a cosign
// signature, and by which keys.
type ImageVerification struct {
	// Images lists the images (spec.engine.image, after defaults) that are
	// verified, matched as allowedImages are; an empty list covers every
	// image. An image outside the list is neither verified nor pinned:
	// use allowedImages to refuse it.
	// +optional
	Images []string `json:"images,omitempty"`
	// PublicKeys holds one or more PEM public keys (the content of
	// cosign.pub files); an image verifies when one of them signed its
	// manifest digest. Required.
	PublicKeys string `json:"publicKeys"`
	// RefuseUnsigned, when true (the default), refuses a run whose image
	// has no signature by one of the keys. False admits it, pinned to the
	// digest its tag has now, with a warning: a way to roll verification
	// out before every image is signed. An image that cannot be resolved
	// is refused either way.
	// +optional
	RefuseUnsigned *bool `json:"refuseUnsigned,omitempty"`
	// CABundle holds PEM certificates trusted, besides the system's, for
	// the registries' TLS.
	// +optional
	CABundle string `json:"caBundle,omitempty"`
	// CredentialsFile is a docker config file (the .dockerconfigjson of a
	// Secret mounted into the server, read at each verification) with
	// read access to private registries; credentials are offered only to
	// the host their entry names. Unset: anonymous.
	// +optional
	CredentialsFile string `json:"credentialsFile,omitempty"`
	// Timeout bounds the verification of one run's image (resolving its
	// tag, reading its signatures). Defaults to 10s.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// RefusesUnsigned reports whether an image without a valid signature is
// refused: true unless refuseUnsigned is false.
func (v *ImageVerification) RefusesUnsigned() bool {
	return v.RefuseUnsigned == nil || *v.RefuseUnsigned
}

// Covers reports whether image is one that v verifies.
func (v *ImageVerification) Covers(image string) bool {
	return len(v.Images) == 0 || matchImage(v.Images, image)
}

// Defaults are the values filled into the empty fields of a new run.
type Defaults struct {
	// Engine holds defaults for spec.engine.
	// +optional
	Engine EngineDefaults `json:"engine,omitempty"`
	// Approval holds defaults for spec.approval.
	// +optional
	Approval ApprovalDefaults `json:"approval,omitempty"`
	// Timeouts holds defaults for spec.timeouts.
	// +optional
	Timeouts TimeoutDefaults `json:"timeouts,omitempty"`
	// TTLSecondsAfterFinished is the default spec.ttlSecondsAfterFinished:
	// how long a finished run, with its plans, logs and outputs, is kept.
	// Not of the runs a workspace creates, which its history limits keep.
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// NamespaceRetention keeps the finished runs of the namespaces it selects
// for a time of their own.
type NamespaceRetention struct {
	// NamespaceSelector selects the namespaces by their labels (every
	// namespace carries kubernetes.io/metadata.name=<name>, which also
	// works in standalone mode).
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`
	// TTLSecondsAfterFinished is the default spec.ttlSecondsAfterFinished of
	// the runs of those namespaces, over defaults.ttlSecondsAfterFinished.
	TTLSecondsAfterFinished int32 `json:"ttlSecondsAfterFinished"`
}

// EngineDefaults are defaults for spec.engine.
type EngineDefaults struct {
	// Binary is the default spec.engine.binary: terraform or tofu.
	// +optional
	Binary terrarun.EngineBinary `json:"binary,omitempty"`
	// Image is the default spec.engine.image, the executor container image.
	// +optional
	Image string `json:"image,omitempty"`
}

// ApprovalDefaults are defaults for spec.approval.
type ApprovalDefaults struct {
	// Mode is the default spec.approval.mode: Manual or Auto.
	// +optional
	Mode terrarun.ApprovalMode `json:"mode,omitempty"`
	// Timeout is the default spec.approval.timeout. It must be positive.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// RequiredApprovals is the default spec.approval.requiredApprovals of
	// Manual runs, from 1 to 10.
	// +optional
	RequiredApprovals int32 `json:"requiredApprovals,omitempty"`
}

// TimeoutDefaults are defaults for spec.timeouts.
type TimeoutDefaults struct {
	// Plan is the default spec.timeouts.plan. It must be positive.
	// +optional
	Plan *metav1.Duration `json:"plan,omitempty"`
	// Apply is the default spec.timeouts.apply. It must be positive.
	// +optional
	Apply *metav1.Duration `json:"apply,omitempty"`
}

// MaxTimeouts are upper bounds enforced by the TerraformRunPolicy plugin.
// An unset bound imposes nothing.
type MaxTimeouts struct {
	// Plan bounds spec.timeouts.plan. It must be positive.
	// +optional
	Plan *metav1.Duration `json:"plan,omitempty"`
	// Apply bounds spec.timeouts.apply. It must be positive.
	// +optional
	Apply *metav1.Duration `json:"apply,omitempty"`
	// Approval bounds spec.approval.timeout. It must be positive.
	// +optional
	Approval *metav1.Duration `json:"approval,omitempty"`
}

// SeparationOfDutiesEnabled reports whether the creator of a run is forbidden
// to approve it. It is true unless the policy sets separationOfDuties: false,
// and true for a nil *Config.
func (c *Config) SeparationOfDutiesEnabled() bool {
	if c == nil || c.SeparationOfDuties == nil {
		return true
	}
	return *c.SeparationOfDuties
}
