// Package stagelimits bounds what one local stage may take of its host:
// memory, processes and CPU through a cgroup of its own, and the bytes it
// leaves in the directories it may write, measured (disk.go).
//
// # Cgroups
//
// New finds what the host lets the server use, once:
//
//   - cgroup v2, when the unified hierarchy has the memory, pids and cpu
//     controllers and the server's own cgroup is delegated to it (it may
//     create children and enable controllers in them): the server moves
//     itself into a leaf "terrarun-server" beside "terrarun-stages", as the
//     "no internal processes" rule asks, and each stage gets
//     terrarun-stages/<server>/<id>;
//   - otherwise cgroup v1, when the memory, pids and cpu hierarchies are
//     mounted and the server may create children in its own cgroup of each
//     (root, usually): each stage gets terrarun-stages/<server>/<id> in each;
//   - otherwise none: memory, processes and CPU are not bounded, which the
//     server says when it starts (Enforcement); the disk budget still holds.
//
// <server> is "<pid>.<random>" of the server process: servers that share a
// cgroup never share a stage's, and a server removes at start what one
// that died left.
//
// A sandboxed stage's init joins its cgroups (Group.ProcsFiles) before it
// starts anything, so every process of the stage is in them; an unsandboxed
// stage is moved in by the server right after it starts (Group.Add).
package stagelimits

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/opencontainers/runtime-spec/specs-go"
)

const (
	mountpoint = "/sys/fs/cgroup"
	stagesDir  = "terrarun-stages"
	serverDir  = "terrarun-server"
)

// Limits are what one stage may take. Zero means unbounded.
type Limits struct {
	// Memory is the stage's memory in bytes, page cache and tmpfs included.
	Memory int64
	// Processes bounds its processes and threads together.
	Processes int64
	// CPUMillis is its CPU time per second, in thousandths of a CPU: a stage
	// over it is throttled, not stopped.
	CPUMillis int64
	// Disk bounds the bytes a stage leaves in the directories it writes:
	// its work directory, and what it adds to its namespace's state
	// directory and plugin cache.
	Disk int64
	// NamespaceState bounds a namespace's state directory: a stage that
	// grows it past this fails.
	NamespaceState int64
}

// Flags name the server's flags of each limit, for messages.
type Flags struct {
	Memory, Processes, Disk, NamespaceState string
}

// Controller makes each stage's cgroups.
type Controller struct {
	limits Limits
	flags  Flags
	mode   string // "cgroup v2", "cgroup v1" or ""
	// why says why no cgroup is used, when mode is "".
	why string
	// v2: the server's own cgroup, relative to mountpoint.
	v2Base string
	// v1: the hierarchies used.
	v1 []cgroup1.Subsystem
	// server names this process's directory in terrarun-stages:
	// "<pid>.<random>", so that servers sharing a cgroup never share a
	// stage's, and the directories of one that died are found (sweep).
	server string
}

// New returns the controller of limits on this host. It never fails for
// want of cgroups (see the package doc): Enforcement then says so.
func New(limits Limits, flags Flags) *Controller {
	var b [4]byte
	_, _ = rand.Read(b[:])
	c := &Controller{limits: limits, flags: flags, server: fmt.Sprintf("%d.%s", os.Getpid(), hex.EncodeToString(b[:]))}
	if limits.Memory == 0 && limits.Processes == 0 && limits.CPUMillis == 0 {
		return c
	}
	if cgroups.Mode() == cgroups.Unified {
		base, err := delegateV2()
		if err != nil {
			c.why = "cgroup v2 is not delegated to the server: " + err.Error()
			return c
		}
		c.mode, c.v2Base = "cgroup v2", base
		c.sweep()
		return c
	}
	subsystems := v1Subsystems()
	if len(subsystems) != 3 {
		c.why = "the cgroup v1 memory, pids and cpu hierarchies are not all mounted"
		return c
	}
	// Proves that children may be made: one made and removed now.
	probe, err := cgroup1.New(cgroup1.NestedPath(filepath.Join(stagesDir, c.server)), &specs.LinuxResources{}, cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) { return subsystems, nil }))
	if err != nil {
		c.why = "the server may not make cgroup v1 children: " + err.Error()
		return c
	}
	_ = probe.Delete()
	c.mode, c.v1 = "cgroup v1", subsystems
	c.sweep()
	return c
}

