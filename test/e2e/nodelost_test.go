package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/terrarun/terrarun/test/internal/harness"
)

// TestNodeLost: a node dies with an executor pod on it (its agent stops, its
// containers with it). A plan stage is reported lost and retried on another
// node, which releases the state lock the lost attempt left; an apply stage
// is reported lost and never run again, and the lock it left is named, with
// the setting that releases it.
func TestNodeLost(t *testing.T) {
	ns := newNamespace(t)
	victim := cordonAllButOneFreeNode(t)
	dir := sharedDir(t)

	gate, marker := gatedRun(t, ns, "lostplan", dir)
	waitStageHoldsLock(t, ns, "lostplan-plan-1", victim)
	killNode(t, victim)
	stop := openGate(gate)
	defer stop()
	if got := waitPhase(t, ns, "lostplan", 4*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
		t.Fatalf("run lostplan: phase %s: %s", got, mustAs(t, "admin", "get", "tfr", "lostplan", "-n", ns, "-o", "jsonpath={.status.message}"))
	}
	stages := mustAs(t, "admin", "get", "tfr", "lostplan", "-n", ns, "-o", `jsonpath={range .status.stages[*]}{.name}-{.attempt}-{.reason} {end}`)
	if strings.TrimSpace(stages) != "plan-1-ExecutorLost plan-2-Completed apply-1-Completed" {
		t.Errorf("stages %q, want plan-1 lost, then plan-2 and apply-1", stages)
	}
	if node := jobNode(t, ns, "lostplan-plan-2"); node == victim || node == "" {
		t.Errorf("the plan was retried on node %q, want another than %s", node, victim)
	}
	if log := mustAs(t, "admin", "get", "--raw", raw(ns, "lostplan", "logs?stage=plan&attempt=2")); !strings.Contains(log, "terrarun: took over the state lock of run lostplan") ||
		!strings.Contains(log, "plan stage attempt 1, which has ended") {
		t.Errorf("the retried plan's log does not show the lost attempt's lock released:\n%s", log)
	}
	ranOnce(t, marker)
	restartNode(t, victim)

	// An apply lost with its node.
	victim = cordonAllButOneFreeNode(t)
	marker = slowApplyRun(t, ns, "lostapply", dir)
	loseApply(t, ns, "lostapply", victim, waitStageHoldsLock)
	msg := mustAs(t, "admin", "get", "tfr", "lostapply", "-n", ns, "-o", "jsonpath={.status.message}")
	for _, want := range []string{"The apply stage attempt 1 was lost with its executor", victim, "never re-applies", "spec.forceUnlock"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the lost apply's message lacks %q: %s", want, msg)
		}
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the lost apply's provisioner finished (%v)", err)
	}

	// Its lock stays, and the next plan on the state names it.
	stateRun := func(name, extra string) {
		manifest := fmt.Sprintf("apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n"+
			"  workspace: lostapply\n  approval:\n    mode: Auto\n  source:\n    inline:\n      main.tf: |\n        resource \"terraform_data\" \"after\" {}\n%s", name, ns, extra)
		if out, err := cl.kubectlStdin("alice", manifest, "create", "-f", "-"); err != nil {
			t.Fatalf("creating run %s: %v %s", name, err, out)
		}
	}
	stateRun("after", "")
	if got := waitPhase(t, ns, "after", 3*time.Minute, "Succeeded", "Failed"); got != "Failed" {
		t.Fatalf("run after: phase %s, want Failed on the lost apply's lock", got)
	}
	msg = mustAs(t, "admin", "get", "tfr", "after", "-n", ns, "-o", "jsonpath={.status.message}")
	m := regexp.MustCompile(`the state is locked: lock ID (\S+), taken by run lostapply's apply stage attempt 1 for OperationTypeApply\..*spec\.forceUnlock: (\S+)`).FindStringSubmatch(msg)
	if m == nil || m[1] != m[2] {
		t.Fatalf("the plan that found the lost apply's lock does not name it and how to release it: %s", msg)
	}
	t.Logf("reported: %s", msg)
	// Another lock's ID releases nothing.
	stateRun("unlock-other", "  forceUnlock: 00000000-1111-2222-3333-444444444444\n")
	if got := waitPhase(t, ns, "unlock-other", 3*time.Minute, "Succeeded", "Failed"); got != "Failed" {
		t.Fatalf("run unlock-other, with another lock's ID: phase %s, want Failed", got)
	}
	if out := mustAs(t, "admin", "get", "--raw", raw(ns, "lostapply", "statelock")); !strings.Contains(out, m[1]) {
		t.Fatalf("the lost apply's lock %s is gone after a forceUnlock of another ID; lock: %s", m[1], out)
	}
	stateRun("unlock", "  forceUnlock: "+m[1]+"\n")
	if got := waitPhase(t, ns, "unlock", 3*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
		t.Fatalf("run unlock: phase %s: %s", got, mustAs(t, "admin", "get", "tfr", "unlock", "-n", ns, "-o", "jsonpath={.status.message}"))
	}
	restartNode(t, victim)
}

