package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runner/oci/ocitest"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// TestExamples applies the runs of artifacts/examples as their comments say
// to in standalone mode (the Secret as a file) and checks that each plans,
// and that each keeps a state of its own.
func TestExamples(t *testing.T) {
	e := newRunEnv(t)
	workspaces := map[string]string{}
	for _, f := range []string{"inline-terraform-data.yaml", "secret-variable.yaml", "git-source.yaml", "oci-source.yaml"} {
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

// TestOCIExample follows oci-source.yaml's comment: the configuration of
// artifacts/examples/oci/config pushed to a plain-HTTP registry and signed
// with hack/ociartifact's code, the public key as the cosign-keys Secret;
// the example (pointed at this test's registry) verifies, plans and applies.
func TestOCIExample(t *testing.T) {
	e := newRunEnv(t)
	reg := ocitest.Start(t, ocitest.Options{Insecure: true})
	files := map[string]string{}
	dir := harness.RepoPath("artifacts", "examples", "oci", "config")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		b, err := os.ReadFile(filepath.Join(dir, en.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[en.Name()] = string(b)
	}
	key := ocitest.NewKey(t)
	reg.Sign("infra/release", reg.Push("infra/release", "v1", ocitest.Artifact{Layer: ocitest.TarGz(files)}), key.Signer)
	e.secret(t, "default", "cosign-keys", "cosign.pub", string(key.PublicPEM))
	b, err := os.ReadFile(harness.RepoPath("artifacts", "examples", "oci-source.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.ReplaceAll(string(b), "127.0.0.1:5000", reg.Host)
	if manifest == string(b) {
		t.Fatal("oci-source.yaml no longer points at 127.0.0.1:5000, the registry of oci/registry.yml")
	}
	e.create(t, manifest)
	run := e.waitPhase(t, "from-oci", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if run.Status.Phase != v1alpha1.RunPhaseSucceeded || len(run.Status.Outputs) != 1 || !strings.Contains(outputValue(run.Status.Outputs[0]), "published as an OCI artifact") {
		t.Errorf("from-oci ended %s (%s), outputs %+v", run.Status.Phase, run.Status.Message, run.Status.Outputs)
	}
}

// TestFluxExampleInStandalone: flux-source.yaml's run is refused by a
// standalone server, which has no cluster and no source-controller, with
// a message that names the field and says what to use instead.
func TestFluxExampleInStandalone(t *testing.T) {
	e := newRunEnv(t)
	b, err := os.ReadFile(harness.RepoPath("artifacts", "examples", "flux-source.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(b), "\n---\n")
	var run v1alpha1.TerraformRun
	if err := yaml.Unmarshal([]byte(docs[len(docs)-1]), &run); err != nil || run.Kind != "TerraformRun" || run.Spec.Source.SourceRef == nil {
		t.Fatalf("flux-source.yaml's last document: %v (kind %q, source %+v)", err, run.Kind, run.Spec.Source)
	}
	path := filepath.Join(t.TempDir(), "run.yaml")
	writeFile(t, path, docs[len(docs)-1])
	out, err := kubectl(t, e.Kubeconfig, "create", "-f", path)
	if err == nil || !strings.Contains(out, "spec.source.sourceRef: Flux sources need cluster mode") || !strings.Contains(out, "use an inline, configMap, git or oci source") {
		t.Errorf("flux-source.yaml's run in standalone mode: %v\n%s", err, out)
	}
}
