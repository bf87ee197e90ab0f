package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// exitInitFailed is init's exit code when it could not build the sandbox or
// start the command.
const exitInitFailed = 126

// Init is the sandbox's init: the shim's main calls it, with os.Args[1:],
// when IsShimCall says so. It builds the sandbox, runs the command in it and
// exits with the command's status (128+N when signal N ended it). It never
// returns.
func Init(args []string) {
	if len(args) > 0 && args[0] == checkArg {
		os.Exit(0)
	}
	code, err := runInit(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "terrarun sandbox: %v\n", err)
		os.Exit(exitInitFailed)
	}
	os.Exit(code)
}

func runInit(args []string) (int, error) {
	c, command, err := parseInitArgs(args)
	if err != nil {
		return 0, err
	}
	if os.Getpid() != 1 {
		return 0, errors.New("init must be PID 1 of a new PID namespace: start it with sandbox.Command")
	}
	// Capabilities and no_new_privs belong to a thread, and a child inherits
	// those of the thread that forked it: build the sandbox and start the
	// command from this one.
	runtime.LockOSThread()
	// Nothing of the sandbox may read init's memory or descriptors through
	// /proc: in a user namespace, init is the command's own user.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("making init undumpable: %w", err)
	}
	// Into the command's cgroups first: whatever it starts is in them too.
	for _, f := range c.Cgroups {
		if err := os.WriteFile(f, []byte("0"), 0); err != nil {
			return 0, fmt.Errorf("joining the cgroup of %s: %w", f, err)
		}
	}
	if err := buildRoot(c); err != nil {
		return 0, err
	}

	cmd := exec.Command(command[0], command[1:]...)
	cmd.Dir = c.Dir
	cmd.Env = os.Environ() // as it is: exec adds PWD to a nil Env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	for i := range c.ExtraFiles {
		cmd.ExtraFiles = append(cmd.ExtraFiles, os.NewFile(uintptr(3+i), fmt.Sprintf("fd%d", 3+i)))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if !c.UserNamespace {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: []uint32{}}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("setting no_new_privs: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	// Empty the bounding set too, so that not even a command running as
	// uid 0 of a user namespace keeps a capability. Without CAP_SETPCAP
	// (init of an unprivileged user) this fails, and is not needed: a uid
	// other than 0 gets no capabilities from execve.
	for c := uintptr(0); c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil {
			break
		}
	}
	// And the inheritable set, through which uid 0 would get back
	// CAP_SYS_ADMIN, which init holds for mounting in a user namespace.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData
	if err := unix.Capget(&hdr, &caps[0]); err != nil {
		return 0, fmt.Errorf("reading capabilities: %w", err)
	}
	caps[0].Inheritable, caps[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &caps[0]); err != nil {
		return 0, fmt.Errorf("clearing inheritable capabilities: %w", err)
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting %s: %w", command[0], err)
	}
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	// Reap every child, orphans included, until the command ends.
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("waiting for %s: %w", command[0], err)
		}
		if pid != cmd.Process.Pid {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ws.ExitStatus(), nil
	}
}

// devices are the device nodes of the sandbox's /dev.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// buildRoot builds the new root in a tmpfs and pivots into it.
func buildRoot(c *Config) error {
	// Nothing mounted from here on propagates back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mounts private: %w", err)
	}
	root := c.Root
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=16m"); err != nil {
		return fmt.Errorf("mounting the new root on %s: %w", root, err)
	}

	// /proc, /dev and /tmp first: the mounts may lie inside /tmp.
	proc := filepath.Join(root, "proc")
	if err := os.Mkdir(proc, 0o555); err != nil {
		return err
	}
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	if err := buildDev(filepath.Join(root, "dev")); err != nil {
		return err
	}
	tmp := filepath.Join(root, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", tmp, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=64m"); err != nil {
		return fmt.Errorf("mounting /tmp: %w", err)
	}

	inMask := func(p string) bool {
		for _, m := range c.Masks {
			if within(p, m) {
				return true
			}
		}
		return false
	}
	var deferred []Mount
	for _, m := range c.Mounts {
		if m.Writable || inMask(m.Source) {
			deferred = append(deferred, m)
			continue
		}
		if err := bind(root, m); err != nil {
			return err
		}
	}
	for _, m := range c.Masks {
		target := filepath.Join(root, m)
		fi, err := os.Lstat(target)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("mask %s: only directories can be masked", m)
		}
		if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=1m"); err != nil {
			return fmt.Errorf("masking %s: %w", m, err)
		}
	}
	for _, m := range deferred {
		if err := bind(root, m); err != nil {
			return err
		}
	}
	for _, h := range c.Hide {
		if err := hide(root, h); err != nil {
			return err
		}
	}

	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	// The old root is stacked under the new one at "/": detach it.
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("making the root read-only: %w", err)
	}
	return nil
}

