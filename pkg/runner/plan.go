package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/hashicorp/terraform-exec/tfexec"
	tfjson "github.com/hashicorp/terraform-json"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runner/planjson"
	"github.com/terrarun/terrarun/pkg/stage"
)

// sourceSubdir is the slash-separated directory p of a fetched source at
// root, checked to stay inside it; "" for the root.
func sourceSubdir(root, p string) (string, error) {
	if p == "" || path.Clean(filepath.ToSlash(p)) == "." {
		return "", nil
	}
	real, err := inside(root, p)
	if err != nil {
		return "", err
	}
	realRoot, _ := filepath.EvalSymlinks(root)
	rel, err := filepath.Rel(realRoot, real)
	if err != nil {
		return "", err
	}
	return filepath.ToSlash(rel), nil
}

func (r *runner) plan(ctx context.Context) error {
	src := r.spec.Source
	revision, subdir := "", ""
	switch {
	case src.Git != nil:
		commit, err := r.cloneGit(ctx, src.Git, r.configRoot)
		if err != nil {
			return err
		}
		revision = commit
		if subdir, err = sourceSubdir(r.configRoot, src.Git.Path); err != nil {
			return fmt.Errorf("git source: %w", err)
		}
	case src.OCI != nil:
		rev, err := r.pullOCI(ctx, src.OCI, r.configRoot)
		if err != nil {
			return err
		}
		revision = rev
		if subdir, err = sourceSubdir(r.configRoot, src.OCI.Path); err != nil {
			return fmt.Errorf("OCI source: %w", err)
		}
	case src.Artifact != nil:
		if err := r.pullArtifact(ctx, src.Artifact, r.configRoot); err != nil {
			return err
		}
		revision = src.Artifact.Revision
		var err error
		if subdir, err = sourceSubdir(r.configRoot, src.Artifact.Path); err != nil {
			return fmt.Errorf("the artifact of %s: %w", src.Artifact.Source, err)
		}
	default:
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

	if err := r.writeOverrides(tfDir); err != nil {
		return err
	}
	varFile, err := r.writeVarFile()
	if err != nil {
		return err
	}
	tf, err := r.initTerraform(ctx, tfDir)
	if err != nil {
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
	if id := r.spec.ForceUnlock; id != "" {
		if err := r.forceUnlock(ctx, tf, id, "the run's spec.forceUnlock names it"); err != nil {
			return err
		}
	}
	runPlan := func() error {
		return withGroupReaper(ctx, tfDir, func() error {
			return r.step("plan", func() error {
				_, err := tf.Plan(ctx, opts...)
				return err
			})
		})
	}
	err = runPlan()
	self := lockOwner()
	if lock, ok := heldLock(err, self); ok && lostPlanLock(lock, r.spec.LostPlanHosts) {
		// An earlier attempt of this plan took it and was lost: a plan
		// writes no state, so nothing is unsafe in taking its place.
		if err := r.forceUnlock(ctx, tf, lock.ID, "it was taken by "+lock.Who+", this run's lost plan attempt"); err != nil {
			return err
		}
		err = runPlan()
	}
	if lock, ok := heldLock(err, self); ok {
		if r.stateProxy != nil {
			r.nameServedLock(ctx, &lock)
		}
		if lock.Who == "" {
			if lock.ID == "" {
				return fmt.Errorf("%s plan: the state is locked, and the backend does not say by whom (see the stage's log). "+
					"If its holder is gone (a lost executor), release the lock with a new run that sets spec.forceUnlock to its ID", r.engine)
			}
			lock.Who, lock.Operation = "a holder the backend does not name", "an operation it does not name"
		}
		return fmt.Errorf("%s plan: the state is locked: lock ID %s, taken by %s for %s. "+
			"If its holder is gone (a lost executor), release the lock with a new run that sets spec.forceUnlock: %s",
			r.engine, lock.ID, lock.Who, lock.Operation, lock.ID)
	}
	if err != nil {
		return err
	}

	// The plan's text and its JSON are two reads of the plan file: the
	// engine makes them at once, on a handle of its own for the text.
	var text string
	textErr := make(chan error, 1)
	go func() {
		showTF, err := r.quietTerraform(tf.WorkingDir())
		if err == nil {
			text, err = showTF.ShowPlanFileRaw(ctx, r.planPath)
		}
		textErr <- err
	}()
	var rawJSON bytes.Buffer
	var plan *tfjson.Plan
	err = r.quietly(tf, &rawJSON, func() (err error) {
		plan, err = tf.ShowPlanFile(ctx, r.planPath)
		return err
	})
	if terr := <-textErr; terr != nil {
		return fmt.Errorf("%s show: %w", r.engine, terr)
	}
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

	parts := []PlanPart{
		{v1alpha1.PlanPartSource, tarball},
		{v1alpha1.PlanPartFile, planFile},
		{v1alpha1.PlanPartText, redactedText},
		{v1alpha1.PlanPartJSON, redactedJSON},
		{v1alpha1.PlanPartResult, resultJSON},
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	digest := stage.PlanDigest(digestOf(planFile), digestOf(tarball), digestOf(redactedText), digestOf(redactedJSON))
	if r.spec.ApplyAfterPlan && result.HasChanges {
		// Uploaded with the wait for the apply grant (carryApply).
		r.carry = &carriedApply{parts: parts, tf: tf, dir: tfDir, file: digestOf(planFile), digest: digest, attempt: r.spec.Attempt}
		return nil
	}
	if err := r.client.PutPlan(ctx, r.spec.Attempt, parts); err != nil {
		return err
	}
	r.reportPlan(digest)
	return nil
}
