package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/stage"
)

func TestHTTPClientUploadsAndDownloads(t *testing.T) {
	srv := newFakeServer(t)
	c, err := NewHTTPClient(srv.spec(v1alpha1.StagePlan, 3))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.PutPlan(ctx, 3, []PlanPart{{v1alpha1.PlanPartFile, []byte("plan-bytes")}, {v1alpha1.PlanPartText, []byte("text")}}); err != nil {
		t.Fatal(err)
	}
	if err := c.PutOutputs(ctx, 3, strings.NewReader(`{}`)); err != nil {
		t.Fatal(err)
	}
	rc, err := c.GetPlan(ctx, v1alpha1.PlanFormatFile)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "plan-bytes" {
		t.Errorf("downloaded %q", b)
	}
	if got := string(srv.part(v1alpha1.PlanPartText)); got != "text" {
		t.Errorf("the text part of the upload arrived as %q", got)
	}
	want := []string{"POST plan?attempt=3&part=all", "POST outputs?attempt=3", "GET plan?format=file"}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if strings.Join(srv.requests, ",") != strings.Join(want, ",") {
		t.Errorf("requests = %v", srv.requests)
	}
	if srv.protoMajor != 2 {
		t.Errorf("HTTP/%d, want HTTP/2", srv.protoMajor)
	}
}

