package stagelimits

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
)

// Budget measures what one stage leaves in the directories it writes: its
// work directory whole, and what it adds to the trees it shares with other
// stages (its workspace's state directory, its creator's plugin cache); and
// the size of its namespace's state directory, which its workspace's is
// in. Every tree is walked through os.Root without following links,
// counting each inode's allocated blocks once, so a stage's links, sparse
// files and hard links make the server count no more (and read nothing)
// outside the tree; and every path at least one block (pathBytes), so that
// empty files, short links and further names of one file, which take no
// blocks of their own, are not free: the budget bounds the inodes a stage
// takes of the file system and the paths the server keeps in memory for
// it. Stages that share a tree at once share the blame for what is added
// to it.
type Budget struct {
	limits    Limits
	flags     Flags
	work      string
	namespace string
	shared    []string
	before    map[string]usage
}

type usage struct {
	bytes int64
	paths map[string]bool
}

// NewBudget measures the trees as they are before the stage: work is the
// stage's own directory, namespace its namespace's state directory,
// workspace its workspace's (in namespace's), others further trees it
// shares.
func NewBudget(limits Limits, flags Flags, work, namespace, workspace string, others ...string) (*Budget, error) {
	b := &Budget{limits: limits, flags: flags, work: work, namespace: namespace, shared: append([]string{workspace}, others...), before: map[string]usage{}}
	for _, dir := range append([]string{namespace}, b.shared...) {
		if dir == "" {
			continue
		}
		u, err := measure(dir)
		if err != nil {
			return nil, err
		}
		b.before[dir] = u
	}
	return b, nil
}

// Check measures the trees now; it returns what the stage is over, with
// the limit's flag, or "".
func (b *Budget) Check() (string, error) {
	if b.limits.Disk <= 0 && b.limits.NamespaceState <= 0 {
		return "", nil
	}
	work, err := measure(b.work)
	if err != nil {
		return "", err
	}
	written, grewState := work.bytes, false
	for i, dir := range b.shared {
		if dir == "" {
			continue
		}
		now, err := measure(dir)
		if err != nil {
			return "", err
		}
		grew := now.bytes - b.before[dir].bytes
		written += max(grew, 0)
		if i == 0 {
			grewState = grew > 0
		}
	}
	if b.limits.Disk > 0 && written > b.limits.Disk {
		return fmt.Sprintf("the stage wrote %d bytes to its work, state and plugin cache directories, over its limit of %d bytes (%s)", written, b.limits.Disk, b.flags.Disk), nil
	}
	if b.limits.NamespaceState > 0 {
		ns, err := measure(b.namespace)
		if err != nil {
			return "", err
		}
		// Only a stage whose workspace grew: the namespace's other
		// workspaces are other stages'.
		if ns.bytes > b.limits.NamespaceState && grewState {
			return fmt.Sprintf("the stage grew its namespace's state directory to %d bytes, over the namespace's limit of %d bytes (%s)", ns.bytes, b.limits.NamespaceState, b.flags.NamespaceState), nil
		}
	}
	return "", nil
}

// RemoveNew removes from the shared trees every file and directory that
// was not there before the stage.
func (b *Budget) RemoveNew() error {
	var errs []error
	for _, dir := range b.shared {
		if dir == "" {
			continue
		}
		now, err := measure(dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		removed := ""
		for _, p := range slices.Sorted(func(yield func(string) bool) {
			for p := range now.paths {
				if !yield(p) {
					return
				}
			}
		}) {
			if b.before[dir].paths[p] || removed != "" && strings.HasPrefix(p, removed+"/") {
				continue
			}
			if err := root.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
			removed = p
		}
		root.Close()
	}
	return errors.Join(errs...)
}

// pathBytes is what every path of a tree counts at least: one block of the
// file system. An empty file, a short link or a further name of a file takes
// no block of its own, but an inode or a directory entry, and a path the
// server keeps: at this price the default budget of 4 GiB bounds a stage to
// about a million of them.
const pathBytes = 4096

// measure walks dir (nothing when it does not exist): the blocks its
// files take, each inode once, every path at least pathBytes, and every
// path in it.
func measure(dir string) (usage, error) {
	u := usage{paths: map[string]bool{}}
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return u, nil
	}
	if err != nil {
		return u, fmt.Errorf("measuring %s: %w", dir, err)
	}
	defer root.Close()
	seen := map[uint64]bool{}
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			// A tree that changes while it is walked: what is gone
			// takes nothing.
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if p == "." {
			return nil
		}
		u.paths[path.Clean(p)] = true
		info, err := d.Info()
		if err != nil {
			return nil
		}
		n := int64(pathBytes)
		if st, ok := info.Sys().(*syscall.Stat_t); ok && !seen[st.Ino] {
			seen[st.Ino] = true
			n = max(n, st.Blocks*512)
		}
		u.bytes += n
		return nil
	})
	if err != nil {
		return u, fmt.Errorf("measuring %s: %w", dir, err)
	}
	return u, nil
}
