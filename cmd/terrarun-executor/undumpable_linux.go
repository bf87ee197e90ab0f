package main

import "golang.org/x/sys/unix"

// undumpable keeps the processes of the stage (terraform, providers,
// local-exec commands), which run as the executor's user, from reading its
// memory and descriptors, and so its token, through /proc or ptrace.
func undumpable() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
