package terraformrun

import (
	"net/http"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runrules"
)

func TestDiscard(t *testing.T) {
	env := newTestEnv(t)
	discard := func(name, comment string) (*terrarun.TerraformRun, error) {
		obj, err := env.storage.Discard.Create(requestContext(alice, "create", "discard"), name, &terrarun.TerraformRunDiscard{Comment: comment}, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		return obj.(*terrarun.TerraformRun), nil
	}

	t.Run("awaiting approval records the request", func(t *testing.T) {
		env.createRun(t, "waiting", awaitingApproval)
		run, err := discard("waiting", "not today")
		if err != nil {
			t.Fatal(err)
		}
		// The controller ends the run; the handler only records the request.
		if run.Status.Phase != terrarun.RunPhaseAwaitingApproval || run.Status.CompletionTime != nil || run.Status.Message != "Plan discarded by alice: not today" {
			t.Errorf("status = %s %v %q", run.Status.Phase, run.Status.CompletionTime, run.Status.Message)
		}
		c := meta.FindStatusCondition(run.Status.Conditions, terrarun.ConditionDiscardRequested)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != terrarun.ReasonDiscardRequested || c.Message != "Plan discarded by alice: not today" {
			t.Errorf("DiscardRequested condition = %+v", c)
		}
		again, err := discard("waiting", "twice")
		if err != nil || again.Status.Message != run.Status.Message {
			t.Errorf("a second discard: %v, message %q; want the first one kept", err, again.Status.Message)
		}
		_, err = env.storage.Approve.Create(requestContext(&user.DefaultInfo{Name: "bob"}, "create", "approve"), "waiting",
			&terrarun.TerraformRunApproval{PlanDigest: run.Status.Plan.Digest}, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
		expectAPIError(t, err, http.StatusConflict, "a discard of this plan was requested")
	})
	t.Run("an approved plan is not discarded", func(t *testing.T) {
		env.createRun(t, "approved", func(st *terrarun.TerraformRunStatus) {
			awaitingApproval(st)
			st.Approval = &terrarun.ApprovalStatus{ApprovedBy: "bob", PlanDigest: st.Plan.Digest}
		})
		_, err := discard("approved", "")
		expectAPIError(t, err, http.StatusConflict, "already approved by bob and its apply is starting; to stop it, use cancel")
	})
	t.Run("without comment", func(t *testing.T) {
		env.createRun(t, "quiet", awaitingApproval)
		run, err := discard("quiet", "")
		if err != nil {
			t.Fatal(err)
		}
		if run.Status.Message != "Plan discarded by alice." {
			t.Errorf("message = %q", run.Status.Message)
		}
	})
	for _, tc := range []struct {
		phase terrarun.RunPhase
		want  string
	}{
		{terrarun.RunPhasePending, "the run is Pending; only a plan that is AwaitingApproval can be discarded; to stop a stage in flight, use cancel"},
		{terrarun.RunPhasePlanning, "the run is Planning; only a plan that is AwaitingApproval can be discarded; to stop a stage in flight, use cancel"},
		{terrarun.RunPhaseApplying, "the run is Applying; only a plan that is AwaitingApproval can be discarded; to stop a stage in flight, use cancel"},
		{terrarun.RunPhaseSucceeded, "the run is Succeeded; only a plan that is AwaitingApproval can be discarded"},
		{terrarun.RunPhaseDiscarded, "the run is Discarded; only a plan that is AwaitingApproval can be discarded"},
	} {
		t.Run("refused when "+string(tc.phase), func(t *testing.T) {
			name := "in-" + strings.ToLower(string(tc.phase))
			env.createRun(t, name, func(st *terrarun.TerraformRunStatus) { st.Phase = tc.phase })
			_, err := discard(name, "")
			expectAPIError(t, err, http.StatusConflict, tc.want)
			if runrules.Final(v1alpha1.RunPhase(tc.phase)) && strings.Contains(err.Error(), "use cancel") {
				t.Errorf("a run that ended is told to cancel: %v", err)
			}
		})
	}
	t.Run("comment too long", func(t *testing.T) {
		env.createRun(t, "chatty", awaitingApproval)
		_, err := discard("chatty", strings.Repeat("x", 1025))
		expectAPIError(t, err, http.StatusUnprocessableEntity, "comment")
	})
}
