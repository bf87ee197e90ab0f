// Command terrarun-executor runs one stage (plan or apply) of a TerraformRun.
//
//	terrarun-executor --stage-file FILE [--grace-period 20s] [--outcome-file FILE] [--plan-digest-file FILE]
//
// FILE holds the JSON stage.Spec (package
// github.com/terrarun/terrarun/pkg/stage) written by the local or
// the kubernetes executor. The executor runs terraform (or tofu) with
// github.com/hashicorp/terraform-exec, streams its output to the run's logs
// subresource and to stdout, and uploads the plan or the outputs to the run.
//
// SIGTERM and SIGINT cancel the stage: terraform receives SIGINT, so it can
// release state locks, and is killed only after the grace period. Every
// other signal is ignored (and logged on stderr): in a Job's pod the
// executor is PID 1, which the stage's processes, run as the same user, may
// signal.
//
// Started as `terrarun-executor sandbox-init CONFIG -- COMMAND...`, it is the
// init of a stage's sandbox instead (package sandbox).
//
// The last line on stdout is
//
//	terrarun: stage <stage> attempt <n> succeeded|failed: <message>
//
// and the exit code is 0 on success, 1 on failure, 87 when the signature
// of the run's OCI source did not verify, and 130 when the stage was
// canceled. Neither the token, nor secret values, nor credentials are ever
// printed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/terrarun/terrarun/pkg/runner"
	"github.com/terrarun/terrarun/pkg/sandbox"
	"github.com/terrarun/terrarun/pkg/stage"
)

const (
	exitOK       = 0
	exitFailed   = 1
	exitCanceled = 130
)

