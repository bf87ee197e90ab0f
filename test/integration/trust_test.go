package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// TestAliasBodyIsBoundedBeforeExpansion sends the review's action body, an
// approval of a run that does not exist with one 1 MB string repeated a
// thousand times through YAML aliases, twice at once as an approver with
// kubectl, as JSON and as YAML. Each is refused with 413 naming the limit,
// and the server's peak resident set grows by far less than one expansion.
func TestAliasBodyIsBoundedBeforeExpansion(t *testing.T) {
	e := newRunEnv(t)
	var b strings.Builder
	b.WriteString("apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRunApproval\nplanDigest: sha256:00\ncomment: &c " + strings.Repeat("x", 1<<20) + "\nextra:\n")
	for range 1000 {
		b.WriteString("- *c\n")
	}
	body := filepath.Join(t.TempDir(), "approval.yaml")
	if err := os.WriteFile(body, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	before, err := harness.ReadMem(e.Pid())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	outs := make([]string, 2)
	for i := range outs {
		wg.Go(func() {
			// kubectl create --raw sends the file as JSON, whatever it holds.
			out, err := kubectl(t, e.bob, "create", "--raw", raw("nonexistent", "approve"), "-f", body)
			if err == nil {
				out = "kubectl succeeded: " + out
			}
			outs[i] = out
		})
	}
	wg.Wait()
	code, yamlOut, err := harness.RequestAsContentType(ctxT(t), kubeconfigRest(t, e.bob), "application/yaml", raw("nonexistent", "approve"), strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if code != 413 {
		t.Errorf("the alias body sent as YAML: %d %.300s, want 413", code, yamlOut)
	}
	for _, out := range outs {
		if !strings.Contains(out, "expands through its aliases") || !strings.Contains(out, "Request entity too large") {
			t.Errorf("the alias body sent as JSON by kubectl: %.500s", out)
		}
	}
	after, err := harness.ReadMem(e.Pid())
	if err != nil {
		t.Fatal(err)
	}
	// One expansion is a gigabyte; reading and parsing the bodies, a few
	// times their size.
	if grew := after.VmHWM - before.VmHWM; grew > 256 {
		t.Errorf("the server's peak resident set grew by %.0f MiB (from %.0f to %.0f MiB) for three 1 MiB bodies", grew, before.VmHWM, after.VmHWM)
	}
}

// TestPluginEscapesTerminalSequences: a run's code prints sequences that
// retitle the terminal, write its clipboard (OSC 52), clear the screen and
// move the cursor, then fails. kubectl terrarun logs and wait print none of
// them raw; logs --raw does, as the stage wrote them. And outputs, refused
// to a viewer, says why as the other commands do.
func TestPluginEscapesTerminalSequences(t *testing.T) {
	e := newRunEnv(t)
	e.create(t, runManifest("escapes", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {
  provisioner "local-exec" {
    command = "printf 'title\\033]0;pwned\\007 clip\\033]52;c;ZXZpbA==\\007 clear\\033[2J\\033[H c1\\302\\233' ; exit 1"
  }
}`}, "  approval:\n    mode: Auto\n")))
	e.waitPhase(t, "escapes", 3*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded)

	raw, code := plugin(t, e.Kubeconfig, "", "logs", "escapes", "--stage", "apply", "--raw")
	if code != 0 || !strings.Contains(raw, "\x1b]52;c;ZXZpbA==\x07") {
		t.Fatalf("logs --raw: exit %d; the stage's sequences are not in its log:\n%q", code, raw)
	}
	logs, _ := plugin(t, e.Kubeconfig, "", "logs", "escapes", "--stage", "apply")
	wait, code := plugin(t, e.Kubeconfig, "", "wait", "escapes")
	if code != 1 || !strings.Contains(wait, `\x1b]52;c;ZXZpbA==\x07`) {
		t.Errorf("wait on the failed run: exit %d, want 1 with the message's sequences escaped:\n%q", code, wait)
	}
	for what, out := range map[string]string{"logs": logs, "wait": wait} {
		if i := strings.IndexFunc(out, func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' || r >= 0x7f && r <= 0x9f }); i >= 0 {
			t.Errorf("kubectl terrarun %s printed a control character: %q", what, out[max(0, i-20):min(len(out), i+20)])
		}
	}
	if !strings.Contains(logs, `\x1b]0;pwned\x07`) || !strings.Contains(logs, `\u009b`) {
		t.Errorf("logs does not show the escaped sequences:\n%s", logs)
	}

	viewer := e.mint(t, "vic", "terrarun:viewers")
	out, code := plugin(t, viewer, "", "outputs", "escapes")
	if code != 1 || !strings.Contains(out, "forbidden") || !strings.Contains(out, "terraformruns/outputs") {
		t.Errorf("outputs as a viewer: exit %d, want 1 with the server's reason:\n%s", code, out)
	}
}

// TestWorkspaceRunNamesSquatted: another user creates plain runs named like
// a workspace's next runs. The workspace does not retry in silence while
// Ready still describes its older generation: it is Stalled and not Ready,
// with a reason that names the run and its creator, and once the runs are
// deleted it creates its own and applies the current spec.
func TestWorkspaceRunNamesSquatted(t *testing.T) {
	e := newRunEnv(t)
	e.create(t, workspaceManifest("sq", workspaceTF, "  approval:\n    mode: Auto\n"))
	e.readyAt(t, "sq", "sq-1")
	for _, name := range []string{"sq-2", "sq-3"} {
		path := filepath.Join(t.TempDir(), name+".yaml")
		writeFile(t, path, runManifest(name, inline(map[string]string{"main.tf": `resource "terraform_data" "squat" {}`}, "  operation: Plan\n")))
		mustKubectl(t, e.bob, "create", "-f", path)
	}
	e.patchWorkspace(t, "sq", `{"spec":{"template":{"variables":[{"name":"greeting","value":"b"}]}}}`)
	got := e.waitWorkspace(t, "sq", "Stalled on the taken name", func(ws *v1alpha1.TerraformWorkspace) bool {
		c := meta.FindStatusCondition(ws.Status.Conditions, v1alpha1.WorkspaceConditionStalled)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == "RunNameTaken"
	})
	stalled := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.WorkspaceConditionStalled)
	if !strings.Contains(stalled.Message, "sq-2") || !strings.Contains(stalled.Message, "bob") {
		t.Errorf("Stalled: %q, want the run and its creator named", stalled.Message)
	}
	if ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.WorkspaceConditionReady); ready == nil || ready.Status != metav1.ConditionFalse || ready.ObservedGeneration != got.Generation {
		t.Errorf("Ready while the current spec waits on a taken name: %+v (generation %d)", ready, got.Generation)
	}
	if events := mustKubectl(t, e.Kubeconfig, "get", "events", "--field-selector", "involvedObject.name=sq"); !strings.Contains(events, "RunNameTaken") {
		t.Errorf("no RunNameTaken Event:\n%s", events)
	}
	mustKubectl(t, e.Kubeconfig, "delete", "tfr", "sq-2", "sq-3")
	e.readyAt(t, "sq", "sq-2")
}

// TestRequestersDoNotApprove: separation of duties follows who asked for a
// run, not only who the server recorded as its creator. alice sets up a
// workspace; carol, who may edit and approve, asks for its rerun and then
// deletes it: she may approve neither the rerun's run nor the Destroy run,
// whose spec.requestedBy names her; bob may. A client cannot name
// requesters itself.
func TestRequestersDoNotApprove(t *testing.T) {
	e := newRunEnv(t)
	alice, _ := e.user(t, "alice")
	carol, _ := e.user(t, "carol")
	tf := `resource "terraform_data" "x" {
  triggers_replace = timestamp()
}
`
	path := filepath.Join(t.TempDir(), "ws.yaml")
	writeFile(t, path, workspaceManifest("owned", tf, "  destroyOnDelete: true\n"))
	mustKubectl(t, alice, "create", "-f", path)
	approveAs := func(user, run string) (string, error) {
		return e.approve(t, user, e.waitPhase(t, run, 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval))
	}
	if out, err := approveAs(e.bob, "owned-1"); err != nil {
		t.Fatalf("bob approves alice's first run: %v\n%s", err, out)
	}
	e.readyAt(t, "owned", "owned-1")

	rerun := filepath.Join(t.TempDir(), "rerun.json")
	writeFile(t, rerun, `{"apiVersion":"terrarun.dev/v1alpha1","kind":"TerraformWorkspaceRerun"}`)
	mustKubectl(t, carol, "create", "--raw", "/apis/terrarun.dev/v1alpha1/namespaces/default/terraformworkspaces/owned/rerun", "-f", rerun)
	for _, c := range []struct{ run, verb string }{{"owned-2", "rerun"}, {"owned-3", "delete"}} {
		if c.verb == "delete" {
			mustKubectl(t, carol, "delete", "tfws", "owned", "--wait=false")
		}
		run := e.waitPhase(t, c.run, 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		if !slices.Equal(run.Spec.RequestedBy, []string{"carol"}) || run.Spec.Creator.Username != "alice" {
			t.Errorf("run %s after carol's %s: creator %s, requestedBy %v; want alice and [carol]", c.run, c.verb, run.Spec.Creator.Username, run.Spec.RequestedBy)
		}
		if out, err := approveAs(carol, c.run); err == nil || !strings.Contains(out, "(Forbidden)") || !strings.Contains(out, "separation of duties: carol requested this run") {
			t.Errorf("carol approves run %s that her %s made: %v\n%s", c.run, c.verb, err, out)
		}
		if out, err := approveAs(e.bob, c.run); err != nil {
			t.Fatalf("bob approves run %s: %v\n%s", c.run, err, out)
		}
		if c.verb == "rerun" {
			e.waitPhase(t, c.run, 3*time.Minute, v1alpha1.RunPhaseSucceeded)
		}
	}
	// The Destroy run applied; the workspace and its runs go.
	if err := harness.Poll(ctxT(t), 200*time.Millisecond, 3*time.Minute, "the deleted workspace and its runs to be gone", func(context.Context) bool {
		_, err := kubectl(t, e.Kubeconfig, "get", "tfws", "owned")
		return err != nil && len(e.runsOf(t, "owned")) == 0
	}); err != nil {
		t.Error(err)
	}

	// A delete of the collection records its requester as well.
	writeFile(t, path, workspaceManifest("owned-too", tf, "  destroyOnDelete: true\n"))
	mustKubectl(t, alice, "create", "-f", path)
	if out, err := approveAs(e.bob, "owned-too-1"); err != nil {
		t.Fatalf("bob approves alice's run: %v\n%s", err, out)
	}
	e.readyAt(t, "owned-too", "owned-too-1")
	mustKubectl(t, alice, "label", "tfws", "owned-too", "doomed=yes")
	mustKubectl(t, carol, "delete", "--raw", "/apis/terrarun.dev/v1alpha1/namespaces/default/terraformworkspaces?labelSelector=doomed%3Dyes")
	if run := e.waitPhase(t, "owned-too-2", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval); !slices.Equal(run.Spec.RequestedBy, []string{"carol"}) {
		t.Errorf("the Destroy run after carol's delete of the collection names %v, want [carol]", run.Spec.RequestedBy)
	}
	if out, err := approveAs(carol, "owned-too-2"); err == nil || !strings.Contains(out, "(Forbidden)") || !strings.Contains(out, "separation of duties: carol requested this run") {
		t.Errorf("carol approves the Destroy run her delete of the collection made: %v\n%s", err, out)
	}
	if out, err := approveAs(e.bob, "owned-too-2"); err != nil {
		t.Fatalf("bob approves the Destroy run: %v\n%s", err, out)
	}

	// Nobody names requesters for the server.
	forged := filepath.Join(t.TempDir(), "forged.yaml")
	writeFile(t, forged, runManifest("forged-requesters", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {}`}, "  requestedBy: [mallory]\n")))
	if out, err := kubectl(t, carol, "create", "-f", forged); err == nil || !strings.Contains(out, "spec.requestedBy") {
		t.Errorf("a run created with spec.requestedBy: %v\n%s", err, out)
	}
}

