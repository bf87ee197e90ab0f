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
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"
	tfjson "github.com/hashicorp/terraform-json"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runner/planjson"
	"github.com/terrarun/terrarun/pkg/stage"
)

// DefaultGracePeriod is how long terraform has to stop after SIGINT before
// it is killed, unless WithGracePeriod says otherwise.
var DefaultGracePeriod = 20 * time.Second

// BackendOverrideFile is the file the runner writes into the configuration
// to select the run's backend.
const BackendOverrideFile = "zz_terrarun_backend_override.tf"

var (
	// ErrCanceled means the stage was stopped by cancelling Run's context.
	ErrCanceled = errors.New("stage canceled")
	// ErrDigestMismatch means the downloaded plan file is not the approved one.
	ErrDigestMismatch = errors.New("plan file digest does not match the approved plan")
)

// RunOption configures Run.
type RunOption func(*runConfig)

type runConfig struct {
	grace time.Duration
}

// logCloseTimeout is how long Run waits, at the end, for the server to
// acknowledge the log stream.
const logCloseTimeout = 30 * time.Second

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

	engine     string // "terraform" or "tofu", for messages
	binary     string
	privateDir string
	configRoot string
	planPath   string
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
	sink := newLogSink(logCtx, client, spec.Stage, spec.Attempt, func(err error) { cancel(err) })

	r := &runner{
		spec:    spec,
		client:  client,
		cfg:     cfg,
		secrets: secrets,
		out:     newRedactWriter(secrets, io.MultiWriter(sink, lenientWriter{stdout})),
	}
	// Nothing is written before every secret is known.
	vars, err := readVariables(spec.Variables)
	if err == nil {
		r.vars = vars
		for _, v := range vars {
			if v.Secret {
				secrets.add(v.value)
				if v.HCL {
					secrets.add(hclStringLiterals(v.value)...)
				}
			}
		}
		err = r.run(runCtx)
	}
	_ = r.out.Flush()
	err = r.classify(ctx, runCtx, err)

	final := fmt.Sprintf("terrarun: stage %s attempt %d succeeded\n", spec.Stage, spec.Attempt)
	if err != nil {
		final = fmt.Sprintf("terrarun: stage %s attempt %d failed: %s\n", spec.Stage, spec.Attempt, err.Error())
	}
	_, _ = sink.Write([]byte(final))
	if logErr := sink.Close(logCloseTimeout); logErr != nil {
		fmt.Fprintf(stdout, "terrarun: warning: %s\n", secrets.redactString(logErr.Error()))
		if err == nil && errors.Is(logErr, ErrForbidden) {
			err = r.classify(ctx, ctx, logErr)
		}
	}
	return err
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
		if (spec.Source.Dir == "") == (spec.Source.Git == nil) {
			return errors.New("the source must name exactly one of a directory and a git repository")
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
	for _, m := range []error{ErrDigestMismatch, ErrCanceled, context.Canceled, context.DeadlineExceeded} {
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
	r.logf("terrarun: %s stage, attempt %d, of run %s/%s", r.spec.Stage, r.spec.Attempt, r.spec.Namespace, r.spec.Name)
	if r.spec.Stage == v1alpha1.StagePlan {
		return r.plan(ctx)
	}
	return r.apply(ctx)
}

// newTerraform returns a tfexec handle for dir whose output goes to the
// redacted log.
func (r *runner) newTerraform(ctx context.Context, dir string) (*tfexec.Terraform, error) {
	tf, err := tfexec.NewTerraform(dir, r.binary)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for _, k := range []string{"GIT_ASKPASS", "GIT_SSH_COMMAND", "TF_WORKSPACE"} {
		delete(env, k)
	}
	env = tfexec.CleanEnv(env)
	env["CHECKPOINT_DISABLE"] = "1"
	if err := tf.SetEnv(env); err != nil {
		return nil, err
	}
	if err := tf.SetWaitDelay(r.cfg.grace); err != nil {
		return nil, err
	}
	tf.SetStdout(io.Discard)
	tf.SetStderr(r.out)
	// Learn the version now, quietly: tfexec asks for it before some
	// commands and would print its JSON.
	v, _, err := tf.Version(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("%s version: %w", r.engine, err)
	}
	tf.SetStdout(r.out)
	r.logf("terrarun: %s %s", r.engine, v.String())
	return tf, nil
}

// step runs one terraform command, announced in the log.
func (r *runner) step(name string, fn func() error) error {
	r.logf("terrarun: running %s %s", r.engine, name)
	err := fn()
	_ = r.out.Flush()
	if err != nil {
		return fmt.Errorf("%s %s: %w", r.engine, name, err)
	}
	return nil
}

// quietly runs fn with terraform's stdout captured into w instead of the log.
func (r *runner) quietly(tf *tfexec.Terraform, w io.Writer, fn func() error) error {
	tf.SetStdout(w)
	defer tf.SetStdout(r.out)
	return fn()
}

// withGroupReaper runs fn, which runs terraform in dir, and if ctx is
// canceled while it runs, kills the process groups terraform left behind
// (provisioners' children) once fn returns.
func withGroupReaper(ctx context.Context, dir string, fn func() error) error {
	stop := watchChildGroups(ctx, dir)
	err := fn()
	stop()
	return err
}

func (r *runner) writeBackendOverride(dir string) error {
	content := fmt.Sprintf("# Written by terrarun: the run's backend.\nterraform {\n  backend %q {}\n}\n", r.spec.Backend.Type)
	if err := os.WriteFile(filepath.Join(dir, BackendOverrideFile), []byte(content), 0o600); err != nil {
		return fmt.Errorf("writing the backend override: %w", err)
	}
	return nil
}

// writeVarFile writes the variables to a private .tfvars file and returns
// its path, or "" when there are none.
func (r *runner) writeVarFile() (string, error) {
	if len(r.vars) == 0 {
		return "", nil
	}
	p := filepath.Join(r.privateDir, "terrarun.tfvars")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", fmt.Errorf("writing the variables file: %w", err)
	}
	if _, err := f.Write(tfvars(r.vars)); err != nil {
		f.Close()
		return "", fmt.Errorf("writing the variables file: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("writing the variables file: %w", err)
	}
	return p, nil
}

func (r *runner) initAndWorkspace(ctx context.Context, tf *tfexec.Terraform) error {
	var opts []tfexec.InitOption
	keys := make([]string, 0, len(r.spec.Backend.Config))
	for k := range r.spec.Backend.Config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		opts = append(opts, tfexec.BackendConfig(k+"="+r.spec.Backend.Config[k]))
	}
	if r.spec.Backend.ConfigFile != "" {
		opts = append(opts, tfexec.BackendConfig(r.spec.Backend.ConfigFile))
	}
	if err := r.step("init", func() error { return tf.Init(ctx, opts...) }); err != nil {
		return err
	}
	ws := r.spec.Workspace
	if ws == "" || ws == "default" {
		return nil
	}
	var list []string
	err := r.quietly(tf, io.Discard, func() (err error) {
		list, _, err = tf.WorkspaceList(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s workspace list: %w", r.engine, err)
	}
	for _, w := range list {
		if w == ws {
			return r.step("workspace select", func() error { return tf.WorkspaceSelect(ctx, ws) })
		}
	}
	return r.step("workspace new", func() error { return tf.WorkspaceNew(ctx, ws) })
}

func (r *runner) secretVariableNames() []string {
	var names []string
	for _, v := range r.vars {
		if v.Secret {
			names = append(names, v.Name)
		}
	}
	return names
}

func (r *runner) plan(ctx context.Context) error {
	src := r.spec.Source
	revision, subdir := "", ""
	if src.Git != nil {
		commit, err := r.cloneGit(ctx, src.Git, r.configRoot)
		if err != nil {
			return err
		}
		revision = commit
		if src.Git.Path != "" && path.Clean(filepath.ToSlash(src.Git.Path)) != "." {
			real, err := inside(r.configRoot, src.Git.Path)
			if err != nil {
				return fmt.Errorf("git source: %w", err)
			}
			realRoot, _ := filepath.EvalSymlinks(r.configRoot)
			rel, err := filepath.Rel(realRoot, real)
			if err != nil {
				return fmt.Errorf("git source: %w", err)
			}
			subdir = filepath.ToSlash(rel)
		}
	} else {
		if err := copyDir(src.Dir, r.configRoot); err != nil {
			return fmt.Errorf("copying the configuration: %w", err)
		}
	}
	tfDir := filepath.Join(r.configRoot, filepath.FromSlash(subdir))

	tarball, err := tarConfig(r.configRoot, subdir)
	if err != nil {
		return fmt.Errorf("archiving the configuration: %w", err)
	}
	if revision == "" {
		revision = digestOf(tarball)
	}
	r.logf("terrarun: configuration revision %s", revision)

	if err := r.writeBackendOverride(tfDir); err != nil {
		return err
	}
	varFile, err := r.writeVarFile()
	if err != nil {
		return err
	}
	tf, err := r.newTerraform(ctx, tfDir)
	if err != nil {
		return err
	}
	if err := withGroupReaper(ctx, tfDir, func() error { return r.initAndWorkspace(ctx, tf) }); err != nil {
		return err
	}

	opts := []tfexec.PlanOption{tfexec.Out(r.planPath)}
	if varFile != "" {
		opts = append(opts, tfexec.VarFile(varFile))
	}
	if r.spec.Operation == "Destroy" {
		opts = append(opts, tfexec.Destroy(true))
	}
	for _, t := range r.spec.Targets {
		opts = append(opts, tfexec.Target(t))
	}
	for _, a := range r.spec.Replace {
		opts = append(opts, tfexec.Replace(a))
	}
	if r.spec.Parallelism != nil {
		opts = append(opts, tfexec.Parallelism(int(*r.spec.Parallelism)))
	}
	if r.spec.Refresh != nil {
		opts = append(opts, tfexec.Refresh(*r.spec.Refresh))
	}
	if err := withGroupReaper(ctx, tfDir, func() error {
		return r.step("plan", func() error {
			_, err := tf.Plan(ctx, opts...)
			return err
		})
	}); err != nil {
		return err
	}

	var text string
	err = r.quietly(tf, io.Discard, func() (err error) {
		text, err = tf.ShowPlanFileRaw(ctx, r.planPath)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s show: %w", r.engine, err)
	}
	var rawJSON bytes.Buffer
	var plan *tfjson.Plan
	err = r.quietly(tf, &rawJSON, func() (err error) {
		plan, err = tf.ShowPlanFile(ctx, r.planPath)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s show -json: %w", r.engine, err)
	}
	secretVars := r.secretVariableNames()
	r.secrets.add(planjson.VariableStrings(plan, secretVars)...)
	redactedJSON, err := planjson.Redact(rawJSON.Bytes(), planjson.Options{
		Secrets:         r.secrets.list(),
		SecretVariables: secretVars,
	})
	if err != nil {
		return err
	}
	redactedText := r.secrets.redactBytes([]byte(text))

	planFile, err := os.ReadFile(r.planPath)
	if err != nil {
		return fmt.Errorf("reading the plan file: %w", err)
	}
	result := planjson.Summarize(plan)
	result.SourceRevision = revision
	resultJSON, err := json.Marshal(result)
	if err != nil {
		return err
	}
	r.logf("terrarun: plan %s: %d to add, %d to change, %d to destroy, %d to import", digestOf(planFile), result.Add, result.Change, result.Destroy, result.Import)

	for _, part := range []struct {
		name string
		body []byte
	}{
		{stage.PartSource, tarball},
		{stage.PartFile, planFile},
		{stage.PartText, redactedText},
		{stage.PartJSON, redactedJSON},
		{stage.PartResult, resultJSON},
	} {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.logf("terrarun: uploading plan %s", part.name)
		if err := r.client.PutPlanPart(ctx, r.spec.Attempt, part.name, bytes.NewReader(part.body)); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) apply(ctx context.Context) error {
	r.logf("terrarun: downloading the plan file")
	if err := r.downloadPlanFile(ctx); err != nil {
		return err
	}
	r.logf("terrarun: downloading the planned configuration")
	body, err := r.client.GetPlan(ctx, stage.PartSource)
	if err != nil {
		return err
	}
	subdir, err := untarConfig(body, r.configRoot)
	body.Close()
	if err != nil {
		return err
	}
	tfDir := r.configRoot
	if subdir != "" && subdir != "." {
		if tfDir, err = inside(r.configRoot, filepath.FromSlash(subdir)); err != nil {
			return fmt.Errorf("planned configuration: %w", err)
		}
	}
	// The plan records the providers it was made with; init must install
	// the same ones.
	if lock := lockFileFromPlan(r.planPath); lock != nil {
		if err := os.WriteFile(filepath.Join(tfDir, ".terraform.lock.hcl"), lock, 0o600); err != nil {
			return fmt.Errorf("writing the dependency lock file: %w", err)
		}
	}
	if err := r.writeBackendOverride(tfDir); err != nil {
		return err
	}
	tf, err := r.newTerraform(ctx, tfDir)
	if err != nil {
		return err
	}
	if err := withGroupReaper(ctx, tfDir, func() error { return r.initAndWorkspace(ctx, tf) }); err != nil {
		return err
	}
	// A saved plan carries its variables: apply takes none.
	opts := []tfexec.ApplyOption{tfexec.DirOrPlan(r.planPath)}
	if r.spec.Parallelism != nil {
		opts = append(opts, tfexec.Parallelism(int(*r.spec.Parallelism)))
	}
	if err := withGroupReaper(ctx, tfDir, func() error {
		return r.step("apply", func() error { return tf.Apply(ctx, opts...) })
	}); err != nil {
		return err
	}

	var outputs map[string]tfexec.OutputMeta
	err = r.quietly(tf, io.Discard, func() (err error) {
		outputs, err = tf.Output(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s output: %w", r.engine, err)
	}
	if outputs == nil {
		outputs = map[string]tfexec.OutputMeta{}
	}
	b, err := json.Marshal(outputs)
	if err != nil {
		return err
	}
	r.logf("terrarun: uploading %d outputs", len(outputs))
	return r.client.PutOutputs(ctx, r.spec.Attempt, bytes.NewReader(b))
}

// downloadPlanFile downloads the plan file and refuses it unless its digest
// is the approved one.
func (r *runner) downloadPlanFile(ctx context.Context) error {
	body, err := r.client.GetPlan(ctx, stage.PartFile)
	if err != nil {
		return err
	}
	defer body.Close()
	f, err := os.OpenFile(r.planPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("writing the plan file: %w", err)
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, h), body); err != nil {
		f.Close()
		return fmt.Errorf("downloading the plan file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the plan file: %w", err)
	}
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if !strings.EqualFold(got, r.spec.PlanDigest) {
		_ = os.Remove(r.planPath)
		return fmt.Errorf("refusing to apply: %w: the downloaded plan file is %s, the approved plan is %s", ErrDigestMismatch, got, r.spec.PlanDigest)
	}
	r.logf("terrarun: plan file %s matches the approved plan", got)
	return nil
}
