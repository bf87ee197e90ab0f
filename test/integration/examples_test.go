package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// TestExamples applies the runs of artifacts/examples as their comments say
// to in standalone mode (the Secret as a file) and checks that each plans,
// and that each keeps a state of its own.
func TestExamples(t *testing.T) {
	e := newRunEnv(t)
	workspaces := map[string]string{}
	for _, f := range []string{"inline-terraform-data.yaml", "secret-variable.yaml", "git-source.yaml"} {
		b, err := os.ReadFile(harness.RepoPath("artifacts", "examples", f))
		if err != nil {
			t.Fatal(err)
		}
		var run v1alpha1.TerraformRun
		if err := yaml.Unmarshal(b, &run); err != nil || run.Kind != "TerraformRun" {
			t.Fatalf("%s: %v (kind %q)", f, err, run.Kind)
		}
		if other, dup := workspaces[run.Spec.Workspace]; run.Spec.Workspace == "" || dup {
			t.Errorf("%s: spec.workspace %q, shared with %s: examples must not share a state", f, run.Spec.Workspace, other)
		}
		workspaces[run.Spec.Workspace] = f
	}
	// As secret-variable.yaml says for a standalone server.
	dir := filepath.Join(e.DataDir, "values", "default", "secrets", "db-credentials")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "password"), "correct-horse-battery-staple")
	for name, f := range map[string]string{"hello": "inline-terraform-data.yaml", "with-secret": "secret-variable.yaml"} {
		mustKubectl(t, e.Kubeconfig, "apply", "-f", harness.RepoPath("artifacts", "examples", f))
		run := e.waitPhase(t, name, 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval, v1alpha1.RunPhaseFailed)
		if run.Status.Phase != v1alpha1.RunPhaseAwaitingApproval {
			t.Errorf("%s ended %s: %s", f, run.Status.Phase, run.Status.Message)
		}
	}
	if out := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("with-secret", "plan")); strings.Contains(out, "correct-horse") {
		t.Errorf("the plan shows the Secret's value:\n%s", out)
	}

	// git-source.yaml without network: the run fails, and the first line of
	// its message (what kubectl get events shows) says why.
	e.create(t, runManifest("from-git", "  workspace: from-git\n  source:\n    git:\n      url: https://127.0.0.1:1/x/y.git\n      ref: main\n"))
	run := e.waitPhase(t, "from-git", 3*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded)
	first, _, _ := strings.Cut(run.Status.Message, "\n")
	if run.Status.Phase != v1alpha1.RunPhaseFailed || !strings.Contains(first, "git clone: fatal: unable to access") || !strings.Contains(first, "(exit status 128)") {
		t.Errorf("an unreachable git host: %s, first line %q", run.Status.Phase, first)
	}
}
