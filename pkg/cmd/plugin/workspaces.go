package plugin

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
)

func (o *options) workspacesCommand() *cobra.Command {
	var all bool
	cmd := o.command("workspaces [-A]", "List workspaces: ready, drifted, suspended, the run under way and the last applied", cobra.NoArgs, func(ctx context.Context, cs versioned.Interface, ns string, _ []string) error {
		if all {
			ns = metav1.NamespaceAll
		}
		list, err := cs.TerrarunV1alpha1().TerraformWorkspaces(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) == 0 {
			if all {
				fmt.Fprintln(o.streams.ErrOut, "No workspaces in any namespace.")
			} else {
				fmt.Fprintf(o.streams.ErrOut, "No workspaces in namespace %s.\n", ns)
			}
			return nil
		}
		sort.Slice(list.Items, func(i, j int) bool {
			a, b := &list.Items[i], &list.Items[j]
			return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
		})
		now := time.Now()
		w := tabwriter.NewWriter(o.streams.Out, 0, 4, 3, ' ', 0)
		header := []string{"NAME", "READY", "DRIFTED", "SUSPENDED", "CURRENT-RUN", "LAST-APPLIED", "AGE"}
		if all {
			header = append([]string{"NAMESPACE"}, header...)
		}
		fmt.Fprintln(w, strings.Join(header, "\t"))
		for i := range list.Items {
			ws := &list.Items[i]
			row := []string{ws.Name, condition(ws.Status.Conditions, v1alpha1.WorkspaceConditionReady), condition(ws.Status.Conditions, v1alpha1.WorkspaceConditionDrifted),
				fmt.Sprint(ws.Spec.Suspend), orDash(ws.Status.CurrentRun), orDash(ws.Status.LastAppliedRun), duration.HumanDuration(now.Sub(ws.CreationTimestamp.Time))}
			if all {
				row = append([]string{ws.Namespace}, row...)
			}
			fmt.Fprintln(w, strings.Join(row, "\t"))
		}
		return w.Flush()
	})
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "The workspaces of every namespace you may list.")
	return cmd
}

// condition is the status of condition typ, or "-" when it is not set.
func condition(conditions []metav1.Condition, typ string) string {
	if c := meta.FindStatusCondition(conditions, typ); c != nil {
		return string(c.Status)
	}
	return "-"
}

// suspendCommand sets spec.suspend of a workspace to suspend: a suspended
// workspace starts no run.
func (o *options) suspendCommand(suspend bool) *cobra.Command {
	verb, short, done := "suspend", "Stop a TerraformWorkspace from starting runs (the run under way goes on)", "suspended: it starts no run until resumed"
	if !suspend {
		verb, short, done = "resume", "Let a suspended TerraformWorkspace start runs again", "resumed: it applies its spec again if that is not applied"
	}
	return o.command(verb+" WORKSPACE", short, cobra.ExactArgs(1), func(ctx context.Context, cs versioned.Interface, ns string, args []string) error {
		patch := fmt.Appendf(nil, `{"spec":{"suspend":%t}}`, suspend)
		ws, err := cs.TerrarunV1alpha1().TerraformWorkspaces(ns).Patch(ctx, args[0], types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return err
		}
		fmt.Fprintf(o.streams.Out, "Workspace %s/%s %s\n", ns, ws.Name, done)
		return nil
	})
}
