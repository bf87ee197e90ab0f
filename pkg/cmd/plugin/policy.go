package plugin

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
	"github.com/terrarun/terrarun/pkg/runrules"
)

// overrideForbiddenHint follows the server's 403 to an override.
const overrideForbiddenHint = "hint: you need create on terraformruns/override; whoever requested the run never overrides it"

// enforcementRank orders results from the most to the least binding.
var enforcementRank = map[v1alpha1.Enforcement]int{
	v1alpha1.EnforcementHardMandatory: 0,
	v1alpha1.EnforcementSoftMandatory: 1,
	v1alpha1.EnforcementAdvisory:      2,
}

// cell is s on one line, fit for a column: a policy's message may come from
// the plan (messageExpression), so its newlines and tabs are escaped, as are
// its control characters (before a tabwriter measures it).
func cell(s string) string {
	return terminalSafe(strings.NewReplacer("\n", `\n`, "\t", `\t`).Replace(s))
}

// plural is "n one", or "n many" when n is not 1.
func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// policyMatched says whether any policy checked the run's plan.
func policyMatched(run *v1alpha1.TerraformRun) bool {
	return run.Status.Policy != nil && len(run.Status.Policy.Policies) > 0
}

// notPassed are the results of the run's policy checks that did not pass,
// the most binding first, in the server's order otherwise.
func notPassed(run *v1alpha1.TerraformRun) []v1alpha1.PolicyResult {
	if run.Status.Policy == nil {
		return nil
	}
	var rs []v1alpha1.PolicyResult
	for _, r := range run.Status.Policy.Results {
		if r.Outcome != v1alpha1.PolicyPassed {
			rs = append(rs, r)
		}
	}
	sort.SliceStable(rs, func(i, j int) bool { return enforcementRank[rs[i].Enforcement] < enforcementRank[rs[j].Enforcement] })
	return rs
}

// softFailures are the soft-mandatory results that did not pass: what an
// override overrides.
func softFailures(run *v1alpha1.TerraformRun) []v1alpha1.PolicyResult {
	var rs []v1alpha1.PolicyResult
	for _, r := range notPassed(run) {
		if r.Enforcement == v1alpha1.EnforcementSoftMandatory {
			rs = append(rs, r)
		}
	}
	return rs
}

// policyHold is the reason of the run's PolicyChecked condition when the
// policies hold or deny its plan (PolicyOverrideRequired, PolicyDenied),
// or "".
func policyHold(run *v1alpha1.TerraformRun) string {
	c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionPolicyChecked)
	if c == nil || c.Status != metav1.ConditionFalse {
		return ""
	}
	return c.Reason
}

// writeResults writes one indented line per result: enforcement,
// policy/validation, outcome and message.
func writeResults(out io.Writer, rs []v1alpha1.PolicyResult) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, r := range rs {
		fmt.Fprintf(w, "  %s\t%s/%s\t%s\t%s\n", cell(string(r.Enforcement)), cell(r.Policy), cell(r.Validation), cell(string(r.Outcome)), cell(r.Message))
	}
	w.Flush()
}

// writePolicy writes what the policies said of the run's plan: a count of
// the checks that passed, a line per check that did not, the approval rules
// that apply and the overrides recorded. It writes nothing when no policy
// matched the run.
func writePolicy(out io.Writer, run *v1alpha1.TerraformRun) {
	if !policyMatched(run) {
		return
	}
	ps := run.Status.Policy
	failed := notPassed(run)
	passed := len(ps.Results) - len(failed)
	fmt.Fprintf(out, "Policy: %d of %s passed, %s matched\n", passed, plural(len(ps.Results), "check", "checks"),
		plural(len(ps.Policies), "policy", "policies"))
	if p := run.Status.Plan; p != nil && p.Digest != "" && ps.PlanDigest != p.Digest {
		fmt.Fprintf(out, "  These results are of plan %s, not of the run's plan %s.\n", cell(ps.PlanDigest), cell(p.Digest))
	}
	writeResults(out, failed)
	for _, a := range ps.Approvals {
		fmt.Fprintf(out, "  Approval rule %s/%s: %s%s\n", cell(a.Policy), cell(a.Rule), approvalsNeeded(a), suffix(a.Message))
	}
	for _, o := range ps.Overrides {
		of := ""
		if len(o.Validations) > 0 {
			of = " of " + cell(strings.Join(o.Validations, ", "))
		}
		fmt.Fprintf(out, "  Override by %s%s%s%s: %s\n", cell(o.OverriddenBy), at(o.OverriddenAt), of, ofOtherPlan(o.PlanDigest, run), cell(o.Justification))
	}
}

