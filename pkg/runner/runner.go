// Package runner runs one stage of a TerraformRun, as described by a
// stage.Spec, with github.com/hashicorp/terraform-exec, and writes the
// results back through a Client (the protocol of package stage).
//
// The plan stage prepares the configuration (a directory, or a git clone at
// a ref), runs init, selects the workspace, plans to a file, shows the plan
// as text and JSON, and uploads, in this order, the configuration tarball,
// the plan file, the text, the redacted JSON and last the Result. The apply
// stage downloads the planned configuration and the plan file, refuses a
// plan file whose digest is not the approved one, runs init, selects the
// workspace, applies the plan file and uploads the outputs.
//
// Everything terraform prints goes to the stage's log stream and to the
// stdout writer given to Run, with the values of Secret-sourced variables
// and git credentials replaced by "(redacted)". Errors returned by Run are
// redacted the same way.
//
// Cancelling Run's context interrupts terraform with SIGINT, so it can
// release state locks, and kills it only after the grace period.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/stage"
)

// DefaultGracePeriod is how long terraform has to stop after SIGINT before
// it is killed, unless WithGracePeriod says otherwise.
var DefaultGracePeriod = 20 * time.Second

// backendOverrideFile is the file the runner writes into the configuration
// to select the run's backend.
const backendOverrideFile = "zz_terrarun_backend_override.tf"

// sensitiveOverrideFile is the file the runner writes into the
// configuration to declare Secret-sourced variables sensitive.
const sensitiveOverrideFile = "zz_terrarun_sensitive_override.tf"

var (
	// ErrCanceled means the stage was stopped by cancelling Run's context.
	ErrCanceled = errors.New("stage canceled")
	// ErrDigestMismatch means the downloaded plan file is not the approved one.
	ErrDigestMismatch = errors.New("plan file digest does not match the approved plan")
	// ErrVerificationFailed means the signature of the run's OCI source did
	// not verify: nothing of it was unpacked.
	ErrVerificationFailed = errors.New("source verification failed")
)

// RunOption configures Run.
type RunOption func(*runConfig)

type runConfig struct {
	grace time.Duration
	// planDigest, when set, hears the digest of the stage's plan
	// (WithPlanDigest).
	planDigest func(string)
}

// logCloseTimeout is how long Run waits, at the end, for the server to
// acknowledge the log stream.
const logCloseTimeout = 30 * time.Second

// WithPlanDigest has Run call report with the digest of the stage's plan,
// the one an approval names (stage.PlanDigest of its parts): once the plan
// stage uploaded it, and once the apply stage found that the plan file it
// applies is the approved one.
func WithPlanDigest(report func(digest string)) RunOption {
	return func(c *runConfig) { c.planDigest = report }
}

// reportPlan tells WithPlanDigest's report, if any, the plan's digest.
func (r *runner) reportPlan(digest string) {
	if r.cfg.planDigest != nil {
		r.cfg.planDigest(digest)
	}
}

// WithGracePeriod sets how long terraform has to stop after SIGINT before it
// is killed.
func WithGracePeriod(d time.Duration) RunOption {
	return func(c *runConfig) {
		if d > 0 {
			c.grace = d
		}
	}
}

type runner struct {
	spec    stage.Spec
	client  Client
	cfg     runConfig
	secrets *secretSet
	out     *redactWriter
	vars    []resolvedVar

	stdout io.Writer
	engine string // "terraform" or "tofu", for messages
	// ociEnv is what ociModuleEnv adds to the engine's environment, once
	// its files are written.
	ociEnv map[string]string
	binary string
	// execPath is what terraform-exec runs: binary, or the shim that
	// answers its version from the record (recorded).
	execPath   string
	recorded   bool
	privateDir string
	configRoot string
	planPath   string

	// stateProxy serves the engine's http backend when the state is the
	// one terrarun serves (stage.ServedBackend).
	stateProxy *stateProxy

	// carry is set by a plan stage that goes on to apply (ApplyAfterPlan):
	// what it has not uploaded yet, and the engine it planned with.
	carry *carriedApply
}

