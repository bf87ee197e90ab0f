package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformRunTask is an external service that checks runs at given stages,
// as HCP Terraform's run tasks do: a scanner, a cost estimator, a ticketing
// system. terrarun POSTs it the payload HCP Terraform sends (payload version
// 1), signed with the HMAC key, with a short-lived token that reads the
// run's redacted plan JSON and answers through the run's taskresult
// subresource. Results go to the run's status.tasks; a Mandatory task that
// fails, errors or does not answer in time stops the run.
type TerraformRunTask struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// spec is where the task is and when it runs.
	Spec TerraformRunTaskSpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`
}

// TerraformRunTaskSpec is where a run task is and when it runs.
type TerraformRunTaskSpec struct {
	// url is where terrarun POSTs the task's payload: an https URL, whose
	// server terrarun verifies against caBundle (or the system's roots).
	URL string `json:"url" protobuf:"bytes,1,opt,name=url"`
	// hmacKey names the key of a Secret of the namespace whose value signs
	// each payload (HMAC-SHA512, hex, in the X-TFC-Task-Signature header).
	// Whoever writes the task must be allowed to get that Secret. Unsigned
	// when unset.
	// +optional
	HMACKey *KeySelector `json:"hmacKey,omitempty" protobuf:"bytes,2,opt,name=hmacKey"`
	// stages are when the task runs: PrePlan, PostPlan, PreApply, PostApply.
	// +listType=set
	Stages []RunTaskStage `json:"stages" protobuf:"bytes,3,rep,name=stages,casttype=RunTaskStage"`
	// enforcement is what a failure does: Mandatory (the default) stops the
	// run; Advisory records it.
	// +optional
	Enforcement RunTaskEnforcement `json:"enforcement,omitempty" protobuf:"bytes,4,opt,name=enforcement,casttype=RunTaskEnforcement"`
	// timeout is how long the task has to answer at each stage; 10m by
	// default, at most 1h. A Mandatory task that does not answer in time
	// stops the run.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty" protobuf:"bytes,5,opt,name=timeout"`
	// runSelector selects the runs of the namespace the task checks by
	// their labels; all when unset.
	// +optional
	RunSelector *metav1.LabelSelector `json:"runSelector,omitempty" protobuf:"bytes,6,opt,name=runSelector"`
	// caBundle is PEM-encoded CA certificates that verify the task's
	// server; the system's trusted roots when unset.
	// +optional
	CABundle []byte `json:"caBundle,omitempty" protobuf:"bytes,7,opt,name=caBundle"`
}

// RunTaskStage is when a run task runs.
// +enum
type RunTaskStage string

const (
	// RunTaskPrePlan runs before the plan stage starts.
	RunTaskPrePlan RunTaskStage = "PrePlan"
	// RunTaskPostPlan runs once the plan is recorded, before it can be
	// approved (or applied in approval mode Auto).
	RunTaskPostPlan RunTaskStage = "PostPlan"
	// RunTaskPreApply runs once the plan is approved, before the apply stage
	// starts.
	RunTaskPreApply RunTaskStage = "PreApply"
	// RunTaskPostApply runs once the apply has succeeded; the run ends when
	// the task has answered.
	RunTaskPostApply RunTaskStage = "PostApply"
)

// RunTaskEnforcement is what a failed run task does to a run.
// +enum
type RunTaskEnforcement string

const (
	// RunTaskMandatory stops the run when the task fails, errors or times out.
	RunTaskMandatory RunTaskEnforcement = "Mandatory"
	// RunTaskAdvisory records the failure; the run goes on.
	RunTaskAdvisory RunTaskEnforcement = "Advisory"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformRunTaskList is a list of TerraformRunTasks.
type TerraformRunTaskList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// items are the run tasks.
	Items []TerraformRunTask `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// RunTaskCallStatus is how a call of a run task stands.
// +enum
type RunTaskCallStatus string

const (
	// RunTaskRunning: called, no final answer yet.
	RunTaskRunning RunTaskCallStatus = "Running"
	// RunTaskPassed: the task answered passed.
	RunTaskPassed RunTaskCallStatus = "Passed"
	// RunTaskFailed: the task answered failed.
	RunTaskFailed RunTaskCallStatus = "Failed"
	// RunTaskErrored: the task could not be reached, refused the call, or
	// did not answer before its deadline.
	RunTaskErrored RunTaskCallStatus = "Errored"
)

// RunTaskCall is one call of a run task at one stage of a run, recorded by
// the server: the run controller when it calls, the taskresult subresource
// when the task answers.
type RunTaskCall struct {
	// task is the TerraformRunTask's name.
	Task string `json:"task" protobuf:"bytes,1,opt,name=task"`
	// stage is the stage it was called at.
	Stage RunTaskStage `json:"stage" protobuf:"bytes,2,opt,name=stage,casttype=RunTaskStage"`
	// enforcement is the task's enforcement when it was called.
	Enforcement RunTaskEnforcement `json:"enforcement" protobuf:"bytes,3,opt,name=enforcement,casttype=RunTaskEnforcement"`
	// status is Running, Passed, Failed or Errored.
	Status RunTaskCallStatus `json:"status" protobuf:"bytes,4,opt,name=status,casttype=RunTaskCallStatus"`
	// message is what the task said, or why the call errored.
	// +optional
	Message string `json:"message,omitempty" protobuf:"bytes,5,opt,name=message"`
	// url is the task's link to its details, as it answered.
	// +optional
	URL string `json:"url,omitempty" protobuf:"bytes,6,opt,name=url"`
	// startedAt is when the call was recorded.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty" protobuf:"bytes,7,opt,name=startedAt"`
	// deadline is when the call errors if the task has not answered.
	// +optional
	Deadline *metav1.Time `json:"deadline,omitempty" protobuf:"bytes,8,opt,name=deadline"`
	// completedAt is when the call got its final status.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty" protobuf:"bytes,9,opt,name=completedAt"`
	// tokenHash is the hex SHA-256 of the call's access token; the token
	// itself is sent only to the task.
	// +optional
	TokenHash string `json:"tokenHash,omitempty" protobuf:"bytes,10,opt,name=tokenHash"`
}

// The condition of run tasks, and its reasons.
const (
	// ConditionTasksChecked is True when the run tasks of the run's latest
	// stage with tasks have answered and no Mandatory one failed, False
	// while they have not (AwaitingTasks) or when one failed (TaskFailed).
	ConditionTasksChecked = "TasksChecked"
	// ReasonTasksPassed: no Mandatory task failed.
	ReasonTasksPassed = "TasksPassed"
	// ReasonTaskFailed: a Mandatory run task failed, errored or timed out.
	ReasonTaskFailed = "TaskFailed"
	// ReasonAwaitingTasks: the run waits for its run tasks' answers.
	ReasonAwaitingTasks = "AwaitingTasks"
)

// DefaultRunTaskTimeout is a run task's timeout when it sets none, and
// MaxRunTaskTimeout the longest it may set.
const (
	DefaultRunTaskTimeout = 10 * time.Minute
	MaxRunTaskTimeout     = time.Hour
)