// bind mounts m.Source at m.Target (the same path when empty) under root:
// nosuid, nodev, and read-only unless m.Writable.
func bind(root string, m Mount) error {
	src, err := filepath.EvalSymlinks(m.Source)
	if errors.Is(err, os.ErrNotExist) && m.Optional {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mount %s: %w", m.Source, err)
	}
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("mount %s: %w", m.Source, err)
	}
	target := filepath.Join(root, m.Source)
	if m.Target != "" {
		target = filepath.Join(root, m.Target)
	}
	if fi.IsDir() {
		err = os.MkdirAll(target, 0o755)
	} else if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
		// The mount point of a file: made when nothing is there; a file
		// an earlier mount shows (read-only, perhaps running) is mounted
		// over as it is; anything else there (a link that could lead the
		// mount elsewhere) is an error.
		switch info, lerr := os.Lstat(target); {
		case errors.Is(lerr, os.ErrNotExist):
			var f *os.File
			if f, err = os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
				err = f.Close()
			}
		case lerr != nil:
			err = lerr
		case !info.Mode().IsRegular():
			err = fmt.Errorf("%s is already there, and not a regular file", target)
		}
	}
	if err != nil {
		return fmt.Errorf("mount %s: %w", m.Source, err)
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("mount %s: %w", m.Source, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID | unix.MS_NODEV)
	if !m.Writable {
		flags |= unix.MS_RDONLY
	}
	flags |= lockedFlags(target)
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		return fmt.Errorf("remounting %s: %w", m.Source, err)
	}
	return nil
}

// hide covers the regular file at path under root with the sandbox's
// /dev/null, read-only.
func hide(root, path string) error {
	target := filepath.Join(root, path)
	fi, err := os.Lstat(target)
	if err != nil {
		return fmt.Errorf("hiding %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("hiding %s: not a regular file", path)
	}
	if err := unix.Mount(filepath.Join(root, "dev", "null"), target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("hiding %s: %w", path, err)
	}
	flags := uintptr(unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC) | lockedFlags(target)
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		return fmt.Errorf("hiding %s: %w", path, err)
	}
	return nil
}

// lockedFlags are the flags of the mount at target that a remount in a user
// namespace may not clear.
func lockedFlags(target string) uintptr {
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		return 0
	}
	var flags uintptr
	for _, f := range []struct{ st, ms uintptr }{
		{unix.ST_RDONLY, unix.MS_RDONLY},
		{unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME},
		{unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(st.Flags)&f.st != 0 {
			flags |= f.ms
		}
	}
	return flags
}

// buildDev makes a minimal /dev: a tmpfs with the host's devices, bound one
// by one, and the usual links into /proc.
func buildDev(dev string) error {
	if err := os.Mkdir(dev, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("mounting /dev: %w", err)
	}
	for _, d := range devices {
		target := filepath.Join(dev, d)
		f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Mount("/dev/"+d, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mounting /dev/%s: %w", d, err)
		}
	}
	for link, to := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(to, filepath.Join(dev, link)); err != nil {
			return err
		}
	}
	return nil
}

// within says whether p is dir or lies inside it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}
