package terraformworkspace

import (
	"context"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// TestCreator checks who the template's creator is: the user who created the
// workspace, then the last user who changed its spec; never the one a client
// writes there.
func TestCreator(t *testing.T) {
	env := newTestEnv(t)
	mallory := &terrarun.Creator{Username: "mallory", Groups: []string{"system:masters"}}
	aliceCreator := &terrarun.Creator{Username: "alice", UID: "uid-alice", Groups: alice.Groups}
	bobCreator := &terrarun.Creator{Username: "bob", UID: "uid-bob", Groups: bob.Groups}

	ws := env.createWorkspace(t, alice, "web", func(ws *terrarun.TerraformWorkspace) { ws.Spec.Template.Creator = mallory })
	if !apiequality.Semantic.DeepEqual(ws.Spec.Template.Creator, aliceCreator) || ws.Generation != 1 {
		t.Fatalf("created with creator %+v, generation %d; want %+v, 1", ws.Spec.Template.Creator, ws.Generation, aliceCreator)
	}

	for _, step := range []struct {
		name       string
		change     func(*terrarun.TerraformWorkspace)
		creator    *terrarun.Creator
		generation int64
	}{
		{
			name:       "metadata only",
			change:     func(ws *terrarun.TerraformWorkspace) { ws.Labels = map[string]string{"team": "a"} },
			creator:    aliceCreator,
			generation: 1,
		},
		{
			name:       "creator only",
			change:     func(ws *terrarun.TerraformWorkspace) { ws.Spec.Template.Creator = mallory },
			creator:    aliceCreator,
			generation: 1,
		},
		{
			name:       "creator removed",
			change:     func(ws *terrarun.TerraformWorkspace) { ws.Spec.Template.Creator = nil },
			creator:    aliceCreator,
			generation: 1,
		},
		{
			name: "spec and creator",
			change: func(ws *terrarun.TerraformWorkspace) {
				ws.Spec.Template.Source.Inline = map[string]string{"main.tf": `output "x" { value = 2 }`}
				ws.Spec.Template.Creator = mallory
			},
			creator:    bobCreator,
			generation: 2,
		},
	} {
		t.Run(step.name, func(t *testing.T) {
			ws, err := env.updateWorkspace(bob, "web", step.change)
			if err != nil {
				t.Fatal(err)
			}
			stored := env.getWorkspace(t, "web")
			for _, got := range []*terrarun.TerraformWorkspace{ws, stored} {
				if !apiequality.Semantic.DeepEqual(got.Spec.Template.Creator, step.creator) || got.Generation != step.generation {
					t.Errorf("creator %+v, generation %d; want %+v, %d", got.Spec.Template.Creator, got.Generation, step.creator, step.generation)
				}
			}
		})
	}

	t.Run("status write", func(t *testing.T) {
		_, _, err := env.workspaces.Status.Update(requestContext(alice, "update", "terraformworkspaces", "web", "status"), "web",
			rest.DefaultUpdatedObjectInfo(nil, func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
				ws := old.(*terrarun.TerraformWorkspace).DeepCopy()
				ws.Status.LastRun = "web-1"
				ws.Spec.Template.Creator = mallory
				return ws, nil
			}), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := env.getWorkspace(t, "web")
		if !apiequality.Semantic.DeepEqual(got.Spec.Template.Creator, bobCreator) || got.Status.LastRun != "web-1" {
			t.Errorf("after a status write of creator and lastRun: creator %+v, lastRun %q; want %+v, web-1", got.Spec.Template.Creator, got.Status.LastRun, bobCreator)
		}
	})
}
