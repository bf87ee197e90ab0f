package runner

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// groupPollInterval is how often watchChildGroups looks for terraform.
const groupPollInterval = 200 * time.Millisecond

// watchChildGroups watches, while a terraform command runs in dir, for the
// children of this process that work in dir and lead their own process
// group (tfexec starts terraform so). The returned function ends the watch
// and, when ctx was canceled, kills what is left of those groups: after
// terraform has exited, the processes its provisioners abandoned. Matching
// on the working directory leaves alone the children of other runs in the
// same process.
func watchChildGroups(ctx context.Context, dir string) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	groups := map[int]bool{}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		realDir = dir
	}
	look := func() {
		for _, pid := range childGroupLeaders() {
			if cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd"); err == nil && (cwd == realDir || cwd == dir) {
				groups[pid] = true
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(groupPollInterval)
		defer t.Stop()
		look()
		for {
			select {
			case <-ctx.Done():
				look()
				return
			case <-done:
				return
			case <-t.C:
				look()
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		if ctx.Err() == nil {
			return
		}
		for pgid := range groups {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
}

// childGroupLeaders returns the pids of this process's children that lead
// their own process group.
func childGroupLeaders() []int {
	self := os.Getpid()
	var out []int
	for _, pid := range children(self) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		ppid, pgrp, ok := parseStat(string(b))
		if ok && ppid == self && pgrp == pid {
			out = append(out, pid)
		}
	}
	return out
}

// children returns the pids of the children of pid, from
// /proc/PID/task/*/children when the kernel has it, else from a scan of /proc.
func children(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/[0-9]*/children")
	if len(tasks) > 0 {
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, s := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(s); err == nil {
					out = append(out, c)
				}
			}
		}
		return out
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if ppid, _, ok := parseStat(string(b)); ok && ppid == pid {
			if c, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// parseStat returns the parent pid and the process group of a
// /proc/PID/stat line.
func parseStat(s string) (ppid, pgrp int, ok bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 3 {
		return 0, 0, false
	}
	ppid, err1 := strconv.Atoi(fields[1])
	pgrp, err2 := strconv.Atoi(fields[2])
	return ppid, pgrp, err1 == nil && err2 == nil
}
