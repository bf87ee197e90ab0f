package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// readyTimeout bounds how long a server may take to become ready.
const readyTimeout = 90 * time.Second

// ServerOptions say how to start a standalone server.
type ServerOptions struct {
	// Binary is terrarun-apiserver.
	Binary string
	// DataDir is its --data-dir.
	DataDir string
	// Args are more flags, after --standalone, --data-dir and --secure-port.
	Args []string
	// Env is its environment; nil is the test's.
	Env []string
	// Output receives its stdout and stderr; nil discards them.
	Output io.Writer
}

// Server is terrarun-apiserver --standalone, running as a child process.
type Server struct {
	DataDir    string
	Kubeconfig string
	// Config is the admin user's, from the kubeconfig the server wrote.
	Config *rest.Config
	Cmd    *exec.Cmd

	exited chan struct{}
	err    error // the process's end, once exited is closed
	// ended says that Stop or Kill ended the server.
	ended bool
}

// StartServer starts a standalone server on a free port and waits until it
// is ready; on failure it kills it.
func StartServer(o ServerOptions) (*Server, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	s := &Server{DataDir: o.DataDir, Kubeconfig: filepath.Join(o.DataDir, "admin.kubeconfig"), exited: make(chan struct{})}
	// A test's server stops at once when the test ends, whatever it left
	// applying; a test of the wait for applies sets its own grace (o.Args
	// come last, and win).
	args := append([]string{"--standalone", "--data-dir", o.DataDir, "--secure-port", strconv.Itoa(port), "--shutdown-apply-grace-period=0"}, o.Args...)
	s.Cmd = exec.Command(o.Binary, args...)
	s.Cmd.Env = o.Env
	s.Cmd.Stdout, s.Cmd.Stderr = o.Output, o.Output
	if err := s.Cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		s.err = s.Cmd.Wait()
		close(s.exited)
	}()
	if s.Config, err = WaitReady(s.Kubeconfig, s.exited); err != nil {
		_ = s.Kill()
		return nil, err
	}
	return s, nil
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.Cmd.Process.Pid }

// Stop sends SIGTERM and waits up to timeout for a graceful exit. It is an
// error when the server had ended by itself before; stopping it again does
// nothing.
func (s *Server) Stop(timeout time.Duration) error {
	select {
	case <-s.exited:
		if s.ended {
			return nil
		}
		return fmt.Errorf("terrarun-apiserver had exited before it was stopped: %v", s.err)
	default:
	}
	s.ended = true
	if err := s.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("signalling terrarun-apiserver: %w", err)
	}
	select {
	case <-s.exited:
		if s.err != nil {
			return fmt.Errorf("terrarun-apiserver exited with %v after SIGTERM", s.err)
		}
		return nil
	case <-time.After(timeout):
		_ = s.Kill()
		return fmt.Errorf("terrarun-apiserver did not stop within %s of SIGTERM", timeout)
	}
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it.
func (s *Server) Kill() error {
	s.ended = true
	select {
	case <-s.exited:
		return nil
	default:
	}
	err := s.Cmd.Process.Kill()
	<-s.exited
	return err
}

// WaitReady waits until kubeconfig exists and the server it names answers
// /readyz with 200, for at most readyTimeout; it fails early once exited is
// closed (the server ended).
func WaitReady(kubeconfig string, exited <-chan struct{}) (*rest.Config, error) {
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return nil, errors.New("terrarun-apiserver exited before it was ready")
		case <-time.After(100 * time.Millisecond):
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			continue
		}
		if ready(cfg) {
			return cfg, nil
		}
	}
	return nil, fmt.Errorf("terrarun-apiserver was not ready within %s", readyTimeout)
}

func ready(cfg *rest.Config) bool {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
