package local

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// changeTime returns when path's inode last changed (not following a
// symbolic link): a chown changes it, even to the owner it had.
func changeTime(t *testing.T, path string) syscall.Timespec {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ctim
}

// owner returns the uid that owns path (not following a symbolic link).
func owner(t *testing.T, path string) int {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}

// TestChownTreeStaysInside: the server (root) hands a namespace's state
// directory to the stages' user at every stage start, while other stages of
// the namespace run in it as that user. A stage that swaps a directory of
// the tree for a symbolic link to a directory outside it, again and again,
// must never get a file outside the tree handed to it (such as
// /etc/passwd); the walk may fail instead. Files removed under the walk (as
// a state lock's info file is) are no error. As root the tree goes to another
// user, as the server does; without root, to the test's own user, and a file
// outside the tree handed over shows in its change time.
func TestChownTreeStaysInside(t *testing.T) {
	stageUID := 65533
	if os.Getuid() != 0 {
		stageUID = os.Getuid()
	}
	base := t.TempDir()
	tree, outside := filepath.Join(base, "state"), filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(tree, "ws"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(outside, "passwd")
	if err := os.WriteFile(secret, []byte("root:x:0:0"), 0o644); err != nil {
		t.Fatal(err)
	}
	secretChanged, outsideChanged := changeTime(t, secret), changeTime(t, outside)
	handedOver := func() bool {
		return owner(t, secret) != os.Getuid() || owner(t, outside) != os.Getuid() ||
			changeTime(t, secret) != secretChanged || changeTime(t, outside) != outsideChanged
	}

	// The attacking stage: ws is a directory one moment and a link to
	// outside the next; beside it, files come and go.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		ws, aside := filepath.Join(tree, "ws"), filepath.Join(tree, "ws.aside")
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = os.WriteFile(filepath.Join(tree, "ws", ".terraform.tfstate.lock.info"), nil, 0o600)
			_ = os.Rename(ws, aside)
			_ = os.Symlink(outside, ws)
			_ = os.Remove(ws)
			_ = os.Rename(aside, ws)
			_ = os.Remove(filepath.Join(tree, "ws", ".terraform.tfstate.lock.info"))
		}
	}()
	deadline := time.Now().Add(3 * time.Second)
	walks := 0
	for time.Now().Before(deadline) && !handedOver() {
		if err := chownTree(tree, stageUID, stageUID); errors.Is(err, fs.ErrNotExist) {
			close(stop)
			<-done
			t.Fatalf("handing the tree over while a stage removes files: %v", err)
		}
		walks++
	}
	close(stop)
	<-done
	if handedOver() {
		t.Fatalf("after %d walks, a file outside the tree was handed to the stages' user: %s is owned by %d, %s by %d (or their change times moved)",
			walks, secret, owner(t, secret), outside, owner(t, outside))
	}
	t.Logf("%d walks, nothing outside the tree handed over", walks)
	if err := chownTree(tree, stageUID, stageUID); err != nil {
		t.Fatal(err)
	}
	if got := owner(t, filepath.Join(tree, "ws")); got != stageUID {
		t.Errorf("the tree's directory ws is owned by %d, want %d", got, stageUID)
	}
}

// TestBaseSandboxMountsPathOnce: a directory on the stages' PATH is mounted
// once, however often PATH names it and when it is a system mount already,
// and a directory the sandbox masks is not mounted at all.
func TestBaseSandboxMountsPathOnce(t *testing.T) {
	work := t.TempDir()
	e := &Executor{
		opts: Options{WorkRoot: work, StateRoot: t.TempDir(), ExecutorBinary: "/opt/terrarun/terrarun-executor"},
		env:  []string{"HOME=/nonexistent", "PATH=/usr/local/bin:/opt/tools/bin:/usr/local/bin:/bin:/opt/tools/bin:" + filepath.Join(work, "bin") + ":relative"},
	}
	seen := map[string]int{}
	for _, m := range e.baseSandbox().Mounts {
		if m.Target == "" {
			seen[m.Source]++
		}
	}
	for path, n := range seen {
		if n != 1 {
			t.Errorf("%s is mounted %d times, want once", path, n)
		}
	}
	for _, path := range []string{"/usr/local/bin", "/opt/tools/bin", "/bin", "/opt/terrarun/terrarun-executor"} {
		if seen[path] == 0 {
			t.Errorf("%s is not mounted", path)
		}
	}
	for _, path := range []string{filepath.Join(work, "bin"), "relative"} {
		if seen[path] != 0 {
			t.Errorf("%s is mounted", path)
		}
	}
}

