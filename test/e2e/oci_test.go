package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/terrarun/terrarun/pkg/runner/oci/ocitest"
)

// TestOCISourceInCluster runs from a private registry on the node's
// address (CNCF Distribution over TLS with a CA of its own) in executor
// Jobs: a creator who may not get the pull Secret is refused at create,
// naming the field; once she may, a signed artifact verifies and applies,
// its digest recorded; an unsigned one fails VerificationFailed before
// anything is unpacked; the registry's password is in no log, Event or
// Job.
func TestOCISourceInCluster(t *testing.T) {
	ns := newNamespace(t)
	reg := ocitest.Start(t, ocitest.Options{Private: true, Host: nodeIP})
	key := ocitest.NewKey(t)
	signed := reg.Push("infra/app", "v1", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{"main.tf": helloTF})})
	reg.Sign("infra/app", signed, key.Signer)
	reg.Push("infra/unsigned", "v1", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{"main.tf": helloTF})})

	mustAs(t, "admin", "create", "secret", "docker-registry", "pull", "-n", ns, "--docker-server="+reg.Host,
		"--docker-username="+reg.Username, "--docker-password="+reg.Password)
	mustAs(t, "admin", "create", "secret", "generic", "registry-ca", "-n", ns, "--from-literal=ca.crt="+string(reg.CA))
	mustAs(t, "admin", "create", "secret", "generic", "cosign-keys", "-n", ns, "--from-literal=cosign.pub="+string(key.PublicPEM))
	run := func(name, repo string) string {
		return fmt.Sprintf(`apiVersion: terrarun.dev/v1alpha1
kind: TerraformRun
metadata:
  name: %s
  namespace: %s
spec:
  workspace: %s
  approval:
    mode: Auto
  source:
    oci:
      url: %s
      ref: {tag: v1}
      credentialsSecret: pull
      certSecret: registry-ca
      verify: {keysSecret: cosign-keys}
`, name, ns, name, reg.URL(repo))
	}
	out, err := cl.kubectlStdin("alice", run("signed", "infra/app"), "create", "-f", "-")
	if err == nil || !strings.Contains(err.Error()+out, `spec.source.oci.credentialsSecret: user "alice" may not get secrets "pull"`) {
		t.Fatalf("a run with a pull Secret alice may not get: %v\n%s", err, out)
	}
	mustAs(t, "admin", "create", "role", "oci-secrets", "-n", ns, "--verb=get", "--resource=secrets",
		"--resource-name=pull", "--resource-name=registry-ca", "--resource-name=cosign-keys")
	mustAs(t, "admin", "create", "rolebinding", "alice-oci-secrets", "-n", ns, "--role=oci-secrets", "--user=alice")
	for _, name := range []string{"signed", "unsigned"} {
		repo := map[string]string{"signed": "infra/app", "unsigned": "infra/unsigned"}[name]
		// The cluster's authorizer may answer from a cache for a few seconds.
		waitFor(t, time.Minute, "alice's run "+name+" with the Secrets she may now get", func() bool {
			_, err := cl.kubectlStdin("alice", run(name, repo), "create", "-f", "-")
			return err == nil
		})
	}
	if got := waitPhase(t, ns, "signed", 5*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
		t.Fatalf("signed: %s: %s", got, mustAs(t, "admin", "get", "tfr", "signed", "-n", ns, "-o", "jsonpath={.status.message}"))
	}
	if rev := mustAs(t, "admin", "get", "tfr", "signed", "-n", ns, "-o", "jsonpath={.status.source.revision}"); rev != "v1@"+signed {
		t.Errorf("status.source.revision %q, want v1@%s", rev, signed)
	}
	if got := waitPhase(t, ns, "unsigned", 5*time.Minute, "Succeeded", "Failed"); got != "Failed" {
		t.Fatalf("unsigned: %s, want Failed", got)
	}
	reason := mustAs(t, "admin", "get", "tfr", "unsigned", "-n", ns, "-o", `jsonpath={.status.conditions[?(@.type=="Planned")].reason}`)
	msg := mustAs(t, "admin", "get", "tfr", "unsigned", "-n", ns, "-o", "jsonpath={.status.message}")
	if reason != "VerificationFailed" || !strings.Contains(msg, reg.Host+"/infra/unsigned@sha256:") || !strings.Contains(msg, "Secret cosign-keys") {
		t.Errorf("unsigned: Planned reason %q, message %q; want VerificationFailed naming the artifact and the Secret", reason, msg)
	}
	places := map[string]string{}
	for _, name := range []string{"signed", "unsigned"} {
		places[name+" plan log"], _ = cl.kubectlAs("admin", "get", "--raw", raw(ns, name, "logs?stage=plan"))
		places[name+" describe"], _ = cl.kubectlAs("admin", "describe", "tfr", name, "-n", ns)
	}
	places["events"], _ = cl.kubectlAs("admin", "get", "events", "-n", ns, "-o", "json")
	places["jobs"], _ = cl.kubectlAs("admin", "get", "jobs", "-n", ns, "-o", "json")
	places["pods"], _ = cl.kubectlAs("admin", "get", "pods", "-n", ns, "-o", "json")
	if !strings.Contains(places["signed plan log"], "verified the cosign signature") {
		t.Errorf("the signed run's plan log does not say it verified:\n%s", places["signed plan log"])
	}
	for place, content := range places {
		if strings.Contains(content, reg.Password) {
			t.Errorf("%s holds the registry's password", place)
		}
	}
}
