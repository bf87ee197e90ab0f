package main

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/stage"
)

// uploadGate is a server that holds the stage's first plan upload until
// release is closed, so that the stage is surely running meanwhile.
type uploadGate struct {
	*server
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

func (g *uploadGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && path.Base(r.URL.Path) == "plan" {
		g.once.Do(func() { close(g.reached) })
		select {
		case <-g.release:
		case <-r.Context().Done():
			return
		}
	}
	g.server.ServeHTTP(w, r)
}

// TestOtherSignals: the stage's processes run as the executor's user and may
// signal it. Signals other than SIGTERM and SIGINT do not end it: the stage
// goes on, and the executor still writes its own termination message over
// the one the stage's code planted.
func TestOtherSignals(t *testing.T) {
	bin := engine(t)
	srv := &uploadGate{server: &server{parts: map[string][]byte{}}, reached: make(chan struct{}), release: make(chan struct{})}
	ts := httptest.NewTLSServer(srv)
	defer ts.Close()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	spec := stage.Spec{
		Server: ts.URL, Namespace: "ns", Name: "r", Stage: v1alpha1.StagePlan, Attempt: 1, Operation: "Apply",
		CAFile:    write("ca.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}))),
		TokenFile: write("token", "tok"),
		Binary:    bin, WorkDir: filepath.Join(dir, "plan"),
		Source:  stage.Source{Dir: filepath.Dir(write("config/main.tf", "resource \"terraform_data\" \"x\" {}\n"))},
		Backend: stage.Backend{Type: "local", Config: map[string]string{"path": filepath.Join(dir, "terraform.tfstate")}},
	}
	if err := os.MkdirAll(spec.WorkDir, 0o700); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(spec)
	specFile := write("plan.json", string(b))
	// What the stage's code wrote where the kubelet reads the termination
	// message from, before it signaled the executor.
	log := write("termination-log", "planted: hunter2")

	cmd := exec.Command(os.Args[0], "--stage-file", specFile)
	cmd.Env = append(os.Environ(), "TERRARUN_EXECUTOR_MAIN=1", "TERRARUN_TEST_TERMINATION_LOG="+log)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.reached:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the stage did not upload its plan\n%s%s", stdout.String(), stderr.String())
	}
	signals := []syscall.Signal{syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGABRT}
	for _, s := range signals {
		if err := cmd.Process.Signal(s); err != nil {
			t.Errorf("%v: %v", s, err)
		}
	}
	// Long enough for a default action to end the executor.
	time.Sleep(300 * time.Millisecond)
	close(srv.release)
	_ = cmd.Wait()

	if code := cmd.ProcessState.ExitCode(); code != exitOK || !strings.HasSuffix(stdout.String(), "terrarun: stage plan attempt 1 succeeded\n") {
		t.Errorf("exit %d (%v)\nstdout:\n%s\nstderr:\n%s", code, cmd.ProcessState, stdout.String(), stderr.String())
	}
	if msg, err := os.ReadFile(log); err != nil || string(msg) != "stage plan attempt 1 succeeded" {
		t.Errorf("termination message %q (%v), not the executor's own", msg, err)
	}
	for _, s := range signals {
		if !strings.Contains(stderr.String(), "ignored signal "+s.String()+"\n") {
			t.Errorf("stderr does not say %q was ignored:\n%s", s, stderr.String())
		}
	}
}
