// Package objectstoretest starts a real S3-compatible server for tests, as
// net/http/httptest starts an HTTP server: versitygw, built by
// hack/objectstore.sh, whose path $TERRARUN_OBJECTSTORE names, serving a
// bucket from a directory of its posix backend, so that a test can read and
// tamper with every object as a file.
package objectstoretest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is a versitygw process serving one bucket over http on loopback.
type Server struct {
	// Endpoint is its URL, http://127.0.0.1:<port>.
	Endpoint string
	// Bucket is the bucket it serves, a directory of Root.
	Bucket string
	// Root is its posix backend's directory.
	Root string
	// AccessKey and SecretKey are its root user's credentials.
	AccessKey, SecretKey string

	t      testing.TB
	binary string
	// meta is the posix backend's sidecar directory of metadata.
	meta   string
	addr   string
	mu     sync.Mutex
	cmd    *exec.Cmd
	output *bytes.Buffer
}

// Start starts a server on loopback with an empty bucket, stopped when the
// test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartOn(t, "127.0.0.1")
}

// StartOn is Start on a free port of the address host, for clients in other
// network namespaces (an e2e cluster's pods).
func StartOn(t testing.TB, host string) *Server {
	t.Helper()
	binary := os.Getenv("TERRARUN_OBJECTSTORE")
	if binary == "" {
		t.Fatal("TERRARUN_OBJECTSTORE is not set: run `make unit`, or set it to a versitygw binary (hack/objectstore.sh prints one)")
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &Server{Endpoint: "http://" + addr, Bucket: "terrarun", Root: t.TempDir(), AccessKey: "terrarun-test", SecretKey: "terrarun-test-secret",
		t: t, binary: binary, addr: addr, meta: t.TempDir()}
	if err := os.Mkdir(filepath.Join(s.Root, s.Bucket), 0o700); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	t.Cleanup(func() {
		s.Kill()
		if t.Failed() {
			t.Logf("versitygw output:\n%s", s.output)
		}
	})
	return s
}

// Restart starts the server again (after Kill), on the same address and
// directory, and waits until it answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.output == nil {
		s.output = &bytes.Buffer{}
	}
	// The credentials go in the environment, not the arguments.
	cmd := exec.Command(s.binary, "--port", s.addr, "--quiet", "posix", "--sidecar", s.meta, s.Root)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+s.AccessKey, "ROOT_SECRET_ACCESS_KEY="+s.SecretKey)
	cmd.Stdout, cmd.Stderr = s.output, s.output
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting versitygw: %v", err)
	}
	s.cmd = cmd
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		resp, err := http.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return
		}
		select {
		case <-ctx.Done():
			s.t.Fatalf("versitygw did not answer at %s: %v\n%s", s.Endpoint, err, s.output)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Kill kills the server at once, as a crash would.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Env is the standard environment that gives a client its credentials.
func (s *Server) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + s.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s.SecretKey}
}

// ObjectPath is the file that holds the object key of the bucket.
func (s *Server) ObjectPath(key string) string {
	return filepath.Join(s.Root, s.Bucket, filepath.FromSlash(key))
}

// RunObjects are the objects terrarun keeps for run ns/name (uid) under
// its prefix (terrarun's default, "terrarun") in the bucket, by what they
// hold: a plan part's or the outputs' kind, or log/<stage>/<attempt>; each
// names its file.
func (s *Server) RunObjects(ns, name, uid string) map[string]string {
	root := s.ObjectPath("terrarun/runs/" + ns + "/" + name + "/" + uid)
	found := map[string]string{}
	_ = filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			found[rel] = path
		}
		return nil
	})
	return found
}

// String names the server in messages.
func (s *Server) String() string { return fmt.Sprintf("versitygw at %s", s.Endpoint) }
