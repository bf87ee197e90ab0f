package runrules

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// StateKey names the Terraform state run reads and writes, so that runs on
// one state take turns instead of failing on its lock, and an approval can
// tell that the state changed since its plan was made: the run's namespace,
// its Terraform workspace ("default" when unset) and its backend (type,
// settings and the name of its configSecret; the executor's default backend
// when unset). Two runs whose backends differ in settings only in a
// configSecret's content, or that reach one state through different
// settings, have different keys; Terraform's own lock still guards them.
// A local backend without a path is the default backend's state.
func StateKey(run *v1alpha1.TerraformRun) string {
	workspace := run.Spec.Workspace
	if workspace == "" {
		workspace = "default"
	}
	var backendType, configSecret string
	var config map[string]string
	if b := run.Spec.Backend; b != nil {
		backendType, config, configSecret = b.Type, b.Config, b.ConfigSecret
	}
	if backendType == "local" && configSecret == "" && config["path"] == "" && config["workspace_dir"] == "" {
		// The local executor gives a local backend without a path the
		// default backend's (a relative path would land in the stage's work
		// directory, which is removed): they are one state.
		backendType, config = "", nil
	}
	keys := make([]string, 0, len(config))
	for k := range config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// Every part quoted, so that no two settings make one key.
	parts := []string{strconv.Quote(run.Namespace), strconv.Quote(workspace), strconv.Quote(backendType), strconv.Quote(configSecret)}
	for _, k := range keys {
		parts = append(parts, strconv.Quote(k)+"="+strconv.Quote(config[k]))
	}
	return strings.Join(parts, " ")
}

// DescribeState says which state run uses, for messages.
func DescribeState(run *v1alpha1.TerraformRun) string {
	workspace := run.Spec.Workspace
	if workspace == "" {
		workspace = "default"
	}
	if b := run.Spec.Backend; b != nil && b.Type != "" {
		return "workspace " + workspace + " of its " + b.Type + " backend"
	}
	return "workspace " + workspace + " of the default backend"
}

// StageOrder places a stage among the stages of runs on one state: when
// it started and ended (nil while it runs), and its start revision
// (StageStatus.StartRevision, 0 when recorded without one).
type StageOrder struct {
	Start, End *metav1.Time
	Revision   int64
}

// Order places st among the stages on its run's state.
func Order(st *v1alpha1.StageStatus) StageOrder {
	return StageOrder{Start: st.StartTime, End: st.CompletionTime, Revision: st.StartRevision}
}

// ChangedStateAfter says whether another run's apply stage may have changed
// the state after a plan stage read it. Runs on one state take turns, so an
// apply either ended before the plan started or started after it: their
// start revisions say which, and cannot tie. Stages recorded without one
// (by an earlier version) are ordered by their times, whose second's
// resolution counts an apply that ended in the second the plan started as
// before it.
func ChangedStateAfter(apply, plan StageOrder) bool {
	if apply.Revision > 0 && plan.Revision > 0 {
		return apply.Revision > plan.Revision
	}
	if apply.Start == nil || plan.Start == nil || apply.Start.Time.Before(plan.Start.Time) {
		return false
	}
	return apply.End == nil || apply.End.Time.After(plan.Start.Time)
}

// AppliedSince returns the first of others (the other runs on run's state)
// whose apply stage may have changed the state after run's last plan read
// it, and that apply stage; with ended, only an apply that has ended counts.
// A run whose plan stage has not started has no plan to be stale.
func AppliedSince(run *v1alpha1.TerraformRun, others []*v1alpha1.TerraformRun, ended bool) (*v1alpha1.TerraformRun, *v1alpha1.StageStatus) {
	plan, ok := PlanStart(run)
	if !ok {
		return nil, nil
	}
	for _, o := range others {
		if o.UID == run.UID {
			continue
		}
		for i := range o.Status.Stages {
			st := &o.Status.Stages[i]
			if st.Name == v1alpha1.StageApply && (!ended || st.CompletionTime != nil) && ChangedStateAfter(Order(st), plan) {
				return o, st
			}
		}
	}
	return nil, nil
}

// Busy returns the first of others (the other runs on run's state) that may
// make run's plan stale before it applies, and says how: one that applies
// now, whose approved plan applies first, or that plans and then applies
// without approval. An approval waits until it is done.
func Busy(run *v1alpha1.TerraformRun, others []*v1alpha1.TerraformRun) (*v1alpha1.TerraformRun, string) {
	for _, o := range others {
		switch {
		case o.UID == run.UID:
		case Phase(o) == v1alpha1.RunPhaseApplying:
			return o, fmt.Sprintf("run %s is applying to the same state (%s) now", o.Name, DescribeState(run))
		case ApprovedToApply(o):
			return o, fmt.Sprintf("run %s's approved plan applies to the same state (%s) first", o.Name, DescribeState(run))
		case Phase(o) == v1alpha1.RunPhasePlanning && AppliesWithoutApproval(o):
			return o, fmt.Sprintf("run %s is planning on the same state (%s) and applies without approval", o.Name, DescribeState(run))
		}
	}
	return nil, ""
}

// StateIndex is the name of the index of runs by StateKey, which
// StateIndexers adds to an informer of runs and SameState reads.
const StateIndex = "state"

// StateIndexers index runs by StateKey.
var StateIndexers = cache.Indexers{StateIndex: func(obj interface{}) ([]string, error) {
	if run, ok := obj.(*v1alpha1.TerraformRun); ok {
		return []string{StateKey(run)}, nil
	}
	return nil, nil
}}

// SameState returns the other runs on run's state in indexer, an informer's
// index of runs with StateIndexers.
func SameState(indexer cache.Indexer, run *v1alpha1.TerraformRun) []*v1alpha1.TerraformRun {
	objs, err := indexer.ByIndex(StateIndex, StateKey(run))
	if err != nil {
		return nil // an indexer without StateIndexers: a programming error its tests show
	}
	out := make([]*v1alpha1.TerraformRun, 0, len(objs))
	for _, o := range objs {
		if r, ok := o.(*v1alpha1.TerraformRun); ok && r.UID != run.UID {
			out = append(out, r)
		}
	}
	return out
}
