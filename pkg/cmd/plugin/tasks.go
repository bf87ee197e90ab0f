package plugin

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// writeTasks writes the run's run task calls, one line each: stage, task,
// enforcement, status, what the task said and its link. It writes nothing
// when no task was called.
func writeTasks(out io.Writer, run *v1alpha1.TerraformRun) {
	calls := run.Status.Tasks
	if len(calls) == 0 {
		return
	}
	passed := 0
	for _, c := range calls {
		if c.Status == v1alpha1.RunTaskPassed {
			passed++
		}
	}
	fmt.Fprintf(out, "Run tasks: %d of %s passed\n", passed, plural(len(calls), "call", "calls"))
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, c := range calls {
		said := cell(c.Message)
		if c.URL != "" {
			said += " (" + cell(c.URL) + ")"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", c.Stage, cell(c.Task), c.Enforcement, c.Status, said)
	}
	_ = w.Flush()
}
