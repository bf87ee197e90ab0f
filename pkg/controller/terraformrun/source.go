package terraformrun

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/fluxsource"
)

// Sources reads the Flux sources that runs name (fluxsource.Reader).
type Sources interface {
	// Get reads a source now and returns its artifact; one that has none
	// to use yet is a *fluxsource.NotReadyError.
	Get(ctx context.Context, namespace, kind, name string) (fluxsource.Artifact, error)
}

// sourceRecheck is how often a run waiting for its Flux source reads it
// again.
const sourceRecheck = 5 * time.Second

// pinSource pins the artifact of run's Flux source (spec.source.sourceRef)
// in run's status, unless it has one already: the plan stage downloads
// exactly that artifact, and a retried plan the same one. The write that
// follows (the stage's record, or the run's place in the queue) records
// it. ok is false while the run waits for its source, or when it failed;
// then wait and err are what sync returns.
func (c *Controller) pinSource(ctx context.Context, run *v1alpha1.TerraformRun) (wait time.Duration, ok bool, err error) {
	ref := run.Spec.Source.SourceRef
	if ref == nil || run.Status.Source != nil && run.Status.Source.Artifact != nil {
		return 0, true, nil
	}
	source := fmt.Sprintf("%s %s/%s", ref.Kind, run.Namespace, ref.Name)
	if c.opts.Sources == nil {
		msg := fmt.Sprintf("spec.source.sourceRef names %s, but this server reads no Flux sources (standalone mode): use an inline, configMap, git or oci source.", source)
		return 0, false, c.endBeforePlan(ctx, run, v1alpha1.RunPhaseFailed, v1alpha1.ReasonStartFailed, msg)
	}
	art, err := c.opts.Sources.Get(ctx, run.Namespace, ref.Kind, ref.Name)
	var notReady *fluxsource.NotReadyError
	switch {
	case errors.As(err, &notReady):
		msg := fmt.Sprintf("Waiting for the source: %s.", notReady.Message)
		if run.Status.Phase == v1alpha1.RunPhasePending && run.Status.Message == msg {
			return sourceRecheck, false, nil
		}
		cond := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionPlanned)
		entering := cond == nil || cond.Reason != v1alpha1.ReasonSourceNotReady
		c.setCondition(run, v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonSourceNotReady, msg)
		run.Status.Phase = v1alpha1.RunPhasePending
		run.Status.Message = msg
		run.Status.ObservedGeneration = run.Generation
		updated, err := c.client.TerrarunV1alpha1().TerraformRuns(run.Namespace).UpdateStatus(ctx, run, metav1.UpdateOptions{})
		if err != nil {
			return 0, false, err
		}
		if entering {
			c.opts.Recorder.Event(updated, "Normal", v1alpha1.ReasonSourceNotReady, msg)
		}
		return sourceRecheck, false, nil
	case errors.Is(err, fluxsource.ErrUntrusted):
		return 0, false, c.endBeforePlan(ctx, run, v1alpha1.RunPhaseFailed, v1alpha1.ReasonVerificationFailed, fmt.Sprintf("%v. Nothing was downloaded.", err))
	case err != nil:
		// Retried with the queue's backoff (a forbidden read says what
		// to grant).
		return 0, false, err
	}
	run.Status.Source = &v1alpha1.SourceStatus{Revision: art.Revision, Artifact: &v1alpha1.SourceArtifact{URL: art.URL, Digest: art.Digest}}
	c.opts.Recorder.Eventf(run, "Normal", "SourcePinned", "Pinned the artifact of %s at revision %s (%s)", source, art.Revision, art.Digest)
	return 0, true, nil
}
