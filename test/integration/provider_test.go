package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// TestProviderRuns runs a real provider plugin (test/provider, installed
// from a filesystem mirror on every stage) with each engine this host has,
// in a namespace and with a run name of 60 characters each: the plugin's
// Unix socket must fit its 108 bytes whatever their length. The resource
// keeps a file; changing the file is drift, which the next plan shows.
func TestProviderRuns(t *testing.T) {
	provider, err := harness.InstallTestProvider(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(engines) < 2 {
		t.Logf("only %s on this host: the other engine is not tested (make integration builds tofu with hack/engine.sh --build)", engineName)
	}
	for _, mode := range []struct {
		name    string
		args    []string
		engines []string
	}{
		{"sandboxed", nil, engines},
		// Unsandboxed stages keep a short TMPDIR of their own too.
		{"unsandboxed", []string{"--local-executor-sandbox=false"}, engines[:1]},
	} {
		t.Run(mode.name, func(t *testing.T) {
			files := t.TempDir()
			// The stages' user writes the provider's files.
			if err := os.Chmod(files, 0o777); err != nil {
				t.Fatal(err)
			}
			e := newRunEnv(t, append([]string{"--local-executor-mount", provider.Dir, "--local-executor-mount", files + ":rw",
				"--local-executor-env", "TF_CLI_CONFIG_FILE=" + provider.CLIConfig}, mode.args...)...)
			for _, eng := range mode.engines {
				providerRun(t, e, filepath.Base(eng), files)
			}
		})
	}
}

// providerRun runs the test provider with engine name, in a namespace and
// with a run name of 60 characters each, then plans the drift of its file.
func providerRun(t *testing.T, e *runEnv, name, files string) {
	t.Run(name, func(t *testing.T) {
		ns := fmt.Sprintf("providers-%s-", name)
		ns += strings.Repeat("n", 60-len(ns))
		run := fmt.Sprintf("provider-run-%s-", name)
		run += strings.Repeat("r", 60-len(run))
		file := filepath.Join(files, name+".txt")
		config := harness.TestProviderRequirement + fmt.Sprintf(`
resource "testing_file" "f" {
  path    = %q
  content = "v1"
}

output "content" {
  value = testing_file.f.content
}
`, file)
		manifestIn := func(workspace, runName, extra string) string {
			return fmt.Sprintf("apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n%s", runName, ns,
				strings.Replace(inline(map[string]string{"main.tf": config}, "  workspace: "+workspace+"\n"+extra), "binary: "+engineName, "binary: "+name, 1))
		}
		manifest := func(runName, extra string) string { return manifestIn("provider", runName, extra) }
		logOf := func(runName, stage string) string {
			return mustKubectl(t, e.Kubeconfig, "get", "--raw", "/apis/terrarun.dev/v1alpha1/namespaces/"+ns+"/terraformruns/"+runName+"/logs?stage="+stage)
		}
		path := filepath.Join(t.TempDir(), "run.yaml")
		writeFile(t, path, manifest(run, "  approval:\n    mode: Auto\n"))
		mustKubectl(t, e.Kubeconfig, "create", "-f", path)
		got, err := harness.WaitForPhase(ctxT(t), e.client, ns, run, 4*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != v1alpha1.RunPhaseSucceeded {
			t.Fatalf("the run ended %s: %s\nplan log:\n%s", got.Status.Phase, got.Status.Message,
				mustKubectl(t, e.Kubeconfig, "get", "--raw", "/apis/terrarun.dev/v1alpha1/namespaces/"+ns+"/terraformruns/"+run+"/logs?stage=plan"))
		}
		log := mustKubectl(t, e.Kubeconfig, "get", "--raw", "/apis/terrarun.dev/v1alpha1/namespaces/"+ns+"/terraformruns/"+run+"/logs?stage=apply")
		if !strings.Contains(log, "testing_file.f: Creation complete") {
			t.Errorf("the apply log does not show the file created:\n%s", log)
		}
		if b, err := os.ReadFile(file); err != nil || string(b) != "v1" {
			t.Fatalf("the provider's file: %q, %v", b, err)
		}
		// The Auto run planned and applied in one process: one init, which
		// installed the provider.
		// tofu names the provider with its registry's host, terraform without.
		installing := regexp.MustCompile(`Installing (registry\.terraform\.io/)?terrarun/testing`)
		if l := logOf(run, "plan"); len(installing.FindAllString(l+log, -1)) != 1 {
			t.Errorf("the provider was not installed exactly once:\nplan log:\n%s\napply log:\n%s", l, log)
		}

		// A manually approved run's apply stage runs in a process of its own,
		// and takes the provider from its creator's plugin cache: the plan's
		// lock file records its checksum.
		writeFile(t, path, manifestIn("provider-manual", "manual", ""))
		mustKubectl(t, e.Kubeconfig, "create", "-f", path)
		manual, err := harness.WaitForPhase(ctxT(t), e.client, ns, "manual", 4*time.Minute, v1alpha1.RunPhaseAwaitingApproval, v1alpha1.RunPhaseFailed)
		if err != nil || manual.Status.Phase != v1alpha1.RunPhaseAwaitingApproval {
			t.Fatalf("the manual run: %v %+v", err, manual.Status)
		}
		_, bob := e.user(t, "bob")
		if _, err := bob.TerrarunV1alpha1().TerraformRuns(ns).Approve(ctxT(t), "manual", &v1alpha1.TerraformRunApproval{PlanDigest: manual.Status.Plan.Digest}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("approving: %v", err)
		}
		manual, err = harness.WaitForPhase(ctxT(t), e.client, ns, "manual", 4*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		if err != nil || manual.Status.Phase != v1alpha1.RunPhaseSucceeded {
			t.Fatalf("the manual run: %v %s: %s", err, manual.Status.Phase, manual.Status.Message)
		}
		cached := regexp.MustCompile(`Using (registry\.terraform\.io/)?terrarun/testing v0\.1\.0 from the shared cache directory`)
		if l := logOf("manual", "apply"); !cached.MatchString(l) || installing.MatchString(l) {
			t.Errorf("the apply stage did not take the provider from the plugin cache:\n%s", l)
		}

		// Drift: the file changes behind terraform's back.
		if err := os.WriteFile(file, []byte("drifted"), 0o666); err != nil {
			t.Fatal(err)
		}
		writeFile(t, path, manifest("drift", "  operation: Plan\n"))
		mustKubectl(t, e.Kubeconfig, "create", "-f", path)
		drift, err := harness.WaitForPhase(ctxT(t), e.client, ns, "drift", 4*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		if err != nil {
			t.Fatal(err)
		}
		if p := drift.Status.Plan; drift.Status.Phase != v1alpha1.RunPhaseSucceeded || p == nil || p.Change != 1 || !p.HasChanges {
			t.Fatalf("the drift plan: %s %+v: %s", drift.Status.Phase, p, drift.Status.Message)
		}
		plan := mustKubectl(t, e.Kubeconfig, "get", "--raw", "/apis/terrarun.dev/v1alpha1/namespaces/"+ns+"/terraformruns/drift/plan")
		if !strings.Contains(plan, `"drifted" -> "v1"`) {
			t.Errorf("the plan does not undo the drift:\n%s", plan)
		}
	})
}

// TestPluginCacheAcrossCreators: a run cannot plant a provider that a run of
// another creator in the same namespace executes. Bob plans with the test
// provider and waits for an approval. Alice's run, in the same namespace,
// keeps replacing every copy of the provider in its plugin cache with a
// program that leaves a mark, while bob's approved apply stage takes the
// provider from his cache and runs it (the engines check a cached
// provider's checksum when init links it, not when they execute it).
func TestPluginCacheAcrossCreators(t *testing.T) {
	provider, err := harness.InstallTestProvider(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files := t.TempDir()
	if err := os.Chmod(files, 0o777); err != nil { // the stages' user writes there
		t.Fatal(err)
	}
	e := newRunEnv(t, "--local-executor-mount", provider.Dir, "--local-executor-mount", files+":rw",
		"--local-executor-env", "TF_CLI_CONFIG_FILE="+provider.CLIConfig)
	_, alice := e.user(t, "alice")
	const ns = "shared"
	newRun := func(name, tf string, mode v1alpha1.ApprovalMode) *v1alpha1.TerraformRun {
		return &v1alpha1.TerraformRun{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1alpha1.TerraformRunSpec{
				Source:    v1alpha1.Source{Inline: map[string]string{"main.tf": harness.TestProviderRequirement + tf}},
				Workspace: name,
				Engine:    v1alpha1.Engine{Binary: v1alpha1.EngineBinary(engineName)},
				Approval:  v1alpha1.Approval{Mode: mode},
			},
		}
	}
	logOf := func(name, stage string) string {
		out, _ := e.client.TerrarunV1alpha1().RESTClient().Get().AbsPath("/apis/terrarun.dev/v1alpha1/namespaces", ns, "terraformruns", name, "logs").
			Param("stage", stage).DoRaw(ctxT(t))
		return string(out)
	}

	bobs, err := e.bobCfg.TerrarunV1alpha1().TerraformRuns(ns).Create(ctxT(t), newRun("bobs", fmt.Sprintf(`
resource "testing_file" "f" {
  path    = %q
  content = "bob"
}
`, filepath.Join(files, "bob.txt")), v1alpha1.ApprovalModeManual), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if bobs, err = harness.WaitForPhase(ctxT(t), e.client, ns, "bobs", 4*time.Minute, v1alpha1.RunPhaseAwaitingApproval, v1alpha1.RunPhaseFailed); err != nil || bobs.Status.Phase != v1alpha1.RunPhaseAwaitingApproval {
		t.Fatalf("bob's run: %v %s: %s\n%s", err, bobs.Status.Phase, bobs.Status.Message, logOf("bobs", "plan"))
	}

	mark, stop := filepath.Join(files, "planted-provider-ran"), filepath.Join(files, "stop")
	if _, err := alice.TerrarunV1alpha1().TerraformRuns(ns).Create(ctxT(t), newRun("alices", fmt.Sprintf(`
resource "testing_file" "f" {
  path    = %q
  content = "alice"
}

resource "terraform_data" "plant" {
  depends_on = [testing_file.f]
  provisioner "local-exec" {
    command = <<-EOT
      echo "planting in $TF_PLUGIN_CACHE_DIR"
      end=$(( $(date +%%s) + 90 ))
      while [ ! -e %[2]s ] && [ $(date +%%s) -lt $end ]; do
        find "$TF_PLUGIN_CACHE_DIR" -name %[4]s -path '*terrarun/testing*' | while read -r d; do
          names=$(ls "$d" | grep terraform-provider-testing) || continue
          [ -e "$d/.planted" ] && continue
          rm -rf "$d" && mkdir "$d" && touch "$d/.planted" || continue
          for n in $names; do
            printf '#!/bin/sh\necho ran >> %[3]s\nexit 1\n' > "$d/$n"
            chmod 755 "$d/$n"
          done
          echo "planted $d"
        done
        sleep 0.02
      done
    EOT
  }
}
`, filepath.Join(files, "alice.txt"), stop, mark, runtime.GOOS+"_"+runtime.GOARCH), v1alpha1.ApprovalModeAuto), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(stop, nil, 0o644) })
	deadline := time.Now().Add(4 * time.Minute)
	for !strings.Contains(logOf("alices", "apply"), "planted ") {
		if time.Now().After(deadline) {
			t.Fatalf("alice's run never began to plant:\n%s\n%s", logOf("alices", "plan"), logOf("alices", "apply"))
		}
		time.Sleep(200 * time.Millisecond)
	}

	if _, err := alice.TerrarunV1alpha1().TerraformRuns(ns).Approve(ctxT(t), "bobs", &v1alpha1.TerraformRunApproval{PlanDigest: bobs.Status.Plan.Digest}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("approving bob's run: %v", err)
	}
	bobs, err = harness.WaitForPhase(ctxT(t), e.client, ns, "bobs", 4*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err != nil || bobs.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Errorf("bob's run: %v %s: %s\napply log:\n%s", err, bobs.Status.Phase, bobs.Status.Message, logOf("bobs", "apply"))
	}
	if b, err := os.ReadFile(mark); err == nil {
		t.Errorf("a provider alice's run planted ran: %q", b)
	}
	if b, err := os.ReadFile(filepath.Join(files, "bob.txt")); err != nil || string(b) != "bob" {
		t.Errorf("bob's file: %q, %v", b, err)
	}
	if _, err := harness.WaitForPhase(ctxT(t), e.client, ns, "alices", 4*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed); err != nil {
		t.Error(err)
	}
}
