package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// runEnv is a standalone server with its admin client and a second user, bob,
// who may approve and edit.
type runEnv struct {
	*binaryServer
	client versioned.Interface
	bob    string
	bobCfg versioned.Interface
}

func newRunEnv(t *testing.T, extraArgs ...string) *runEnv {
	t.Helper()
	s := startBinary(t, t.TempDir(), extraArgs...)
	e := &runEnv{binaryServer: s, client: versioned.NewForConfigOrDie(s.Config)}
	e.bob, e.bobCfg = e.user(t, "bob")
	return e
}

// user mints a kubeconfig for a user who may approve and edit, and returns
// its path and a clientset that uses it.
func (e *runEnv) user(t *testing.T, name string) (string, versioned.Interface) {
	t.Helper()
	path := e.mint(t, name, "terrarun:approvers", "terrarun:editors")
	return path, versioned.NewForConfigOrDie(kubeconfigRest(t, path))
}

// mint writes a kubeconfig for user name in groups, and returns its path.
func (e *runEnv) mint(t *testing.T, name string, groups ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	args := []string{"kubeconfig", "--data-dir", e.DataDir, "--user", name, "--output", path}
	for _, g := range groups {
		args = append(args, "--group", g)
	}
	if out, err := exec.Command(apiserverBinary, args...).CombinedOutput(); err != nil {
		t.Fatalf("minting %s's kubeconfig: %v\n%s", name, err, out)
	}
	return path
}

func kubeconfigRest(t *testing.T, path string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// secret writes a standalone-mode Secret key: a file under the data directory.
func (e *runEnv) secret(t *testing.T, namespace, name, key, value string) {
	t.Helper()
	dir := filepath.Join(e.DataDir, "values", namespace, "secrets", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, key), value)
}

func runManifest(name string, spec string) string {
	return fmt.Sprintf("apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: %s\nspec:\n%s", name, spec)
}

// create creates a run from a manifest with kubectl as the admin user.
func (e *runEnv) create(t *testing.T, manifest string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.yaml")
	writeFile(t, path, manifest)
	mustKubectl(t, e.Kubeconfig, "create", "-f", path)
}

// inline is a run spec with inline files. Each run gets a workspace of its
// own unless extra names one, because runs in one namespace and workspace
// share their state, and concurrent test runs would make each other's saved
// plans stale.
func inline(files map[string]string, extra string) string {
	var b strings.Builder
	b.WriteString("  engine:\n    binary: " + engineName + "\n")
	if !strings.Contains(extra, "workspace:") {
		fmt.Fprintf(&b, "  workspace: ws-%d\n", workspaceSeq.Add(1))
	}
	b.WriteString("  source:\n    inline:\n")
	for name, content := range files {
		b.WriteString("      " + name + ": |\n")
		for _, line := range strings.Split(strings.TrimRight(content, "\n"), "\n") {
			b.WriteString("        " + line + "\n")
		}
	}
	b.WriteString(extra)
	return b.String()
}

// approve approves run's recorded plan with kubectl as the user of
// kubeconfig, and returns kubectl's output.
func (e *runEnv) approve(t *testing.T, kubeconfig string, run *v1alpha1.TerraformRun) (string, error) {
	t.Helper()
	body := filepath.Join(t.TempDir(), "approval.json")
	writeFile(t, body, `{"apiVersion":"terrarun.dev/v1alpha1","kind":"TerraformRunApproval","planDigest":"`+run.Status.Plan.Digest+`"}`)
	return kubectl(t, kubeconfig, "create", "--raw", raw(run.Name, "approve"), "-f", body)
}

