// Package executor is the contract between the run controller
// (pkg/controller/terraformrun), which decides what runs when, and the three
// backends that start, observe and stop one stage execution: local (child
// processes of the server, the standalone default), job (one Kubernetes Job
// per stage) and tekton (one Tekton TaskRun per stage, the Job's pod in
// Tekton's form). Everything both sides must agree on is defined here once: the
// execution, its observed state and reasons, the stage's spec and timeout, and
// the executor identity that writes results back.
package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runrules"
	"github.com/terrarun/terrarun/pkg/stage"
)

// ErrInvalidReference is matched (errors.Is) by the errors of Start that
// starting again cannot fix: a Secret, ConfigMap or key the run references
// is missing, too large or unusable. The run fails with the error.
var ErrInvalidReference = errors.New("invalid reference")

// InvalidReference marks err, which names what is wrong, as an
// ErrInvalidReference.
func InvalidReference(err error) error { return invalidReference{err} }

type invalidReference struct{ error }

func (e invalidReference) Unwrap() error        { return e.error }
func (e invalidReference) Is(target error) bool { return target == ErrInvalidReference }

// Execution names one execution: one attempt of one stage of one run.
type Execution struct {
	// Run is the run, as last observed.
	Run *v1alpha1.TerraformRun
	// Stage is v1alpha1.StagePlan or v1alpha1.StageApply.
	Stage v1alpha1.StageName
	// Attempt counts executions of the stage, from 1.
	Attempt int32
	// PlanDigest is the approved plan's digest (apply stage).
	PlanDigest string
	// Inputs are the values, as JSON, of the variables read from other
	// runs' outputs (valueFrom.runOutput), by variable name. Set for Start
	// of a plan stage only; they are secrets, like every output.
	Inputs map[string][]byte
}

// State is where an execution is.
type State string

const (
	// StateRunning means the execution has started and not ended.
	StateRunning State = "Running"
	// StateSucceeded means it ended with exit code 0.
	StateSucceeded State = "Succeeded"
	// StateFailed means it ended otherwise; Status.Reason says how.
	StateFailed State = "Failed"
	// StateUnknown means the executor has no live record of it. Reason
	// ReasonNotStarted says it never started and may be started; any other
	// reason (ReasonExecutorLost) means it may have run and must never be
	// started again.
	StateUnknown State = "Unknown"
)

// Reasons of Status. Backends may also pass through a reason of the platform
// (a Job condition's or a container's, such as OOMKilled or
// ImagePullBackOff); the controller acts only on these.
const (
	// ReasonCompleted: the execution exited with code 0.
	ReasonCompleted = "Completed"
	// ReasonError: the execution exited with another code.
	ReasonError = "Error"
	// ReasonFailed: the execution failed and the platform gave no reason.
	ReasonFailed = "Failed"
	// ReasonCanceled: the execution ended after Stop.
	ReasonCanceled = "Canceled"
	// ReasonKilled: the execution did not end within the grace period of Stop
	// and was killed.
	ReasonKilled = "Killed"
	// ReasonDeadlineExceeded: the execution ran past its stage's timeout
	// (StageTimeout) and was stopped by the backend.
	ReasonDeadlineExceeded = "DeadlineExceeded"
	// ReasonSignaled: the execution was ended by a signal that the backend did
	// not send.
	ReasonSignaled = "Signaled"
	// ReasonExecutorLost: the execution was started, and its record outlived
	// it (its server or Job is gone); its outcome is unknown. With
	// StateUnknown.
	ReasonExecutorLost = "ExecutorLost"
	// ReasonForged: an object of the execution's name (a Job, a stage
	// Secret) exists that the executor did not build; whatever it ran, its
	// outcome is not the execution's and must not be trusted. With
	// StateUnknown; Message says which object and how it differs.
	ReasonForged = "Forged"
	// ReasonLimitExceeded: the execution went over a limit the backend
	// sets on it (memory, processes, bytes written) and failed or was
	// stopped; Message names the limit and its setting.
	ReasonLimitExceeded = "LimitExceeded"
	// ReasonNotStarted: nothing of the execution was ever started. With
	// StateUnknown; the only reason on which the controller starts it.
	ReasonNotStarted = "NotStarted"
)

// Status is the observed state of an execution.
type Status struct {
	State State
	// Name is the Job or process name.
	Name           string
	ExitCode       *int32
	Reason         string
	Message        string
	StartTime      *time.Time
	CompletionTime *time.Time
	// Recheck, when set on a running execution, is when its state may change
	// without the backend noticing (a Job whose node stopped reporting is
	// reported lost once it has been silent for long enough): the
	// controller looks again by then.
	Recheck time.Duration
}

// Startable says whether the execution may be started: only one that
// provably never started. Every other unknown execution may have run, and an
// apply must never run twice.
func (s Status) Startable() bool {
	return s.State == StateUnknown && s.Reason == ReasonNotStarted
}

// Notifier is called whenever an execution of the run changes state, so the
// controller can reconcile it without polling.
type Notifier func(namespace, name string)

