package runner

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/stage"
)

// fakeServer implements the executor's side of the terrarun API, as
// described in package stage, for one run.
type fakeServer struct {
	t     *testing.T
	srv   *httptest.Server
	token string
	base  string

	caFile, tokenFile string

	mu         sync.Mutex
	logs       map[string]*bytes.Buffer // "stage/attempt"
	logStreams int
	parts      map[string][]byte
	partOrder  []string
	downloads  map[string]int // plan downloads with a body, by format
	outputs    []byte
	requests   []string
	protoMajor int
	// forbid makes every request answer 403; forbidWrites only the uploads.
	forbid, forbidWrites bool
	// serve overrides what GET /plan returns, by format.
	serve map[string][]byte
	// intercept, when set, sees every request first; it returns true when it
	// answered.
	intercept func(http.ResponseWriter, *http.Request) bool
}

func newFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	f := &fakeServer{
		t:         t,
		token:     "test-token-0123456789",
		base:      "/apis/terrarun.dev/v1alpha1/namespaces/ns1/terraformruns/run1/",
		logs:      map[string]*bytes.Buffer{},
		parts:     map[string][]byte{},
		downloads: map[string]int{},
		serve:     map[string][]byte{},
	}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.handle))
	f.srv.EnableHTTP2 = true
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)

	dir := t.TempDir()
	f.caFile = filepath.Join(dir, "ca.crt")
	f.tokenFile = filepath.Join(dir, "token")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	if err := os.WriteFile(f.caFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.tokenFile, []byte(f.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code),
	})
}

func (f *fakeServer) handle(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+strings.TrimPrefix(r.URL.Path, f.base)+"?"+r.URL.RawQuery)
	f.protoMajor = r.ProtoMajor
	forbid, forbidWrites := f.forbid, f.forbidWrites
	intercept := f.intercept
	token := f.token
	f.mu.Unlock()
	if intercept != nil && intercept(w, r) {
		return
	}

	if r.Header.Get("Authorization") != "Bearer "+token {
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
		return
	}
	if !strings.HasPrefix(r.URL.Path, f.base) {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "no such run")
		return
	}
	if forbid || forbidWrites && r.Method == http.MethodPost && !strings.HasSuffix(r.URL.Path, "/logs") {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
			`terraformruns.terrarun.dev "run1" is forbidden: the writer is not the current stage attempt`)
		return
	}
	sub := strings.TrimPrefix(r.URL.Path, f.base)
	q := r.URL.Query()
	attempt := q.Get("attempt")
	if r.Method == http.MethodPost {
		if _, err := strconv.Atoi(attempt); err != nil {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "attempt is required")
			return
		}
	}
	switch {
	case sub == "logs" && r.Method == http.MethodPost:
		key := q.Get("stage") + "/" + attempt
		f.mu.Lock()
		f.logStreams++
		if f.logs[key] == nil {
			f.logs[key] = &bytes.Buffer{}
		}
		buf := f.logs[key]
		f.mu.Unlock()
		chunk := make([]byte, 4096)
		for {
			n, err := r.Body.Read(chunk)
			if n > 0 {
				f.mu.Lock()
				buf.Write(chunk[:n])
				f.mu.Unlock()
			}
			if err != nil {
				break
			}
		}
		w.WriteHeader(http.StatusNoContent)
	case sub == "plan" && r.Method == http.MethodPost:
		if q.Get("part") != v1alpha1.PlanPartAll {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "the executor uploads part=all, not part="+q.Get("part"))
			return
		}
		mr, err := r.MultipartReader()
		if err != nil {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
			return
		}
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
				return
			}
			part := p.FormName()
			switch part {
			case v1alpha1.PlanPartFile, v1alpha1.PlanPartText, v1alpha1.PlanPartJSON, v1alpha1.PlanPartSource, v1alpha1.PlanPartResult:
			default:
				writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "unknown part "+part)
				return
			}
			b, err := io.ReadAll(p)
			if err != nil {
				writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
				return
			}
			f.mu.Lock()
			f.parts[part] = b
			f.partOrder = append(f.partOrder, part)
			f.mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	case sub == "plan" && r.Method == http.MethodGet:
		format := q.Get("format")
		if q.Get("wait") == "true" {
			// As the server, which holds the wait until the apply is
			// granted: here, once the plan is recorded.
			for f.part(v1alpha1.PlanPartResult) == nil {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		}
		f.mu.Lock()
		b, ok := f.serve[format]
		if !ok {
			b, ok = f.parts[format]
		}
		f.mu.Unlock()
		if !ok || (format != v1alpha1.PlanPartFile && format != v1alpha1.PlanPartSource) {
			writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the run has no plan "+format)
			return
		}
		if etag := strconv.Quote(digestOf(b)); r.Header.Get("If-None-Match") == etag {
			w.Header().Set("ETag", etag)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		f.mu.Lock()
		f.downloads[format]++
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(b)
	case sub == "outputs" && r.Method == http.MethodPost:
		b, err := io.ReadAll(r.Body)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
			return
		}
		f.mu.Lock()
		f.outputs = b
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "not allowed: "+r.Method+" "+sub)
	}
}

func (f *fakeServer) log(stageName v1alpha1.StageName, attempt int32) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.logs[fmt.Sprintf("%s/%d", stageName, attempt)]; b != nil {
		return b.String()
	}
	return ""
}

func (f *fakeServer) allLogs() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var sb strings.Builder
	for _, b := range f.logs {
		sb.Write(b.Bytes())
	}
	return sb.String()
}

func (f *fakeServer) part(name string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.parts[name]
}

// plan is the digest and part digests of the plan the server holds, as the
// server records them.
func (f *fakeServer) plan() (string, *v1alpha1.PlanPartDigests) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := func(part string) string {
		sum := sha256.Sum256(f.parts[part])
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	parts := &v1alpha1.PlanPartDigests{File: d(v1alpha1.PlanPartFile), Source: d(v1alpha1.PlanPartSource),
		Text: d(v1alpha1.PlanPartText), JSON: d(v1alpha1.PlanPartJSON)}
	return stage.PlanDigest(parts.File, parts.Source, parts.Text, parts.JSON), parts
}

func (f *fakeServer) waitForLog(t *testing.T, stageName v1alpha1.StageName, attempt int32, substr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if strings.Contains(f.log(stageName, attempt), substr) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the server never received %q in the %s log; it has:\n%s", substr, stageName, f.log(stageName, attempt))
}

// spec returns a spec for this server's run.
func (f *fakeServer) spec(stageName v1alpha1.StageName, attempt int32) stage.Spec {
	return stage.Spec{
		Server:    f.srv.URL,
		CAFile:    f.caFile,
		TokenFile: f.tokenFile,
		Namespace: "ns1",
		Name:      "run1",
		UID:       "uid-1",
		Stage:     stageName,
		Attempt:   attempt,
		Operation: "Apply",
		Workspace: "default",
	}
}
