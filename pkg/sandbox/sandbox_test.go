//go:build linux

package sandbox

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The test binary is its own shim.
func TestMain(m *testing.M) {
	if IsShimCall(os.Args[1:]) {
		Init(os.Args[1:])
	}
	os.Exit(m.Run())
}

// world is a host directory tree: base (mounted read-only) holds ro/file
// and data/ (masked), which holds etcd.db and work/ (mounted writable). The
// secret directory is elsewhere and not mounted.
type world struct {
	base, secret, masked, work string
}

func newWorld(t *testing.T) world {
	t.Helper()
	base := t.TempDir()
	w := world{
		base:   base,
		secret: t.TempDir(),
		masked: filepath.Join(base, "data"),
		work:   filepath.Join(base, "data", "work"),
	}
	for _, d := range []string{w.work, filepath.Join(base, "ro")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(w.secret, "ca.key"), filepath.Join(w.masked, "etcd.db"), filepath.Join(base, "ro", "file")} {
		if err := os.WriteFile(f, []byte("host-bytes\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{base, w.secret} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// run runs script with /bin/sh in the sandbox of w as uid (and gid) uid,
// after the options change the sandbox and the shim's command.
func (w world) run(t *testing.T, userns bool, uid uint32, script string, options ...func(*Config, *exec.Cmd)) (string, int) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(w.work, int(uid), int(uid)); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := Config{
		Root:          root,
		Mounts:        append(SystemMounts(), Mount{Source: w.base}, Mount{Source: w.work, Writable: true}),
		Masks:         []string{w.masked},
		UID:           uid,
		GID:           uid,
		UserNamespace: userns,
		Dir:           w.work,
	}
	cmd := &exec.Cmd{}
	for _, o := range options {
		o(&c, cmd)
	}
	extra := cmd.ExtraFiles
	cmd, err = Command(self, c, []string{"/bin/sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	cmd.ExtraFiles = extra
	// The init is this test binary: built with -race, it would sleep a
	// second before it exits (the race runtime's atexit_sleep_ms), and the
	// processes of the sandbox would live that much longer.
	cmd.Env = []string{"PATH=/usr/bin:/bin", "GORACE=atexit_sleep_ms=0"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running the sandbox: %v", err)
	}
	if entries, err := os.ReadDir(root); err != nil || len(entries) != 0 {
		t.Errorf("the root directory on the host is not empty after the sandbox: %v %v", entries, err)
	}
	return out.String(), code
}

// TestSandbox runs the sandbox of a server with root: its stages run as
// another user (65532). Without root that is not possible, and the sandbox
// says so rather than running the command as the caller.
func TestSandbox(t *testing.T) {
	if uid := os.Getuid(); uid != 0 {
		expectNoSandbox(t, Config{UID: 65532, GID: 65532})
		return
	}
	testIsolation(t, false, 65532)
}

// TestUserNamespace runs the sandbox of a server without root: in a user
// namespace, as the caller's own user. Where the host forbids user
// namespaces, the sandbox must fail rather than run without them.
func TestUserNamespace(t *testing.T) {
	uid := uint32(os.Getuid())
	if why := userNamespacesForbidden(); why != "" {
		t.Logf("%s: the sandbox must refuse to start", why)
		expectNoSandbox(t, Config{UID: uid, GID: uint32(os.Getgid()), UserNamespace: true})
		return
	}
	testIsolation(t, true, uid)
}

// userNamespacesForbidden names the host setting that forbids this user to
// create a user namespace, or returns "".
func userNamespacesForbidden() string {
	setting := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			return "" // not this kernel's setting
		}
		return strings.TrimSpace(string(b))
	}
	switch {
	case setting("/proc/sys/user/max_user_namespaces") == "0":
		return "user.max_user_namespaces is 0: this host allows no user namespaces"
	case os.Getuid() == 0:
		return ""
	case setting("/proc/sys/kernel/unprivileged_userns_clone") == "0":
		return "kernel.unprivileged_userns_clone is 0: this host forbids user namespaces to users other than root"
	case setting("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
		return "kernel.apparmor_restrict_unprivileged_userns is 1: AppArmor forbids user namespaces to users other than root"
	}
	return ""
}

// expectNoSandbox asserts that Check fails for a sandbox of c (its root,
// mounts and directory filled in) that this host or user cannot build.
func expectNoSandbox(t *testing.T, c Config) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c.Root = filepath.Join(t.TempDir(), "root")
	c.Mounts = append(SystemMounts(), Mount{Source: self})
	c.Dir = filepath.Dir(self)
	if err := os.Mkdir(c.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Check(self, c); err == nil {
		t.Fatalf("a sandbox as uid %d (user namespace %v) started for uid %d: it must refuse", c.UID, c.UserNamespace, os.Getuid())
	}
}

func testIsolation(t *testing.T, userns bool, uid uint32) {
	w := newWorld(t)
	t.Run("sees only what it is given", func(t *testing.T) {
		script := `
id -u
cat ` + w.base + `/ro/file
test -e ` + w.secret + `/ca.key && echo SECRET-VISIBLE
test -e ` + w.masked + `/etcd.db && echo MASKED-VISIBLE
echo bytes > ` + w.base + `/ro/file && echo RO-WRITABLE
echo written > ` + w.work + `/out && echo work-writable
touch /new 2>/dev/null && echo ROOT-WRITABLE
grep CapEff /proc/self/status
[ "$(readlink /proc/self/ns/ipc)" = "` + hostIPC(t) + `" ] && echo HOST-IPC
echo PROCS=$(ls /proc | grep -c '^[0-9]')
exit 3
`
		out, code := w.run(t, userns, uid, script)
		if code != 3 {
			t.Fatalf("exit code %d, want 3\n%s", code, out)
		}
		for _, bad := range []string{"SECRET-VISIBLE", "MASKED-VISIBLE", "RO-WRITABLE", "ROOT-WRITABLE", "HOST-IPC"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s:\n%s", bad, out)
			}
		}
		lines := strings.Split(out, "\n")
		if lines[0] != strconv.Itoa(int(uid)) {
			t.Errorf("runs as uid %q, want %d\n%s", lines[0], uid, out)
		}
		for _, want := range []string{"host-bytes", "work-writable", "CapEff:\t0000000000000000"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		// Its own PID namespace: the shell, its command substitution, ls,
		// grep and the sandbox's PID 1; nothing of the host's.
		if m := regexp.MustCompile(`PROCS=(\d+)`).FindStringSubmatch(out); m == nil {
			t.Errorf("no process count:\n%s", out)
		} else if n, _ := strconv.Atoi(m[1]); n < 1 || n > 8 {
			t.Errorf("the sandbox sees %d processes in /proc, want only its own (at most 8)\n%s", n, out)
		}
		if b, err := os.ReadFile(filepath.Join(w.work, "out")); err != nil || string(b) != "written\n" {
			t.Errorf("the work directory was not written through: %q %v", b, err)
		}
		if b, _ := os.ReadFile(filepath.Join(w.base, "ro", "file")); string(b) != "host-bytes\n" {
			t.Errorf("a read-only file changed: %q", b)
		}
	})
	t.Run("a hidden file is only a descriptor", func(t *testing.T) {
		token := filepath.Join(w.work, "token")
		if err := os.WriteFile(token, []byte("token-bytes\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// The command's own file: only hiding keeps it from the command.
		if err := os.Chown(token, int(uid), int(uid)); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(token)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		script := `
read -r tok <&3 && echo "fd3: $tok"
exec 3<&-
cat ` + token + ` 2>/dev/null && echo "OPENED-BY-PATH"
for fd in /proc/[0-9]*/fd/*; do [ -f "$fd" ] && cat "$fd" 2>/dev/null; done | grep -q token-bytes && echo "OPENED-THROUGH-PROC"
true
`
		out, code := w.run(t, userns, uid, script, func(c *Config, cmd *exec.Cmd) {
			c.Hide = []string{token}
			c.ExtraFiles = 1
			cmd.ExtraFiles = []*os.File{f}
		})
		if code != 0 || !strings.Contains(out, "fd3: token-bytes") {
			t.Fatalf("exit code %d; the command did not get the file as descriptor 3:\n%s", code, out)
		}
		for _, bad := range []string{"OPENED-BY-PATH", "OPENED-THROUGH-PROC", "token-bytes\n"} {
			if strings.Contains(strings.Replace(out, "fd3: token-bytes\n", "", 1), bad) {
				t.Errorf("%q:\n%s", bad, out)
			}
		}
	})
	t.Run("a mount at another path", func(t *testing.T) {
		src := filepath.Join(w.work, "deep", "deeper", "tmp")
		if err := os.MkdirAll(src, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, "seen"), []byte("from the host\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(src, 0o777); err != nil {
			t.Fatal(err)
		}
		out, code := w.run(t, userns, uid, `cat /.short/seen && echo written > /.short/new`, func(c *Config, _ *exec.Cmd) {
			c.Mounts = append(c.Mounts, Mount{Source: src, Target: "/.short", Writable: true})
		})
		if code != 0 || !strings.Contains(out, "from the host") {
			t.Fatalf("exit code %d:\n%s", code, out)
		}
		if b, err := os.ReadFile(filepath.Join(src, "new")); err != nil || string(b) != "written\n" {
			t.Errorf("the file written at the target: %q, %v", b, err)
		}
	})
	t.Run("a setsid daemon dies with the command", func(t *testing.T) {
		marker := filepath.Join(w.work, "daemon-alive")
		out, code := w.run(t, userns, uid, `setsid sh -c 'sleep 1; echo alive > `+marker+`' </dev/null >/dev/null 2>&1 & echo started`)
		if code != 0 || !strings.Contains(out, "started") {
			t.Fatalf("exit code %d:\n%s", code, out)
		}
		time.Sleep(2 * time.Second)
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("a daemon started with setsid outlived its sandbox")
		}
	})
}

func TestCheck(t *testing.T) {
	self, c, ok := checkConfig(t, Mount{Source: selfPath(t)})
	if !ok {
		return
	}
	if err := Check(self, c); err != nil {
		t.Fatalf("a sandbox that holds its shim: %v", err)
	}
	// Without the shim in it, the sandbox cannot start it: Check says so.
	c.Mounts = SystemMounts()
	err := Check(self, c)
	if err == nil || !strings.Contains(err.Error(), "starting "+self) {
		t.Fatalf("a sandbox without its shim: got %v, want an error that names the shim", err)
	}
}

// hostIPC is the test's own IPC namespace, as /proc/self/ns/ipc names it.
func hostIPC(t *testing.T) string {
	t.Helper()
	ns, err := os.Readlink("/proc/self/ns/ipc")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// TestCheckFileInMountedDirectory: a file mounted on its own that an
// earlier mount already shows (the executor binary in a directory on
// PATH) is mounted over what is there, which is read-only and may be
// running: its mount point is never opened for writing.
func TestCheckFileInMountedDirectory(t *testing.T) {
	self, c, ok := checkConfig(t, Mount{Source: filepath.Dir(selfPath(t))}, Mount{Source: selfPath(t)})
	if !ok {
		return
	}
	if err := Check(self, c); err != nil {
		t.Fatalf("a sandbox that mounts its shim inside a mounted directory: %v", err)
	}
}

// selfPath is the test binary, the sandbox's shim.
func selfPath(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self
}

// checkConfig is the Config of a Check of the test binary as its shim,
// with the system mounts and mounts, as a server sandboxes its stages:
// with root as uid 65532, without root in a user namespace. It returns
// false when the host forbids that, once it saw the sandbox refuse to
// start (TestUserNamespace covers such hosts).
func checkConfig(t *testing.T, mounts ...Mount) (string, Config, bool) {
	t.Helper()
	self := selfPath(t)
	c := Config{
		Root:   filepath.Join(t.TempDir(), "root"),
		Mounts: append(SystemMounts(), mounts...),
		UID:    65532,
		GID:    65532,
		Dir:    filepath.Dir(self),
	}
	if os.Getuid() != 0 {
		if why := userNamespacesForbidden(); why != "" {
			t.Logf("%s: the sandbox must refuse to start", why)
			expectNoSandbox(t, Config{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), UserNamespace: true})
			return self, c, false
		}
		c.UID, c.GID, c.UserNamespace = uint32(os.Getuid()), uint32(os.Getgid()), true
	}
	if err := os.Mkdir(c.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	return self, c, true
}
