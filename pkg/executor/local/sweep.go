package local

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/klog/v2"
)

// staleSweepDelay is how long after Run starts the work directories of a
// previous server are removed: its processes got SIGTERM through Pdeathsig
// when it died, and have had their grace period to release state locks and
// end by then.
const staleSweepDelay = 30 * time.Second

// sweepStale removes, delay after it is called, every stage work
// directory (<WorkRoot>/<namespace>/<run>/<uid>/<stage>-<attempt>, and its
// sandbox root) that no process of this instance uses and that is older than
// the instance: those a server left when it was killed (kill -9, a crash),
// with the secret files, plan and token in them. The stages themselves are
// reported ExecutorLost by Status. Parents left empty are removed too.
func (e *Executor) sweepStale(ctx context.Context, delay time.Duration) {
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		return
	}
	logger := klog.FromContext(ctx)
	stages, _ := filepath.Glob(filepath.Join(e.opts.WorkRoot, "*", "*", "*", "*"))
	for _, dir := range stages {
		if e.inUse(dir) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			logger.Error(err, "Removing a stale work directory", "path", dir)
			continue
		}
		logger.Info("Removed the work directory of a stage a previous server left", "path", dir)
	}
	for depth := 3; depth >= 1; depth-- {
		pattern := filepath.Join(append([]string{e.opts.WorkRoot}, slices.Repeat([]string{"*"}, depth)...)...)
		parents, _ := filepath.Glob(pattern)
		for _, d := range parents {
			_ = os.Remove(d) // only when empty
		}
	}
}

// inUse says whether dir belongs to this instance: a process of its own
// uses it, or it was made after the instance started.
func (e *Executor) inUse(dir string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.procs {
		if dir == p.dir || dir == p.dir+".root" {
			return true
		}
	}
	fi, err := os.Lstat(dir)
	return err != nil || !fi.ModTime().Before(e.created)
}
