package terraformrun

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

const (
	testDigest  = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	otherDigest = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

func awaitingApproval(st *terrarun.TerraformRunStatus) {
	st.Phase = terrarun.RunPhaseAwaitingApproval
	st.Plan = &terrarun.PlanSummary{Digest: testDigest, Add: 1, HasChanges: true}
}

func TestApprove(t *testing.T) {
	env := newTestEnv(t)
	approve := func(u user.Info, name string, a *terrarun.TerraformRunApproval) (*terrarun.TerraformRun, error) {
		obj, err := env.storage.Approve.Create(requestContext(u, "create", "approve"), name, a, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		return obj.(*terrarun.TerraformRun), nil
	}

	t.Run("wrong phase", func(t *testing.T) {
		env.createRun(t, "planning", func(st *terrarun.TerraformRunStatus) { st.Phase = terrarun.RunPhasePlanning })
		_, err := approve(alice, "planning", &terrarun.TerraformRunApproval{PlanDigest: testDigest})
		expectAPIError(t, err, http.StatusConflict, "the run is Planning; a plan can be approved only while the run is AwaitingApproval")
	})
	t.Run("pending run", func(t *testing.T) {
		env.createRun(t, "fresh", nil)
		_, err := approve(alice, "fresh", &terrarun.TerraformRunApproval{PlanDigest: testDigest})
		expectAPIError(t, err, http.StatusConflict, "the run is Pending")
	})
	t.Run("stale digest", func(t *testing.T) {
		env.createRun(t, "stale", awaitingApproval)
		_, err := approve(alice, "stale", &terrarun.TerraformRunApproval{PlanDigest: otherDigest})
		expectAPIError(t, err, http.StatusConflict, "stale plan digest: you approved "+otherDigest+" but the run's plan is "+testDigest)
		if run := env.getRun(t, "stale"); run.Status.Approval != nil {
			t.Errorf("a stale approval was recorded: %+v", run.Status.Approval)
		}
	})
	t.Run("right digest records the request user", func(t *testing.T) {
		env.createRun(t, "ok", awaitingApproval)
		run, err := approve(alice, "ok", &terrarun.TerraformRunApproval{PlanDigest: testDigest, Comment: "lgtm"})
		if err != nil {
			t.Fatal(err)
		}
		if a := run.Status.Approval; a == nil || a.ApprovedBy != "alice" || a.PlanDigest != testDigest || a.Comment != "lgtm" || a.ApprovedAt == nil {
			t.Fatalf("approval = %+v, want alice's of %s", run.Status.Approval, testDigest)
		}
		c := meta.FindStatusCondition(run.Status.Conditions, terrarun.ConditionApproved)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != terrarun.ReasonApproved || c.Message != "Plan sha256:0123456789ab approved by alice." {
			t.Errorf("Approved condition = %+v", c)
		}
		if run.Status.Message != "Approved by alice; the apply starts shortly." {
			t.Errorf("message = %q", run.Status.Message)
		}
		if stored := env.getRun(t, "ok"); stored.Status.Approval == nil || stored.Status.Approval.ApprovedBy != "alice" {
			t.Errorf("the approval was not stored: %+v", stored.Status.Approval)
		}
	})
	t.Run("the approver is never read from the body", func(t *testing.T) {
		env.createRun(t, "anonymous", awaitingApproval)
		_, err := approve(nil, "anonymous", &terrarun.TerraformRunApproval{PlanDigest: testDigest})
		expectAPIError(t, err, http.StatusForbidden, "TerraformRunApproval requires an authenticated user")
	})
	t.Run("invalid body", func(t *testing.T) {
		env.createRun(t, "invalid", awaitingApproval)
		_, err := approve(alice, "invalid", &terrarun.TerraformRunApproval{PlanDigest: "sha1:abc", Comment: strings.Repeat("x", 1025)})
		expectAPIError(t, err, http.StatusUnprocessableEntity, "planDigest", "comment")
	})
	t.Run("body names another run", func(t *testing.T) {
		a := &terrarun.TerraformRunApproval{ObjectMeta: metav1.ObjectMeta{Name: "other"}, PlanDigest: testDigest}
		_, err := approve(alice, "ok", a)
		expectAPIError(t, err, http.StatusBadRequest, `TerraformRunApproval names run "other" but was sent to run "ok"`)
	})
	t.Run("admission refuses", func(t *testing.T) {
		env.createRun(t, "refused", awaitingApproval)
		_, err := env.storage.Approve.Create(requestContext(alice, "create", "approve"), "refused", &terrarun.TerraformRunApproval{PlanDigest: testDigest},
			func(_ context.Context, _ runtime.Object) error {
				return apierrors.NewForbidden(terrarun.Resource("terraformruns/approve"), "refused", errors.New("alice created this run"))
			},
			&metav1.CreateOptions{})
		expectAPIError(t, err, http.StatusForbidden, "alice created this run")
	})
	t.Run("missing run", func(t *testing.T) {
		_, err := approve(alice, "nothing", &terrarun.TerraformRunApproval{PlanDigest: testDigest})
		expectAPIError(t, err, http.StatusNotFound)
	})
}

func TestApproveOnce(t *testing.T) {
	env := newTestEnv(t)
	env.createRun(t, "web", awaitingApproval)
	approve := func(who string) error {
		_, err := env.storage.Approve.Create(requestContext(&user.DefaultInfo{Name: who}, "create", "approve"), "web",
			&terrarun.TerraformRunApproval{PlanDigest: testDigest, Comment: who}, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
		return err
	}
	if err := approve("bob"); err != nil {
		t.Fatal(err)
	}
	expectAPIError(t, approve("carol"), http.StatusConflict, "already approved by bob")
	if a := env.getRun(t, "web").Status.Approval; a == nil || a.ApprovedBy != "bob" || a.Comment != "bob" {
		t.Errorf("approval %+v, want bob's", a)
	}
}
