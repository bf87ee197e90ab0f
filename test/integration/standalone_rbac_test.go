package integration

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
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
