// Package sandbox runs a command in Linux namespaces of its own: a mount
// namespace in which only the paths it is given are visible, a PID namespace
// whose end takes every process of the command along (daemons included), an
// IPC namespace, and an unprivileged user. It shares the host's network.
//
// Command builds the exec.Cmd. It starts a small init (Init, entered through
// the shim binary's InitArg argument) as PID 1 of the new PID namespace, in a
// new mount namespace. Init builds a new root on a tmpfs: the read-only and
// writable bind mounts of the Config, masks over paths that must stay hidden,
// a private /proc, /dev with only null, zero, full, random, urandom and tty,
// a private /tmp, and files hidden behind empty ones (the command gets them
// as descriptors). It pivots into that root, starts the command as the
// Config's user with no capabilities and no way to gain privileges, forwards
// SIGTERM, SIGINT and SIGHUP to it, reaps orphans, and exits with its status.
// When init exits, the kernel kills whatever is left in the PID namespace.
//
// As root, init runs as root in the new namespaces and the command as
// Config.UID and Config.GID. Without root, Config.UserNamespace runs both in
// a new user namespace in which only the caller's own uid and gid exist;
// init holds CAP_SYS_ADMIN there only to mount, and the command holds none.
package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// InitArg is the first argument that makes the shim binary run Init:
//
//	SHIM sandbox-init CONFIG-JSON -- COMMAND [ARG...]
const InitArg = "sandbox-init"

// checkArg is the command Check runs in a sandbox: the shim itself, which
// exits 0 at once.
const checkArg = "sandbox-check"

// IsShimCall reports whether args (os.Args[1:] of the shim) ask it to act for
// this package, in which case its main calls Init(args).
func IsShimCall(args []string) bool {
	return len(args) > 0 && (args[0] == InitArg || args[0] == checkArg)
}

// Mount makes Source visible at the same path inside the sandbox.
type Mount struct {
	// Source is an absolute path: a directory or a file.
	Source string `json:"source"`
	// Writable mounts it read-write; mounts are read-only otherwise. Every
	// mount is nosuid and nodev.
	Writable bool `json:"writable,omitempty"`
	// Optional skips the mount when Source does not exist.
	Optional bool `json:"optional,omitempty"`
	// Target is where Source appears in the sandbox; Source itself when
	// empty. A directory at a short path gives the command somewhere for
	// temporary files and sockets whatever the length of Source (a Unix
	// socket's path must stay under 108 bytes).
	Target string `json:"target,omitempty"`
}

// Config describes one sandbox.
type Config struct {
	// Root is an empty directory on which the new root is mounted. It stays
	// empty on the host; the caller removes it when the command has ended.
	Root string `json:"root"`
	// Mounts are bound in order. A later mount may lie inside an earlier one
	// or inside a mask.
	Mounts []Mount `json:"mounts"`
	// Masks are absolute paths hidden by an empty directory, when an earlier
	// mount made them visible. They are applied after the read-only mounts
	// and before the writable ones, so that a writable mount may lie inside a
	// mask.
	Masks []string `json:"masks,omitempty"`
	// UID and GID are the user the command runs as. With UserNamespace they
	// must be the caller's own.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// UserNamespace runs the sandbox in a new user namespace, which lets a
	// caller without root build it.
	UserNamespace bool `json:"userNamespace,omitempty"`
	// Hide are files, inside the mounts, that no process of the command may
	// open by path: each is covered by an empty read-only file once every
	// mount is in place. The command gets such a file as an inherited
	// descriptor instead (ExtraFiles).
	Hide []string `json:"hide,omitempty"`
	// ExtraFiles is the number of descriptors, from 3, that the shim gets
	// from the caller (exec.Cmd.ExtraFiles) and init passes on to the command
	// at the same numbers.
	ExtraFiles int `json:"extraFiles,omitempty"`
	// Dir is the command's working directory inside the sandbox.
	Dir string `json:"dir"`
	// Cgroups are cgroup.procs files that init joins before it builds the
	// sandbox, so that every process of the command is in those cgroups.
	Cgroups []string `json:"cgroups,omitempty"`
}

// validate checks that every path is absolute and clean.
func (c *Config) validate() error {
	check := func(what, p string) error {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
			return fmt.Errorf("sandbox: %s %q must be a clean absolute path other than /", what, p)
		}
		return nil
	}
	for _, m := range c.Mounts {
		if err := check("mount", m.Source); err != nil {
			return err
		}
		if m.Target != "" {
			if err := check("mount target", m.Target); err != nil {
				return err
			}
		}
	}
	for _, m := range c.Masks {
		if err := check("mask", m); err != nil {
			return err
		}
	}
	for _, h := range c.Hide {
		if err := check("hidden file", h); err != nil {
			return err
		}
	}
	if c.ExtraFiles < 0 {
		return errors.New("sandbox: ExtraFiles must not be negative")
	}
	for _, f := range c.Cgroups {
		if err := check("cgroup.procs file", f); err != nil {
			return err
		}
	}
	if err := check("root", c.Root); err != nil {
		return err
	}
	if err := check("working directory", c.Dir); err != nil {
		return err
	}
	if c.UserNamespace && (int(c.UID) != os.Getuid() || int(c.GID) != os.Getgid()) {
		return errors.New("sandbox: in a user namespace the command runs as the caller's own uid and gid")
	}
	return nil
}

// SystemMounts are the read-only mounts every command needs: the system's
// programs, libraries and configuration. Those that do not exist are skipped.
func SystemMounts() []Mount {
	var ms []Mount
	for _, p := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"} {
		ms = append(ms, Mount{Source: p, Optional: true})
	}
	return ms
}

// initArgs are the arguments of the shim that runs args in the sandbox c.
func initArgs(c *Config, args []string) ([]string, error) {
	if len(args) == 0 || !filepath.IsAbs(args[0]) {
		return nil, errors.New("sandbox: the command must be an absolute path")
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	js, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return append([]string{InitArg, string(js), "--"}, args...), nil
}

// parseInitArgs reads back what initArgs wrote.
func parseInitArgs(args []string) (*Config, []string, error) {
	if len(args) < 4 || args[0] != InitArg || args[2] != "--" {
		return nil, nil, fmt.Errorf("usage: %s CONFIG-JSON -- COMMAND [ARG...]", InitArg)
	}
	c := &Config{}
	if err := json.Unmarshal([]byte(args[1]), c); err != nil {
		return nil, nil, fmt.Errorf("sandbox config: %w", err)
	}
	return c, args[3:], nil
}