// v1Subsystems returns the memory, pids and cpu hierarchies that are
// mounted.
func v1Subsystems() []cgroup1.Subsystem {
	var out []cgroup1.Subsystem
	for _, s := range []cgroup1.Subsystem{cgroup1.NewMemory(mountpoint), cgroup1.NewPids(mountpoint), cgroup1.NewCpu(mountpoint)} {
		if _, err := os.Stat(filepath.Join(mountpoint, string(s.Name()))); err == nil {
			out = append(out, s)
		}
	}
	return out
}

// delegateV2 makes the server's own cgroup a parent of stage cgroups:
// it moves the server into a leaf of its own and enables the memory,
// pids and cpu controllers below. It returns the server's cgroup.
func delegateV2() (string, error) {
	own, err := cgroup2.NestedGroupPath("")
	if err != nil {
		return "", err
	}
	base := filepath.Join(mountpoint, own)
	avail, err := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	if err != nil {
		return "", err
	}
	for _, want := range []string{"memory", "pids", "cpu"} {
		if !strings.Contains(" "+strings.TrimSpace(string(avail))+" ", " "+want+" ") {
			return "", fmt.Errorf("the %s controller is not delegated to %s", want, own)
		}
	}
	server, err := cgroup2.NewManager(mountpoint, filepath.Join(own, serverDir), &cgroup2.Resources{})
	if err != nil {
		return "", err
	}
	if err := server.AddProc(uint64(os.Getpid())); err != nil {
		return "", err
	}
	for _, dir := range []string{own, filepath.Join(own, stagesDir)} {
		if err := os.MkdirAll(filepath.Join(mountpoint, dir), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(mountpoint, dir, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0); err != nil {
			return "", err
		}
	}
	return own, nil
}

// stagesDirs are the terrarun-stages directories of this process's
// cgroups: one for cgroup v2, one per hierarchy for v1.
func (c *Controller) stagesDirs() []string {
	if c.mode == "cgroup v2" {
		return []string{filepath.Join(mountpoint, c.v2Base, stagesDir)}
	}
	var out []string
	for _, s := range c.v1 {
		if p, err := cgroup1.NestedPath(stagesDir)(s.Name()); err == nil {
			out = append(out, filepath.Join(mountpoint, string(s.Name()), p))
		}
	}
	return out
}

// sweep removes the stage cgroups of servers that died (killed, their
// stages with them) and left them behind: those of a "<pid>.<random>"
// directory whose process is gone. A directory that still holds a process
// stays.
func (c *Controller) sweep() {
	for _, dir := range c.stagesDirs() {
		servers, _ := os.ReadDir(dir)
		for _, srv := range servers {
			pid, _, ok := strings.Cut(srv.Name(), ".")
			n, err := strconv.Atoi(pid)
			if !srv.IsDir() || !ok || err != nil || n == os.Getpid() {
				continue
			}
			if err := syscall.Kill(n, 0); err == nil || errors.Is(err, syscall.EPERM) {
				continue // alive
			}
			stages, _ := os.ReadDir(filepath.Join(dir, srv.Name()))
			for _, st := range stages {
				if st.IsDir() {
					_ = os.Remove(filepath.Join(dir, srv.Name(), st.Name()))
				}
			}
			_ = os.Remove(filepath.Join(dir, srv.Name()))
		}
	}
}

// Enforcement says how the limits are enforced on this host, for the
// server's log when it starts.
func (c *Controller) Enforcement() string {
	var memory, processes, cpu string
	if c.limits.Memory > 0 {
		memory = fmt.Sprintf("memory %d bytes", c.limits.Memory)
	}
	if c.limits.Processes > 0 {
		processes = fmt.Sprintf("%d processes", c.limits.Processes)
	}
	if c.limits.CPUMillis > 0 {
		cpu = fmt.Sprintf("%dm CPU", c.limits.CPUMillis)
	}
	bounds := strings.Join(nonEmpty(memory, processes, cpu), ", ")
	switch {
	case bounds == "":
		return "stages have no memory, process or CPU limit (none is set)"
	case c.mode == "":
		return fmt.Sprintf("stages are NOT bounded to %s: %s; run the server as root on a host with cgroup v1, or in a delegated cgroup v2 (systemd Delegate=yes)", bounds, c.why)
	}
	return fmt.Sprintf("each stage is bounded to %s in a cgroup of its own (%s)", bounds, c.mode)
}

func nonEmpty(s ...string) []string {
	var out []string
	for _, v := range s {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// Group is one stage's cgroups.
type Group struct {
	c    *Controller
	dirs map[string]string // controller name -> absolute directory
	v1   cgroup1.Cgroup
	v2   *cgroup2.Manager
}

// NewGroup makes the cgroups of the stage id with the limits; nil when the
// host gives none.
func (c *Controller) NewGroup(id string) (*Group, error) {
	if c.mode == "" {
		return nil, nil
	}
	res := &specs.LinuxResources{}
	if c.limits.Memory > 0 {
		res.Memory = &specs.LinuxMemory{Limit: &c.limits.Memory}
	}
	if c.limits.Processes > 0 {
		res.Pids = &specs.LinuxPids{Limit: &c.limits.Processes}
	}
	if c.limits.CPUMillis > 0 {
		quota, period := c.limits.CPUMillis*100, uint64(100000)
		res.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	g := &Group{c: c, dirs: map[string]string{}}
	rel := filepath.Join(stagesDir, c.server, id)
	if c.mode == "cgroup v2" {
		group := filepath.Join(c.v2Base, rel)
		serverDir := filepath.Join(mountpoint, c.v2Base, stagesDir, c.server)
		if err := os.MkdirAll(serverDir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(serverDir, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0); err != nil {
			return nil, fmt.Errorf("enabling the memory, pids and cpu controllers in %s: %w", serverDir, err)
		}
		m, err := cgroup2.NewManager(mountpoint, group, cgroup2.ToResources(res))
		if err != nil {
			return nil, fmt.Errorf("making the stage's cgroup %s: %w", group, err)
		}
		g.v2 = m
		for _, name := range []string{"memory", "pids", "cpu"} {
			g.dirs[name] = filepath.Join(mountpoint, group)
		}
		return g, nil
	}
	path := cgroup1.NestedPath(rel)
	cg, err := cgroup1.New(path, res, cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) { return c.v1, nil }))
	if err != nil {
		return nil, fmt.Errorf("making the stage's cgroups %s: %w", rel, err)
	}
	g.v1 = cg
	for _, s := range c.v1 {
		p, err := path(s.Name())
		if err != nil {
			_ = cg.Delete()
			return nil, err
		}
		g.dirs[string(s.Name())] = filepath.Join(mountpoint, string(s.Name()), p)
	}
	return g, nil
}

// ProcsFiles are the cgroup.procs files a process writes "0" to, to join
// the group.
func (g *Group) ProcsFiles() []string {
	seen := map[string]bool{}
	var out []string
	for _, name := range []string{"memory", "pids", "cpu"} {
		f := filepath.Join(g.dirs[name], "cgroup.procs")
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

// Add moves process pid into the group.
func (g *Group) Add(pid int) error {
	if g.v2 != nil {
		return g.v2.AddProc(uint64(pid))
	}
	return g.v1.AddProc(uint64(pid))
}

// Exceeded names each limit the stage reached, with its flag: the memory
// limit (the kernel killed a process of the stage at it) and the process
// limit (a fork or a thread was refused). CPU is throttled, never reached.
func (g *Group) Exceeded() []string {
	var out []string
	// A process killed for the memory limit: memory.events (v2) and
	// memory.oom_control (v1) count them.
	events := "memory.events"
	if g.v2 == nil {
		events = "memory.oom_control"
	}
	if keyValues(filepath.Join(g.dirs["memory"], events))["oom_kill"] > 0 {
		out = append(out, fmt.Sprintf("its memory limit of %d bytes (%s)", g.c.limits.Memory, g.c.flags.Memory))
	}
	if keyValues(filepath.Join(g.dirs["pids"], "pids.events"))["max"] > 0 {
		out = append(out, fmt.Sprintf("its limit of %d processes and threads (%s)", g.c.limits.Processes, g.c.flags.Processes))
	}
	return out
}

// Delete removes the group; whatever is left in it is killed first, and
// given up to deleteWait to be gone.
func (g *Group) Delete() error {
	var err error
	for deadline := time.Now().Add(deleteWait); ; time.Sleep(50 * time.Millisecond) {
		if g.v2 != nil {
			_ = g.v2.Kill()
			err = g.v2.Delete()
		} else {
			if procs, perr := g.v1.Processes(cgroup1.Pids, true); perr == nil {
				for _, p := range procs {
					_ = syscall.Kill(p.Pid, syscall.SIGKILL)
				}
			}
			if err = g.v1.Delete(); errors.Is(err, cgroup1.ErrCgroupDeleted) {
				err = nil
			}
		}
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// deleteWait bounds how long Delete waits for the killed processes of a
// group to be gone.
const deleteWait = 5 * time.Second

// keyValues reads a flat keyed file of the cgroup fs ("max 3").
func keyValues(path string) map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok {
			out[k], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return out
}
