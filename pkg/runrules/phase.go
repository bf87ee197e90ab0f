package runrules

import "github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"

// Phase is run's phase, Pending before the controller has written one.
func Phase(run *v1alpha1.TerraformRun) v1alpha1.RunPhase {
	return PhaseOf(run.Status.Phase)
}

// PhaseOf is the phase a run whose status.phase is p is in: Pending when p
// is empty.
func PhaseOf(p v1alpha1.RunPhase) v1alpha1.RunPhase {
	if p == "" {
		return v1alpha1.RunPhasePending
	}
	return p
}

// Final says whether a run in phase p has ended: nothing about it changes
// any more but its deletion.
func Final(p v1alpha1.RunPhase) bool {
	switch p {
	case v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseCanceled, v1alpha1.RunPhaseDiscarded:
		return true
	}
	return false
}

// Finished says whether run has ended.
func Finished(run *v1alpha1.TerraformRun) bool {
	return Final(run.Status.Phase)
}

// CurrentStage is the latest execution of stage name, or nil.
func CurrentStage(run *v1alpha1.TerraformRun, name v1alpha1.StageName) *v1alpha1.StageStatus {
	for i := len(run.Status.Stages) - 1; i >= 0; i-- {
		if run.Status.Stages[i].Name == name {
			return &run.Status.Stages[i]
		}
	}
	return nil
}

// PlanStart places run's last plan stage that started, whose plan read the
// state when it started, among the stages on its state.
func PlanStart(run *v1alpha1.TerraformRun) (StageOrder, bool) {
	for i := len(run.Status.Stages) - 1; i >= 0; i-- {
		if st := &run.Status.Stages[i]; st.Name == v1alpha1.StagePlan && st.StartTime != nil {
			return Order(st), true
		}
	}
	return StageOrder{}, false
}

// WaitsToStart says whether run waits for its plan stage to start.
func WaitsToStart(run *v1alpha1.TerraformRun) bool {
	p := Phase(run)
	return (p == v1alpha1.RunPhasePending || p == v1alpha1.RunPhaseQueued) &&
		run.DeletionTimestamp == nil && !conditionTrue(run, v1alpha1.ConditionCancelRequested)
}

// ApprovedToApply says whether run's plan is approved and its apply has not
// started yet: status.approval, which the approve subresource records only
// once the plan is Approved, and the run controller only for Auto mode.
func ApprovedToApply(run *v1alpha1.TerraformRun) bool {
	return Phase(run) == v1alpha1.RunPhaseAwaitingApproval && run.Status.Approval != nil && run.DeletionTimestamp == nil
}

func conditionTrue(run *v1alpha1.TerraformRun, typ string) bool {
	for _, c := range run.Status.Conditions {
		if c.Type == typ {
			return c.Status == "True"
		}
	}
	return false
}
