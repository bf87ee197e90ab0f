// Package gitserver serves a git repository for tests over https (git's
// own smart HTTP through git-http-backend), to one user and password, with
// a certificate of its own, and lets the test push new commits to it.
package gitserver

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Repo is a served repository with one branch, main.
type Repo struct {
	// URL is the repository's https URL, and CA the PEM of the server's
	// certificate.
	URL, CA string
	root    string
	work    string
}

// New serves a repository whose main branch holds files, to user:pass only,
// until the test ends.
func New(t testing.TB, user, pass string, files map[string]string) *Repo {
	t.Helper()
	root := t.TempDir()
	repo := &Repo{root: root, work: filepath.Join(root, "work")}
	if err := os.MkdirAll(repo.work, 0o755); err != nil {
		t.Fatal(err)
	}
	repo.git(t, root, "init", "-q", "--bare", "-b", "main", "repo.git")
	repo.git(t, repo.work, "init", "-q", "-b", "main")
	repo.Push(t, files)

	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	backend := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	repo.URL = srv.URL + "/repo.git"
	repo.CA = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	return repo
}

// Push commits files to main and pushes them; it returns the commit.
func (repo *Repo) Push(t testing.TB, files map[string]string) string {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(repo.work, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	repo.git(t, repo.work, "add", ".")
	repo.git(t, repo.work, "commit", "-q", "-m", "configuration")
	repo.git(t, repo.work, "push", "-q", filepath.Join(repo.root, "repo.git"), "main")
	return repo.Head(t)
}

// Head is the commit main is at.
func (repo *Repo) Head(t testing.TB) string {
	t.Helper()
	return strings.TrimSpace(repo.git(t, repo.work, "rev-parse", "HEAD"))
}

func (repo *Repo) git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}
