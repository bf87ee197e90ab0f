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
