package runrules

import "github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"

// CarriesApply says whether run's plan stage goes on to apply its own plan in
// the same execution once the controller grants it the apply stage
// (stage.Spec.ApplyAfterPlan): for a run approved automatically, so that one
// engine, initialized once, plans and applies. The apply stage it carries
// records the plan stage's attempt (StageStatus.CarrierAttempt).
// Whether the grant comes is the controller's: not when run tasks or
// policies stand between the plan and the apply.
func CarriesApply(run *v1alpha1.TerraformRun) bool {
	return AppliesWithoutApproval(run)
}

// Carrier returns the attempt of the plan stage whose execution carries run's
// current apply stage, or 0 when none does.
func Carrier(run *v1alpha1.TerraformRun) int32 {
	if apply := CurrentStage(run, v1alpha1.StageApply); apply != nil {
		return apply.CarrierAttempt
	}
	return 0
}

// Execution returns the stage and attempt whose execution runs st: the plan
// stage that carries it, for a carried apply stage, else st's own.
func Execution(st *v1alpha1.StageStatus) (v1alpha1.StageName, int32, bool) {
	if st.Name == v1alpha1.StageApply && st.CarrierAttempt > 0 {
		return v1alpha1.StagePlan, st.CarrierAttempt, true
	}
	return st.Name, st.Attempt, false
}

// WritesFor returns the stage and attempt that the execution of stage's
// attempt writes for: the apply stage that it carries, else its own.
func WritesFor(run *v1alpha1.TerraformRun, stage v1alpha1.StageName, attempt int32) (v1alpha1.StageName, int32) {
	if stage == v1alpha1.StagePlan && attempt == Carrier(run) {
		return v1alpha1.StageApply, CurrentStage(run, v1alpha1.StageApply).Attempt
	}
	return stage, attempt
}
