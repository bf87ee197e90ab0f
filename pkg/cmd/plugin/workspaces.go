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

// graphCommand prints the namespace's workspaces and what each depends on
// (spec.dependsOn), dependencies first; with --dot, as a Graphviz digraph.
func (o *options) graphCommand() *cobra.Command {
	var dot bool
	cmd := o.command("graph [--dot]", "Show the workspaces' dependencies (spec.dependsOn), dependencies first, or as a Graphviz digraph", cobra.NoArgs, func(ctx context.Context, cs versioned.Interface, ns string, _ []string) error {
		list, err := cs.TerrarunV1alpha1().TerraformWorkspaces(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		deps := map[string][]string{}
		for _, ws := range list.Items {
			deps[ws.Name] = nil
			for _, d := range ws.Spec.DependsOn {
				deps[ws.Name] = append(deps[ws.Name], d.Name)
			}
		}
		order := dependenciesFirst(deps)
		if dot {
			fmt.Fprintf(o.streams.Out, "digraph %q {\n", ns)
			for _, name := range order {
				fmt.Fprintf(o.streams.Out, "  %q;\n", name)
				for _, d := range deps[name] {
					fmt.Fprintf(o.streams.Out, "  %q -> %q;\n", name, d)
				}
			}
			fmt.Fprintln(o.streams.Out, "}")
			return nil
		}
		if len(order) == 0 {
			fmt.Fprintf(o.streams.ErrOut, "No workspaces in namespace %s.\n", ns)
			return nil
		}
		w := tabwriter.NewWriter(o.streams.Out, 0, 4, 3, ' ', 0)
		fmt.Fprintln(w, "WORKSPACE\tDEPENDS-ON")
		for _, name := range order {
			on := "-"
			if len(deps[name]) > 0 {
				on = strings.Join(deps[name], ", ")
			}
			fmt.Fprintf(w, "%s\t%s\n", name, on)
		}
		return w.Flush()
	})
	cmd.Flags().BoolVar(&dot, "dot", false, "Print a Graphviz digraph (dot -Tsvg draws it); an edge goes from a workspace to one it depends on.")
	return cmd
}

// dependenciesFirst orders the workspaces of deps (each name's
// dependencies) so that each comes after those it depends on, by name
// among equals. A dependency that is not a workspace of deps is left out;
// the API refuses cycles, and a cycle's workspaces would come last.
func dependenciesFirst(deps map[string][]string) []string {
	names := make([]string, 0, len(deps))
	for name := range deps {
		names = append(names, name)
	}
	sort.Strings(names)
	var order []string
	placed := map[string]bool{}
	for len(order) < len(names) {
		progress := false
		for _, name := range names {
			if placed[name] {
				continue
			}
			ready := true
			for _, d := range deps[name] {
				if _, known := deps[d]; known && !placed[d] {
					ready = false
				}
			}
			if ready {
				order, placed[name], progress = append(order, name), true, true
			}
		}
		if !progress { // a cycle: the rest, by name
			for _, name := range names {
				if !placed[name] {
					order, placed[name] = append(order, name), true
				}
			}
		}
	}
	return order
}
