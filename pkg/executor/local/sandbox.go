package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/sandbox"
)

// baseSandbox is what every stage's sandbox holds: the system, the
// directories on the stages' PATH (where the engine is found) and
// terrarun-executor, and the server's CA certificate, read-only, and
// SandboxOptions.Mounts; with the
// work, state and values roots, the CA's directory and SandboxOptions.Hidden
// masked.
func (e *Executor) baseSandbox() sandbox.Config {
	o := e.opts.Sandbox
	c := sandbox.Config{
		UID:           o.UID,
		GID:           o.GID,
		UserNamespace: os.Getuid() != 0,
		Masks:         append([]string{e.opts.WorkRoot, e.opts.StateRoot}, o.Hidden...),
	}
	if e.opts.PluginCacheRoot != "" {
		c.Masks = append(c.Masks, e.opts.PluginCacheRoot)
	}
	if c.UserNamespace {
		// Only the server's own user exists in its user namespace.
		c.UID, c.GID = uint32(os.Getuid()), uint32(os.Getgid())
	}
	if fv, ok := e.values.(FileValues); ok {
		c.Masks = append(c.Masks, fv.Root)
	}
	if e.opts.CAFile != "" {
		c.Masks = append(c.Masks, filepath.Dir(e.opts.CAFile))
	}
	hidden := func(path string) bool {
		for _, m := range c.Masks {
			if path == m || strings.HasPrefix(path, m+"/") {
				return true
			}
		}
		return false
	}
	c.Mounts = sandbox.SystemMounts()
	mounted := func(path string) bool {
		return slices.ContainsFunc(c.Mounts, func(m sandbox.Mount) bool { return m.Source == path && m.Target == "" })
	}
	for _, kv := range e.env {
		if path, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, d := range filepath.SplitList(path) {
				// A directory that is on PATH twice, or is a system mount
				// already, is mounted once: every mount costs the stage's
				// start two system calls.
				if filepath.IsAbs(d) && filepath.Clean(d) == d && d != "/" && !hidden(d) && !mounted(d) {
					c.Mounts = append(c.Mounts, sandbox.Mount{Source: d, Optional: true})
				}
			}
		}
	}
	c.Mounts = append(c.Mounts, sandbox.Mount{Source: e.opts.ExecutorBinary})
	if e.opts.CAFile != "" {
		c.Mounts = append(c.Mounts, sandbox.Mount{Source: e.opts.CAFile})
	}
	c.Mounts = append(c.Mounts, o.Mounts...)
	return c
}

// checkSandbox proves, at start-up, that this host can build the stages'
// sandbox and that their user can run terrarun-executor in it.
func (e *Executor) checkSandbox() error {
	c := e.baseSandbox()
	c.Root = filepath.Join(e.opts.WorkRoot, ".sandbox-check.root")
	c.Dir = filepath.Dir(e.opts.ExecutorBinary)
	if err := os.Mkdir(c.Root, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	defer os.Remove(c.Root)
	if err := sandbox.Check(e.opts.ExecutorBinary, c); err != nil {
		who := fmt.Sprintf("uid %d", c.UID)
		if c.UserNamespace {
			who += " in a user namespace (the server does not run as root; the host must allow unprivileged user namespaces)"
		}
		return fmt.Errorf("local executor: cannot sandbox stages as %s: %w", who, err)
	}
	return nil
}

// stageSandbox is the sandbox of execution p of run: the base sandbox with
// p's work directory, its workspace's state directory and its creator's
// plugin cache read-write, handed to the stages' user.
func (e *Executor) stageSandbox(p *proc, run *v1alpha1.TerraformRun, workspace string) (sandbox.Config, error) {
	c := e.baseSandbox()
	c.Root = p.dir + ".root"
	c.Dir = p.dir
	nsState := filepath.Join(e.opts.StateRoot, run.Namespace)
	// The trees the stage writes, and in each what the server made in it
	// for this stage (backend: the workspace's state directory).
	owned := []struct {
		dir  string
		made []string
	}{{dir: p.dir}, {nsState, []string{filepath.Join(nsState, workspace)}}, {dir: e.pluginCache(run)}}
	// Its tmp directory is also at sandboxTmp: TMPDIR stays short, whatever
	// the length of the namespace and run names, so that the Unix sockets of
	// provider plugins (made in TMPDIR) fit their 108 bytes.
	c.Mounts = append(c.Mounts, sandbox.Mount{Source: p.dir, Writable: true},
		sandbox.Mount{Source: filepath.Join(p.dir, "tmp"), Target: sandboxTmp, Writable: true})
	// Of the namespace's state directory, only the stage's workspace's:
	// what a stage writes there is its workspace's, it sees no other
	// workspace's state, and it makes or replaces no entry of the
	// namespace's directory (the engine, listing the workspaces there,
	// finds its own).
	if ws := filepath.Join(nsState, workspace); workspace != "" && dirExists(ws) {
		c.Mounts = append(c.Mounts, sandbox.Mount{Source: ws, Writable: true})
	}
	if cache := e.pluginCache(run); cache != "" && dirExists(cache) {
		c.Mounts = append(c.Mounts, sandbox.Mount{Source: cache, Writable: true})
	}
	if err := os.Mkdir(c.Root, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return c, err
	}
	if !c.UserNamespace {
		for _, o := range owned {
			if o.dir == "" || !dirExists(o.dir) {
				continue
			}
			if err := handOver(o.dir, int(c.UID), int(c.GID), o.made...); err != nil {
				return c, fmt.Errorf("handing %s to the stages' user: %w", o.dir, err)
			}
		}
	}
	return c, nil
}

// handOver gives the tree at dir to uid and gid. A tree whose root is theirs
// already holds only what the stages made, which is theirs, what an earlier
// hand-over gave them, and what the server made in it since: of that, the
// paths made, which the server made for this stage, are given alone (any
// other is another stage's to be given). Any other tree (new, or the stages'
// user has changed) is given whole (chownTree): a walk that costs a system
// call for every file of every workspace of a namespace, at every stage.
func handOver(dir string, uid, gid int, made ...string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != uid || int(st.Gid) != gid {
		return chownTree(dir, uid, gid)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, m := range made {
		rel, err := filepath.Rel(dir, m)
		if err != nil || rel == "." || !filepath.IsLocal(rel) {
			continue
		}
		if err := root.Lchown(rel, uid, gid); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// pluginCache is the provider plugin cache of run, shared with the runs of
// the same creator in the same namespace (executor.PluginCacheKey), or ""
// when there is none.
func (e *Executor) pluginCache(run *v1alpha1.TerraformRun) string {
	key := executor.PluginCacheKey(run)
	if e.opts.PluginCacheRoot == "" || key == "" {
		return ""
	}
	return filepath.Join(e.opts.PluginCacheRoot, run.Namespace, key)
}

// sandboxTmp is where a sandboxed stage sees its tmp directory, and its
// TMPDIR: a path of its own, as the work root may lie under /tmp.
const sandboxTmp = "/.terrarun-tmp"

func dirExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// chownTree gives the tree at dir, symbolic links not followed, to uid and
// gid. Stages of the namespace run in it as that user meanwhile: one may
// replace a directory of the tree by a link to a directory outside it between
// the walk's reading of the directory and its descent into it, so every name
// is resolved within the tree (os.Root), and the walk fails rather than hand
// over a file outside. What the stages remove meanwhile (a state lock's
// info file) is skipped.
func chownTree(dir string, uid, gid int) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return fs.WalkDir(root.FS(), ".", func(path string, _ fs.DirEntry, err error) error {
		if err == nil {
			err = root.Lchown(path, uid, gid)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	})
}
