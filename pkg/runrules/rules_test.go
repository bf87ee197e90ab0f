package runrules

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

const (
	digest = "sha256:aaaa"
	other  = "sha256:bbbb"
)

// newRun is a Manual run created by alice that needs required approvals.
func newRun(name string, required int32) *v1alpha1.TerraformRun {
	return &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID(name + "-uid")},
		Spec: v1alpha1.TerraformRunSpec{
			Creator:     &v1alpha1.Creator{Username: "alice"},
			RequestedBy: []string{"carol"},
			Approval:    v1alpha1.Approval{Mode: v1alpha1.ApprovalModeManual, RequiredApprovals: required},
		},
		Status: v1alpha1.TerraformRunStatus{Phase: v1alpha1.RunPhaseAwaitingApproval},
	}
}

func approvals(run *v1alpha1.TerraformRun, users ...string) {
	for _, u := range users {
		run.Status.Approvals = append(run.Status.Approvals, v1alpha1.ApprovalStatus{ApprovedBy: u, PlanDigest: digest})
	}
}

func TestApprovers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		required int32
		records  []v1alpha1.ApprovalStatus
		want     []string
	}{
		{"one approval of the digest", 1, []v1alpha1.ApprovalStatus{{ApprovedBy: "bob", PlanDigest: digest}}, []string{"bob"}},
		{"another digest does not count", 2, []v1alpha1.ApprovalStatus{{ApprovedBy: "bob", PlanDigest: other}, {ApprovedBy: "dave", PlanDigest: digest}}, []string{"dave"}},
		{"a user counts once", 2, []v1alpha1.ApprovalStatus{{ApprovedBy: "bob", PlanDigest: digest}, {ApprovedBy: "bob", PlanDigest: digest}}, []string{"bob"}},
		{"the server's Auto approval is nobody's", 1, []v1alpha1.ApprovalStatus{{ApprovedBy: v1alpha1.AutoApprover, PlanDigest: digest}}, nil},
		{"with one required, the creator counts", 1, []v1alpha1.ApprovalStatus{{ApprovedBy: "alice", PlanDigest: digest}}, []string{"alice"}},
		{"with several required, the creator never counts", 2, []v1alpha1.ApprovalStatus{{ApprovedBy: "alice", PlanDigest: digest}, {ApprovedBy: "bob", PlanDigest: digest}}, []string{"bob"}},
		{"with several required, who requested the run never counts", 2, []v1alpha1.ApprovalStatus{{ApprovedBy: "carol", PlanDigest: digest}, {ApprovedBy: "bob", PlanDigest: digest}}, []string{"bob"}},
		{"an empty user is nobody", 1, []v1alpha1.ApprovalStatus{{PlanDigest: digest}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := newRun("r", tc.required)
			run.Status.Approvals = tc.records
			if got := Approvers(run, digest); !slices.Equal(got, tc.want) {
				t.Errorf("Approvers = %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("status.approval alone counts (runs approved before status.approvals)", func(t *testing.T) {
		run := newRun("r", 1)
		run.Status.Approval = &v1alpha1.ApprovalStatus{ApprovedBy: "bob", PlanDigest: digest}
		if got := Approvers(run, digest); !slices.Equal(got, []string{"bob"}) {
			t.Errorf("Approvers = %q, want [bob]", got)
		}
	})
	t.Run("no digest, no approvers", func(t *testing.T) {
		run := newRun("r", 1)
		approvals(run, "bob")
		if got := Approvers(run, ""); got != nil {
			t.Errorf("Approvers of no digest = %q", got)
		}
	})
}

func TestApproved(t *testing.T) {
	record := func(run *v1alpha1.TerraformRun, by, d string) {
		run.Status.Approval = &v1alpha1.ApprovalStatus{ApprovedBy: by, PlanDigest: d}
	}
	two := newRun("two", 2)
	approvals(two, "bob")
	record(two, "bob", digest)
	if Approved(two, digest) {
		t.Error("one approval of two approves the plan")
	}
	approvals(two, "alice")
	if Approved(two, digest) {
		t.Error("the creator's approval completes a plan that needs two")
	}
	approvals(two, "dave")
	if !Approved(two, digest) {
		t.Error("two distinct approvals of the digest do not approve the plan")
	}
	if Approved(two, other) {
		t.Error("approvals of one digest approve another")
	}

	auto := newRun("auto", 1)
	record(auto, v1alpha1.AutoApprover, digest)
	if Approved(auto, digest) {
		t.Error("an Auto approval approves a Manual run")
	}
	auto.Spec.Approval.Mode = v1alpha1.ApprovalModeAuto
	if !Approved(auto, digest) {
		t.Error("an Auto approval does not approve an Auto run")
	}
	none := newRun("none", 1)
	approvals(none, "bob")
	if Approved(none, digest) {
		t.Error("a plan without status.approval is approved")
	}
}

func TestRequested(t *testing.T) {
	run := newRun("r", 1)
	for user, want := range map[string]bool{"alice": true, "carol": true, "bob": false} {
		if how, got := Requested(run, user); got != want || got && how == "" {
			t.Errorf("Requested(%s) = %q, %v; want %v with a reason", user, how, got, want)
		}
	}
	run.Spec.Creator = nil
	if _, got := Requested(run, "alice"); got {
		t.Error("a run without a creator was requested by alice")
	}
}

func TestPhase(t *testing.T) {
	run := newRun("r", 1)
	run.Status.Phase = ""
	if Phase(run) != v1alpha1.RunPhasePending || Finished(run) {
		t.Errorf("a run without a phase is %s, finished %v", Phase(run), Finished(run))
	}
	for p, final := range map[v1alpha1.RunPhase]bool{
		v1alpha1.RunPhasePending: false, v1alpha1.RunPhaseQueued: false, v1alpha1.RunPhasePlanning: false,
		v1alpha1.RunPhaseAwaitingApproval: false, v1alpha1.RunPhaseApplying: false,
		v1alpha1.RunPhaseSucceeded: true, v1alpha1.RunPhaseFailed: true, v1alpha1.RunPhaseCanceled: true, v1alpha1.RunPhaseDiscarded: true,
	} {
		run.Status.Phase = p
		if Finished(run) != final {
			t.Errorf("Finished in phase %s = %v, want %v", p, !final, final)
		}
	}
}

func TestCarrier(t *testing.T) {
	run := newRun("r", 1)
	run.Spec.Approval.Mode = v1alpha1.ApprovalModeAuto
	if !CarriesApply(run) {
		t.Error("an Auto apply run's plan does not carry its apply")
	}
	run.Spec.Operation = v1alpha1.OperationPlan
	if CarriesApply(run) {
		t.Error("a speculative plan carries an apply")
	}

	run.Status.Stages = []v1alpha1.StageStatus{
		{Name: v1alpha1.StagePlan, Attempt: 1, Job: "r-plan-1"},
		{Name: v1alpha1.StagePlan, Attempt: 2, Job: "r-plan-2"},
	}
	if Carrier(run) != 0 {
		t.Error("a run without an apply stage has a carrier")
	}
	if s, a := WritesFor(run, v1alpha1.StagePlan, 2); s != v1alpha1.StagePlan || a != 2 {
		t.Errorf("a plan execution without an apply writes for %s %d", s, a)
	}
	// The apply stage records its carrier; an equal job name alone is not one.
	run.Status.Stages = append(run.Status.Stages, v1alpha1.StageStatus{Name: v1alpha1.StageApply, Attempt: 1, Job: "r-plan-1"})
	if Carrier(run) != 0 {
		t.Error("an apply stage named like a plan execution counts as carried")
	}
	if s, a, carried := Execution(CurrentStage(run, v1alpha1.StageApply)); carried || s != v1alpha1.StageApply || a != 1 {
		t.Errorf("an apply of its own runs in %s %d (carried %v)", s, a, carried)
	}
	run.Status.Stages[2] = v1alpha1.StageStatus{Name: v1alpha1.StageApply, Attempt: 1, Job: "r-plan-2", CarrierAttempt: 2}
	if Carrier(run) != 2 {
		t.Errorf("Carrier = %d, want plan attempt 2", Carrier(run))
	}
	if s, a := WritesFor(run, v1alpha1.StagePlan, 2); s != v1alpha1.StageApply || a != 1 {
		t.Errorf("the carrying plan execution writes for %s %d, want apply 1", s, a)
	}
	if s, a := WritesFor(run, v1alpha1.StagePlan, 1); s != v1alpha1.StagePlan || a != 1 {
		t.Errorf("an earlier plan execution writes for %s %d, want plan 1", s, a)
	}
	if s, a, carried := Execution(CurrentStage(run, v1alpha1.StageApply)); !carried || s != v1alpha1.StagePlan || a != 2 {
		t.Errorf("the carried apply runs in %s %d (carried %v), want plan 2", s, a, carried)
	}
}

func TestStaleAndBusy(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: t0.Add(d)} }
	run := newRun("mine", 1)
	if o, _ := AppliedSince(run, nil, false); o != nil {
		t.Error("a run without a plan stage is stale")
	}
	run.Status.Stages = []v1alpha1.StageStatus{
		{Name: v1alpha1.StagePlan, Attempt: 1, StartTime: at(-time.Hour), StartRevision: 5},
		{Name: v1alpha1.StagePlan, Attempt: 2, StartTime: at(0), StartRevision: 10},
	}
	if p, ok := PlanStart(run); !ok || p.Revision != 10 {
		t.Errorf("PlanStart = %+v, %v; want the last plan stage's", p, ok)
	}
	applied := func(name string, rev int64, ended bool) *v1alpha1.TerraformRun {
		o := newRun(name, 1)
		o.Status.Phase = v1alpha1.RunPhaseApplying
		st := v1alpha1.StageStatus{Name: v1alpha1.StageApply, Attempt: 1, StartTime: at(time.Minute), StartRevision: rev}
		if ended {
			o.Status.Phase = v1alpha1.RunPhaseSucceeded
			st.CompletionTime = at(2 * time.Minute)
		}
		o.Status.Stages = []v1alpha1.StageStatus{st}
		return o
	}
	before, after, running := applied("before", 7, true), applied("after", 12, true), applied("running", 13, false)
	if o, _ := AppliedSince(run, []*v1alpha1.TerraformRun{before}, false); o != nil {
		t.Error("an apply before the plan makes it stale")
	}
	if o, st := AppliedSince(run, []*v1alpha1.TerraformRun{before, after}, true); o != after || st.StartRevision != 12 {
		t.Errorf("AppliedSince = %v, want run after", o)
	}
	if o, _ := AppliedSince(run, []*v1alpha1.TerraformRun{running}, true); o != nil {
		t.Error("with ended, an apply in flight makes the plan stale")
	}
	if o, _ := AppliedSince(run, []*v1alpha1.TerraformRun{running}, false); o != running {
		t.Error("an apply in flight since the plan does not make it stale")
	}

	if o, _ := Busy(run, []*v1alpha1.TerraformRun{before, after}); o != nil {
		t.Errorf("finished runs hold the state: %s", o.Name)
	}
	if o, how := Busy(run, []*v1alpha1.TerraformRun{running}); o != running || how == "" {
		t.Error("a run that applies now does not hold the state")
	}
	approved := newRun("approved", 1)
	approved.Status.Approval = &v1alpha1.ApprovalStatus{ApprovedBy: "bob", PlanDigest: digest}
	if o, _ := Busy(run, []*v1alpha1.TerraformRun{approved}); o != approved {
		t.Error("an approved plan waiting to apply does not hold the state")
	}
	approved.DeletionTimestamp = at(0)
	if o, _ := Busy(run, []*v1alpha1.TerraformRun{approved}); o != nil {
		t.Error("an approved plan of a run being deleted holds the state")
	}
	auto := newRun("auto", 1)
	auto.Spec.Approval.Mode = v1alpha1.ApprovalModeAuto
	auto.Status.Phase = v1alpha1.RunPhasePlanning
	if o, _ := Busy(run, []*v1alpha1.TerraformRun{auto}); o != auto {
		t.Error("an Auto run that plans does not hold the state")
	}
	auto.Spec.Operation = v1alpha1.OperationPlan
	if o, _ := Busy(run, []*v1alpha1.TerraformRun{auto}); o != nil {
		t.Error("a speculative plan holds the state")
	}
	if o, _ := Busy(run, []*v1alpha1.TerraformRun{run}); o != nil {
		t.Error("a run holds its own state")
	}
}

// TestFromInternal: the rules see what the registry's internal run says.
func TestFromInternal(t *testing.T) {
	in := &terrarun.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "r", UID: "u"},
		Spec:       terrarun.TerraformRunSpec{Creator: &terrarun.Creator{Username: "alice"}, Approval: terrarun.Approval{RequiredApprovals: 2}},
		Status: terrarun.TerraformRunStatus{
			Phase:     terrarun.RunPhaseApplying,
			Approvals: []terrarun.ApprovalStatus{{ApprovedBy: "bob", PlanDigest: digest}, {ApprovedBy: "alice", PlanDigest: digest}},
			Stages:    []terrarun.StageStatus{{Name: terrarun.StagePlan, Attempt: 1}, {Name: terrarun.StageApply, Attempt: 1, CarrierAttempt: 1}},
		},
	}
	v := FromInternal(in)
	if Phase(v) != v1alpha1.RunPhaseApplying || Carrier(v) != 1 || !slices.Equal(Approvers(v, digest), []string{"bob"}) {
		t.Errorf("converted run: phase %s, carrier %d, approvers %q", Phase(v), Carrier(v), Approvers(v, digest))
	}
}
