package stagelimits

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, path string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBudget: what a stage writes is counted by the blocks it takes, each
// inode once, never through a link; a plan's additions to the shared trees
// are removed, and nothing that was there before.
func TestBudget(t *testing.T) {
	root := t.TempDir()
	work, ns, outside := filepath.Join(root, "work"), filepath.Join(root, "state", "ns"), filepath.Join(root, "outside")
	ws := filepath.Join(ns, "ws")
	write(t, filepath.Join(ws, "terraform.tfstate"), 4096)
	write(t, filepath.Join(ns, "other", "terraform.tfstate"), 4096)
	write(t, filepath.Join(outside, "huge"), 8<<20)
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := NewBudget(Limits{Disk: 2 << 20, NamespaceState: 4 << 20}, Flags{Disk: "--disk", NamespaceState: "--ns"}, work, ns, ws)
	if err != nil {
		t.Fatal(err)
	}
	// Links to a large file outside, a sparse file and hard links of one
	// file take (almost) nothing.
	for _, l := range []string{filepath.Join(work, "link"), filepath.Join(ws, "link")} {
		if err := os.Symlink(filepath.Join(outside, "huge"), l); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Create(filepath.Join(work, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	write(t, filepath.Join(work, "one"), 1<<20)
	if err := os.MkdirAll(filepath.Join(work, "hard"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		if err := os.Link(filepath.Join(work, "one"), filepath.Join(work, "hard", name)); err != nil {
			t.Fatal(err)
		}
	}
	if over, err := b.Check(); err != nil || over != "" {
		t.Fatalf("Check with links, a sparse file and hard links = %q, %v; want within the budget", over, err)
	}
	// Over the stage's budget in its workspace's state directory.
	write(t, filepath.Join(ws, "junk", "big"), 3<<20)
	over, err := b.Check()
	if err != nil || !strings.Contains(over, "over its limit of 2097152 bytes (--disk)") {
		t.Fatalf("Check = %q, %v; want over the disk limit", over, err)
	}
	if err := b.RemoveNew(); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{filepath.Join(ws, "junk"), filepath.Join(ws, "link")} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s is still there after RemoveNew (%v)", gone, err)
		}
	}
	for _, kept := range []string{filepath.Join(ws, "terraform.tfstate"), filepath.Join(outside, "huge"), filepath.Join(ns, "other", "terraform.tfstate")} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("RemoveNew removed %s, which was there before or is outside: %v", kept, err)
		}
	}
	// The namespace over its limit: only a stage whose workspace grew is
	// blamed.
	b2, err := NewBudget(Limits{NamespaceState: 4 << 20}, Flags{NamespaceState: "--ns"}, work, ns, ws)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(ns, "other", "big"), 5<<20)
	if over, err := b2.Check(); err != nil || over != "" {
		t.Errorf("Check while another workspace fills the namespace = %q, %v; want nothing", over, err)
	}
	write(t, filepath.Join(ws, "more"), 8192)
	if over, err := b2.Check(); err != nil || !strings.Contains(over, "over the namespace's limit of 4194304 bytes (--ns)") {
		t.Errorf("Check once its workspace grew too = %q, %v", over, err)
	}
}

// TestBudgetCountsEveryPath: empty files and short links take no block of
// their own, but each an inode of the file system and a path the server
// keeps: every path counts a block, so that a stage that makes many of them
// goes over its budget as one that wrote their blocks would.
func TestBudgetCountsEveryPath(t *testing.T) {
	root := t.TempDir()
	work, ns := filepath.Join(root, "work"), filepath.Join(root, "state", "ns")
	ws := filepath.Join(ns, "ws")
	for _, dir := range []string{work, ws} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := NewBudget(Limits{Disk: 4 << 20}, Flags{Disk: "--disk"}, work, ns, ws)
	if err != nil {
		t.Fatal(err)
	}
	// 2,000 paths take 8,192,000 bytes at a block each: 1,000 empty files
	// in the work directory, 1,000 short links in the state directory.
	for i := range 1000 {
		f, err := os.Create(filepath.Join(work, fmt.Sprintf("empty-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := os.Symlink("x", filepath.Join(ws, fmt.Sprintf("link-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	over, err := b.Check()
	if err != nil || !strings.Contains(over, "over its limit of 4194304 bytes (--disk)") {
		t.Fatalf("Check after 1,000 empty files and 1,000 links = %q, %v; want over the disk limit", over, err)
	}
	if err := b.RemoveNew(); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(ws, "link-*")); len(left) != 0 {
		t.Errorf("RemoveNew left %d of the links", len(left))
	}
}
