package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runrules"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// TestReadmePolicy runs the README's Policy commands, with its example
// files, as they are written there: a plan that passes applies, its advisory
// failure recorded; a plan that destroys the database is denied, and its
// approval is refused naming the policy.
func TestReadmePolicy(t *testing.T) {
	e := newRunEnv(t)
	kc := e.Kubeconfig
	mustKubectl(t, kc, "apply", "-f", harness.RepoPath("artifacts", "examples", "policy.yaml"))
	if out := mustKubectl(t, kc, "get", "tfpol", "guard-deletes"); !strings.Contains(out, "1/1/1") {
		t.Errorf("kubectl get tfpol guard-deletes:\n%s", out)
	}
	mustKubectl(t, kc, "create", "-f", harness.RepoPath("artifacts", "examples", "policy-demo-create.yaml"))
	mustKubectl(t, kc, "wait", "tfr", "demo-create", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=5m")
	if out := mustKubectl(t, kc, "get", "tfr", "demo-create", "-o", "jsonpath={.status.policy.results}"); !strings.Contains(out, `"validation":"owner-label"`) || !strings.Contains(out, `"outcome":"Failed"`) {
		t.Errorf("demo-create's results:\n%s", out)
	}
	mustKubectl(t, kc, "create", "-f", harness.RepoPath("artifacts", "examples", "policy-demo-destroy.yaml"))
	mustKubectl(t, kc, "wait", "tfr", "demo-destroy", "--for=condition=PolicyChecked=false", "--timeout=5m")
	run := e.waitPhase(t, "demo-destroy", 3*time.Minute, v1alpha1.RunPhaseFailed)
	if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionPolicyChecked); c == nil || c.Reason != v1alpha1.ReasonPolicyDenied ||
		!strings.Contains(c.Message, "guard-deletes/no-database-deletes") || !strings.Contains(c.Message, "destroys terraform_data.database") {
		t.Errorf("PolicyChecked = %+v, want PolicyDenied naming the validation and its messageExpression", c)
	}
	if out := mustKubectl(t, kc, "get", "tfr", "demo-destroy"); !regexp.MustCompile(`demo-destroy\s+Failed\s+\+0 ~0 -2\s+Denied`).MatchString(out) {
		t.Errorf("kubectl get tfr demo-destroy:\n%s", out)
	}
	if out, err := e.approve(t, e.bob, run); err == nil || !strings.Contains(out, "denied by policy: guard-deletes/no-database-deletes") || !strings.Contains(out, "Conflict") && !strings.Contains(out, "409") {
		t.Errorf("approving a denied plan: %v\n%s", err, out)
	}
}

