package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/terrarun/terrarun/pkg/engineversion"
)

// engineVersions knows the version of each engine binary the stages run,
// asked once per binary (package engineversion), so that the stages take it
// instead of asking the engine each time.
type engineVersions struct {
	// path is the stages' PATH, where their engine is found.
	path string

	mu     sync.Mutex
	byPath map[string]engineEntry
}

// engineEntry is what asking the binary at a path answered: a record, or
// nil when it failed, for the binary with the status seen then.
type engineEntry struct {
	fi  os.FileInfo
	rec *engineversion.Record
}

// lookup returns the path of the engine name on the stages' PATH and its
// version, asking the engine when it has not been asked, or when its binary
// changed since. The path is "" when no such engine is on the PATH (the
// stage reports it); the record is nil when the engine could not answer.
func (v *engineVersions) lookup(ctx context.Context, name string) (string, *engineversion.Record) {
	path, fi := lookPath(name, v.path)
	if path == "" {
		return "", nil
	}
	if err := runnable(path); err != nil {
		klog.V(2).InfoS("Not asking the engine its version; its stages will ask it themselves", "engine", path, "reason", err)
		return path, nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if e, ok := v.byPath[path]; ok && sameFile(e.fi, fi) {
		return path, e.rec
	}
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	rec, err := engineversion.Ask(ctx, path)
	if err != nil {
		if ctx.Err() != nil {
			return path, nil
		}
		klog.ErrorS(err, "Asking the engine its version; its stages will ask it themselves", "engine", path)
		v.byPath[path] = engineEntry{fi: fi}
		return path, nil
	}
	v.byPath[path] = engineEntry{fi: fi, rec: &rec}
	return path, &rec
}

// askTimeout bounds asking an engine its version.
const askTimeout = 30 * time.Second

// runnable returns nil when the server may run the engine at path itself,
// outside any sandbox and as its own user: when the file, the directory it
// was found in and, through symbolic links, the file's own directory belong
// to root or to the server's user, and no one else may write them. Otherwise
// a stage could plant an engine on the PATH for the server to run.
func runnable(path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	for _, p := range []string{filepath.Dir(path), real, filepath.Dir(real)} {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || st.Uid != 0 && int(st.Uid) != os.Getuid() || fi.Mode().Perm()&0o022 != 0 {
			return fmt.Errorf("%s may be written by others than root and this server's user", p)
		}
	}
	return nil
}

// sameFile reports whether a and b are the status of one unchanged file.
func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// lookPath finds the executable file name in the directories of the PATH
// list path, as exec.LookPath does in the process's own PATH.
func lookPath(name, path string) (string, os.FileInfo) {
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, fi
		}
	}
	return "", nil
}
