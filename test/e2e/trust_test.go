package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestStageSecretSwapped is the review's attack on the stage Secret: carol,
// who may only get, create and delete Secrets in the namespace, waits for
// the stage Secret of another user's run, deletes it and creates it again
// with the same labels and owner and her own configuration, before the
// kubelet mounts it (here made certain: the run's pods wait for a node
// label that the test sets once she is done). The executor finds that what
// it was handed is not what its pod's binding names, and runs nothing: the
// plan stage attempt ends ExecutorForged, and neither the plan an approver
// sees nor what an Auto run applies is hers.
func TestStageSecretSwapped(t *testing.T) {
	ns := newNamespace(t)
	mustAs(t, "admin", "create", "role", "secret-swapper", "-n", ns, "--verb=get,create,delete", "--resource=secrets")
	mustAs(t, "admin", "create", "rolebinding", "carol-secrets", "-n", ns, "--role=secret-swapper", "--user=carol")
	hold := "terrarun-e2e/hold-" + ns
	node := nodes[0].name
	t.Cleanup(func() { _, _ = cl.kubectlAs("admin", "label", "node", node, hold+"-") })
	attacker := `output "greeting" {
  value = "carol-was-here"
}
`
	for _, mode := range []string{"Manual", "Auto"} {
		name := "swap-" + strings.ToLower(mode)
		createRun(t, "alice", ns, name, helloTF, fmt.Sprintf("  approval:\n    mode: %s\n  executor:\n    nodeSelector:\n      %s: \"true\"\n", mode, hold))
		secret := name + "-plan-1-stage"
		var js string
		waitFor(t, 2*time.Minute, "the stage Secret "+secret, func() bool {
			out, err := cl.kubectlAs("carol", "get", "secret", secret, "-n", ns, "-o", "json")
			js = out
			return err == nil
		})
		var s map[string]any
		if err := json.Unmarshal([]byte(js), &s); err != nil {
			t.Fatal(err)
		}
		meta := s["metadata"].(map[string]any)
		for _, k := range []string{"resourceVersion", "uid", "creationTimestamp", "managedFields"} {
			delete(meta, k)
		}
		data := s["data"].(map[string]any)
		if _, ok := data["src-main.tf"]; !ok {
			t.Fatalf("the stage Secret has no src-main.tf: %v", data)
		}
		data["src-main.tf"] = b64(attacker)
		forged, _ := json.Marshal(s)
		mustAs(t, "carol", "delete", "secret", secret, "-n", ns)
		if _, err := cl.kubectlStdin("carol", string(forged), "create", "-f", "-"); err != nil {
			t.Fatal(err)
		}
	}
	mustAs(t, "admin", "label", "node", node, hold+"=true")

	for _, run := range []struct{ name, phase string }{{"swap-manual", "AwaitingApproval"}, {"swap-auto", "Succeeded"}} {
		got := waitPhase(t, ns, run.name, 5*time.Minute, run.phase, "Failed")
		if got != run.phase {
			t.Errorf("run %s is %s, want %s: %s", run.name, got, run.phase, mustAs(t, "admin", "get", "tfr", run.name, "-n", ns, "-o", "jsonpath={.status.message}"))
		}
		stages := mustAs(t, "admin", "get", "tfr", run.name, "-n", ns, "-o", `jsonpath={range .status.stages[*]}{.name}-{.attempt}={.reason}{"\n"}{end}`)
		if !strings.Contains(stages, "plan-1=ExecutorForged") {
			t.Errorf("run %s (%s): stages %q, want plan attempt 1 ended ExecutorForged", run.name, got, stages)
		}
		for _, part := range []string{"plan", "plan?format=json"} {
			if out := mustAs(t, "admin", "get", "--raw", raw(ns, run.name, part)); strings.Contains(out, "carol-was-here") {
				t.Errorf("run %s: carol's configuration is in its %s:\n%s", run.name, part, out)
			}
		}
		if events := mustAs(t, "admin", "get", "events", "-n", ns, "--field-selector", "involvedObject.name="+run.name); !strings.Contains(events, "ExecutorForged") {
			t.Errorf("run %s: no ExecutorForged Event:\n%s", run.name, events)
		}
	}
	if out := mustAs(t, "admin", "get", "tfr", "swap-auto", "-n", ns, "-o", "jsonpath={.status.outputs}"); strings.Contains(out, "carol-was-here") || !strings.Contains(out, "hello") {
		t.Errorf("the Auto run applied carol's configuration: outputs %s", out)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestNamespaceDeletedWithDestroyOnDeleteWorkspace deletes a namespace that
// holds a destroyOnDelete workspace. A namespace being deleted takes no new
// run, nor the Jobs and Secrets a stage needs, so the workspace cannot
// destroy: it goes without destroying, says so in the leader's log (its
// Event goes with the namespace), and the namespace is gone within minutes
// instead of staying Terminating until an admin abandons the workspace.
func TestNamespaceDeletedWithDestroyOnDeleteWorkspace(t *testing.T) {
	ns := newNamespace(t)
	ws := fmt.Sprintf(`apiVersion: terrarun.dev/v1alpha1
kind: TerraformWorkspace
metadata:
  name: doomed
  namespace: %s
spec:
  destroyOnDelete: true
  approval:
    mode: Auto
  template:
    workspace: doomed
    source:
      inline:
        main.tf: |
          resource "terraform_data" "x" {}
`, ns)
	if _, err := cl.kubectlStdin("alice", ws, "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "doomed-1", 5*time.Minute, "Succeeded")
	waitFor(t, time.Minute, "the workspace's destroy finalizer", func() bool {
		out, _ := cl.kubectlAs("admin", "get", "tfws", "doomed", "-n", ns, "-o", "jsonpath={.metadata.finalizers}")
		return strings.Contains(out, "terrarun.dev/destroy")
	})
	mustAs(t, "admin", "delete", "namespace", ns, "--wait=false")
	waitFor(t, 5*time.Minute, "namespace "+ns+" to be gone", func() bool {
		_, err := cl.kubectlAs("admin", "get", "namespace", ns)
		return err != nil
	})
	logs := mustAs(t, "admin", "logs", "-n", "terrarun-system", leaderPod(t))
	if !strings.Contains(logs, "Abandoned a workspace's resources") || !strings.Contains(logs, "Namespace "+ns+" is being deleted") {
		t.Errorf("the leader's log does not record the abandonment of workspace %s/doomed", ns)
	}
}