// waitPhase waits until the run reaches one of phases and returns it.
func (e *runEnv) waitPhase(t *testing.T, name string, timeout time.Duration, phases ...v1alpha1.RunPhase) *v1alpha1.TerraformRun {
	t.Helper()
	run, err := harness.WaitForPhase(ctxT(t), e.client, "default", name, timeout, phases...)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// runJSON is a minimal run named name, as JSON.
func runJSON(name string) string {
	return `{"apiVersion":"terrarun.dev/v1alpha1","kind":"TerraformRun","metadata":{"name":"` + name +
		`"},"spec":{"source":{"inline":{"main.tf":"resource \"terraform_data\" \"x\" {}"}}}}`
}

// outputValue is an output's value in status, as JSON; "" when absent.
func outputValue(o v1alpha1.OutputStatus) string {
	if o.Value == nil {
		return ""
	}
	return string(o.Value.Raw)
}

func raw(name, sub string) string {
	return "/apis/terrarun.dev/v1alpha1/namespaces/default/terraformruns/" + name + "/" + sub
}

var workspaceSeq atomic.Int64

const helloTF = `variable "db_password" {
  type = string
}

resource "terraform_data" "hello" {
  input = "hello"
}

output "greeting" {
  value = terraform_data.hello.output
}

# Derived from a Secret, so sensitive to terraform: declassified on purpose.
output "password_length" {
  value = nonsensitive(length(var.db_password))
}

output "connection" {
  value     = "postgres://app:${var.db_password}@db"
  sensitive = true
}
`

const dbPassword = "s3cr3t-Hunter2-value"

// TestRunLifecycle is the happy path: plan, logs, approval by a second user,
// apply and outputs, through kubectl.
func TestRunLifecycle(t *testing.T) {
	e := newRunEnv(t)
	e.secret(t, "default", "db", "password", dbPassword)

	e.create(t, runManifest("hello", inline(map[string]string{"main.tf": helloTF}, `  variables:
  - name: db_password
    valueFrom:
      secretKeyRef:
        name: db
        key: password
`)))
	// Follow the plan logs right away: the follow waits for the log to appear
	// and ends when the plan stage ends.
	logs := startFollow(t, e.Kubeconfig, raw("hello", "logs?follow=true&stage=plan"))
	// A reader may wait for the plan, through the server's watch cache.
	if waited := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("hello", "plan?wait=true"), "--request-timeout=2m"); !strings.Contains(waited, "1 to add") {
		t.Errorf("plan?wait=true answered:\n%s", waited)
	}
	run := e.waitPhase(t, "hello", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval, v1alpha1.RunPhaseFailed)
	if run.Status.Phase != v1alpha1.RunPhaseAwaitingApproval {
		t.Fatalf("run failed: %s", run.Status.Message)
	}
	planLog := waitFollow(t, logs)
	if !strings.Contains(planLog, "Plan: 1 to add, 0 to change, 0 to destroy.") {
		t.Errorf("followed plan log lacks the plan summary:\n%s", planLog)
	}

	plan := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("hello", "plan"))
	if !strings.Contains(plan, "1 to add") {
		t.Fatalf("plan text:\n%s", plan)
	}
	p := run.Status.Plan
	if p == nil || p.Add != 1 || p.Change != 0 || p.Destroy != 0 || !p.HasChanges || !strings.HasPrefix(p.Digest, "sha256:") {
		t.Fatalf("status.plan = %+v", p)
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionPlanned); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Planned condition = %+v", c)
	}
	out := mustKubectl(t, e.Kubeconfig, "get", "tfr", "hello")
	if !regexp.MustCompile(`hello\s+AwaitingApproval\s+\+1 ~0 -0\s+-\s+<none>`).MatchString(out) {
		t.Errorf("get tfr while awaiting approval:\n%s", out)
	}
	mustKubectl(t, e.Kubeconfig, "wait", "tfr/hello", "--for=condition=Planned", "--timeout=10s")

	// The creator may not approve; bob may.
	approval := filepath.Join(t.TempDir(), "approval.yaml")
	writeFile(t, approval, fmt.Sprintf(`{"apiVersion":"terrarun.dev/v1alpha1","kind":"TerraformRunApproval","planDigest":%q,"comment":"lgtm"}`, p.Digest))
	if out, err := kubectl(t, e.Kubeconfig, "create", "--raw", raw("hello", "approve"), "-f", approval); err == nil || !strings.Contains(out, "separation of duties") {
		t.Fatalf("creator's approval: err=%v\n%s", err, out)
	}
	out = mustKubectl(t, e.bob, "create", "--raw", raw("hello", "approve"), "-f", approval)
	var approved v1alpha1.TerraformRun
	if err := json.Unmarshal([]byte(out), &approved); err != nil || approved.Status.Approval == nil || approved.Status.Approval.ApprovedBy != "bob" {
		t.Fatalf("approve returned %v:\n%s", err, out)
	}

	applyLogs := startFollow(t, e.Kubeconfig, raw("hello", "logs?follow=true&stage=apply"))
	run = e.waitPhase(t, "hello", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Fatalf("run ended %s: %s", run.Status.Phase, run.Status.Message)
	}
	if l := waitFollow(t, applyLogs); !strings.Contains(l, "Apply complete! Resources: 1 added") {
		t.Errorf("apply log:\n%s", l)
	}
	out = mustKubectl(t, e.Kubeconfig, "get", "tfr", "hello")
	if !regexp.MustCompile(`hello\s+Succeeded\s+\+1 ~0 -0\s+-\s+bob\s+`).MatchString(out) {
		t.Errorf("get tfr after apply:\n%s", out)
	}
	for _, typ := range []string{v1alpha1.ConditionPlanned, v1alpha1.ConditionApproved, v1alpha1.ConditionApplied} {
		if !meta.IsStatusConditionTrue(run.Status.Conditions, typ) {
			t.Errorf("condition %s is not True: %+v", typ, run.Status.Conditions)
		}
	}

	outputs := map[string]v1alpha1.OutputStatus{}
	for _, o := range run.Status.Outputs {
		outputs[o.Name] = o
	}
	if outputValue(outputs["greeting"]) != `"hello"` || outputValue(outputs["password_length"]) != fmt.Sprint(len(dbPassword)) {
		t.Errorf("status.outputs = %+v", run.Status.Outputs)
	}
	if c := outputs["connection"]; !c.Sensitive || c.Value != nil {
		t.Errorf("sensitive output in status: %+v", c)
	}
	// Values are plain JSON, not JSON in strings: jsonpath reads them.
	if out := mustKubectl(t, e.Kubeconfig, "get", "tfr", "hello", "-o", `jsonpath={.status.outputs[?(@.name=="greeting")].value} {.status.outputs[?(@.name=="greeting")].type} {.status.outputs[?(@.name=="password_length")].value}`); out != fmt.Sprintf("hello string %d", len(dbPassword)) {
		t.Errorf("status.outputs through jsonpath = %q", out)
	}
	all := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("hello", "outputs"))
	if !strings.Contains(all, "postgres://app:"+dbPassword+"@db") {
		t.Errorf("/outputs lacks the sensitive value:\n%s", all)
	}

	// The secret never appears anywhere but /outputs.
	everything := map[string]string{
		"plan logs":  planLog,
		"apply logs": mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("hello", "logs?stage=apply")),
		"status":     mustKubectl(t, e.Kubeconfig, "get", "tfr", "hello", "-o", "json"),
		"plan text":  plan,
		"plan json":  mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("hello", "plan?format=json")),
		"describe":   mustKubectl(t, e.Kubeconfig, "describe", "tfr", "hello"),
	}
	for what, content := range everything {
		if strings.Contains(content, dbPassword) {
			t.Errorf("the secret value appears in the %s", what)
		}
	}
	if !strings.Contains(everything["plan json"], "resource_changes") {
		t.Errorf("plan json is not a plan:\n%.500s", everything["plan json"])
	}

	// The approval was bound to the digest, and a second approval is refused.
	if out, err := kubectl(t, e.bob, "create", "--raw", raw("hello", "approve"), "-f", approval); err == nil || !strings.Contains(out, "Conflict") && !strings.Contains(out, "AwaitingApproval") {
		t.Fatalf("approval in the wrong phase: err=%v\n%s", err, out)
	}
}

