// Package plugin is kubectl-terrarun, the kubectl plugin for the daily path
// of TerraformRuns: `kubectl terrarun runs|plan|logs|outputs|approve|override|
// discard|cancel|wait|rerun`. It talks to the server with the generated
// clientset, configured by kubectl's own flags (--kubeconfig, --context, -n,
// --as, ...), so RBAC sees the user as kubectl would.
package plugin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
	"github.com/terrarun/terrarun/pkg/runrules"
)

// Exit codes of `wait` (and of every command that waits): which final phase
// the run reached.
const (
	ExitSucceeded = 0
	ExitFailed    = 1 // also any error of the plugin itself
	ExitCanceled  = 3
	ExitDiscarded = 4
	ExitTimeout   = 5
)

// exitError carries a command's exit code.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// exitCode is the process exit code for err: the code of a run's final phase,
// or 1.
func exitCode(err error) int {
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return ExitFailed
}

type options struct {
	flags *genericclioptions.ConfigFlags
	// streams write what came from a run terminal-safe (terminalWriter);
	// raw are the process's own, for logs --raw.
	streams, raw genericiooptions.IOStreams
}

// command is a subcommand that runs with a client of the server and the
// namespace that kubectl's flags select.
func (o *options) command(use, short string, args cobra.PositionalArgs, run func(ctx context.Context, cs versioned.Interface, ns string, args []string) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args,
		RunE: func(cmd *cobra.Command, args []string) error {
			cs, ns, err := o.client()
			if err != nil {
				return err
			}
			return run(cmd.Context(), cs, ns, args)
		},
	}
	// The shell completes the argument the use line names.
	switch fields := strings.Fields(use); {
	case len(fields) > 1 && fields[1] == "RUN":
		cmd.ValidArgsFunction = o.completeRuns
	case len(fields) > 1 && fields[1] == "WORKSPACE":
		cmd.ValidArgsFunction = o.completeWorkspaces
	}
	return cmd
}

func (o *options) client() (versioned.Interface, string, error) {
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, "", err
	}
	ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", err
	}
	cs, err := versioned.NewForConfig(cfg)
	return cs, ns, err
}

// Run runs kubectl-terrarun with the process's arguments on streams, and
// returns its exit code. What it prints of a run, errors included, has its
// control characters escaped.
func Run(streams genericiooptions.IOStreams) int {
	if err := newCommand(streams).Execute(); err != nil {
		fmt.Fprintf(newTerminalWriter(streams.ErrOut), "error: %v\n", err)
		return exitCode(err)
	}
	return ExitSucceeded
}