// Run runs the stage spec describes and returns nil when it succeeded. Its
// errors never hold secret values; they match ErrCanceled when ctx was
// canceled, ErrForbidden when the server refused this executor, and
// ErrDigestMismatch when the plan file is not the approved one.
func Run(ctx context.Context, spec stage.Spec, client Client, stdout io.Writer, opts ...RunOption) error {
	cfg := runConfig{grace: DefaultGracePeriod}
	for _, o := range opts {
		o(&cfg)
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if client == nil {
		return errors.New("no client")
	}
	if err := validateSpec(spec); err != nil {
		return err
	}

	secrets := newSecretSet()
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The log stream outlives a cancellation: terraform's last words on
	// SIGINT must reach the server too.
	logCtx, cancelLog := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelLog()
	log := &stageLog{stop: cancel}
	log.open = func(stageName v1alpha1.StageName, attempt int32) *logSink {
		return newLogSink(logCtx, client, stageName, attempt, log.refused)
	}
	log.start(spec.Stage, spec.Attempt)

	r := &runner{
		spec:    spec,
		client:  client,
		cfg:     cfg,
		secrets: secrets,
		out:     newRedactWriter(secrets, io.MultiWriter(log, lenientWriter{stdout})),
		stdout:  stdout,
	}
	if rr, ok := client.(retryReporter); ok {
		rr.reportRetries(func(err error, wait time.Duration) {
			r.logf("terrarun: %v; trying again in %s", err, wait)
		})
	}
	// Nothing is written before every secret is known.
	vars, err := readVariables(spec.Variables)
	var backendValues []string
	if err == nil {
		backendValues, err = backendConfigSecrets(spec.Backend.ConfigFile)
	}
	if err == nil {
		r.vars = vars
		for _, v := range vars {
			if v.Secret {
				secrets.add(v.value)
				if v.HCL {
					secrets.add(hclStringLiterals(v.value)...)
				}
				if v.JSON {
					secrets.add(jsonStrings(v.value)...)
				}
			}
		}
		secrets.add(backendValues...)
		err = r.run(runCtx)
	}
	if err == nil && r.carry != nil {
		// This process goes on with the apply stage once the server
		// grants it.
		err = r.carryApply(ctx, runCtx, log)
	}
	if r.stateProxy != nil {
		r.stateProxy.close()
	}
	return r.end(ctx, runCtx, log, err)
}

// end writes the final line of the current stage's log, closes the log, and
// returns err as Run returns it.
func (r *runner) end(parent, runCtx context.Context, log *stageLog, err error) error {
	_ = r.out.Flush()
	err = r.classify(parent, runCtx, err)
	final := stage.EndLine(r.spec.Stage, r.spec.Attempt, err)
	if !log.streaming() {
		// The stage's log has ended already (a plan stage that failed to go
		// on to its apply): say it where the executor's output goes.
		fmt.Fprint(r.stdout, r.secrets.redactString(final))
	}
	if logErr := log.end([]byte(final), logCloseTimeout); logErr != nil {
		fmt.Fprintf(r.stdout, "terrarun: warning: %s\n", r.secrets.redactString(logErr.Error()))
		if err == nil && errors.Is(logErr, ErrForbidden) {
			err = r.classify(parent, parent, logErr)
		}
	}
	return err
}

// stageLog is the log stream of the stage the process runs now: the plan's,
// then the apply's when the plan stage carries the apply.
type stageLog struct {
	open func(v1alpha1.StageName, int32) *logSink
	// stop ends the execution when the server refuses the log of the stage
	// it runs (refused).
	stop func(error)
	mu   sync.Mutex
	sink *logSink
	// settled is set once the current stage's outcome is on its way to the
	// server (settle).
	settled bool
	// midLine is true when the stream's last byte was not a newline.
	midLine bool
}

func (l *stageLog) start(stageName v1alpha1.StageName, attempt int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sink = l.open(stageName, attempt)
	l.settled = false
	l.midLine = false
}

// settle says that the current stage's outcome is being uploaded: from now
// on the upload's answer decides whether the execution goes on, not its
// log's. A server refuses the log of a stage it has recorded as complete,
// as a new leader does when the stream reconnects after the plan that
// ends the stage reached it; that refusal must not stop the apply this
// process carries.
func (l *stageLog) settle() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.settled = true
}

// refused stops the execution when the server refused the log of the stage
// it runs now and that stage has not settled; the log of a stage that has
// ended or settled stops nothing.
func (l *stageLog) refused(s *logSink, err error) {
	l.mu.Lock()
	stop := l.sink == s && !l.settled
	l.mu.Unlock()
	if stop {
		l.stop(err)
	}
}

// streaming says whether a stage's stream is open.
func (l *stageLog) streaming() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sink != nil
}

// Write writes to the current stage's stream; after end, to none.
func (l *stageLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	sink := l.sink
	if len(p) > 0 {
		l.midLine = p[len(p)-1] != '\n'
	}
	l.mu.Unlock()
	if sink == nil {
		return len(p), nil
	}
	return sink.Write(p)
}

// end writes final to the current stream, on a line of its own, closes the
// stream and returns its error.
func (l *stageLog) end(final []byte, timeout time.Duration) error {
	l.mu.Lock()
	sink := l.sink
	l.sink = nil
	if l.midLine {
		final = append([]byte("\n"), final...)
	}
	l.mu.Unlock()
	if sink == nil {
		return nil
	}
	_, _ = sink.Write(final)
	return sink.Close(timeout)
}

// lenientWriter ignores the errors of w, so a closed stdout does not stop
// the log stream.
type lenientWriter struct{ w io.Writer }

