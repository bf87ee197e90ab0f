package standalone

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// lockFile is the file in the data directory that a running standalone
// server holds locked.
const lockFile = "terrarun.lock"

// ErrDataDirInUse means another standalone server holds the data directory.
var ErrDataDirInUse = errors.New("the data directory is in use")

// LockDataDir takes the data directory dir for this process, before anything
// in it is read or written: a second server on the same directory would
// rewrite the first one's certificates and fight over its etcd. It fails at
// once, with ErrDataDirInUse and the holder's pid, when another process holds
// it. The lock is released by the returned function, or when the process
// ends.
func LockDataDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking --data-dir %s: %w", dir, err)
	}
	if err := tryLock(f); err != nil {
		holder := "another process"
		if b, rerr := os.ReadFile(f.Name()); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				holder = fmt.Sprintf("another terrarun-apiserver (pid %d)", pid)
			}
		}
		f.Close()
		return nil, fmt.Errorf("%w: %s is using --data-dir %s; stop it first, or start this one with another --data-dir (%v)", ErrDataDirInUse, holder, dir, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { unlock(f); f.Close() }, nil
}
