package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// markerRun creates a run that plans 300 resources (a plan that takes a
// while) and whose apply sleeps for sleep seconds, then appends a line to a
// marker file, which it returns.
func markerRun(t *testing.T, ns, name string, sleep int, extra string) string {
	t.Helper()
	marker := filepath.Join(sharedDir(t), "applied")
	createRun(t, "alice", ns, name, fmt.Sprintf(`resource "terraform_data" "many" {
  count = 300
  input = count.index
}

resource "terraform_data" "once" {
  provisioner "local-exec" {
    command = "sleep %d; echo applied >> %s"
  }
}
`, sleep, marker), extra)
	return marker
}

// appliedOnce checks that the run ended Succeeded with one plan and one
// apply, and that its apply ran once.
func appliedOnce(t *testing.T, ns, name, marker string) {
	t.Helper()
	if got := waitPhase(t, ns, name, 8*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
		t.Fatalf("run %s: phase %s: %s", name, got, mustAs(t, "admin", "get", "tfr", name, "-n", ns, "-o", "jsonpath={.status.message}"))
	}
	stages := mustAs(t, "admin", "get", "tfr", name, "-n", ns, "-o", `jsonpath={range .status.stages[*]}{.name}-{.attempt} {end}`)
	if strings.TrimSpace(stages) != "plan-1 apply-1" {
		t.Errorf("run %s: stages %q, want one plan and one apply", name, stages)
	}
	data, err := os.ReadFile(marker)
	if err != nil || strings.Count(string(data), "applied") != 1 {
		t.Errorf("run %s: the apply ran %d times (%v), want once", name, strings.Count(string(data), "applied"), err)
	}
}

// TestEtcdFaults: one member of terrarun's etcd is killed while a run plans
// and comes back later; the run goes on. Then two of the three are down for
// a while: writes fail with an error that says so, and once the members are
// back, a run acknowledged before the loss is still there and goes on.
func TestEtcdFaults(t *testing.T) {
	ns := newNamespace(t)
	marker := markerRun(t, ns, "member", 0, "  approval:\n    mode: Auto\n")
	waitPhase(t, ns, "member", 2*time.Minute, "Planning")
	m := cl.trMembers[1]
	m.kill()
	appliedOnce(t, ns, "member", marker)
	if err := cl.restart(m); err != nil {
		t.Fatal(err)
	}

	// A run acknowledged before the quorum is lost, waiting for approval.
	marker = markerRun(t, ns, "acked", 0, "")
	waitPhase(t, ns, "acked", 3*time.Minute, "AwaitingApproval")
	down := cl.trMembers[1:]
	for _, m := range down {
		m.kill()
	}
	out, err := cl.kubectlAs("admin", "create", "configmap", "x", "-n", ns) // the host cluster still works
	if err != nil {
		t.Errorf("the host cluster's API fails while terrarun's etcd has no quorum: %v %s", err, out)
	}
	var refused string
	waitFor(t, 3*time.Minute, "a write to be refused", func() bool {
		_, err := cl.kubectlStdin("alice", "apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: lost\n  namespace: "+ns+
			"\nspec:\n  workspace: lost\n  source:\n    inline:\n      main.tf: \"\"\n", "create", "--request-timeout=40s", "-f", "-")
		if err != nil {
			refused = err.Error()
		}
		return err != nil
	})
	t.Logf("while etcd has no quorum: %s", refused)
	if !strings.Contains(refused, "etcdserver") {
		t.Errorf("the refused write does not say that etcd failed: %s", refused)
	}
	time.Sleep(20 * time.Second) // down for a while: longer than the leader's etcd session
	for _, m := range down {
		if err := cl.restart(m); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 3*time.Minute, "terrarun to answer again", func() bool {
		_, err := cl.kubectlAs("alice", "get", "tfr", "acked", "-n", ns)
		return err == nil
	})
	if out, err := approve(t, "bob", ns, "acked"); err != nil {
		t.Fatalf("approving after the quorum came back: %v %s", err, out)
	}
	appliedOnce(t, ns, "acked", marker)
}

