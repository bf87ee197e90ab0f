package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/terraform-exec/tfexec"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/stage"
)

func (r *runner) apply(ctx context.Context) error {
	parts := r.spec.PlanParts
	if parts == nil {
		return fmt.Errorf("refusing to apply: %w: the stage names no part digests of plan %s; plan again with a new run", ErrDigestMismatch, r.spec.PlanDigest)
	}
	if d := stage.PlanDigest(parts.File, parts.Source, parts.Text, parts.JSON); !strings.EqualFold(d, r.spec.PlanDigest) {
		return fmt.Errorf("refusing to apply: %w: the part digests make plan %s, the approved plan is %s", ErrDigestMismatch, d, r.spec.PlanDigest)
	}
	if err := r.downloadPlanFile(ctx, parts.File); err != nil {
		return err
	}
	archive := filepath.Join(filepath.Dir(r.planPath), "source.tar.gz")
	get := func(ctx context.Context) (io.ReadCloser, error) {
		return r.client.GetPlan(ctx, v1alpha1.PlanFormatSource)
	}
	if err := r.download(ctx, get, archive, "configuration", parts.Source); err != nil {
		return err
	}
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	subdir, err := untarConfig(f, r.configRoot)
	f.Close()
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
	if err := r.writeOverrides(tfDir); err != nil {
		return err
	}
	tf, err := r.initTerraform(ctx, tfDir)
	if err != nil {
		return err
	}
	return r.applyPlan(ctx, tf, tfDir)
}

// carriedApply is what a plan stage that goes on to apply keeps for it.
type carriedApply struct {
	// parts are the plan's, to upload; the last, its result, records the plan.
	parts []PlanPart
	// tf is the engine that made the plan, initialized in dir.
	tf  *tfexec.Terraform
	dir string
	// file is the plan file's digest, digest the plan's (WithPlanDigest),
	// and attempt the plan stage's.
	file, digest string
	attempt      int32
}

// carryApply uploads the plan, which records it and ends the plan stage,
// ends the plan stage's log, waits until the server grants this process the
// run's apply stage, and applies the plan it made, which the server must
// have approved: the approved plan file it serves must be this one. parent
// is Run's context, ctx the stage's.
func (r *runner) carryApply(parent, ctx context.Context, log *stageLog) error {
	c := r.carry
	// The wait for the grant goes out with the plan, not after its answer:
	// the server holds it until the controller grants the apply.
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	type grant struct {
		body io.ReadCloser
		err  error
	}
	granted := make(chan grant, 1)
	go func() {
		body, err := r.client.AwaitApply(waitCtx, c.file)
		granted <- grant{body, err}
	}()
	log.settle()
	if err := r.client.PutPlan(ctx, r.spec.Attempt, c.parts); err != nil {
		stopWaiting()
		if g := <-granted; g.body != nil {
			g.body.Close()
		}
		return err // in the plan stage's log, which is still open
	}
	c.parts = nil // the apply does not need them in memory
	r.reportPlan(c.digest)
	// The plan is recorded: its stage has succeeded, and its log ends while
	// the controller grants the apply. The controller closes a log that
	// cannot be ended (the stream refused once the stage is complete); the
	// grant decides whether this process goes on.
	_ = r.end(parent, ctx, log, nil)
	await := func(context.Context) (io.ReadCloser, error) {
		g := <-granted
		return g.body, g.err
	}
	if err := r.download(ctx, await, r.planPath, "plan file", c.file); err != nil {
		return err
	}
	r.spec.Stage, r.spec.Attempt = v1alpha1.StageApply, 1
	log.start(r.spec.Stage, r.spec.Attempt)
	r.logf("terrarun: apply stage, attempt 1, of run %s/%s, in the process of plan attempt %d, with its engine and working directory",
		r.spec.Namespace, r.spec.Name, c.attempt)
	r.logf("terrarun: plan file %s is the approved plan", c.file)
	return r.applyPlan(ctx, c.tf, c.dir)
}

// applyPlan applies the plan file with tf, initialized in tfDir, and
// uploads the outputs.
func (r *runner) applyPlan(ctx context.Context, tf *tfexec.Terraform, tfDir string) error {
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
	err := r.quietly(tf, io.Discard, func() (err error) {
		outputs, err = tf.Output(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s output: %w", r.engine, err)
	}
	if outputs == nil {
		outputs = map[string]tfexec.OutputMeta{}
	}
	// The engine marks what derives from a Secret-sourced variable it knows;
	// a value that still holds a secret is marked sensitive here too, so it
	// stays out of the run's status.
	for name, o := range outputs {
		if !o.Sensitive && r.secrets.redactString(string(o.Value)) != string(o.Value) {
			o.Sensitive = true
			outputs[name] = o
		}
	}
	b, err := json.Marshal(outputs)
	if err != nil {
		return err
	}
	return r.client.PutOutputs(ctx, r.spec.Attempt, bytes.NewReader(b))
}

// downloadPlanFile downloads the plan file and refuses it unless its digest
// is want, the approved plan's.
func (r *runner) downloadPlanFile(ctx context.Context, want string) error {
	get := func(ctx context.Context) (io.ReadCloser, error) {
		return r.client.GetPlan(ctx, v1alpha1.PlanFormatFile)
	}
	if err := r.download(ctx, get, r.planPath, "plan file", want); err != nil {
		return err
	}
	r.logf("terrarun: plan file %s matches the approved plan %s", want, r.spec.PlanDigest)
	r.reportPlan(r.spec.PlanDigest)
	return nil
}

// download writes the plan part that get downloads to path (0600), and
// removes it and fails unless its digest is want. When get returns no body
// (the server says the approved part is the one with digest want, which
// path holds), it checks that path still does.
func (r *runner) download(ctx context.Context, get func(context.Context) (io.ReadCloser, error), path, what, want string) error {
	body, err := get(ctx)
	if err != nil {
		return err
	}
	if body == nil {
		got, err := fileDigest(path)
		if err != nil {
			return fmt.Errorf("reading the %s: %w", what, err)
		}
		if !strings.EqualFold(got, want) {
			return fmt.Errorf("refusing to apply: %w: the %s is now %s, the approved plan's is %s", ErrDigestMismatch, what, got, want)
		}
		return nil
	}
	defer body.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("writing the %s: %w", what, err)
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, h), body); err != nil {
		f.Close()
		return fmt.Errorf("downloading the %s: %w", what, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the %s: %w", what, err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, want) {
		_ = os.Remove(path)
		return fmt.Errorf("refusing to apply: %w: the downloaded %s is %s, the approved plan's is %s", ErrDigestMismatch, what, got, want)
	}
	return nil
}

// fileDigest returns the digest of the file at path, as digestOf would of its
// content.
func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
