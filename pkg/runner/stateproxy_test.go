package runner

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/stage"
)

// servedState is the state and lock a fake server keeps for the state and
// statelock subresources, with the server's rules: a lock is taken and
// released by its ID, the state written with the held lock's ID.
type servedState struct {
	mu     sync.Mutex
	state  []byte
	lockID string
	log    []string
}

func (s *servedState) intercept(base string) func(http.ResponseWriter, *http.Request) bool {
	return func(w http.ResponseWriter, r *http.Request) bool {
		sub := strings.TrimPrefix(r.URL.Path, base)
		if sub != "state" && sub != "statelock" {
			return false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		id := r.URL.Query().Get("lockID")
		s.log = append(s.log, r.Method+" "+sub)
		switch {
		case sub == "state" && r.Method == http.MethodGet:
			if s.state == nil {
				w.WriteHeader(http.StatusNoContent)
				return true
			}
			_, _ = w.Write(s.state)
		case sub == "state" && r.Method == http.MethodPost:
			if id == "" || id != s.lockID {
				writeStatus(w, http.StatusConflict, metav1.StatusReasonConflict, "not the lock's holder")
				return true
			}
			s.state = body
			w.WriteHeader(http.StatusNoContent)
		case sub == "statelock" && r.Method == http.MethodPost:
			var info struct{ ID string }
			if err := json.Unmarshal(body, &info); err != nil || info.ID == "" {
				writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "no lock ID")
				return true
			}
			if s.lockID != "" {
				w.WriteHeader(http.StatusLocked)
				_, _ = w.Write([]byte(`{"ID":"` + s.lockID + `"}`))
				return true
			}
			s.lockID = info.ID
		case sub == "statelock" && r.Method == http.MethodDelete:
			if id != s.lockID {
				writeStatus(w, http.StatusConflict, metav1.StatusReasonConflict, "another lock")
				return true
			}
			s.lockID = ""
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
		return true
	}
}

// TestServedState: with the state terrarun serves, the engine's http backend
// reaches the run's state and statelock subresources through the runner's
// proxy, with the stage's credentials; an apply writes the state with its
// lock, the next plan sees it, and no lock is left.
func TestServedState(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]string{"main.tf": "resource \"terraform_data\" \"x\" {\n  input = \"v1\"\n}\n"})
	served := &servedState{}
	h.srv.intercept = served.intercept(h.srv.base)
	ctx := context.Background()
	plan := h.spec(v1alpha1.StagePlan, 1)
	plan.Backend = stage.Backend{Type: stage.ServedBackend}
	plan.Workspace = "prod"
	if err := h.run(ctx, plan); err != nil {
		t.Fatalf("plan: %v\nlog:\n%s", err, h.srv.allLogs())
	}
	if res := h.result(); res.Add != 1 {
		t.Fatalf("the first plan adds %d, want 1", res.Add)
	}
	apply := h.applySpec(1)
	apply.Backend, apply.Workspace = plan.Backend, plan.Workspace
	if err := h.run(ctx, apply); err != nil {
		t.Fatalf("apply: %v\nlog:\n%s", err, h.srv.allLogs())
	}
	served.mu.Lock()
	state, lock := string(served.state), served.lockID
	served.mu.Unlock()
	if !strings.Contains(state, `"terraform_data"`) || lock != "" {
		t.Fatalf("after the apply the state is %q and the lock %q", state, lock)
	}
	plan2 := h.spec(v1alpha1.StagePlan, 2)
	plan2.Backend, plan2.Workspace = plan.Backend, plan.Workspace
	if err := h.run(ctx, plan2); err != nil {
		t.Fatalf("second plan: %v\nlog:\n%s", err, h.srv.allLogs())
	}
	if res := h.result(); res.Add != 0 || res.HasChanges {
		t.Errorf("the second plan = %+v, want no changes", res)
	}
	logs := h.srv.allLogs()
	if !strings.Contains(logs, "terrarun: the state of workspace prod, kept by terrarun") {
		t.Errorf("the log does not say where the state is:\n%s", logs)
	}
	// The engine saw no credential of the stage, and its password is not in
	// the log.
	if strings.Contains(logs, h.srv.token) || strings.Contains(logs, "TF_HTTP_PASSWORD") {
		t.Errorf("the log holds a credential:\n%s", logs)
	}
}
