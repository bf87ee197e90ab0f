package plugin

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

const otherDigest = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"

// policyChecked sets the run's PolicyChecked condition.
func policyChecked(run *v1alpha1.TerraformRun, status metav1.ConditionStatus, reason string) {
	run.Status.Conditions = append(run.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionPolicyChecked, Status: status, Reason: reason, Message: reason,
		LastTransitionTime: metav1.NewTime(time.Now()),
	})
}

// heldRun is run web-1 waiting for approval with a plan that three policies
// checked: a SoftMandatory and an Advisory check failed (the Advisory one
// with a message that tries to forge lines and drive the terminal), two
// passed, and an approval rule applies. change, when not nil, changes it.
func heldRun(change func(*v1alpha1.TerraformRun)) *v1alpha1.TerraformRun {
	return newRun("web-1", v1alpha1.RunPhaseAwaitingApproval, "Waiting for a policy override.", func(run *v1alpha1.TerraformRun) {
		run.Spec.Creator = &v1alpha1.Creator{Username: "alice"}
		run.Status.Plan = &v1alpha1.PlanSummary{Digest: testDigest, Add: 1, Destroy: 2, HasChanges: true}
		run.Status.Source = &v1alpha1.SourceStatus{Revision: "0a1b2c3"}
		run.Status.Policy = &v1alpha1.PolicyStatus{
			PlanDigest: testDigest,
			Policies:   []v1alpha1.CheckedPolicy{{Name: "cost", ResourceVersion: "11"}, {Name: "prod-guard", ResourceVersion: "12"}, {Name: "tags", ResourceVersion: "13"}},
			Results: []v1alpha1.PolicyResult{
				{Policy: "tags", Validation: "owner", Enforcement: v1alpha1.EnforcementAdvisory, Outcome: v1alpha1.PolicyFailed,
					Message: "aws_s3_bucket.logs has no owner tag\nPolicy: 4 of 4 checks passed\x1b]0;pwned\x07"},
				{Policy: "prod-guard", Validation: "no-db-destroy", Enforcement: v1alpha1.EnforcementHardMandatory, Outcome: v1alpha1.PolicyPassed},
				{Policy: "cost", Validation: "max-instances", Enforcement: v1alpha1.EnforcementSoftMandatory, Outcome: v1alpha1.PolicyFailed, Message: "12 instances, more than 10"},
				{Policy: "cost", Validation: "region", Enforcement: v1alpha1.EnforcementSoftMandatory, Outcome: v1alpha1.PolicyPassed},
			},
			Approvals: []v1alpha1.PolicyApprovalRequirement{
				{Policy: "prod-guard", Rule: "destroys", RequiredApprovals: 2, Groups: []string{"platform-leads", "sre"}, Message: "destroys resources in prod"},
			},
		}
		policyChecked(run, metav1.ConditionFalse, v1alpha1.ReasonPolicyOverrideRequired)
		if change != nil {
			change(run)
		}
	})
}

// heldSummary is what plan and approve print of heldRun's policy results:
// the failures most binding first, the Advisory one's message on one line
// with its control characters escaped.
const heldSummary = "Policy: 2 of 4 checks passed, 3 policies matched\n" +
	"  SoftMandatory  cost/max-instances  Failed  12 instances, more than 10\n" +
	`  Advisory       tags/owner          Failed  aws_s3_bucket.logs has no owner tag\nPolicy: 4 of 4 checks passed\x1b]0;pwned\x07` + "\n" +
	"  Approval rule prod-guard/destroys: 2 approvals from groups platform-leads, sre: destroys resources in prod\n"

// overridden changes heldRun into the run once bob has overridden its
// SoftMandatory failure.
func overridden(run *v1alpha1.TerraformRun) {
	at := metav1.NewTime(time.Date(2026, 11, 27, 18, 1, 19, 0, time.UTC))
	run.Status.Message = "Waiting for approval."
	run.Status.Policy.Overrides = []v1alpha1.PolicyOverride{{
		OverriddenBy: "bob", OverriddenAt: &at, PlanDigest: testDigest, Justification: "CHANGE-123: the batch needs 12", Validations: []string{"cost/max-instances"},
	}}
	run.Status.Conditions = nil
	policyChecked(run, metav1.ConditionTrue, v1alpha1.ReasonPolicyOverridden)
}

