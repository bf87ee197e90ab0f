package terraformrun

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

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
		expectAPIError(t, err, http.StatusConflict, "plan digest mismatch: you approved "+otherDigest+" but the run's plan is "+testDigest)
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

// TestApproveDryRun: a dry run of an approval answers as the approval
// would, its refusals included, and records nothing: a client that asks
// only whether it may approve never approves.
func TestApproveDryRun(t *testing.T) {
	env := newTestEnv(t)
	env.createRun(t, "web", awaitingApproval)
	approve := func(digest string, dryRun ...string) (*terrarun.TerraformRun, error) {
		obj, err := env.storage.Approve.Create(requestContext(&user.DefaultInfo{Name: "bob"}, "create", "approve"), "web",
			&terrarun.TerraformRunApproval{PlanDigest: digest}, rest.ValidateAllObjectFunc, &metav1.CreateOptions{DryRun: dryRun})
		if err != nil {
			return nil, err
		}
		return obj.(*terrarun.TerraformRun), nil
	}
	got, err := approve(testDigest, metav1.DryRunAll)
	if err != nil || got.Status.Approval == nil || got.Status.Approval.ApprovedBy != "bob" {
		t.Fatalf("dry run: %+v, %v; want the approval it would record", got, err)
	}
	if run := env.getRun(t, "web"); run.Status.Approval != nil || len(run.Status.Approvals) != 0 {
		t.Fatalf("a dry run recorded an approval: %+v", run.Status)
	}
	_, err = approve(otherDigest, metav1.DryRunAll)
	expectAPIError(t, err, http.StatusConflict, "plan digest mismatch")
	if _, err := approve(testDigest); err != nil {
		t.Fatal(err)
	}
	if run := env.getRun(t, "web"); run.Status.Approval == nil {
		t.Errorf("the approval after the dry run was not recorded")
	}
}

