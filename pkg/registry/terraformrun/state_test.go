package terraformrun

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

const testState = `{"version":4,"serial":3,"lineage":"l","outputs":{},"resources":[]}`

func lockBody(id string) *strings.Reader {
	return strings.NewReader(`{"ID":"` + id + `","Operation":"OperationTypeApply","Who":"someone@somewhere"}`)
}

// TestStateIsTheStagesOnly: the state is read and locked by the executor
// of the run's current stage, written by an apply only with its lock; a
// user, even the run's creator, reaches none of it; viewers see the lock.
func TestStateIsTheStagesOnly(t *testing.T) {
	env := newTestEnvWithStates(t)
	run := env.createRun(t, "web", nil)

	w := connect(t, env.storage.State, alice, http.MethodGet, "web", "", nil)
	expectStatus(t, w, http.StatusForbidden, "alice is not an executor")

	env.runningStage(t, run, planStage, terrarun.StagePlan, 1)
	expectStatus(t, connect(t, env.storage.State, planStage, http.MethodGet, "web", "", nil), http.StatusNoContent)
	expectStatus(t, connect(t, env.storage.StateLock, planStage, http.MethodPost, "web", "", lockBody("P1")), http.StatusOK)
	w = connect(t, env.storage.State, planStage, http.MethodPost, "web", "lockID=P1", strings.NewReader(testState))
	expectStatus(t, w, http.StatusForbidden, "the plan stage reads the state; only the apply stage writes it")

	// A viewer sees who holds it, as the server knows it.
	w = connect(t, env.storage.StateLock, alice, http.MethodGet, "web", "", nil)
	expectStatus(t, w, http.StatusOK)
	var view lockView
	if err := json.Unmarshal(w.Body.Bytes(), &view); err != nil || view.ID != "P1" || view.Holder.Run != "web" || view.Holder.Stage != "plan" || view.Operation != "OperationTypeApply" {
		t.Errorf("the lock = %s (%v)", w.Body.String(), err)
	}
	expectStatus(t, connect(t, env.storage.StateLock, planStage, http.MethodDelete, "web", "lockID=P1", nil), http.StatusOK)

	// The apply writes with its lock.
	env.setStatus(t, "web", func(st *terrarun.TerraformRunStatus) { now := metav1.Now(); st.Stages[0].CompletionTime = &now })
	env.runningStage(t, run, applyStage, terrarun.StageApply, 1)
	w = connect(t, env.storage.State, applyStage, http.MethodPost, "web", "lockID=A1", strings.NewReader(testState))
	expectStatus(t, w, http.StatusConflict, "write the state with the ID of the lock this stage holds")
	expectStatus(t, connect(t, env.storage.StateLock, applyStage, http.MethodPost, "web", "", lockBody("A1")), http.StatusOK)
	expectStatus(t, connect(t, env.storage.State, applyStage, http.MethodPost, "web", "lockID=A1", strings.NewReader(testState)), http.StatusNoContent)
	w = connect(t, env.storage.State, applyStage, http.MethodGet, "web", "", nil)
	expectStatus(t, w, http.StatusOK)
	if w.Body.String() != testState {
		t.Errorf("GET state = %q", w.Body.String())
	}
	// The ended plan stage reaches nothing any more.
	expectStatus(t, connect(t, env.storage.State, planStage, http.MethodGet, "web", "", nil), http.StatusForbidden)
}

// TestStateLockTakeOver: a lock held by a stage that runs is refused (423,
// in the engine's form, naming the holder), a run's spec.forceUnlock does
// not take it, and once that stage has ended the next stage takes it over.
func TestStateLockTakeOver(t *testing.T) {
	env := newTestEnvWithStates(t)
	holder := env.createRun(t, "holder", nil)
	env.runningStage(t, holder, applyStage, terrarun.StageApply, 1)
	expectStatus(t, connect(t, env.storage.StateLock, applyStage, http.MethodPost, "holder", "", lockBody("H1")), http.StatusOK)

	breaker := env.createRunWith(t, "breaker", func(s *terrarun.TerraformRunSpec) { s.ForceUnlock = "H1" }, nil)
	env.runningStage(t, breaker, planStage, terrarun.StagePlan, 1)
	w := connect(t, env.storage.StateLock, planStage, http.MethodPost, "breaker", "", lockBody("B1"))
	if w.Code != http.StatusLocked || !strings.Contains(w.Body.String(), `"ID":"H1"`) || !strings.Contains(w.Body.String(), "run holder") {
		t.Fatalf("a lock request while a running stage holds it: %d %s, want 423 naming the holder", w.Code, w.Body.String())
	}
	w = connect(t, env.storage.StateLock, planStage, http.MethodDelete, "breaker", "lockID=H1", nil)
	expectStatus(t, w, http.StatusConflict, "still running")

	// Its stage ends: the next stage takes the lock over, and says whose.
	env.setStatus(t, "holder", func(st *terrarun.TerraformRunStatus) { now := metav1.Now(); st.Stages[0].CompletionTime = &now })
	w = connect(t, env.storage.StateLock, planStage, http.MethodPost, "breaker", "", lockBody("B1"))
	expectStatus(t, w, http.StatusOK)
	if got := w.Header().Get(StateBrokenLockHeader); !strings.Contains(got, "run holder") || !strings.Contains(got, "apply stage attempt 1") {
		t.Errorf("%s = %q", StateBrokenLockHeader, got)
	}
}

// TestStateLostApplyKeepsItsLock: the lock of an apply lost with its node
// stays until a run's spec.forceUnlock names it.
func TestStateLostApplyKeepsItsLock(t *testing.T) {
	env := newTestEnvWithStates(t)
	lost := env.createRun(t, "lost", nil)
	env.runningStage(t, lost, applyStage, terrarun.StageApply, 1)
	expectStatus(t, connect(t, env.storage.StateLock, applyStage, http.MethodPost, "lost", "", lockBody("L1")), http.StatusOK)
	env.setStatus(t, "lost", func(st *terrarun.TerraformRunStatus) {
		now := metav1.Now()
		st.Stages[0].CompletionTime, st.Stages[0].Reason = &now, terrarun.ReasonExecutorLost
	})
	next := env.createRunWith(t, "next", func(s *terrarun.TerraformRunSpec) { s.ForceUnlock = "L1" }, nil)
	env.runningStage(t, next, planStage, terrarun.StagePlan, 1)
	if w := connect(t, env.storage.StateLock, planStage, http.MethodPost, "next", "", lockBody("N1")); w.Code != http.StatusLocked {
		t.Fatalf("a lock request over a lost apply's lock: %d %s, want 423", w.Code, w.Body.String())
	}
	expectStatus(t, connect(t, env.storage.StateLock, planStage, http.MethodDelete, "next", "lockID=L1", nil), http.StatusOK)
	expectStatus(t, connect(t, env.storage.StateLock, planStage, http.MethodPost, "next", "", lockBody("N1")), http.StatusOK)
}
