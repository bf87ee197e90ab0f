package integration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// plugin runs the built kubectl-terrarun (beside terrarun-apiserver) as the
// user of kubeconfig, with stdin, and returns its output and exit code.
func plugin(t *testing.T, kubeconfig, stdin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(filepath.Dir(apiserverBinary), "kubectl-terrarun"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	case err != nil:
		t.Fatalf("kubectl-terrarun %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), 0
}

// TestPlugin drives kubectl terrarun, the built binary, against the real
// server as users would: review and approve a plan (refused to its creator,
// asked before approving), wait with exit codes that say how a run ended,
// logs, outputs, the run history, discard and cancel; and once through
// kubectl itself, which finds the plugin on PATH.
func TestPlugin(t *testing.T) {
	e := newRunEnv(t)
	bob, _ := e.user(t, "bob")
	e.create(t, runManifest("review", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {
  input = "v"
}
output "x" {
  value = terraform_data.x.output
}
output "secret" {
  value     = "s3cr3t-plugin"
  sensitive = true
}`}, "")))

	// plan waits for the plan.
	if out, code := plugin(t, e.Kubeconfig, "", "plan", "review"); code != 0 || !strings.Contains(out, "Plan: 1 to add") {
		t.Fatalf("plan: exit %d\n%s", code, out)
	}
	if out, code := plugin(t, e.Kubeconfig, "", "plan", "review", "--json"); code != 0 || !strings.Contains(out, `"resource_changes"`) {
		t.Errorf("plan --json: exit %d\n%.300s", code, out)
	}
	e.waitPhase(t, "review", time.Minute, v1alpha1.RunPhaseAwaitingApproval)

	// The creator may not approve, nor may a viewer: each is told so before
	// being asked; bob is asked, and only "yes" approves (the server's dry
	// run before the question records nothing).
	if out, code := plugin(t, e.Kubeconfig, "yes\n", "approve", "review"); code == 0 || !strings.Contains(out, "separation of duties") || strings.Contains(out, "Approve this plan?") {
		t.Errorf("the creator's approval: exit %d\n%s", code, out)
	}
	viewer := e.mint(t, "vic", "terrarun:viewers")
	if out, code := plugin(t, viewer, "yes\n", "approve", "review"); code == 0 || !strings.Contains(out, "forbidden") || strings.Contains(out, "Approve this plan?") {
		t.Errorf("a viewer's approval: exit %d\n%s", code, out)
	}
	out, code := plugin(t, bob, "no\n", "approve", "review")
	if code == 0 || !strings.Contains(out, "Plan: 1 to add, 0 to change, 0 to destroy") || !strings.Contains(out, "Plan digest: sha256:") || !strings.Contains(out, "not approved") {
		t.Errorf("approve answered no: exit %d\n%s", code, out)
	}
	if run := e.waitPhase(t, "review", time.Minute, v1alpha1.RunPhaseAwaitingApproval); run.Status.Approval != nil {
		t.Fatalf("a plan was approved without a yes: %+v", run.Status.Approval)
	}
	out, code = plugin(t, bob, "yes\n", "approve", "review", "--comment", "lgtm")
	digest := e.waitPhase(t, "review", time.Minute, v1alpha1.RunPhaseApplying, v1alpha1.RunPhaseSucceeded).Status.Plan.Digest
	if code != 0 || !strings.Contains(out, "Approved plan "+digest) {
		t.Fatalf("approve: exit %d\n%s", code, out)
	}
	if out, code := plugin(t, e.Kubeconfig, "", "wait", "review", "--timeout", "2m"); code != 0 || !strings.Contains(out, "Succeeded") {
		t.Fatalf("wait: exit %d\n%s", code, out)
	}
	if out, code := plugin(t, e.Kubeconfig, "", "logs", "review", "--stage", "apply"); code != 0 || !strings.Contains(out, "Apply complete!") {
		t.Errorf("logs --stage apply: exit %d\n%s", code, out)
	}
	if out, code := plugin(t, e.Kubeconfig, "", "outputs", "review"); code != 0 || !strings.Contains(out, `"s3cr3t-plugin"`) {
		t.Errorf("outputs: exit %d\n%s", code, out)
	}

	// A discarded plan: wait says so with exit code 4; a canceled run, 3.
	e.create(t, runManifest("rejected", inline(map[string]string{"main.tf": `resource "terraform_data" "y" {}`}, "")))
	e.waitPhase(t, "rejected", time.Minute, v1alpha1.RunPhaseAwaitingApproval)
	if out, code := plugin(t, bob, "", "discard", "rejected", "--comment", "not now"); code != 0 {
		t.Fatalf("discard: exit %d\n%s", code, out)
	}
	if out, code := plugin(t, e.Kubeconfig, "", "wait", "rejected"); code != 4 || !strings.Contains(out, "Discarded") {
		t.Errorf("wait on a discarded run: exit %d, want 4\n%s", code, out)
	}
	e.create(t, runManifest("stopped", inline(map[string]string{"main.tf": `resource "terraform_data" "z" {
  provisioner "local-exec" {
    command = "sleep 60"
  }
}`}, "  approval:\n    mode: Auto\n")))
	e.waitPhase(t, "stopped", time.Minute, v1alpha1.RunPhaseApplying)
	if out, code := plugin(t, e.Kubeconfig, "", "cancel", "stopped"); code != 0 {
		t.Fatalf("cancel: exit %d\n%s", code, out)
	}
	if out, code := plugin(t, e.Kubeconfig, "", "wait", "stopped"); code != 3 || !strings.Contains(out, "Canceled") {
		t.Errorf("wait on a canceled run: exit %d, want 3\n%s", code, out)
	}
	if out, code := plugin(t, e.Kubeconfig, "", "wait", "absent"); code != 1 || !strings.Contains(out, "not found") {
		t.Errorf("wait on a run that does not exist: exit %d, want 1\n%s", code, out)
	}

	// Every namespace, and names alone, as kubectl get prints them.
	if out, code := plugin(t, e.Kubeconfig, "", "runs", "-A"); code != 0 || !regexp.MustCompile(`(?m)^NAMESPACE\s+NAME\s+OPERATION\s+TRIGGER\s+PHASE`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^default\s+review\s+Apply\s+Direct\s+Succeeded`).MatchString(out) {
		t.Errorf("runs -A: exit %d\n%s", code, out)
	}
	if out, code := plugin(t, e.Kubeconfig, "", "runs", "-o", "name"); code != 0 || !strings.Contains(out, "terraformrun.terrarun.dev/review\n") {
		t.Errorf("runs -o name: exit %d\n%s", code, out)
	}

	// The history, through kubectl's plugin discovery.
	path := filepath.Dir(apiserverBinary) + string(os.PathListSeparator) + os.Getenv("PATH")
	cmd := exec.Command(kubectlBinary(t), "terrarun", "runs", "--kubeconfig", e.Kubeconfig)
	cmd.Env = append(os.Environ(), "PATH="+path)
	history, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl terrarun runs: %v\n%s", err, history)
	}
	// kubectl completes the plugin's commands and run names through
	// kubectl_complete-terrarun, the plugin under that name.
	links := t.TempDir()
	if err := os.Symlink(filepath.Join(filepath.Dir(apiserverBinary), "kubectl-terrarun"), filepath.Join(links, "kubectl_complete-terrarun")); err != nil {
		t.Fatal(err)
	}
	complete := exec.Command(kubectlBinary(t), "__complete", "terrarun", "approve", "rev")
	complete.Env = append(os.Environ(), "PATH="+links+string(os.PathListSeparator)+path, "KUBECONFIG="+e.Kubeconfig)
	if out, err := complete.Output(); err != nil || !strings.HasPrefix(string(out), "review\n") {
		t.Errorf("kubectl __complete terrarun approve rev: %v\n%s", err, out)
	}
	for _, row := range []string{`review\s+Apply\s+Direct\s+Succeeded\s+\+1 ~0 -0\s+-\s+bob\s+\S+`, `rejected\s+Apply\s+Direct\s+Discarded\s+\+1 ~0 -0\s+-\s+-`, `stopped\s+Apply\s+Direct\s+Canceled\s`} {
		if !regexp.MustCompile(row).Match(history) {
			t.Errorf("kubectl terrarun runs lacks %q:\n%s", row, history)
		}
	}
}
