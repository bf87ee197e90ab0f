// Package executor runs the stages of TerraformRuns. The run controller
// (package controller/terraformrun) decides what runs when; an Executor starts, observes and
// stops one stage execution. Two executors implement the interface: local
// (child processes of the server, the standalone default) and kubernetes (one
// Job per stage).
package executor

import (
	"context"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// Execution names one execution: one attempt of one stage of one run.
type Execution struct {
	// Run is the run, as last observed.
	Run *v1alpha1.TerraformRun
	// Stage is stage.Plan or stage.Apply.
	Stage string
	// Attempt counts executions of the stage, from 1.
	Attempt int32
	// PlanDigest is the approved plan's digest (apply stage).
	PlanDigest string
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
	// StateUnknown means the executor has no record of it: it never started,
	// or it was lost (for example with the server that ran it).
	StateUnknown State = "Unknown"
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
}

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
}

// Notifier is called whenever an execution of the run changes state, so the
// controller can reconcile it without polling.
type Notifier func(namespace, name string)

// Identity is the executor identity behind a write to a run's plan, logs or
// outputs.
type Identity struct {
	Namespace, Name, UID string
	Stage                string
	Attempt              int32
}

// IdentityResolver maps an authenticated request user to the executor
// identity it holds, if any. The server accepts plan, log and output writes
// only from the identity of the run's current stage attempt.
type IdentityResolver interface {
	// ExecutorIdentity returns the identity of u, and false when u is not an
	// executor.
	ExecutorIdentity(ctx context.Context, u user.Info) (Identity, bool, error)
}
