package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/terrarun/terrarun/pkg/runner/oci/ocitest"
)

// TestVerifiedExecutorImages deploys terrarun with a cluster policy whose
// imageVerification covers a registry on the node's address (CNCF
// Distribution over TLS with a CA of its own), to which the test pushes
// the executor image that make images built, signed with a key of the
// policy, and a copy of it that nobody signed. A run of the signed tag is
// pinned to its digest at create, and every Job of it runs the image by
// that digest, even after the tag moves to the unsigned copy; a run of the
// unsigned image, or of the moved tag, is refused at create, naming
// spec.engine.image, before any Job exists; a run that pins a digest
// itself is refused too.
func TestVerifiedExecutorImages(t *testing.T) {
	ns := newNamespace(t)
	reg := ocitest.Start(t, ocitest.Options{Host: nodeIP})
	key := ocitest.NewKey(t)
	img, err := openImage(filepath.Join(cl.images, "terrarun-executor"))
	if err != nil {
		t.Fatal(err)
	}
	const repo = "terrarun/terrarun-executor"
	signed := reg.PushImage(repo, "signed", img)
	reg.Sign(repo, signed, key.Signer)
	copyImg := mutate.Annotations(img, map[string]string{"dev.terrarun.e2e/copy": "unsigned"}).(v1.Image)
	unsigned := reg.PushImage(repo, "unsigned", copyImg)
	image := reg.Host + "/" + repo

	t.Cleanup(func() {
		if err := cl.applyTerrarun(nil); err != nil {
			t.Errorf("restoring terrarun's policy: %v", err)
		}
	})
	err = cl.applyTerrarun(func(values map[string]any) {
		policy := values["policy"].(map[string]any)
		policy["allowedImages"] = append(policy["allowedImages"].([]any), reg.Host+"/terrarun/*")
		policy["imageVerification"] = map[string]any{
			"images":     []string{reg.Host + "/*"},
			"publicKeys": string(key.PublicPEM),
			"caBundle":   string(reg.CA),
		}
	})
	if err != nil {
		t.Fatalf("deploying terrarun with an image verification policy: %v", err)
	}

	run := func(name, image, extra string) string {
		return fmt.Sprintf(`apiVersion: terrarun.dev/v1alpha1
kind: TerraformRun
metadata:
  name: %s
  namespace: %s
spec:
  workspace: %s
  approval:
    mode: Auto
  engine:
    image: %s
%s  source:
    inline:
      main.tf: |
        resource "terraform_data" "x" {}
`, name, ns, name, image, extra)
	}
	create := func(name, image, extra string) (string, error) {
		return cl.kubectlStdin("alice", run(name, image, extra), "create", "-f", "-")
	}

	if out, err := create("signed", image+":signed", ""); err != nil {
		t.Fatalf("a run of the signed image: %v\n%s", err, out)
	}
	if d := mustAs(t, "admin", "get", "tfr", "signed", "-n", ns, "-o", "jsonpath={.spec.engine.imageDigest}"); d != signed {
		t.Fatalf("spec.engine.imageDigest %q, want the signed digest %s", d, signed)
	}
	// The tag moves to the unsigned copy: the run goes on with what was
	// verified, and no new run may use the tag.
	reg.PushImage(repo, "signed", copyImg)
	if got := waitPhase(t, ns, "signed", 5*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
		t.Fatalf("signed: %s: %s", got, mustAs(t, "admin", "get", "tfr", "signed", "-n", ns, "-o", "jsonpath={.status.message}"))
	}
	jobs := strings.Fields(mustAs(t, "admin", "get", "jobs", "-n", ns, "-l", "terrarun.dev/run=signed", "-o", "jsonpath={range .items[*]}{.spec.template.spec.containers[0].image}{\" \"}{end}"))
	if len(jobs) == 0 {
		t.Fatal("the signed run has no Jobs")
	}
	for _, j := range jobs {
		if j != image+":signed@"+signed {
			t.Errorf("a Job of the signed run runs %s, want %s:signed@%s", j, image, signed)
		}
	}

	for _, tc := range []struct {
		name, image, extra string
		want               []string
	}{
		{"unsigned", image + ":unsigned", "", []string{"spec.engine.image", "imageVerification refuses", unsigned, "has no cosign signature"}},
		{"moved", image + ":signed", "", []string{"spec.engine.image", "imageVerification refuses", unsigned}},
		{"self-pinned", image + ":unsigned", "    imageDigest: " + signed + "\n", []string{"spec.engine.imageDigest", "is set by the server"}},
	} {
		out, err := create(tc.name, tc.image, tc.extra)
		if err == nil {
			t.Errorf("run %s (%s) was admitted", tc.name, tc.image)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error()+out, w) {
				t.Errorf("run %s: %v %s; want it to say %q", tc.name, err, out, w)
			}
		}
		if _, err := cl.kubectlAs("admin", "get", "tfr", tc.name, "-n", ns); err == nil {
			t.Errorf("the refused run %s exists", tc.name)
		}
	}
	if got := mustAs(t, "admin", "get", "jobs", "-n", ns, "-o", "jsonpath={range .items[*]}{.metadata.labels.terrarun\\.dev/run}{\" \"}{end}"); strings.Trim(strings.ReplaceAll(got, "signed ", ""), " ") != "" {
		t.Errorf("Jobs of runs other than signed exist: %q", got)
	}
}
