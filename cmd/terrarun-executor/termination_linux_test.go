package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// asInitEnv makes TestLeftoverProcess, re-executed in a new PID namespace,
// play the executor as that namespace's PID 1.
const asInitEnv = "TERRARUN_TEST_AS_INIT"

// TestLeftoverProcess: a process the stage left behind, which rewrites the
// termination log in a loop, does not outlive the executor's own message.
// The executor is PID 1 of a new PID namespace (and user namespace, so that
// no privilege is needed), as in a Job's pod; the test skips where the host
// allows no such namespace.
func TestLeftoverProcess(t *testing.T) {
	if os.Getenv(asInitEnv) == "1" {
		playInit(t)
		return
	}
	log := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(log, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeftoverProcess$", "-test.v")
	cmd.Env = append(os.Environ(), asInitEnv+"=1", "TERRARUN_TEST_TERMINATION_LOG="+log)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}},
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		// Root is never refused the namespaces (make test, CI): there any
		// error is a failure. Only an unprivileged user on a host that
		// forbids unprivileged user namespaces skips, and is told so.
		if os.Geteuid() == 0 || !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOSPC) {
			t.Fatal(err)
		}
		t.Skipf("this host forbids unprivileged user namespaces (%v), and this test needs one to run the executor as PID 1; run it as root, as make test does", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if msg, err := os.ReadFile(log); err != nil || string(msg) != "stage plan attempt 1 succeeded" {
		t.Errorf("termination message %q (%v), not the executor's own\n%s", msg, err, out.String())
	}
}

// playInit is the executor's end as PID 1: a process of the stage, in a
// session of its own and orphaned, rewrites the termination log in a loop
// when the executor writes its message, and the container takes a while to
// end after that.
func playInit(t *testing.T) {
	if os.Getpid() != 1 {
		t.Fatalf("pid %d, not 1", os.Getpid())
	}
	terminationLog = os.Getenv("TERRARUN_TEST_TERMINATION_LOG")
	leftover := exec.Command("sh", "-c", `(while :; do echo planted > "$0"; done) &`, terminationLog)
	leftover.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := leftover.Run(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for b, _ := os.ReadFile(terminationLog); string(b) != "planted\n"; b, _ = os.ReadFile(terminationLog) {
		if time.Now().After(deadline) {
			t.Fatal("the leftover process did not write")
		}
		time.Sleep(10 * time.Millisecond)
	}
	terminationMessage("stage plan attempt 1 succeeded")
	time.Sleep(300 * time.Millisecond)
}
