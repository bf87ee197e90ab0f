package metrics

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	listers "github.com/terrarun/terrarun/pkg/generated/listers/terrarun/v1alpha1"
)

// now is the time of the tests' scrapes.
var now = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// newLister returns a lister of runs, as the run controller's informer
// holds them.
func newLister(t *testing.T, runs ...*v1alpha1.TerraformRun) listers.TerraformRunLister {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, r := range runs {
		if err := indexer.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	return listers.NewTerraformRunLister(indexer)
}

// run returns run name of namespace ns, created ago before now, with status.
func run(ns, name string, ago time.Duration, status v1alpha1.TerraformRunStatus) *v1alpha1.TerraformRun {
	return &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(now.Add(-ago))},
		Status:     status,
	}
}

// planned is a plan that completed ago before now.
func planned(ago time.Duration) *v1alpha1.PlanSummary {
	t := metav1.NewTime(now.Add(-ago))
	return &v1alpha1.PlanSummary{Digest: "sha256:0123", CompletedAt: &t}
}

// TestRunCollector checks what a scrape reports of the runs the
// controller's cache holds: runs by namespace and phase (Pending for none),
// and per namespace the plans waiting for approval and how long the oldest
// has waited, since its plan completed (or since the run was created).
func TestRunCollector(t *testing.T) {
	awaiting := v1alpha1.RunPhaseAwaitingApproval
	lister := newLister(t,
		run("team-a", "new", time.Minute, v1alpha1.TerraformRunStatus{}),
		run("team-a", "planning", time.Minute, v1alpha1.TerraformRunStatus{Phase: v1alpha1.RunPhasePlanning}),
		// Created long ago, planned 10 minutes ago: waits since its plan.
		run("team-a", "waits-10m", 5*time.Hour, v1alpha1.TerraformRunStatus{Phase: awaiting, Plan: planned(10 * time.Minute)}),
		// No plan completion time: waits since it was created.
		run("team-a", "waits-1h", time.Hour, v1alpha1.TerraformRunStatus{Phase: awaiting, Plan: &v1alpha1.PlanSummary{Digest: "sha256:0123"}}),
		// Approved, not yet applying: waits for no one.
		run("team-a", "approved", 9*time.Hour, v1alpha1.TerraformRunStatus{Phase: awaiting, Plan: planned(8 * time.Hour), Approval: &v1alpha1.ApprovalStatus{ApprovedBy: "bob"}}),
		run("team-b", "done-1", time.Hour, v1alpha1.TerraformRunStatus{Phase: v1alpha1.RunPhaseSucceeded}),
		run("team-b", "done-2", time.Hour, v1alpha1.TerraformRunStatus{Phase: v1alpha1.RunPhaseSucceeded}),
		run("team-b", "waits-30s", time.Hour, v1alpha1.TerraformRunStatus{Phase: awaiting, Plan: planned(30 * time.Second)}),
	)
	c := &runCollector{lister: lister, now: func() time.Time { return now }}
	want := `
# HELP terrarun_runs [ALPHA] Runs by namespace and phase, as the elected replica's controller sees them.
# TYPE terrarun_runs gauge
terrarun_runs{namespace="team-a",phase="AwaitingApproval"} 3
terrarun_runs{namespace="team-a",phase="Pending"} 1
terrarun_runs{namespace="team-a",phase="Planning"} 1
terrarun_runs{namespace="team-b",phase="AwaitingApproval"} 1
terrarun_runs{namespace="team-b",phase="Succeeded"} 2
# HELP terrarun_approvals_waiting [ALPHA] Runs whose plan waits for an approval, by namespace.
# TYPE terrarun_approvals_waiting gauge
terrarun_approvals_waiting{namespace="team-a"} 2
terrarun_approvals_waiting{namespace="team-b"} 1
# HELP terrarun_approval_oldest_wait_seconds [ALPHA] How long the oldest plan waiting for approval has waited, by namespace.
# TYPE terrarun_approval_oldest_wait_seconds gauge
terrarun_approval_oldest_wait_seconds{namespace="team-a"} 3600
terrarun_approval_oldest_wait_seconds{namespace="team-b"} 30
`
	if err := testutil.CustomCollectAndCompare(c, strings.NewReader(want), "terrarun_runs", "terrarun_approvals_waiting", "terrarun_approval_oldest_wait_seconds"); err != nil {
		t.Error(err)
	}

	t.Run("no runs waiting", func(t *testing.T) {
		c := &runCollector{lister: newLister(t, run("team-a", "done", time.Hour, v1alpha1.TerraformRunStatus{Phase: v1alpha1.RunPhaseFailed})), now: func() time.Time { return now }}
		want := `
# HELP terrarun_runs [ALPHA] Runs by namespace and phase, as the elected replica's controller sees them.
# TYPE terrarun_runs gauge
terrarun_runs{namespace="team-a",phase="Failed"} 1
`
		if err := testutil.CustomCollectAndCompare(c, strings.NewReader(want), "terrarun_runs", "terrarun_approvals_waiting", "terrarun_approval_oldest_wait_seconds"); err != nil {
			t.Error(err)
		}
	})
}

// TestRegister checks that the metrics reach the server's registry, once
// however often Register is called, and that the run metrics follow the
// lister Watch gives them: none without one, as on a replica that does
// not lead.
func TestRegister(t *testing.T) {
	Register()
	Register()
	t.Cleanup(func() { Watch(nil) })

	ExecutorStarts.WithLabelValues("plan", "ok").Inc()
	ExecutorStarts.WithLabelValues("plan", "ok").Inc()
	ExecutorStarts.WithLabelValues("apply", "error").Inc()
	LogBytes.WithLabelValues("team-a").Add(512)
	want := `
# HELP terrarun_executor_starts_total [ALPHA] Executions (local processes or Jobs) started, by stage and result: ok, or error when the executor could not start one.
# TYPE terrarun_executor_starts_total counter
terrarun_executor_starts_total{result="error",stage="apply"} 1
terrarun_executor_starts_total{result="ok",stage="plan"} 2
# HELP terrarun_log_bytes_total [ALPHA] Bytes of stage logs stored, by namespace.
# TYPE terrarun_log_bytes_total counter
terrarun_log_bytes_total{namespace="team-a"} 512
`
	if err := testutil.GatherAndCompare(legacyregistry.DefaultGatherer, strings.NewReader(want), "terrarun_executor_starts_total", "terrarun_log_bytes_total", "terrarun_runs"); err != nil {
		t.Errorf("before Watch: %v", err)
	}

	Watch(newLister(t, run("team-a", "planning", time.Minute, v1alpha1.TerraformRunStatus{Phase: v1alpha1.RunPhasePlanning})))
	want = `
# HELP terrarun_runs [ALPHA] Runs by namespace and phase, as the elected replica's controller sees them.
# TYPE terrarun_runs gauge
terrarun_runs{namespace="team-a",phase="Planning"} 1
`
	if err := testutil.GatherAndCompare(legacyregistry.DefaultGatherer, strings.NewReader(want), "terrarun_runs"); err != nil {
		t.Errorf("after Watch: %v", err)
	}

	Watch(nil)
	if err := testutil.GatherAndCompare(legacyregistry.DefaultGatherer, strings.NewReader(""), "terrarun_runs"); err != nil {
		t.Errorf("after Watch(nil): %v", err)
	}
}
