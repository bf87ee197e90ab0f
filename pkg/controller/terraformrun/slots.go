package terraformrun

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runrules"
)

// Stage slots. The controller starts a run's plan stage only while fewer than
// Options.MaxConcurrentStages stages run, and fewer than
// Options.MaxConcurrentStagesPerNamespace in the run's namespace; the runs
// that wait are Queued, and start in the order they were created (first in,
// first out), so that in a burst the early runs finish early instead of every
// run sharing the CPU with every other. A plan stage that goes on to apply
// holds its slot until it ends; the apply stage of a manually approved run
// starts without waiting, its plan having taken its turn.

// queuedRecheck is how often a queued run is looked at again, in case the
// end of a stage was missed.
const queuedRecheck = 30 * time.Second

// queuedPositionEvery bounds how often a queued run's position is written.
const queuedPositionEvery = 10 * time.Second

// slots is the controller's memory of its admissions.
type slots struct {
	mu sync.Mutex
	// admitted are runs whose plan stage was admitted but which the lister
	// may not show running yet.
	admitted map[string]bool
	// written is when a queued run's position was last written.
	written map[string]time.Time
}

func (c *Controller) limited() bool {
	return c.opts.MaxConcurrentStages > 0 || c.opts.MaxConcurrentStagesPerNamespace > 0
}

func runKey(run *v1alpha1.TerraformRun) string { return run.Namespace + "/" + run.Name }

// occupancy counts the stages that run, in all and by namespace, and returns
// the runs that wait for a slot, first in first out.
func (c *Controller) occupancy() (int, map[string]int, []*v1alpha1.TerraformRun, error) {
	runs, err := c.lister.List(labels.Everything())
	if err != nil {
		return 0, nil, nil, err
	}
	active, byNamespace := 0, map[string]int{}
	var waiting []*v1alpha1.TerraformRun
	for _, r := range runs {
		switch {
		case c.inStage(r) && !runrules.WaitsForTasksOnly(r):
			active++
			byNamespace[r.Namespace]++
		case runrules.WaitsToStart(r):
			waiting = append(waiting, r)
		}
	}
	sort.Slice(waiting, func(i, j int) bool { return createdBefore(waiting[i], waiting[j]) })
	return active, byNamespace, waiting, nil
}

// admit says whether run may start its plan stage now, and records the
// admission. Otherwise it returns the run that holds run's state (see
// stateHolder), or, when the stage slots are full, how many waiting runs are
// ahead of it.
func (c *Controller) admit(run *v1alpha1.TerraformRun) (bool, int, *v1alpha1.TerraformRun, error) {
	c.slots.mu.Lock()
	defer c.slots.mu.Unlock()
	if c.slots.admitted[runKey(run)] {
		return true, 0, nil, nil // admitted before; its start is being retried
	}
	if holder := c.stateHolder(run, v1alpha1.StagePlan); holder != nil {
		return false, 0, holder, nil
	}
	ahead := 0
	if c.limited() {
		active, byNamespace, waiting, err := c.occupancy()
		if err != nil {
			return false, 0, nil, err
		}
		max, nsMax := c.opts.MaxConcurrentStages, c.opts.MaxConcurrentStagesPerNamespace
		full := func(namespace string) bool {
			return max > 0 && active >= max || nsMax > 0 && byNamespace[namespace] >= nsMax
		}
		for _, w := range waiting {
			if w.UID == run.UID {
				break
			}
			// The runs ahead take their slots first.
			if !full(w.Namespace) {
				active++
				byNamespace[w.Namespace]++
			}
			ahead++
		}
		if full(run.Namespace) {
			return false, ahead, nil, nil
		}
	}
	c.slots.admitted[runKey(run)] = true
	return true, ahead, nil, nil
}

