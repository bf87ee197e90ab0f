package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/terrarun/terrarun/test/internal/harness"
)

// TestAdmissionPoliciesOfTheCluster: the host cluster's
// ValidatingAdmissionPolicy and MutatingAdmissionPolicy that match
// terrarun.dev resources apply to them through the aggregator, evaluated by
// terrarun itself: the README's examples (without the .static.k8s.io suffix
// of manifests), bound here only to the namespaces this test labels, so that
// no other test meets them. An Auto run is refused outside env=dev and
// allowed in it; a run without timeouts.apply gets 30 minutes.
func TestAdmissionPoliciesOfTheCluster(t *testing.T) {
	scoped := func(file string) string {
		b, err := os.ReadFile(harness.RepoPath("artifacts", "examples", "admission-policies", file))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(b), ".static.k8s.io", "")
		// Each binding: only the namespaces of this test.
		s = strings.Replace(s, "  validationActions: [Deny]\n  matchResources:\n    namespaceSelector:\n      matchExpressions:\n",
			"  validationActions: [Deny]\n  matchResources:\n    namespaceSelector:\n      matchExpressions:\n        - key: e2e-admission-policies\n          operator: Exists\n", 1)
		s = strings.Replace(s, "  policyName: default-apply-timeout\n",
			"  policyName: default-apply-timeout\n  matchResources:\n    namespaceSelector:\n      matchLabels:\n        e2e-admission-policies: \"on\"\n", 1)
		if !strings.Contains(s, "e2e-admission-policies") {
			t.Fatalf("%s no longer has the shape this test scopes:\n%s", file, s)
		}
		return s
	}
	for _, f := range []string{"auto-only-in-dev.yaml", "default-apply-timeout.yaml"} {
		if _, err := cl.kubectlStdin("admin", scoped(f), "apply", "-f", "-"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = cl.kubectlAs("admin", "delete", "validatingadmissionpolicy,validatingadmissionpolicybinding", "auto-only-in-dev")
		_, _ = cl.kubectlAs("admin", "delete", "mutatingadmissionpolicy,mutatingadmissionpolicybinding", "default-apply-timeout")
	})
	prod, dev := newNamespace(t), newNamespace(t)
	mustAs(t, "admin", "label", "namespace", prod, "e2e-admission-policies=on")
	mustAs(t, "admin", "label", "namespace", dev, "e2e-admission-policies=on", "env=dev")

	run := func(ns, name, extra string) string {
		return "apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: " + name + "\n  namespace: " + ns +
			"\nspec:\n  source:\n    inline:\n      main.tf: |\n        resource \"terraform_data\" \"x\" {}\n" + extra
	}
	auto := "  approval:\n    mode: Auto\n"
	// terrarun reads the policies from the cluster as they come: until
	// it has, a create may pass; each such run is removed.
	var refused string
	for i := 0; ; i++ {
		name := fmt.Sprintf("auto-%d", i)
		out, err := cl.kubectlStdin("alice", run(prod, name, auto), "create", "-f", "-")
		if err != nil {
			refused = err.Error()
			break
		}
		_, _ = cl.kubectlAs("admin", "delete", "tfr", name, "-n", prod, "--wait=false")
		if i > 60 {
			t.Fatalf("an Auto run outside env=dev was still accepted after a minute: %s", out)
		}
		time.Sleep(time.Second)
	}
	if !strings.Contains(refused, "ValidatingAdmissionPolicy 'auto-only-in-dev'") || !strings.Contains(refused, "approval mode Auto is allowed only in namespaces labelled env=dev") {
		t.Errorf("the refusal does not name the policy and its message: %s", refused)
	}
	if _, err := cl.kubectlStdin("alice", run(dev, "auto", auto), "create", "-f", "-"); err != nil {
		t.Errorf("an Auto run in env=dev was refused: %v", err)
	}
	if _, err := cl.kubectlStdin("alice", run(prod, "manual", ""), "create", "-f", "-"); err != nil {
		t.Fatalf("a Manual run was refused: %v", err)
	}
	if got := mustAs(t, "alice", "get", "tfr", "manual", "-n", prod, "-o", "jsonpath={.spec.timeouts.apply}"); got != "30m0s" {
		t.Errorf("the MutatingAdmissionPolicy's default: timeouts.apply = %q, want 30m0s", got)
	}
}