func TestHTTPClientErrors(t *testing.T) {
	srv := newFakeServer(t)
	c, err := NewHTTPClient(srv.spec(v1alpha1.StagePlan, 1))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// A Status answer is decoded.
	_, err = c.GetPlan(ctx, "nope")
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusNotFound || !strings.Contains(err.Error(), "the run has no plan nope") {
		t.Errorf("err = %v", err)
	}
	if errors.Is(err, ErrForbidden) {
		t.Error("404 is not forbidden")
	}
	if strings.Contains(err.Error(), srv.srv.URL) || strings.Contains(err.Error(), srv.token) {
		t.Errorf("error names the URL or token: %v", err)
	}

	// 403 is ErrForbidden.
	srv.mu.Lock()
	srv.forbid = true
	srv.mu.Unlock()
	err = c.PutPlan(ctx, 1, []PlanPart{{v1alpha1.PlanPartText, []byte("x")}})
	if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "not the current stage attempt") {
		t.Errorf("err = %v", err)
	}

	// A 403 on the log stream makes its writes fail with ErrForbidden.
	w, err := c.OpenLog(ctx, v1alpha1.StagePlan, 1)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err = w.Write([]byte("line\n")); err != nil || time.Now().After(deadline) {
			break
		}
	}
	if err == nil {
		t.Fatal("writes to a refused log stream succeed")
	}
	if err := w.Close(); !errors.Is(err, ErrForbidden) {
		t.Errorf("Close = %v", err)
	}

	// A wrong token is refused, without retries.
	srv.mu.Lock()
	srv.forbid = false
	srv.mu.Unlock()
	if err := os.WriteFile(srv.tokenFile, []byte("wrong"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = c.PutOutputs(ctx, 1, strings.NewReader("{}"))
	if !errors.As(err, &se) || se.Code != http.StatusUnauthorized {
		t.Errorf("err = %v", err)
	}
}

// TestHTTPClientRereadsToken: projected tokens rotate.
func TestHTTPClientRereadsToken(t *testing.T) {
	srv := newFakeServer(t)
	c, err := NewHTTPClient(srv.spec(v1alpha1.StagePlan, 1))
	if err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	srv.token = "rotated-token"
	srv.mu.Unlock()
	if err := os.WriteFile(srv.tokenFile, []byte("rotated-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.PutOutputs(context.Background(), 1, strings.NewReader("{}")); err != nil {
		t.Fatal(err)
	}
}

// TestHTTPClientReadsTokenDescriptorOnce: the local executor's token comes on
// a descriptor, read once at start and closed.
func TestHTTPClientReadsTokenDescriptorOnce(t *testing.T) {
	srv := newFakeServer(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	token := srv.token
	srv.mu.Unlock()
	if _, err := w.WriteString(token + "\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	fd, err := syscall.Dup(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	spec := srv.spec(v1alpha1.StagePlan, 1)
	spec.TokenFile, spec.TokenFD = "", fd
	c, err := NewHTTPClient(spec)
	if err != nil {
		t.Fatal(err)
	}
	// The descriptor is closed, and the token file, were it there, unused.
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err == nil {
		t.Error("the token descriptor is still open")
	}
	if err := os.WriteFile(srv.tokenFile, []byte("wrong"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := c.PutOutputs(context.Background(), 1, strings.NewReader("{}")); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHTTPClientRetries(t *testing.T) {
	srv := newFakeServer(t)
	var calls atomic.Int32
	srv.intercept = func(w http.ResponseWriter, r *http.Request) bool {
		if calls.Add(1) <= 2 {
			writeStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", "etcd is busy")
			return true
		}
		return false
	}
	hc, err := newHTTPClient(srv.spec(v1alpha1.StagePlan, 1))
	if err != nil {
		t.Fatal(err)
	}
	hc.Backoff = time.Millisecond
	var told []string
	hc.reportRetries(func(err error, wait time.Duration) { told = append(told, fmt.Sprintf("%v; again in %s", err, wait)) })
	if err := hc.PutPlan(context.Background(), 1, []PlanPart{{v1alpha1.PlanPartJSON, []byte(`{"a":1}`)}}); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 3 || string(srv.part(v1alpha1.PlanPartJSON)) != `{"a":1}` {
		t.Errorf("calls = %d, part = %q", calls.Load(), srv.part(v1alpha1.PlanPartJSON))
	}
	// Each retry is told, with the server's reason: the runner says it in
	// the stage's log.
	if len(told) != 2 || !strings.Contains(told[0], "etcd is busy") || !strings.Contains(told[1], "again in 2ms") {
		t.Errorf("retries told: %q", told)
	}
}

// TestOpenLogStreams checks that each write reaches the server before the
// stream is closed.
func TestOpenLogStreams(t *testing.T) {
	srv := newFakeServer(t)
	c, err := NewHTTPClient(srv.spec(v1alpha1.StageApply, 2))
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.OpenLog(context.Background(), v1alpha1.StageApply, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"first line\n", "second line\n"} {
		if _, err := w.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		srv.waitForLog(t, v1alpha1.StageApply, 2, line, 10*time.Second)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := srv.log(v1alpha1.StageApply, 2); got != "first line\nsecond line\n" {
		t.Errorf("log = %q", got)
	}
}

func TestNewHTTPClientValidates(t *testing.T) {
	srv := newFakeServer(t)
	for name, mutate := range map[string]func(*stage.Spec){
		"credentials in URL": func(s *stage.Spec) { s.Server = "https://user:pw@127.0.0.1:1" },
		"scheme":             func(s *stage.Spec) { s.Server = "ftp://127.0.0.1" },
		"no token":           func(s *stage.Spec) { s.TokenFile = "" },
		"empty descriptor":   func(s *stage.Spec) { s.TokenFile, s.TokenFD = "", emptyFD(t) },
		"missing token":      func(s *stage.Spec) { s.TokenFile = "/nonexistent" },
		"bad CA":             func(s *stage.Spec) { s.CAFile = s.TokenFile },
		"no run":             func(s *stage.Spec) { s.Name = "" },
	} {
		s := srv.spec(v1alpha1.StagePlan, 1)
		mutate(&s)
		if _, err := NewHTTPClient(s); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "pw@") {
			t.Errorf("%s: error shows credentials: %v", name, err)
		}
	}
}

// emptyFD is a descriptor that holds nothing.
func emptyFD(t *testing.T) int {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	fd, err := syscall.Dup(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	return fd // NewHTTPClient closes it
}

// TestLogSinkReopens: a stream that fails is opened again, and the log goes
// on (the server appends).
func TestLogSinkReopens(t *testing.T) {
	srv := newFakeServer(t)
	c, err := NewHTTPClient(srv.spec(v1alpha1.StagePlan, 1))
	if err != nil {
		t.Fatal(err)
	}
	fc := &flakyClient{Client: c}
	s := newLogSink(context.Background(), fc, v1alpha1.StagePlan, 1, nil)
	_, _ = s.Write([]byte("one\n"))
	srv.waitForLog(t, v1alpha1.StagePlan, 1, "one\n", 10*time.Second)
	fc.breakCurrent()
	_, _ = s.Write([]byte("two\n"))
	_, _ = s.Write([]byte("three\n"))
	if err := s.Close(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if got := srv.log(v1alpha1.StagePlan, 1); !strings.HasPrefix(got, "one\n") || !strings.HasSuffix(got, "three\n") {
		t.Errorf("log = %q", got)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.logStreams < 2 {
		t.Errorf("%d streams", srv.logStreams)
	}
}

type flakyClient struct {
	Client
	current atomic.Pointer[breakableWriter]
}

type breakableWriter struct {
	io.WriteCloser
	broken atomic.Bool
}

func (b *breakableWriter) Write(p []byte) (int, error) {
	if b.broken.Load() {
		return 0, errors.New("connection reset")
	}
	return b.WriteCloser.Write(p)
}

func (f *flakyClient) OpenLog(ctx context.Context, s v1alpha1.StageName, a int32) (io.WriteCloser, error) {
	w, err := f.Client.OpenLog(ctx, s, a)
	if err != nil {
		return nil, err
	}
	bw := &breakableWriter{WriteCloser: w}
	f.current.Store(bw)
	return bw, nil
}

func (f *flakyClient) breakCurrent() { f.current.Load().broken.Store(true) }

// TestHTTPClientSendsStageKey: with a stage key file (a Job's stage), every
// request carries the key, read once.
func TestHTTPClientSendsStageKey(t *testing.T) {
	srv := newFakeServer(t)
	var mu sync.Mutex
	var keys []string
	srv.intercept = func(_ http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		keys = append(keys, r.Header.Get(stage.StageKeyHeader))
		mu.Unlock()
		return false
	}
	keyFile := filepath.Join(t.TempDir(), "stage-key")
	if err := os.WriteFile(keyFile, []byte("0123abcd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := srv.spec(v1alpha1.StagePlan, 1)
	spec.StageKeyFile = keyFile
	c, err := NewHTTPClient(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := c.PutOutputs(context.Background(), 1, strings.NewReader("{}")); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 2 || keys[0] != "0123abcd" || keys[1] != "0123abcd" {
		t.Errorf("stage keys sent: %q, want the key on both requests", keys)
	}
}
