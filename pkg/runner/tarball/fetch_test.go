package tarball_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terrarun/terrarun/pkg/runner/tarball"
)

func targz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	list, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		names = append(names, e.Name())
	}
	return names
}

func TestFetch(t *testing.T) {
	archive := targz(t, map[string]string{"main.tf": "# the configuration\n"})
	tampered := targz(t, map[string]string{"main.tf": "# someone else's\n"})
	mux := http.NewServeMux()
	mux.HandleFunc("/good.tar.gz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(archive) })
	mux.HandleFunc("/tampered.tar.gz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(tampered) })
	mux.HandleFunc("/redirect.tar.gz", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/good.tar.gz", http.StatusFound) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx := context.Background()

	dst := t.TempDir()
	if err := tarball.Fetch(ctx, srv.URL+"/good.tar.gz", digestOf(archive), dst, tarball.Limits{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "main.tf")); err != nil || string(b) != "# the configuration\n" {
		t.Fatalf("main.tf: %q, %v", b, err)
	}

	dst = t.TempDir()
	err := tarball.Fetch(ctx, srv.URL+"/tampered.tar.gz", digestOf(archive), dst, tarball.Limits{})
	var derr *tarball.DigestError
	if !errors.As(err, &derr) || derr.Got != digestOf(tampered) {
		t.Errorf("an archive that is not its digest: %v, want a DigestError", err)
	}
	if got := entries(t, dst); len(got) != 0 {
		t.Errorf("an archive that is not its digest unpacked %v", got)
	}

	for name, c := range map[string]struct {
		url, digest string
		limits      tarball.Limits
		want        string
	}{
		"redirect":  {srv.URL + "/redirect.tar.gz", digestOf(archive), tarball.Limits{}, "redirected"},
		"too large": {srv.URL + "/good.tar.gz", digestOf(archive), tarball.Limits{Size: 16}, "over the limit of 16"},
		"missing":   {srv.URL + "/missing.tar.gz", digestOf(archive), tarball.Limits{}, "404 Not Found"},
		"sha1":      {srv.URL + "/good.tar.gz", "sha1:abc", tarball.Limits{}, "only sha256"},
	} {
		dst := t.TempDir()
		err := tarball.Fetch(ctx, c.url, c.digest, dst, c.limits)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
		if got := entries(t, dst); len(got) != 0 {
			t.Errorf("%s: unpacked %v", name, got)
		}
	}
}
