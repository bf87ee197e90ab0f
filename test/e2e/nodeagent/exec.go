package nodeagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// How a container process is started (see the package documentation):
//
//	agent ──fork, unshare(CLONE_NEWNS|CLONE_NEWUTS), / made rprivate──> /proc/self/exe with execEnv set
//	  └─ the helper (this file's init): staging tmpfs, bind mounts, credentials,
//	     working directory, then execve of the container's command
//
// The helper reports a failure before execve on fd 3, which is close-on-exec:
// the agent reads it until EOF, so an empty read means the command was
// executed.

// execEnv names the helper's spec file. A process started with it set runs
// the helper from init and never returns to its main.
const execEnv = "TERRARUN_NODEAGENT_EXEC"

// DefaultStagingDir is the directory on the node over which every container's
// private mount namespace mounts a tmpfs holding bind mounts of its volumes and
// of the binaries it runs, so that a volume mounted at, say, /tmp or /work
// cannot hide them. It must not be at or below any container mount path.
const DefaultStagingDir = "/run/terrarun-nodeagent"

// helperExitCode is the exit code of a container whose command could not be
// started (the runtime's "StartError", 128 as with runc).
const helperExitCode = 128

// statusFD is the helper's end of the exec status pipe.
const statusFD = 3

func init() {
	file, ok := os.LookupEnv(execEnv)
	if !ok {
		return
	}
	os.Exit(helperMain(file))
}

// execSpec is what the helper does, in order.
type execSpec struct {
	// Probe only checks that the helper can set up a private mount namespace
	// with the staging tmpfs, and exits 0.
	Probe bool `json:"probe,omitempty"`
	// Staging is where the staging tmpfs is mounted.
	Staging string `json:"staging"`
	// Stage binds node paths (Source) to paths below Staging (Target,
	// relative), before anything else is mounted.
	Stage []bindSpec `json:"stage,omitempty"`
	// Mounts binds staged paths (Source, absolute, below Staging) to container
	// paths (Target), parents first.
	Mounts []bindSpec `json:"mounts,omitempty"`
	// Path is the executable, as seen once everything is mounted.
	Path string   `json:"path,omitempty"`
	Args []string `json:"args,omitempty"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	// Cred, when set, is the identity the command runs as.
	Cred *credSpec `json:"cred,omitempty"`
	// NoNewPrivs sets PR_SET_NO_NEW_PRIVS (allowPrivilegeEscalation false).
	NoNewPrivs bool `json:"noNewPrivs,omitempty"`
	// Hostname is the container's host name (its own UTS namespace), as the
	// kubelet gives it: the pod's spec.hostname, else its name.
	Hostname string `json:"hostname,omitempty"`

	// failure, when set, is why the container cannot start at all; nothing
	// is started.
	failure string
}

type bindSpec struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	File     bool   `json:"file,omitempty"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	// Optional mounts that fail are skipped (the termination log).
	Optional bool `json:"optional,omitempty"`
	// Transient staged mounts are unmounted from the staging directory once
	// the container's mounts are made (volumes).
	Transient bool `json:"transient,omitempty"`
}

type credSpec struct {
	UID    int   `json:"uid"`
	GID    int   `json:"gid"`
	Groups []int `json:"groups"`
}

// helperMain runs in the child. It returns only on failure (or for a probe).
func helperMain(file string) int {
	status := os.NewFile(statusFD, "exec-status")
	fail := func(err error) int {
		msg := err.Error()
		if status != nil {
			_, _ = io.WriteString(status, msg)
		}
		fmt.Fprintf(os.Stderr, "nodeagent: %s\n", msg)
		return helperExitCode
	}
	if status != nil {
		unix.CloseOnExec(statusFD)
	}
	// Everything below (prctl, mounts, exec) happens on this thread.
	runtime.LockOSThread()
	b, err := os.ReadFile(file)
	if err != nil {
		return fail(fmt.Errorf("reading the exec spec: %w", err))
	}
	var spec execSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fail(fmt.Errorf("decoding the exec spec: %w", err))
	}
	if err := spec.setup(); err != nil {
		return fail(err)
	}
	if spec.Probe {
		return 0
	}
	err = syscall.Exec(spec.Path, spec.Args, spec.Env)
	if errors.Is(err, syscall.ENOENT) {
		err = fmt.Errorf("%w (is it hidden by a volume mount?)", err)
	}
	return fail(fmt.Errorf("exec %q: %w", spec.Path, err))
}

