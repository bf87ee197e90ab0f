package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// kill ends the server with SIGKILL, as a crash or an OOM kill would, and
// waits until it is gone. Its children get SIGTERM through Pdeathsig.
func (s *binaryServer) kill(t *testing.T) {
	t.Helper()
	start := time.Now()
	if err := s.Kill(); err != nil {
		t.Fatalf("killing terrarun-apiserver: %v", err)
	}
	t.Logf("terrarun-apiserver was reaped %s after SIGKILL", time.Since(start))
}

// envOn is a runEnv of the admin user on a server started by the test.
func envOn(s *binaryServer) *runEnv {
	return &runEnv{binaryServer: s, client: versioned.NewForConfigOrDie(s.Config)}
}

// localProc is a process on this host.
type localProc struct {
	pid  int
	args []string
	cwd  string
}

func (p localProc) String() string {
	return fmt.Sprintf("pid %d (cwd %s): %s", p.pid, p.cwd, strings.Join(p.args, " "))
}

// processesUnder returns the live processes that work in dir or below it, or
// name a path in it on their command line: the executors and terraform
// processes of a server on data directory dir, and what their provisioners
// start. Zombies have no working directory and no command line, and are not
// returned.
func processesUnder(dir string) []localProc {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	self := os.Getpid()
	var out []localProc
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		cwd, _ := os.Readlink(filepath.Join("/proc", ent.Name(), "cwd"))
		p := localProc{pid: pid, args: strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"), cwd: cwd}
		if cwd == dir || strings.HasPrefix(cwd, dir+"/") || bytes.Contains(cmdline, []byte(dir+"/")) {
			out = append(out, p)
		}
	}
	return out
}