// approvalsNeeded is "N approvals[ from groups a, b]".
func approvalsNeeded(a v1alpha1.PolicyApprovalRequirement) string {
	s := plural(int(a.RequiredApprovals), "approval", "approvals")
	switch len(a.Groups) {
	case 0:
		return s
	case 1:
		return s + " from group " + cell(a.Groups[0])
	}
	return s + " from groups " + cell(strings.Join(a.Groups, ", "))
}

// suffix is ": s", or "" when s is empty.
func suffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + cell(s)
}

// at is " at T" in UTC, or "" without a time.
func at(t *metav1.Time) string {
	if t == nil {
		return ""
	}
	return " at " + t.UTC().Format(time.RFC3339)
}

// ofOtherPlan names the plan of an override when it is not the run's.
func ofOtherPlan(digest string, run *v1alpha1.TerraformRun) string {
	if p := run.Status.Plan; p != nil && p.Digest == digest {
		return ""
	}
	return " (of plan " + cell(digest) + ", not the run's)"
}

// policyVerdict says what the policies' hold on the run's plan means for
// whoever reads it, or "" when they do not hold it.
func policyVerdict(run *v1alpha1.TerraformRun, ns string) string {
	switch policyHold(run) {
	case v1alpha1.ReasonPolicyOverrideRequired:
		return fmt.Sprintf("A SoftMandatory policy check failed: approve is refused until someone allowed to override runs: %s", overrideCommand(run.Name, ns))
	case v1alpha1.ReasonPolicyDenied:
		return "The plan is denied by policy: a HardMandatory check failed, and neither an approval nor an override applies it."
	}
	return ""
}

// overrideCommand is the override command line for run name.
func overrideCommand(name, ns string) string {
	return fmt.Sprintf(`kubectl terrarun override %s -n %s --justification "..."`, name, ns)
}

// printPlanPolicy prints, after a run's plan, what the policies and the run
// tasks said of it. The plan is printed already: a run that cannot be read
// is a warning.
func (o *options) printPlanPolicy(ctx context.Context, cs versioned.Interface, ns, name string) {
	run, err := cs.TerrarunV1alpha1().TerraformRuns(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		fmt.Fprintf(o.streams.ErrOut, "warning: the plan's policy and run task results are not shown: %v\n", err)
		return
	}
	if policyMatched(run) {
		fmt.Fprintln(o.streams.Out)
		writePolicy(o.streams.Out, run)
		if v := policyVerdict(run, ns); v != "" {
			fmt.Fprintln(o.streams.Out, v)
		}
	}
	if len(run.Status.Tasks) > 0 {
		fmt.Fprintln(o.streams.Out)
		writeTasks(o.streams.Out, run)
	}
}