// TestPlanPolicy checks what plan prints after the plan text of its
// policy results, and that --json prints the plan alone.
func TestPlanPolicy(t *testing.T) {
	const planText = "Plan: 1 to add, 0 to change, 2 to destroy.\n"
	for _, c := range []struct {
		name   string
		args   []string
		run    http.HandlerFunc
		stdout string
		stderr []string
		gets   int
	}{
		{
			name: "override required",
			run:  object(heldRun(nil)),
			stdout: planText + "\n" + heldSummary +
				`A SoftMandatory policy check failed: approve is refused until someone allowed to override runs: kubectl terrarun override web-1 -n team-a --justification "..."` + "\n",
			gets: 1,
		},
		{
			name: "overridden",
			run:  object(heldRun(overridden)),
			stdout: planText + "\n" + heldSummary +
				"  Override by bob at 2026-11-27T18:01:19Z of cost/max-instances: CHANGE-123: the batch needs 12\n",
			gets: 1,
		},
		{
			name: "denied",
			run: object(heldRun(func(run *v1alpha1.TerraformRun) {
				run.Status.Phase = v1alpha1.RunPhaseFailed
				run.Status.Policy.Results = []v1alpha1.PolicyResult{{Policy: "prod-guard", Validation: "no-db-destroy", Enforcement: v1alpha1.EnforcementHardMandatory, Outcome: v1alpha1.PolicyError, Message: "no such key: resource_changes"}}
				run.Status.Policy.Approvals = nil
				run.Status.Conditions = nil
				policyChecked(run, metav1.ConditionFalse, v1alpha1.ReasonPolicyDenied)
			})),
			stdout: planText + "\n" +
				"Policy: 0 of 1 check passed, 3 policies matched\n" +
				"  HardMandatory  prod-guard/no-db-destroy  Error  no such key: resource_changes\n" +
				"The plan is denied by policy: a HardMandatory check failed, and neither an approval nor an override applies it.\n",
			gets: 1,
		},
		{
			name: "all passed, one approval from anyone, results of another plan",
			run: object(heldRun(func(run *v1alpha1.TerraformRun) {
				run.Status.Policy.PlanDigest = otherDigest
				run.Status.Policy.Policies = run.Status.Policy.Policies[:1]
				run.Status.Policy.Results = []v1alpha1.PolicyResult{{Policy: "cost", Validation: "region", Enforcement: v1alpha1.EnforcementSoftMandatory, Outcome: v1alpha1.PolicyPassed}}
				run.Status.Policy.Approvals = []v1alpha1.PolicyApprovalRequirement{{Policy: "cost", Rule: "approvals[0]", RequiredApprovals: 1}}
				run.Status.Conditions = nil
				policyChecked(run, metav1.ConditionTrue, v1alpha1.ReasonPolicyPassed)
			})),
			stdout: planText + "\n" +
				"Policy: 1 of 1 check passed, 1 policy matched\n" +
				"  These results are of plan " + otherDigest + ", not of the run's plan " + testDigest + ".\n" +
				"  Approval rule cost/approvals[0]: 1 approval\n",
			gets: 1,
		},
		{
			name:   "no policy matched",
			run:    object(heldRun(func(run *v1alpha1.TerraformRun) { run.Status.Policy = &v1alpha1.PolicyStatus{PlanDigest: testDigest} })),
			stdout: planText,
			gets:   1,
		},
		{
			// The plan is printed: a run that cannot be read is a warning.
			name: "run not readable",
			run: status(http.StatusForbidden, metav1.StatusReasonForbidden,
				`terraformruns.terrarun.dev "web-1" is forbidden: User "alice" cannot get resource "terraformruns" in API group "terrarun.dev" in the namespace "team-a"`),
			stdout: planText,
			stderr: []string{`warning: the plan's policy and run task results are not shown: terraformruns.terrarun.dev "web-1" is forbidden: User "alice" cannot get resource "terraformruns"`},
			gets:   1,
		},
		{
			name:   "--json prints the plan alone",
			args:   []string{"--json"},
			run:    object(heldRun(nil)),
			stdout: planText,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newFakeServer(t, map[string]http.HandlerFunc{"GET /terraformruns/web-1/plan": text(planText), "GET /terraformruns/web-1": c.run})
			srv.run(t, "", append([]string{"plan", "web-1"}, c.args...)...).expect(t, ExitSucceeded, c.stdout, c.stderr...)
			if gets := len(srv.received("GET", "/terraformruns/web-1")); gets != c.gets {
				t.Errorf("%d GETs of the run, want %d", gets, c.gets)
			}
		})
	}
}

