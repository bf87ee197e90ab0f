package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/terrarun/terrarun/pkg/runner/oci/ocitest"
	"github.com/terrarun/terrarun/test/internal/gitserver"
)

// startFlux installs the CRDs of Flux's source-controller (built by
// hack/flux.sh, $TERRARUN_FLUX) and runs it beside the control plane, as
// the cluster's admin, serving its artifacts on nodeIP:fluxStoragePort,
// where terrarun's --flux-artifact-host points and executor pods reach it.
func startFlux(t *testing.T) {
	t.Helper()
	bin := os.Getenv("TERRARUN_FLUX")
	if bin == "" {
		t.Fatal("TERRARUN_FLUX is not set: pass the source-controller that hack/flux.sh prints (make e2e does)")
	}
	mustAs(t, "admin", "apply", "--server-side", "-f", filepath.Join(filepath.Dir(bin), "crds"))
	for _, crd := range []string{"gitrepositories", "ocirepositories", "buckets"} {
		mustAs(t, "admin", "wait", "--for=condition=established", "--timeout=60s", "crd/"+crd+".source.toolkit.fluxcd.io")
	}
	p, err := cl.start("source-controller", "/usr/bin/env", "RUNTIME_NAMESPACE=flux-system", "KUBECONFIG="+cl.kubeconfigs["admin"], bin,
		fmt.Sprintf("--storage-addr=%s:%d", nodeIP, fluxStoragePort), fmt.Sprintf("--storage-adv-addr=%s:%d", nodeIP, fluxStoragePort),
		"--storage-path="+t.TempDir(), "--metrics-addr=0", "--health-addr=127.0.0.1:0", "--enable-leader-election=false", "--events-addr=",
		"--watch-all-namespaces")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(syscall.SIGTERM) })
}

