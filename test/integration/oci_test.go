package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runner/oci/ocitest"
)

// versionTF is a configuration whose output says which version it is.
func versionTF(v string) []byte {
	return ocitest.TarGz(map[string]string{"main.tf": fmt.Sprintf("resource \"terraform_data\" \"x\" {\n  input = %q\n}\n\noutput \"version\" {\n  value = terraform_data.x.output\n}\n", v)})
}

// ociRun is the spec of an Auto run from the OCI source given as YAML
// lines under oci:.
func ociRun(oci string) string {
	return fmt.Sprintf("  engine:\n    binary: %s\n  workspace: ws-%d\n  approval:\n    mode: Auto\n  source:\n    oci:\n%s", engineName, workspaceSeq.Add(1), oci)
}

// TestOCISource runs from a real registry (CNCF Distribution over TLS
// with a CA of its own, requiring a password) as a user would with
// kubectl: runs from a tag, a digest and a semver range record the
// artifact's digest as their revision and apply it; an unsigned artifact,
// one signed by another key, and a tampered layer are refused before
// anything is unpacked (VerificationFailed names the reference and the
// Secret); a keyless signature verifies against a trusted root of the
// namespace's, and a key's signature does not pass for a keyless one;
// without credentials the pull is refused, saying what to set; the
// registry's password is in no log.
func TestOCISource(t *testing.T) {
	e := newRunEnv(t)
	reg := ocitest.Start(t, ocitest.Options{Private: true})
	trusted, other := ocitest.NewKey(t), ocitest.NewKey(t)
	v1 := reg.Push("infra/app", "v1.0.0", ocitest.Artifact{Layer: versionTF("1.0.0")})
	v11 := reg.Push("infra/app", "v1.1.0", ocitest.Artifact{Layer: versionTF("1.1.0")})
	reg.Push("infra/app", "v2.0.0", ocitest.Artifact{Layer: versionTF("2.0.0")})
	for _, d := range []string{v1, v11} {
		reg.Sign("infra/app", d, trusted.Signer)
	}
	sigstore := ocitest.NewSigstore(t)
	reg.SignKeyless("infra/app", v1, sigstore, "release@example.com", "https://issuer.example.com", true)
	unsigned := reg.Push("infra/unsigned", "v1", ocitest.Artifact{Layer: versionTF("unsigned")})
	reg.Sign("infra/other", reg.Push("infra/other", "v1", ocitest.Artifact{Layer: versionTF("other")}), other.Signer)
	tampered := reg.Push("infra/tampered", "v1", ocitest.Artifact{Layer: versionTF("tampered")})
	blob := reg.BlobPath(reg.LayerDigest("infra/tampered", tampered))
	b, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(blob, b, 0o600); err != nil {
		t.Fatal(err)
	}

	e.secret(t, "default", "pull", ".dockerconfigjson", string(reg.DockerConfig()))
	e.secret(t, "default", "registry-ca", "ca.crt", string(reg.CA))
	e.secret(t, "default", "cosign-keys", "cosign.pub", string(trusted.PublicPEM))
	e.secret(t, "default", "sigstore-root", "trusted_root.json", string(sigstore.TrustedRoot))
	access := fmt.Sprintf("      url: %s\n      credentialsSecret: pull\n      certSecret: registry-ca\n", reg.URL("infra/app"))
	verify := "      verify:\n        keysSecret: cosign-keys\n"
	e.create(t, runManifest("oci-tag", ociRun(access+verify+"      ref:\n        tag: v1.0.0\n")))
	e.create(t, runManifest("oci-digest", ociRun(access+verify+"      ref:\n        digest: "+v11+"\n")))
	e.create(t, runManifest("oci-semver", ociRun(access+"      ref:\n        semver: \"~1\"\n")))
	e.create(t, runManifest("oci-unsigned", ociRun(strings.Replace(access, "infra/app", "infra/unsigned", 1)+verify+"      ref:\n        tag: v1\n")))
	e.create(t, runManifest("oci-other-key", ociRun(strings.Replace(access, "infra/app", "infra/other", 1)+verify+"      ref:\n        tag: v1\n")))
	keyless := "      verify:\n        trustedRootSecret: sigstore-root\n        matchOIDCIdentity:\n        - issuer: https://issuer\\.example\\.com\n          subject: (release|deploy)@example\\.com\n"
	e.create(t, runManifest("oci-keyless", ociRun(access+keyless+"      ref:\n        tag: v1.0.0\n")))
	e.create(t, runManifest("oci-keyless-keyed", ociRun(strings.Replace(access, "infra/app", "infra/other", 1)+keyless+"      ref:\n        tag: v1\n")))
	e.create(t, runManifest("oci-tampered", ociRun(strings.Replace(access, "infra/app", "infra/tampered", 1)+"      ref:\n        tag: v1\n")))
	e.create(t, runManifest("oci-anonymous", ociRun(fmt.Sprintf("      url: %s\n      certSecret: registry-ca\n", reg.URL("infra/app")))))

	for name, want := range map[string]struct{ revision, version string }{
		"oci-tag":     {"v1.0.0@" + v1, `"1.0.0"`},
		"oci-digest":  {v11, `"1.1.0"`},
		"oci-semver":  {"v1.1.0@" + v11, `"1.1.0"`},
		"oci-keyless": {"v1.0.0@" + v1, `"1.0.0"`},
	} {
		run := e.waitPhase(t, name, 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
			t.Errorf("run %s ended %s: %s", name, run.Status.Phase, run.Status.Message)
			continue
		}
		if run.Status.Source == nil || run.Status.Source.Revision != want.revision {
			t.Errorf("run %s: status.source %+v, want revision %s", name, run.Status.Source, want.revision)
		}
		if len(run.Status.Outputs) != 1 || outputValue(run.Status.Outputs[0]) != want.version {
			t.Errorf("run %s: outputs %+v, want version %s", name, run.Status.Outputs, want.version)
		}
	}
	logs := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("oci-tag", "logs?stage=plan"))
	if !strings.Contains(logs, "verified the cosign signature of "+reg.Host+"/infra/app@"+v1) {
		t.Errorf("the plan log does not say what was verified:\n%s", logs)
	}
	if logs := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("oci-keyless", "logs?stage=plan")); !strings.Contains(logs, "by identity release@example.com of https://issuer.example.com") {
		t.Errorf("the keyless run's plan log does not say who signed:\n%s", logs)
	}

	for name, want := range map[string]struct{ reason, message string }{
		"oci-unsigned":      {v1alpha1.ReasonVerificationFailed, reg.Host + "/infra/unsigned@" + unsigned},
		"oci-other-key":     {v1alpha1.ReasonVerificationFailed, "with the keys of Secret cosign-keys: none of its 1 signatures is by one of the 1 keys"},
		"oci-keyless-keyed": {v1alpha1.ReasonVerificationFailed, "with the keyless identities of spec.source.oci.verify.matchOIDCIdentity, trusted root of Secret sigstore-root: none of its 1 signatures is by one of the identities (release|deploy)@example\\.com of https://issuer\\.example\\.com (a signature carries no certificate"},
		"oci-tampered":      {v1alpha1.ReasonPlanFailed, "refusing to use it"},
		"oci-anonymous":     {v1alpha1.ReasonPlanFailed, "set spec.source.oci.credentialsSecret"},
	} {
		run := e.waitPhase(t, name, 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionPlanned)
		if run.Status.Phase != v1alpha1.RunPhaseFailed || c == nil || c.Reason != want.reason || !strings.Contains(run.Status.Message, want.message) {
			t.Errorf("run %s: %s, Planned %+v, message %q; want Failed with reason %s saying %q", name, run.Status.Phase, c, run.Status.Message, want.reason, want.message)
		}
		log := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw(name, "logs?stage=plan"))
		if strings.Contains(log, "configuration revision") ||
			want.reason == v1alpha1.ReasonVerificationFailed && strings.Contains(log, "unpacking") {
			t.Errorf("run %s went on past its source:\n%s", name, log)
		}
	}
	for _, name := range []string{"oci-tag", "oci-digest", "oci-semver", "oci-anonymous"} {
		for _, stage := range []string{"plan", "apply"} {
			out, _ := kubectl(t, e.Kubeconfig, "get", "--raw", raw(name, "logs?stage="+stage))
			if strings.Contains(out, reg.Password) {
				t.Errorf("the %s log of %s holds the registry's password", stage, name)
			}
		}
	}
}