// waitNoProcessesUnder waits until no process works under dir, and fails the
// test with the ones left when timeout passes. It returns how long it waited.
func waitNoProcessesUnder(t *testing.T, dir string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		left := processesUnder(dir)
		if len(left) == 0 {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, p := range left {
				b.WriteString("\n  " + p.String())
			}
			t.Fatalf("processes of the killed server are still running %s after it died:%s", timeout, b.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitProcessUnder waits until a process under dir matches, and returns it.
// It gives up, returning false, when stop returns true or timeout passes.
func waitProcessUnder(t *testing.T, dir string, timeout time.Duration, match func(localProc) bool, stop func() bool) (localProc, bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, p := range processesUnder(dir) {
			if match(p) {
				return p, true
			}
		}
		if stop != nil && stop() {
			return localProc{}, false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return localProc{}, false
}

// phaseIs reports whether the run's phase is one of phases right now.
func (e *runEnv) phaseIs(name string, phases ...v1alpha1.RunPhase) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := e.client.TerrarunV1alpha1().TerraformRuns("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, p := range phases {
		if r.Status.Phase == p {
			return true
		}
	}
	return false
}

func stagesOf(run *v1alpha1.TerraformRun, name v1alpha1.StageName) []v1alpha1.StageStatus {
	var out []v1alpha1.StageStatus
	for _, s := range run.Status.Stages {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// stagesString lists the stages of a run: name, attempt, reason, exit code.
func stagesString(run *v1alpha1.TerraformRun) string {
	var parts []string
	for _, s := range run.Status.Stages {
		code := "-"
		if s.ExitCode != nil {
			code = strconv.Itoa(int(*s.ExitCode))
		}
		parts = append(parts, fmt.Sprintf("%s#%d %s (exit %s)", s.Name, s.Attempt, s.Reason, code))
	}
	return strings.Join(parts, ", ")
}

// lines returns the lines of a file, none when it does not exist.
func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimRight(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func isEngine(p localProc, subcommand string) bool {
	if len(p.args) < 2 || filepath.Base(p.args[0]) != engineName {
		return false
	}
	for _, a := range p.args[1:] {
		if a == subcommand {
			return true
		}
	}
	return false
}

// TestRestartMidPlan kills the server with SIGKILL while terraform plans, and
// starts it again on the same data directory: the lost plan attempt is
// recorded as ExecutorLost, the plan runs again, and the run applies once.
func TestRestartMidPlan(t *testing.T) {
	dataDir := t.TempDir()
	// In its workspace's state directory: the one host directory, besides
	// its own work directory, that a sandboxed stage may write.
	applied := filepath.Join(dataDir, "state", "default", "restart", "applied.txt")
	// Evaluating the locals takes seconds in the plan (and in the apply, but
	// there is nothing else to do), unlike thousands of resources, whose apply
	// rewrites the local state file after each one.
	tf := fmt.Sprintf(`locals {
  cells = flatten([for i in range(400) : [for j in range(400) : "${i}-${j}"]])
}

resource "terraform_data" "once" {
  input = length(local.cells)
  provisioner "local-exec" {
    command = "echo applied >> %s"
  }
}
`, applied)

	s1 := startBinary(t, dataDir)
	e1 := envOn(s1)
	e1.create(t, runManifest("restart", inline(map[string]string{"main.tf": tf}, "  workspace: restart\n  approval:\n    mode: Auto\n")))
	e1.waitPhase(t, "restart", 3*time.Minute, v1alpha1.RunPhasePlanning, v1alpha1.RunPhaseApplying, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)

	// Wait until terraform plans, so that the kill lands in the middle of it.
	p, midPlan := waitProcessUnder(t, dataDir, 3*time.Minute,
		func(p localProc) bool { return isEngine(p, "plan") },
		func() bool { return !e1.phaseIs("restart", v1alpha1.RunPhasePlanning) })
	if midPlan {
		t.Logf("killing terrarun-apiserver while %s", p)
	} else {
		t.Logf("the plan ended before terraform plan was seen; killing terrarun-apiserver anyway")
	}
	s1.kill(t)
	// The executor gets SIGTERM and stops terraform; nothing is left behind.
	t.Logf("the killed server's children were gone %s after the kill", waitNoProcessesUnder(t, dataDir, 90*time.Second))

	s2 := startBinary(t, dataDir)
	e2 := envOn(s2)
	run := e2.waitPhase(t, "restart", 10*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseCanceled)
	if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Fatalf("after the restart the run ended %s: %s", run.Status.Phase, run.Status.Message)
	}
	plans := stagesOf(run, v1alpha1.StagePlan)
	t.Logf("stages: %s", stagesString(run))
	if midPlan {
		if len(plans) < 2 {
			t.Errorf("the plan killed in flight was not retried: plan stages %+v", plans)
		} else if plans[0].Attempt != 1 || plans[0].Reason != v1alpha1.ReasonExecutorLost || plans[1].Attempt != 2 || plans[len(plans)-1].Reason != "Completed" {
			t.Errorf("plan stages %+v: want attempt 1 ExecutorLost, then attempt 2 and a last one Completed", plans)
		}
	} else if len(plans) < 1 || plans[len(plans)-1].Reason != "Completed" {
		t.Errorf("plan stages %+v", plans)
	}
	if n := applyStages(run); n != 1 {
		t.Errorf("%d apply stages, want exactly 1: %+v", n, run.Status.Stages)
	}
	if p := run.Status.Plan; p == nil || p.Add != 1 {
		t.Errorf("status.plan = %+v, want 1 to add", p)
	}
	if got := lines(t, applied); len(got) != 1 || got[0] != "applied" {
		t.Errorf("the apply's provisioner wrote %q, want exactly one line", got)
	}
	// The retried plan's log is served; so is the lost attempt's.
	if l := mustKubectl(t, e2.Kubeconfig, "get", "--raw", raw("restart", "logs?stage=plan")); !strings.Contains(l, "1 to add") {
		t.Errorf("the last plan log lacks the summary:\n%s", tail(l, 2000))
	}
	if midPlan {
		if _, err := kubectl(t, e2.Kubeconfig, "get", "--raw", raw("restart", "logs?stage=plan&attempt=1")); err != nil {
			t.Errorf("the log of the lost plan attempt: %v", err)
		}
	}
	waitNoProcessesUnder(t, dataDir, 30*time.Second)
}

// TestRestartMidApply kills the server with SIGKILL while the apply runs:
// after the restart the run fails with ExecutorLost, and terrarun never
// applies again.
func TestRestartMidApply(t *testing.T) {
	dataDir := t.TempDir()
	// In its workspace's state directory: the one host directory, besides
	// its own work directory, that a sandboxed stage may write.
	applied := filepath.Join(dataDir, "state", "default", "restart", "applied.txt")
	tf := fmt.Sprintf(`resource "terraform_data" "slow" {
  provisioner "local-exec" {
    command = "sleep 20; echo applied >> %s"
  }
}
`, applied)

	s1 := startBinary(t, dataDir)
	e1 := envOn(s1)
	e1.create(t, runManifest("restart", inline(map[string]string{"main.tf": tf}, "  workspace: restart\n  approval:\n    mode: Auto\n")))
	e1.waitPhase(t, "restart", 3*time.Minute, v1alpha1.RunPhaseApplying, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	sleep, ok := waitProcessUnder(t, dataDir, 2*time.Minute,
		func(p localProc) bool {
			return len(p.args) == 2 && filepath.Base(p.args[0]) == "sleep" && p.args[1] == "20"
		},
		func() bool { return !e1.phaseIs("restart", v1alpha1.RunPhaseApplying) })
	if !ok {
		t.Fatalf("the apply's `sleep 20` never ran; phase Applying: %v", e1.phaseIs("restart", v1alpha1.RunPhaseApplying))
	}
	// The provisioner would append its line once the sleep ends.
	writesAt := time.Now().Add(20 * time.Second)
	t.Logf("killing terrarun-apiserver while %s", sleep)
	s1.kill(t)
	// The executor gets SIGTERM, stops terraform and kills what the
	// provisioner left: the sleep, and with it the echo, end here.
	t.Logf("the killed server's children were gone %s after the kill", waitNoProcessesUnder(t, dataDir, 90*time.Second))

	s2 := startBinary(t, dataDir)
	e2 := envOn(s2)
	run := e2.waitPhase(t, "restart", 5*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseCanceled)
	t.Logf("stages: %s", stagesString(run))
	if run.Status.Phase != v1alpha1.RunPhaseFailed {
		t.Fatalf("after a restart mid-apply the run ended %s: %s", run.Status.Phase, run.Status.Message)
	}
	c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionApplied)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonExecutorLost || !strings.Contains(c.Message, "never re-applies") {
		t.Errorf("Applied condition = %+v, want False, ExecutorLost, saying terrarun never re-applies", c)
	}
	if !strings.Contains(run.Status.Message, "never re-applies") {
		t.Errorf("status.message = %q, want it to say terrarun never re-applies", run.Status.Message)
	}
	applies := stagesOf(run, v1alpha1.StageApply)
	if len(applies) != 1 || applies[0].Reason != v1alpha1.ReasonExecutorLost || applies[0].CompletionTime == nil {
		t.Errorf("apply stages %+v, want one, ended ExecutorLost", applies)
	}
	if plans := stagesOf(run, v1alpha1.StagePlan); len(plans) != 1 {
		t.Errorf("plan stages %+v, want one", plans)
	}

	// Nothing applies later either: wait past the moment the killed
	// provisioner would have written, then for the controller to settle.
	time.Sleep(time.Until(writesAt.Add(3 * time.Second)))
	if got := lines(t, applied); len(got) > 1 {
		t.Errorf("the apply's provisioner wrote %d lines, want at most one: %q", len(got), got)
	} else {
		t.Logf("the killed apply wrote %d lines", len(got))
	}
	again, err := e2.client.TerrarunV1alpha1().TerraformRuns("default").Get(ctxT(t), "restart", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Status.Phase != v1alpha1.RunPhaseFailed || applyStages(again) != 1 {
		t.Errorf("later the run is %s with %d apply stages", again.Status.Phase, applyStages(again))
	}
	waitNoProcessesUnder(t, dataDir, 30*time.Second)
}

// TestSecondServerOnTheDataDir: a second server started on a running
// server's --data-dir stops at once, saying which process holds it, and
// touches nothing of the first: its certificates and its etcd are as they
// were, and it goes on serving.
func TestSecondServerOnTheDataDir(t *testing.T) {
	e := newRunEnv(t)
	pki := filepath.Join(e.DataDir, "pki")
	before := map[string][]byte{}
	entries, err := os.ReadDir(pki)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range entries {
		if !f.IsDir() {
			b, err := os.ReadFile(filepath.Join(pki, f.Name()))
			if err != nil {
				t.Fatal(err)
			}
			before[f.Name()] = b
		}
	}
	port, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctxT(t), time.Minute)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, apiserverBinary, "--standalone", "--data-dir", e.DataDir, "--secure-port", strconv.Itoa(port)).CombinedOutput()
	if err == nil || ctx.Err() != nil || !strings.Contains(string(out), "is using --data-dir "+e.DataDir) || !strings.Contains(string(out), "pid ") {
		t.Fatalf("the second server: %v after %s\n%s", err, time.Since(start), out)
	}
	for name, b := range before {
		if now, err := os.ReadFile(filepath.Join(pki, name)); err != nil || !bytes.Equal(now, b) {
			t.Errorf("the second server changed %s (%v)", name, err)
		}
	}
	mustKubectl(t, e.Kubeconfig, "get", "tfr")
}

// TestPortTaken: a second server on a port that is taken stops at
// start-up, naming the port and the flag that picks another.
func TestPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(ctxT(t), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, apiserverBinary, "--standalone", "--data-dir", t.TempDir(), "--secure-port", strconv.Itoa(port)).CombinedOutput()
	if want := fmt.Sprintf("port %d is taken", port); err == nil || ctx.Err() != nil || !strings.Contains(string(out), want) || !strings.Contains(string(out), "--secure-port") {
		t.Fatalf("a server on a taken port: %v, want it to stop saying %q and the flag\n%s", err, want, out)
	}
}
