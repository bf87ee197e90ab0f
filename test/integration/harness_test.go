// Package integration tests terrarun-apiserver in standalone mode: in-process
// on embedded etcd through the generated clientset, and as the real binary
// driven by the real kubectl.
package integration

import (
	"bytes"
	"context"
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

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/terrarun/terrarun/pkg/cmd/server"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
)

// apiserverBinary is the terrarun-apiserver binary: $TERRARUN_APISERVER, or
// one built by TestMain. terrarun-executor is beside it.
var apiserverBinary string

// engine is the terraform or tofu binary the runs use: $TERRARUN_ENGINE, or
// tofu or terraform on PATH. Its directory is put first on PATH, so the
// executor finds it by its name, engineName.
var engine, engineName string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	apiserverBinary = os.Getenv("TERRARUN_APISERVER")
	if apiserverBinary == "" {
		dir, err := os.MkdirTemp("", "terrarun-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		apiserverBinary = filepath.Join(dir, "terrarun-apiserver")
		build := exec.Command("go", "build", "-o", dir+"/", "github.com/terrarun/terrarun/cmd/...")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building terrarun:", err)
			return 1
		}
	}
	engine = os.Getenv("TERRARUN_ENGINE")
	if engine == "" {
		for _, name := range []string{"tofu", "terraform"} {
			if p, err := exec.LookPath(name); err == nil {
				engine = p
				break
			}
		}
	}
	if engine == "" {
		fmt.Fprintln(os.Stderr, "no terraform or tofu found: run `make engine` (it builds OpenTofu) and set TERRARUN_ENGINE, or put one on PATH")
		return 1
	}
	engineName = filepath.Base(engine)
	os.Setenv("PATH", filepath.Dir(engine)+string(os.PathListSeparator)+os.Getenv("PATH"))
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
	done   chan error
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
	args := append([]string{"--standalone", "--data-dir", dataDir, "--secure-port", strconv.Itoa(l.Addr().(*net.TCPAddr).Port),
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
	s := &inProcessServer{DataDir: dataDir, Kubeconfig: filepath.Join(dataDir, "admin.kubeconfig"), cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- opts.Run(ctx) }()
	t.Cleanup(s.Stop)

	s.Config = waitReady(t, s.Kubeconfig, s.done)
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

// waitReady waits until the kubeconfig exists and the server it names answers
// /readyz, failing early if exited reports that the server stopped.
func waitReady(t *testing.T, kubeconfig string, exited <-chan error) *rest.Config {
	t.Helper()
	var cfg *rest.Config
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-exited:
			return false, fmt.Errorf("server exited before it was ready: %v", err)
		default:
		}
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return false, nil
		}
		hc, err := rest.HTTPClientFor(c)
		if err != nil {
			return false, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Host+"/readyz", nil)
		if err != nil {
			return false, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, nil
		}
		cfg = c
		return true, nil
	})
	if err != nil {
		t.Fatalf("waiting for terrarun-apiserver: %v", err)
	}
	return cfg
}

// binaryServer is the real terrarun-apiserver binary in standalone mode.
type binaryServer struct {
	DataDir    string
	Kubeconfig string
	Config     *rest.Config

	cmd    *exec.Cmd
	output *bytes.Buffer
	exited chan error
}

// startBinary starts the binary on dataDir and waits until it is ready.
func startBinary(t *testing.T, dataDir string, extraArgs ...string) *binaryServer {
	t.Helper()
	port := freePort(t)
	args := append([]string{"--standalone", "--data-dir", dataDir, "--secure-port", strconv.Itoa(port)}, extraArgs...)
	s := &binaryServer{DataDir: dataDir, Kubeconfig: filepath.Join(dataDir, "admin.kubeconfig"), output: &bytes.Buffer{}, exited: make(chan error, 1)}
	s.cmd = exec.Command(apiserverBinary, args...)
	w := &lockedWriter{w: s.output}
	s.cmd.Stdout, s.cmd.Stderr = w, w
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.exited <- s.cmd.Wait() }()
	t.Cleanup(func() {
		s.Stop(t)
		if t.Failed() {
			t.Logf("terrarun-apiserver output:\n%s", w.String())
		}
	})
	s.Config = waitReady(t, s.Kubeconfig, s.exited)
	return s
}

// Stop sends SIGTERM and waits for a graceful exit.
func (s *binaryServer) Stop(t *testing.T) {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.exited:
		if err != nil {
			t.Errorf("terrarun-apiserver exited with %v after SIGTERM", err)
		}
	case <-time.After(90 * time.Second):
		_ = s.cmd.Process.Kill()
		t.Errorf("terrarun-apiserver did not stop within 90s of SIGTERM")
	}
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

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// repoPath returns a path relative to the repository root.
func repoPath(parts ...string) string {
	return filepath.Join(append([]string{"..", ".."}, parts...)...)
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

func clientcmdConfig(path string) (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", path)
}
