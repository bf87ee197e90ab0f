package runner

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTarConfigIsDeterministic(t *testing.T) {
	files := map[string]string{"main.tf": "a", "b/vars.tf": "b", "z.tfvars": "z", ".terraform/x": "x", ".git/HEAD": "h"}
	a, b := t.TempDir(), t.TempDir()
	writeTree(t, a, files)
	writeTree(t, b, files)
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(b, "main.tf"), old, old); err != nil {
		t.Fatal(err)
	}
	ta, err := tarConfig(a, "")
	if err != nil {
		t.Fatal(err)
	}
	tb, err := tarConfig(b, "")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ta, tb) {
		t.Error("same files, different tarballs")
	}
	if names := tarNames(t, ta); !reflect.DeepEqual(names, []string{"b/", "b/vars.tf", "main.tf", "z.tfvars"}) {
		t.Errorf("names = %v", names)
	}
	writeTree(t, b, map[string]string{"main.tf": "changed"})
	tb, _ = tarConfig(b, "")
	if bytes.Equal(ta, tb) {
		t.Error("different files, same tarball")
	}
}

func TestTarConfigSymlinks(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	writeTree(t, root, map[string]string{"..data/main.tf": "real"})
	writeTree(t, outside, map[string]string{"secret": "s"})
	for link, target := range map[string]string{
		"main.tf":    "..data/main.tf",                      // a ConfigMap-style link
		"leak.tf":    filepath.Join(outside, "secret"),      // outside: skipped
		"dangling":   "nope",                                // skipped
		"dirlink":    "..data",                              // directories are not followed
		"parent.tf":  "../" + filepath.Base(outside) + "/x", // outside
		"sub/abs.tf": filepath.Join(root, "..data/main.tf"), // absolute, inside
	} {
		p := filepath.Join(root, link)
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	tb, err := tarConfig(root, "")
	if err != nil {
		t.Fatal(err)
	}
	names := tarNames(t, tb)
	want := []string{"..data/", "..data/main.tf", "main.tf", "sub/", "sub/abs.tf"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("names = %v, want %v", names, want)
	}
	dst := filepath.Join(t.TempDir(), "x")
	if _, err := untarConfig(bytes.NewReader(tb), dst); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "sub/abs.tf")); string(b) != "real" {
		t.Errorf("sub/abs.tf = %q", b)
	}
}

func TestCopyDir(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src, map[string]string{"..2024/main.tf": "m", "sub/x.tf": "x", ".terraform/p": "p"})
	if err := os.Symlink("..2024/main.tf", filepath.Join(src, "main.tf")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..2024", filepath.Join(src, "..data")); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "config")
	if err := copyDir(src, dst); err != nil {
		t.Fatal(err)
	}
	tb, _ := tarConfig(dst, "")
	if names := tarNames(t, tb); !reflect.DeepEqual(names, []string{"main.tf", "sub/", "sub/x.tf"}) {
		t.Errorf("copied %v", names)
	}
}

func TestUntarRoundTripAndSubdir(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"envs/dev/main.tf": "d", "modules/m/main.tf": "m"})
	tb, err := tarConfig(root, "envs/dev")
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "config")
	sub, err := untarConfig(bytes.NewReader(tb), dst)
	if err != nil {
		t.Fatal(err)
	}
	if sub != "envs/dev" {
		t.Errorf("subdir = %q", sub)
	}
	again, _ := tarConfig(dst, sub)
	if !bytes.Equal(tb, again) {
		t.Error("round trip changed the tarball")
	}
}

func TestUntarRejects(t *testing.T) {
	build := func(hdrs ...*tar.Header) []byte {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		for _, h := range hdrs {
			if h.Typeflag == tar.TypeReg {
				h.Size = 1
			}
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				_, _ = tw.Write([]byte("x"))
			}
		}
		tw.Close()
		gz.Close()
		return buf.Bytes()
	}
	for name, tb := range map[string][]byte{
		"dotdot":       build(&tar.Header{Typeflag: tar.TypeReg, Name: "../evil", Mode: 0o644}),
		"inner dotdot": build(&tar.Header{Typeflag: tar.TypeReg, Name: "a/../../evil", Mode: 0o644}),
		"absolute":     build(&tar.Header{Typeflag: tar.TypeReg, Name: "/tmp/evil", Mode: 0o644}),
		"symlink":      build(&tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/etc"}),
		"hardlink":     build(&tar.Header{Typeflag: tar.TypeLink, Name: "l", Linkname: "x"}),
		"duplicate":    build(&tar.Header{Typeflag: tar.TypeReg, Name: "a", Mode: 0o644}, &tar.Header{Typeflag: tar.TypeReg, Name: "a", Mode: 0o644}),
		"bad subdir":   build(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{subdirRecord: "../x"}}),
		"not gzip":     []byte("plain"),
	} {
		dst := filepath.Join(t.TempDir(), "config")
		if _, err := untarConfig(bytes.NewReader(tb), dst); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(dst), "evil")); err == nil {
			t.Errorf("%s: wrote outside", name)
		}
	}
}

