// Package integration tests terrarun-apiserver in standalone mode: in-process
// on embedded etcd through the generated clientset, and as the real binary
// driven by the real kubectl.
package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/terrarun/terrarun/pkg/cmd/server"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// apiserverBinary is the terrarun-apiserver binary (harness.Binaries).
// terrarun-executor is beside it.
var apiserverBinary string

// engine is the terraform or tofu binary the runs use (harness.Engine). Its
// directory is put first on PATH, so the executor finds it by its name,
// engineName.
var engine, engineName string

// engines are engine and, where this host has it, the other kind (tofu or
// terraform), for the tests that run both.
var engines []string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, cleanup, err := harness.Binaries()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	apiserverBinary = filepath.Join(dir, "terrarun-apiserver")
	if engine, err = harness.Engine(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	engineName = filepath.Base(engine)
	if engines, err = harness.Engines(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The server, and so its stages, find every engine on PATH.
	for i := len(engines) - 1; i >= 0; i-- {
		os.Setenv("PATH", filepath.Dir(engines[i])+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	return m.Run()
}

// executorBinary is terrarun-executor, beside terrarun-apiserver.
func executorBinary() string {
	return filepath.Join(filepath.Dir(apiserverBinary), "terrarun-executor")
}

// inProcessServer is terrarun-apiserver --standalone running inside the test
// process.
type inProcessServer struct {
	DataDir    string
	Kubeconfig string
	Config     *rest.Config
	Client     versioned.Interface

	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's, once done is closed
}

// startInProcess starts a standalone server on dataDir and waits until it is
// ready. extraArgs are command-line flags, parsed as the binary parses them.
func startInProcess(t *testing.T, dataDir string, extraArgs ...string) *inProcessServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := server.NewOptions(&testWriter{t: t})
	fs := pflag.NewFlagSet("terrarun-apiserver", pflag.ContinueOnError)
	opts.AddFlags(fs)
	args := append([]string{"--standalone", "--data-dir", dataDir, "--secure-port", strconv.Itoa(l.Addr().(*net.TCPAddr).Port), "--shutdown-apply-grace-period=0",
		"--executor-binary", executorBinary()}, extraArgs...)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	opts.Recommended.SecureServing.Listener = l
	opts.Complete(fs)
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	s := &inProcessServer{DataDir: dataDir, Kubeconfig: filepath.Join(dataDir, "admin.kubeconfig"), cancel: cancel, done: make(chan struct{})}
	go func() {
		s.err = opts.Run(ctx)
		close(s.done)
	}()
	t.Cleanup(s.Stop)

	if s.Config, err = harness.WaitReady(s.Kubeconfig, s.done); err != nil {
		t.Fatalf("%v: %v", err, s.err)
	}
	s.Client = versioned.NewForConfigOrDie(s.Config)
	return s
}

// Stop shuts the server down gracefully and waits for it.
func (s *inProcessServer) Stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case <-s.done:
	case <-time.After(90 * time.Second):
		panic("terrarun-apiserver did not stop within 90s")
	}
}

// binaryServer is the real terrarun-apiserver binary in standalone mode.
type binaryServer struct {
	*harness.Server
	output *lockedWriter
}

// startBinary starts the binary on dataDir and waits until it is ready. It
// is stopped when the test ends, and its output logged when the test failed.
func startBinary(t *testing.T, dataDir string, extraArgs ...string) *binaryServer {
	t.Helper()
	return startBinaryFor(t, t, dataDir, extraArgs...)
}

// startBinaryFor is startBinary in a subtest t for a server that outlives
// it: owner, the test that uses it last, stops it.
func startBinaryFor(t, owner *testing.T, dataDir string, extraArgs ...string) *binaryServer {
	t.Helper()
	w := &lockedWriter{w: &bytes.Buffer{}}
	s, err := harness.StartServer(harness.ServerOptions{Binary: apiserverBinary, DataDir: dataDir, Args: extraArgs, Output: w})
	if err != nil {
		t.Fatalf("%v; output:\n%s", err, w.String())
	}
	owner.Cleanup(func() {
		if err := s.Stop(90 * time.Second); err != nil {
			owner.Error(err)
		}
		if owner.Failed() {
			owner.Logf("terrarun-apiserver output:\n%s", w.String())
		}
	})
	return &binaryServer{Server: s, output: w}
}

// kubectl runs the real kubectl binary against kubeconfig.
func kubectl(t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlBinary(t), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mustKubectl runs kubectl and fails the test on error.
func mustKubectl(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	out, err := kubectl(t, kubeconfig, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func kubectlBinary(t *testing.T) string {
	t.Helper()
	if k := os.Getenv("KUBECTL"); k != "" {
		return k
	}
	k, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl is not on PATH; set KUBECTL to a kubectl binary")
	}
	return k
}

type testWriter struct {
	t  *testing.T
	mu sync.Mutex
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Logf("%s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}