func (l lenientWriter) Write(p []byte) (int, error) {
	_, _ = l.w.Write(p)
	return len(p), nil
}

func validateSpec(spec stage.Spec) error {
	switch spec.Stage {
	case v1alpha1.StagePlan, v1alpha1.StageApply:
	default:
		return fmt.Errorf("unknown stage %q", spec.Stage)
	}
	if spec.Attempt < 1 {
		return fmt.Errorf("invalid attempt %d", spec.Attempt)
	}
	if spec.WorkDir == "" || !filepath.IsAbs(spec.WorkDir) {
		return errors.New("the work directory must be an absolute path")
	}
	if spec.Backend.Type == "" || !identRE.MatchString(spec.Backend.Type) {
		return fmt.Errorf("invalid backend type %q", spec.Backend.Type)
	}
	if spec.Stage == v1alpha1.StagePlan {
		n := 0
		for _, set := range []bool{spec.Source.Dir != "", spec.Source.Git != nil, spec.Source.OCI != nil, spec.Source.Artifact != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			return errors.New("the source must name exactly one of a directory, a git repository, an OCI artifact and a Flux artifact")
		}
	}
	if spec.Stage == v1alpha1.StageApply && spec.PlanDigest == "" {
		return errors.New("the apply stage needs the approved plan's digest")
	}
	return nil
}

// redactedError is an error whose message has been redacted. It keeps
// nothing of the original error but the sentinels it matched.
type redactedError struct {
	msg   string
	marks []error
}

func (e *redactedError) Error() string { return e.msg }

func (e *redactedError) Is(target error) bool {
	for _, m := range e.marks {
		if m == target {
			return true
		}
	}
	return false
}

// classify turns the stage's error into the error Run returns: canceled,
// forbidden, or as is; always redacted.
func (r *runner) classify(parent, runCtx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var marks []error
	cause := context.Cause(runCtx)
	switch {
	case errors.Is(err, ErrForbidden) || errors.Is(cause, ErrForbidden):
		if !errors.Is(err, ErrForbidden) {
			err = fmt.Errorf("stopped: %w", cause)
		}
		marks = append(marks, ErrForbidden)
	case parent.Err() != nil:
		if errors.Is(parent.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w (deadline exceeded): %v", ErrCanceled, err)
		} else {
			err = fmt.Errorf("%w: %v", ErrCanceled, err)
		}
		marks = append(marks, ErrCanceled, parent.Err())
	}
	for _, m := range []error{ErrDigestMismatch, ErrVerificationFailed, ErrCanceled, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, m) {
			marks = append(marks, m)
		}
	}
	return &redactedError{msg: r.secrets.redactString(err.Error()), marks: marks}
}

// logf writes one line of the runner's own to the log (and stdout).
func (r *runner) logf(format string, args ...any) {
	_ = r.out.Flush()
	fmt.Fprintf(r.out, format+"\n", args...)
	_ = r.out.Flush()
}

func (r *runner) run(ctx context.Context) error {
	if r.spec.Backend.Type == stage.ServedBackend {
		p, err := startStateProxy(ctx, r.client, r.logf)
		if err != nil {
			return err
		}
		r.stateProxy = p
		r.secrets.add(p.password)
	}
	r.privateDir = filepath.Join(r.spec.WorkDir, ".terrarun")
	r.configRoot = filepath.Join(r.spec.WorkDir, "config")
	r.planPath = filepath.Join(r.privateDir, "plan.tfplan")
	if err := os.MkdirAll(r.privateDir, 0o700); err != nil {
		return fmt.Errorf("preparing the work directory: %w", err)
	}
	if err := os.Chmod(r.privateDir, 0o700); err != nil {
		return fmt.Errorf("preparing the work directory: %w", err)
	}
	bin := r.spec.Binary
	if bin == "" {
		bin = "terraform"
	}
	if !strings.ContainsRune(bin, filepath.Separator) {
		p, err := exec.LookPath(bin)
		if err != nil {
			return fmt.Errorf("engine %q not found on PATH", bin)
		}
		bin = p
	}
	r.binary = bin
	r.engine = "terraform"
	if strings.Contains(filepath.Base(bin), "tofu") {
		r.engine = "tofu"
	}
	r.execPath = bin
	if rec := r.engineRecord(); rec != nil {
		shim, err := r.writeEngineShim(rec)
		if err != nil {
			return err
		}
		if shim != "" {
			r.execPath, r.recorded = shim, true
		}
	}
	r.logf("terrarun: %s stage, attempt %d, of run %s/%s", r.spec.Stage, r.spec.Attempt, r.spec.Namespace, r.spec.Name)
	if r.spec.Stage == v1alpha1.StagePlan {
		return r.plan(ctx)
	}
	return r.apply(ctx)
}