// TestPolicyEnforcement drives each enforcement level and an approval rule
// through the real server, engine and kubectl: soft-mandatory holds a plan
// until a user with the override verb overrides it (an editor, the creator
// and an approver without the verb are refused), an approval rule counts
// only its group's approvers, a policy edited after a plan leaves that
// plan's results as they were, a broken expression is refused when the
// policy is written, and one that exhausts its cost fails closed.
func TestPolicyEnforcement(t *testing.T) {
	e := newRunEnv(t)
	kc := e.Kubeconfig
	editor := e.mint(t, "ed", "terrarun:editors")
	creator := e.mint(t, "cora", "terrarun:editors", "terrarun:overriders")
	overrider := e.mint(t, "olga", "terrarun:overriders")
	sre1 := e.mint(t, "sam", "terrarun:approvers", "sre")
	sre2 := e.mint(t, "sue", "terrarun:approvers", "sre")
	admin := e.mint(t, "pat", "terrarun:policy-admins")

	// A broken expression is refused when written, naming its field.
	broken := filepath.Join(t.TempDir(), "broken.yaml")
	writeFile(t, broken, policyManifest("broken", "scenario: none", `  validations:
    - expression: "size(plan.resource_changes) >"
`))
	if out, err := kubectl(t, admin, "create", "-f", broken); err == nil || !strings.Contains(out, "spec.validations[0].expression") || !strings.Contains(out, "compilation failed") {
		t.Errorf("a policy that does not compile was accepted, or its error does not name the field: %v\n%s", err, out)
	}
	// Only a policy admin writes policies.
	if out, err := kubectl(t, e.bob, "create", "-f", broken); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("bob, an editor and approver, wrote a policy: %v\n%s", err, out)
	}

	apply := func(name, spec string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), name+".yaml")
		writeFile(t, path, spec)
		mustKubectl(t, admin, "apply", "-f", path)
	}
	apply("soft", policyManifest("soft", "scenario: soft", `  validations:
    - name: few-adds
      expression: size(summary.add) <= 1
      message: adds more than one resource
      enforcement: SoftMandatory
    - name: tagged
      expression: "false"
      message: never tagged
      enforcement: Advisory
`))
	apply("soft-auto", policyManifest("soft-auto", "scenario: soft-auto", `  validations:
    - name: few-adds
      expression: size(summary.add) <= 1
      enforcement: SoftMandatory
`))
	apply("rule", policyManifest("rule", "scenario: rule", `  approvals:
    - name: sre-adds
      condition: size(summary.add) > 0
      requiredApprovals: 2
      groups: [sre]
      message: two from sre
`))
	apply("costly", policyManifest("costly", "scenario: cost", `  variables:
    - name: l
      expression: "[`+strings.Repeat("0,", 199)+`0]"
  validations:
    - name: costly
      expression: variables.l.all(a, variables.l.all(b, variables.l.all(c, a + b + c == 0)))
`))

	twoAdds := map[string]string{"main.tf": "resource \"terraform_data\" \"a\" {}\nresource \"terraform_data\" \"b\" {}\n"}
	create := func(kubeconfig, name, scenario, extra string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), name+".yaml")
		manifest := strings.Replace(runManifest(name, inline(twoAdds, extra)), "metadata:\n", "metadata:\n  labels:\n    "+scenario+"\n", 1)
		writeFile(t, path, manifest)
		mustKubectl(t, kubeconfig, "create", "-f", path)
	}
	create(creator, "held", "scenario: soft", "")
	create(kc, "auto-held", "scenario: soft-auto", "  approval:\n    mode: Auto\n")
	create(kc, "two-sre", "scenario: rule", "")
	create(kc, "costly", "scenario: cost", "")

	override := func(kubeconfig string, run *v1alpha1.TerraformRun) (string, error) {
		body := filepath.Join(t.TempDir(), "override.json")
		writeFile(t, body, `{"apiVersion":"terrarun.dev/v1alpha1","kind":"TerraformRunOverride","planDigest":"`+run.Status.Plan.Digest+`","justification":"CHANGE-42: both are needed"}`)
		return kubectl(t, kubeconfig, "create", "--raw", raw(run.Name, "override"), "-f", body)
	}

	t.Run("soft-mandatory holds until overridden", func(t *testing.T) {
		run := e.waitPhase(t, "held", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionPolicyChecked); c == nil || c.Reason != v1alpha1.ReasonPolicyOverrideRequired || !strings.Contains(c.Message, "soft/few-adds") {
			t.Fatalf("PolicyChecked = %+v, want PolicyOverrideRequired naming soft/few-adds", c)
		}
		if !slices.ContainsFunc(run.Status.Policy.Results, func(r v1alpha1.PolicyResult) bool {
			return r.Validation == "tagged" && r.Enforcement == v1alpha1.EnforcementAdvisory && r.Outcome == v1alpha1.PolicyFailed && r.Message == "never tagged"
		}) {
			t.Errorf("the advisory failure is not recorded: %+v", run.Status.Policy.Results)
		}
		if out, err := e.approve(t, e.bob, run); err == nil || !strings.Contains(out, "fails soft-mandatory policy: soft/few-adds") {
			t.Errorf("approving a held plan: %v\n%s", err, out)
		}
		// An editor, an approver without the verb, and the run's creator
		// (who holds the verb) may not override.
		for who, kubeconfig := range map[string]string{"an editor": editor, "an approver": e.bob, "the creator": creator} {
			if out, err := override(kubeconfig, run); err == nil || !strings.Contains(out, "Forbidden") && !strings.Contains(out, "forbidden") {
				t.Errorf("%s overrode: %v\n%s", who, err, out)
			}
		}
		if out, _ := override(creator, run); !strings.Contains(out, "whoever requested a run never overrides its policies") {
			t.Errorf("the creator's refusal does not say why:\n%s", out)
		}
		// Edited after the plan, the policy does not change the plan's results.
		rv := run.Status.Policy.Policies[0].ResourceVersion
		apply("soft", policyManifest("soft", "scenario: soft", `  validations:
    - name: few-adds
      expression: "true"
      enforcement: SoftMandatory
`))
		time.Sleep(time.Second)
		if again := e.waitPhase(t, "held", time.Minute, v1alpha1.RunPhaseAwaitingApproval); again.Status.Policy.Policies[0].ResourceVersion != rv || len(runrules.PendingOverrides(again, again.Status.Plan.Digest)) != 1 {
			t.Errorf("an edit of the policy changed the recorded results: %+v", again.Status.Policy)
		}
		if out, err := override(overrider, run); err != nil {
			t.Fatalf("olga overrides: %v\n%s", err, out)
		}
		run = e.waitPhase(t, "held", time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		if o := run.Status.Policy.Overrides; len(o) != 1 || o[0].OverriddenBy != "olga" || o[0].Justification != "CHANGE-42: both are needed" || !slices.Equal(o[0].Validations, []string{"soft/few-adds"}) {
			t.Errorf("override record: %+v", o)
		}
		if out, err := e.approve(t, e.bob, run); err != nil {
			t.Fatalf("bob approves the overridden plan: %v\n%s", err, out)
		}
		e.waitPhase(t, "held", 3*time.Minute, v1alpha1.RunPhaseSucceeded)
	})

	t.Run("an Auto run applies once overridden", func(t *testing.T) {
		run := e.waitPhase(t, "auto-held", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval, v1alpha1.RunPhaseSucceeded)
		if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionPolicyChecked); run.Status.Phase != v1alpha1.RunPhaseAwaitingApproval || c == nil || c.Reason != v1alpha1.ReasonPolicyOverrideRequired {
			t.Fatalf("an Auto run with a soft-mandatory failure: %s, PolicyChecked %+v; want it held", run.Status.Phase, c)
		}
		// No status write lifts the hold: status.policy is the server's record.
		mustKubectl(t, kc, "patch", "tfr", "auto-held", "--subresource=status", "--type=json", "-p", `[{"op":"remove","path":"/status/policy"}]`)
		time.Sleep(time.Second)
		if again := e.waitPhase(t, "auto-held", time.Minute, v1alpha1.RunPhaseAwaitingApproval); again.Status.Policy == nil || again.Status.Approval != nil {
			t.Fatalf("a status write removed the policy record (%+v) or approved the run (%+v)", again.Status.Policy, again.Status.Approval)
		}
		if out, err := override(overrider, run); err != nil {
			t.Fatalf("olga overrides: %v\n%s", err, out)
		}
		e.waitPhase(t, "auto-held", 3*time.Minute, v1alpha1.RunPhaseSucceeded)
	})

	t.Run("an approval rule counts its groups", func(t *testing.T) {
		run := e.waitPhase(t, "two-sre", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		if out, err := e.approve(t, e.bob, run); err != nil {
			t.Fatalf("bob approves: %v\n%s", err, out)
		}
		if out, err := e.approve(t, sre1, run); err != nil {
			t.Fatalf("sam approves: %v\n%s", err, out)
		}
		run = e.waitPhase(t, "two-sre", time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		if run.Status.Approval != nil || !strings.Contains(run.Status.Message, "1 more approval(s) from group sre (1 of 2; policy rule, rule sre-adds: two from sre)") {
			t.Errorf("after bob (not in sre) and sam: approval %+v, message %q", run.Status.Approval, run.Status.Message)
		}
		if out, err := e.approve(t, sre2, run); err != nil {
			t.Fatalf("sue approves: %v\n%s", err, out)
		}
		run = e.waitPhase(t, "two-sre", 3*time.Minute, v1alpha1.RunPhaseSucceeded)
		if got := []string{run.Status.Approvals[0].ApprovedBy, run.Status.Approvals[1].ApprovedBy, run.Status.Approvals[2].ApprovedBy}; !slices.Equal(got, []string{"bob", "sam", "sue"}) {
			t.Errorf("approvals %v", got)
		}
	})

	t.Run("an expression out of cost fails closed", func(t *testing.T) {
		run := e.waitPhase(t, "costly", 3*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseAwaitingApproval)
		c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionPolicyChecked)
		if run.Status.Phase != v1alpha1.RunPhaseFailed || c == nil || c.Reason != v1alpha1.ReasonPolicyDenied || !strings.Contains(c.Message, "cost limit") || !strings.Contains(c.Message, "fails closed") {
			t.Errorf("run %s, PolicyChecked %+v; want Failed, PolicyDenied, naming the cost limit", run.Status.Phase, c)
		}
	})
}