func (o *options) overrideCommand() *cobra.Command {
	var justification, digest string
	var yes bool
	cmd := o.command("override RUN --justification TEXT [--digest D] [--yes]",
		"Show a plan's SoftMandatory policy failures and digest, ask, and override them for exactly that digest (needs create on terraformruns/override)",
		cobra.ExactArgs(1), func(ctx context.Context, cs versioned.Interface, ns string, args []string) error {
			if strings.TrimSpace(justification) == "" {
				return fmt.Errorf(`--justification is required: say why these policy failures may be applied anyway, e.g. --justification "approved in CHANGE-123"; it is recorded in the run's status.policy.overrides`)
			}
			runs := cs.TerrarunV1alpha1().TerraformRuns(ns)
			run, err := runs.Get(ctx, args[0], metav1.GetOptions{})
			if err != nil {
				return err
			}
			p, err := overridable(run, ns, digest)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.streams.Out, "Run %s/%s, created by %s\n", ns, run.Name, creator(run))
			fmt.Fprintf(o.streams.Out, "Plan: %d to add, %d to change, %d to destroy, %d to import.\n", p.Add, p.Change, p.Destroy, p.Import)
			writeSource(o.streams.Out, run)
			fmt.Fprintln(o.streams.Out, "SoftMandatory policy failures to override:")
			writeResults(o.streams.Out, softFailures(run))
			fmt.Fprintf(o.streams.Out, "Plan digest: %s\n", p.Digest)
			fmt.Fprintf(o.streams.Out, "Review it with: kubectl terrarun plan %s -n %s\n", run.Name, ns)
			body := &v1alpha1.TerraformRunOverride{PlanDigest: p.Digest, Justification: justification}
			// The server says, recording nothing, whether it would take this
			// override (RBAC, separation of duties, the plan's state), before
			// anyone is asked.
			if _, err := runs.Override(ctx, run.Name, body, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); apierrors.IsForbidden(err) {
				return fmt.Errorf("%w\n%s", err, overrideForbiddenHint)
			} else if err != nil {
				return err
			}
			if !yes && !o.confirm("Override these failures of this plan? Type 'yes' or 'y' to override: ") {
				return fmt.Errorf("not overridden: only the answer 'yes' or 'y' overrides; the plan still waits: override it again, or review it with kubectl terrarun plan %s -n %s", run.Name, ns)
			}
			overridden, err := runs.Override(ctx, run.Name, body, metav1.CreateOptions{})
			if apierrors.IsForbidden(err) {
				return fmt.Errorf("%w\n%s", err, overrideForbiddenHint)
			}
			if err != nil {
				return err
			}
			next := fmt.Sprintf("follow it with: kubectl terrarun wait %s -n %s", overridden.Name, ns)
			if runrules.Phase(overridden) == v1alpha1.RunPhaseAwaitingApproval {
				next = fmt.Sprintf("it still needs its approvals: kubectl terrarun approve %s -n %s", overridden.Name, ns)
			}
			fmt.Fprintf(o.streams.Out, "Overrode the policy failures of plan %s of run %s/%s as %s; %s\n", p.Digest, ns, overridden.Name, overriderOf(overridden), next)
			return nil
		})
	cmd.Flags().StringVar(&justification, "justification", "", "Why the failures may be applied anyway (required); recorded in the run's status.policy.overrides.")
	cmd.Flags().StringVar(&digest, "digest", "", "The plan digest you reviewed; the override is refused when it is not the run's.")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Override without asking.")
	return cmd
}

// overridable is the run's plan when it waits for an override of its
// policy failures, and digest, when set, is its digest; else an error that
// says why there is nothing to override.
func overridable(run *v1alpha1.TerraformRun, ns, digest string) (*v1alpha1.PlanSummary, error) {
	p := run.Status.Plan
	if policyHold(run) == v1alpha1.ReasonPolicyDenied {
		return nil, fmt.Errorf("run %s/%s is denied by policy: a HardMandatory check failed, which no override overrides; change the configuration and run again (%s)", ns, run.Name, run.Status.Message)
	}
	if runrules.Phase(run) != v1alpha1.RunPhaseAwaitingApproval || p == nil || p.Digest == "" {
		return nil, fmt.Errorf("run %s/%s is %s, not AwaitingApproval: there is no plan to override (%s)", ns, run.Name, runrules.Phase(run), run.Status.Message)
	}
	if digest != "" && digest != p.Digest {
		return nil, fmt.Errorf("--digest %s is not the digest of run %s/%s's plan, %s: review that plan with kubectl terrarun plan %s -n %s, then override it", digest, ns, run.Name, p.Digest, run.Name, ns)
	}
	if ps := run.Status.Policy; ps != nil {
		for _, o := range ps.Overrides {
			if o.PlanDigest == p.Digest {
				return nil, fmt.Errorf("the policy failures of run %s/%s's plan were overridden already, by %s: approve it with kubectl terrarun approve %s -n %s", ns, run.Name, o.OverriddenBy, run.Name, ns)
			}
		}
	}
	if len(softFailures(run)) == 0 {
		return nil, fmt.Errorf("run %s/%s has no SoftMandatory policy failure to override: approve it with kubectl terrarun approve %s -n %s", ns, run.Name, run.Name, ns)
	}
	return p, nil
}

// overriderOf is who recorded the run's latest override, as the server says.
func overriderOf(run *v1alpha1.TerraformRun) string {
	if ps := run.Status.Policy; ps != nil && len(ps.Overrides) > 0 {
		return ps.Overrides[len(ps.Overrides)-1].OverriddenBy
	}
	return "you"
}
