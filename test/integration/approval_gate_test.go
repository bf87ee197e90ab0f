package integration

import (
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
)

// TestApprovalGateUnderAttack attacks the approval gate as the run's creator
// would: through the status subresource, and by approving twice. (Uploads of
// plan parts after the plan is recorded are refused by the plan subresource;
// its unit tests cover them.)
func TestApprovalGateUnderAttack(t *testing.T) {
	e := newRunEnv(t)
	tf := map[string]string{"main.tf": `resource "terraform_data" "x" {}`}

	t.Run("a status patch does not approve", func(t *testing.T) {
		e.create(t, runManifest("patched", inline(tf, "")))
		run := e.waitPhase(t, "patched", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		patch := `{"status":{"approval":{"approvedBy":"mallory","planDigest":"` + run.Status.Plan.Digest + `"},` +
			`"conditions":[{"type":"Approved","status":"True","reason":"Approved","message":"forged","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`
		mustKubectl(t, e.Kubeconfig, "patch", "tfr", "patched", "--subresource=status", "--type=merge", "-p", patch)
		// Give the controller time to act on a forged approval.
		time.Sleep(3 * time.Second)
		got := e.waitPhase(t, "patched", time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		if got.Status.Approval != nil || applyStages(got) != 0 {
			t.Fatalf("a status patch approved the run: approval %+v, %d apply stages, phase %s", got.Status.Approval, applyStages(got), got.Status.Phase)
		}
		for _, c := range got.Status.Conditions {
			if c.Type == v1alpha1.ConditionApproved && c.Status == metav1.ConditionTrue {
				t.Errorf("a status patch set the Approved condition: %+v", c)
			}
		}
	})

	t.Run("a status patch does not replace the plan record", func(t *testing.T) {
		run := e.waitPhase(t, "patched", time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		forged := "sha256:" + strings.Repeat("f", 64)
		mustKubectl(t, e.Kubeconfig, "patch", "tfr", "patched", "--subresource=status", "--type=merge", "-p",
			`{"status":{"plan":{"digest":"`+forged+`","add":9}}}`)
		got := e.waitPhase(t, "patched", time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		if got.Status.Plan == nil || got.Status.Plan.Digest != run.Status.Plan.Digest || got.Status.Plan.Add != run.Status.Plan.Add {
			t.Fatalf("a status patch replaced the plan record: %+v, want %+v", got.Status.Plan, run.Status.Plan)
		}
	})

	t.Run("the second approval is refused and names the first approver", func(t *testing.T) {
		e.create(t, runManifest("twice", inline(tf, "  workspace: twice\n")))
		run := e.waitPhase(t, "twice", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		ctx := ctxT(t)
		runs := e.bobCfg.TerrarunV1alpha1().TerraformRuns("default")
		if _, err := runs.Approve(ctx, "twice", &v1alpha1.TerraformRunApproval{PlanDigest: run.Status.Plan.Digest, Comment: "first"}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("bob's approval: %v", err)
		}
		_, err := runs.Approve(ctx, "twice", &v1alpha1.TerraformRunApproval{PlanDigest: run.Status.Plan.Digest, Comment: "second"}, metav1.CreateOptions{})
		if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "already approved by bob") {
			t.Fatalf("a second approval: %v, want 409 naming bob", err)
		}
		done := e.waitPhase(t, "twice", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		if done.Status.Approval == nil || done.Status.Approval.ApprovedBy != "bob" || done.Status.Approval.Comment != "first" {
			t.Errorf("approval record %+v, want bob's first", done.Status.Approval)
		}
	})

	_, carol := e.user(t, "carol")
	t.Run("of two concurrent approvals exactly one is recorded", func(t *testing.T) {
		e.create(t, runManifest("race", inline(tf, "")))
		run := e.waitPhase(t, "race", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		ctx := ctxT(t)
		errs := make(chan error, 2)
		var start sync.WaitGroup
		start.Add(1)
		for _, c := range []versioned.Interface{e.bobCfg, carol} {
			go func() {
				start.Wait()
				_, err := c.TerrarunV1alpha1().TerraformRuns("default").Approve(ctx, "race", &v1alpha1.TerraformRunApproval{PlanDigest: run.Status.Plan.Digest}, metav1.CreateOptions{})
				errs <- err
			}()
		}
		start.Done()
		var ok, conflicts int
		var conflictMsg string
		for range 2 {
			switch err := <-errs; {
			case err == nil:
				ok++
			case apierrors.IsConflict(err):
				conflicts++
				conflictMsg = err.Error()
			default:
				t.Fatalf("approval: %v", err)
			}
		}
		if ok != 1 || conflicts != 1 {
			t.Fatalf("%d approvals accepted and %d refused, want 1 and 1", ok, conflicts)
		}
		done := e.waitPhase(t, "race", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		a := done.Status.Approval
		if a == nil || len(done.Status.Approvals) != 1 || !strings.Contains(conflictMsg, "already approved by "+a.ApprovedBy) {
			t.Errorf("approval %+v, approvals %+v; the refused one said %q", a, done.Status.Approvals, conflictMsg)
		}
	})

	t.Run("N-1 approvals do not apply and the creator never counts", func(t *testing.T) {
		e.create(t, runManifest("two-of-many", inline(tf, "  approval:\n    requiredApprovals: 2\n")))
		run := e.waitPhase(t, "two-of-many", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		ctx := ctxT(t)
		digest := run.Status.Plan.Digest
		approval := &v1alpha1.TerraformRunApproval{PlanDigest: digest}
		// The admin created the run; with two approvals required, the
		// creator's is refused (even for an admin).
		_, err := e.client.TerrarunV1alpha1().TerraformRuns("default").Approve(ctx, "two-of-many", approval, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "created this run") {
			t.Fatalf("the creator's approval: %v, want 403", err)
		}
		bobRuns := e.bobCfg.TerrarunV1alpha1().TerraformRuns("default")
		if _, err := bobRuns.Approve(ctx, "two-of-many", approval, metav1.CreateOptions{}); err != nil {
			t.Fatalf("bob's approval: %v", err)
		}
		_, err = bobRuns.Approve(ctx, "two-of-many", approval, metav1.CreateOptions{})
		if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "bob already approved") {
			t.Fatalf("bob's second approval: %v, want 409", err)
		}
		// Give the controller time to act on one approval of two.
		time.Sleep(3 * time.Second)
		got := e.waitPhase(t, "two-of-many", time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		if got.Status.Approval != nil || applyStages(got) != 0 || len(got.Status.Approvals) != 1 {
			t.Fatalf("one approval of two: approval %+v, approvals %+v, %d apply stages", got.Status.Approval, got.Status.Approvals, applyStages(got))
		}
		if _, err := carol.TerrarunV1alpha1().TerraformRuns("default").Approve(ctx, "two-of-many", approval, metav1.CreateOptions{}); err != nil {
			t.Fatalf("carol's approval: %v", err)
		}
		done := e.waitPhase(t, "two-of-many", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		if done.Status.Phase != v1alpha1.RunPhaseSucceeded || applyStages(done) != 1 {
			t.Fatalf("after two approvals: phase %s (%s), %d apply stages", done.Status.Phase, done.Status.Message, applyStages(done))
		}
		var who []string
		for _, a := range done.Status.Approvals {
			who = append(who, a.ApprovedBy)
		}
		if strings.Join(who, ",") != "bob,carol" {
			t.Errorf("status.approvals by %v, want bob, carol", who)
		}
	})
}
