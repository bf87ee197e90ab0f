package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/terrarun/terrarun/pkg/executor/job"
	"github.com/terrarun/terrarun/pkg/executor/tekton"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// tektonImages are the programs of Tekton's images that its TaskRun pods
// run, built by hack/tekton.sh ($TERRARUN_TEKTON) as OCI image layouts in
// images/: the node agents run each image's unpacked /ko-app binary.
var tektonImages = []string{"entrypoint", "nop", "workingdirinit"}

// tektonImage is the image reference the controller is given for program.
func tektonImage(program string) string { return "ghcr.io/tektoncd/pipeline/" + program + ":v1.9.0" }

// tektonController is Tekton Pipelines' controller (hack/tekton.sh), run
// beside the control plane as the cluster's admin, as Flux's
// source-controller is (startFlux), with leader election.
type tektonController struct {
	dir  string
	proc *harness.Proc
	n    int
}

// startTekton installs Tekton's CRDs (without their conversion webhook:
// terrarun and the controller use tekton.dev/v1, their storage version,
// and no webhook runs here) and the controller's ConfigMaps, with short
// leader election times, and starts the controller.
func startTekton(t testing.TB) *tektonController {
	t.Helper()
	dir := os.Getenv("TERRARUN_TEKTON")
	if dir == "" {
		t.Fatal("TERRARUN_TEKTON is not set: pass the directory that hack/tekton.sh prints (make e2e does)")
	}
	if _, err := cl.kubectlAs("admin", "create", "namespace", "tekton-pipelines"); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
		t.Fatal(err)
	}
	mustAs(t, "admin", "apply", "--server-side", "-f", filepath.Join(dir, "crds"))
	for _, crd := range []string{"customruns", "pipelineruns", "pipelines", "resolutionrequests", "stepactions", "taskruns", "tasks", "verificationpolicies"} {
		name := crd + ".tekton.dev"
		if _, err := cl.kubectlAs("admin", "get", "crd", name); err != nil {
			continue // not in this release
		}
		mustAs(t, "admin", "patch", "crd", name, "--type=json", `-p=[{"op":"replace","path":"/spec/conversion","value":{"strategy":"None"}}]`)
		mustAs(t, "admin", "wait", "--for=condition=established", "--timeout=60s", "crd/"+name)
	}
	mustAs(t, "admin", "apply", "--server-side", "-n", "tekton-pipelines", "-f", filepath.Join(dir, "config"))
	// A killed leader's lease is taken over within seconds; init
	// containers as hardened as the step (what a restricted namespace
	// needs).
	mustAs(t, "admin", "patch", "configmap", "config-leader-election-controller", "-n", "tekton-pipelines", "--type=merge",
		`-p={"data":{"lease-duration":"8s","renew-deadline":"6s","retry-period":"2s"}}`)
	mustAs(t, "admin", "patch", "configmap", "feature-flags", "-n", "tekton-pipelines", "--type=merge",
		`-p={"data":{"set-security-context":"true"}}`)
	tk := &tektonController{dir: dir}
	tk.start(t)
	t.Cleanup(func() {
		if tk.proc != nil {
			tk.proc.Stop(syscall.SIGTERM)
		}
	})
	return tk
}

