package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/test/internal/gitserver"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// workspaceTF keeps a value; destroying it fails when fail_destroy is true.
const workspaceTF = `variable "greeting" {
  type    = string
  default = "a"
}

resource "terraform_data" "x" {
  input = var.greeting
}

output "greeting" {
  value = terraform_data.x.output
}
`

func workspaceManifest(name, tf, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: terrarun.dev/v1alpha1\nkind: TerraformWorkspace\nmetadata:\n  name: %s\nspec:\n", name)
	b.WriteString(extra)
	b.WriteString("  template:\n")
	for _, line := range strings.Split(strings.TrimRight(inline(map[string]string{"main.tf": tf}, "  workspace: "+name+"\n"), "\n"), "\n") {
		b.WriteString("  " + line + "\n")
	}
	return b.String()
}

// workspace reads a workspace.
func (e *runEnv) workspace(t *testing.T, name string) *v1alpha1.TerraformWorkspace {
	t.Helper()
	ws, err := e.client.TerrarunV1alpha1().TerraformWorkspaces("default").Get(ctxT(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// waitWorkspace waits until ok holds for the workspace.
func (e *runEnv) waitWorkspace(t *testing.T, name, what string, ok func(*v1alpha1.TerraformWorkspace) bool) *v1alpha1.TerraformWorkspace {
	t.Helper()
	var ws *v1alpha1.TerraformWorkspace
	err := harness.Poll(ctxT(t), 200*time.Millisecond, 3*time.Minute, "workspace "+name+": "+what, func(ctx context.Context) bool {
		got, err := e.client.TerrarunV1alpha1().TerraformWorkspaces("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		ws = got
		return ok(got)
	})
	if err != nil {
		out, _ := kubectl(t, e.Kubeconfig, "get", "tfws", name, "-o", "yaml")
		runs, _ := kubectl(t, e.Kubeconfig, "get", "tfr", "-l", v1alpha1.LabelWorkspace+"="+name,
			"-o", "custom-columns=NAME:.metadata.name,PHASE:.status.phase,STAGES:.status.stages[*].name,MESSAGE:.status.message")
		t.Fatalf("%v\n%s\n%s", err, out, runs)
	}
	return ws
}

// readyAt waits until the workspace is Ready with run as its last apply.
func (e *runEnv) readyAt(t *testing.T, name, run string) *v1alpha1.TerraformWorkspace {
	t.Helper()
	return e.waitWorkspace(t, name, "Ready, applied by "+run, func(ws *v1alpha1.TerraformWorkspace) bool {
		return meta.IsStatusConditionTrue(ws.Status.Conditions, v1alpha1.WorkspaceConditionReady) && ws.Status.LastAppliedRun == run &&
			ws.Status.ObservedGeneration == ws.Generation
	})
}

// runsOf lists the runs of a workspace, by name.
func (e *runEnv) runsOf(t *testing.T, name string) []string {
	t.Helper()
	list, err := e.client.TerrarunV1alpha1().TerraformRuns("default").List(ctxT(t), metav1.ListOptions{LabelSelector: v1alpha1.LabelWorkspace + "=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range list.Items {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	return names
}

func (e *runEnv) patchWorkspace(t *testing.T, name, patch string) {
	t.Helper()
	mustKubectl(t, e.Kubeconfig, "patch", "tfws", name, "--type=merge", "-p", patch)
}

// TestWorkspace drives a workspace through its life with kubectl: it keeps
// its spec applied with one run per change, reruns on request (and only for
// those RBAC lets), starts nothing after a restart, supersedes a plan nobody
// approved, prunes its history, and destroys what it manages when deleted.
func TestWorkspace(t *testing.T) {
	e := newRunEnv(t)
	top := t
	ws := "app"
	e.create(t, workspaceManifest(ws, workspaceTF, "  approval:\n    mode: Auto\n"))

	t.Run("one run per spec", func(t *testing.T) {
		e.readyAt(t, ws, ws+"-1")
		mustKubectl(t, e.Kubeconfig, "label", "tfws", ws, "team=a")
		time.Sleep(3 * time.Second)
		if runs := e.runsOf(t, ws); len(runs) != 1 {
			t.Fatalf("runs after a label change: %v, want only %s-1", runs, ws)
		}
		e.patchWorkspace(t, ws, `{"spec":{"template":{"variables":[{"name":"greeting","value":"b"}]}}}`)
		got := e.readyAt(t, ws, ws+"-2")
		if runs := e.runsOf(t, ws); !slices.Equal(runs, []string{ws + "-1", ws + "-2"}) {
			t.Fatalf("runs after a template change: %v, want exactly one more", runs)
		}
		run, err := e.client.TerrarunV1alpha1().TerraformRuns("default").Get(ctxT(t), ws+"-2", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if run.Annotations[v1alpha1.AnnotationTrigger] != string(v1alpha1.TriggerSpecChange) || got.Status.LastAppliedHash != got.Status.DesiredHash {
			t.Errorf("run %s annotations %v, want trigger SpecChange; workspace applied hash %s, want the desired %s", run.Name, run.Annotations, got.Status.LastAppliedHash, got.Status.DesiredHash)
		}
		if owner := metav1.GetControllerOf(run); owner == nil || owner.Kind != "TerraformWorkspace" || owner.UID != got.UID {
			t.Errorf("run %s is controlled by %+v, want the workspace", run.Name, owner)
		}
		if len(got.Status.Outputs) != 1 || outputValue(got.Status.Outputs[0]) != `"b"` {
			t.Errorf("status.outputs = %+v, want greeting \"b\"", got.Status.Outputs)
		}
		table := mustKubectl(t, e.Kubeconfig, "get", "tfws", ws)
		for _, want := range []string{"READY", "LAST-RUN", "REVISION", "DRIFT", ws + "-2", "True"} {
			if !strings.Contains(table, want) {
				t.Errorf("kubectl get tfws lacks %q:\n%s", want, table)
			}
		}
	})

	t.Run("rerun", func(t *testing.T) {
		body := filepath.Join(t.TempDir(), "rerun.json")
		writeFile(t, body, `{"apiVersion":"terrarun.dev/v1alpha1","kind":"TerraformWorkspaceRerun","reason":"test"}`)
		path := "/apis/terrarun.dev/v1alpha1/namespaces/default/terraformworkspaces/" + ws + "/rerun"
		viewer := e.mint(t, "vic", "terrarun:viewers")
		if out, err := kubectl(t, viewer, "create", "--raw", path, "-f", body); err == nil || !strings.Contains(out, "forbidden") {
			t.Errorf("a viewer's rerun: %v %s, want forbidden", err, out)
		}
		out := mustKubectl(t, e.Kubeconfig, "create", "--raw", path, "-f", body)
		var run v1alpha1.TerraformRun
		if err := json.Unmarshal([]byte(out), &run); err != nil || run.Name != ws+"-3" {
			t.Fatalf("rerun answered %v %s, want run %s-3", err, out, ws)
		}
		before := e.workspace(t, ws).Status.LastAppliedHash
		if run.Annotations[v1alpha1.AnnotationTrigger] != string(v1alpha1.TriggerRerun) {
			t.Errorf("rerun's run annotations %v, want trigger Rerun", run.Annotations)
		}
		if after := e.readyAt(t, ws, ws+"-3").Status.LastAppliedHash; after != before {
			t.Errorf("the rerun applied hash %s, want the one applied before, %s", after, before)
		}
	})

	t.Run("restart", func(t *testing.T) {
		before := e.runsOf(t, ws)
		e.restart(t, top)
		time.Sleep(5 * time.Second)
		if runs := e.runsOf(t, ws); !slices.Equal(runs, before) {
			t.Fatalf("runs after a restart: %v, want %v", runs, before)
		}
		// The controller is at work all the same.
		e.patchWorkspace(t, ws, `{"spec":{"template":{"variables":[{"name":"greeting","value":"c"}]}}}`)
		e.readyAt(t, ws, ws+"-4")
	})

	t.Run("no run joins a history it was not created in", func(t *testing.T) {
		// A user who may create or label runs, but not change the workspace,
		// must not make a run of hers count as its apply (its outputs would
		// reach status, the outputs Secret and dependent workspaces), nor
		// have the workspace delete someone else's run.
		uid := string(e.workspace(t, ws).UID)
		forged := runManifest(ws+"-99", inline(map[string]string{"main.tf": workspaceTF}, "  workspace: "+ws+"\n"))
		forged = strings.Replace(forged, "  name: "+ws+"-99\n", "  name: "+ws+"-99\n  labels:\n    terrarun.dev/workspace: "+ws+
			"\n  ownerReferences:\n  - {apiVersion: terrarun.dev/v1alpha1, kind: TerraformWorkspace, name: "+ws+", uid: "+uid+", controller: true}\n", 1)
		path := filepath.Join(t.TempDir(), "forged.yaml")
		writeFile(t, path, forged)
		if out, err := kubectl(t, e.Kubeconfig, "create", "-f", path); err == nil || !strings.Contains(out, "metadata.labels[terrarun.dev/workspace]") {
			t.Errorf("a run created into a workspace's history: %v\n%s", err, out)
		}
		e.create(t, runManifest("bystander", inline(map[string]string{"main.tf": workspaceTF}, "")))
		if out, err := kubectl(t, e.Kubeconfig, "label", "tfr", "bystander", "terrarun.dev/workspace="+ws); err == nil || !strings.Contains(out, "metadata.labels[terrarun.dev/workspace]") {
			t.Errorf("a run labeled into a workspace's history: %v\n%s", err, out)
		}
		if out, err := kubectl(t, e.Kubeconfig, "label", "tfr", ws+"-4", "terrarun.dev/workspace-"); err == nil {
			t.Errorf("a workspace's run taken out of its history: %s", out)
		}
		// Nor rewrite how a run came to be: a Destroy trigger on an Apply
		// run made the controller take it for the workspace's destroy, and
		// release a destroyOnDelete workspace without destroying anything.
		for _, annotation := range []string{v1alpha1.AnnotationTrigger + "=Destroy", "terrarun.dev/spec-hash=forged", v1alpha1.AnnotationRerunRequest + "=99", "sub.terrarun.dev/anything=x"} {
			key, _, _ := strings.Cut(annotation, "=")
			if out, err := kubectl(t, e.Kubeconfig, "annotate", "--overwrite", "tfr", ws+"-4", annotation); err == nil || !strings.Contains(out, "metadata.annotations["+key+"]") {
				t.Errorf("kubectl annotate %s on a workspace's run: %v\n%s", annotation, err, out)
			}
		}
		if out, err := kubectl(t, e.Kubeconfig, "annotate", "tfr", "bystander", v1alpha1.AnnotationTrigger+"=Destroy"); err == nil || !strings.Contains(out, "metadata.annotations["+v1alpha1.AnnotationTrigger+"]") {
			t.Errorf("a trigger annotated on a plain run: %v\n%s", err, out)
		}
		if out, err := kubectl(t, e.Kubeconfig, "annotate", "tfr", "bystander", "example.com/note=fine"); err != nil {
			t.Errorf("an annotation of another domain: %v\n%s", err, out)
		}
	})

	t.Run("superseded", func(t *testing.T) {
		e.patchWorkspace(t, ws, `{"spec":{"approval":{"mode":"Manual"},"template":{"variables":[{"name":"greeting","value":"d"}]}}}`)
		e.waitPhase(t, ws+"-5", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		e.patchWorkspace(t, ws, `{"spec":{"template":{"variables":[{"name":"greeting","value":"e"}]}}}`)
		old := e.waitPhase(t, ws+"-5", time.Minute, v1alpha1.RunPhaseDiscarded)
		if c := meta.FindStatusCondition(old.Status.Conditions, v1alpha1.ConditionApplied); !strings.Contains(old.Status.Message, "Superseded") || c == nil || c.Reason != "Superseded" {
			t.Errorf("the superseded run's message %q, Applied condition %+v: want reason Superseded", old.Status.Message, c)
		}
		run := e.waitPhase(t, ws+"-6", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		approval := filepath.Join(t.TempDir(), "approval.yaml")
		writeFile(t, approval, `{"apiVersion":"terrarun.dev/v1alpha1","kind":"TerraformRunApproval","planDigest":"`+run.Status.Plan.Digest+`"}`)
		mustKubectl(t, e.bob, "create", "--raw", raw(run.Name, "approve"), "-f", approval)
		e.readyAt(t, ws, ws+"-6")
	})

	t.Run("history limits", func(t *testing.T) {
		e.patchWorkspace(t, ws, `{"spec":{"historyLimits":{"succeeded":1,"failed":1}}}`)
		e.waitWorkspace(t, ws, "two runs kept", func(*v1alpha1.TerraformWorkspace) bool {
			return slices.Equal(e.runsOf(t, ws), []string{ws + "-5", ws + "-6"})
		})
	})

	t.Run("destroy on delete", func(t *testing.T) {
		e.patchWorkspace(t, ws, `{"spec":{"destroyOnDelete":true}}`)
		e.waitWorkspace(t, ws, "the destroy finalizer", func(w *v1alpha1.TerraformWorkspace) bool {
			return slices.Contains(w.Finalizers, "terrarun.dev/destroy")
		})
		mustKubectl(t, e.Kubeconfig, "delete", "tfws", ws, "--wait=false")
		destroy := e.waitPhase(t, ws+"-7", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		if destroy.Spec.Operation != v1alpha1.OperationDestroy || destroy.Status.Plan.Destroy != 1 {
			t.Fatalf("run %s: operation %s, plan %+v; want a Destroy of 1 resource", destroy.Name, destroy.Spec.Operation, destroy.Status.Plan)
		}
		approval := filepath.Join(t.TempDir(), "approval.yaml")
		writeFile(t, approval, `{"apiVersion":"terrarun.dev/v1alpha1","kind":"TerraformRunApproval","planDigest":"`+destroy.Status.Plan.Digest+`"}`)
		mustKubectl(t, e.bob, "create", "--raw", raw(destroy.Name, "approve"), "-f", approval)
		if err := harness.Poll(ctxT(t), 200*time.Millisecond, 3*time.Minute, "the workspace and its runs to be gone", func(ctx context.Context) bool {
			_, err := kubectl(t, e.Kubeconfig, "get", "tfws", ws)
			return err != nil && len(e.runsOf(t, ws)) == 0
		}); err != nil {
			t.Fatal(err)
		}
		// The state is empty: a plan of the same configuration adds it again.
		e.create(t, runManifest("after-destroy", inline(map[string]string{"main.tf": workspaceTF}, "  workspace: "+ws+"\n")))
		if run := e.waitPhase(t, "after-destroy", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval); run.Status.Plan.Add != 1 {
			t.Errorf("a plan after the destroy adds %d, want 1", run.Status.Plan.Add)
		}
	})
}

// TestWorkspaceFailedDestroy deletes a workspace whose destroy fails: it
// keeps its finalizer and says why, until an admin abandons its resources.
func TestWorkspaceFailedDestroy(t *testing.T) {
	e := newRunEnv(t)
	tf := `resource "terraform_data" "x" {
  provisioner "local-exec" {
    when    = destroy
    command = "echo refusing to be destroyed; exit 1"
  }
}
`
	e.create(t, workspaceManifest("stuck", tf, "  approval:\n    mode: Auto\n  destroyOnDelete: true\n"))
	e.readyAt(t, "stuck", "stuck-1")
	mustKubectl(t, e.Kubeconfig, "delete", "tfws", "stuck", "--wait=false")
	got := e.waitWorkspace(t, "stuck", "a failed destroy", func(ws *v1alpha1.TerraformWorkspace) bool {
		c := meta.FindStatusCondition(ws.Status.Conditions, v1alpha1.WorkspaceConditionDestroying)
		return c != nil && c.Reason == "DestroyFailed"
	})
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.WorkspaceConditionDestroying)
	if !slices.Contains(got.Finalizers, "terrarun.dev/destroy") || !strings.Contains(c.Message, "stuck-2") || !strings.Contains(c.Message, v1alpha1.AnnotationAbandonResources) {
		t.Errorf("finalizers %v, Destroying %q: want the finalizer kept and a message naming the run and the way out", got.Finalizers, c.Message)
	}
	mustKubectl(t, e.Kubeconfig, "annotate", "tfws", "stuck", v1alpha1.AnnotationAbandonResources+"=true")
	if err := harness.Poll(ctxT(t), 200*time.Millisecond, time.Minute, "the abandoned workspace to be gone", func(ctx context.Context) bool {
		_, err := kubectl(t, e.Kubeconfig, "get", "tfws", "stuck")
		return err != nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestWorkspaceDrift changes what a resource keeps behind terraform's back:
// the next drift check reports it, and driftPolicy Apply repairs it.
func TestWorkspaceDrift(t *testing.T) {
	provider, err := harness.InstallTestProvider(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files := t.TempDir()
	if err := os.Chmod(files, 0o777); err != nil {
		t.Fatal(err)
	}
	e := newRunEnv(t, "--local-executor-mount", provider.Dir, "--local-executor-mount", files+":rw",
		"--local-executor-env", "TF_CLI_CONFIG_FILE="+provider.CLIConfig)
	file := filepath.Join(files, "kept.txt")
	tf := harness.TestProviderRequirement + fmt.Sprintf(`
resource "testing_file" "f" {
  path    = %q
  content = "v1"
}
`, file)
	e.create(t, workspaceManifest("drift", tf, "  approval:\n    mode: Auto\n  interval: 10s\n"))
	e.readyAt(t, "drift", "drift-1")
	if err := os.WriteFile(file, []byte("drifted"), 0o666); err != nil {
		t.Fatal(err)
	}
	got := e.waitWorkspace(t, "drift", "Drifted", func(ws *v1alpha1.TerraformWorkspace) bool {
		return meta.IsStatusConditionTrue(ws.Status.Conditions, v1alpha1.WorkspaceConditionDrifted)
	})
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.WorkspaceConditionDrifted); !strings.Contains(c.Message, "~1") {
		t.Errorf("Drifted says %q, want the plan's summary", c.Message)
	}
	if b, _ := os.ReadFile(file); string(b) != "drifted" {
		t.Fatalf("driftPolicy Report changed the file: %q", b)
	}
	e.patchWorkspace(t, "drift", `{"spec":{"driftPolicy":"Apply"}}`)
	e.waitWorkspace(t, "drift", "drift repaired", func(ws *v1alpha1.TerraformWorkspace) bool {
		return meta.IsStatusConditionFalse(ws.Status.Conditions, v1alpha1.WorkspaceConditionDrifted)
	})
	if b, _ := os.ReadFile(file); string(b) != "v1" {
		t.Errorf("after the repair the file holds %q, want v1", b)
	}
}

// restart stops the server gracefully and starts another on its data
// directory, which owner stops.
func (e *runEnv) restart(t, owner *testing.T) {
	t.Helper()
	if err := e.Stop(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	s := startBinaryFor(t, owner, e.DataDir)
	e.binaryServer, e.client = s, envOn(s).client
	// The new server listens on another port.
	e.bob, e.bobCfg = e.user(owner, "bob")
}

// trackedWorkspace is an Auto workspace named tracked whose source (the
// YAML of spec.template.source's members) is resolved again every 10s.
func trackedWorkspace(source string) string {
	return fmt.Sprintf(`apiVersion: terrarun.dev/v1alpha1
kind: TerraformWorkspace
metadata:
  name: tracked
spec:
  approval:
    mode: Auto
  sourceInterval: 10s
  template:
    engine:
      binary: %s
    workspace: tracked
    source:
%s`, engineName, source)
}

// TestWorkspaceGitRevision pushes a commit to the branch a workspace
// tracks: the next check resolves the branch to it, and one run applies the
// configuration at that commit.
func TestWorkspaceGitRevision(t *testing.T) {
	e := newRunEnv(t)
	tf := func(v string) map[string]string {
		return map[string]string{"main.tf": fmt.Sprintf("resource \"terraform_data\" \"x\" {\n  input = %q\n}\n\noutput \"value\" {\n  value = terraform_data.x.output\n}\n", v)}
	}
	repo := gitserver.New(t, "git-user", "git-pass", tf("one"))
	first := repo.Head(t)
	host := strings.TrimPrefix(repo.URL, "https://")
	host = host[:strings.Index(host, "/")]
	e.secret(t, "default", "gitcreds", "host", host)
	e.secret(t, "default", "gitcreds", "username", "git-user")
	e.secret(t, "default", "gitcreds", "password", "git-pass")
	e.secret(t, "default", "gitcreds", "ca.crt", repo.CA)
	e.create(t, trackedWorkspace(fmt.Sprintf("      git:\n        url: %s\n        ref: main\n        credentialsSecret: gitcreds\n", repo.URL)))
	got := e.readyAt(t, "tracked", "tracked-1")
	if got.Status.LastAppliedRevision != first {
		t.Fatalf("applied revision %q, want the branch's commit %s", got.Status.LastAppliedRevision, first)
	}

	second := repo.Push(t, tf("two"))
	got = e.waitWorkspace(t, "tracked", "the new commit applied", func(ws *v1alpha1.TerraformWorkspace) bool {
		return ws.Status.LastAppliedRevision == second && meta.IsStatusConditionTrue(ws.Status.Conditions, v1alpha1.WorkspaceConditionReady)
	})
	run, err := e.client.TerrarunV1alpha1().TerraformRuns("default").Get(ctxT(t), got.Status.LastAppliedRun, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if run.Annotations[v1alpha1.AnnotationTrigger] != string(v1alpha1.TriggerNewRevision) || run.Status.Plan.Change != 1 {
		t.Errorf("run %s: trigger %q, plan %+v; want NewRevision changing 1 resource", run.Name, run.Annotations[v1alpha1.AnnotationTrigger], run.Status.Plan)
	}
	if len(got.Status.Outputs) != 1 || outputValue(got.Status.Outputs[0]) != `"two"` {
		t.Errorf("outputs %+v, want the new commit's", got.Status.Outputs)
	}
	// One apply per commit: no run applies the same commit again.
	time.Sleep(3 * time.Second)
	list, err := e.client.TerrarunV1alpha1().TerraformRuns("default").List(ctxT(t), metav1.ListOptions{LabelSelector: v1alpha1.LabelWorkspace + "=tracked"})
	if err != nil {
		t.Fatal(err)
	}
	applies := 0
	for _, r := range list.Items {
		if r.Spec.Operation == v1alpha1.OperationApply {
			applies++
		}
	}
	if applies != 2 {
		t.Errorf("%d apply runs for two commits, want 2", applies)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.WorkspaceConditionDrifted); c != nil && c.Status == metav1.ConditionTrue {
		t.Errorf("a new commit was reported as drift: %s", c.Message)
	}
}

// TestWorkspaceDependencies feeds one workspace's outputs, a sensitive one
// too, into another's variables: the downstream waits for the upstream,
// receives its values without any reaching a status, runs again when the
// upstream applies again, and a dependency cycle is refused.
func TestWorkspaceDependencies(t *testing.T) {
	e := newRunEnv(t)
	// The sensitive output is computed, so that it is not in network's spec.
	seed := fmt.Sprintf("tok%08x", time.Now().UnixNano()&0xffffffff)
	secret := strings.ToUpper(seed)
	network := `variable "cidr" {
  type    = string
  default = "10.0.0.0/16"
}

resource "terraform_data" "net" {
  input = var.cidr
}

output "cidr" {
  value = terraform_data.net.output
}

output "token" {
  value     = upper("` + seed + `")
  sensitive = true
}

output "zones" {
  value = ["a", "b"]
}
`
	app := `variable "cidr" {
  type = string
}

variable "token" {
  type = string
}

variable "zones" {
  type = list(string)
}

resource "terraform_data" "app" {
  input = "${var.cidr} ${length(var.token)} ${join(",", var.zones)}"
}

output "seen" {
  value     = terraform_data.app.output
  sensitive = true
}
`
	deps := `  approval:
    mode: Auto
  dependsOn:
  - name: network
`
	vars := `    variables:
    - name: cidr
      valueFrom:
        workspaceOutput: {name: network, output: cidr}
    - name: token
      valueFrom:
        workspaceOutput: {name: network, output: token}
    - name: zones
      valueFrom:
        workspaceOutput: {name: network, output: zones}
`
	// The downstream first: it waits.
	e.create(t, strings.Replace(workspaceManifest("app", app, deps), "  template:\n", "  template:\n"+vars, 1))
	e.waitWorkspace(t, "app", "waiting for network", func(ws *v1alpha1.TerraformWorkspace) bool {
		c := meta.FindStatusCondition(ws.Status.Conditions, v1alpha1.WorkspaceConditionReconciling)
		return c != nil && c.Reason == "DependencyNotReady"
	})
	if runs := e.runsOf(t, "app"); len(runs) != 0 {
		t.Fatalf("app started %v before network existed", runs)
	}
	e.create(t, workspaceManifest("network", network, "  approval:\n    mode: Auto\n"))
	e.readyAt(t, "network", "network-1")
	e.readyAt(t, "app", "app-1")

	seen := func(run string) string {
		t.Helper()
		out := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw(run, "outputs"))
		var outputs map[string]struct {
			Value any `json:"value"`
		}
		if err := json.Unmarshal([]byte(out), &outputs); err != nil {
			t.Fatalf("outputs of %s: %v\n%s", run, err, out)
		}
		s, _ := outputs["seen"].Value.(string)
		return s
	}
	if got, want := seen("app-1"), fmt.Sprintf("10.0.0.0/16 %d a,b", len(secret)); got != want {
		t.Errorf("app saw %q, want %q", got, want)
	}
	run, err := e.client.TerrarunV1alpha1().TerraformRuns("default").Get(ctxT(t), "app-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ro := run.Spec.Variables[0].ValueFrom.RunOutput; ro == nil || ro.Name != "network-1" {
		t.Errorf("app-1 reads %+v, want the outputs of network-1", run.Spec.Variables[0].ValueFrom)
	}
	for _, obj := range []string{"tfws/app", "tfws/network", "tfr/app-1", "tfr/network-1"} {
		if out := mustKubectl(t, e.Kubeconfig, "get", obj, "-o", "yaml"); strings.Contains(out, secret) {
			t.Errorf("%s holds the sensitive output:\n%s", obj, out)
		}
	}
	if log := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("app-1", "logs?stage=plan")); strings.Contains(log, secret) {
		t.Errorf("app-1's plan log holds the sensitive output")
	}

	// A new apply upstream is a new run downstream, with the new value.
	e.patchWorkspace(t, "network", `{"spec":{"template":{"variables":[{"name":"cidr","value":"10.1.0.0/16"}]}}}`)
	e.readyAt(t, "network", "network-2")
	got := e.waitWorkspace(t, "app", "applied with network-2's outputs", func(ws *v1alpha1.TerraformWorkspace) bool {
		return ws.Status.LastAppliedRun == "app-2" && meta.IsStatusConditionTrue(ws.Status.Conditions, v1alpha1.WorkspaceConditionReady)
	})
	if s := seen(got.Status.LastAppliedRun); !strings.HasPrefix(s, "10.1.0.0/16 ") {
		t.Errorf("app-2 saw %q, want the new cidr", s)
	}
	if why := mustKubectl(t, e.Kubeconfig, "get", "tfr", "app-2", "-o", `jsonpath={.metadata.annotations.terrarun\.dev/trigger}`); why != string(v1alpha1.TriggerUpstreamChanged) {
		t.Errorf("app-2 was started by %q, want UpstreamChanged", why)
	}

	// A cycle is refused, naming the field.
	out, err := kubectl(t, e.Kubeconfig, "patch", "tfws", "network", "--type=merge", "-p", `{"spec":{"dependsOn":[{"name":"app"}]}}`)
	if err == nil || !strings.Contains(out, "spec.dependsOn[0].name") || !strings.Contains(out, "network → app → network") {
		t.Errorf("a dependency cycle: %v %s, want it refused naming spec.dependsOn[0].name and the cycle", err, out)
	}
}

// TestWorkspaceConfigMap changes the content of a ConfigMap that a
// workspace's variable reads: the content is part of the hash, so one run
// applies the new value.
func TestWorkspaceConfigMap(t *testing.T) {
	e := newRunEnv(t)
	dir := filepath.Join(e.DataDir, "values", "default", "configmaps", "settings")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "greeting"), "from-configmap-1")
	e.create(t, strings.Replace(workspaceManifest("configured", workspaceTF, "  approval:\n    mode: Auto\n  interval: 10s\n"), "  template:\n",
		"  template:\n    variables:\n    - name: greeting\n      valueFrom:\n        configMapKeyRef: {name: settings, key: greeting}\n", 1))
	got := e.readyAt(t, "configured", "configured-1")
	if len(got.Status.Outputs) != 1 || outputValue(got.Status.Outputs[0]) != `"from-configmap-1"` {
		t.Fatalf("outputs %+v, want the ConfigMap's value", got.Status.Outputs)
	}
	writeFile(t, filepath.Join(dir, "greeting"), "from-configmap-2")
	got = e.waitWorkspace(t, "configured", "the new ConfigMap content applied", func(ws *v1alpha1.TerraformWorkspace) bool {
		return len(ws.Status.Outputs) == 1 && outputValue(ws.Status.Outputs[0]) == `"from-configmap-2"` &&
			meta.IsStatusConditionTrue(ws.Status.Conditions, v1alpha1.WorkspaceConditionReady)
	})
	run, err := e.client.TerrarunV1alpha1().TerraformRuns("default").Get(ctxT(t), got.Status.LastAppliedRun, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if run.Annotations[v1alpha1.AnnotationTrigger] != string(v1alpha1.TriggerSpecChange) {
		t.Errorf("run %s was started by %q, want SpecChange", run.Name, run.Annotations[v1alpha1.AnnotationTrigger])
	}
}

// TestReadmeWorkspace runs the README's Workspaces commands, with its
// example files, as they are written there.
func TestReadmeWorkspace(t *testing.T) {
	e := newRunEnv(t)
	kc := e.Kubeconfig
	w := "/apis/terrarun.dev/v1alpha1/namespaces/default/terraformworkspaces/greeter"
	approve := func(run string) {
		t.Helper()
		got := e.waitPhase(t, run, 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		approval := filepath.Join(t.TempDir(), "approval.yaml")
		writeFile(t, approval, `{"apiVersion":"terrarun.dev/v1alpha1","kind":"TerraformRunApproval","planDigest":"`+got.Status.Plan.Digest+`","comment":"lgtm"}`)
		mustKubectl(t, e.bob, "create", "--raw", raw(run, "approve"), "-f", approval)
	}

	mustKubectl(t, kc, "apply", "-f", harness.RepoPath("artifacts", "examples", "workspace.yaml"))
	if out := mustKubectl(t, kc, "get", "tfws", "greeter"); !strings.Contains(out, "LAST-RUN") {
		t.Errorf("kubectl get tfws greeter:\n%s", out)
	}
	approve("greeter-1")
	e.readyAt(t, "greeter", "greeter-1")
	if out := mustKubectl(t, kc, "get", "tfr", "-l", "terrarun.dev/workspace=greeter"); !strings.Contains(out, "greeter-1") {
		t.Errorf("the workspace's runs:\n%s", out)
	}
	mustKubectl(t, kc, "patch", "tfws", "greeter", "--type=merge", "-p", `{"spec":{"template":{"variables":[{"name":"greeting","value":"hi"}]}}}`)
	approve("greeter-2")
	got := e.readyAt(t, "greeter", "greeter-2")
	if len(got.Status.Outputs) != 1 || outputValue(got.Status.Outputs[0]) != `"hi"` {
		t.Errorf("outputs after the patch: %+v", got.Status.Outputs)
	}
	if out := mustKubectl(t, kc, "create", "--raw", w+"/rerun", "-f", harness.RepoPath("artifacts", "examples", "rerun.json")); !strings.Contains(out, `"greeter-3"`) {
		t.Errorf("rerun answered:\n%s", out)
	}
	e.waitPhase(t, "greeter-3", 3*time.Minute, v1alpha1.RunPhaseSucceeded)
	// The plugin suspends, lists and resumes it.
	if out, code := plugin(t, kc, "", "suspend", "greeter"); code != 0 || !strings.Contains(out, "Workspace default/greeter suspended") {
		t.Errorf("suspend: exit %d\n%s", code, out)
	}
	if out, code := plugin(t, kc, "", "workspaces"); code != 0 || !regexp.MustCompile(`(?m)^greeter\s+True\s+\S+\s+true\s+-\s+greeter-3\s`).MatchString(out) {
		t.Errorf("workspaces: exit %d\n%s", code, out)
	}
	if out, code := plugin(t, kc, "", "resume", "greeter"); code != 0 || mustKubectl(t, kc, "get", "tfws", "greeter", "-o", "jsonpath={.spec.suspend}") == "true" {
		t.Errorf("resume: exit %d\n%s", code, out)
	}
	mustKubectl(t, kc, "delete", "tfws", "greeter", "--wait=false")
	approve("greeter-4")
	if err := harness.Poll(ctxT(t), 200*time.Millisecond, 3*time.Minute, "greeter to be gone", func(ctx context.Context) bool {
		_, err := kubectl(t, kc, "get", "tfws", "greeter")
		return err != nil
	}); err != nil {
		t.Fatal(err)
	}
}