// forget drops what the controller remembers of run's admission once its
// phase has moved on from waiting for a stage, or it is gone.
func (c *Controller) forget(run *v1alpha1.TerraformRun, deleted bool) {
	c.slots.mu.Lock()
	defer c.slots.mu.Unlock()
	switch p := runrules.Phase(run); {
	case deleted, p != v1alpha1.RunPhasePending && p != v1alpha1.RunPhaseQueued && p != v1alpha1.RunPhaseAwaitingApproval:
		delete(c.slots.admitted, runKey(run))
		delete(c.slots.written, runKey(run))
	}
}

// queued shows that run waits for a slot, with its position: when it starts
// waiting, and then at most every queuedPositionEvery, to spare writes.
func (c *Controller) queued(ctx context.Context, run *v1alpha1.TerraformRun, ahead int) (time.Duration, error) {
	msg := fmt.Sprintf("Queued at position %d: the server runs at most %s at once, and starts waiting runs in the order they were created.", ahead+1, c.slotLimits())
	key := runKey(run)
	now := c.opts.Clock.Now()
	c.slots.mu.Lock()
	last, seen := c.slots.written[key]
	c.slots.mu.Unlock()
	if run.Status.Phase == v1alpha1.RunPhaseQueued && (run.Status.Message == msg || seen && now.Sub(last) < queuedPositionEvery) {
		return queuedRecheck, nil
	}
	entering := run.Status.Phase != v1alpha1.RunPhaseQueued
	run.Status.Phase = v1alpha1.RunPhaseQueued
	run.Status.Message = msg
	run.Status.ObservedGeneration = run.Generation
	c.setCondition(run, v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonQueued, msg)
	updated, err := c.client.TerrarunV1alpha1().TerraformRuns(run.Namespace).UpdateStatus(ctx, run, metav1.UpdateOptions{})
	if err != nil {
		return 0, err
	}
	c.slots.mu.Lock()
	c.slots.written[key] = now
	c.slots.mu.Unlock()
	if entering {
		c.opts.Recorder.Event(updated, "Normal", v1alpha1.ReasonQueued, msg)
	}
	return queuedRecheck, nil
}

func (c *Controller) slotLimits() string {
	max, nsMax := c.opts.MaxConcurrentStages, c.opts.MaxConcurrentStagesPerNamespace
	stages := func(n int) string {
		if n == 1 {
			return "1 stage"
		}
		return fmt.Sprintf("%d stages", n)
	}
	switch {
	case max > 0 && nsMax > 0:
		return fmt.Sprintf("%s (--max-concurrent-stages), %s per namespace (--max-concurrent-stages-per-namespace),", stages(max), stages(nsMax))
	case max > 0:
		return stages(max) + " (--max-concurrent-stages)"
	}
	return stages(nsMax) + " per namespace (--max-concurrent-stages-per-namespace)"
}

// released enqueues the runs that may take the slot a stage has left: the
// first waiting runs, as many as slots are free (at least one), and the
// first waiting run of each namespace with a free slot.
func (c *Controller) released() {
	if !c.limited() {
		return
	}
	c.slots.mu.Lock()
	active, byNamespace, waiting, err := c.occupancy()
	c.slots.mu.Unlock()
	if err != nil || len(waiting) == 0 {
		return
	}
	free := len(waiting)
	if limit := c.opts.MaxConcurrentStages; limit > 0 {
		free = max(1, limit-active)
	}
	seen := map[string]bool{}
	for i, w := range waiting {
		first := !seen[w.Namespace]
		seen[w.Namespace] = true
		nsFree := c.opts.MaxConcurrentStagesPerNamespace <= 0 || byNamespace[w.Namespace] < c.opts.MaxConcurrentStagesPerNamespace
		if i < free || first && nsFree {
			c.queue.Add(runKey(w))
		}
	}
}

// holdsSlot says whether run holds a stage slot: it is planning or
// applying, and not only waiting for its run tasks (a task that answers
// late holds the run's state, not a slot another tenant's stage could use).
func holdsSlot(run *v1alpha1.TerraformRun) bool {
	p := runrules.Phase(run)
	return (p == v1alpha1.RunPhasePlanning || p == v1alpha1.RunPhaseApplying) && !runrules.WaitsForTasksOnly(run)
}
