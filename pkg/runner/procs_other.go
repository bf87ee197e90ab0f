//go:build !linux

package runner

import "context"

// watchChildGroups does nothing outside Linux.
func watchChildGroups(context.Context, string) func() { return func() {} }
