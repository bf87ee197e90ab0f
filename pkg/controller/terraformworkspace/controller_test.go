package terraformworkspace

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned/fake"
	"github.com/terrarun/terrarun/pkg/generated/informers/externalversions"
)

// TestNoSecondRunWhileTheRunsCacheIsBehind: a sync whose workspace status
// already names the run an earlier sync created (that status write came
// back through the workspaces' watch first), but whose runs cache does not
// hold that run yet, must not create a second run for the same spec. Seen
// in TestReadmeWorkspace: greeter-2 was created beside greeter-1.
func TestNoSecondRunWhileTheRunsCacheIsBehind(t *testing.T) {
	ctx := context.Background()
	ws := &v1alpha1.TerraformWorkspace{
		ObjectMeta: metav1.ObjectMeta{Name: "greeter", Namespace: "default", UID: "ws-uid", Generation: 1},
		Spec: v1alpha1.TerraformWorkspaceSpec{Template: v1alpha1.TerraformRunSpec{
			Source: v1alpha1.Source{Inline: map[string]string{"main.tf": `resource "terraform_data" "x" {}`}},
		}},
		Status: v1alpha1.TerraformWorkspaceStatus{LastRun: "greeter-1", CurrentRun: "greeter-1"},
	}
	first := &v1alpha1.TerraformRun{ObjectMeta: metav1.ObjectMeta{
		Name: "greeter-1", Namespace: "default", Labels: map[string]string{v1alpha1.LabelWorkspace: "greeter"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "TerraformWorkspace", Name: "greeter", UID: "ws-uid", Controller: ptr.To(true)}},
	}}
	for name, c := range map[string]struct {
		inAPI   bool
		wantRun string
	}{
		"the last run exists, the cache does not show it yet": {inAPI: true},
		"the last run was deleted":                            {inAPI: false, wantRun: "greeter-2"},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewSimpleClientset(ws.DeepCopy())
			if c.inAPI {
				if _, err := client.TerrarunV1alpha1().TerraformRuns("default").Create(ctx, first.DeepCopy(), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			factory := externalversions.NewSharedInformerFactory(client, 0)
			workspaces, runs := factory.Terrarun().V1alpha1().TerraformWorkspaces(), factory.Terrarun().V1alpha1().TerraformRuns()
			ctrl, err := New(client, workspaces, runs, Options{})
			if err != nil {
				t.Fatal(err)
			}
			// The workspaces' cache has the status; the runs' cache is empty.
			if err := workspaces.Informer().GetIndexer().Add(ws.DeepCopy()); err != nil {
				t.Fatal(err)
			}
			if _, err := ctrl.sync(ctx, "default/greeter"); err != nil {
				t.Fatal(err)
			}
			list, err := client.TerrarunV1alpha1().TerraformRuns("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var created []string
			for _, run := range list.Items {
				if run.Name != "greeter-1" {
					created = append(created, run.Name)
				}
			}
			switch {
			case c.wantRun == "" && len(created) > 0:
				t.Errorf("the sync created %v beside greeter-1", created)
			case c.wantRun != "" && (len(created) != 1 || created[0] != c.wantRun):
				t.Errorf("the sync created %v, want %s", created, c.wantRun)
			}
		})
	}
}