// handOverTree makes a namespace's state tree of two workspaces, each with a
// state file, and returns its path and a function that reports the owner of
// each of its entries.
func handOverTree(t *testing.T) (string, func() map[string]int) {
	t.Helper()
	tree := filepath.Join(t.TempDir(), "state")
	for _, d := range []string{"a", "b"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tree, d, "terraform.tfstate"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return tree, func() map[string]int {
		got := map[string]int{}
		for _, p := range []string{".", "a", "a/terraform.tfstate", "b", "b/terraform.tfstate", "c"} {
			if _, err := os.Lstat(filepath.Join(tree, p)); err == nil {
				got[p] = owner(t, filepath.Join(tree, p))
			}
		}
		return got
	}
}

// TestHandOver: a namespace's state tree that is the stages' user's already
// is not walked again at a stage's start: only what the server made for the
// stage is handed over. Every hand-over shows in a file's change time, also
// one to the owner it had, so the test runs as any user (as root, the stages'
// user is another).
func TestHandOver(t *testing.T) {
	stageUID := os.Getuid()
	if stageUID == 0 {
		stageUID = 65533
	}
	tree, owners := handOverTree(t)
	if err := chownTree(tree, stageUID, stageUID); err != nil {
		t.Fatal(err)
	}
	// The server makes c for the stage (as root: root's until handed over).
	made := filepath.Join(tree, "c")
	if err := os.Mkdir(made, 0o700); err != nil {
		t.Fatal(err)
	}
	stagesMade := []string{".", "a", "a/terraform.tfstate", "b", "b/terraform.tfstate"}
	before := map[string]syscall.Timespec{}
	for _, p := range stagesMade {
		before[p] = changeTime(t, filepath.Join(tree, p))
	}
	madeChanged := changeTime(t, made)
	time.Sleep(10 * time.Millisecond) // change times are the clock's ticks

	if err := handOver(tree, stageUID, stageUID, made); err != nil {
		t.Fatal(err)
	}
	for _, p := range stagesMade {
		if changeTime(t, filepath.Join(tree, p)) != before[p] {
			t.Errorf("%s was handed over again: the tree was walked", p)
		}
	}
	if changeTime(t, made) == madeChanged || owners()["c"] != stageUID {
		t.Errorf("the directory the server made was not handed over: owner %d", owners()["c"])
	}
}

// TestHandOverWholeTree: a tree whose root is not the stages' user's (new,
// or that user changed) is given to them whole.
func TestHandOverWholeTree(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("this test gives a tree to uid 65533 and then 65534, which only root may do; make test runs as root, as CI does (TestHandOver and TestChownTreeStaysInside run as any user)")
	}
	const stageUID, otherUID = 65533, 65534
	tree, owners := handOverTree(t)
	all := func(uid int) map[string]int {
		want := owners()
		for p := range want {
			want[p] = uid
		}
		return want
	}
	// A new tree (root's) is given whole.
	if err := handOver(tree, stageUID, stageUID, filepath.Join(tree, "a")); err != nil {
		t.Fatal(err)
	}
	if got, want := owners(), all(stageUID); !maps.Equal(got, want) {
		t.Fatalf("a new tree: owners %v, want %v", got, want)
	}
	// The stages' user changed: the tree is given whole again.
	if err := handOver(tree, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
	if got, want := owners(), all(otherUID); !maps.Equal(got, want) {
		t.Errorf("after the stages' user changed: owners %v, want %v", got, want)
	}
}