// newCommand returns the kubectl-terrarun command.
func newCommand(streams genericiooptions.IOStreams) *cobra.Command {
	safe := genericiooptions.IOStreams{In: streams.In, Out: newTerminalWriter(streams.Out), ErrOut: newTerminalWriter(streams.ErrOut)}
	o := &options{flags: genericclioptions.NewConfigFlags(true), streams: safe, raw: streams}
	root := &cobra.Command{
		Use:   "kubectl-terrarun",
		Short: "Plan, review, approve and follow TerraformRuns",
		Long: `kubectl terrarun: the daily path of TerraformRuns.

  kubectl terrarun runs [--workspace W] [-A] [-o wide|json|yaml|name] [-w]
                                             runs with operation, trigger, phase, plan, approver and duration
  kubectl terrarun plan RUN [--json]         the plan (waits for it), then what the policies said of it
  kubectl terrarun logs RUN [-f]             a stage's log
  kubectl terrarun approve RUN               shows the plan's summary, policy results and digest, asks, approves that digest
  kubectl terrarun override RUN --justification TEXT
                                             shows the SoftMandatory policy failures and digest, asks, overrides them for that digest
  kubectl terrarun wait RUN                  until a final phase; the exit code says which
  kubectl terrarun workspaces [-A] [-o ...] [-w]
                                             workspaces: ready, drifted, suspended, current and last applied runs
  kubectl terrarun rerun|suspend|resume WS   start a run of a workspace now; stop it starting runs; let it again
  kubectl terrarun graph [--dot]             the workspaces' dependencies, dependencies first
  kubectl terrarun ui [RUN] [--port N] [--open]
                                             the web view: runs, plan diffs, live logs, approvals, workspaces

Exit codes: 0 Succeeded, 1 Failed or an error, 3 Canceled, 4 Discarded, 5 timed out.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// Help and completion are cobra's own text (run and workspace names are
	// DNS names): the process's streams.
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.flags.AddFlags(root.PersistentFlags())
	root.AddCommand(o.runsCommand(), o.planCommand(), o.logsCommand(), o.outputsCommand(),
		o.approveCommand(), o.overrideCommand(), o.actionCommand("discard"), o.actionCommand("cancel"), o.waitCommand(), o.rerunCommand(),
		o.workspacesCommand(), o.suspendCommand(true), o.suspendCommand(false), o.graphCommand(), o.uiCommand(), o.versionCommand())
	return root
}

func planSummary(run *v1alpha1.TerraformRun) string {
	p := run.Status.Plan
	if p == nil || p.Digest == "" {
		return "-"
	}
	return fmt.Sprintf("+%d ~%d -%d", p.Add, p.Change, p.Destroy)
}

func runDuration(run *v1alpha1.TerraformRun, now time.Time) string {
	start := run.Status.StartTime
	if start == nil {
		return "-"
	}
	end := now
	if c := run.Status.CompletionTime; c != nil {
		end = c.Time
	}
	return duration.HumanDuration(end.Sub(start.Time))
}

// runOutputs are the formats of runs -o.
var runOutputs = []string{"wide", "json", "yaml", "name"}

func (o *options) runsCommand() *cobra.Command {
	var workspace, output string
	var all, watching bool
	cmd := o.command("runs [--workspace W] [-A] [-o wide|json|yaml|name] [-w]", "List runs, newest first: operation, trigger, phase, plan, policy verdict, approver, duration", cobra.NoArgs, func(ctx context.Context, cs versioned.Interface, ns string, _ []string) error {
		if output != "" && !slices.Contains(runOutputs, output) {
			return fmt.Errorf("unknown output format %q for -o: use one of %s", output, strings.Join(runOutputs, ", "))
		}
		opts := metav1.ListOptions{}
		if workspace != "" {
			opts.LabelSelector = v1alpha1.LabelWorkspace + "=" + workspace
		}
		if all {
			ns = metav1.NamespaceAll
		}
		list, err := cs.TerrarunV1alpha1().TerraformRuns(ns).List(ctx, opts)
		if err != nil {
			return err
		}
		sort.SliceStable(list.Items, func(i, j int) bool {
			return list.Items[j].CreationTimestamp.Before(&list.Items[i].CreationTimestamp)
		})
		switch output {
		case "json", "yaml", "name":
			if watching {
				return fmt.Errorf("--watch prints the table; leave out -o %s, or use kubectl get terraformruns -o %s --watch", output, output)
			}
			return printRuns(o.streams.Out, output, list)
		}
		if len(list.Items) == 0 && !watching {
			if all {
				fmt.Fprintln(o.streams.ErrOut, "No runs in any namespace.")
			} else {
				fmt.Fprintf(o.streams.ErrOut, "No runs in namespace %s.\n", ns)
			}
			return nil
		}
		w := tabwriter.NewWriter(o.streams.Out, 0, 4, 3, ' ', 0)
		header := []string{"NAME", "OPERATION", "TRIGGER", "PHASE", "PLAN", "POLICY", "APPROVED-BY", "DURATION", "AGE"}
		if all {
			header = append([]string{"NAMESPACE"}, header...)
		}
		if output == "wide" {
			header = append(header, "WORKSPACE", "CREATOR", "PLAN-DIGEST")
		}
		fmt.Fprintln(w, strings.Join(header, "\t"))
		for i := range list.Items {
			fmt.Fprintln(w, strings.Join(runRow(&list.Items[i], all, output == "wide", time.Now()), "\t"))
		}
		if err := w.Flush(); err != nil || !watching {
			return err
		}
		// As kubectl get --watch: a row for each change, until interrupted.
		ctx, cancel := signalContextFrom(ctx)
		defer cancel()
		opts.ResourceVersion = list.ResourceVersion
		watcher, err := cs.TerrarunV1alpha1().TerraformRuns(ns).Watch(ctx, opts)
		if err != nil {
			return err
		}
		return watchRows(w, watcher, func(run *v1alpha1.TerraformRun) []string { return runRow(run, all, output == "wide", time.Now()) })
	})
	cmd.Flags().StringVar(&workspace, "workspace", "", "Only the runs of this TerraformWorkspace.")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "The runs of every namespace you may list.")
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: wide (workspace, creator and plan digest too), json, yaml or name.")
	cmd.Flags().BoolVarP(&watching, "watch", "w", false, "After the list, print a row for each change of a run, until interrupted.")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(runOutputs, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// watchRows prints a row of w for each object of kind T that watcher says
// was added, changed or deleted, until it ends; a watch error ends it.
func watchRows[T runtime.Object](w *tabwriter.Writer, watcher watch.Interface, row func(T) []string) error {
	defer watcher.Stop()
	for ev := range watcher.ResultChan() {
		switch ev.Type {
		case watch.Error:
			return apierrors.FromObject(ev.Object)
		case watch.Added, watch.Modified, watch.Deleted:
			obj, ok := ev.Object.(T)
			if !ok {
				continue
			}
			fmt.Fprintln(w, strings.Join(row(obj), "\t"))
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// runRow is run's row in the runs table: with its namespace first when all,
// and its workspace, creator and plan digest last when wide.
func runRow(run *v1alpha1.TerraformRun, all, wide bool, now time.Time) []string {
	approver := "-"
	if a := run.Status.Approval; a != nil && a.ApprovedBy != "" {
		approver = a.ApprovedBy
	}
	row := []string{run.Name, string(run.Spec.Operation), runTrigger(run), string(runrules.Phase(run)), planSummary(run), runrules.PolicyVerdict(run), approver,
		runDuration(run, now), duration.HumanDuration(now.Sub(run.CreationTimestamp.Time))}
	if all {
		row = append([]string{run.Namespace}, row...)
	}
	if wide {
		digest := "-"
		if p := run.Status.Plan; p != nil && p.Digest != "" {
			digest = p.Digest
		}
		row = append(row, orDash(run.Labels[v1alpha1.LabelWorkspace]), creator(run), digest)
	}
	return row
}

// runTrigger says why the run exists: a workspace's trigger (SpecChange,
// DriftCheck…), or Direct for a run a user created.
func runTrigger(run *v1alpha1.TerraformRun) string {
	if t := run.Annotations[v1alpha1.AnnotationTrigger]; t != "" {
		return t
	}
	return string(v1alpha1.TriggerDirect)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printRuns prints list as kubectl get -o json, yaml or name does.
func printRuns(w io.Writer, output string, list *v1alpha1.TerraformRunList) error {
	objs := make([]runtime.Object, len(list.Items))
	for i := range list.Items {
		objs[i] = &list.Items[i]
	}
	return printObjects(w, output, v1alpha1.SchemeGroupVersion.WithKind("TerraformRun"), objs)
}

// printObjects prints objs, of kind, as kubectl get -o json, yaml or name
// does: a v1 List of them, or their names.
func printObjects(w io.Writer, output string, kind schema.GroupVersionKind, objs []runtime.Object) error {
	for _, obj := range objs {
		obj.GetObjectKind().SetGroupVersionKind(kind)
	}
	var p printers.ResourcePrinter
	switch output {
	case "json":
		p = &printers.JSONPrinter{}
	case "yaml":
		p = &printers.YAMLPrinter{}
	default:
		p = &printers.NamePrinter{}
	}
	if output == "name" {
		for _, obj := range objs {
			if err := p.PrintObj(obj, w); err != nil {
				return err
			}
		}
		return nil
	}
	items := make([]runtime.RawExtension, len(objs))
	for i, obj := range objs {
		items[i] = runtime.RawExtension{Object: obj}
	}
	return p.PrintObj(&metav1.List{TypeMeta: metav1.TypeMeta{Kind: "List", APIVersion: "v1"}, Items: items}, w)
}

func (o *options) planCommand() *cobra.Command {
	var asJSON bool
	cmd := o.command("plan RUN [--json]", "Show a run's plan, as terraform show prints it, and what the policies said of it (or its redacted JSON alone); waits for it", cobra.ExactArgs(1), func(ctx context.Context, cs versioned.Interface, ns string, args []string) error {
		req := cs.TerrarunV1alpha1().RESTClient().Get().Namespace(ns).Resource("terraformruns").Name(args[0]).
			SubResource("plan").Param("wait", "true")
		if asJSON {
			return copyStream(ctx, o.streams.Out, req.Param("format", v1alpha1.PlanFormatJSON).Stream)
		}
		if err := copyStream(ctx, o.streams.Out, req.Stream); err != nil {
			return err
		}
		o.printPlanPolicy(ctx, cs, ns, args[0])
		return nil
	})
	cmd.Flags().BoolVar(&asJSON, "json", false, "Print the plan as JSON (terraform show -json, every sensitive value redacted).")
	return cmd
}

func (o *options) logsCommand() *cobra.Command {
	var follow, raw bool
	var stage string
	var attempt int32
	cmd := o.command("logs RUN [-f] [--stage plan|apply] [--attempt N]", "Print a stage's log (the latest stage's by default); -f follows it until the stage ends", cobra.ExactArgs(1), func(ctx context.Context, cs versioned.Interface, ns string, args []string) error {
		req := cs.TerrarunV1alpha1().RESTClient().Get().Namespace(ns).Resource("terraformruns").Name(args[0]).SubResource("logs")
		if follow {
			req = req.Param("follow", "true")
		}
		if stage != "" {
			req = req.Param("stage", stage)
		}
		if attempt > 0 {
			req = req.Param("attempt", fmt.Sprint(attempt))
		}
		out := o.streams.Out
		if raw {
			out = o.raw.Out
		}
		return copyStream(ctx, out, req.Stream)
	})
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "Follow the log until the stage ends.")
	cmd.Flags().StringVar(&stage, "stage", "", "plan or apply; default: the latest stage.")
	cmd.Flags().Int32Var(&attempt, "attempt", 0, "The stage's attempt; default: the latest.")
	cmd.Flags().BoolVar(&raw, "raw", false, "Print the log as the stage wrote it, control characters included (by default they are escaped: a run's code could otherwise drive your terminal).")
	return cmd
}

func copyStream(ctx context.Context, out io.Writer, open func(context.Context) (io.ReadCloser, error)) error {
	ctx, cancel := signalContextFrom(ctx)
	defer cancel()
	rc, err := open(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(out, rc)
	if f, ok := out.(interface{ Flush() error }); ok {
		if ferr := f.Flush(); err == nil {
			err = ferr
		}
	}
	if err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// signalContextFrom ends with ctx, or on SIGINT or SIGTERM.
func signalContextFrom(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

func (o *options) outputsCommand() *cobra.Command {
	return o.command("outputs RUN", "Print a run's outputs as JSON, sensitive values included (needs get on terraformruns/outputs)", cobra.ExactArgs(1),
		func(ctx context.Context, cs versioned.Interface, ns string, args []string) error {
			res := cs.TerrarunV1alpha1().RESTClient().Get().Namespace(ns).Resource("terraformruns").Name(args[0]).
				SubResource("outputs").Do(ctx)
			// Error, not Raw's error: it is the server's own Status, which says why.
			if err := res.Error(); err != nil {
				return err
			}
			body, _ := res.Raw()
			var v any
			if err := json.Unmarshal(body, &v); err != nil {
				return fmt.Errorf("the server's outputs are not JSON: %w", err)
			}
			enc := json.NewEncoder(o.streams.Out)
			enc.SetIndent("", "  ")
			return enc.Encode(v)
		})
}

func (o *options) approveCommand() *cobra.Command {
	var comment string
	var yes bool
	cmd := o.command("approve RUN [--comment TEXT] [--yes]", "Show the plan's summary, policy results and digest, ask, and approve exactly that digest", cobra.ExactArgs(1), func(ctx context.Context, cs versioned.Interface, ns string, args []string) error {
		runs := cs.TerrarunV1alpha1().TerraformRuns(ns)
		run, err := runs.Get(ctx, args[0], metav1.GetOptions{})
		if err != nil {
			return err
		}
		p := run.Status.Plan
		if policyHold(run) == v1alpha1.ReasonPolicyDenied {
			writePolicy(o.streams.Out, run)
			return fmt.Errorf("run %s/%s is %s: its plan is denied by policy (a HardMandatory check failed), and neither an approval nor an override applies it; change the configuration and run again (%s)", ns, run.Name, runrules.Phase(run), run.Status.Message)
		}
		if runrules.Phase(run) != v1alpha1.RunPhaseAwaitingApproval || p == nil || p.Digest == "" {
			return fmt.Errorf("run %s/%s is %s, not AwaitingApproval: there is no plan to approve (%s)", ns, run.Name, runrules.Phase(run), run.Status.Message)
		}
		fmt.Fprintf(o.streams.Out, "Run %s/%s, created by %s\n", ns, run.Name, creator(run))
		fmt.Fprintf(o.streams.Out, "Plan: %d to add, %d to change, %d to destroy, %d to import.\n", p.Add, p.Change, p.Destroy, p.Import)
		writeSource(o.streams.Out, run)
		writePolicy(o.streams.Out, run)
		writeTasks(o.streams.Out, run)
		fmt.Fprintf(o.streams.Out, "Plan digest: %s\n", p.Digest)
		fmt.Fprintf(o.streams.Out, "Review it with: kubectl terrarun plan %s -n %s\n", run.Name, ns)
		if held, waiting := runrules.TasksHold(run); waiting {
			return fmt.Errorf("not approved: the plan waits for its run tasks, and the server refuses approvals until they have answered: %s Approve again once they have (kubectl terrarun plan %s -n %s shows them)", cell(held), run.Name, ns)
		}
		if policyHold(run) == v1alpha1.ReasonPolicyOverrideRequired {
			return fmt.Errorf("not approved: a SoftMandatory policy check failed, and the server refuses approvals until someone allowed to override it (create on terraformruns/override; not whoever requested the run) runs: %s; then approve again", overrideCommand(run.Name, ns))
		}
		body := &v1alpha1.TerraformRunApproval{PlanDigest: p.Digest, Comment: comment}
		// The server says, recording nothing, whether it would take this
		// approval (RBAC, separation of duties, the plan's state), before
		// anyone is asked.
		if _, err := runs.Approve(ctx, run.Name, body, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			return err
		}
		if !yes && !o.confirm("Approve this plan? Type 'yes' or 'y' to approve: ") {
			return fmt.Errorf("not approved: only the answer 'yes' or 'y' approves; the plan still waits: approve it again, or review it with kubectl terrarun plan %s -n %s", run.Name, ns)
		}
		approved, err := runs.Approve(ctx, run.Name, body, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if missing := runrules.MissingApprovals(approved, p.Digest); approved.Status.Approval == nil && len(missing) > 0 {
			counted, required := len(runrules.Approvers(approved, p.Digest)), runrules.RequiredApprovals(approved)
			fmt.Fprintf(o.streams.Out, "Approval of plan %s of run %s/%s recorded as %s: %d of %d approvals recorded; it still needs %s\n",
				p.Digest, ns, approved.Name, approverOf(approved), counted, required, strings.Join(missing, " and "))
			return nil
		}
		fmt.Fprintf(o.streams.Out, "Approved plan %s of run %s/%s as %s; follow it with: kubectl terrarun wait %s -n %s\n",
			p.Digest, ns, approved.Name, approverOf(approved), approved.Name, ns)
		return nil
	})
	cmd.Flags().StringVar(&comment, "comment", "", "A comment recorded with the approval.")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Approve without asking.")
	return cmd
}

// confirm asks question and says whether the answer is yes or y. A piped
// answer is not echoed, so its line is ended.
func (o *options) confirm(question string) bool {
	fmt.Fprint(o.streams.Out, question)
	answer, _ := bufio.NewReader(o.streams.In).ReadString('\n')
	if !isTerminal(o.streams.In) {
		fmt.Fprintln(o.streams.Out)
	}
	a := strings.ToLower(strings.TrimSpace(answer))
	return a == "yes" || a == "y"
}

func creator(run *v1alpha1.TerraformRun) string {
	if c := run.Spec.Creator; c != nil && c.Username != "" {
		return c.Username
	}
	return "(unknown)"
}

func approverOf(run *v1alpha1.TerraformRun) string {
	if len(run.Status.Approvals) > 0 {
		return run.Status.Approvals[len(run.Status.Approvals)-1].ApprovedBy
	}
	if a := run.Status.Approval; a != nil {
		return a.ApprovedBy
	}
	return "you"
}

func (o *options) actionCommand(verb string) *cobra.Command {
	var comment string
	short := map[string]string{
		"discard": "Discard a plan that waits for approval",
		"cancel":  "Cancel a run: stop its stage in flight (SIGINT, then a kill), or end it before it starts",
	}[verb]
	cmd := o.command(verb+" RUN [--comment TEXT]", short, cobra.ExactArgs(1), func(ctx context.Context, cs versioned.Interface, ns string, args []string) error {
		runs := cs.TerrarunV1alpha1().TerraformRuns(ns)
		var err error
		if verb == "discard" {
			_, err = runs.Discard(ctx, args[0], &v1alpha1.TerraformRunDiscard{Comment: comment}, metav1.CreateOptions{})
		} else {
			_, err = runs.Cancel(ctx, args[0], &v1alpha1.TerraformRunCancel{Comment: comment}, metav1.CreateOptions{})
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(o.streams.Out, "Asked to %s run %s/%s; the controller ends it in a moment.\n", verb, ns, args[0])
		return nil
	})
	cmd.Flags().StringVar(&comment, "comment", "", "A comment recorded with the request.")
	return cmd
}

func (o *options) waitCommand() *cobra.Command {
	var timeout time.Duration
	cmd := o.command("wait RUN [--timeout D]", "Wait until a run ends, with a progress line; exit 0 Succeeded, 1 Failed, 3 Canceled, 4 Discarded, 5 timed out", cobra.ExactArgs(1), func(ctx context.Context, cs versioned.Interface, ns string, args []string) error {
		ctx, cancel := signalContextFrom(ctx)
		defer cancel()
		if timeout > 0 {
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		return o.wait(ctx, cs, ns, args[0])
	})
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "Give up after this long (exit code 5); 0 waits forever.")
	return cmd
}

// wait watches the run until a final phase, printing a line on stderr each
// time its phase or message changes.
func (o *options) wait(ctx context.Context, cs versioned.Interface, ns, name string) error {
	runs := cs.TerrarunV1alpha1().TerraformRuns(ns)
	last := ""
	for {
		run, err := runs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return waitError(ctx, err, ns, name)
		}
		for {
			line := fmt.Sprintf("%s/%s: %s %s %s", ns, name, runrules.Phase(run), planSummary(run), run.Status.Message)
			if line != last {
				fmt.Fprintf(o.streams.ErrOut, "%s %s\n", time.Now().Format("15:04:05"), line)
				last = line
			}
			if done, err := final(run); done {
				if err == nil {
					fmt.Fprintf(o.streams.Out, "%s/%s Succeeded: %s\n", ns, name, run.Status.Message)
				}
				return err
			}
			w, err := runs.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: run.ResourceVersion})
			if err != nil {
				return waitError(ctx, err, ns, name)
			}
			next, err := nextRun(ctx, w)
			w.Stop()
			if err != nil {
				if ctx.Err() != nil {
					return waitError(ctx, err, ns, name)
				}
				if exit := (*exitError)(nil); errors.As(err, &exit) {
					return err // the run was deleted: a run read again by its name would be another
				}
				break // the watch ended: read the run again
			}
			run = next
		}
	}
}

func nextRun(ctx context.Context, w watch.Interface) (*v1alpha1.TerraformRun, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, errors.New("the watch ended")
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if run, ok := ev.Object.(*v1alpha1.TerraformRun); ok {
					return run, nil
				}
			case watch.Deleted:
				name := "the run"
				if o, err := meta.Accessor(ev.Object); err == nil {
					name = "run " + o.GetName()
				}
				return nil, &exitError{code: ExitFailed, msg: name + " was deleted before it ended; who deleted it is in the audit log, and what it did in its namespace's Events"}
			case watch.Error:
				return nil, apierrors.FromObject(ev.Object)
			}
		}
	}
}

// waitError is err, or the timeout's exit when the wait timed out.
func waitError(ctx context.Context, err error, ns, name string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &exitError{code: ExitTimeout, msg: fmt.Sprintf("run %s/%s did not end within --timeout; it goes on: wait again with kubectl terrarun wait %s -n %s", ns, name, name, ns)}
	}
	return err
}

// final says whether the run has ended, and the error that says how when it
// did not succeed.
func final(run *v1alpha1.TerraformRun) (bool, error) {
	if !runrules.Finished(run) {
		return false, nil
	}
	msg := fmt.Sprintf("%s/%s %s: %s", run.Namespace, run.Name, runrules.Phase(run), run.Status.Message)
	switch runrules.Phase(run) {
	case v1alpha1.RunPhaseFailed:
		return true, &exitError{code: ExitFailed, msg: msg}
	case v1alpha1.RunPhaseCanceled:
		return true, &exitError{code: ExitCanceled, msg: msg}
	case v1alpha1.RunPhaseDiscarded:
		return true, &exitError{code: ExitDiscarded, msg: msg}
	}
	return true, nil
}

func (o *options) rerunCommand() *cobra.Command {
	var reason string
	var wait bool
	cmd := o.command("rerun WORKSPACE [--reason TEXT] [--wait]", "Start a new run of a TerraformWorkspace now, and print its name", cobra.ExactArgs(1), func(ctx context.Context, cs versioned.Interface, ns string, args []string) error {
		run, err := cs.TerrarunV1alpha1().TerraformWorkspaces(ns).Rerun(ctx, args[0], &v1alpha1.TerraformWorkspaceRerun{Reason: reason}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		fmt.Fprintf(o.streams.Out, "Workspace %s/%s started run %s\n", ns, args[0], run.Name)
		if !wait {
			return nil
		}
		ctx, cancel := signalContextFrom(ctx)
		defer cancel()
		return o.wait(ctx, cs, ns, run.Name)
	})
	cmd.Flags().StringVar(&reason, "reason", "", "A note recorded with the run.")
	cmd.Flags().BoolVar(&wait, "wait", false, "Wait until the run ends, as the wait command does.")
	return cmd
}

// writeSource says what the plan was made from, for whoever approves it:
// the source's revision, and for a Flux source which one, with the digest
// of the artifact that the run pinned; and the executor image, when the
// cluster policy verified it and pinned its digest (which the apply runs).
func writeSource(w io.Writer, run *v1alpha1.TerraformRun) {
	if st := run.Status.Source; st != nil && st.Revision != "" {
		if ref, a := run.Spec.Source.SourceRef, st.Artifact; ref != nil && a != nil {
			fmt.Fprintf(w, "Source revision: %s (%s %s, artifact %s)\n", st.Revision, ref.Kind, ref.Name, a.Digest)
		} else {
			fmt.Fprintf(w, "Source revision: %s\n", st.Revision)
		}
	}
	if e := run.Spec.Engine; e.ImageDigest != "" {
		fmt.Fprintf(w, "Executor image: %s (verified, runs as %s)\n", e.Image, e.ImageDigest)
	}
}
