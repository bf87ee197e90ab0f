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
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
)

// server is the standalone terrarun-apiserver under benchmark.
type server struct {
	Pid    int
	Config *rest.Config
	Client versioned.Interface

	cmd     *exec.Cmd
	exited  chan error
	dataDir string
	logPath string
}

var (
	srvOnce sync.Once
	srv     *server
	srvErr  error
	// tempDirs are removed by TestMain after the benchmarks.
	tempDirs []string
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
	for _, d := range tempDirs {
		_ = os.RemoveAll(d)
	}
	os.Exit(code)
}

// getServer returns the shared server, starting it on first use.
func getServer(b *testing.B) *server {
	b.Helper()
	srvOnce.Do(func() { srv, srvErr = startServer() })
	if srvErr != nil {
		b.Fatalf("starting terrarun-apiserver: %v", srvErr)
	}
	return srv
}

func startServer() (*server, error) {
	bin := os.Getenv("TERRARUN_APISERVER")
	if bin == "" {
		dir, err := os.MkdirTemp("", "terrarun-bench-bin-")
		if err != nil {
			return nil, err
		}
		tempDirs = append(tempDirs, dir)
		bin = filepath.Join(dir, "terrarun-apiserver")
		build := exec.Command("go", "build", "-o", bin, "github.com/terrarun/terrarun/cmd/terrarun-apiserver")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return nil, fmt.Errorf("building terrarun-apiserver: %w", err)
		}
	}

	dataDir, err := os.MkdirTemp("", "terrarun-bench-data-")
	if err != nil {
		return nil, err
	}
	tempDirs = append(tempDirs, dataDir)
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dataDir, "server.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child keeps its own descriptor

	s := &server{exited: make(chan error, 1), dataDir: dataDir, logPath: logPath}
	args := []string{"--standalone", "--data-dir", dataDir, "--secure-port", strconv.Itoa(port)}
	// The run controller would plan every run the benchmarks create, with a
	// real engine, and measure that instead of the API. Binaries from before
	// --run-controller have no controller.
	if help, _ := exec.Command(bin, "--help").CombinedOutput(); bytes.Contains(help, []byte("--run-controller")) {
		args = append(args, "--run-controller=false")
	}
	args = append(args, strings.Fields(os.Getenv("TERRARUN_BENCH_SERVER_ARGS"))...)
	fmt.Fprintf(os.Stderr, "bench: %s %s\n", bin, strings.Join(args, " "))
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	s.Pid = s.cmd.Process.Pid
	go func() { s.exited <- s.cmd.Wait() }()

	cfg, err := waitReady(filepath.Join(dataDir, "admin.kubeconfig"), s.exited)
	if err != nil {
		_ = s.cmd.Process.Kill()
		s.dumpLog()
		return nil, err
	}
	// No client-side throttling: QPS < 0 disables client-go's token bucket.
	cfg.QPS = -1
	cfg.Burst = 0
	s.Config = cfg
	if s.Client, err = versioned.NewForConfig(cfg); err != nil {
		_ = s.stop()
		return nil, err
	}
	return s, nil
}

// waitReady waits until the kubeconfig exists and the server it names answers
// /readyz with 200, or fails if the server exits first.
func waitReady(kubeconfig string, exited <-chan error) (*rest.Config, error) {
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("server exited before it was ready: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			continue
		}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/readyz", nil)
		if err != nil {
			cancel()
			return nil, err
		}
		resp, err := hc.Do(req)
		cancel()
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return cfg, nil
		}
	}
	return nil, errors.New("terrarun-apiserver was not ready within 90s")
}

// stop sends SIGTERM and waits for a graceful exit.
func (s *server) stop() error {
	select {
	case err := <-s.exited:
		return fmt.Errorf("terrarun-apiserver exited before the end of the benchmarks: %v", err)
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("signalling terrarun-apiserver: %w", err)
	}
	select {
	case err := <-s.exited:
		if err != nil {
			return fmt.Errorf("terrarun-apiserver exited with %v after SIGTERM", err)
		}
		return nil
	case <-time.After(90 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
		return errors.New("terrarun-apiserver did not stop within 90s of SIGTERM")
	}
}

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

// memStatus is the resident set of a process, from /proc/<pid>/status.
type memStatus struct {
	VmRSS, RssAnon, RssFile float64 // MiB
}

// readMem reads VmRSS, RssAnon and RssFile of pid.
func readMem(pid int) (memStatus, error) {
	var m memStatus
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	found := 0
	for _, line := range bytes.Split(data, []byte("\n")) {
		key, val, ok := strings.Cut(string(line), ":")
		if !ok {
			continue
		}
		var dst *float64
		switch key {
		case "VmRSS":
			dst = &m.VmRSS
		case "RssAnon":
			dst = &m.RssAnon
		case "RssFile":
			dst = &m.RssFile
		default:
			continue
		}
		f := strings.Fields(val) // "123456 kB"
		if len(f) != 2 || f[1] != "kB" {
			return m, fmt.Errorf("unexpected %s line %q", key, line)
		}
		kb, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return m, err
		}
		*dst = kb / 1024
		found++
	}
	if found != 3 {
		return m, fmt.Errorf("/proc/%d/status lacks VmRSS, RssAnon or RssFile", pid)
	}
	return m, nil
}

// etcdDBSize is the size in MiB of embedded etcd's bbolt database file (it
// grows with the stored objects and their history until compaction and
// defragmentation).
func (s *server) etcdDBSize() (float64, error) {
	fi, err := os.Stat(filepath.Join(s.dataDir, "etcd", "member", "snap", "db"))
	if err != nil {
		return 0, err
	}
	return float64(fi.Size()) / (1 << 20), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
