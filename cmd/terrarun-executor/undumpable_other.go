//go:build !linux

package main

// undumpable does nothing: only Linux has PR_SET_DUMPABLE.
func undumpable() error { return nil }