// TestApprovePolicy checks that approve shows the policy results before it
// asks, and refuses, without asking or posting, a plan that waits for an
// override or that policy denied.
func TestApprovePolicy(t *testing.T) {
	head := "Run team-a/web-1, created by alice\n" +
		"Plan: 1 to add, 0 to change, 2 to destroy, 0 to import.\n" +
		"Source revision: 0a1b2c3\n"
	tail := "Plan digest: " + testDigest + "\n" +
		"Review it with: kubectl terrarun plan web-1 -n team-a\n"
	const question = "Approve this plan? Type 'yes' or 'y' to approve: \n"
	for _, c := range []struct {
		name     string
		run      *v1alpha1.TerraformRun
		code     int
		stdout   string
		stderr   []string
		approves bool
	}{
		{
			name: "overridden",
			run:  heldRun(overridden),
			code: ExitSucceeded,
			stdout: head + heldSummary + "  Override by bob at 2026-11-27T18:01:19Z of cost/max-instances: CHANGE-123: the batch needs 12\n" + tail + question +
				// The policy's rule asks for two approvals: carol's is the first.
				"Approval of plan " + testDigest + " of run team-a/web-1 recorded as carol: 1 of 2 approvals recorded; it still needs 1 more approval(s) from other users (1 of 2) and 1 more approval(s) from group platform-leads or sre (1 of 2; policy prod-guard, rule destroys: destroys resources in prod)\n",
			approves: true,
		},
		{
			name: "no policy matched",
			run: heldRun(func(run *v1alpha1.TerraformRun) {
				run.Status.Policy = &v1alpha1.PolicyStatus{PlanDigest: testDigest}
				run.Status.Conditions = nil
			}),
			code:     ExitSucceeded,
			stdout:   head + tail + question + "Approved plan " + testDigest + " of run team-a/web-1 as carol; follow it with: kubectl terrarun wait web-1 -n team-a\n",
			approves: true,
		},
		{
			name:   "override required",
			run:    heldRun(nil),
			code:   ExitFailed,
			stdout: head + heldSummary + tail,
			stderr: []string{`error: not approved: a SoftMandatory policy check failed, and the server refuses approvals until someone allowed to override it (create on terraformruns/override; not whoever requested the run) runs: kubectl terrarun override web-1 -n team-a --justification "..."; then approve again` + "\n"},
		},
		{
			name: "denied",
			run: heldRun(func(run *v1alpha1.TerraformRun) {
				run.Status.Phase, run.Status.Message = v1alpha1.RunPhaseFailed, "Denied by policy prod-guard."
				run.Status.Policy.Results = run.Status.Policy.Results[1:2]
				run.Status.Policy.Results[0].Outcome, run.Status.Policy.Results[0].Message = v1alpha1.PolicyFailed, "destroys aws_db_instance.main"
				run.Status.Policy.Approvals = nil
				run.Status.Conditions = nil
				policyChecked(run, metav1.ConditionFalse, v1alpha1.ReasonPolicyDenied)
			}),
			code: ExitFailed,
			stdout: "Policy: 0 of 1 check passed, 3 policies matched\n" +
				"  HardMandatory  prod-guard/no-db-destroy  Failed  destroys aws_db_instance.main\n",
			stderr: []string{"error: run team-a/web-1 is Failed: its plan is denied by policy (a HardMandatory check failed), and neither an approval nor an override applies it; change the configuration and run again (Denied by policy prod-guard.)\n"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			approved := c.run.DeepCopy()
			approved.Status.Approvals = []v1alpha1.ApprovalStatus{{ApprovedBy: "carol", PlanDigest: testDigest, Groups: []string{"sre"}}}
			srv := newFakeServer(t, map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(c.run), "POST /terraformruns/web-1/approve": object(approved)})
			srv.run(t, "yes\n", "approve", "web-1").expect(t, c.code, c.stdout, c.stderr...)
			posts := srv.received("POST", "/terraformruns/web-1/approve")
			if !c.approves {
				if len(posts) != 0 {
					t.Errorf("approved: %s", posts[0].body)
				}
				return
			}
			var body v1alpha1.TerraformRunApproval
			if len(posts) != 1 || json.Unmarshal(posts[0].body, &body) != nil || body.PlanDigest != testDigest {
				t.Errorf("posted %v, want one approval of the digest shown", posts)
			}
		})
	}
}