// start starts a controller process.
func (tk *tektonController) start(t testing.TB) {
	t.Helper()
	tk.n++
	args := []string{"SYSTEM_NAMESPACE=tekton-pipelines", "KUBECONFIG=" + cl.kubeconfigs["admin"], "METRICS_DOMAIN=tekton.dev/pipeline",
		// Its probes, metrics and profiling off the ports this cluster uses.
		"PROBES_PORT=18080", "METRICS_PROMETHEUS_PORT=19090", "PROFILING_PORT=18008",
		filepath.Join(tk.dir, "controller")}
	for flag, program := range map[string]string{"entrypoint": "entrypoint", "nop": "nop", "workingdirinit": "workingdirinit", "sidecarlogresults": "sidecarlogresults"} {
		args = append(args, "-"+flag+"-image", tektonImage(program))
	}
	args = append(args, "-shell-image", "busybox", "-shell-image-win", "mcr.microsoft.com/powershell:nanoserver")
	p, err := cl.start(fmt.Sprintf("tekton-controller-%d", tk.n), append([]string{"/usr/bin/env"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	tk.proc = p
}

// kill kills the controller, the leader, as a crash would.
func (tk *tektonController) kill() { tk.proc.Stop(syscall.SIGKILL) }

// taskRun is a jsonpath of the TaskRun name in ns.
func taskRun(t *testing.T, ns, name, jsonpath string) string {
	t.Helper()
	return mustAs(t, "admin", "get", "taskruns.tekton.dev", name, "-n", ns, "-o", "jsonpath="+jsonpath)
}

// TestTektonExecutor runs stages as Tekton TaskRuns (--executor=tekton,
// the chart's executor: tekton) under a real Tekton Pipelines controller:
// a Manual run plans, is approved and applies, in one TaskRun per stage
// labeled for the run; an Auto run; a TaskRun of a run's name that someone
// else made is never adopted; a cancel stops an apply mid-way; the
// controller's leader killed mid-apply leaves the apply applied once; the
// trivial run ends the same on the local executor, on Jobs and on Tekton;
// the cluster policy's taskRunTemplate (tektonTaskRunTemplate); and a node
// lost with a stage's pod (tektonNodeLost), under that template: a plan
// planned again, an apply never. The Job executor is restored afterwards.
func TestTektonExecutor(t *testing.T) {
	tk := startTekton(t)
	// The trivial run on Jobs, for the comparison below.
	jobsNS := newNamespace(t)
	onJobs := outcomeOf(t, clusterKubectl, jobsNS, job.JobName(sameRunName, "plan", 1))
	mustAs(t, "admin", "get", "job", job.JobName(sameRunName, "plan", 1), "-n", jobsNS)
	t.Cleanup(func() {
		if err := cl.applyTerrarun(nil); err != nil {
			t.Errorf("restoring the Job executor: %v", err)
		}
	})
	if err := cl.applyTerrarun(func(values map[string]any) { values["executor"] = "tekton" }); err != nil {
		t.Fatalf("deploying terrarun with the Tekton executor: %v", err)
	}
	ns := newNamespace(t)

	// A Manual run: each stage a TaskRun, no Job.
	createRun(t, "alice", ns, "manual", helloTF, "")
	if got := waitPhase(t, ns, "manual", 4*time.Minute, "AwaitingApproval", "Failed"); got != "AwaitingApproval" {
		t.Fatalf("run manual: %s: %s", got, mustAs(t, "admin", "get", "tfr", "manual", "-n", ns, "-o", "jsonpath={.status.message}"))
	}
	if labels := taskRun(t, ns, "manual-plan-1", `{.metadata.labels.terrarun\.dev/run} {.metadata.labels.terrarun\.dev/stage} {.metadata.labels.terrarun\.dev/attempt} {.metadata.ownerReferences[0].kind}`); labels != "manual plan 1 TerraformRun" {
		t.Errorf("the plan TaskRun's labels and owner: %q", labels)
	}
	if jobs := mustAs(t, "admin", "get", "jobs", "-n", ns, "-o", "name"); jobs != "" {
		t.Errorf("the Tekton executor made Jobs: %s", jobs)
	}
	if out, err := approve(t, "bob", ns, "manual"); err != nil {
		t.Fatalf("approve: %v %s", err, out)
	}
	if got := waitPhase(t, ns, "manual", 4*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
		t.Fatalf("run manual: %s: %s", got, mustAs(t, "admin", "get", "tfr", "manual", "-n", ns, "-o", "jsonpath={.status.message}"))
	}
	if out := mustAs(t, "admin", "get", "tfr", "manual", "-n", ns, "-o", `jsonpath={.status.outputs[?(@.name=="greeting")].value}`); out != "hello" {
		t.Errorf("output greeting = %q", out)
	}
	if log := mustAs(t, "admin", "get", "--raw", raw(ns, "manual", "logs?stage=apply")); !strings.Contains(log, "Apply complete!") {
		t.Errorf("the apply log:\n%s", log)
	}
	if outcome := taskRun(t, ns, "manual-apply-1", `{.status.results[?(@.name=="outcome")].value}`); outcome != "stage apply attempt 1 succeeded" {
		t.Errorf("the apply TaskRun's outcome result: %q", outcome)
	}
	// Both stages' TaskRuns carry the digest of the plan, the one the
	// approval named.
	approved := mustAs(t, "admin", "get", "tfr", "manual", "-n", ns, "-o", "jsonpath={.status.approval.planDigest}")
	for _, stage := range []string{"manual-plan-1", "manual-apply-1"} {
		if digest := taskRun(t, ns, stage, `{.status.results[?(@.name=="plan-digest")].value}`); digest != approved || !strings.HasPrefix(digest, "sha256:") {
			t.Errorf("%s's plan-digest result: %q, want the approved plan's %q", stage, digest, approved)
		}
	}
	stages := mustAs(t, "admin", "get", "tfr", "manual", "-n", ns, "-o", `jsonpath={range .status.stages[*]}{.name}-{.attempt}-{.job}-{.reason} {end}`)
	if strings.TrimSpace(stages) != "plan-1-manual-plan-1-Completed apply-1-manual-apply-1-Completed" {
		t.Errorf("stages %q", stages)
	}

	// An Auto run.
	createRun(t, "alice", ns, "auto", helloTF, "  approval:\n    mode: Auto\n")
	if got := waitPhase(t, ns, "auto", 4*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
		t.Fatalf("run auto: %s: %s", got, mustAs(t, "admin", "get", "tfr", "auto", "-n", ns, "-o", "jsonpath={.status.message}"))
	}

	// The trivial run ends the same on the local executor (a standalone
	// server), on Jobs and on Tekton.
	tektonNS := newNamespace(t)
	onTekton := outcomeOf(t, clusterKubectl, tektonNS, tekton.PodName(job.JobName(sameRunName, "plan", 1)), job.JobName(sameRunName, "plan", 1))
	taskRun(t, tektonNS, job.JobName(sameRunName, "plan", 1), "{.metadata.name}")
	host, _ := os.Hostname()
	onLocal := outcomeOf(t, startStandalone(t), "default", host)
	sameOutcomes(t, []string{"the local executor", "Jobs", "Tekton"}, []runOutcome{onLocal, onJobs, onTekton})

	// A TaskRun of the run's apply, with its labels, made by someone else
	// before the approval: never adopted.
	createRun(t, "alice", ns, "forged", helloTF, "")
	waitPhase(t, ns, "forged", 4*time.Minute, "AwaitingApproval")
	uid := mustAs(t, "admin", "get", "tfr", "forged", "-n", ns, "-o", "jsonpath={.metadata.uid}")
	forgery := fmt.Sprintf(`apiVersion: tekton.dev/v1
kind: TaskRun
metadata:
  name: forged-apply-1
  namespace: %s
  labels: {terrarun.dev/run: forged, terrarun.dev/run-uid: %s, terrarun.dev/stage: apply, terrarun.dev/attempt: "1"}
spec:
  taskSpec:
    steps:
    - name: executor
      image: busybox
      command: ["/bin/sh", "-c", "echo not terrarun's"]
`, ns, uid)
	if out, err := cl.kubectlStdin("admin", forgery, "create", "-f", "-"); err != nil {
		t.Fatalf("creating the forged TaskRun: %v %s", err, out)
	}
	if out, err := approve(t, "bob", ns, "forged"); err != nil {
		t.Fatalf("approve: %v %s", err, out)
	}
	if got := waitPhase(t, ns, "forged", 3*time.Minute, "Succeeded", "Failed"); got != "Failed" {
		t.Fatalf("run forged: %s, want Failed", got)
	}
	if msg := mustAs(t, "admin", "get", "tfr", "forged", "-n", ns, "-o", "jsonpath={.status.message}"); !strings.Contains(msg, "TaskRun "+ns+"/forged-apply-1") || !strings.Contains(msg, "not the one terrarun builds") {
		t.Errorf("the forged TaskRun's run says: %s", msg)
	}

	// A cancel mid-apply stops the apply.
	dir := sharedDir(t)
	stopped := slowApplyRun(t, ns, "cancel", dir)
	waitPhase(t, ns, "cancel", 4*time.Minute, "AwaitingApproval")
	if out, err := approve(t, "bob", ns, "cancel"); err != nil {
		t.Fatalf("approve: %v %s", err, out)
	}
	waitFor(t, 3*time.Minute, "the apply to run its provisioner", func() bool {
		log, _ := cl.kubectlAs("admin", "get", "--raw", raw(ns, "cancel", "logs?stage=apply"))
		return strings.Contains(log, "Provisioning with 'local-exec'")
	})
	body := filepath.Join(t.TempDir(), "cancel.json")
	if err := os.WriteFile(body, []byte(`{"apiVersion":"terrarun.dev/v1alpha1","kind":"TerraformRunCancel","comment":"e2e"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	mustAs(t, "alice", "create", "--raw", raw(ns, "cancel", "cancel"), "-f", body)
	if got := waitPhase(t, ns, "cancel", 2*time.Minute, "Canceled", "Failed", "Succeeded"); got != "Canceled" {
		t.Fatalf("run cancel: %s, want Canceled: %s", got, mustAs(t, "admin", "get", "tfr", "cancel", "-n", ns, "-o", "jsonpath={.status.message}"))
	}
	if s := taskRun(t, ns, "cancel-apply-1", "{.spec.status}"); s != "TaskRunCancelled" {
		t.Errorf("the canceled apply's TaskRun: spec.status %q", s)
	}
	if _, err := os.Stat(stopped); !os.IsNotExist(err) {
		t.Errorf("the canceled apply finished its provisioner (%v)", err)
	}

	// The controller's leader killed mid-apply: a new controller takes over,
	// and the apply ran once.
	marker := filepath.Join(dir, "applied")
	createRun(t, "alice", ns, "leader", fmt.Sprintf(`resource "terraform_data" "once" {
  provisioner "local-exec" {
    command = "sleep 20; echo applied >> %s"
  }
}
`, marker), "")
	waitPhase(t, ns, "leader", 4*time.Minute, "AwaitingApproval")
	if out, err := approve(t, "bob", ns, "leader"); err != nil {
		t.Fatalf("approve: %v %s", err, out)
	}
	waitFor(t, 3*time.Minute, "the apply to run its provisioner", func() bool {
		log, _ := cl.kubectlAs("admin", "get", "--raw", raw(ns, "leader", "logs?stage=apply"))
		return strings.Contains(log, "Provisioning with 'local-exec'")
	})
	tk.kill()
	tk.start(t)
	appliedOnce(t, ns, "leader", marker)

	tektonTaskRunTemplate(t, ns)
	tektonNodeLost(t, ns)
}

// tektonTaskRunTemplate: the cluster policy's taskRunTemplate puts every
// stage on the nodes its node selector names, and runs its Task's steps
// around the stage's, in the stage's pod; a Task step that fails fails the
// stage, and the Task is read when each stage starts. The template stays
// for what follows, with every node in its pool and a scan that passes.
func tektonTaskRunTemplate(t *testing.T, ns string) {
	pool := nodes[len(nodes)-1].name
	const label = "terrarun.dev/e2e-stage-pool"
	mustAs(t, "admin", "label", "node", pool, label+"=stages")
	t.Cleanup(func() {
		for _, n := range nodes {
			_, _ = cl.kubectlAs("admin", "label", "node", n.name, label+"-")
		}
	})
	task := func(scan string) string {
		return fmt.Sprintf(`apiVersion: tekton.dev/v1
kind: Task
metadata:
  name: stage-checks
  namespace: terrarun-system
spec:
  steps:
  - name: scan
    image: ghcr.io/terrarun/terrarun-executor:e2e
    command: ["/usr/bin/sh", "-c", %q]
  - name: stage
    image: ghcr.io/terrarun/terrarun-executor:e2e
  - name: notify
    image: ghcr.io/terrarun/terrarun-executor:e2e
    command: ["/usr/bin/sh", "-c", "echo the stage is done"]
`, scan)
	}
	if out, err := cl.kubectlStdin("admin", task("echo scanned"), "apply", "-f", "-"); err != nil {
		t.Fatalf("creating the policy's Task: %v %s", err, out)
	}
	if err := cl.applyTerrarun(func(values map[string]any) {
		values["executor"] = "tekton"
		values["policy"].(map[string]any)["taskRunTemplate"] = map[string]any{
			"podTemplate": map[string]any{"nodeSelector": map[string]any{label: "stages"}},
			"task":        map[string]any{"namespace": "terrarun-system", "name": "stage-checks"},
		}
	}); err != nil {
		t.Fatalf("deploying terrarun with a taskRunTemplate: %v", err)
	}
	createRun(t, "alice", ns, "templated", helloTF, "  approval:\n    mode: Auto\n")
	if got := waitPhase(t, ns, "templated", 4*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
		t.Fatalf("run templated: %s: %s", got, mustAs(t, "admin", "get", "tfr", "templated", "-n", ns, "-o", "jsonpath={.status.message}"))
	}
	// An Auto run plans and applies in one stage.
	if steps := taskRun(t, ns, "templated-plan-1", `{range .status.steps[*]}{.name}={.terminated.exitCode} {end}`); strings.TrimSpace(steps) != "scan=0 executor=0 notify=0" {
		t.Errorf("the stage's steps: %q, want the Task's around the stage's", steps)
	}
	if node := taskRunNode(t, ns, "templated-plan-1"); node != pool {
		t.Errorf("the stage ran on node %q, want %s (the template's node selector)", node, pool)
	}

	// The scan now refuses: the next stage fails, and says so.
	if out, err := cl.kubectlStdin("admin", task("echo refused by the scan; exit 3"), "apply", "-f", "-"); err != nil {
		t.Fatalf("changing the policy's Task: %v %s", err, out)
	}
	createRun(t, "alice", ns, "scanned", helloTF, "  approval:\n    mode: Auto\n")
	if got := waitPhase(t, ns, "scanned", 4*time.Minute, "Succeeded", "Failed"); got != "Failed" {
		t.Fatalf("run scanned: %s, want Failed", got)
	}
	if msg := mustAs(t, "admin", "get", "tfr", "scanned", "-n", ns, "-o", "jsonpath={.status.message}"); !strings.Contains(msg, `step "scan" of the cluster policy's Task (taskRunTemplate.task) exited with code 3 before the stage, which did not run`) {
		t.Errorf("the run the scan refused says: %s", msg)
	}
	if stages := mustAs(t, "admin", "get", "tfr", "scanned", "-n", ns, "-o", `jsonpath={range .status.stages[*]}{.name}-{.attempt}-{.reason} {end}`); strings.TrimSpace(stages) != "plan-1-StepFailed" {
		t.Errorf("stages %q, want the plan failed by its Task step, not retried", stages)
	}

	// What follows runs under the template too: on every node, scanned.
	if out, err := cl.kubectlStdin("admin", task("echo scanned"), "apply", "-f", "-"); err != nil {
		t.Fatalf("restoring the policy's Task: %v %s", err, out)
	}
	for _, n := range nodes {
		mustAs(t, "admin", "label", "node", n.name, label+"=stages", "--overwrite")
	}
}

// tektonNodeLost: a node dies with a TaskRun's pod on it. A plan is
// reported lost and planned again in a new TaskRun on another node; an
// apply is reported lost, its TaskRun canceled, and never run again.
func tektonNodeLost(t *testing.T, ns string) {
	victim := cordonAllButOneFreeNode(t)
	dir := sharedDir(t)
	gate, marker := gatedRun(t, ns, "lostplan", dir)
	waitTaskRunHoldsLock(t, ns, "lostplan-plan-1", victim)
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
	if node := taskRunNode(t, ns, "lostplan-plan-2"); node == victim || node == "" {
		t.Errorf("the plan was planned again on node %q, want another than %s", node, victim)
	}
	if s := taskRun(t, ns, "lostplan-plan-1", "{.spec.status}"); s != "TaskRunCancelled" {
		t.Errorf("the lost plan's TaskRun: spec.status %q, want TaskRunCancelled", s)
	}
	ranOnce(t, marker)
	restartNode(t, victim)

	// An apply lost with its node.
	victim = cordonAllButOneFreeNode(t)
	marker = slowApplyRun(t, ns, "lostapply", dir)
	loseApply(t, ns, "lostapply", victim, waitTaskRunHoldsLock)
	if s := taskRun(t, ns, "lostapply-apply-1", "{.spec.status}"); s != "TaskRunCancelled" {
		t.Errorf("the lost apply's TaskRun: spec.status %q, want TaskRunCancelled (so that Tekton does not start its pod again)", s)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the lost apply's provisioner finished (%v)", err)
	}
	restartNode(t, victim)
}

// taskRunNode is the node of the TaskRun's pod.
func taskRunNode(t *testing.T, ns, name string) string {
	out, _ := cl.kubectlAs("admin", "get", "pods", "-n", ns, "--selector=tekton.dev/taskRun="+name, "-o", "jsonpath={.items[0].spec.nodeName}")
	return out
}

// waitTaskRunHoldsLock waits until the TaskRun's pod runs on node and the
// state lock of its run is taken.
func waitTaskRunHoldsLock(t *testing.T, ns, name, node string) {
	t.Helper()
	waitFor(t, 3*time.Minute, name+"'s pod to run on "+node, func() bool {
		out, _ := cl.kubectlAs("admin", "get", "pods", "-n", ns, "--selector=tekton.dev/taskRun="+name, "-o", "jsonpath={.items[0].spec.nodeName} {.items[0].status.phase}")
		return out == node+" Running"
	})
	run := name[:strings.LastIndex(name[:strings.LastIndex(name, "-")], "-")]
	waitFor(t, 2*time.Minute, "the state lock of "+run+" to be taken", func() bool {
		_, err := cl.kubectlAs("admin", "get", "--raw", raw(ns, run, "statelock"))
		return err == nil
	})
}
