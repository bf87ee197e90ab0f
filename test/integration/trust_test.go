package integration

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

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