// Executor starts, observes and stops stage executions.
type Executor interface {
	// Name is the deterministic name of an execution: a Job name, or a
	// process name. The controller records it in status.stages before Start.
	Name(ex Execution) string
	// Start starts the execution. It is idempotent: the execution's name is
	// deterministic (run, stage, attempt), and starting one that already
	// exists adopts it instead of starting a second one. It returns the name.
	Start(ctx context.Context, ex Execution) (string, error)
	// Status reports the execution's state.
	Status(ctx context.Context, ex Execution) (Status, error)
	// Stop stops a running execution gracefully: SIGINT to terraform, then a
	// kill after grace. Stopping an ended execution does nothing.
	Stop(ctx context.Context, ex Execution, grace time.Duration) error
	// Forget releases what the executor keeps for a deleted run.
	Forget(ctx context.Context, namespace, name string, uid string) error
	// Run calls notify whenever an execution changes state, until ctx ends.
	// It blocks; an error means the executor cannot observe its executions.
	Run(ctx context.Context, notify Notifier) error
	// Shutdown starts no more executions, and stops what this process runs
	// itself (the local backend's children: SIGINT, then a kill after the
	// grace period) and waits for them, or for ctx: applies in flight first
	// get opts.ApplyGrace to end on their own. Executions that live outside
	// the process (Jobs) go on.
	Shutdown(ctx context.Context, opts ShutdownOptions) error
}

// StageTimeout is how long a stage of run may take: spec.timeouts.plan or
// spec.timeouts.apply, which the registry strategy sets on every run, else the
// API's default. The controller and both backends enforce it.
func StageTimeout(run *v1alpha1.TerraformRun, name v1alpha1.StageName) time.Duration {
	d := run.Spec.Timeouts.Plan
	if name == v1alpha1.StageApply {
		d = run.Spec.Timeouts.Apply
	}
	if d == nil || d.Duration <= 0 {
		return terrarun.DefaultStageTimeout
	}
	return d.Duration
}

// ExecutionTimeout is how long an execution of run's stage may run in all:
// its StageTimeout, and for a plan stage that carries the apply, the apply's
// too. The controller still holds each stage to its own timeout.
func ExecutionTimeout(run *v1alpha1.TerraformRun, name v1alpha1.StageName) time.Duration {
	d := StageTimeout(run, name)
	if name == v1alpha1.StagePlan && runrules.CarriesApply(run) {
		d += StageTimeout(run, v1alpha1.StageApply)
	}
	return d
}

// PluginCacheKey names the provider plugin cache of run's creator, which
// run shares with that creator's runs in its namespace only, or "" when the
// run has no creator (and no cache). Both backends key their caches by it.
//
// Not shared with the namespace's other creators: terraform and tofu check a
// cached provider's checksum when init takes it, then execute it from the
// cache, which a stage can write (init installs into it). A run's local-exec
// could rewrite a provider there after another run's init checked it, and
// that provider would then run with the other run's variables and
// credentials. Within one creator's runs, it can only reach what the creator
// may use anyway.
func PluginCacheKey(run *v1alpha1.TerraformRun) string {
	if run.Spec.Creator == nil || run.Spec.Creator.Username == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(run.Spec.Creator.Username))
	return hex.EncodeToString(sum[:16])
}

// StageSpec returns the part of an execution's stage.Spec that comes from the
// run: identity, engine, operation, workspace and terraform flags, which the
// registry strategy has defaulted when the run was created. The backend fills in where the stage finds the server, its token,
// its work directory, source, variables and backend.
func StageSpec(ex Execution) stage.Spec {
	run := ex.Run
	spec := stage.Spec{
		Namespace:   run.Namespace,
		Name:        run.Name,
		UID:         string(run.UID),
		Stage:       ex.Stage,
		Attempt:     ex.Attempt,
		Binary:      string(run.Spec.Engine.Binary),
		Operation:   string(run.Spec.Operation),
		Workspace:   run.Spec.Workspace,
		Targets:     append([]string(nil), run.Spec.Targets...),
		Replace:     append([]string(nil), run.Spec.Replace...),
		Parallelism: run.Spec.Parallelism,
		Refresh:     run.Spec.Refresh,
		PlanDigest:  ex.PlanDigest,
	}
	spec.ApplyAfterPlan = ex.Stage == v1alpha1.StagePlan && runrules.CarriesApply(run)
	if ex.Stage == v1alpha1.StagePlan {
		spec.ForceUnlock = run.Spec.ForceUnlock
	}
	if p := run.Status.Plan; ex.Stage == v1alpha1.StageApply && p != nil && p.Parts != nil {
		parts := *p.Parts
		spec.PlanParts = &parts
	}
	return spec
}

// ShutdownOptions say how Executor.Shutdown stops what this process runs.
type ShutdownOptions struct {
	// Grace is how long a stopped execution gets between SIGINT and a kill.
	Grace time.Duration
	// Applying, when set, names the executions that apply a plan now (an
	// apply stage, or a plan execution that carries its apply). Shutdown
	// waits up to ApplyGrace for them to end on their own before it stops
	// them: an apply cut off leaves its resources tainted.
	Applying func() []string
	// ApplyGrace bounds that wait.
	ApplyGrace time.Duration
}

// Identity is the executor identity behind a write to a run's plan, logs or
// outputs: one attempt of one stage of one run.
type Identity struct {
	Namespace, Name, UID string
	Stage                v1alpha1.StageName
	Attempt              int32
}

// PinnedArtifact is the stage's source for run's Flux source
// (spec.source.sourceRef): the artifact the run controller pinned in
// status.source before the plan started, never what the source reports
// now.
func PinnedArtifact(run *v1alpha1.TerraformRun) (*stage.ArtifactSource, error) {
	ref := run.Spec.Source.SourceRef
	st := run.Status.Source
	if st == nil || st.Artifact == nil {
		return nil, fmt.Errorf("the run has no pinned artifact of %s %s in status.source", ref.Kind, ref.Name)
	}
	return &stage.ArtifactSource{
		URL: st.Artifact.URL, Digest: st.Artifact.Digest, Revision: st.Revision, Path: ref.Path,
		Source: fmt.Sprintf("%s %s/%s", ref.Kind, run.Namespace, ref.Name),
	}, nil
}
