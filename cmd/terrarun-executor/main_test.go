package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io"
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

func TestUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"--stage-file"}, {"--stage-file", "f", "extra"}, {"--stage-file", "f", "--grace-period", "0s"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("run(%q) = %d, want 2", args, code)
		}
	}
}

func TestFailures(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	noToken := filepath.Join(dir, "spec.json")
	spec := `{"server":"https://user:hunter2@127.0.0.1:1","tokenFile":"/nonexistent","namespace":"ns","name":"r","stage":"plan","attempt":2}`
	if err := os.WriteFile(noToken, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	// Where the kubelet would read the termination message from.
	terminationLog = filepath.Join(dir, "termination-log")
	t.Cleanup(func() { terminationLog = "/dev/termination-log" })
	for file, want := range map[string]string{
		filepath.Join(dir, "missing.json"): "terrarun: stage ? attempt ? failed: reading the stage file",
		bad:                                "terrarun: stage ? attempt ? failed: decoding the stage file",
		noToken:                            "terrarun: stage plan attempt 2 failed: server URL must not hold credentials",
	} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"--stage-file", file}, &stdout, &stderr); code != 1 {
			t.Errorf("%s: exit %d, want 1", file, code)
		}
		if !strings.HasPrefix(stdout.String(), want) {
			t.Errorf("%s: stdout %q, want %q", file, stdout.String(), want)
		}
		if strings.Contains(stdout.String(), "hunter2") {
			t.Errorf("stdout shows credentials: %s", stdout.String())
		}
		// No termination log: none is created.
		if _, err := os.Stat(terminationLog); !os.IsNotExist(err) {
			t.Errorf("a termination log was created where there was none: %v", err)
		}
	}
	// With one (a Job's pod), it says why the stage failed.
	if err := os.WriteFile(terminationLog, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	run([]string{"--stage-file", noToken}, &stdout, &stderr)
	if msg, err := os.ReadFile(terminationLog); err != nil || !strings.HasPrefix(string(msg), "server URL must not hold credentials") || strings.Contains(string(msg), "hunter2") {
		t.Errorf("termination message %q (%v)", msg, err)
	}
	// Under Tekton, the outcome is also the step's result, which is
	// created, and bounded to what Tekton's termination message keeps.
	outcome := filepath.Join(dir, "results", "outcome")
	if err := os.MkdirAll(filepath.Dir(outcome), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { outcomeFile = "" })
	long := filepath.Join(dir, strings.Repeat("a-long-name/", 120)+"spec.json")
	run([]string{"--stage-file", long, "--outcome-file", outcome}, &stdout, &stderr)
	if msg, err := os.ReadFile(outcome); err != nil || !strings.HasPrefix(string(msg), "reading the stage file") || len(msg) > 1024 || !strings.HasSuffix(string(msg), "...") {
		t.Errorf("outcome result (%d bytes) %q (%v), want the message cut to 1 KiB", len(msg), msg, err)
	}
}

