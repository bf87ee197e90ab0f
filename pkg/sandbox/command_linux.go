package sandbox

import (
	"fmt"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Command returns the command that runs args (args[0] an absolute path) in
// the sandbox c, through shim, a binary whose main calls Init when its first
// argument is InitArg. The caller sets Env, Stdout, Stderr and may add
// Setpgid and Pdeathsig to SysProcAttr; the working directory is c.Dir.
func Command(shim string, c Config, args []string) (*exec.Cmd, error) {
	shimArgs, err := initArgs(&c, args)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(shim, shimArgs...)
	// A System V IPC namespace of its own too: no shared memory or
	// semaphores with the host's other processes.
	attr := &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC}
	if c.UserNamespace {
		attr.Cloneflags |= unix.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: int(c.UID), HostID: int(c.UID), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: int(c.GID), HostID: int(c.GID), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
		// Init keeps CAP_SYS_ADMIN in the new user namespace, to mount; it
		// clears it before it starts the command.
		attr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
	}
	cmd.SysProcAttr = attr
	return cmd, nil
}

// Check builds the sandbox c and runs the shim in it as c's user, which
// proves that this host can sandbox commands and that the user can run the
// shim. The error carries what init reported.
func Check(shim string, c Config) error {
	cmd, err := Command(shim, c, []string{shim, checkArg})
	if err != nil {
		return err
	}
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			return fmt.Errorf("%w: %s", err, msg)
		}
		return err
	}
	return nil
}
