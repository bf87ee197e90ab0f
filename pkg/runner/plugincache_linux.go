package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// pluginCacheLocking says whether this platform can lock the plugin cache;
// without the lock the cache is not used.
const pluginCacheLocking = true

// lockPluginCache takes the plugin cache's lock, waiting for it until ctx
// ends, and returns its release.
func lockPluginCache(ctx context.Context, dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, pluginCacheLockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking the plugin cache: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR {
			f.Close()
			return nil, fmt.Errorf("locking the plugin cache: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
