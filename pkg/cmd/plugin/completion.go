package plugin

import (
	"context"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
)

// completeRuns completes a RUN argument with the names of the namespace's
// runs, newest first.
func (o *options) completeRuns(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	return o.complete(cmd.Context(), args, prefix, func(ctx context.Context, cs versioned.Interface, ns string) ([]string, error) {
		list, err := cs.TerrarunV1alpha1().TerraformRuns(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		slices.SortStableFunc(list.Items, func(a, b v1alpha1.TerraformRun) int { return b.CreationTimestamp.Compare(a.CreationTimestamp.Time) })
		names := make([]string, len(list.Items))
		for i := range list.Items {
			names[i] = list.Items[i].Name
		}
		return names, nil
	})
}

// completeWorkspaces completes a WORKSPACE argument with the names of the
// namespace's workspaces.
func (o *options) completeWorkspaces(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	return o.complete(cmd.Context(), args, prefix, func(ctx context.Context, cs versioned.Interface, ns string) ([]string, error) {
		list, err := cs.TerrarunV1alpha1().TerraformWorkspaces(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		names := make([]string, len(list.Items))
		for i := range list.Items {
			names[i] = list.Items[i].Name
		}
		return names, nil
	})
}

// complete completes the one argument of a command with the names list
// gives that start with prefix; no file names.
func (o *options) complete(ctx context.Context, args []string, prefix string, list func(context.Context, versioned.Interface, string) ([]string, error)) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	cs, ns, err := o.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	names, err := list(ctx, cs, ns)
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	return slices.DeleteFunc(names, func(n string) bool { return !strings.HasPrefix(n, prefix) }), cobra.ShellCompDirectiveNoFileComp
}