func main() {
	if sandbox.IsShimCall(os.Args[1:]) {
		// The local executor starts stages through this binary's sandbox init.
		sandbox.Init(os.Args[1:])
	}
	if err := undumpable(); err != nil {
		fmt.Fprintf(os.Stderr, "terrarun-executor: %v\n", err)
		os.Exit(exitFailed)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("terrarun-executor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stageFile := fs.String("stage-file", "", "path of the JSON stage spec (required)")
	grace := fs.Duration("grace-period", runner.DefaultGracePeriod, "how long terraform has to stop after SIGINT before it is killed")
	fs.StringVar(&outcomeFile, "outcome-file", "", "also write how the stage ended (at most 1 KiB) to this file, as a Tekton step's result")
	planDigestFile := fs.String("plan-digest-file", "", "once the stage succeeded, write the digest of its plan, the one an approval names, to this file, as a Tekton step's result")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *stageFile == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: terrarun-executor --stage-file FILE [--grace-period 20s] [--outcome-file FILE] [--plan-digest-file FILE]")
		return 2
	}
	if *grace <= 0 {
		fmt.Fprintln(stderr, "terrarun-executor: --grace-period must be positive")
		return 2
	}

	spec, raw, err := readSpec(*stageFile)
	if err != nil {
		fmt.Fprintf(stdout, "terrarun: stage ? attempt ? failed: %v\n", err)
		terminationMessage(err.Error())
		return exitFailed
	}
	// Before anything of the stage is used: is it what terrarun wrote?
	if err := stage.VerifyBinding(os.Getenv(stage.BindingEnv), raw, spec); err != nil {
		fmt.Fprint(stdout, stage.EndLine(spec.Stage, spec.Attempt, err))
		terminationMessage(err.Error())
		return stage.ExitForged
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	defer ignoreOtherSignals(stderr)()

	var planDigest string
	err = runStage(ctx, spec, stdout, *grace, func(d string) { planDigest = d })
	fmt.Fprint(stdout, stage.EndLine(spec.Stage, spec.Attempt, err))
	// The termination message is always the executor's own, on success
	// too: the run's code may have written the file (a secret, say), and the
	// kubelet copies it into the pod's status.
	switch {
	case err == nil:
		terminationMessage(fmt.Sprintf("stage %s attempt %d succeeded", spec.Stage, spec.Attempt))
		if *planDigestFile != "" && planDigest != "" {
			writeMessage(*planDigestFile, os.O_CREATE, planDigest, maxOutcome)
		}
		return exitOK
	case errors.Is(err, runner.ErrCanceled):
		terminationMessage(err.Error())
		return exitCanceled
	case errors.Is(err, runner.ErrVerificationFailed):
		terminationMessage(err.Error())
		return stage.ExitVerificationFailed
	default:
		terminationMessage(err.Error())
		return exitFailed
	}
}

// terminationLog is where the kubelet reads a container's termination
// message from (the Job executor's pods set TerminationMessageReadFile).
var terminationLog = "/dev/termination-log"

// maxTerminationMessage is the most the kubelet keeps of it.
const maxTerminationMessage = 4096

// outcomeFile, when set (--outcome-file), also receives the termination
// message, at most maxOutcome bytes: a Tekton step's result, which
// Tekton keeps, with the step's other fields, in its 4 KiB termination
// message.
var outcomeFile string

const maxOutcome = 1024

// getpid and killOthers are os.Getpid and killNamespace; tests replace them.
var (
	getpid     = os.Getpid
	killOthers = killNamespace
)

// terminationMessage leaves how the stage ended where the kubelet reads it,
// so that the run's status says why a stage failed and not only the exit
// code. It writes only where the kubelet has mounted the file: never
// elsewhere (a local stage has none). The runner's errors are already
// redacted.
//
// As PID 1 (a Job's pod), it first kills every other process of the
// container, so that none that the stage left behind writes the file after
// it.
func terminationMessage(msg string) {
	if getpid() == 1 {
		killOthers()
	}
	writeMessage(terminationLog, 0, msg, maxTerminationMessage)
	if outcomeFile != "" {
		writeMessage(outcomeFile, os.O_CREATE, msg, maxOutcome)
	}
}

// writeMessage writes msg, cut to limit bytes, to the file path, opened
// with flag besides write and truncate.
func writeMessage(path string, flag int, msg string, limit int) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC|flag, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	if len(msg) > limit {
		msg = msg[:limit-3] + "..."
	}
	_, _ = f.WriteString(msg)
}

// reapTimeout bounds how long killNamespace waits for the processes it
// killed to be gone.
const reapTimeout = 2 * time.Second

// killNamespace kills, as PID 1 of a PID namespace, every other process of
// the namespace (kill(-1) reaches all of them but the caller), and reaps
// them, processes reparented to it as their parents die included, until none
// is left or reapTimeout has passed: a killed process may still be in a
// system call that writes.
func killNamespace() {
	deadline := time.Now().Add(reapTimeout)
	for time.Now().Before(deadline) {
		// ESRCH: no other process is left, not even one to reap.
		if err := syscall.Kill(-1, syscall.SIGKILL); errors.Is(err, syscall.ESRCH) {
			return
		}
		for {
			if pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ignoreOtherSignals makes the executor receive every signal, so that none
// ends it through Go's default action (SIGQUIT's stack dump, SIGHUP's exit,
// ...) before it writes its termination message, and returns the function
// that restores the default actions. It ignores every signal but SIGTERM and
// SIGINT, which cancel the stage, and logs each one's name on stderr, but
// for SIGCHLD and SIGURG, which children and the Go runtime send routinely.
func ignoreOtherSignals(stderr io.Writer) (restore func()) {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for s := range sigs {
			switch s {
			case syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD, syscall.SIGURG:
			default:
				fmt.Fprintf(stderr, "terrarun-executor: ignored signal %v\n", s)
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(sigs)
		<-done
	}
}

// runStage runs the stage; planDigest hears the digest of its plan
// (runner.WithPlanDigest).
func runStage(ctx context.Context, spec stage.Spec, stdout io.Writer, grace time.Duration, planDigest func(string)) error {
	client, err := runner.NewHTTPClient(spec)
	if err != nil {
		return err
	}
	return runner.Run(ctx, spec, client, stdout, runner.WithGracePeriod(grace), runner.WithPlanDigest(planDigest))
}

// readSpec reads the stage file, and returns it decoded and as it was read.
func readSpec(file string) (stage.Spec, []byte, error) {
	var spec stage.Spec
	b, err := os.ReadFile(file)
	if err != nil {
		return spec, nil, fmt.Errorf("reading the stage file: %w", err)
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return spec, nil, fmt.Errorf("decoding the stage file: %w", err)
	}
	return spec, b, nil
}
