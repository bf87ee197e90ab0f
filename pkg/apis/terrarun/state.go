package terrarun

import (
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
func StateKey(run *TerraformRun) string {
	if b := run.Spec.Backend; b != nil {
		return StateKeyOf(run.Namespace, run.Spec.Workspace, b.Type, b.Config, b.ConfigSecret)
	}
	return StateKeyOf(run.Namespace, run.Spec.Workspace, "", nil, "")
}

// StateKeyOf is StateKey for a backend given by its fields; "" as backendType
// is the executor's default backend.
func StateKeyOf(namespace, workspace, backendType string, config map[string]string, configSecret string) string {
	if workspace == "" {
		workspace = "default"
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
	parts := []string{strconv.Quote(namespace), strconv.Quote(workspace), strconv.Quote(backendType), strconv.Quote(configSecret)}
	for _, k := range keys {
		parts = append(parts, strconv.Quote(k)+"="+strconv.Quote(config[k]))
	}
	return strings.Join(parts, " ")
}

// DescribeState says which state run uses, for messages.
func DescribeState(run *TerraformRun) string {
	if b := run.Spec.Backend; b != nil {
		return DescribeStateOf(run.Spec.Workspace, b.Type)
	}
	return DescribeStateOf(run.Spec.Workspace, "")
}

// DescribeStateOf is DescribeState for a workspace and backend type.
func DescribeStateOf(workspace, backendType string) string {
	if workspace == "" {
		workspace = "default"
	}
	if backendType == "" {
		return "workspace " + workspace + " of the default backend"
	}
	return "workspace " + workspace + " of its " + backendType + " backend"
}

// StageOrder places a stage among the stages of runs on one state: when
// it started and ended (nil while it runs), and its start revision
// (StageStatus.StartRevision, 0 when recorded without one).
type StageOrder struct {
	Start, End *metav1.Time
	Revision   int64
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