// TestApproveNOfM: with requiredApprovals N, N-1 approvals do not approve the
// plan, the creator may not approve, nobody counts twice, and the Nth
// distinct approval completes the record. Every approval is kept.
func TestApproveNOfM(t *testing.T) {
	env := newTestEnv(t)
	env.createRunWith(t, "web", func(s *terrarun.TerraformRunSpec) { s.Approval.RequiredApprovals = 3 }, awaitingApproval)
	approve := func(who string) (*terrarun.TerraformRun, error) {
		obj, err := env.storage.Approve.Create(requestContext(&user.DefaultInfo{Name: who}, "create", "approve"), "web",
			&terrarun.TerraformRunApproval{PlanDigest: testDigest, Comment: "by " + who}, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		return obj.(*terrarun.TerraformRun), nil
	}
	// alice created the run: her approval is refused, and recorded nowhere.
	_, err := approve("alice")
	expectAPIError(t, err, http.StatusForbidden, "alice created this run, and it needs 3 approvals from other users")

	run, err := approve("bob")
	if err != nil {
		t.Fatal(err)
	}
	if run.Status.Approval != nil {
		t.Fatalf("1 of 3 approvals approved the plan: %+v", run.Status.Approval)
	}
	c := meta.FindStatusCondition(run.Status.Conditions, terrarun.ConditionApproved)
	if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "is approved by bob; it still needs 2 more approval(s) from other users (1 of 3)") {
		t.Errorf("Approved condition after one approval = %+v", c)
	}
	_, err = approve("bob")
	expectAPIError(t, err, http.StatusConflict, "bob already approved plan sha256:0123456789ab; it still needs 2 more approval(s) from other users (1 of 3)")

	if run, err = approve("carol"); err != nil {
		t.Fatal(err)
	}
	if run.Status.Approval != nil {
		t.Fatalf("2 of 3 approvals approved the plan: %+v", run.Status.Approval)
	}
	if run, err = approve("dave"); err != nil {
		t.Fatal(err)
	}
	if a := run.Status.Approval; a == nil || a.ApprovedBy != "dave" || a.PlanDigest != testDigest {
		t.Fatalf("approval after 3 of 3 = %+v, want dave's completing record", a)
	}
	c = meta.FindStatusCondition(run.Status.Conditions, terrarun.ConditionApproved)
	if c == nil || c.Status != metav1.ConditionTrue || c.Message != "Plan sha256:0123456789ab approved by bob, carol, dave." {
		t.Errorf("Approved condition = %+v", c)
	}
	stored := env.getRun(t, "web")
	var got []string
	for _, a := range stored.Status.Approvals {
		got = append(got, a.ApprovedBy+":"+a.Comment)
	}
	if strings.Join(got, ",") != "bob:by bob,carol:by carol,dave:by dave" {
		t.Errorf("status.approvals = %v", got)
	}
	_, err = approve("erin")
	expectAPIError(t, err, http.StatusConflict, "already approved by bob, carol, dave")

	// A write to the status subresource cannot add approvals, or remove them.
	forged := stored.DeepCopy()
	forged.Status.Approvals = append(forged.Status.Approvals[:1], terrarun.ApprovalStatus{ApprovedBy: "mallory", PlanDigest: testDigest})
	if _, _, err := env.storage.Status.Update(requestContext(alice, "update", "status"), "web", rest.DefaultUpdatedObjectInfo(forged),
		rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := len(env.getRun(t, "web").Status.Approvals); n != 3 {
		t.Errorf("a status write changed status.approvals: %d records", n)
	}
}

// TestApproveRunBeingDeleted: a plan whose run is being deleted (held by a
// finalizer) is not approved: its apply would never start.
func TestApproveRunBeingDeleted(t *testing.T) {
	env := newTestEnv(t)
	run := env.createRun(t, "going", awaitingApproval)
	run.Finalizers = []string{"example.com/hold"}
	if _, _, err := env.storage.Run.Update(requestContext(alice, "update", ""), "going", rest.DefaultUpdatedObjectInfo(run),
		rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := env.storage.Run.Delete(requestContext(alice, "delete", ""), "going", rest.ValidateAllObjectFunc, &metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := env.storage.Approve.Create(requestContext(&user.DefaultInfo{Name: "bob"}, "create", "approve"), "going",
		&terrarun.TerraformRunApproval{PlanDigest: testDigest}, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	expectAPIError(t, err, http.StatusConflict, "the run is being deleted; its plan will not be applied")
}

// TestApproveStaleState: a plan is refused at approval time (409, naming the
// run) when another run on the same Terraform state applied after the plan
// was made, or is about to; runs on other states do not matter.
func TestApproveStaleState(t *testing.T) {
	env := newTestEnv(t)
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: t0.Add(d)} }
	planned := func(st *terrarun.TerraformRunStatus) {
		awaitingApproval(st)
		st.Stages = []terrarun.StageStatus{{Name: terrarun.StagePlan, Attempt: 1, StartTime: at(0), CompletionTime: at(time.Minute)}}
	}
	workspace := func(ws string, more ...func(*terrarun.TerraformRunSpec)) func(*terrarun.TerraformRunSpec) {
		return func(s *terrarun.TerraformRunSpec) {
			s.Workspace = ws
			for _, m := range more {
				m(s)
			}
		}
	}
	approve := func(name string) error {
		_, err := env.storage.Approve.Create(requestContext(alice, "create", "approve"), name, &terrarun.TerraformRunApproval{PlanDigest: testDigest}, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
		return err
	}
	expectRefused := func(t *testing.T, name string, msgs ...string) {
		t.Helper()
		expectAPIError(t, approve(name), http.StatusConflict, msgs...)
		if run := env.getRun(t, name); run.Status.Approval != nil || len(run.Status.Approvals) != 0 {
			t.Errorf("a refused approval was recorded: %+v", run.Status.Approvals)
		}
	}

	t.Run("another run applied after the plan", func(t *testing.T) {
		env.createRunWith(t, "a1", workspace("one"), planned)
		env.createRunWith(t, "b1", workspace("one"), func(st *terrarun.TerraformRunStatus) {
			st.Phase = terrarun.RunPhaseSucceeded
			st.Stages = []terrarun.StageStatus{{Name: terrarun.StagePlan, Attempt: 1, StartTime: at(2 * time.Minute)}, {Name: terrarun.StageApply, Attempt: 1, StartTime: at(3 * time.Minute)}}
		})
		expectRefused(t, "a1", "the plan is stale: run b1 applied to the same state (workspace one of the default backend) at 2026-11-25T10:03:00Z", "create a new run")
	})
	t.Run("another run applies now, or first", func(t *testing.T) {
		env.createRunWith(t, "a2", workspace("two"), planned)
		env.createRunWith(t, "b2", workspace("two"), func(st *terrarun.TerraformRunStatus) { st.Phase = terrarun.RunPhaseApplying })
		expectRefused(t, "a2", "run b2 is applying to the same state")

		env.createRunWith(t, "a3", workspace("three"), planned)
		env.createRunWith(t, "b3", workspace("three"), func(st *terrarun.TerraformRunStatus) {
			awaitingApproval(st)
			st.Approval = &terrarun.ApprovalStatus{ApprovedBy: "bob", PlanDigest: testDigest, ApprovedAt: at(time.Minute)}
		})
		expectRefused(t, "a3", "run b3's approved plan applies to the same state (workspace three of the default backend) first")

		env.createRunWith(t, "a4", workspace("four"), planned)
		env.createRunWith(t, "b4", workspace("four", func(s *terrarun.TerraformRunSpec) { s.Approval.Mode = terrarun.ApprovalModeAuto }),
			func(st *terrarun.TerraformRunStatus) { st.Phase = terrarun.RunPhasePlanning })
		expectRefused(t, "a4", "run b4 is planning on the same state", "applies without approval")
	})
	t.Run("other states, earlier applies and speculative plans do not matter", func(t *testing.T) {
		env.createRunWith(t, "a5", workspace("five"), planned)
		env.createRunWith(t, "elsewhere", workspace("five", func(s *terrarun.TerraformRunSpec) {
			s.Backend = &terrarun.Backend{Type: "s3", Config: map[string]string{"bucket": "b", "key": "k", "region": "eu-west-1"}}
		}), func(st *terrarun.TerraformRunStatus) { st.Phase = terrarun.RunPhaseApplying })
		env.createRunWith(t, "before", workspace("five"), func(st *terrarun.TerraformRunStatus) {
			st.Phase = terrarun.RunPhaseSucceeded
			st.Stages = []terrarun.StageStatus{{Name: terrarun.StageApply, Attempt: 1, StartTime: at(-time.Minute)}}
		})
		// Ended in the second the plan started: before it, as runs take turns.
		env.createRunWith(t, "just-before", workspace("five"), func(st *terrarun.TerraformRunStatus) {
			st.Phase = terrarun.RunPhaseSucceeded
			st.Stages = []terrarun.StageStatus{{Name: terrarun.StageApply, Attempt: 1, StartTime: at(0), CompletionTime: at(0)}}
		})
		env.createRunWith(t, "speculative", workspace("five", func(s *terrarun.TerraformRunSpec) { s.Operation = terrarun.OperationPlan }),
			func(st *terrarun.TerraformRunStatus) { st.Phase = terrarun.RunPhasePlanning })
		if err := approve("a5"); err != nil {
			t.Fatalf("approving a current plan: %v", err)
		}
	})
}