// startFollow starts a `kubectl get --raw ...logs?follow=true`.
func startFollow(t *testing.T, kubeconfig, path string) *harness.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	s, err := harness.StartStream(ctx, kubectlBinary(t), kubeconfig, path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitFollow returns everything the follow printed once it ended by itself,
// as it must when the stage ends.
func waitFollow(t *testing.T, s *harness.Stream) string {
	t.Helper()
	out, err := s.Wait(3 * time.Minute)
	if err != nil {
		t.Fatalf("the log follow: %v\n%s", err, out)
	}
	return out
}

// TestApprovalRules covers stale digests, the wrong phase, and the Auto,
// NoChanges, Plan-only and Destroy paths.
func TestApprovalRules(t *testing.T) {
	e := newRunEnv(t)
	ctx := ctxT(t)
	runs := e.bobCfg.TerrarunV1alpha1().TerraformRuns("default")

	e.create(t, runManifest("manual", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {}`}, "")))
	run := e.waitPhase(t, "manual", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)

	stale := "sha256:" + strings.Repeat("0", 64)
	_, err := runs.Approve(ctx, "manual", &v1alpha1.TerraformRunApproval{PlanDigest: stale}, metav1.CreateOptions{})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "plan digest mismatch: you approved "+stale) {
		t.Fatalf("stale digest: %v, want 409 naming the stale digest", err)
	}
	// A follow of the apply log, which a discarded run never writes, ends
	// with the run.
	applyFollow := startFollow(t, e.Kubeconfig, raw("manual", "logs?stage=apply&follow=true"))
	_, err = runs.Discard(ctx, "manual", &v1alpha1.TerraformRunDiscard{Comment: "not today"}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("discard: %v", err)
	}
	run = e.waitPhase(t, "manual", time.Minute, v1alpha1.RunPhaseDiscarded)
	if out, err := applyFollow.Wait(30 * time.Second); err == nil || !strings.Contains(err.Error(), `run "manual" ended Discarded with no apply log for attempt 1`) {
		t.Errorf("the follow of a discarded run's apply log: %v\n%s", err, out)
	}
	_, err = runs.Approve(ctx, "manual", &v1alpha1.TerraformRunApproval{PlanDigest: run.Status.Plan.Digest}, metav1.CreateOptions{})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "only while the run is AwaitingApproval") {
		t.Fatalf("approval of a discarded run: %v, want 409", err)
	}
	if _, err := runs.Cancel(ctx, "manual", &v1alpha1.TerraformRunCancel{}, metav1.CreateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("cancel of a discarded run: %v, want 409", err)
	}
	// Standalone has no garbage collector: a foreground deletion completes
	// all the same.
	mustKubectl(t, e.Kubeconfig, "delete", "tfr", "manual", "--cascade=foreground", "--timeout=30s")
	if _, err := runs.Get(ctx, "manual", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after a foreground deletion: %v, want NotFound", err)
	}

	e.create(t, runManifest("auto", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {}`}, "  workspace: app\n  approval:\n    mode: Auto\n")))
	e.create(t, runManifest("nochanges", inline(map[string]string{"main.tf": `locals { x = 1 }`}, "")))
	e.create(t, runManifest("planonly", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {}`}, "  operation: Plan\n")))

	auto := e.waitPhase(t, "auto", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if auto.Status.Phase != v1alpha1.RunPhaseSucceeded || auto.Status.Approval == nil || auto.Status.Approval.ApprovedBy != "auto" {
		t.Errorf("Auto run: %s %+v: %s", auto.Status.Phase, auto.Status.Approval, auto.Status.Message)
	}
	noChanges := e.waitPhase(t, "nochanges", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if c := meta.FindStatusCondition(noChanges.Status.Conditions, v1alpha1.ConditionPlanned); noChanges.Status.Phase != v1alpha1.RunPhaseSucceeded || c == nil || c.Reason != v1alpha1.ReasonNoChanges {
		t.Errorf("NoChanges run: %s %+v", noChanges.Status.Phase, c)
	}
	planOnly := e.waitPhase(t, "planonly", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if planOnly.Status.Phase != v1alpha1.RunPhaseSucceeded || applyStages(planOnly) != 0 || planOnly.Status.Plan == nil || planOnly.Status.Plan.Add != 1 {
		t.Errorf("Plan-only run: %s, %d apply stages, plan %+v", planOnly.Status.Phase, applyStages(planOnly), planOnly.Status.Plan)
	}

	// Destroy what the Auto run created: state is per namespace and workspace.
	e.create(t, runManifest("destroy", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {}`}, "  workspace: app\n  operation: Destroy\n  approval:\n    mode: Auto\n")))
	destroy := e.waitPhase(t, "destroy", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if destroy.Status.Phase != v1alpha1.RunPhaseSucceeded || destroy.Status.Plan == nil || destroy.Status.Plan.Destroy != 1 {
		t.Errorf("Destroy run: %s, plan %+v: %s", destroy.Status.Phase, destroy.Status.Plan, destroy.Status.Message)
	}
}

