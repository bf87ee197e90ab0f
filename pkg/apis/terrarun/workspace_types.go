package terrarun

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformWorkspace is desired state that keeps itself applied: it creates
// a TerraformRun whenever what terraform would do changes (its template, the
// content of what the template reads), re-plans on an interval to detect
// drift, and destroys what it manages when it is deleted, if asked to. Its
// runs, labeled terrarun.dev/workspace and owned by it, are its history.
type TerraformWorkspace struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	Spec TerraformWorkspaceSpec `json:"spec"`
	// status is the most recently observed state, written only by the
	// workspace controller.
	// +optional
	Status TerraformWorkspaceStatus `json:"status,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformWorkspaceList is a list of TerraformWorkspaces.
type TerraformWorkspaceList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// items is the list of workspaces.
	Items []TerraformWorkspace `json:"items"`
}

// TerraformWorkspaceSpec is the desired state of a workspace.
type TerraformWorkspaceSpec struct {
	// template is the spec of every run the workspace creates: source,
	// variables, backend, terraform workspace, engine, executor, timeouts,
	// targets. Its operation, approval and outputsSecret are the workspace's
	// to set (spec.approval, spec.outputsSecret) and must be left empty here;
	// its creator is set by the server from the user who last changed the
	// spec, and the runs use only what that user may use.
	Template TerraformRunSpec `json:"template"`
	// approval is the approval of every run the workspace creates (Manual by
	// default).
	// +optional
	Approval Approval `json:"approval,omitempty"`
	// interval is how often the workspace plans again to detect drift, as a
	// plan-only run. Off when empty; at least 10s.
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
	// sourceInterval is how often a git source's ref (an OCI source's tag
	// or semver range) is resolved again, when that should be more often
	// than interval (or without drift checks): it is resolved by a
	// plan-only run, which reports drift too. At least 10s.
	// +optional
	SourceInterval *metav1.Duration `json:"sourceInterval,omitempty"`
	// driftPolicy is what a drift check that finds changes does: Report (the
	// default) sets the Drifted condition; Apply starts an apply run, through
	// approval when it is Manual.
	// +optional
	DriftPolicy DriftPolicy `json:"driftPolicy,omitempty"`
	// destroyOnDelete makes deleting the workspace run a Destroy run first:
	// the workspace goes away only once it has succeeded. An admin can
	// abandon the resources instead with the annotation
	// terrarun.dev/abandon-resources: "true".
	// +optional
	DestroyOnDelete bool `json:"destroyOnDelete,omitempty"`
	// dependsOn lists workspaces of the namespace that must be Ready at their
	// current spec before this workspace starts a run; their outputs can feed
	// variables (valueFrom.workspaceOutput). A cycle is refused.
	// +optional
	// +listType=map
	// +listMapKey=name
	DependsOn []WorkspaceReference `json:"dependsOn,omitempty"`
	// suspend stops the workspace from starting runs; a run already started
	// goes on.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
	// outputsSecret names a Secret of the namespace that receives every
	// output of the last successful apply (cluster mode): string outputs as
	// they are, others as JSON. It is owned by the workspace. Its creator
	// must be allowed to create Secrets.
	// +optional
	OutputsSecret string `json:"outputsSecret,omitempty"`
	// historyLimits is how many finished runs the workspace keeps; older ones
	// are deleted with their plans, logs and outputs.
	// +optional
	HistoryLimits HistoryLimits `json:"historyLimits,omitempty"`
}

// WorkspaceReference names a workspace in the same namespace.
type WorkspaceReference struct {
	// name of the workspace.
	Name string `json:"name"`
}

// DriftPolicy is what a drift check does when it finds changes.
// +enum
type DriftPolicy string

const (
	// DriftPolicyReport sets the Drifted condition and does nothing else.
	DriftPolicyReport DriftPolicy = "Report"
	// DriftPolicyApply starts an apply run to repair the drift.
	DriftPolicyApply DriftPolicy = "Apply"
)

// HistoryLimits bounds the finished runs a workspace keeps.
type HistoryLimits struct {
	// succeeded is how many succeeded runs to keep (default 5, at most 100).
	// +optional
	Succeeded *int32 `json:"succeeded,omitempty"`
	// failed is how many runs that did not succeed (failed, canceled,
	// discarded) to keep (default 5, at most 100).
	// +optional
	Failed *int32 `json:"failed,omitempty"`
}

// TerraformWorkspaceStatus is the observed state of a workspace.
type TerraformWorkspaceStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready (the current spec is applied), Reconciling (a run is
	// under way), Drifted (the last drift check found changes), Stalled (the
	// last run failed and nothing will change until the spec does), and
	// Destroying (the workspace is being deleted).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// desiredHash is the hash of what the current spec makes terraform do.
	// +optional
	DesiredHash string `json:"desiredHash,omitempty"`
	// lastAppliedHash is the hash of the last successfully applied spec.
	// +optional
	LastAppliedHash string `json:"lastAppliedHash,omitempty"`
	// lastAppliedRevision is the source revision of the last successful
	// apply (a git commit, or the hash of an inline or ConfigMap source).
	// +optional
	LastAppliedRevision string `json:"lastAppliedRevision,omitempty"`
	// lastAppliedRun names the run of the last successful apply.
	// +optional
	LastAppliedRun string `json:"lastAppliedRun,omitempty"`
	// lastRun names the run the workspace created last.
	// +optional
	LastRun string `json:"lastRun,omitempty"`
	// currentRun names the run under way, if any.
	// +optional
	CurrentRun string `json:"currentRun,omitempty"`
	// lastDriftCheck is when the last drift check ended.
	// +optional
	LastDriftCheck *metav1.Time `json:"lastDriftCheck,omitempty"`
	// nextDriftCheck is when the next drift check is due.
	// +optional
	NextDriftCheck *metav1.Time `json:"nextDriftCheck,omitempty"`
	// rerunRequests counts the reruns asked for through the rerun
	// subresource; the controller starts one run for each increase.
	// +optional
	RerunRequests int64 `json:"rerunRequests,omitempty"`
	// observedRerunRequests is the rerunRequests the controller has acted on.
	// +optional
	ObservedRerunRequests int64 `json:"observedRerunRequests,omitempty"`
	// outputs are the non-sensitive outputs of the last successful apply,
	// as its run reported them.
	// +optional
	// +listType=atomic
	Outputs []OutputStatus `json:"outputs,omitempty"`
	// rerunRequestedBy is the user who asked for the last rerun; written only
	// by the rerun subresource. The rerun's run names them in
	// spec.requestedBy.
	// +optional
	RerunRequestedBy string `json:"rerunRequestedBy,omitempty"`
	// deletionRequestedBy is the user who deleted the workspace, recorded
	// when the delete starts its destroy; the Destroy run names them in
	// spec.requestedBy.
	// +optional
	DeletionRequestedBy string `json:"deletionRequestedBy,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformWorkspaceRerun is the body of a POST to the rerun subresource:
// it starts a new run now, whatever the hash says. The response is the run.
type TerraformWorkspaceRerun struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata; name, when set, must match the workspace.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// reason is an optional note recorded in the run's annotations and the
	// workspace's Event.
	// +optional
	Reason string `json:"reason,omitempty"`
}

// Conditions of a workspace.
const (
	// WorkspaceConditionReady is True when the current spec is applied.
	WorkspaceConditionReady = "Ready"
	// WorkspaceConditionReconciling is True while a run of the workspace is
	// under way.
	WorkspaceConditionReconciling = "Reconciling"
	// WorkspaceConditionDrifted is True when the last drift check found
	// changes.
	WorkspaceConditionDrifted = "Drifted"
	// WorkspaceConditionStalled is True when the last run for the current
	// spec failed: nothing more happens until the spec changes, a rerun, or
	// the next interval.
	WorkspaceConditionStalled = "Stalled"
	// WorkspaceConditionDestroying is True while a deleted workspace destroys
	// what it manages.
	WorkspaceConditionDestroying = "Destroying"
)

// Labels and annotations of the runs a workspace creates, and of workspaces.
const (
	// LabelWorkspace names the workspace that created a run.
	LabelWorkspace = "terrarun.dev/workspace"
	// AnnotationTrigger says why a workspace created a run (a Trigger).
	AnnotationTrigger = "terrarun.dev/trigger"
	// AnnotationConfigMapDigest is the digest of the ConfigMaps a run reads,
	// as they were when the workspace created it.
	AnnotationConfigMapDigest = "terrarun.dev/configmap-digest"
	// AnnotationRerunRequest is the status.rerunRequests that a rerun run
	// serves.
	AnnotationRerunRequest = "terrarun.dev/rerun-request"
	// AnnotationAbandonResources, "true" on a workspace being deleted with
	// destroyOnDelete, removes it without destroying what it manages.
	AnnotationAbandonResources = "terrarun.dev/abandon-resources"
	// AnnotationLabelsAtCreation holds a run's labels as it was created
	// (JSON), set by the server: a run task selects a run by them as well
	// as by its labels now, so that no label removed later takes a run out
	// of a task's checks.
	AnnotationLabelsAtCreation = "terrarun.dev/labels-at-creation"
)

// ServerKey says whether a label or annotation key is in terrarun's own
// domain (terrarun.dev/, or a subdomain of it): on a run, only the server
// sets, changes or removes such a key.
func ServerKey(key string) bool {
	domain, _, ok := strings.Cut(key, "/")
	return ok && (domain == GroupName || strings.HasSuffix(domain, "."+GroupName))
}

// Trigger says why a workspace created a run.
type Trigger string

// Triggers of a workspace's runs.
const (
	// TriggerSpecChange: the hash of the spec differs from the one applied.
	TriggerSpecChange Trigger = "SpecChange"
	// TriggerNewRevision: the spec is the one applied, and the git ref
	// resolved to another commit.
	TriggerNewRevision Trigger = "NewRevision"
	// TriggerUpstreamChanged: the spec is the one applied, and a workspace
	// of spec.dependsOn whose outputs it reads applied again since.
	TriggerUpstreamChanged Trigger = "UpstreamChanged"
	// TriggerRerun: the rerun subresource asked for a run.
	TriggerRerun Trigger = "Rerun"
	// TriggerDriftCheck: the interval has passed; a plan-only run.
	TriggerDriftCheck Trigger = "DriftCheck"
	// TriggerDriftRepair: a drift check found changes and driftPolicy is Apply.
	TriggerDriftRepair Trigger = "DriftRepair"
	// TriggerDestroy: the workspace is being deleted with destroyOnDelete.
	TriggerDestroy Trigger = "Destroy"
)