// TestMain lets the tests run this program as a child process: the test
// binary re-executed with TERRARUN_EXECUTOR_MAIN=1 is terrarun-executor.
func TestMain(m *testing.M) {
	if os.Getenv("TERRARUN_EXECUTOR_MAIN") == "1" {
		if l := os.Getenv("TERRARUN_TEST_TERMINATION_LOG"); l != "" {
			terminationLog = l
		}
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func engine(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TERRARUN_ENGINE"); p != "" {
		return p
	}
	for _, name := range []string{"tofu", "terraform"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no tofu or terraform found on PATH and TERRARUN_ENGINE is not set: run `make engine` to install one")
	return ""
}

// server accepts every write of the protocol and serves back the plan.
type server struct {
	mu    sync.Mutex
	parts map[string][]byte
	logs  bytes.Buffer
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer tok" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	sub := path.Base(r.URL.Path)
	switch {
	case sub == "logs":
		buf := make([]byte, 4096)
		for {
			n, err := r.Body.Read(buf)
			s.mu.Lock()
			s.logs.Write(buf[:n])
			s.mu.Unlock()
			if err != nil {
				break
			}
		}
	case sub == "plan" && r.Method == http.MethodPost: // part=all
		mr, err := r.MultipartReader()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for p, err := mr.NextPart(); err == nil; p, err = mr.NextPart() {
			b, _ := io.ReadAll(p)
			s.mu.Lock()
			s.parts[p.FormName()] = b
			s.mu.Unlock()
		}
	case sub == "plan":
		s.mu.Lock()
		b := s.parts[r.URL.Query().Get("format")]
		s.mu.Unlock()
		_, _ = w.Write(b)
		return
	case sub == "outputs":
		_, _ = io.Copy(io.Discard, r.Body)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// TestSignal runs the program: a plan that succeeds, then an apply that
// SIGTERM cancels while a provisioner sleeps.
func TestSignal(t *testing.T) {
	bin := engine(t)
	srv := &server{parts: map[string][]byte{}}
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
	ca := write("ca.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})))
	token := write("token", "tok")
	write("config/main.tf", "resource \"terraform_data\" \"x\" {\n  provisioner \"local-exec\" {\n    command = \"echo sleeping; sleep 30\"\n  }\n}\n")
	spec := stage.Spec{
		Server: ts.URL, CAFile: ca, TokenFile: token, Namespace: "ns", Name: "r", Stage: v1alpha1.StagePlan, Attempt: 1,
		Binary: bin, WorkDir: filepath.Join(dir, "plan"), Operation: "Apply",
		Source:  stage.Source{Dir: filepath.Join(dir, "config")},
		Backend: stage.Backend{Type: "local", Config: map[string]string{"path": filepath.Join(dir, "terraform.tfstate")}},
	}
	runProgram := func(spec stage.Spec, signalWhen string) (int, string) {
		t.Helper()
		if err := os.MkdirAll(spec.WorkDir, 0o700); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(spec)
		specFile := write(string(spec.Stage)+".json", string(b))
		cmd := exec.Command(os.Args[0], "--stage-file", specFile, "--grace-period", "10s")
		cmd.Env = append(os.Environ(), "TERRARUN_EXECUTOR_MAIN=1", "TERRARUN_TEST_TERMINATION_LOG="+terminationLog)
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if signalWhen != "" {
			deadline := time.Now().Add(60 * time.Second)
			for !strings.Contains(srv.log(), signalWhen) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		_ = cmd.Wait()
		return cmd.ProcessState.ExitCode(), stdout.String()
	}

	// The run's code wrote a secret where the kubelet reads the termination
	// message from, which it copies into the pod's status.
	terminationLog = write("termination-log", "planted: hunter2")
	t.Cleanup(func() { terminationLog = "/dev/termination-log" })
	code, out := runProgram(spec, "")
	if code != 0 || !strings.HasSuffix(out, "terrarun: stage plan attempt 1 succeeded\n") {
		t.Fatalf("plan: exit %d\n%s", code, out)
	}
	if msg, err := os.ReadFile(terminationLog); err != nil || string(msg) != "stage plan attempt 1 succeeded" {
		t.Errorf("the termination message of a stage that succeeded is %q (%v), not the executor's own", msg, err)
	}
	if !strings.Contains(out, "1 to add") {
		t.Errorf("stdout lacks terraform's output:\n%s", out)
	}

	srv.mu.Lock()
	d := func(part string) string {
		sum := sha256.Sum256(srv.parts[part])
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	parts := &v1alpha1.PlanPartDigests{File: d(v1alpha1.PlanPartFile), Source: d(v1alpha1.PlanPartSource),
		Text: d(v1alpha1.PlanPartText), JSON: d(v1alpha1.PlanPartJSON)}
	srv.mu.Unlock()
	spec.Stage, spec.WorkDir, spec.Source = v1alpha1.StageApply, filepath.Join(dir, "apply"), stage.Source{}
	spec.PlanDigest, spec.PlanParts = stage.PlanDigest(parts.File, parts.Source, parts.Text, parts.JSON), parts
	start := time.Now()
	code, out = runProgram(spec, "(local-exec): sleeping")
	if code != 130 {
		t.Errorf("apply: exit %d, want 130\n%s", code, out)
	}
	if !strings.Contains(out, "terrarun: stage apply attempt 1 failed: stage canceled") {
		t.Errorf("stdout:\n%s", out)
	}
	if time.Since(start) > 25*time.Second {
		t.Errorf("took %s", time.Since(start))
	}
	if !strings.Contains(srv.log(), "Interrupt received") {
		t.Errorf("terraform was not interrupted:\n%s", srv.log())
	}
}

// TestForgedStage: a stage whose files are not those its pod's binding
// names ends with stage.ExitForged before anything runs, and says why where
// the kubelet reads it.
func TestForgedStage(t *testing.T) {
	dir := t.TempDir()
	specFile := filepath.Join(dir, "stage.json")
	if err := os.WriteFile(specFile, []byte(`{"server":"https://127.0.0.1:1","namespace":"ns","name":"r","stage":"plan","attempt":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	terminationLog = filepath.Join(dir, "termination-log")
	t.Cleanup(func() { terminationLog = "/dev/termination-log" })
	if err := os.WriteFile(terminationLog, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(stage.BindingEnv, stage.BindingDigest([]byte(`{"what":"terrarun wrote"}`), nil))
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--stage-file", specFile}, &stdout, &stderr); code != stage.ExitForged {
		t.Errorf("exit %d, want %d", code, stage.ExitForged)
	}
	if !strings.Contains(stdout.String(), "terrarun: stage plan attempt 1 failed: the stage is not the one terrarun built") {
		t.Errorf("stdout: %q", stdout.String())
	}
	if msg, _ := os.ReadFile(terminationLog); !strings.Contains(string(msg), "not the one terrarun built") {
		t.Errorf("termination message %q", msg)
	}
}