// TestOCIWorkspaceFollowsATag moves the tag a workspace tracks: each new
// digest is applied once, by a run whose trigger is NewRevision, and none
// is reported as drift.
func TestOCIWorkspaceFollowsATag(t *testing.T) {
	e := newRunEnv(t)
	reg := ocitest.Start(t, ocitest.Options{})
	first := reg.Push("infra/app", "stable", ocitest.Artifact{Layer: versionTF("one")})
	e.secret(t, "default", "registry-ca", "ca.crt", string(reg.CA))
	e.create(t, trackedWorkspace(fmt.Sprintf("      oci:\n        url: %s\n        certSecret: registry-ca\n        ref:\n          tag: stable\n", reg.URL("infra/app"))))
	got := e.readyAt(t, "tracked", "tracked-1")
	if got.Status.LastAppliedRevision != "stable@"+first {
		t.Fatalf("applied revision %q, want stable@%s", got.Status.LastAppliedRevision, first)
	}
	second := reg.Push("infra/app", "stable", ocitest.Artifact{Layer: versionTF("two")})
	got = e.waitWorkspace(t, "tracked", "the new digest applied", func(ws *v1alpha1.TerraformWorkspace) bool {
		return ws.Status.LastAppliedRevision == "stable@"+second && meta.IsStatusConditionTrue(ws.Status.Conditions, v1alpha1.WorkspaceConditionReady)
	})
	run, err := e.client.TerrarunV1alpha1().TerraformRuns("default").Get(ctxT(t), got.Status.LastAppliedRun, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if run.Annotations[v1alpha1.AnnotationTrigger] != string(v1alpha1.TriggerNewRevision) || run.Status.Plan.Change != 1 {
		t.Errorf("run %s: trigger %q, plan %+v; want NewRevision changing 1 resource", run.Name, run.Annotations[v1alpha1.AnnotationTrigger], run.Status.Plan)
	}
	// One apply per digest: the next checks find the same digest.
	time.Sleep(25 * time.Second)
	list, err := e.client.TerrarunV1alpha1().TerraformRuns("default").List(ctxT(t), metav1.ListOptions{LabelSelector: v1alpha1.LabelWorkspace + "=tracked"})
	if err != nil {
		t.Fatal(err)
	}
	applies, checks := 0, 0
	for _, r := range list.Items {
		if r.Spec.Operation == v1alpha1.OperationApply {
			applies++
		} else {
			checks++
		}
	}
	if applies != 2 || checks == 0 {
		t.Errorf("%d apply runs for two digests (want 2), %d checks (want some)", applies, checks)
	}
	ws := e.workspace(t, "tracked")
	if c := meta.FindStatusCondition(ws.Status.Conditions, v1alpha1.WorkspaceConditionDrifted); c != nil && c.Status == metav1.ConditionTrue {
		t.Errorf("a new digest was reported as drift: %s", c.Message)
	}
}

// TestOCITrustedSourceKeys runs the real server with a cluster policy that
// requires verified sources and lists the platform's key: a run from an
// artifact the platform signed applies, with no Secret of keys; a tenant who
// signs an artifact with her own key and names it in verify.keysSecret is
// refused VerificationFailed, naming the policy's keys; one who writes keys
// into verify.trustedKeys herself is refused at create, naming the field.
func TestOCITrustedSourceKeys(t *testing.T) {
	platform, tenant := ocitest.NewKey(t), ocitest.NewKey(t)
	flags := policyServerArgs(t, fmt.Sprintf(`kind: TerraformRunPolicy
requireVerifiedSources: true
trustedSourceKeys: %q
`, platform.PublicPEM))
	e := newRunEnv(t, flags...)
	reg := ocitest.Start(t, ocitest.Options{})
	signed := reg.Push("infra/app", "v1", ocitest.Artifact{Layer: versionTF("platform")})
	reg.Sign("infra/app", signed, platform.Signer)
	own := reg.Push("infra/own", "v1", ocitest.Artifact{Layer: versionTF("tenant")})
	reg.Sign("infra/own", own, tenant.Signer)
	e.secret(t, "default", "registry-ca", "ca.crt", string(reg.CA))
	e.secret(t, "default", "tenant-keys", "cosign.pub", string(tenant.PublicPEM))
	access := func(repo string) string {
		return fmt.Sprintf("      url: %s\n      certSecret: registry-ca\n      ref:\n        tag: v1\n", reg.URL(repo))
	}

	e.create(t, runManifest("platform-signed", ociRun(access("infra/app"))))
	e.create(t, runManifest("own-key", ociRun(access("infra/own")+"      verify:\n        keysSecret: tenant-keys\n")))
	forged := filepath.Join(t.TempDir(), "forged.yaml")
	writeFile(t, forged, runManifest("forged-keys", ociRun(access("infra/own")+fmt.Sprintf("      verify:\n        trustedKeys: %q\n", tenant.PublicPEM))))
	if out, err := kubectl(t, e.Kubeconfig, "create", "-f", forged); err == nil ||
		!strings.Contains(out, "spec.source.oci.verify.trustedKeys: Forbidden: is copied by the server from the cluster policy's trustedSourceKeys") {
		t.Errorf("a run with trusted keys of its own: %v\n%s", err, out)
	}

	run := e.waitPhase(t, "platform-signed", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Fatalf("platform-signed: %s: %s", run.Status.Phase, run.Status.Message)
	}
	if v := run.Spec.Source.OCI.Verify; v == nil || v.TrustedKeys != string(platform.PublicPEM) {
		t.Errorf("spec.source.oci.verify %+v, want the policy's keys", v)
	}
	if log := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("platform-signed", "logs?stage=plan")); !strings.Contains(log, "of the cluster policy's trustedSourceKeys") {
		t.Errorf("the plan log does not say the policy's keys verified it:\n%s", log)
	}
	run = e.waitPhase(t, "own-key", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionPlanned)
	if run.Status.Phase != v1alpha1.RunPhaseFailed || c == nil || c.Reason != v1alpha1.ReasonVerificationFailed ||
		!strings.Contains(run.Status.Message, "with the keys of the cluster policy's trustedSourceKeys") {
		t.Errorf("own-key: %s, Planned %+v, message %q; want VerificationFailed naming the policy's keys", run.Status.Phase, c, run.Status.Message)
	}
}
