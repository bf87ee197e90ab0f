package plugin

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
)

func (o *options) workspacesCommand() *cobra.Command {
	var output string
	var all, watching bool
	cmd := o.command("workspaces [-A] [-o wide|json|yaml|name] [-w]", "List workspaces: ready, drifted, suspended, the run under way and the last applied", cobra.NoArgs, func(ctx context.Context, cs versioned.Interface, ns string, _ []string) error {
		if output != "" && !slices.Contains(runOutputs, output) {
			return fmt.Errorf("unknown output format %q for -o: use one of %s", output, strings.Join(runOutputs, ", "))
		}
		if all {
			ns = metav1.NamespaceAll
		}
		workspaces := cs.TerrarunV1alpha1().TerraformWorkspaces(ns)
		list, err := workspaces.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		sort.Slice(list.Items, func(i, j int) bool {
			a, b := &list.Items[i], &list.Items[j]
			return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
		})
		switch output {
		case "json", "yaml", "name":
			if watching {
				return fmt.Errorf("--watch prints the table; leave out -o %s, or use kubectl get terraformworkspaces -o %s --watch", output, output)
			}
			objs := make([]runtime.Object, len(list.Items))
			for i := range list.Items {
				objs[i] = &list.Items[i]
			}
			return printObjects(o.streams.Out, output, v1alpha1.SchemeGroupVersion.WithKind("TerraformWorkspace"), objs)
		}
		if len(list.Items) == 0 && !watching {
			if all {
				fmt.Fprintln(o.streams.ErrOut, "No workspaces in any namespace.")
			} else {
				fmt.Fprintf(o.streams.ErrOut, "No workspaces in namespace %s.\n", ns)
			}
			return nil
		}
		w := tabwriter.NewWriter(o.streams.Out, 0, 4, 3, ' ', 0)
		header := []string{"NAME", "READY", "DRIFTED", "SUSPENDED", "CURRENT-RUN", "LAST-APPLIED", "AGE"}
		if all {
			header = append([]string{"NAMESPACE"}, header...)
		}
		if output == "wide" {
			header = append(header, "LAST-DRIFT-CHECK", "DEPENDS-ON", "REVISION")
		}
		fmt.Fprintln(w, strings.Join(header, "\t"))
		for i := range list.Items {
			fmt.Fprintln(w, strings.Join(workspaceRow(&list.Items[i], all, output == "wide", time.Now()), "\t"))
		}
		if err := w.Flush(); err != nil || !watching {
			return err
		}
		// As kubectl get --watch: a row for each change, until interrupted.
		ctx, cancel := signalContextFrom(ctx)
		defer cancel()
		watcher, err := workspaces.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			return err
		}
		return watchRows(w, watcher, func(ws *v1alpha1.TerraformWorkspace) []string {
			return workspaceRow(ws, all, output == "wide", time.Now())
		})
	})
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "The workspaces of every namespace you may list.")
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: wide (last drift check, dependencies and applied revision too), json, yaml or name.")
	cmd.Flags().BoolVarP(&watching, "watch", "w", false, "After the list, print a row for each change of a workspace, until interrupted.")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(runOutputs, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// workspaceRow is ws's row in the workspaces table: with its namespace first
// when all, and its last drift check, dependencies and applied revision last
// when wide.
func workspaceRow(ws *v1alpha1.TerraformWorkspace, all, wide bool, now time.Time) []string {
	row := []string{ws.Name, condition(ws.Status.Conditions, v1alpha1.WorkspaceConditionReady), condition(ws.Status.Conditions, v1alpha1.WorkspaceConditionDrifted),
		fmt.Sprint(ws.Spec.Suspend), orDash(ws.Status.CurrentRun), orDash(ws.Status.LastAppliedRun), duration.HumanDuration(now.Sub(ws.CreationTimestamp.Time))}
	if all {
		row = append([]string{ws.Namespace}, row...)
	}
	if wide {
		check := "-"
		if t := ws.Status.LastDriftCheck; t != nil {
			check = duration.HumanDuration(now.Sub(t.Time)) + " ago"
		}
		var deps []string
		for _, d := range ws.Spec.DependsOn {
			deps = append(deps, d.Name)
		}
		row = append(row, check, orDash(strings.Join(deps, ",")), orDash(ws.Status.LastAppliedRevision))
	}
	return row
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