// policyManifest is a TerraformPolicy that matches the runs labeled
// selector, with spec (indented by two).
func policyManifest(name, selector, spec string) string {
	k, v, _ := strings.Cut(selector, ": ")
	return fmt.Sprintf("apiVersion: terrarun.dev/v1alpha1\nkind: TerraformPolicy\nmetadata:\n  name: %s\nspec:\n  matchConstraints:\n    runSelector:\n      matchLabels:\n        %s: %q\n%s", name, k, v, spec)
}

// TestAdmissionPolicies: Kubernetes' ValidatingAdmissionPolicy and
// MutatingAdmissionPolicy, read from --admission-policy-dir (the README's
// examples, as they are), apply to terrarun's resources in standalone mode:
// an Auto run or workspace is refused (namespaces have no labels there, so
// none is env=dev), and a run without timeouts.apply gets 30 minutes, one
// with its own keeps it.
func TestAdmissionPolicies(t *testing.T) {
	e := newRunEnv(t, "--admission-policy-dir", harness.RepoPath("artifacts", "examples", "admission-policies"))
	kc := e.Kubeconfig
	out, err := kubectl(t, kc, "create", "-f", harness.RepoPath("artifacts", "examples", "policy-demo-create.yaml"))
	if err == nil || !strings.Contains(out, "ValidatingAdmissionPolicy 'auto-only-in-dev.static.k8s.io'") || !strings.Contains(out, "approval mode Auto is allowed only in namespaces labelled env=dev") {
		t.Errorf("an Auto run was not refused by the policy: %v\n%s", err, out)
	}
	ws := filepath.Join(t.TempDir(), "ws.yaml")
	writeFile(t, ws, workspaceManifest("auto", workspaceTF, "  approval:\n    mode: Auto\n"))
	if out, err := kubectl(t, kc, "create", "-f", ws); err == nil || !strings.Contains(out, "auto-only-in-dev.static.k8s.io") {
		t.Errorf("an Auto workspace was not refused by the policy: %v\n%s", err, out)
	}

	mustKubectl(t, kc, "create", "-f", harness.RepoPath("artifacts", "examples", "inline-terraform-data.yaml"))
	if got := mustKubectl(t, kc, "get", "tfr", "hello", "-o", "jsonpath={.spec.timeouts.apply}"); got != "30m0s" {
		t.Errorf("the MutatingAdmissionPolicy's default: timeouts.apply = %q, want 30m0s", got)
	}
	e.create(t, runManifest("own-timeout", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {}`}, "  timeouts:\n    apply: 2h\n")))
	if got := mustKubectl(t, kc, "get", "tfr", "own-timeout", "-o", "jsonpath={.spec.timeouts.apply}"); got != "2h0m0s" {
		t.Errorf("a run's own timeouts.apply = %q, want 2h0m0s kept", got)
	}
}

// TestPolicyOnProviderPlan: a policy reads what a real provider's resource
// would become (plan.resource_changes[].change.after), with each engine this
// host has: a file whose planned content a hard-mandatory validation
// forbids is denied before anyone can approve it; another passes.
func TestPolicyOnProviderPlan(t *testing.T) {
	provider, err := harness.InstallTestProvider(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files := t.TempDir()
	if err := os.Chmod(files, 0o777); err != nil {
		t.Fatal(err)
	}
	e := newRunEnv(t, "--local-executor-mount", provider.Dir, "--local-executor-mount", files+":rw",
		"--local-executor-env", "TF_CLI_CONFIG_FILE="+provider.CLIConfig)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, policyManifest("files", "scenario: files", `  validations:
    - name: no-forbidden-content
      expression: plan.resource_changes.all(r, r.type != 'testing_file' || r.change.after.content != 'forbidden')
      messageExpression: "'writes forbidden content to ' + plan.resource_changes.filter(r, r.type == 'testing_file' && r.change.after.content == 'forbidden').map(r, r.address).join(', ')"
`))
	mustKubectl(t, e.Kubeconfig, "apply", "-f", path)
	for _, eng := range engines {
		name := filepath.Base(eng)
		for _, content := range []string{"allowed", "forbidden"} {
			run := name + "-" + content
			config := harness.TestProviderRequirement + fmt.Sprintf("resource \"testing_file\" \"f\" {\n  path    = %q\n  content = %q\n}\n", filepath.Join(files, run+".txt"), content)
			manifest := strings.Replace(runManifest(run, strings.Replace(inline(map[string]string{"main.tf": config}, ""), "binary: "+engineName, "binary: "+name, 1)),
				"metadata:\n", "metadata:\n  labels:\n    scenario: files\n", 1)
			e.create(t, manifest)
			got := e.waitPhase(t, run, 4*time.Minute, v1alpha1.RunPhaseAwaitingApproval, v1alpha1.RunPhaseFailed)
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionPolicyChecked)
			switch {
			case content == "allowed" && (got.Status.Phase != v1alpha1.RunPhaseAwaitingApproval || c == nil || c.Reason != v1alpha1.ReasonPolicyPassed):
				t.Errorf("%s: %s, PolicyChecked %+v; want it waiting for approval, passed", run, got.Status.Phase, c)
			case content == "forbidden" && (got.Status.Phase != v1alpha1.RunPhaseFailed || c == nil || c.Reason != v1alpha1.ReasonPolicyDenied ||
				!strings.Contains(c.Message, "writes forbidden content to testing_file.f")):
				t.Errorf("%s: %s, PolicyChecked %+v; want Failed, PolicyDenied, naming the resource", run, got.Status.Phase, c)
			}
		}
	}
}