// gatedRun creates an Auto run whose plan reads a FIFO in dir: it holds the
// state lock until the test opens the FIFO's other end (openGate). Its
// apply appends a line to a marker file. It returns the FIFO and the
// marker.
func gatedRun(t *testing.T, ns, name, dir string) (gate, marker string) {
	t.Helper()
	gate = newGate(t, dir)
	marker = filepath.Join(dir, name+"-applied")
	createRun(t, "alice", ns, name, harness.TestProviderRequirement+fmt.Sprintf(`
data "testing_file" "gate" {
  path = %q
}

resource "terraform_data" "once" {
  input = data.testing_file.gate.content
  provisioner "local-exec" {
    command = "echo applied >> %s"
  }
}
`, gate, marker), "  approval:\n    mode: Auto\n")
	return gate, marker
}

// slowApplyRun creates a Manual run whose apply sleeps ten minutes, then
// appends a line to a marker file in dir, which it returns.
func slowApplyRun(t *testing.T, ns, name, dir string) string {
	t.Helper()
	marker := filepath.Join(dir, name+"-applied")
	createRun(t, "alice", ns, name, fmt.Sprintf(`resource "terraform_data" "once" {
  provisioner "local-exec" {
    command = "sleep 600; echo applied >> %s"
  }
}
`, marker), "")
	return marker
}

// loseApply approves the run name, waits until its apply's pod holds the
// state lock on node victim (holdsLock) and runs its provisioner, kills the
// node, and checks that the run fails with its apply lost and never run
// again.
func loseApply(t *testing.T, ns, name, victim string, holdsLock func(t *testing.T, ns, stage, node string)) {
	t.Helper()
	waitPhase(t, ns, name, 4*time.Minute, "AwaitingApproval")
	if out, err := approve(t, "bob", ns, name); err != nil {
		t.Fatalf("approve: %v %s", err, out)
	}
	holdsLock(t, ns, name+"-apply-1", victim)
	waitFor(t, time.Minute, "the apply to run its provisioner", func() bool {
		log, _ := cl.kubectlAs("admin", "get", "--raw", raw(ns, name, "logs?stage=apply"))
		return strings.Contains(log, "Provisioning with 'local-exec'")
	})
	killNode(t, victim)
	if got := waitPhase(t, ns, name, 3*time.Minute, "Succeeded", "Failed"); got != "Failed" {
		t.Fatalf("run %s: phase %s, want Failed", name, got)
	}
	stages := mustAs(t, "admin", "get", "tfr", name, "-n", ns, "-o", `jsonpath={range .status.stages[*]}{.name}-{.attempt}-{.reason} {end}`)
	if strings.TrimSpace(stages) != "plan-1-Completed apply-1-ExecutorLost" {
		t.Errorf("stages %q, want the apply lost and never run again", stages)
	}
}

