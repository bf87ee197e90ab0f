package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestTerminationMessageKillsOthersAsInit: only as PID 1 does the executor
// kill the other processes (as any other pid, kill(-1) would reach all of
// its user's processes, a test runner's included), and it does so before it
// writes its message.
func TestTerminationMessageKillsOthersAsInit(t *testing.T) {
	terminationLog = filepath.Join(t.TempDir(), "termination-log")
	t.Cleanup(func() {
		terminationLog, getpid, killOthers = "/dev/termination-log", os.Getpid, killNamespace
	})
	for _, tc := range []struct {
		pid        int
		wantKilled bool
	}{{pid: 4242}, {pid: 1, wantKilled: true}} {
		if err := os.WriteFile(terminationLog, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		killed := false
		getpid = func() int { return tc.pid }
		killOthers = func() {
			killed = true
			// The last write of a process killed now.
			if err := os.WriteFile(terminationLog, []byte("planted"), 0o600); err != nil {
				t.Error(err)
			}
		}
		terminationMessage("stage plan attempt 1 succeeded")
		if killed != tc.wantKilled {
			t.Errorf("pid %d: the other processes killed: %t, want %t", tc.pid, killed, tc.wantKilled)
		}
		if msg, err := os.ReadFile(terminationLog); err != nil || string(msg) != "stage plan attempt 1 succeeded" {
			t.Errorf("pid %d: termination message %q (%v)", tc.pid, msg, err)
		}
	}
}