// setup builds the container's view of the file system and takes on its
// identity. The mount namespace is already private (Unshareflags), but making
// / recursively private again is cheap and keeps the host safe if it is not.
func (s *execSpec) setup() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private in the mount namespace: %w", err)
	}
	if err := unix.Mount("tmpfs", s.Staging, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("mounting the staging tmpfs at %s: %w", s.Staging, err)
	}
	if s.Probe {
		return os.WriteFile(filepath.Join(s.Staging, "probe"), []byte("ok"), 0o644)
	}
	if s.Hostname != "" {
		if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
			return fmt.Errorf("setting the host name %s: %w", s.Hostname, err)
		}
	}
	for _, b := range s.Stage {
		target := filepath.Join(s.Staging, b.Target)
		if err := mountPoint(target, b.File); err != nil {
			return fmt.Errorf("staging %s: %w", b.Source, err)
		}
		if err := unix.Mount(b.Source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("staging %s at %s: %w", b.Source, target, err)
		}
		if b.ReadOnly {
			if err := remountReadOnly(target); err != nil {
				return fmt.Errorf("staging %s: %w", b.Source, err)
			}
		}
	}
	mounts := append([]bindSpec(nil), s.Mounts...)
	// Parents before children: a path sorts after its prefixes.
	sort.SliceStable(mounts, func(i, j int) bool { return mounts[i].Target < mounts[j].Target })
	var readOnly []string
	for _, m := range mounts {
		err := s.bindIntoContainer(m)
		switch {
		case err != nil && m.Optional:
			continue
		case err != nil:
			return err
		case m.ReadOnly:
			readOnly = append(readOnly, m.Target)
		}
	}
	// Read-only last, so that mount points of nested mounts could be made.
	for _, target := range readOnly {
		if err := remountReadOnly(target); err != nil {
			return err
		}
	}
	// The container's mounts do not depend on the staged ones they were made
	// from: drop those, or the container could write to a read-only volume
	// through the staging directory.
	for _, b := range s.Stage {
		if b.Transient {
			if err := unix.Unmount(filepath.Join(s.Staging, b.Target), unix.MNT_DETACH); err != nil {
				return fmt.Errorf("unmounting staged %s: %w", b.Source, err)
			}
		}
	}
	if s.NoNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("setting no_new_privs: %w", err)
		}
	}
	if c := s.Cred; c != nil {
		// The syscall package changes the credentials of all threads.
		if err := syscall.Setgroups(c.Groups); err != nil {
			return fmt.Errorf("setgroups %v: %w", c.Groups, err)
		}
		if err := syscall.Setgid(c.GID); err != nil {
			return fmt.Errorf("setgid %d: %w", c.GID, err)
		}
		if err := syscall.Setuid(c.UID); err != nil {
			return fmt.Errorf("setuid %d: %w", c.UID, err)
		}
	}
	dir := s.Dir
	if dir == "" {
		dir = "/"
	}
	if err := os.Chdir(dir); err != nil {
		return fmt.Errorf("changing to the working directory: %w", err)
	}
	return nil
}

func (s *execSpec) bindIntoContainer(m bindSpec) error {
	if err := mountPoint(m.Target, m.File); err != nil {
		return fmt.Errorf("mount point %s: %w", m.Target, err)
	}
	resolved, err := filepath.EvalSymlinks(m.Target)
	if err != nil {
		return fmt.Errorf("mount point %s: %w", m.Target, err)
	}
	if under(s.Staging, resolved) {
		return fmt.Errorf("volume mount %s would hide the node agent's staging directory %s", m.Target, s.Staging)
	}
	if err := unix.Mount(m.Source, m.Target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("mounting %s at %s: %w", m.Source, m.Target, err)
	}
	return nil
}

