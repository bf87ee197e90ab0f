package runrules

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// TasksHold returns why run's plan cannot be approved yet because of run
// tasks: the PostPlan tasks are being called or have not all answered
// (the TasksChecked condition False, reason AwaitingTasks, which the run
// controller sets before it calls them).
func TasksHold(run *v1alpha1.TerraformRun) (string, bool) {
	c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionTasksChecked)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonAwaitingTasks {
		return "", false
	}
	return c.Message, true
}

// Applied says whether run's apply changed the infrastructure: its Applied
// condition is True, whatever came after (a PostApply run task that failed
// does not undo an apply).
func Applied(run *v1alpha1.TerraformRun) bool {
	return meta.IsStatusConditionTrue(run.Status.Conditions, v1alpha1.ConditionApplied)
}

// WaitsForTasksOnly says whether run's stage has ended and the run waits
// only for run tasks before it ends: an applied run for its PostApply
// tasks, a speculative plan for its PostPlan ones. Such a run still holds
// its state, but no process of it runs.
func WaitsForTasksOnly(run *v1alpha1.TerraformRun) bool {
	switch Phase(run) {
	case v1alpha1.RunPhaseApplying:
		st := CurrentStage(run, v1alpha1.StageApply)
		return st != nil && st.CompletionTime != nil && Applied(run)
	case v1alpha1.RunPhasePlanning:
		st := CurrentStage(run, v1alpha1.StagePlan)
		return st != nil && st.CompletionTime != nil && run.Spec.Operation == v1alpha1.OperationPlan && run.Status.Plan != nil
	}
	return false
}