func TestInside(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"a/b/main.tf": "x"})
	if err := os.Symlink(t.TempDir(), filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	if _, err := inside(root, "a/b"); err != nil {
		t.Errorf("a/b: %v", err)
	}
	for _, p := range []string{"..", "a/../..", "/etc", "out", "a/b/main.tf", "missing"} {
		if _, err := inside(root, p); err == nil {
			t.Errorf("%q accepted", p)
		}
	}
}

func TestGitAskpass(t *testing.T) {
	creds := t.TempDir()
	writeTree(t, creds, map[string]string{"host": "Git.Example.com\n", "username": "the-user", "password": "the-pass'word\n"})
	private := t.TempDir()
	c, err := readGitCredentials(creds)
	if err != nil {
		t.Fatal(err)
	}
	env, err := gitEnv(c, private)
	if err != nil {
		t.Fatal(err)
	}
	askpass := ""
	for _, kv := range env {
		if strings.Contains(kv, "the-user") || strings.Contains(kv, "the-pass") {
			t.Errorf("environment holds a credential: %s", kv)
		}
		if v, ok := strings.CutPrefix(kv, "GIT_ASKPASS="); ok {
			askpass = v
		}
	}
	for prompt, want := range map[string]string{
		"Username for 'https://git.example.com': ":               "the-user",
		"Password for 'https://the-user@git.example.com': ":      "the-pass'word\n",
		"Password for 'https://the-user@GIT.example.com:8443': ": "the-pass'word\n",
	} {
		out, err := exec.Command(askpass, prompt).Output()
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != want {
			t.Errorf("askpass %q = %q, want %q", prompt, out, want)
		}
	}
	// Any other host gets nothing: a redirect, a submodule, a look-alike.
	for _, prompt := range []string{
		"Username for 'https://evil.example': ",
		"Password for 'https://the-user@evil.example': ",
		"Password for 'https://git.example.com@evil.example': ",
		"Password for 'https://git.example.com.evil.example': ",
		"Username for 'https://evil.example/git.example.com': ",
		"Something else",
	} {
		out, err := exec.Command(askpass, prompt).Output()
		if err == nil || len(out) != 0 {
			t.Errorf("askpass %q answered %q (%v)", prompt, out, err)
		}
	}
	script, _ := os.ReadFile(askpass)
	if strings.Contains(string(script), "the-user") || strings.Contains(string(script), "the-pass") {
		t.Error("the askpass script holds a credential")
	}
	if info, _ := os.Stat(askpass); info.Mode().Perm() != 0o700 {
		t.Errorf("askpass mode %v", info.Mode())
	}

	// ssh
	writeTree(t, creds, map[string]string{"host": "git.example.com", "identity": "KEY", "known_hosts": "host key"})
	c, _ = readGitCredentials(creds)
	env, _ = gitEnv(c, private)
	found := false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GIT_SSH_COMMAND="); ok {
			found = true
			if !strings.Contains(v, "-i '"+filepath.Join(creds, "identity")+"'") || !strings.Contains(v, "StrictHostKeyChecking=yes") ||
				!strings.Contains(v, "UserKnownHostsFile='"+filepath.Join(creds, "known_hosts")+"'") {
				t.Errorf("GIT_SSH_COMMAND = %s", v)
			}
		}
	}
	if !found {
		t.Error("no GIT_SSH_COMMAND")
	}
	if !contains(env, "GIT_TERMINAL_PROMPT=0") {
		t.Error("prompts are not disabled")
	}
}

func TestGitCredentialsNeedAHost(t *testing.T) {
	creds := t.TempDir()
	writeTree(t, creds, map[string]string{"username": "u", "password": "p"})
	if _, err := readGitCredentials(creds); err == nil || !strings.Contains(err.Error(), `needs a "host" key`) {
		t.Errorf("credentials without a host: %v", err)
	}
}

func TestGitHost(t *testing.T) {
	for raw, want := range map[string]string{
		"https://github.com/org/repo.git":          "github.com",
		"https://user@git.example.com:8443/r.git":  "git.example.com:8443",
		"ssh://git@github.com/org/repo.git":        "github.com",
		"git@github.com:org/repo.git":              "github.com",
		"ssh://git@[::1]:2222/repo.git":            "[::1]:2222",
		"http://127.0.0.1:3000/x.git":              "127.0.0.1:3000",
		"https://github.com@evil.example/repo.git": "evil.example",
		"file:///srv/repo.git":                     "",
		"/srv/repo.git":                            "",
	} {
		got, err := gitHost(raw)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("gitHost(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	c := &gitCredentials{host: "github.com"}
	for host, want := range map[string]bool{"github.com": true, "GitHub.com": true, "github.com:443": true, "gist.github.com": false, "github.com.evil": false} {
		if c.boundTo(host) != want {
			t.Errorf("credentials for github.com offered to %s: %v", host, !want)
		}
	}
	c.host = "git.example.com:8443"
	if c.boundTo("git.example.com") || c.boundTo("git.example.com:443") || !c.boundTo("git.example.com:8443") {
		t.Error("credentials bound to a port are offered to another")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestLockFileFromPlan(t *testing.T) {
	if lockFileFromPlan(filepath.Join(t.TempDir(), "missing")) != nil {
		t.Error("lock file from a missing plan")
	}
}