// remountReadOnly makes the bind mount at target read-only, keeping its other
// flags (changing them is not allowed in every mount namespace).
func remountReadOnly(target string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		return fmt.Errorf("remounting %s read-only: %w", target, err)
	}
	keep := uintptr(st.Flags) & (unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME)
	if err := unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|keep, ""); err != nil {
		return fmt.Errorf("remounting %s read-only: %w", target, err)
	}
	return nil
}

// under reports whether path is dir or below it.
func under(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// mountPoint creates an empty file or directory at path, unless something is
// there already.
func mountPoint(path string, file bool) error {
	if !file {
		return os.MkdirAll(path, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// spawner starts processes from one OS thread that lives as long as the
// agent runs. Pdeathsig is delivered when the thread that forked a child
// exits, not the process, and the Go runtime ends a thread when a goroutine
// that locked it returns: a container forked from an arbitrary thread could
// be killed when some unrelated goroutine (say, one that entered a namespace)
// exits.
type spawner struct {
	reqs chan spawnReq
}

type spawnReq struct {
	cmd *exec.Cmd
	err chan<- error
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnReq)}
	go func() {
		// Never unlocked: when close ends the loop, the thread ends too, and
		// with it whatever it started (all killed by then).
		runtime.LockOSThread()
		for req := range s.reqs {
			req.err <- req.cmd.Start()
		}
	}()
	return s
}

func (s *spawner) start(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	s.reqs <- spawnReq{cmd: cmd, err: errc}
	return <-errc
}

// close stops the spawner, and kills what it started and still runs.
func (s *spawner) close() { close(s.reqs) }

// startHelper starts the helper on spec (written to specFile) with stdout and
// stderr to out, in a new process group, PID namespace and private mount
// namespace. It
// returns once the command is executed, or with the reason it was not; in
// that case the helper has exited or is exiting, and cmd must still be
// waited for. cmd is nil when nothing was started.
func startHelper(sp *spawner, spec *execSpec, specFile string, out *os.File) (cmd *exec.Cmd, startErr error, err error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(specFile, b, 0o600); err != nil {
		return nil, nil, err
	}
	defer os.Remove(specFile)
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	cmd = &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{"terrarun-nodeagent-exec"},
		Env:        []string{execEnv + "=" + specFile},
		Stdout:     out,
		Stderr:     out,
		ExtraFiles: []*os.File{w},
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid: true,
			// A PID namespace of its own, whose first process (the
			// helper, then the container's command) is PID 1: when it
			// ends, the kernel kills every process left in the
			// container, also those in process groups of their own
			// (Tekton's entrypoint starts its step so), as a runtime's
			// container ends.
			Cloneflags:   syscall.CLONE_NEWPID,
			Unshareflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS,
			// Containers do not outlive the agent's process.
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if out == nil {
		cmd.Stdout, cmd.Stderr = nil, nil
	}
	err = sp.start(cmd)
	w.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("starting the exec helper: %w", err)
	}
	msg, _ := io.ReadAll(r)
	if len(msg) > 0 {
		return cmd, errors.New(string(msg)), nil
	}
	return cmd, nil, nil
}

// probeMountNamespaces checks that this process can run containers: it must be
// root, able to create private mount namespaces and to mount a tmpfs on the
// staging directory.
func probeMountNamespaces(staging, dir string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("nodeagent needs root to run containers in private mount namespaces (euid is %d)", os.Geteuid())
	}
	sp := newSpawner()
	defer sp.close()
	cmd, startErr, err := startHelper(sp, &execSpec{Probe: true, Staging: staging}, filepath.Join(dir, ".probe.json"), nil)
	if err != nil {
		return fmt.Errorf("nodeagent cannot create a private mount namespace (unshare(CLONE_NEWNS) needs root with CAP_SYS_ADMIN): %w", err)
	}
	waitErr := cmd.Wait()
	if startErr != nil {
		return fmt.Errorf("nodeagent cannot set up a private mount namespace: %w", startErr)
	}
	if waitErr != nil {
		return fmt.Errorf("nodeagent's mount namespace probe failed: %w", waitErr)
	}
	return nil
}
