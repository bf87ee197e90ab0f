// Package harness is what the integration, end-to-end and benchmark suites
// share: the repository's paths, the binaries and the engine under test, free
// ports, a standalone terrarun-apiserver as a child process and its
// readiness, waiting for a run's phase, following a log with kubectl, and a
// stage's executor token and requests made with it; for the suites that run
// a real kube-apiserver, its PKI and flags and its processes (kube.go,
// proc.go); for the benchmarks, concurrent operations, percentiles, timed
// GETs, a process's resident set and the load average (procfs.go).
//
// Helpers return errors rather than failing a test, so that TestMain and
// benchmark setup can use them too.
package harness

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// RepoPath returns the path of parts under the repository's root.
func RepoPath(parts ...string) string {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	return filepath.Join(append([]string{root}, parts...)...)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Binaries returns the directory that holds terrarun-apiserver and
// terrarun-executor: that of $TERRARUN_APISERVER (which the Makefile sets to
// bin/), or a temporary directory they are built into, which cleanup
// removes.
func Binaries() (dir string, cleanup func(), err error) {
	if bin := os.Getenv("TERRARUN_APISERVER"); bin != "" {
		dir = filepath.Dir(bin)
		if _, err := os.Stat(filepath.Join(dir, "terrarun-executor")); err != nil {
			return "", nil, fmt.Errorf("terrarun-executor is not beside $TERRARUN_APISERVER: %w", err)
		}
		return dir, func() {}, nil
	}
	dir, err = os.MkdirTemp("", "terrarun-bin-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/terrarun/terrarun/cmd/...")
	build.Dir = RepoPath()
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("building terrarun: %w", err)
	}
	return dir, cleanup, nil
}

// Engine returns the absolute path of the engine the runs use:
// $TERRARUN_ENGINE (a path, or a name on PATH), else tofu or terraform on
// PATH. Without one it fails: `make engine` finds or builds one.
func Engine() (string, error) {
	if e := os.Getenv("TERRARUN_ENGINE"); e != "" {
		p, err := exec.LookPath(e)
		if err != nil {
			return "", fmt.Errorf("TERRARUN_ENGINE=%s: %w", e, err)
		}
		return filepath.Abs(p)
	}
	for _, name := range []string{"tofu", "terraform"} {
		if p, err := exec.LookPath(name); err == nil {
			return filepath.Abs(p)
		}
	}
	return "", errors.New("no terraform or tofu found: run `make engine` (it builds OpenTofu) and set TERRARUN_ENGINE, or put one on PATH")
}

// Poll calls ok every interval until it returns true, and fails with what
// once timeout has passed.
func Poll(ctx context.Context, interval, timeout time.Duration, what string, ok func(context.Context) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if ok(ctx) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		case <-time.After(interval):
		}
	}
}

// Concurrently calls op(ctx, i) for every i in [0, n) from `workers`
// goroutines, and returns the latency of each call and the wall time of
// all. The first error stops every worker and is returned.
func Concurrently(ctx context.Context, n, workers int, op func(ctx context.Context, i int) error) ([]time.Duration, time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				err := op(ctx, i)
				lat[i] = time.Since(t0)
				if err != nil {
					errs <- err
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return nil, 0, err
	}
	return lat, elapsed, ctx.Err()
}

// Percentile is the nearest-rank percentile p (0 < p <= 1) of sorted.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// BenchTF is the inline configuration of every run that the API benchmarks
// store: 191 bytes of HCL.
const BenchTF = `resource "terraform_data" "bench" {
  input = {
    team    = "platform"
    purpose = "terrarun-apiserver benchmark"
    note    = "an inline configuration of about two hundred bytes"
  }
}
`
