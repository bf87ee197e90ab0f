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
)

func (r *runner) apply(ctx context.Context) error {
	r.logf("terrarun: downloading the plan file")
	if err := r.downloadPlanFile(ctx); err != nil {
		return err
	}
	r.logf("terrarun: downloading the planned configuration")
	body, err := r.client.GetPlan(ctx, v1alpha1.PlanFormatSource)
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
	tf, err := r.initTerraform(ctx, tfDir)
	if err != nil {
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
	body, err := r.client.GetPlan(ctx, v1alpha1.PlanFormatFile)
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