// TestAllReplicasDown: with every terrarun replica down, the APIService is
// unavailable and deleting a namespace that holds runs waits; once the
// replicas are back, the deletion completes (kubernetes#108427).
func TestAllReplicasDown(t *testing.T) {
	ns := newNamespace(t)
	createRun(t, "alice", ns, "doomed", helloTF, "")
	waitPhase(t, ns, "doomed", 3*time.Minute, "AwaitingApproval")

	mustAs(t, "admin", "-n", "terrarun-system", "scale", "deployment/terrarun-apiserver", "--replicas=0")
	t.Cleanup(func() { restoreReplicas(t) })
	waitFor(t, 2*time.Minute, "every replica to be gone", func() bool {
		out, err := cl.kubectlAs("admin", "get", "pods", "-n", "terrarun-system", "--selector=app.kubernetes.io/name=terrarun-apiserver", "-o", "name")
		return err == nil && strings.TrimSpace(out) == ""
	})
	waitFor(t, 2*time.Minute, "the APIService to be unavailable", func() bool {
		out, _ := cl.kubectlAs("admin", "get", "apiservice", "v1alpha1.terrarun.dev", "-o", `jsonpath={.status.conditions[?(@.type=="Available")].status}`)
		return out == "False"
	})
	mustAs(t, "admin", "delete", "namespace", ns, "--wait=false")
	waitFor(t, 2*time.Minute, "the namespace deletion to wait for terrarun", func() bool {
		out, _ := cl.kubectlAs("admin", "get", "namespace", ns, "-o", `jsonpath={.status.phase} {.status.conditions[?(@.type=="NamespaceDeletionDiscoveryFailure")].status}`)
		return out == "Terminating True"
	})

	mustAs(t, "admin", "-n", "terrarun-system", "scale", "deployment/terrarun-apiserver", "--replicas=2")
	mustAs(t, "admin", "wait", "apiservice/v1alpha1.terrarun.dev", "--for=condition=Available", "--timeout=180s")
	waitFor(t, 5*time.Minute, "the namespace to be deleted", func() bool {
		_, err := cl.kubectlAs("admin", "get", "namespace", ns)
		return err != nil && strings.Contains(err.Error(), "NotFound")
	})
}

// TestReplicaFlapping: one terrarun replica crashes over and over (its
// process is killed each time it is back and ready) while 50 runs go
// through, created by a user who retries what the API refuses. Every run
// ends Succeeded, having applied once.
func TestReplicaFlapping(t *testing.T) {
	const runs = 50
	ns := newNamespace(t)
	dir := sharedDir(t)
	pod := leaderPod(t)
	// The crash-looping pod is replaced, as a user would, for the next tests.
	t.Cleanup(func() { restoreReplicas(t, pod) })
	done := make(chan struct{})
	kills := make(chan int, 1)
	go func() {
		n := 0
		defer func() { kills <- n }()
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Second):
			}
			out, _ := cl.kubectlAs("admin", "get", "pod", pod, "-n", "terrarun-system", "-o", "jsonpath={.status.containerStatuses[0].ready} {.status.containerStatuses[0].containerID}")
			ready, id, _ := strings.Cut(out, " ")
			pid, err := strconv.Atoi(id[strings.LastIndex(id, "-")+1:])
			if ready != "true" || err != nil {
				continue
			}
			time.Sleep(2 * time.Second) // serving for a moment
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}()
	defer func() {
		select {
		case <-done:
		default:
			close(done)
		}
	}()

	for i := range runs {
		name := fmt.Sprintf("flap-%02d", i)
		manifest := fmt.Sprintf("apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n"+
			"  workspace: %s\n  approval:\n    mode: Auto\n  source:\n    inline:\n      main.tf: |\n"+
			"        resource \"terraform_data\" \"once\" {\n          provisioner \"local-exec\" {\n            command = \"echo applied >> %s\"\n          }\n        }\n",
			name, ns, name, filepath.Join(dir, name))
		waitFor(t, 2*time.Minute, "run "+name+" to be created", func() bool {
			out, err := cl.kubectlStdin("alice", manifest, "create", "-f", "-")
			return err == nil || strings.Contains(out+err.Error(), "AlreadyExists") || strings.Contains(out+err.Error(), "already exists")
		})
	}
	for i := range runs {
		name := fmt.Sprintf("flap-%02d", i)
		if got := waitPhase(t, ns, name, 8*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
			t.Errorf("run %s: phase %s: %s", name, got, mustAs(t, "admin", "get", "tfr", name, "-n", ns, "-o", "jsonpath={.status.message}"))
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || strings.Count(string(data), "applied") != 1 {
			t.Errorf("run %s applied %d times (%v), want once", name, strings.Count(string(data), "applied"), err)
		}
	}
	close(done)
	n := <-kills
	t.Logf("%d runs ended while replica %s was killed %d times", runs, pod, n)
	if n < 2 {
		t.Errorf("the replica was killed %d times, want it to flap", n)
	}
}

// restoreReplicas brings the chart's two replicas back after a fault, in a
// test's cleanup: it deletes pods (a crash-looping one is replaced without
// its back-off), scales the Deployment to two, and waits for both to be
// ready and for the APIService to be Available again.
func restoreReplicas(t testing.TB, pods ...string) {
	for _, p := range pods {
		_, _ = cl.kubectlAs("admin", "delete", "pod", p, "-n", "terrarun-system", "--grace-period=0", "--force", "--wait=false")
	}
	for _, args := range [][]string{
		{"-n", "terrarun-system", "scale", "deployment/terrarun-apiserver", "--replicas=2"},
		{"-n", "terrarun-system", "rollout", "status", "deployment/terrarun-apiserver", "--timeout=180s"},
		{"wait", "apiservice/v1alpha1.terrarun.dev", "--for=condition=Available", "--timeout=180s"},
	} {
		if out, err := cl.kubectlAs("admin", args...); err != nil {
			t.Errorf("restoring terrarun's replicas: kubectl %s: %v %s", strings.Join(args, " "), err, out)
		}
	}
}