// TestAutoRunInOneProcess: an automatically approved run plans and applies
// in one executor process, with one engine initialized once: the apply stage
// is recorded with the plan execution's name, the apply log holds no second
// init, and everything else is as with two stages (logs per stage, outputs,
// redaction).
func TestAutoRunInOneProcess(t *testing.T) {
	e := newRunEnv(t)
	e.secret(t, "default", "db", "password", dbPassword)
	e.create(t, runManifest("auto1", inline(map[string]string{"main.tf": helloTF}, `  approval:
    mode: Auto
  variables:
  - name: db_password
    valueFrom:
      secretKeyRef:
        name: db
        key: password
`)))
	applyLogs := startFollow(t, e.Kubeconfig, raw("auto1", "logs?follow=true&stage=apply"))
	run := e.waitPhase(t, "auto1", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Fatalf("run ended %s: %s", run.Status.Phase, run.Status.Message)
	}
	if len(run.Status.Stages) != 2 || run.Status.Stages[1].Name != v1alpha1.StageApply || run.Status.Stages[0].Job != run.Status.Stages[1].Job {
		t.Errorf("the apply stage is not carried by the plan execution: %+v", run.Status.Stages)
	}
	planLog := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("auto1", "logs?stage=plan"))
	applyLog := waitFollow(t, applyLogs)
	if !strings.Contains(applyLog, "Apply complete! Resources: 1 added") || !strings.Contains(applyLog, "in the process of plan attempt 1") ||
		!strings.HasSuffix(strings.TrimSpace(applyLog), "stage apply attempt 1 succeeded") {
		t.Errorf("apply log:\n%s", applyLog)
	}
	if !strings.HasSuffix(strings.TrimSpace(planLog), "stage plan attempt 1 succeeded") {
		t.Errorf("plan log:\n%s", planLog)
	}
	engine := " " + engineName + " "
	for what, want := range map[string]int{"running" + engine + "init": 1, "terrarun:" + engine: 1} {
		if n := strings.Count(planLog+applyLog, what); n != want {
			t.Errorf("%q appears %d times in the logs, want %d:\n%s\n%s", what, n, want, planLog, applyLog)
		}
	}
	outputs := map[string]v1alpha1.OutputStatus{}
	for _, o := range run.Status.Outputs {
		outputs[o.Name] = o
	}
	if outputValue(outputs["greeting"]) != `"hello"` || !outputs["connection"].Sensitive {
		t.Errorf("status.outputs = %+v", run.Status.Outputs)
	}
	if strings.Contains(planLog+applyLog, dbPassword) {
		t.Error("the secret value appears in the logs")
	}
	// The plan went up in one request, and the carried apply's wait for the
	// plan file was answered 304: the file it made did not come back.
	planRequests := map[string]string{}
	for _, line := range strings.Split(mustKubectl(t, e.Kubeconfig, "get", "--raw", "/metrics"), "\n") {
		if m := planRequestLine.FindStringSubmatch(line); m != nil {
			planRequests[m[2]+" "+m[1]] = m[3]
		}
	}
	if want := map[string]string{"POST 204": "1", "GET 304": "1"}; !maps.Equal(planRequests, want) {
		t.Errorf("requests to the plan subresource by verb and code: %v, want %v", planRequests, want)
	}
}

