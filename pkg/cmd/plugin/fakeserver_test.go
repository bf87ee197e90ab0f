package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// The plugin's tests run its commands, as Run does for the kubectl-terrarun
// binary, against fakeServer: an httptest.Server that answers the
// terrarun.dev paths the plugin requests with what each test routes there.

const (
	testNamespace = "team-a"
	// apiPrefix is the path of the test namespace's terrarun.dev objects.
	apiPrefix = "/apis/terrarun.dev/v1alpha1/namespaces/" + testNamespace
)

// request is a request the fake server received.
type request struct {
	method, path string // path relative to apiPrefix
	query        map[string][]string
	body         []byte
}

// fakeServer answers the plugin's requests from routes: "GET /terraformruns/web-1"
// is the GET of run web-1 of the test namespace, "WATCH /terraformruns" a
// watch of its runs. An unrouted request gets a 404 that says so.
type fakeServer struct {
	t      *testing.T
	srv    *httptest.Server
	routes map[string]http.HandlerFunc

	mu       sync.Mutex
	requests []request
}

// newFakeServer starts a fake server with routes; it is closed when the test
// ends.
func newFakeServer(t *testing.T, routes map[string]http.HandlerFunc) *fakeServer {
	t.Helper()
	f := &fakeServer{t: t, routes: routes}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	path := strings.TrimPrefix(r.URL.Path, apiPrefix)
	method := r.Method
	if q := r.URL.Query().Get("watch"); q == "true" || q == "1" {
		method = "WATCH"
	}
	// A dry run is recorded apart (received("DRYRUN", …)), and served as
	// the request it tries.
	recorded := method
	if r.URL.Query().Get("dryRun") == metav1.DryRunAll {
		recorded = "DRYRUN"
	}
	f.mu.Lock()
	f.requests = append(f.requests, request{method: recorded, path: path, query: r.URL.Query(), body: body})
	f.mu.Unlock()
	route, ok := f.routes[method+" "+path]
	if !ok {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("the fake server has no route for %s %s", method, r.URL.Path))
		return
	}
	route(w, r)
}

// received returns the requests of method to path (relative to apiPrefix).
func (f *fakeServer) received(method, path string) []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var rs []request
	for _, r := range f.requests {
		if r.method == method && r.path == path {
			rs = append(rs, r)
		}
	}
	return rs
}

// kubeconfig writes a kubeconfig for the server, with the test namespace as
// its context's, and returns its path.
func (f *fakeServer) kubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: %s
users:
- name: alice
  user:
    token: alice-token
contexts:
- name: fake
  context:
    cluster: fake
    user: alice
    namespace: %s
current-context: fake
`, f.srv.URL, testNamespace)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// result is what a command did: its exit code and what it printed.
type result struct {
	code           int
	stdout, stderr string
}

// run runs `kubectl terrarun args...` against the server with stdin as its
// input, through Run, as the binary does. Run reads os.Args: the plugin's
// tests do not run in parallel.
func (f *fakeServer) run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	saved := os.Args
	t.Cleanup(func() { os.Args = saved })
	os.Args = append([]string{"kubectl-terrarun"}, append(args, "--kubeconfig", f.kubeconfig(t))...)
	if len(args) > 0 && args[0] == cobra.ShellCompRequestCmd {
		// The word completed is the last: the flag goes before it.
		os.Args = append([]string{"kubectl-terrarun", args[0], "--kubeconfig", f.kubeconfig(t)}, args[1:]...)
	}
	var stdout, stderr bytes.Buffer
	code := Run(genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &stdout, ErrOut: &stderr})
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// expect fails unless the command exited with code and printed want on
// stdout and every one of stderr on its stderr.
func (r result) expect(t *testing.T, code int, stdout string, stderr ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code %d, want %d; stdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	if r.stdout != stdout {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, stdout)
	}
	for _, s := range stderr {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr does not contain %q:\n%s", s, r.stderr)
		}
	}
}

// writeJSON writes obj as the server's JSON with code.
func writeJSON(w http.ResponseWriter, code int, obj any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(obj)
}

// writeStatus writes the Status of an error, as the server does.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string) {
	writeJSON(w, code, &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: message,
	})
}

// object answers obj.
func object(obj any) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, obj) }
}

// status answers an error Status.
func status(code int, reason metav1.StatusReason, message string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { writeStatus(w, code, reason, message) }
}

// text answers body as text/plain, as the plan and logs subresources do.
func text(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, body)
	}
}

// watchEvents answers a watch with events, one JSON object a line, and then
// holds it open until the client leaves when hold is set, or ends it.
func watchEvents(hold bool, events ...watchEvent) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		for _, ev := range events {
			json.NewEncoder(w).Encode(ev)
		}
		w.(http.Flusher).Flush()
		if hold {
			<-r.Context().Done()
		}
	}
}

// watchEvent is a watch event as the server streams it.
type watchEvent struct {
	Type   string `json:"type"`
	Object any    `json:"object"`
}

// sequence answers the nth request with handlers[n], and later ones with
// the last.
func sequence(handlers ...http.HandlerFunc) http.HandlerFunc {
	var mu sync.Mutex
	n := 0
	return func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		h := handlers[min(n, len(handlers)-1)]
		n++
		mu.Unlock()
		h(w, r)
	}
}

// newRun returns run name of the test namespace in phase, changed by change
// when not nil.
func newRun(name string, phase v1alpha1.RunPhase, message string, change func(*v1alpha1.TerraformRun)) *v1alpha1.TerraformRun {
	run := &v1alpha1.TerraformRun{
		TypeMeta: metav1.TypeMeta{Kind: "TerraformRun", APIVersion: v1alpha1.SchemeGroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: testNamespace, ResourceVersion: "7",
			CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour)),
		},
		Spec:   v1alpha1.TerraformRunSpec{Operation: v1alpha1.OperationApply},
		Status: v1alpha1.TerraformRunStatus{Phase: phase, Message: message},
	}
	if change != nil {
		change(run)
	}
	return run
}
