package terraformrun

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/fluxsource"
)

// fakeSources answers Get from a map of namespace/kind/name to an
// artifact or an error, and counts the reads.
type fakeSources struct {
	answers map[string]func() (fluxsource.Artifact, error)
	reads   int
}

func (f *fakeSources) Get(_ context.Context, namespace, kind, name string) (fluxsource.Artifact, error) {
	f.reads++
	if a, ok := f.answers[namespace+"/"+kind+"/"+name]; ok {
		return a()
	}
	return fluxsource.Artifact{}, &fluxsource.NotReadyError{Message: fmt.Sprintf("%s %s/%s does not exist yet", kind, namespace, name)}
}

func fromSource(name string) func(*v1alpha1.TerraformRun) {
	return func(r *v1alpha1.TerraformRun) {
		r.Spec.Source = v1alpha1.Source{SourceRef: &v1alpha1.SourceReference{Kind: v1alpha1.SourceKindGitRepository, Name: name, Path: "infra"}}
	}
}

const pinnedDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestSourceRefWaitsThenPins(t *testing.T) {
	run := newRun(fromSource("infra"))
	src := &fakeSources{answers: map[string]func() (fluxsource.Artifact, error){}}
	h := newHarness(t, run, func(o *Options) { o.Sources = src })

	// Not Ready: the run waits Pending, with the source's own words, and
	// no stage starts.
	if d := h.mustSync(); d != sourceRecheck {
		t.Errorf("requeue while the source is missing = %v, want %v", d, sourceRecheck)
	}
	got := h.get()
	want := "Waiting for the source: GitRepository " + run.Namespace + "/infra does not exist yet."
	if got.Status.Phase != v1alpha1.RunPhasePending || got.Status.Message != want || len(got.Status.Stages) != 0 {
		t.Fatalf("phase %q, message %q, stages %d; want Pending, %q, none", got.Status.Phase, got.Status.Message, len(got.Status.Stages), want)
	}
	expectCondition(t, got, v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonSourceNotReady)
	h.expectEvent("Normal SourceNotReady " + want)
	h.expectNotRewritten("a second sync while the source is still missing")

	// Ready: its artifact is pinned in the write that records the plan
	// stage, which gets exactly it.
	src.answers[run.Namespace+"/GitRepository/infra"] = func() (fluxsource.Artifact, error) {
		return fluxsource.Artifact{URL: "http://sc/gitrepository/ns/infra/abc.tar.gz", Digest: pinnedDigest, Revision: "main@sha1:abc"}, nil
	}
	h.mustSync()
	got = h.get()
	if got.Status.Phase != v1alpha1.RunPhasePlanning || got.Status.Source == nil || got.Status.Source.Revision != "main@sha1:abc" ||
		got.Status.Source.Artifact == nil || got.Status.Source.Artifact.Digest != pinnedDigest {
		t.Fatalf("phase %q, source %+v; want Planning with the artifact pinned", got.Status.Phase, got.Status.Source)
	}
	started := h.world.startedExecutions()
	if len(started) != 1 || started[0].Run.Status.Source == nil || started[0].Run.Status.Source.Artifact == nil {
		t.Fatalf("the plan stage started without the pinned artifact: %+v", started)
	}

	// A newer revision of the source changes nothing for this run.
	src.answers[run.Namespace+"/GitRepository/infra"] = func() (fluxsource.Artifact, error) {
		return fluxsource.Artifact{URL: "http://sc/gitrepository/ns/infra/def.tar.gz", Digest: "sha256:" + strings.Repeat("f", 64), Revision: "main@sha1:def"}, nil
	}
	reads := src.reads
	h.clock.Step(time.Minute)
	h.mustSync()
	if src.reads != reads || h.get().Status.Source.Revision != "main@sha1:abc" {
		t.Errorf("a planning run read its source again (%d reads) or changed its pin: %+v", src.reads-reads, h.get().Status.Source)
	}
}

func TestSourceRefRefusals(t *testing.T) {
	for name, c := range map[string]struct {
		sources Sources
		reason  string
		want    string
	}{
		"standalone": {nil, v1alpha1.ReasonStartFailed, "this server reads no Flux sources (standalone mode)"},
		"untrusted": {&fakeSources{answers: map[string]func() (fluxsource.Artifact, error){
			testNS + "/GitRepository/infra": func() (fluxsource.Artifact, error) {
				return fluxsource.Artifact{}, fmt.Errorf("%w: GitRepository %s/infra: its artifact is served from %q", fluxsource.ErrUntrusted, testNS, "attacker.example.com")
			},
		}}, v1alpha1.ReasonVerificationFailed, `served from "attacker.example.com"`},
	} {
		t.Run(name, func(t *testing.T) {
			run := newRun(fromSource("infra"))
			h := newHarness(t, run, func(o *Options) { o.Sources = c.sources })
			h.mustSync()
			got := h.get()
			if got.Status.Phase != v1alpha1.RunPhaseFailed || !strings.Contains(got.Status.Message, c.want) || len(h.world.startedExecutions()) != 0 {
				t.Fatalf("phase %q, message %q, %d executions; want Failed saying %q, none started", got.Status.Phase, got.Status.Message, len(h.world.startedExecutions()), c.want)
			}
			expectCondition(t, got, v1alpha1.ConditionPlanned, metav1.ConditionFalse, c.reason)
		})
	}
}
