//go:build !linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

var errUnsupported = errors.New("sandbox: Linux namespaces are needed to sandbox a command")

// Command fails: sandboxes need Linux.
func Command(shim string, c Config, args []string) (*exec.Cmd, error) { return nil, errUnsupported }

// Init fails: sandboxes need Linux.
func Init(args []string) {
	fmt.Fprintln(os.Stderr, errUnsupported)
	os.Exit(126)
}

// Check fails: sandboxes need Linux.
func Check(shim string, c Config) error { return errUnsupported }