// TestOverride checks that override shows the SoftMandatory failures and
// the digest, asks as approve does, posts exactly that digest with the
// justification, and reports the server's refusals verbatim.
func TestOverride(t *testing.T) {
	const justification = "CHANGE-123: the batch needs 12"
	shown := "Run team-a/web-1, created by alice\n" +
		"Plan: 1 to add, 0 to change, 2 to destroy, 0 to import.\n" +
		"Source revision: 0a1b2c3\n" +
		"SoftMandatory policy failures to override:\n" +
		"  SoftMandatory  cost/max-instances  Failed  12 instances, more than 10\n" +
		"Plan digest: " + testDigest + "\n" +
		"Review it with: kubectl terrarun plan web-1 -n team-a\n"
	const question = "Override these failures of this plan? Type 'yes' or 'y' to override: "
	notOverridden := "error: not overridden: only the answer 'yes' or 'y' overrides; the plan still waits: override it again, or review it with kubectl terrarun plan web-1 -n team-a\n"
	answered := object(heldRun(overridden))
	for _, c := range []struct {
		name       string
		args       []string // after override web-1
		stdin      string
		run        *v1alpha1.TerraformRun // nil: heldRun
		answer     http.HandlerFunc
		code       int
		stdout     string
		stderr     []string
		notStderr  string
		noRequests bool // refused before any request
		overrides  bool
	}{
		{
			name:      "yes",
			args:      []string{"--justification", justification},
			stdin:     "yes\n",
			answer:    answered,
			stdout:    shown + question + "\n" + "Overrode the policy failures of plan " + testDigest + " of run team-a/web-1 as bob; it still needs its approvals: kubectl terrarun approve web-1 -n team-a\n",
			overrides: true,
		},
		{
			name:      "y, as approve takes it",
			args:      []string{"--justification", justification},
			stdin:     "Y\n",
			answer:    answered,
			stdout:    shown + question + "\n" + "Overrode the policy failures of plan " + testDigest + " of run team-a/web-1 as bob; it still needs its approvals: kubectl terrarun approve web-1 -n team-a\n",
			overrides: true,
		},
		{
			name: "--yes with the --digest reviewed does not ask; the run goes on",
			args: []string{"--justification", justification, "--digest", testDigest, "-y"},
			answer: object(heldRun(func(run *v1alpha1.TerraformRun) {
				overridden(run)
				run.Status.Phase = v1alpha1.RunPhaseApplying
			})),
			stdout:    shown + "Overrode the policy failures of plan " + testDigest + " of run team-a/web-1 as bob; follow it with: kubectl terrarun wait web-1 -n team-a\n",
			overrides: true,
		},
		{
			name:   "anything but yes",
			args:   []string{"--justification", justification},
			stdin:  "yes please\n",
			answer: answered,
			code:   ExitFailed,
			stdout: shown + question + "\n",
			stderr: []string{notOverridden},
		},
		{
			name:   "no answer",
			args:   []string{"--justification", justification},
			answer: answered,
			code:   ExitFailed,
			stdout: shown + question + "\n",
			stderr: []string{notOverridden},
		},
		{
			name:       "no justification",
			args:       []string{"--yes"},
			code:       ExitFailed,
			stderr:     []string{`error: --justification is required: say why these policy failures may be applied anyway, e.g. --justification "approved in CHANGE-123"; it is recorded in the run's status.policy.overrides` + "\n"},
			noRequests: true,
		},
		{
			name:       "blank justification",
			args:       []string{"--justification", " \t\n", "--yes"},
			code:       ExitFailed,
			stderr:     []string{"error: --justification is required"},
			noRequests: true,
		},
		{
			name:   "another --digest",
			args:   []string{"--justification", justification, "--digest", otherDigest, "--yes"},
			code:   ExitFailed,
			stderr: []string{"error: --digest " + otherDigest + " is not the digest of run team-a/web-1's plan, " + testDigest + ": review that plan with kubectl terrarun plan web-1 -n team-a, then override it\n"},
		},
		{
			name: "forbidden, said before the question",
			args: []string{"--justification", justification},
			answer: status(http.StatusForbidden, metav1.StatusReasonForbidden,
				`terraformruns.terrarun.dev "web-1" is forbidden: alice requested this run and may not override its policy failures (separation of duties)`),
			code:   ExitFailed,
			stdout: shown,
			stderr: []string{`error: terraformruns.terrarun.dev "web-1" is forbidden: alice requested this run and may not override its policy failures (separation of duties)` + "\n" +
				"hint: you need create on terraformruns/override; whoever requested the run never overrides it\n"},
		},
		{
			name: "conflict",
			args: []string{"--justification", justification, "--yes"},
			answer: status(http.StatusConflict, metav1.StatusReasonConflict,
				`Operation cannot be fulfilled on terraformruns.terrarun.dev "web-1": the plan's digest is `+otherDigest+`, not `+testDigest+`: review the plan again`),
			code:      ExitFailed,
			stdout:    shown,
			stderr:    []string{`error: Operation cannot be fulfilled on terraformruns.terrarun.dev "web-1": the plan's digest is ` + otherDigest + `, not ` + testDigest + `: review the plan again` + "\n"},
			notStderr: "hint:",
		},
		{
			name:   "overridden already",
			args:   []string{"--justification", justification, "--yes"},
			run:    heldRun(overridden),
			code:   ExitFailed,
			stderr: []string{"error: the policy failures of run team-a/web-1's plan were overridden already, by bob: approve it with kubectl terrarun approve web-1 -n team-a\n"},
		},
		{
			name: "nothing to override",
			args: []string{"--justification", justification, "--yes"},
			run: heldRun(func(run *v1alpha1.TerraformRun) {
				run.Status.Policy.Results = run.Status.Policy.Results[:2] // the Advisory failure, a pass
				run.Status.Conditions = nil
				policyChecked(run, metav1.ConditionTrue, v1alpha1.ReasonPolicyPassed)
			}),
			code:   ExitFailed,
			stderr: []string{"error: run team-a/web-1 has no SoftMandatory policy failure to override: approve it with kubectl terrarun approve web-1 -n team-a\n"},
		},
		{
			name:   "no plan yet",
			args:   []string{"--justification", justification, "--yes"},
			run:    newRun("web-1", v1alpha1.RunPhasePlanning, "Planning.", nil),
			code:   ExitFailed,
			stderr: []string{"error: run team-a/web-1 is Planning, not AwaitingApproval: there is no plan to override (Planning.)\n"},
		},
		{
			name: "denied",
			args: []string{"--justification", justification, "--yes"},
			run: heldRun(func(run *v1alpha1.TerraformRun) {
				run.Status.Phase, run.Status.Message = v1alpha1.RunPhaseFailed, "Denied by policy prod-guard."
				run.Status.Conditions = nil
				policyChecked(run, metav1.ConditionFalse, v1alpha1.ReasonPolicyDenied)
			}),
			code:   ExitFailed,
			stderr: []string{"error: run team-a/web-1 is denied by policy: a HardMandatory check failed, which no override overrides; change the configuration and run again (Denied by policy prod-guard.)\n"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := c.run
			if run == nil {
				run = heldRun(nil)
			}
			routes := map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(run)}
			if c.answer != nil {
				routes["POST /terraformruns/web-1/override"] = c.answer
			}
			srv := newFakeServer(t, routes)
			r := srv.run(t, c.stdin, append([]string{"override", "web-1"}, c.args...)...)
			r.expect(t, c.code, c.stdout, c.stderr...)
			if c.notStderr != "" && strings.Contains(r.stderr, c.notStderr) {
				t.Errorf("stderr contains %q:\n%s", c.notStderr, r.stderr)
			}
			srv.mu.Lock()
			requests := len(srv.requests)
			srv.mu.Unlock()
			if c.noRequests && requests != 0 {
				t.Errorf("%d requests, want none: the flag is checked first", requests)
			}
			posts, dryRuns := srv.received("POST", "/terraformruns/web-1/override"), srv.received("DRYRUN", "/terraformruns/web-1/override")
			if asked := strings.Contains(c.stdout, question); asked && len(dryRuns) != 1 {
				t.Errorf("%d dry runs before asking, want 1", len(dryRuns))
			}
			if !c.overrides {
				if len(posts) != 0 {
					t.Errorf("overrode: %s", posts[0].body)
				}
				return
			}
			if len(posts) != 1 {
				t.Fatalf("%d overrides posted, want 1", len(posts))
			}
			var body v1alpha1.TerraformRunOverride
			if err := json.Unmarshal(posts[0].body, &body); err != nil || body.Kind != "TerraformRunOverride" || body.PlanDigest != testDigest || body.Justification != justification {
				t.Errorf("posted %s (%v), want a TerraformRunOverride of the digest shown with the justification", posts[0].body, err)
			}
		})
	}
}
