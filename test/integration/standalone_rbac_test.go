package integration

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// TestStandaloneRoles attacks standalone mode's authorization with kubectl as
// users holding too few roles: an editor who approves, patches status or
// impersonates the executor, a viewer who creates, and a user without groups.
func TestStandaloneRoles(t *testing.T) {
	e := newRunEnv(t)
	editor := e.mint(t, "eve", "terrarun:editors")
	viewer := e.mint(t, "vic", "terrarun:viewers")
	nobody := e.mint(t, "nobody")

	e.create(t, runManifest("guarded", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {}`}, "")))
	run := e.waitPhase(t, "guarded", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
	approval := filepath.Join(t.TempDir(), "approval.yaml")
	writeFile(t, approval, `{"apiVersion":"terrarun.dev/v1alpha1","kind":"TerraformRunApproval","planDigest":"`+run.Status.Plan.Digest+`"}`)

	forbidden := func(who, kubeconfig string, args ...string) {
		t.Helper()
		out, err := kubectl(t, kubeconfig, args...)
		if err == nil || !strings.Contains(out, "forbidden") {
			t.Errorf("%s: kubectl %s: %v\n%s\nwant forbidden", who, strings.Join(args, " "), err, out)
		}
	}
	forbidden("an editor approving", editor, "create", "--raw", raw("guarded", "approve"), "-f", approval)
	forbidden("an editor patching status", editor, "patch", "tfr", "guarded", "--subresource=status", "--type=merge", "-p", `{"status":{"message":"x"}}`)
	forbidden("an editor impersonating an executor", editor, "--as=system:terrarun:executor:default:guarded",
		"--as-group=system:terrarun:executors", "get", "--raw", raw("guarded", "outputs"))
	forbidden("an editor impersonating the admin", editor, "--as=terrarun-admin", "--as-group=system:masters", "get", "tfr")
	forbidden("a viewer deleting", viewer, "delete", "tfr", "guarded")
	forbidden("a viewer reading outputs", viewer, "get", "--raw", raw("guarded", "outputs"))
	forbidden("a user without groups", nobody, "get", "tfr")

	if out := mustKubectl(t, viewer, "get", "tfr", "guarded", "-o", "jsonpath={.status.phase}"); out != "AwaitingApproval" {
		t.Errorf("the viewer reads phase %q", out)
	}
	mustKubectl(t, e.bob, "create", "--raw", raw("guarded", "approve"), "-f", approval)
	e.waitPhase(t, "guarded", 3*time.Minute, v1alpha1.RunPhaseSucceeded)
}

// TestStandaloneKubectl: standalone mode answers what kubectl asks a
// cluster: `auth can-i` with the server's own roles, `auth whoami`, and the
// Events the controller records, in `get events` and in `describe`.
func TestStandaloneKubectl(t *testing.T) {
	e := newRunEnv(t)
	editor := e.mint(t, "eve", "terrarun:editors")
	nobody := e.mint(t, "nobody")

	canI := func(kubeconfig, want string, args ...string) {
		t.Helper()
		out, _ := kubectl(t, kubeconfig, append([]string{"auth", "can-i"}, args...)...)
		if got, _, _ := strings.Cut(strings.TrimSpace(out), " "); got != want {
			t.Errorf("auth can-i %s = %q, want %s", strings.Join(args, " "), got, want)
		}
	}
	canI(editor, "yes", "create", "terraformruns")
	canI(editor, "no", "create", "terraformruns", "--subresource=approve")
	canI(e.bob, "yes", "create", "terraformruns", "--subresource=approve")
	canI(nobody, "no", "get", "terraformruns")
	canI(e.Kubeconfig, "yes", "delete", "terraformruns")

	// can-i --list says what can-i answers.
	list := mustKubectl(t, editor, "auth", "can-i", "--list", "-n", "default")
	row := regexp.MustCompile(`(?m)^terraformruns\.terrarun\.dev\s+\[\]\s+\[\]\s+\[([^\]]*)\]`).FindStringSubmatch(list)
	if row == nil || !strings.Contains(row[1], "create") || strings.Contains(list, "terraformruns.terrarun.dev/approve") {
		t.Errorf("auth can-i --list as eve:\n%s", list)
	}
	if list := mustKubectl(t, e.bob, "auth", "can-i", "--list"); !strings.Contains(list, "terraformruns.terrarun.dev/approve") {
		t.Errorf("auth can-i --list as bob lists no approve:\n%s", list)
	}

	if out := mustKubectl(t, editor, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"); !strings.Contains(out, "eve") || !strings.Contains(out, "terrarun:editors") {
		t.Errorf("auth whoami as eve: %q", out)
	}

	e.create(t, runManifest("told", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {}`}, "  approval:\n    mode: Auto\n")))
	e.waitPhase(t, "told", 3*time.Minute, v1alpha1.RunPhaseSucceeded)
	var events string
	if err := harness.Poll(ctxT(t), 200*time.Millisecond, 30*time.Second, "the run's Applied event", func(context.Context) bool {
		events, _ = kubectl(t, editor, "get", "events", "--field-selector", "involvedObject.name=told")
		return strings.Contains(events, "Applied")
	}); err != nil {
		t.Fatalf("%v\n%s", err, events)
	}
	for _, want := range []string{"LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE", "terraformrun/told", "StageStarted", "Apply complete"} {
		if !strings.Contains(events, want) {
			t.Errorf("get events lacks %q:\n%s", want, events)
		}
	}
	described := mustKubectl(t, editor, "describe", "tfr", "told")
	if !regexp.MustCompile(`(?s)Events:.*Normal\s+Applied\s+.*terrarun-controller\s+Apply complete`).MatchString(described) {
		t.Errorf("describe shows no events:\n%s", described)
	}
	if out, err := kubectl(t, nobody, "get", "events"); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("a user without groups read events: %v\n%s", err, out)
	}
}
