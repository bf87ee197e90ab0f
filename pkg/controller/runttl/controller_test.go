package runttl

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned/fake"
	"github.com/terrarun/terrarun/pkg/generated/informers/externalversions"
)

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func finished(name string, ttl *int32, finishedAgo time.Duration, mutate ...func(*v1alpha1.TerraformRun)) *v1alpha1.TerraformRun {
	r := &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec:       v1alpha1.TerraformRunSpec{TTLSecondsAfterFinished: ttl},
		Status:     v1alpha1.TerraformRunStatus{Phase: v1alpha1.RunPhaseSucceeded, CompletionTime: &metav1.Time{Time: t0.Add(-finishedAgo)}},
	}
	for _, m := range mutate {
		m(r)
	}
	return r
}

func ttl(s int32) *int32 { return &s }

// TestRunsGoWhenTheirTimeIsUp: a finished run goes once its TTL after
// finishing has passed, and not before; a run without a TTL, one still
// running, and one a workspace created (its history limits keep it) stay;
// a TTL raised since the cache saw the run keeps it.
func TestRunsGoWhenTheirTimeIsUp(t *testing.T) {
	ctx := context.Background()
	runs := []*v1alpha1.TerraformRun{
		finished("expired", ttl(60), 2*time.Minute),
		finished("zero", ttl(0), 0),
		finished("later", ttl(3600), time.Minute),
		finished("forever", nil, 48*time.Hour),
		finished("running", ttl(0), time.Hour, func(r *v1alpha1.TerraformRun) {
			r.Status.Phase, r.Status.CompletionTime = v1alpha1.RunPhaseApplying, nil
		}),
		finished("workspaces", ttl(0), time.Hour, func(r *v1alpha1.TerraformRun) { r.Labels = map[string]string{v1alpha1.LabelWorkspace: "network"} }),
		finished("raised", ttl(60), time.Hour),
	}
	client := fake.NewSimpleClientset()
	factory := externalversions.NewSharedInformerFactory(client, 0)
	informer := factory.Terrarun().V1alpha1().TerraformRuns()
	clk := clocktesting.NewFakeClock(t0)
	c, err := New(client, informer, clk)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if err := informer.Informer().GetIndexer().Add(r); err != nil {
			t.Fatal(err)
		}
		api := r.DeepCopy()
		if r.Name == "raised" {
			api.Spec.TTLSecondsAfterFinished = ttl(86400)
		}
		if _, err := client.TerrarunV1alpha1().TerraformRuns("team-a").Create(ctx, api, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(name string) bool {
		_, err := client.TerrarunV1alpha1().TerraformRuns("team-a").Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	for _, r := range runs {
		after, err := c.sync(ctx, "team-a/"+r.Name)
		if err != nil {
			t.Fatalf("sync %s: %v", r.Name, err)
		}
		if want := r.Name == "later" || r.Name == "raised"; (after > 0) != want {
			t.Errorf("sync %s asks for it again after %v", r.Name, after)
		}
	}
	for name, want := range map[string]bool{"expired": false, "zero": false, "later": true, "forever": true, "running": true, "workspaces": true, "raised": true} {
		if got := exists(name); got != want {
			t.Errorf("run %s exists: %v, want %v", name, got, want)
		}
	}
	// The later run is queued for its time, and goes then.
	clk.Step(58 * time.Minute)
	if _, err := c.sync(ctx, "team-a/later"); err != nil || !exists("later") {
		t.Fatalf("a minute early: %v, exists %v", err, exists("later"))
	}
	clk.Step(time.Minute)
	if _, err := c.sync(ctx, "team-a/later"); err != nil || exists("later") {
		t.Fatalf("on time: %v, exists %v", err, exists("later"))
	}
}
