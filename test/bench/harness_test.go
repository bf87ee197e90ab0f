// Package bench holds `make bench`: benchmarks of terrarun-apiserver in
// standalone mode (embedded etcd, self-signed certificates), run as the real
// binary and driven over HTTPS on 127.0.0.1 through the generated clientset.
//
// The API benchmarks (bench_test.go, this harness) measure create, get, list
// and watch latency and the server's memory per stored run. They share one
// server, started lazily by the first of them that runs, on a fresh temporary
// data directory, and stopped with SIGTERM by TestMain when the benchmarks
// are over, so plain `go test ./...` (no -bench) neither builds nor starts
// anything. The benchmarks of the run machinery (runs_bench_test.go) start
// servers of their own.
//
// The binary is $TERRARUN_APISERVER (which `make bench` sets to bin/); without
// it the harness builds one with `go build` into a temporary directory. The
// API server runs with --run-controller=false: the API only, runs stay
// Pending. With the controller every created run would be planned by a real
// engine, and the benchmarks would measure that. $TERRARUN_BENCH_SERVER_ARGS,
// split on white space, is appended to its command line.
//
// Every API benchmark takes a fixed number of samples (see the constants in
// bench_test.go) rather than relying on b.N, so `-benchtime 1x`, the default
// of `make bench`, still yields meaningful percentiles. A larger -benchtime Nx
// raises the number of samples to N when N is larger. Latencies are reported
// with b.ReportMetric as p50-ms and p99-ms (nearest-rank percentiles of the
// samples), and ns/op is set to the mean latency of one sampled operation.
// The load average is logged at the start and end of each (the machine may be
// shared) and the 1-minute load at the end reported as load1-end.
//
// The client has no client-side rate limit (rest.Config.QPS = -1), so the
// figures are the server's, not client-go's default 5 QPS / 10 burst.
package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// server is the standalone terrarun-apiserver under benchmark, with its
// output in logPath.
type server struct {
	*harness.Server
	Pid     int
	Client  versioned.Interface
	logPath string
}

var (
	srvOnce sync.Once
	srv     *server
	srvErr  error
	// cleanups run in TestMain after the benchmarks.
	cleanups []func()
)

func TestMain(m *testing.M) {
	code := m.Run()
	if srv != nil {
		if err := srv.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			srv.dumpLog()
			if code == 0 {
				code = 1
			}
		}
	}
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	os.Exit(code)
}

// getServer returns the shared server, starting it on first use.
func getServer(b *testing.B) *server {
	b.Helper()
	srvOnce.Do(func() {
		bin, err := binaries()
		if err != nil {
			srvErr = err
			return
		}
		// The run controller would plan every run the benchmarks create, with
		// a real engine, and measure that instead of the API.
		// CBOR is served besides JSON, for BenchmarkListFormats.
		args := append([]string{"--run-controller=false", "--feature-gates=CBORServingAndStorage=true"}, strings.Fields(os.Getenv("TERRARUN_BENCH_SERVER_ARGS"))...)
		srv, srvErr = startServer(filepath.Join(bin, "terrarun-apiserver"), args, nil)
	})
	if srvErr != nil {
		b.Fatalf("starting terrarun-apiserver: %v", srvErr)
	}
	return srv
}

var (
	binOnce sync.Once
	binDir  string // holds terrarun-apiserver and terrarun-executor
	binErr  error
)

// binaries returns the directory of terrarun-apiserver and terrarun-executor
// (harness.Binaries), built once for all benchmarks.
func binaries() (string, error) {
	binOnce.Do(func() {
		var cleanup func()
		if binDir, cleanup, binErr = harness.Binaries(); binErr == nil {
			cleanups = append(cleanups, cleanup)
		}
	})
	return binDir, binErr
}

// startServer starts bin --standalone on a fresh data directory, with args
// and the environment env (nil: the benchmark's), and a client without
// client-side rate limits.
func startServer(bin string, args, env []string) (*server, error) {
	dataDir, err := os.MkdirTemp("", "terrarun-bench-data-")
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, func() { _ = os.RemoveAll(dataDir) })
	logPath := filepath.Join(dataDir, "server.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child keeps its own descriptor
	fmt.Fprintf(os.Stderr, "bench: %s %s\n", bin, strings.Join(args, " "))
	hs, err := harness.StartServer(harness.ServerOptions{Binary: bin, DataDir: dataDir, Args: args, Env: env, Output: logFile})
	s := &server{Server: hs, logPath: logPath}
	if err != nil {
		s.dumpLog()
		return nil, err
	}
	s.Pid = hs.Pid()
	// No client-side throttling: QPS < 0 disables client-go's token bucket.
	s.Config.QPS, s.Config.Burst = -1, 0
	if s.Client, err = versioned.NewForConfig(s.Config); err != nil {
		_ = s.stop()
		return nil, err
	}
	return s, nil
}

// stop sends SIGTERM and waits for a graceful exit.
func (s *server) stop() error { return s.Stop(90 * time.Second) }

// dumpLog prints the tail of the server's output to stderr and keeps a copy
// of all of it outside the data directory, which TestMain removes.
func (s *server) dumpLog() {
	out, err := os.ReadFile(s.logPath)
	if err != nil {
		return
	}
	if f, err := os.CreateTemp("", "terrarun-bench-server-*.log"); err == nil {
		_, _ = f.Write(out)
		_ = f.Close()
		fmt.Fprintf(os.Stderr, "terrarun-apiserver output kept in %s\n", f.Name())
	}
	const tail = 16 << 10
	if len(out) > tail {
		out = out[len(out)-tail:]
	}
	fmt.Fprintf(os.Stderr, "terrarun-apiserver output (tail):\n%s\n", out)
}

// etcdDBSize is the size in MiB of embedded etcd's bbolt database file (it
// grows with the stored objects and their history until compaction and
// defragmentation).
func (s *server) etcdDBSize() (float64, error) {
	fi, err := os.Stat(filepath.Join(s.DataDir, "etcd", "member", "snap", "db"))
	if err != nil {
		return 0, err
	}
	return float64(fi.Size()) / (1 << 20), nil
}
