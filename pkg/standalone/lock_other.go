//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package standalone

import "os"

// Without flock the data directory is not guarded.
func tryLock(*os.File) error { return nil }

func unlock(*os.File) {}
