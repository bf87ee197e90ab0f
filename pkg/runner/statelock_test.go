package runner

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/stage"
)

func TestHeldLock(t *testing.T) {
	for _, prefix := range []string{"", "│ "} {
		out := "exit status 1\n\n" + prefix + "Error: Error acquiring the state lock\n" + prefix + "\n" +
			prefix + "Error message: HTTP remote state already locked: ID=abc\n" + prefix + "Lock Info:\n" +
			prefix + "  ID:        5c1b2a5e-0d3c-4b0e-9a57-1f0e9d2c7b11\n" + prefix + "  Path:      \n" +
			prefix + "  Operation: OperationTypePlan\n" + prefix + "  Who:       @run-plan-1\n" + prefix + "  Version:   1.10.10\n"
		lock, ok := heldLock(errors.New(out), "@some-host")
		want := lockInfo{ID: "5c1b2a5e-0d3c-4b0e-9a57-1f0e9d2c7b11", Operation: "OperationTypePlan", Who: "@run-plan-1"}
		if !ok || lock != want {
			t.Errorf("prefix %q: heldLock = %+v, %v; want %+v", prefix, lock, ok, want)
		}
		if !lostPlanLock(lock, []string{"run-plan-1"}) || lostPlanLock(lock, []string{"run-plan-2"}) || lostPlanLock(lock, nil) {
			t.Errorf("lostPlanLock does not match the lost attempt's host alone")
		}
		lock.Operation = "OperationTypeApply"
		if lostPlanLock(lock, []string{"run-plan-1"}) {
			t.Errorf("a lock taken for an apply is taken for a lost plan")
		}
	}
	// A new workspace's state, locked by a lost plan attempt as it created it.
	created := "exit status 1\n\nError: error loading state: the state is already locked by another tofu client\nLock Info:\n" +
		"  ID:        81501fac-8a7f-945b-6499-3f48e33008b1\n  Path:      \n  Operation: init\n  Who:       @run-plan-1\n  Version:   1.10.10\n"
	lock, ok := heldLock(errors.New(created), "@some-host")
	if want := (lockInfo{ID: "81501fac-8a7f-945b-6499-3f48e33008b1", Operation: "init", Who: "@run-plan-1"}); !ok || lock != want {
		t.Errorf("a new workspace's lock: heldLock = %+v, %v; want %+v", lock, ok, want)
	}
	if !lostPlanLock(lock, []string{"run-plan-1"}) || lostPlanLock(lock, []string{"run-apply-1"}) {
		t.Errorf("lostPlanLock does not match the lost plan attempt's workspace creation alone")
	}
	if _, ok := heldLock(errors.New("Error: Invalid expression"), "@some-host"); ok {
		t.Error("an error that is not about the lock is taken for one")
	}
	// terraform's http backend reports its own attempt as Lock Info.
	own := "Error: Error acquiring the state lock\n\nError message: HTTP remote state already locked: ID=holder-1\nLock Info:\n  ID:        mine\n  Operation: OperationTypePlan\n  Who:       root@vm\n"
	if lock, ok := heldLock(errors.New(own), "root@vm"); !ok || lock != (lockInfo{ID: "holder-1"}) {
		t.Errorf("heldLock of the engine's own attempt = %+v, %v; want only the holder's ID", lock, ok)
	}
}

// lockServer is a state store for Terraform's http backend, with a lock.
type lockServer struct {
	mu       sync.Mutex
	state    []byte
	lock     []byte // the holder's lock info, as the engine sent it
	unlocked int
}

func (s *lockServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	switch r.Method {
	case http.MethodGet:
		if s.state == nil {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_, _ = w.Write(s.state)
	case http.MethodPost:
		s.state = body
	case "LOCK":
		if s.lock != nil {
			w.WriteHeader(http.StatusLocked)
			_, _ = w.Write(s.lock)
			return
		}
		s.lock = body
	case "UNLOCK":
		s.lock = nil
		s.unlocked++
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func (s *lockServer) held() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lock != nil
}

// TestStateLocks: a plan attempt that finds the state locked by one of its
// run's lost plan attempts releases that lock and plans; a lock taken for
// anything else is left, and the error names the ID and spec.forceUnlock,
// which then releases it.
func TestStateLocks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]string{"main.tf": `resource "terraform_data" "x" { input = 1 }`})
	store := &lockServer{}
	srv := httptest.NewServer(store)
	t.Cleanup(srv.Close)
	spec := func(attempt int32) stage.Spec {
		s := h.spec(v1alpha1.StagePlan, attempt)
		s.Backend = stage.Backend{Type: "http", Config: map[string]string{
			"address": srv.URL + "/state", "lock_address": srv.URL + "/state", "unlock_address": srv.URL + "/state",
		}}
		return s
	}
	lockAs := func(id, op, who string) {
		b, _ := json.Marshal(map[string]string{"ID": id, "Operation": op, "Who": who, "Version": "1.10.0", "Path": ""})
		store.mu.Lock()
		store.lock = b
		store.mu.Unlock()
	}
	ctx := context.Background()

	lockAs("0b6b1d9e-lost-plan", "OperationTypePlan", "65532@run-plan-1")
	s := spec(2)
	s.LostPlanHosts = []string{"run-plan-1"}
	err := h.run(ctx, s)
	if filepath.Base(h.engine) == "terraform" {
		// terraform's http backend reports the lock it tried to take, not
		// the holder's: the holder cannot be told apart, and its lock stays.
		if err == nil || !strings.Contains(err.Error(), "spec.forceUnlock: 0b6b1d9e-lost-plan") || !store.held() {
			t.Fatalf("terraform, a lock of an unnamed holder: err = %v, held %v; want the lock kept and its ID named", err, store.held())
		}
		t.Log("terraform's http backend does not name the holder: the lost plan's lock is kept, as any other")
		store.mu.Lock()
		store.lock = nil
		store.mu.Unlock()
	} else {
		if err != nil {
			t.Fatalf("the plan did not take the place of its lost attempt: %v\n%s", err, h.srv.log(v1alpha1.StagePlan, 2))
		}
		if store.held() || store.unlocked != 2 { // the lost attempt's lock, then the plan's own
			t.Errorf("held %v, %d unlocks; want the lost plan's lock released", store.held(), store.unlocked)
		}
		if log := h.srv.log(v1alpha1.StagePlan, 2); !strings.Contains(log, "releasing state lock 0b6b1d9e-lost-plan") {
			t.Errorf("the log does not say which lock was released:\n%s", log)
		}
	}

	// A lost apply's lock (or anyone else's) stays.
	lockAs("7f3e-lost-apply", "OperationTypeApply", "65532@run-apply-1")
	s = spec(3)
	s.LostPlanHosts = []string{"run-apply-1", "run-plan-1"}
	err = h.run(ctx, s)
	if err == nil || !strings.Contains(err.Error(), "7f3e-lost-apply") || !strings.Contains(err.Error(), "spec.forceUnlock: 7f3e-lost-apply") {
		t.Fatalf("plan error = %v; want the lock's ID and how to release it", err)
	}
	if !store.held() {
		t.Fatal("a lock taken for an apply was released")
	}

	s = spec(4)
	s.ForceUnlock = "7f3e-lost-apply"
	if err := h.run(ctx, s); err != nil {
		t.Fatalf("plan with forceUnlock: %v", err)
	}
	if store.held() {
		t.Error("the lock is still held after forceUnlock and a plan")
	}
}
