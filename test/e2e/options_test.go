package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/terrarun/terrarun/test/internal/harness"
)

// TestOptionsChangedWhileRunning: the operator deploys terrarun again with
// other executor options (the plugin cache off, executor pods spread over
// nodes) while a run's plan Job runs. Every replica is replaced; the new
// leader finds the Job the old options built, takes it for terrarun's (not
// forged), and the run plans and applies in it (an Auto run). The options
// are restored afterwards.
func TestOptionsChangedWhileRunning(t *testing.T) {
	ns := newNamespace(t)
	// The plan reads a FIFO: it runs until the test opens the other end.
	gate := newGate(t, sharedDir(t))
	createRun(t, "alice", ns, "midway", harness.TestProviderRequirement+fmt.Sprintf(`
data "testing_file" "gate" {
  path = %q
}

resource "terraform_data" "x" {
  input = data.testing_file.gate.content
}
`, gate), "  approval:\n    mode: Auto\n")
	waitFor(t, 3*time.Minute, "the plan to wait at its gate", func() bool {
		log, _ := cl.kubectlAs("admin", "get", "--raw", raw(ns, "midway", "logs?stage=plan"))
		return strings.Contains(log, "terrarun: running tofu plan")
	})
	if vols := jobVolumes(t, ns, "midway-plan-1"); !strings.Contains(vols, "plugin-cache") {
		t.Fatalf("the plan Job has no plugin cache (volumes %s): the chart's options in e2e have changed", vols)
	}

	t.Cleanup(func() {
		if err := cl.applyTerrarun(nil); err != nil {
			t.Errorf("restoring terrarun's options: %v", err)
		}
	})
	err := cl.applyTerrarun(func(values map[string]any) {
		delete(values, "pluginCache")
		values["extraArgs"] = append(values["extraArgs"].([]any), "--executor-spread-topology-key=kubernetes.io/hostname")
	})
	if err != nil {
		t.Fatalf("deploying terrarun with other options: %v", err)
	}

	stop := openGate(gate)
	defer stop()
	if got := waitPhase(t, ns, "midway", 4*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
		t.Fatalf("run midway: phase %s: %s", got, mustAs(t, "admin", "get", "tfr", "midway", "-n", ns, "-o", "jsonpath={.status.message}"))
	}
	stages := mustAs(t, "admin", "get", "tfr", "midway", "-n", ns, "-o", `jsonpath={range .status.stages[*]}{.name}-{.attempt}-{.reason} {end}`)
	if strings.TrimSpace(stages) != "plan-1-Completed apply-1-Completed" {
		t.Errorf("stages %q, want the plan and its apply completed, once each", stages)
	}
}

// jobVolumes names the volumes of a Job's pod template.
func jobVolumes(t *testing.T, ns, job string) string {
	t.Helper()
	return mustAs(t, "admin", "get", "job", job, "-n", ns, "-o", "jsonpath={.spec.template.spec.volumes[*].name}")
}