// ranOnce checks that the marker file holds one line "applied".
func ranOnce(t *testing.T, marker string) {
	t.Helper()
	if data, err := os.ReadFile(marker); err != nil || strings.Count(string(data), "applied") != 1 {
		t.Errorf("the apply ran %d times (%v), want once", strings.Count(string(data), "applied"), err)
	}
}

// sharedDir returns a directory that executor pods can write, outside the
// /tmp their pods mount an emptyDir over.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "terrarun-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// cordonAllButOneFreeNode cordons every node but one that runs no terrarun
// replica, which it returns: executor pods land there, and killing it
// leaves terrarun serving.
func cordonAllButOneFreeNode(t *testing.T) string {
	t.Helper()
	busy := strings.Fields(mustAs(t, "admin", "get", "pods", "-n", "terrarun-system", "--selector=app.kubernetes.io/name=terrarun-apiserver",
		"-o", "jsonpath={.items[*].spec.nodeName}"))
	free := ""
	for _, n := range nodes {
		if !slices.Contains(busy, n.name) && free == "" {
			free = n.name
			continue
		}
		mustAs(t, "admin", "cordon", n.name)
		t.Cleanup(func() { _, _ = cl.kubectlAs("admin", "uncordon", n.name) })
	}
	if free == "" {
		t.Fatalf("every node runs a terrarun replica: %v", busy)
	}
	return free
}

// jobNode is the node of the Job's pod.
func jobNode(t *testing.T, ns, job string) string {
	out, _ := cl.kubectlAs("admin", "get", "pods", "-n", ns, "--selector=batch.kubernetes.io/job-name="+job, "-o", "jsonpath={.items[0].spec.nodeName}")
	return out
}

// waitStageHoldsLock waits until the Job's pod runs on node and the state
// lock of its run is taken.
func waitStageHoldsLock(t *testing.T, ns, job, node string) {
	t.Helper()
	waitFor(t, 3*time.Minute, job+" to run on "+node, func() bool {
		out, _ := cl.kubectlAs("admin", "get", "pods", "-n", ns, "--selector=batch.kubernetes.io/job-name="+job, "-o", "jsonpath={.items[0].spec.nodeName} {.items[0].status.phase}")
		return out == node+" Running"
	})
	run := job[:strings.LastIndex(job[:strings.LastIndex(job, "-")], "-")]
	waitFor(t, 2*time.Minute, "the state lock of "+run+" to be taken", func() bool {
		_, err := cl.kubectlAs("admin", "get", "--raw", raw(ns, run, "statelock"))
		return err == nil
	})
}

// killNode stops the node's agent, as if the node died.
func killNode(t *testing.T, node string) {
	t.Helper()
	cl.agents[node].kill()
	t.Cleanup(func() { _ = cl.agents[node].start() }) // when the test fails before restartNode
	for _, n := range nodes {
		if n.name != node {
			_, _ = cl.kubectlAs("admin", "uncordon", n.name)
		}
	}
}

// restartNode starts the node's agent again and waits for the node to be
// Ready without taints.
func restartNode(t *testing.T, node string) {
	t.Helper()
	if err := cl.agents[node].start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, node+" to be Ready again", func() bool {
		out, _ := cl.kubectlAs("admin", "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.spec.taints}`)
		return out == "True "
	})
}

// newGate makes a FIFO in dir that anyone may open, for a plan to read
// (the test provider's testing_file): the plan waits there until openGate.
func newGate(t *testing.T, dir string) string {
	t.Helper()
	gate := filepath.Join(dir, "gate")
	if err := syscall.Mkfifo(gate, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(gate, 0o666); err != nil {
		t.Fatal(err)
	}
	return gate
}

// openGate lets every reader of the FIFO gate through, until stop is called.
func openGate(gate string) (stop func()) {
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			// Without a reader, a non-blocking open fails (ENXIO).
			f, err := os.OpenFile(gate, os.O_WRONLY|syscall.O_NONBLOCK, 0)
			if err != nil {
				continue
			}
			_, _ = f.WriteString("open")
			f.Close()
		}
	}()
	return func() { close(done) }
}
