package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// TestStageLimits is finding 8 of the third review: a local stage wrote
// 2 GiB into its namespace's state directory, which stayed after the run,
// and had no process, memory or CPU limit. Each limit is set low here, and
// a stage goes over each: it fails naming the limit and its flag, and a
// run of another namespace still succeeds.
func TestStageLimits(t *testing.T) {
	e := newRunEnv(t, "--local-stage-memory=256Mi", "--local-stage-processes=200", "--local-stage-cpu=500m",
		"--local-stage-disk=64Mi", "--local-namespace-state-size=32Mi")
	// The namespace team-c goes over its state limit: every stage of it
	// that writes its state fails then, so the others are in default.
	stateDir := filepath.Join(e.DataDir, "state", "team-c")
	stage := func(name, command string) {
		manifest := runManifest(name, inline(map[string]string{"main.tf": `resource "terraform_data" "x" {
  provisioner "local-exec" {
    command = "` + command + `"
  }
}`}, "  workspace: ws-"+name+"\n  approval:\n    mode: Auto\n"))
		if name == "state" {
			manifest = strings.Replace(manifest, "metadata:\n", "metadata:\n  namespace: team-c\n", 1)
		}
		e.create(t, manifest)
	}
	stage("memory", "awk 'BEGIN { s = \\\"x\\\"; for (i = 0; i < 40; i++) s = s s; print length(s) }'")
	stage("processes", "for i in $(seq 400); do sleep 5 & done; wait; exit 1")
	stage("disk", "dd if=/dev/zero of=$HOME/big bs=1M count=100 && sleep 10")
	// Its workspace's state directory is the only one it writes: the
	// namespace's is read-only.
	stage("state", "! touch "+stateDir+"/junk && dd if=/dev/zero of="+stateDir+"/ws-state/junk bs=1M count=40 && sleep 10")
	stage("cpu", "sleep 5")

	// While the cpu stage runs, its cgroups hold it with the limits set.
	cgroups := waitStageCgroups(t, e.Pid())
	for file, want := range map[string]string{"cpu/cpu.cfs_quota_us": "50000", "memory/memory.limit_in_bytes": "268435456", "pids/pids.max": "200"} {
		controller, name, _ := strings.Cut(file, "/")
		got, err := os.ReadFile(filepath.Join(cgroups[controller], name))
		if err != nil || strings.TrimSpace(string(got)) != want {
			t.Errorf("%s of a running stage = %q (%v), want %s", file, got, err, want)
		}
	}

	for name, want := range map[string]string{
		"memory":    "its memory limit of 268435456 bytes (--local-stage-memory)",
		"processes": "its limit of 200 processes and threads (--local-stage-processes)",
		"disk":      "over its limit of 67108864 bytes (--local-stage-disk)",
		"state":     "over the namespace's limit of 33554432 bytes (--local-namespace-state-size)",
	} {
		ns := "default"
		if name == "state" {
			ns = "team-c"
		}
		run, err := harness.WaitForPhase(ctxT(t), e.client, ns, name, 3*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded)
		if err != nil {
			t.Fatal(err)
		}
		if run.Status.Phase != v1alpha1.RunPhaseFailed || !strings.Contains(run.Status.Message, want) {
			t.Errorf("run %s: %s: %q, want Failed saying %q", name, run.Status.Phase, run.Status.Message, want)
		}
		if st := run.Status.Stages[len(run.Status.Stages)-1]; st.Reason != "LimitExceeded" {
			t.Errorf("run %s: its last stage ended %s, want LimitExceeded", name, st.Reason)
		}
	}
	if run := e.waitPhase(t, "cpu", 3*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded); run.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Errorf("run cpu (throttled, never stopped): %s: %s", run.Status.Phase, run.Status.Message)
	}
	// team-c is over its limit: a stage that writes its state there fails,
	// naming the limit.
	e.create(t, strings.Replace(runManifest("full", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {}`}, "  approval:\n    mode: Auto\n")),
		"metadata:\n", "metadata:\n  namespace: team-c\n", 1))
	if full, err := harness.WaitForPhase(ctxT(t), e.client, "team-c", "full", 3*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded); err != nil ||
		full.Status.Phase != v1alpha1.RunPhaseFailed || !strings.Contains(full.Status.Message, "--local-namespace-state-size") {
		t.Errorf("a run of the namespace over its state limit: %v %+v", err, full.Status)
	}
	// An apply's additions to the state directory are kept (they may be
	// state), and the namespace stays over its limit; another namespace's
	// runs go on.
	if _, err := os.Stat(filepath.Join(stateDir, "ws-state", "junk")); err != nil {
		t.Errorf("the apply's file in the state directory: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(stateDir, "junk")); err == nil {
		t.Errorf("a stage wrote its namespace's state directory")
	}
	e.create(t, strings.Replace(runManifest("after", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {}`}, "  approval:\n    mode: Auto\n")),
		"metadata:\n", "metadata:\n  namespace: team-b\n", 1))
	after, err := harness.WaitForPhase(ctxT(t), e.client, "team-b", "after", 3*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded)
	if err != nil || after.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Errorf("another namespace's run: %v %+v", err, after)
	}
	// No stage's cgroup is left.
	for _, c := range []string{"cpu", "memory", "pids"} {
		left, _ := filepath.Glob(filepath.Join(ownCgroup(t, c), "terrarun-stages", fmt.Sprintf("%d.*", e.Pid()), "*", "cgroup.procs"))
		if len(left) != 0 {
			t.Errorf("a stage's cgroup is left in %s: %v", c, left)
		}
	}
}

// ownCgroup is the directory of this process's cgroup v1 of controller,
// under which the server it starts makes its stages'.
func ownCgroup(t *testing.T, controller string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[1] == controller {
			return filepath.Join("/sys/fs/cgroup", controller, parts[2])
		}
	}
	t.Fatalf("no cgroup v1 %s hierarchy for this process: the host gives no cgroup to bound stages with", controller)
	return ""
}

// waitStageCgroups waits for a cgroup of a stage of the server with pid
// that holds a process, and returns its directories by controller.
func waitStageCgroups(t *testing.T, pid int) map[string]string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		dirs, _ := filepath.Glob(filepath.Join(ownCgroup(t, "cpu"), "terrarun-stages", fmt.Sprintf("%d.*", pid), "*"))
		for _, d := range dirs {
			procs, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if err != nil || strings.TrimSpace(string(procs)) == "" {
				continue
			}
			rel, _ := filepath.Rel(filepath.Join(ownCgroup(t, "cpu"), "terrarun-stages"), d)
			return map[string]string{"cpu": d, "memory": filepath.Join(ownCgroup(t, "memory"), "terrarun-stages", rel), "pids": filepath.Join(ownCgroup(t, "pids"), "terrarun-stages", rel)}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal(fmt.Errorf("no stage cgroup held a process within 2 minutes"))
	return nil
}