// TestDeleteMidApply deletes a run whose apply is in flight: the run stays,
// being deleted and saying so, until its apply has ended, and terraform is
// not interrupted: the state holds the resource, not tainted. Then the run
// is gone.
func TestDeleteMidApply(t *testing.T) {
	e := newRunEnv(t)
	e.create(t, runManifest("midway", inline(map[string]string{"main.tf": `resource "terraform_data" "slow" {
  provisioner "local-exec" {
    command = "sleep 6"
  }
}`}, "  workspace: midway\n  approval:\n    mode: Auto\n")))
	e.waitPhase(t, "midway", 3*time.Minute, v1alpha1.RunPhaseApplying)
	if out, err := kubectl(t, e.Kubeconfig, "delete", "tfr", "midway", "--wait=false"); err != nil {
		t.Fatalf("kubectl delete: %v\n%s", err, out)
	}
	run := e.waitPhase(t, "midway", 30*time.Second, v1alpha1.RunPhaseApplying)
	if run.DeletionTimestamp == nil {
		t.Fatalf("the run is not being deleted: %+v", run.ObjectMeta)
	}
	if err := harness.Poll(ctxT(t), 100*time.Millisecond, 30*time.Second, "the run to say it is being deleted", func(ctx context.Context) bool {
		r, err := e.client.TerrarunV1alpha1().TerraformRuns("default").Get(ctx, "midway", metav1.GetOptions{})
		return err == nil && strings.HasPrefix(r.Status.Message, "Being deleted once its apply ends")
	}); err != nil {
		t.Error(err)
	}
	if err := harness.Poll(ctxT(t), 200*time.Millisecond, 2*time.Minute, "the run to be gone", func(ctx context.Context) bool {
		_, err := e.client.TerrarunV1alpha1().TerraformRuns("default").Get(ctx, "midway", metav1.GetOptions{})
		return err != nil
	}); err != nil {
		t.Fatal(err)
	}
	state, err := os.ReadFile(filepath.Join(e.DataDir, "state", "default", "midway", "terraform.tfstate"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(state), `"terraform_data"`) || strings.Contains(string(state), `"tainted"`) {
		t.Errorf("the apply was cut off: the state does not hold the resource untainted:\n%s", state)
	}
}

// TestShutdownWaitsForApplies stops the server (SIGTERM, as Ctrl-C or a
// rolling update would) while an apply is in flight: it waits for the apply
// to end, records it, and the run has Succeeded when the server is back,
// its resource in the state untainted. With a grace period shorter than
// the apply, the server says which apply it interrupted, and the run fails
// ExecutorLost after the restart (terrarun never re-applies).
func TestShutdownWaitsForApplies(t *testing.T) {
	slow := func(seconds int) map[string]string {
		return map[string]string{"main.tf": fmt.Sprintf(`resource "terraform_data" "slow" {
  provisioner "local-exec" {
    command = "sleep %d"
  }
}`, seconds)}
	}
	for _, c := range []struct {
		name, grace string
		sleep       int
		want        v1alpha1.RunPhase
		says        string
	}{
		{"waits", "2m", 6, v1alpha1.RunPhaseSucceeded, "waiting up to 2m0s for 1 apply(s) in flight to end"},
		{"interrupts after its grace", "1s", 60, v1alpha1.RunPhaseFailed, "apply(s) still running after 1s are interrupted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dataDir := t.TempDir()
			s := startBinary(t, dataDir, "--shutdown-apply-grace-period="+c.grace)
			e := envOn(s)
			e.create(t, runManifest("drain", inline(slow(c.sleep), "  workspace: drain\n  approval:\n    mode: Auto\n")))
			e.waitPhase(t, "drain", 3*time.Minute, v1alpha1.RunPhaseApplying)
			time.Sleep(time.Second) // into the sleep
			if err := s.Stop(3 * time.Minute); err != nil {
				t.Fatal(err)
			}
			if out := s.output.String(); !strings.Contains(out, c.says) || !strings.Contains(out, "default.drain.plan.1") {
				t.Errorf("the server's log does not say %q, naming the execution:\n%s", c.says, out)
			}
			s2 := startBinary(t, dataDir)
			run := envOn(s2).waitPhase(t, "drain", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
			if run.Status.Phase != c.want {
				t.Fatalf("after the restart the run is %s, want %s: %s", run.Status.Phase, c.want, run.Status.Message)
			}
			if c.want == v1alpha1.RunPhaseSucceeded {
				state, err := os.ReadFile(filepath.Join(dataDir, "state", "default", "drain", "terraform.tfstate"))
				if err != nil || !strings.Contains(string(state), `"terraform_data"`) || strings.Contains(string(state), `"tainted"`) {
					t.Errorf("the state does not hold the resource untainted (%v):\n%s", err, state)
				}
			}
		})
	}
}