// TestFluxSources runs from a GitRepository (the test's git server over
// https, with credentials and a CA) and an OCIRepository (the test
// registry) that a real source-controller fetches: a creator who may not
// get the source is refused, naming the field; a run whose source does
// not exist yet waits Pending with that said, and runs once it is Ready;
// each run records the revision and digest it pinned; a workspace follows
// the GitRepository to a new commit with one NewRevision run.
func TestFluxSources(t *testing.T) {
	startFlux(t)
	ns := newNamespace(t)
	tf := func(v string) map[string]string {
		return map[string]string{"main.tf": fmt.Sprintf("resource \"terraform_data\" \"x\" {\n  input = %q\n}\n\noutput \"value\" {\n  value = terraform_data.x.output\n}\n", v)}
	}
	repo := gitserver.New(t, "git-user", "git-pass", tf("one"))
	first := repo.Head(t)
	mustAs(t, "admin", "create", "secret", "generic", "git-auth", "-n", ns,
		"--from-literal=username=git-user", "--from-literal=password=git-pass", "--from-literal=ca.crt="+repo.CA)
	reg := ocitest.Start(t, ocitest.Options{Host: nodeIP})
	digest := reg.Push("infra/app", "v1", ocitest.Artifact{Layer: ocitest.TarGz(tf("oci"))})
	mustAs(t, "admin", "create", "secret", "generic", "registry-ca", "-n", ns, "--from-literal=ca.crt="+string(reg.CA))
	source := func(kind, name, spec string) string {
		return fmt.Sprintf("apiVersion: source.toolkit.fluxcd.io/v1\nkind: %s\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  interval: 5s\n%s", kind, name, ns, spec)
	}
	gitSpec := fmt.Sprintf("  url: %s\n  ref: {branch: main}\n  secretRef: {name: git-auth}\n", repo.URL)
	if _, err := cl.kubectlStdin("admin", source("GitRepository", "infra", gitSpec), "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	ociSpec := fmt.Sprintf("  url: %s\n  ref: {tag: v1}\n  certSecretRef: {name: registry-ca}\n", reg.URL("infra/app"))
	if _, err := cl.kubectlStdin("admin", source("OCIRepository", "app", ociSpec), "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}

	run := func(name, kind, source string) string {
		return fmt.Sprintf(`apiVersion: terrarun.dev/v1alpha1
kind: TerraformRun
metadata:
  name: %s
  namespace: %s
spec:
  workspace: %s
  approval: {mode: Auto}
  source:
    sourceRef: {kind: %s, name: %s}
`, name, ns, name, kind, source)
	}
	out, err := cl.kubectlStdin("alice", run("git", "GitRepository", "infra"), "create", "-f", "-")
	if err == nil || !strings.Contains(err.Error()+out, `spec.source.sourceRef: user "alice" may not get gitrepositories "infra"`) {
		t.Fatalf("a run from a GitRepository alice may not get: %v\n%s", err, out)
	}
	mustAs(t, "admin", "create", "role", "flux-sources", "-n", ns, "--verb=get",
		"--resource=gitrepositories.source.toolkit.fluxcd.io", "--resource=ocirepositories.source.toolkit.fluxcd.io",
		"--resource-name=infra", "--resource-name=app", "--resource-name=later")
	mustAs(t, "admin", "create", "rolebinding", "alice-flux-sources", "-n", ns, "--role=flux-sources", "--user=alice")
	for _, r := range []struct{ name, kind, source string }{{"git", "GitRepository", "infra"}, {"oci", "OCIRepository", "app"}, {"later", "GitRepository", "later"}} {
		// The cluster's authorizer may answer from a cache for a few seconds.
		waitFor(t, time.Minute, "alice's run "+r.name+" from the source she may now get", func() bool {
			_, err := cl.kubectlStdin("alice", run(r.name, r.kind, r.source), "create", "-f", "-")
			return err == nil
		})
	}

	// The run whose source does not exist yet waits for it, saying so.
	waitFor(t, time.Minute, "run later waiting for GitRepository later", func() bool {
		msg, _ := cl.kubectlAs("admin", "get", "tfr", "later", "-n", ns, "-o", "jsonpath={.status.phase} {.status.message}")
		return strings.HasPrefix(msg, "Pending Waiting for the source: GitRepository "+ns+"/later does not exist yet")
	})
	for name, want := range map[string]string{"git": "main@sha1:" + first, "oci": "v1@" + digest} {
		if got := waitPhase(t, ns, name, 5*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
			t.Fatalf("run %s: %s: %s", name, got, mustAs(t, "admin", "get", "tfr", name, "-n", ns, "-o", "jsonpath={.status.message}"))
		}
		if rev := mustAs(t, "admin", "get", "tfr", name, "-n", ns, "-o", "jsonpath={.status.source.revision}"); rev != want {
			t.Errorf("run %s: status.source.revision %q, want %q", name, rev, want)
		}
		if d := mustAs(t, "admin", "get", "tfr", name, "-n", ns, "-o", "jsonpath={.status.source.artifact.digest}"); !strings.HasPrefix(d, "sha256:") {
			t.Errorf("run %s: status.source.artifact.digest %q, want the pinned sha256", name, d)
		}
	}
	if log, _ := cl.kubectlAs("admin", "get", "--raw", raw(ns, "oci", "logs?stage=plan")); !strings.Contains(log, "as OCIRepository "+ns+"/app reported") {
		t.Errorf("the oci run's plan log does not say it checked the artifact's digest:\n%s", log)
	}
	if got := mustAs(t, "admin", "get", "tfr", "git", "-n", ns, "-o", "jsonpath={.status.outputs[0].value}"); got != "one" {
		t.Errorf("run git's output %s, want \"one\" (the configuration of the GitRepository)", got)
	}

	if _, err := cl.kubectlStdin("admin", source("GitRepository", "later", gitSpec), "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if got := waitPhase(t, ns, "later", 5*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
		t.Fatalf("run later once its source exists: %s: %s", got, mustAs(t, "admin", "get", "tfr", "later", "-n", ns, "-o", "jsonpath={.status.message}"))
	}

	// A workspace follows the GitRepository.
	ws := fmt.Sprintf(`apiVersion: terrarun.dev/v1alpha1
kind: TerraformWorkspace
metadata:
  name: tracked
  namespace: %s
spec:
  approval: {mode: Auto}
  template:
    workspace: tracked
    source:
      sourceRef: {kind: GitRepository, name: infra}
`, ns)
	if _, err := cl.kubectlStdin("alice", ws, "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	applied := func(rev string) func() bool {
		return func() bool {
			got, _ := cl.kubectlAs("admin", "get", "terraformworkspace", "tracked", "-n", ns, "-o", "jsonpath={.status.lastAppliedRevision}")
			return got == rev
		}
	}
	waitFor(t, 5*time.Minute, "workspace tracked applied at main@sha1:"+first, applied("main@sha1:"+first))
	second := repo.Push(t, tf("two"))
	waitFor(t, 5*time.Minute, "workspace tracked applied at the new commit main@sha1:"+second, applied("main@sha1:"+second))
	triggers := mustAs(t, "admin", "get", "tfr", "-n", ns, "-l", "terrarun.dev/workspace=tracked", "-o", `jsonpath={range .items[*]}{.metadata.annotations.terrarun\.dev/trigger}{"\n"}{end}`)
	if got := strings.Fields(triggers); len(got) != 2 || !slices.Contains(got, "SpecChange") || !slices.Contains(got, "NewRevision") {
		t.Errorf("workspace tracked's runs were triggered by %q, want one SpecChange and one NewRevision", got)
	}
}
