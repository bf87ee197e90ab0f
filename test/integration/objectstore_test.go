package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/artifacts/objectstore/objectstoretest"
)

// TestObjectStoreArtifacts runs the server with its plan parts and outputs
// in a real S3-compatible server (versitygw), encrypted, with credentials
// from a file: a run's plan is read back through kubectl and its outputs
// after the apply; the bucket holds every part and no plaintext of the plan
// or of the secret variable; a plan part changed in the bucket is refused
// when served and when applied; deleting a run deletes its objects.
func TestObjectStoreArtifacts(t *testing.T) {
	srv := objectstoretest.Start(t)
	dir := t.TempDir()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(dir, "keys.yaml")
	writeFile(t, keys, "primary: 2026-11\nkeys:\n  2026-11: "+base64.StdEncoding.EncodeToString(key)+"\n")
	creds := filepath.Join(dir, "credentials")
	writeFile(t, creds, "[default]\naws_access_key_id = "+srv.AccessKey+"\naws_secret_access_key = "+srv.SecretKey+"\n")
	e := newRunEnv(t, "--artifact-store=s3", "--artifact-store-endpoint="+srv.Endpoint, "--artifact-store-bucket="+srv.Bucket,
		"--artifact-store-path-style", "--artifact-store-region=us-east-1", "--artifact-store-credentials-file="+creds,
		"--artifact-encryption-keys="+keys)
	e.secret(t, "default", "db", "password", dbPassword)
	// Each run plans in a workspace of its own (inline).
	for _, name := range []string{"stored", "tampered", "forged"} {
		e.create(t, runManifest(name, inline(map[string]string{"main.tf": helloTF}, `  variables:
  - name: db_password
    valueFrom:
      secretKeyRef: {name: db, key: password}
`)))
	}

	objects := func(run *v1alpha1.TerraformRun) map[string]string {
		t.Helper()
		found := map[string]string{}
		root := srv.ObjectPath("terrarun/runs/default/" + run.Name + "/" + string(run.UID))
		_ = filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() {
				found[filepath.Base(filepath.Dir(path))] = path
			}
			return nil
		})
		return found
	}

	run := e.waitPhase(t, "stored", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
	if out := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("stored", "plan")); !strings.Contains(out, "terraform_data.hello") {
		t.Errorf("the plan read back:\n%s", out)
	}
	stored := objects(run)
	for _, part := range []string{"plan-file", "plan-text", "plan-json", "plan-source"} {
		path, ok := stored[part]
		if !ok {
			t.Errorf("no %s object in the bucket: %v", part, stored)
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(dbPassword)) || bytes.Contains(b, []byte("terraform_data")) {
			t.Errorf("the bucket holds plaintext of %s", part)
		}
	}
	if out, err := e.approve(t, e.bob, run); err != nil {
		t.Fatalf("approving: %v\n%s", err, out)
	}
	run = e.waitPhase(t, "stored", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Fatalf("run stored: %s %q", run.Status.Phase, run.Status.Message)
	}
	if out := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("stored", "outputs")); !strings.Contains(out, dbPassword) {
		t.Errorf("the outputs read back hold no connection string:\n%s", out)
	}
	if _, ok := objects(run)["outputs"]; !ok {
		t.Errorf("no outputs object in the bucket: %v", objects(run))
	}

	t.Run("a part changed in the bucket is refused when served", func(t *testing.T) {
		run := e.waitPhase(t, "tampered", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		path := objects(run)["plan-text"]
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 1
		writeFile(t, path, string(b))
		if out, err := kubectl(t, e.Kubeconfig, "get", "--raw", raw("tampered", "plan")); err == nil || strings.Contains(out, "terraform_data.hello") ||
			!strings.Contains(out, "refusing to serve the plan-text") || !strings.Contains(out, "changed in the bucket") {
			t.Errorf("a changed plan text was served: %v\n%s", err, out)
		}
	})

	t.Run("a plan file changed in the bucket is not applied", func(t *testing.T) {
		run := e.waitPhase(t, "forged", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		// The bytes of another run's plan file, where this one's are.
		other := objects(e.waitPhase(t, "tampered", time.Minute, v1alpha1.RunPhaseAwaitingApproval))["plan-file"]
		b, err := os.ReadFile(other)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, objects(run)["plan-file"], string(b))
		if out, err := e.approve(t, e.bob, run); err != nil {
			t.Fatalf("approving: %v\n%s", err, out)
		}
		run = e.waitPhase(t, "forged", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		if run.Status.Phase != v1alpha1.RunPhaseFailed {
			t.Errorf("a run whose plan file was replaced in the bucket ended %s: %q", run.Status.Phase, run.Status.Message)
		}
	})

	t.Run("the store down while a plan uploads and back", func(t *testing.T) {
		srv.Kill()
		if out, err := kubectl(t, e.Kubeconfig, "get", "--raw", raw("stored", "outputs")); err == nil || !strings.Contains(out, "unavailable") && !strings.Contains(out, "ServiceUnavailable") && !strings.Contains(out, "503") {
			t.Errorf("reading while the store is down: %v\n%s", err, out)
		}
		e.create(t, runManifest("outage", inline(map[string]string{"main.tf": helloTF}, `  approval:
    mode: Auto
  variables:
  - name: db_password
    valueFrom:
      secretKeyRef: {name: db, key: password}
`)))
		// The plan stage plans and uploads while the store is down; its
		// uploads are answered 503, and retried.
		e.waitPhase(t, "outage", time.Minute, v1alpha1.RunPhasePlanning)
		time.Sleep(6 * time.Second)
		srv.Restart()
		run := e.waitPhase(t, "outage", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
			t.Fatalf("run outage ended %s: %q", run.Status.Phase, run.Status.Message)
		}
		got := objects(run)
		for _, kind := range []string{"plan-file", "plan-text", "plan-json", "plan-source", "outputs"} {
			if _, ok := got[kind]; !ok {
				t.Errorf("no %s object after the outage: %v", kind, got)
			}
		}
		// One object per part: nothing stored twice.
		var n int
		_ = filepath.Walk(srv.ObjectPath("terrarun/runs/default/outage/"+string(run.UID)), func(_ string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() {
				n++
			}
			return nil
		})
		if n != 5 {
			t.Errorf("%d objects for run outage, want 5 (each part and the outputs once)", n)
		}
	})

	t.Run("deleting a run deletes its objects", func(t *testing.T) {
		if err := e.client.TerrarunV1alpha1().TerraformRuns("default").Delete(context.Background(), "stored", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for len(objects(run)) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the deleted run's objects are still in the bucket: %v", objects(run))
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}
