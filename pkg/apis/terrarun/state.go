package terrarun

import (
	"sort"
	"strconv"
	"strings"
	"time"

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

// ChangedStateAfter says whether another run's apply stage, which started at
// start and ended at end (nil while it runs), may have changed the state
// after a plan that started at planStart read it. Runs on one state take
// turns, so an apply either ended before the plan started or started after
// the plan ended; status times have a second's resolution, so an apply that
// ended in the second the plan started counts as before it.
func ChangedStateAfter(start, end *metav1.Time, planStart time.Time) bool {
	if start == nil || start.Time.Before(planStart) {
		return false
	}
	return end == nil || end.Time.After(planStart)
}
