// Package metrics holds the Prometheus metrics a run operator needs, served
// at the server's /metrics: runs by phase and namespace, queue depth and
// wait, approvals waiting and their age (read from the run controller's
// cache when scraped), stage durations, executor starts and failures, and
// log bytes stored (counted as they happen). Names begin with terrarun_.
package metrics

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	listers "github.com/terrarun/terrarun/pkg/generated/listers/terrarun/v1alpha1"
)

var (
	// StageDuration observes how long stages ran, by stage and the reason
	// they ended (Completed, Planned, Canceled, Error, ExecutorLost,
	// DeadlineExceeded, StartFailed...).
	StageDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "terrarun",
		Name:           "stage_duration_seconds",
		Help:           "How long a stage ran, from its start to its end, by stage (plan, apply) and the reason it ended.",
		Buckets:        []float64{1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600},
		StabilityLevel: metrics.ALPHA,
	}, []string{"stage", "reason"})

	// QueueWait observes how long runs waited between creation and their
	// plan stage's start (stage slots, state turns).
	QueueWait = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace:      "terrarun",
		Name:           "queue_wait_seconds",
		Help:           "How long a run waited from its creation to the start of its plan stage.",
		Buckets:        []float64{0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600},
		StabilityLevel: metrics.ALPHA,
	})

	// ExecutorStarts counts executions started, by stage and result (ok,
	// error).
	ExecutorStarts = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "terrarun",
		Name:           "executor_starts_total",
		Help:           "Executions (local processes or Jobs) started, by stage and result: ok, or error when the executor could not start one.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"stage", "result"})

	// ExecutorFailures counts stages whose execution failed, was lost or
	// timed out, by stage and reason.
	ExecutorFailures = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "terrarun",
		Name:           "executor_failures_total",
		Help:           "Stages that ended without success, by stage and reason (Error, ExecutorLost, DeadlineExceeded, StartFailed...).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"stage", "reason"})

	// LogBytes counts the log bytes stored, by namespace.
	LogBytes = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "terrarun",
		Name:           "log_bytes_total",
		Help:           "Bytes of stage logs stored, by namespace.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace"})

	// PolicyEvaluationSeconds observes how long one TerraformPolicy took to
	// check one plan.
	PolicyEvaluationSeconds = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace:      "terrarun",
		Name:           "policy_evaluation_seconds",
		Help:           "How long one TerraformPolicy took to check one plan.",
		Buckets:        []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1},
		StabilityLevel: metrics.ALPHA,
	})

	// PolicyResults counts the results of policy validations, by
	// enforcement and outcome (Passed, Failed, Error).
	PolicyResults = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "terrarun",
		Name:           "policy_results_total",
		Help:           "Results of TerraformPolicy validations, by enforcement (Advisory, SoftMandatory, HardMandatory) and outcome (Passed, Failed, Error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"enforcement", "outcome"})

	// RunTaskSeconds observes how long run tasks took to give their final
	// answer, by stage and status (Passed, Failed, Errored).
	RunTaskSeconds = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "terrarun",
		Name:           "run_task_seconds",
		Help:           "Time from a run task's call to its final answer, by stage (PrePlan, PostPlan, PreApply, PostApply) and status (Passed, Failed, Errored).",
		Buckets:        []float64{0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600},
		StabilityLevel: metrics.ALPHA,
	}, []string{"stage", "status"})

	// ListCacheItems counts the runs and workspaces LIST responses wrote, by
	// format (json, protobuf) and whether their encoding came from the list
	// cache (hit) or was made (miss).
	ListCacheItems = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "terrarun",
		Name:           "list_cache_items_total",
		Help:           "Runs and workspaces written in LIST responses, by format (json, protobuf) and result: hit when their encoding was kept from an earlier LIST at the same resourceVersion, miss when it was made.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"format", "result"})

	// ListCacheBytes is what the list cache holds.
	ListCacheBytes = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "terrarun",
		Name:           "list_cache_bytes",
		Help:           "Bytes the list cache holds: encodings of runs and workspaces kept for LIST responses, with an estimate of each entry's overhead (at most --list-cache-bytes).",
		StabilityLevel: metrics.ALPHA,
	})
)

var register sync.Once

// Register registers the metrics with the server's registry, once.
func Register() {
	register.Do(func() {
		legacyregistry.MustRegister(StageDuration, QueueWait, ExecutorStarts, ExecutorFailures, LogBytes, PolicyEvaluationSeconds, PolicyResults, RunTaskSeconds, ListCacheItems, ListCacheBytes)
		legacyregistry.CustomMustRegister(runs)
	})
}

var (
	runsDesc = metrics.NewDesc("terrarun_runs", "Runs by namespace and phase, as the elected replica's controller sees them.",
		[]string{"namespace", "phase"}, nil, metrics.ALPHA, "")
	approvalsDesc = metrics.NewDesc("terrarun_approvals_waiting", "Runs whose plan waits for an approval, by namespace.",
		[]string{"namespace"}, nil, metrics.ALPHA, "")
	approvalAgeDesc = metrics.NewDesc("terrarun_approval_oldest_wait_seconds", "How long the oldest plan waiting for approval has waited, by namespace.",
		[]string{"namespace"}, nil, metrics.ALPHA, "")
)

// runCollector reports what the run controller's cache holds, on the
// replica that runs it.
type runCollector struct {
	metrics.BaseStableCollector
	mu     sync.Mutex
	lister listers.TerraformRunLister
	now    func() time.Time
}

var runs = &runCollector{now: time.Now}

// Watch makes the collector read runs from lister (nil: report none), as
// the controller starts and stops with leadership.
func Watch(lister listers.TerraformRunLister) {
	runs.mu.Lock()
	runs.lister = lister
	runs.mu.Unlock()
}

func (c *runCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- runsDesc
	ch <- approvalsDesc
	ch <- approvalAgeDesc
}

func (c *runCollector) CollectWithStability(ch chan<- metrics.Metric) {
	c.mu.Lock()
	lister := c.lister
	c.mu.Unlock()
	if lister == nil {
		return
	}
	all, err := lister.List(labels.Everything())
	if err != nil {
		return
	}
	type key struct{ namespace, phase string }
	counts := map[key]int{}
	waiting := map[string]int{}
	oldest := map[string]time.Time{}
	for _, r := range all {
		phase := string(r.Status.Phase)
		if phase == "" {
			phase = string(v1alpha1.RunPhasePending)
		}
		counts[key{r.Namespace, phase}]++
		if r.Status.Phase == v1alpha1.RunPhaseAwaitingApproval && r.Status.Approval == nil {
			waiting[r.Namespace]++
			since := r.CreationTimestamp.Time
			if p := r.Status.Plan; p != nil && p.CompletedAt != nil {
				since = p.CompletedAt.Time
			}
			if o, ok := oldest[r.Namespace]; !ok || since.Before(o) {
				oldest[r.Namespace] = since
			}
		}
	}
	for k, n := range counts {
		ch <- metrics.NewLazyConstMetric(runsDesc, metrics.GaugeValue, float64(n), k.namespace, k.phase)
	}
	now := c.now()
	for ns, n := range waiting {
		ch <- metrics.NewLazyConstMetric(approvalsDesc, metrics.GaugeValue, float64(n), ns)
		ch <- metrics.NewLazyConstMetric(approvalAgeDesc, metrics.GaugeValue, now.Sub(oldest[ns]).Seconds(), ns)
	}
}