// planRequestLine matches apiserver_request_total for the runs' plan
// subresource: code, verb and count.
var planRequestLine = regexp.MustCompile(`^apiserver_request_total\{code="(\d+)",.*resource="terraformruns",.*subresource="plan",verb="(\w+)".*\} (\d+)$`)

func applyStages(run *v1alpha1.TerraformRun) int {
	n := 0
	for _, s := range run.Status.Stages {
		if s.Name == v1alpha1.StageApply {
			n++
		}
	}
	return n
}

// TestRunFailures covers a syntax error, a failing apply, cancel, and an
// executor writing to another run.
func TestRunFailures(t *testing.T) {
	e := newRunEnv(t, "--cancel-grace-period", "5s")
	ctx := ctxT(t)

	e.create(t, runManifest("syntax", inline(map[string]string{"main.tf": "resource \"terraform_data\" \"x\" {\n  input = \n}\n"}, "")))
	e.create(t, runManifest("applyfails", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {
  provisioner "local-exec" {
    command = "echo about to fail; exit 1"
  }
}`}, "  approval:\n    mode: Auto\n")))
	e.create(t, runManifest("slow", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {
  provisioner "local-exec" {
    command = "sleep 120"
  }
}`}, "  approval:\n    mode: Auto\n")))
	e.create(t, runManifest("victim", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {}`}, "")))
	e.create(t, runManifest("nosecret", inline(map[string]string{"main.tf": "variable \"password\" {}\n"},
		"  variables:\n  - name: password\n    valueFrom:\n      secretKeyRef:\n        name: absent\n        key: password\n")))

	// A run whose Secret is missing cannot start: it fails, and says why.
	nosecret := e.waitPhase(t, "nosecret", time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded)
	if want := `The plan stage could not start: `; nosecret.Status.Phase != v1alpha1.RunPhaseFailed ||
		!strings.Contains(nosecret.Status.Message, want) || !strings.Contains(nosecret.Status.Message, `secret "absent" key "password" not found`) {
		t.Errorf("a run with a missing Secret: %s: %q", nosecret.Status.Phase, nosecret.Status.Message)
	}
	if c := meta.FindStatusCondition(nosecret.Status.Conditions, v1alpha1.ConditionPlanned); c == nil || c.Reason != v1alpha1.ReasonStartFailed {
		t.Errorf("Planned condition of the run with a missing Secret: %+v", c)
	}

	// kubectl wait ends on a failure as on a failed Job, not at its timeout.
	if out, err := kubectl(t, e.Kubeconfig, "wait", "tfr/syntax", "--for=condition=Failed", "--timeout=3m"); err != nil {
		t.Errorf("kubectl wait --for=condition=Failed on a failing run: %v\n%s", err, out)
	}
	syntax := e.waitPhase(t, "syntax", 3*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded)
	if syntax.Status.Phase != v1alpha1.RunPhaseFailed || !strings.Contains(syntax.Status.Message, "Error") {
		t.Errorf("syntax error run: %s: %q", syntax.Status.Phase, syntax.Status.Message)
	}
	if c := meta.FindStatusCondition(syntax.Status.Conditions, v1alpha1.ConditionPlanned); c == nil || c.Reason != v1alpha1.ReasonPlanFailed {
		t.Errorf("Planned condition of the syntax error run: %+v", c)
	}
	if l := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("syntax", "logs")); !strings.Contains(l, "Error") {
		t.Errorf("the syntax error is not in the logs:\n%s", l)
	}

	fails := e.waitPhase(t, "applyfails", 3*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded)
	if fails.Status.Phase != v1alpha1.RunPhaseFailed || applyStages(fails) != 1 {
		t.Errorf("failing apply: %s with %d apply stages: %s", fails.Status.Phase, applyStages(fails), fails.Status.Message)
	}
	if c := meta.FindStatusCondition(fails.Status.Conditions, v1alpha1.ConditionApplied); c == nil || c.Reason != v1alpha1.ReasonApplyFailed {
		t.Errorf("Applied condition of the failing apply: %+v", c)
	}

	slow := e.waitPhase(t, "slow", 3*time.Minute, v1alpha1.RunPhaseApplying)
	victim := e.waitPhase(t, "victim", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)

	// The slow run's apply executor holds a token for its own run only. An
	// Auto run's plan execution carries its apply stage.
	if len(slow.Status.Stages) != 2 || slow.Status.Stages[1].Job != slow.Status.Stages[0].Job {
		t.Errorf("the Auto run's apply is not carried by its plan execution: %+v", slow.Status.Stages)
	}
	token := readToken(t, e.DataDir, slow, "plan-1")
	for _, path := range []string{raw("victim", "plan?attempt=1&part=text"), raw("victim", "logs?stage=plan&attempt=1"), raw("victim", "outputs?attempt=1")} {
		code, body := postWithToken(t, e.Config, token, path, "forged")
		if code != http.StatusForbidden || !strings.Contains(body, "executor of run default/slow") || !strings.Contains(body, "may only write") {
			t.Errorf("POST %s with another run's executor token: %d %s, want 403", path, code, body)
		}
	}
	// Nor may it act as a user: approve, create, list, or read outputs.
	approval := `{"apiVersion":"terrarun.dev/v1alpha1","kind":"TerraformRunApproval","planDigest":"` + victim.Status.Plan.Digest + `"}`
	for _, req := range []struct{ method, path, body string }{
		{http.MethodPost, raw("victim", "approve"), approval},
		{http.MethodPost, "/apis/terrarun.dev/v1alpha1/namespaces/default/terraformruns", runJSON("spawned")},
		{http.MethodGet, "/apis/terrarun.dev/v1alpha1/namespaces/default/terraformruns", ""},
		{http.MethodGet, "/apis/terrarun.dev/v1alpha1/terraformruns", ""},
		{http.MethodGet, raw("victim", "outputs"), ""},
		{http.MethodGet, raw("slow", "outputs"), ""},
		{http.MethodGet, raw("victim", "plan?format=file"), ""},
		{http.MethodGet, raw("victim", "plan?format=file&wait=true"), ""},
		{http.MethodPatch, raw("slow", "status"), `{"status":{"message":"x"}}`},
	} {
		code, body, err := harness.RequestAs(ctxT(t), e.Config, token, req.method, req.path, strings.NewReader(req.body))
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusForbidden {
			t.Errorf("%s %s with an executor token: %d %s, want 403", req.method, req.path, code, body)
		}
	}
	// A user is not an executor either.
	code, body := postWithToken(t, e.Config, "", raw("victim", "logs?stage=plan&attempt=1"), "forged")
	if code != http.StatusForbidden || !strings.Contains(body, "only the executor") {
		t.Errorf("POST logs as the admin user: %d %s, want 403", code, body)
	}
	if plan := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("victim", "plan")); strings.Contains(plan, "forged") {
		t.Errorf("the forged plan was stored:\n%s", plan)
	}
	_ = victim

	start := time.Now()
	if _, err := e.client.TerrarunV1alpha1().TerraformRuns("default").Cancel(ctx, "slow", &v1alpha1.TerraformRunCancel{Comment: "too slow"}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	canceled := e.waitPhase(t, "slow", time.Minute, v1alpha1.RunPhaseCanceled, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded)
	if canceled.Status.Phase != v1alpha1.RunPhaseCanceled || !strings.Contains(canceled.Status.Message, "too slow") {
		t.Errorf("canceled run: %s: %s", canceled.Status.Phase, canceled.Status.Message)
	}
	if d := time.Since(start); d > 60*time.Second {
		t.Errorf("cancel took %s; the sleep was not stopped", d)
	}
}

// readToken returns the stage token of a run's execution in the local
// executor's work directory.
func readToken(t *testing.T, dataDir string, run *v1alpha1.TerraformRun, stageDir string) string {
	t.Helper()
	token, err := harness.StageToken(ctxT(t), dataDir, run, stageDir, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// postWithToken POSTs body to path as the bearer of token, or as the admin
// user when token is empty.
func postWithToken(t *testing.T, cfg *rest.Config, token, path, body string) (int, string) {
	t.Helper()
	code, out, err := harness.RequestAs(ctxT(t), cfg, token, http.MethodPost, path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return code, out
}

// TestQueuedRuns: with --max-concurrent-stages=1, runs beyond the first wait
// in phase Queued, with their position, and run one after the other in the
// order they were created.
func TestQueuedRuns(t *testing.T) {
	e := newRunEnv(t, "--max-concurrent-stages=1")
	slow := map[string]string{"main.tf": `resource "terraform_data" "x" {
  provisioner "local-exec" {
    command = "sleep 1"
  }
}`}
	names := []string{"q1", "q2", "q3"}
	for _, name := range names {
		e.create(t, runManifest(name, inline(slow, "  approval:\n    mode: Auto\n")))
	}
	sawQueued := ""
	err := harness.Poll(ctxT(t), 100*time.Millisecond, 3*time.Minute, "the queued runs to succeed", func(ctx context.Context) bool {
		done := 0
		for _, name := range names {
			run, err := e.client.TerrarunV1alpha1().TerraformRuns("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false
			}
			if run.Status.Phase == v1alpha1.RunPhaseQueued && sawQueued == "" {
				sawQueued = name + ": " + run.Status.Message
			}
			if run.Status.Phase == v1alpha1.RunPhaseSucceeded {
				done++
			}
		}
		return done == len(names)
	})
	if err != nil {
		t.Fatal(err, "\n", mustKubectl(t, e.Kubeconfig, "get", "tfr"))
	}
	if !strings.Contains(sawQueued, "Queued at position") || !strings.Contains(sawQueued, "1 stage (--max-concurrent-stages)") {
		t.Errorf("no run was seen Queued with its position (%q)", sawQueued)
	}
	// One stage at a time, first in first out: each run started after the
	// one before it ended.
	var prev *v1alpha1.TerraformRun
	for _, name := range names {
		run, err := e.client.TerrarunV1alpha1().TerraformRuns("default").Get(ctxT(t), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if prev != nil && run.Status.StartTime.Before(prev.Status.CompletionTime) {
			t.Errorf("%s started at %s, before %s ended at %s", name, run.Status.StartTime, prev.Name, prev.Status.CompletionTime)
		}
		prev = run
	}
}
