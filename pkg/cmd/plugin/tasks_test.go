package plugin

import (
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// taskRun is run web-1 waiting for approval, whose PrePlan task passed and
// whose PostPlan task has not answered yet (the one with a message that
// tries to forge a line and drive the terminal).
func taskRun(change func(*v1alpha1.TerraformRun)) *v1alpha1.TerraformRun {
	return newRun("web-1", v1alpha1.RunPhaseAwaitingApproval, "Waiting for run tasks at PostPlan: cost.", func(run *v1alpha1.TerraformRun) {
		run.Spec.Creator = &v1alpha1.Creator{Username: "alice"}
		run.Status.Plan = &v1alpha1.PlanSummary{Digest: testDigest, Add: 1, Destroy: 2, HasChanges: true}
		run.Status.Tasks = []v1alpha1.RunTaskCall{
			{Task: "scanner", Stage: v1alpha1.RunTaskPrePlan, Enforcement: v1alpha1.RunTaskMandatory, Status: v1alpha1.RunTaskPassed, Message: "no findings", URL: "https://scan.example/r/1"},
			{Task: "cost", Stage: v1alpha1.RunTaskPostPlan, Enforcement: v1alpha1.RunTaskAdvisory, Status: v1alpha1.RunTaskRunning, Message: "estimating\nRun tasks: 2 of 2 passed\x1b]0;x\x07"},
		}
		run.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionTasksChecked, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAwaitingTasks,
			Message: "Waiting for run tasks at PostPlan: cost."}}
		if change != nil {
			change(run)
		}
	})
}

const taskSummary = "Run tasks: 1 of 2 calls passed\n" +
	"  PrePlan   scanner  Mandatory  Passed   no findings (https://scan.example/r/1)\n" +
	`  PostPlan  cost     Advisory   Running  estimating\nRun tasks: 2 of 2 passed\x1b]0;x\x07` + "\n"

// TestTasks: plan shows the run task calls after the plan, one line each
// with control characters escaped; approve shows them, and does not ask
// while the PostPlan tasks have not answered.
func TestTasks(t *testing.T) {
	const planText = "Plan: 1 to add, 0 to change, 2 to destroy.\n"
	srv := newFakeServer(t, map[string]http.HandlerFunc{"GET /terraformruns/web-1/plan": text(planText), "GET /terraformruns/web-1": object(taskRun(nil))})
	srv.run(t, "", "plan", "web-1").expect(t, ExitSucceeded, planText+"\n"+taskSummary)

	srv = newFakeServer(t, map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(taskRun(nil))})
	srv.run(t, "yes\n", "approve", "web-1").expect(t, ExitFailed,
		"Run team-a/web-1, created by alice\nPlan: 1 to add, 0 to change, 2 to destroy, 0 to import.\n"+taskSummary+
			"Plan digest: "+testDigest+"\nReview it with: kubectl terrarun plan web-1 -n team-a\n",
		"error: not approved: the plan waits for its run tasks, and the server refuses approvals until they have answered: Waiting for run tasks at PostPlan: cost. Approve again once they have (kubectl terrarun plan web-1 -n team-a shows them)\n")
	if posts := srv.received("POST", "/terraformruns/web-1/approve"); len(posts) != 0 {
		t.Errorf("approved while the tasks run: %s", posts[0].body)
	}
}
