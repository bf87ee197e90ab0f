package terraformrun

import (
	"net/http"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

func TestCancel(t *testing.T) {
	env := newTestEnv(t)
	cancel := func(name, comment string) (*terrarun.TerraformRun, error) {
		obj, err := env.storage.Cancel.Create(requestContext(alice, "create", "cancel"), name, &terrarun.TerraformRunCancel{Comment: comment}, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		return obj.(*terrarun.TerraformRun), nil
	}

	t.Run("a pending run is asked to end", func(t *testing.T) {
		env.createRun(t, "pending", nil)
		run, err := cancel("pending", "wrong branch")
		if err != nil {
			t.Fatal(err)
		}
		// The controller ends the run; the handler only records the request.
		c := meta.FindStatusCondition(run.Status.Conditions, terrarun.ConditionCancelRequested)
		if run.Status.CompletionTime != nil || c == nil || c.Status != metav1.ConditionTrue || c.Message != "Canceled by alice: wrong branch" ||
			run.Status.Message != "Canceled by alice: wrong branch The run ends before it starts." {
			t.Errorf("status = %s %v %q, CancelRequested %+v", run.Status.Phase, run.Status.CompletionTime, run.Status.Message, c)
		}
	})
	for _, phase := range []terrarun.RunPhase{terrarun.RunPhasePlanning, terrarun.RunPhaseApplying} {
		t.Run("a running stage is asked to stop when "+string(phase), func(t *testing.T) {
			name := strings.ToLower(string(phase))
			env.createRun(t, name, func(st *terrarun.TerraformRunStatus) { st.Phase = phase })
			run, err := cancel(name, "")
			if err != nil {
				t.Fatal(err)
			}
			c := meta.FindStatusCondition(run.Status.Conditions, terrarun.ConditionCancelRequested)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != terrarun.ReasonCancelRequested || c.Message != "Canceled by alice." {
				t.Errorf("CancelRequested condition = %+v", c)
			}
			if run.Status.Phase != phase || run.Status.Message != "Canceled by alice. Stopping the running stage." {
				t.Errorf("status = %s %q; the controller ends the run, not cancel", run.Status.Phase, run.Status.Message)
			}
			// A second cancel changes nothing.
			again, err := cancel(name, "again")
			if err != nil {
				t.Fatal(err)
			}
			if again.ResourceVersion != run.ResourceVersion {
				t.Errorf("a second cancel wrote the run: %q", again.Status.Message)
			}
		})
	}
	t.Run("awaiting approval is discarded, not canceled", func(t *testing.T) {
		env.createRun(t, "waiting", awaitingApproval)
		_, err := cancel("waiting", "")
		expectAPIError(t, err, http.StatusConflict, "the run is AwaitingApproval and no stage is running; to reject the plan, use discard")
	})
	for _, phase := range []terrarun.RunPhase{terrarun.RunPhaseSucceeded, terrarun.RunPhaseFailed, terrarun.RunPhaseCanceled, terrarun.RunPhaseDiscarded} {
		t.Run("an ended run when "+string(phase), func(t *testing.T) {
			name := "ended-" + strings.ToLower(string(phase))
			env.createRun(t, name, func(st *terrarun.TerraformRunStatus) { st.Phase = phase })
			_, err := cancel(name, "")
			expectAPIError(t, err, http.StatusConflict, "the run already ended "+string(phase)+"; there is nothing to cancel")
		})
	}
	t.Run("comment too long", func(t *testing.T) {
		env.createRun(t, "chatty", nil)
		_, err := cancel("chatty", strings.Repeat("x", 1025))
		expectAPIError(t, err, http.StatusUnprocessableEntity, "comment")
	})
}
