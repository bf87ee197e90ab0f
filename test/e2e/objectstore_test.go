package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/terrarun/terrarun/pkg/artifacts/objectstore/objectstoretest"
)

// bucketOf is the object store terrarun keeps its artifacts in, for a test.
type bucketOf struct {
	srv *objectstoretest.Server
}

// useObjectStore starts a real S3-compatible server (versitygw) on the
// node's address, where the pods reach it, and deploys terrarun with the
// chart's artifactStore values for it, as the README says (a Secret of
// encryption keys, one of credentials); the chart's values of the other
// tests come back when the test ends.
func useObjectStore(t *testing.T) *bucketOf {
	t.Helper()
	srv := objectstoretest.StartOn(t, nodeIP)
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	keys := "primary: e2e\nkeys:\n  e2e: " + base64.StdEncoding.EncodeToString(key) + "\n"
	creds := "[default]\naws_access_key_id = " + srv.AccessKey + "\naws_secret_access_key = " + srv.SecretKey + "\n"
	for name, data := range map[string]string{"terrarun-artifact-keys": "keys.yaml=" + keys, "terrarun-s3": "credentials=" + creds} {
		_, _ = cl.kubectlAs("admin", "delete", "secret", name, "-n", "terrarun-system", "--ignore-not-found")
		mustAs(t, "admin", "create", "secret", "generic", name, "-n", "terrarun-system", "--from-literal="+data)
	}
	t.Cleanup(func() {
		if err := cl.applyTerrarun(nil); err != nil {
			t.Errorf("deploying terrarun again without the object store: %v", err)
		}
	})
	err := cl.applyTerrarun(func(values map[string]any) {
		values["artifactStore"] = map[string]any{
			"type": "s3",
			"s3": map[string]any{"endpoint": srv.Endpoint, "bucket": srv.Bucket, "region": "us-east-1", "pathStyle": true,
				"credentialsSecretName": "terrarun-s3"},
			"encryptionKeysSecretName": "terrarun-artifact-keys",
		}
	})
	if err != nil {
		t.Fatalf("deploying terrarun with the object store: %v", err)
	}
	return &bucketOf{srv: srv}
}

// content is every byte of the bucket's objects.
func (b *bucketOf) content(t *testing.T) string {
	t.Helper()
	var all bytes.Buffer
	err := filepath.Walk(b.srv.Root, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		all.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return all.String()
}
