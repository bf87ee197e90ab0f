package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/artifacts/objectstore/objectstoretest"
)

// autoWithDB is the spec of an Auto run with the db password as a variable.
const autoWithDB = `  approval:
    mode: Auto
  variables:
  - name: db_password
    valueFrom:
      secretKeyRef: {name: db, key: password}
`

// TestObjectStoreArtifacts runs the server with its plan parts and outputs
// in a real S3-compatible server (versitygw), encrypted, with credentials
// from a file: a run's plan is read back through kubectl and its outputs
// after the apply; the bucket holds every part and no plaintext of the plan
// or of the secret variable; the finished logs move into the bucket and are
// served from it (whole, by their last lines and by bytes; 503 with
// Retry-After while it is down); a plan part changed in the bucket is refused
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
		return srv.RunObjects("default", run.Name, string(run.UID))
	}
	// movedLogs waits until the logs of a finished run are in the bucket.
	movedLogs := func(run *v1alpha1.TerraformRun, logs ...string) map[string]string {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			got, missing := objects(run), ""
			for _, l := range logs {
				if _, ok := got[l]; !ok {
					missing = l
				}
			}
			if missing == "" {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("the finished %s of run %s is not in the bucket after a minute: %v", missing, run.Name, got)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	httpClient, err := rest.HTTPClientFor(e.Config)
	if err != nil {
		t.Fatal(err)
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
	// The finished logs leave etcd for the bucket, encrypted, and are
	// served from there, by their last lines too.
	applyLog := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("stored", "logs?stage=apply"))
	for l, path := range movedLogs(run, "log/plan/0000000001", "log/apply/0000000001") {
		if !strings.HasPrefix(l, "log/") {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("terraform_data.hello")) {
			t.Errorf("the bucket holds plaintext of %s", l)
		}
	}
	if got := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("stored", "logs?stage=apply")); got != applyLog || !strings.Contains(got, "Apply complete") {
		t.Errorf("the apply log from the bucket:\n%s\nfrom etcd:\n%s", got, applyLog)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(applyLog, "\n"), "\n")
	if got := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("stored", "logs?stage=apply&tailLines=2")); got != strings.Join(lines[len(lines)-2:], "")+"\n" {
		t.Errorf("the last 2 lines of the apply log from the bucket: %q, want the end of %q", got, applyLog)
	}
	if got := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("stored", "logs?stage=apply&limitBytes=10")); got != applyLog[:10] {
		t.Errorf("10 bytes of the apply log from the bucket: %q", got)
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
		// Outputs and a finished log, even followed, are 503 with
		// Retry-After (which kubectl honours, retrying for a while; a raw
		// client sees the first answer).
		for _, path := range []string{raw("stored", "outputs"), raw("stored", "logs?stage=apply&follow=true")} {
			resp, err := httpClient.Get(e.Config.Host + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "artifact store is unavailable") {
				t.Errorf("GET %s while the store is down: %s, Retry-After %q\n%s", path, resp.Status, resp.Header.Get("Retry-After"), body)
			}
		}
		e.create(t, runManifest("outage", inline(map[string]string{"main.tf": helloTF}, autoWithDB)))
		// The plan stage plans and uploads while the store is down; its
		// uploads are answered 503, and retried.
		e.waitPhase(t, "outage", time.Minute, v1alpha1.RunPhasePlanning)
		// The run's status says what it waits for.
		deadline := time.Now().Add(time.Minute)
		for {
			run, err := e.client.TerrarunV1alpha1().TerraformRuns("default").Get(context.Background(), "outage", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionArtifactsStored)
			if c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonArtifactStoreUnavailable && strings.Contains(c.Message, "The plan waits for the artifact store") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the run's status does not say it waits for the store: %+v", run.Status.Conditions)
			}
			time.Sleep(200 * time.Millisecond)
		}
		srv.Restart()
		run := e.waitPhase(t, "outage", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
			t.Fatalf("run outage ended %s: %q", run.Status.Phase, run.Status.Message)
		}
		if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionArtifactsStored); c != nil {
			t.Errorf("the run still says it waits for the store: %+v", c)
		}
		// The stage's log says what it waited for.
		if log := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("outage", "logs?stage=plan")); !strings.Contains(log, "the artifact store is unavailable") || !strings.Contains(log, "trying again in") {
			t.Errorf("the plan's log does not say it waited for the store:\n%s", log)
		}
		got := movedLogs(run, "log/plan/0000000001", "log/apply/0000000001")
		for _, kind := range []string{"plan-file", "plan-text", "plan-json", "plan-source", "outputs"} {
			if _, ok := got[kind]; !ok {
				t.Errorf("no %s object after the outage: %v", kind, got)
			}
		}
		// One object per part and log: nothing stored twice.
		var n int
		_ = filepath.Walk(srv.ObjectPath("terrarun/runs/default/outage/"+string(run.UID)), func(_ string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() {
				n++
			}
			return nil
		})
		if n != 7 {
			t.Errorf("%d objects for run outage, want 7 (each part, the outputs and the two logs once): %v", n, got)
		}
	})

	t.Run("a run whose time after finishing is up goes with its objects", func(t *testing.T) {
		e.create(t, runManifest("shortlived", inline(map[string]string{"main.tf": helloTF}, "  ttlSecondsAfterFinished: 3\n"+autoWithDB)))
		run := e.waitPhase(t, "shortlived", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
			t.Fatalf("run shortlived ended %s: %q", run.Status.Phase, run.Status.Message)
		}
		movedLogs(run, "log/plan/0000000001", "log/apply/0000000001")
		deadline := time.Now().Add(time.Minute)
		for {
			_, err := e.client.TerrarunV1alpha1().TerraformRuns("default").Get(context.Background(), "shortlived", metav1.GetOptions{})
			if apierrors.IsNotFound(err) && len(objects(run)) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a minute after its 3 s: the run is there (%v), with objects %v", err, objects(run))
			}
			time.Sleep(200 * time.Millisecond)
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

// TestMigrateIntoTheObjectStore: a server that kept its artifacts in etcd
// is started again with an object store: what etcd held (the plan's parts
// and its log) moves into the bucket, encrypted, at start, and the run
// waiting for its approval is applied from there.
func TestMigrateIntoTheObjectStore(t *testing.T) {
	srv := objectstoretest.Start(t)
	dir := t.TempDir()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(t.TempDir(), "keys.yaml")
	writeFile(t, keys, "primary: k1\nkeys:\n  k1: "+base64.StdEncoding.EncodeToString(key)+"\n")
	creds := filepath.Join(t.TempDir(), "credentials")
	writeFile(t, creds, "[default]\naws_access_key_id = "+srv.AccessKey+"\naws_secret_access_key = "+srv.SecretKey+"\n")

	first := envOn(startBinary(t, dir))
	first.secret(t, "default", "db", "password", dbPassword)
	first.create(t, runManifest("before", inline(map[string]string{"main.tf": helloTF}, `  variables:
  - name: db_password
    valueFrom:
      secretKeyRef: {name: db, key: password}
`)))
	run := first.waitPhase(t, "before", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
	plan := mustKubectl(t, first.Kubeconfig, "get", "--raw", raw("before", "plan"))
	if err := first.Stop(90 * time.Second); err != nil {
		t.Fatal(err)
	}

	e := envOn(startBinary(t, dir, "--artifact-store=s3", "--artifact-store-endpoint="+srv.Endpoint, "--artifact-store-bucket="+srv.Bucket,
		"--artifact-store-path-style", "--artifact-store-region=us-east-1", "--artifact-store-credentials-file="+creds,
		"--artifact-encryption-keys="+keys))
	e.bob, e.bobCfg = e.user(t, "bob")
	want := []string{"plan-file", "plan-text", "plan-json", "plan-source", "log/plan/0000000001"}
	deadline := time.Now().Add(time.Minute)
	for {
		found := srv.RunObjects("default", "before", string(run.UID))
		missing := ""
		for _, w := range want {
			if _, ok := found[w]; !ok {
				missing = w
			}
		}
		if missing == "" {
			for what, path := range found {
				if b, err := os.ReadFile(path); err != nil || bytes.Contains(b, []byte("terraform_data")) {
					t.Errorf("the moved %s is not encrypted (%v)", what, err)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the start, %s is not in the bucket: %v", missing, found)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("before", "plan")); got != plan {
		t.Errorf("the plan read back after the move:\n%s\nbefore:\n%s", got, plan)
	}
	if out, err := e.approve(t, e.bob, run); err != nil {
		t.Fatalf("approving: %v\n%s", err, out)
	}
	if run = e.waitPhase(t, "before", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed); run.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Fatalf("the run applied from the moved plan ended %s: %q", run.Status.Phase, run.Status.Message)
	}
	if !strings.Contains(e.output.String(), "Moved what etcd held into the object store") {
		t.Error("the server did not say what it moved")
	}
}
