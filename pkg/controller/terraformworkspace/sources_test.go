package terraformworkspace

import (
	"testing"
	"time"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/fluxsource"
)

// fakeSources reports revision for every source (none when it is ""), and
// keeps the handler the controller registers.
type fakeSources struct {
	revision string
	handler  func(namespace, kind, name string)
}

func (f *fakeSources) Cached(namespace, kind, name string) (fluxsource.Artifact, error) {
	if f.revision == "" {
		return fluxsource.Artifact{}, &fluxsource.NotReadyError{Message: "GitRepository " + namespace + "/" + name + " is not Ready"}
	}
	return fluxsource.Artifact{URL: "http://sc/x.tar.gz", Digest: "sha256:00", Revision: f.revision}, nil
}

func (f *fakeSources) OnChange(handler func(namespace, kind, name string)) { f.handler = handler }

func fluxSource(ws *v1alpha1.TerraformWorkspace) {
	ws.Spec.Template.Source = v1alpha1.Source{SourceRef: &v1alpha1.SourceReference{Kind: v1alpha1.SourceKindGitRepository, Name: "infra"}}
}

// TestFluxSourceRevision: a workspace follows its Flux source's revision as
// source-controller reports it: a new one is a NewRevision run, with no
// drift check needed; while the source has no Ready artifact, the revision
// its runs saw stands; a change of the source re-syncs the workspaces that
// name it.
func TestFluxSourceRevision(t *testing.T) {
	ws := newWorkspace(testWS, fluxSource)
	applied := newRun(ws, 1, v1alpha1.OperationApply, v1alpha1.TriggerSpecChange, atRevision("main@sha1:aaaa"), planned(true), succeeded(t0.Add(-30*time.Minute)))
	ws.Status.LastAppliedRun, ws.Status.LastAppliedHash, ws.Status.LastAppliedRevision = applied.Name, runHash(applied), "main@sha1:aaaa"

	for _, tc := range []struct {
		name     string
		revision string
		wantWhy  v1alpha1.Trigger
		wantHash string
	}{
		{"a new revision", "main@sha1:bbbb", v1alpha1.TriggerNewRevision, Hash(applied.Spec, "main@sha1:bbbb", "")},
		{"the applied revision", "main@sha1:aaaa", "", Hash(applied.Spec, "main@sha1:aaaa", "")},
		{"the source is not Ready", "", "", Hash(applied.Spec, "main@sha1:aaaa", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &fakeSources{revision: tc.revision}
			h := newHarnessWith(t, func(o *Options) { o.Sources = src }, objects(ws.DeepCopy(), applied)...)
			h.mustSync(testWS)
			if got := h.ws(testWS).Status.DesiredHash; got != tc.wantHash {
				t.Errorf("status.desiredHash = %s, want %s", got, tc.wantHash)
			}
			if tc.wantWhy == "" {
				h.expectNoRun()
				return
			}
			if run := h.createdOne(); run.Annotations[v1alpha1.AnnotationTrigger] != string(tc.wantWhy) {
				t.Errorf("run %s triggered by %q, want %s", run.Name, run.Annotations[v1alpha1.AnnotationTrigger], tc.wantWhy)
			}
		})
	}

	t.Run("a change of the source re-syncs its workspaces", func(t *testing.T) {
		src := &fakeSources{}
		other := newWorkspace("other", gitSource)
		h := newHarnessWith(t, func(o *Options) { o.Sources = src }, objects(ws.DeepCopy(), applied)...)
		h.refresh()
		if err := h.workspaces.Add(other); err != nil {
			t.Fatal(err)
		}
		src.handler(testNS, v1alpha1.SourceKindGitRepository, "infra")
		src.handler(testNS, v1alpha1.SourceKindOCIRepository, "infra")
		if n := h.ctrl.queue.Len(); n != 1 {
			t.Fatalf("%d workspaces queued, want the one that names GitRepository infra", n)
		}
		if key, _ := h.ctrl.queue.Get(); key != testNS+"/"+testWS {
			t.Errorf("queued %q, want %s/%s", key, testNS, testWS)
		}
	})
}
