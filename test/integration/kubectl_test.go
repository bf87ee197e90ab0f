package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// TestKubectl drives the real terrarun-apiserver binary with the real kubectl,
// the way the README's quick start does.
func TestKubectl(t *testing.T) {
	s := startBinary(t, t.TempDir())
	kc := s.Kubeconfig

	t.Run("api-resources lists short names and category", func(t *testing.T) {
		out := mustKubectl(t, kc, "api-resources", "--api-group", "terrarun.dev", "-o", "wide")
		if !regexp.MustCompile(`terraformruns\s+tfrun,tfr\s+terrarun.dev/v1alpha1\s+true\s+TerraformRun`).MatchString(out) {
			t.Fatalf("api-resources:\n%s", out)
		}
		if !strings.Contains(out, "terraform") {
			t.Errorf("category terraform missing:\n%s", out)
		}
	})

	t.Run("kubectl version parses the server's", func(t *testing.T) {
		out := mustKubectl(t, kc, "version")
		if !regexp.MustCompile(`(?m)^Server Version: v1\.\d+\.0\+terrarun\.`).MatchString(out) {
			t.Errorf("kubectl version:\n%s", out)
		}
	})

	t.Run("apply the examples", func(t *testing.T) {
		out := mustKubectl(t, kc, "apply", "-f", harness.RepoPath("artifacts", "examples", "inline-terraform-data.yaml"))
		if !strings.Contains(out, "terraformrun.terrarun.dev/hello created") {
			t.Fatalf("apply:\n%s", out)
		}
		out = mustKubectl(t, kc, "apply", "-f", harness.RepoPath("artifacts", "examples", "git-source.yaml"))
		if !strings.Contains(out, "created") {
			t.Fatalf("apply git example:\n%s", out)
		}
		// Applying the same file again changes nothing.
		out = mustKubectl(t, kc, "apply", "-f", harness.RepoPath("artifacts", "examples", "inline-terraform-data.yaml"))
		if !strings.Contains(out, "unchanged") {
			t.Fatalf("re-apply:\n%s", out)
		}
	})

	t.Run("get prints the server-side columns", func(t *testing.T) {
		out := mustKubectl(t, kc, "get", "terraformruns")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if !regexp.MustCompile(`^NAME\s+PHASE\s+PLAN\s+POLICY\s+APPROVED-BY\s+AGE$`).MatchString(lines[0]) {
			t.Fatalf("header = %q", lines[0])
		}
		if !regexp.MustCompile(`(?m)^hello\s+(Pending|Planning|AwaitingApproval)\s+(-|\+1 ~0 -0)\s+-\s+<none>\s+\d+s$`).MatchString(out) {
			t.Fatalf("no row for hello:\n%s", out)
		}
	})

	t.Run("get -o wide adds operation, source and engine", func(t *testing.T) {
		out := mustKubectl(t, kc, "get", "tfr", "-o", "wide")
		if !regexp.MustCompile(`NAME\s+PHASE\s+PLAN\s+POLICY\s+APPROVED-BY\s+AGE\s+OPERATION\s+SOURCE\s+ENGINE`).MatchString(out) {
			t.Fatalf("wide header:\n%s", out)
		}
		if !regexp.MustCompile(`(?m)^hello\s+\S+\s+\S+(\s~\d+\s-\d+)?\s+-\s+<none>\s+\S+\s+Apply\s+inline:1 file\s+` + engineDefault() + `$`).MatchString(out) {
			t.Fatalf("wide row for hello:\n%s", out)
		}
		if !regexp.MustCompile(`(?m)^from-git\s+.*git:github.com/terrarun/examples.git//terraform-data@main\s+terraform$`).MatchString(out) {
			t.Fatalf("wide row for from-git:\n%s", out)
		}
		// The category and short names resolve too.
		if out := mustKubectl(t, kc, "get", "terraform"); !strings.Contains(out, "hello") {
			t.Fatalf("get terraform:\n%s", out)
		}
	})

	t.Run("explain prints field docs", func(t *testing.T) {
		out := mustKubectl(t, kc, "explain", "terraformruns.spec")
		for _, want := range []string{"KIND:", "TerraformRun", "operation", "source", "approval", "immutable"} {
			if !strings.Contains(out, want) {
				t.Errorf("explain terraformruns.spec lacks %q:\n%s", want, out)
			}
		}
		out = mustKubectl(t, kc, "explain", "terraformruns.spec.source")
		for _, want := range []string{"inline", "configMap", "git", "Exactly one"} {
			if !strings.Contains(out, want) {
				t.Errorf("explain terraformruns.spec.source lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("an invalid manifest gets the field path", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.yaml")
		writeFile(t, bad, `apiVersion: terrarun.dev/v1alpha1
kind: TerraformRun
metadata:
  name: bad
spec:
  source:
    git:
      url: http://github.com/x/y.git
`)
		// The server's own validation: kubectl validates on the client
		// instead when it falls back to the OpenAPI v2 schema (seen once
		// under load), which stops at the first missing field.
		out, err := kubectl(t, kc, "apply", "--validate=false", "-f", bad)
		if err == nil {
			t.Fatalf("apply of an invalid run succeeded:\n%s", out)
		}
		for _, want := range []string{"spec.source.git.url", "https://", "spec.source.git.ref", "Required value"} {
			if !strings.Contains(out, want) {
				t.Errorf("error lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("get -w sees a change", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		watch := exec.CommandContext(ctx, kubectlBinary(t), "--kubeconfig", kc, "get", "tfr", "hello", "-w", "--output-watch-events", "-L", "stage")
		stdout, err := watch.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := watch.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cancel(); _ = watch.Wait() }()

		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		expect := func(re *regexp.Regexp) {
			t.Helper()
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("kubectl get -w ended before a line matching %s", re)
					}
					if re.MatchString(l) {
						return
					}
				case <-ctx.Done():
					t.Fatalf("no line matching %s from kubectl get -w", re)
				}
			}
		}
		expect(regexp.MustCompile(`^ADDED\s+hello\s+`))
		mustKubectl(t, kc, "label", "tfr", "hello", "stage=reviewed")
		expect(regexp.MustCompile(`^MODIFIED\s+hello\s+.*reviewed$`))
	})

	t.Run("a spec change is refused", func(t *testing.T) {
		out, err := kubectl(t, kc, "patch", "tfr", "hello", "--type=merge", "-p", `{"spec":{"operation":"Destroy"}}`)
		if err == nil || !strings.Contains(out, "spec: Forbidden: spec is immutable after creation") {
			t.Fatalf("patch of spec: err=%v\n%s", err, out)
		}
	})

	t.Run("server-side apply", func(t *testing.T) {
		out := mustKubectl(t, kc, "apply", "--server-side", "--field-manager", "alice", "-f", harness.RepoPath("artifacts", "examples", "git-source.yaml"))
		if !strings.Contains(out, "terraformrun.terrarun.dev/from-git serverside-applied") {
			t.Fatalf("server-side apply:\n%s", out)
		}
	})

	t.Run("delete", func(t *testing.T) {
		out := mustKubectl(t, kc, "delete", "tfr", "hello")
		if !strings.Contains(out, `terraformrun.terrarun.dev "hello" deleted`) {
			t.Fatalf("delete:\n%s", out)
		}
		out, err := kubectl(t, kc, "get", "tfr", "hello")
		if err == nil || !strings.Contains(out, "NotFound") {
			t.Fatalf("get after delete: err=%v\n%s", err, out)
		}
	})
}

// TestKubectlSecondUser mints a kubeconfig for another user and sees the
// creator recorded from the client certificate.
func TestKubectlSecondUser(t *testing.T) {
	s := startBinary(t, t.TempDir())
	bob := filepath.Join(t.TempDir(), "bob.kubeconfig")
	out, err := exec.Command(apiserverBinary, "kubeconfig", "--data-dir", s.DataDir, "--user", "bob", "--group", "terrarun:editors", "--output", bob).CombinedOutput()
	if err != nil {
		t.Fatalf("kubeconfig subcommand: %v\n%s", err, out)
	}
	mustKubectl(t, bob, "apply", "-f", harness.RepoPath("artifacts", "examples", "inline-terraform-data.yaml"))
	out = []byte(mustKubectl(t, s.Kubeconfig, "get", "tfr", "hello", "-o", "jsonpath={.spec.creator.username} {.spec.creator.groups}"))
	if string(out) != `bob ["terrarun:editors","system:authenticated"]` {
		t.Fatalf("creator = %s, want bob with his groups", out)
	}
}

// TestKubectlAdmissionPolicy runs the binary with the sample admission
// configuration and checks defaults and a denial through kubectl.
func TestKubectlAdmissionPolicy(t *testing.T) {
	dir := t.TempDir()
	policyFlags := policyServerArgs(t, `kind: TerraformRunPolicy
defaults:
  engine:
    binary: tofu
  timeouts:
    plan: 10m
allowedGitHosts: ["git.example.com"]
manualApprovalNamespaceSelector:
  matchLabels:
    kubernetes.io/metadata.name: prod
maxTimeouts:
  plan: 30m
`)
	s := startBinary(t, filepath.Join(dir, "data"), policyFlags...)
	kc := s.Kubeconfig

	mustKubectl(t, kc, "apply", "-f", harness.RepoPath("artifacts", "examples", "inline-terraform-data.yaml"))
	if out := mustKubectl(t, kc, "get", "tfr", "hello", "-o", "jsonpath={.spec.engine.binary} {.spec.timeouts.plan} {.spec.timeouts.apply}"); out != "tofu 10m0s 1h0m0s" {
		t.Fatalf("defaults = %q, want the policy's tofu and 10m, and the built-in 1h", out)
	}

	auto := filepath.Join(dir, "auto.yaml")
	writeFile(t, auto, `apiVersion: terrarun.dev/v1alpha1
kind: TerraformRun
metadata:
  name: auto
spec:
  approval:
    mode: Auto
  source:
    inline:
      main.tf: |
        resource "terraform_data" "x" {}
`)
	if out, err := kubectl(t, kc, "create", "-n", "prod", "-f", auto); err == nil || !strings.Contains(out, "spec.approval.mode") || !strings.Contains(out, `namespace "prod"`) {
		t.Fatalf("Auto approval in prod: err=%v\n%s", err, out)
	}
	if out := mustKubectl(t, kc, "create", "-n", "dev", "-f", auto); !strings.Contains(out, "created") {
		t.Fatalf("Auto approval in dev:\n%s", out)
	}
	if out, err := kubectl(t, kc, "apply", "-f", harness.RepoPath("artifacts", "examples", "git-source.yaml")); err == nil || !strings.Contains(out, `host "github.com" is not allowed`) {
		t.Fatalf("git host outside the policy: err=%v\n%s", err, out)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// engineDefault is the server's default engine on this host: terraform, or
// tofu when only tofu is installed (the local executor's --default-engine).
func engineDefault() string {
	if _, err := exec.LookPath("terraform"); err != nil && engineName == "tofu" {
		return "tofu"
	}
	return "terraform"
}

// TestYAMLActionBodies sends action bodies written in YAML, as kubectl
// create --raw -f sends a file: with a JSON content type, whatever the file
// holds. They are read as the YAML they are.
func TestYAMLActionBodies(t *testing.T) {
	e := newRunEnv(t)
	e.create(t, runManifest("yaml-body", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {}`}, "")))
	run := e.waitPhase(t, "yaml-body", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
	approval := filepath.Join(t.TempDir(), "approval.yaml")
	writeFile(t, approval, "apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRunApproval\nplanDigest: "+run.Status.Plan.Digest+"\ncomment: lgtm # a YAML comment\n")
	// ?result=short: a Status that says what happened, not the whole run.
	out, err := kubectl(t, e.bob, "create", "--raw", raw("yaml-body", "approve?result=short"), "-f", approval)
	if err != nil {
		t.Fatalf("approving with a YAML body: %v\n%s", err, out)
	}
	var st metav1.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Kind != "Status" || st.Status != metav1.StatusSuccess ||
		!strings.Contains(st.Message, "TerraformRunApproval recorded for run default/yaml-body") || !strings.Contains(st.Message, "Approved by bob") {
		t.Errorf("the short result: %v\n%s", err, out)
	}
	if out, err := kubectl(t, e.bob, "create", "--raw", raw("yaml-body", "approve?result=all"), "-f", approval); err == nil || !strings.Contains(out, "the only value is") {
		t.Errorf("an unknown ?result: %v\n%s", err, out)
	}
	got := e.waitPhase(t, "yaml-body", 3*time.Minute, v1alpha1.RunPhaseSucceeded)
	if got.Status.Approval == nil || got.Status.Approval.Comment != "lgtm" {
		t.Errorf("approval %+v, want the YAML body's comment", got.Status.Approval)
	}
	// A body that is neither JSON nor YAML of the kind is still refused,
	// saying so.
	writeFile(t, approval, "planDigest: [unclosed\n")
	if out, err := kubectl(t, e.bob, "create", "--raw", raw("yaml-body", "approve"), "-f", approval); err == nil || !strings.Contains(out, "BadRequest") {
		t.Errorf("a malformed body: %v\n%s", err, out)
	}
}

// policyServerArgs writes a cluster policy (its text after apiVersion)
// and an AdmissionConfiguration that points both of terrarun's plugins at
// it, and returns the server flag that reads them.
func policyServerArgs(t *testing.T, policy string) []string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "policy.yaml"), "apiVersion: admission.terrarun.dev/v1alpha1\n"+policy)
	admissionConfig := filepath.Join(dir, "admission.yaml")
	writeFile(t, admissionConfig, `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: TerraformRunDefaults
  path: policy.yaml
- name: TerraformRunPolicy
  path: policy.yaml
`)
	return []string{"--admission-control-config-file", admissionConfig}
}
