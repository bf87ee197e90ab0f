package terraformrun

import (
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
)

func TestCheckExecutor(t *testing.T) {
	now := metav1.Now()
	run := &terrarun.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "web", UID: "uid-1"},
		Status: terrarun.TerraformRunStatus{Stages: []terrarun.StageStatus{
			{Name: terrarun.StagePlan, Attempt: 1, CompletionTime: &now},
			{Name: terrarun.StagePlan, Attempt: 2},
			{Name: terrarun.StageApply, Attempt: 1, CompletionTime: &now},
		}},
	}
	id := func(stage v1alpha1.StageName, attempt int32) executor.Identity {
		return executor.Identity{Namespace: testNamespace, Name: "web", UID: "uid-1", Stage: stage, Attempt: attempt}
	}
	testIdentities.ids = map[string]executor.Identity{
		"plan-2":      id(v1alpha1.StagePlan, 2),
		"plan-1":      id(v1alpha1.StagePlan, 1),
		"apply-1":     id(v1alpha1.StageApply, 1),
		"other-run":   {Namespace: testNamespace, Name: "web", UID: "uid-0", Stage: v1alpha1.StagePlan, Attempt: 2},
		"other-space": {Namespace: "team-b", Name: "web", UID: "uid-1", Stage: v1alpha1.StagePlan, Attempt: 2},
	}

	for _, tc := range []struct {
		name    string
		user    user.Info
		stage   terrarun.StageName
		attempt int32
		code    int32  // 403 when 0
		want    string // "" for no error
	}{
		{name: "the current attempt", user: &user.DefaultInfo{Name: "plan-2"}, stage: terrarun.StagePlan, attempt: 2},
		{name: "any attempt", user: &user.DefaultInfo{Name: "plan-2"}, stage: terrarun.StagePlan},
		{name: "no user", stage: terrarun.StagePlan, want: "only the executor of this run's current stage may write its plan"},
		{name: "identity not verifiable now", user: brokenStage, stage: terrarun.StagePlan, code: http.StatusServiceUnavailable, want: "cannot verify the executor identity now: the token review failed; retry"},
		{name: "identity rejected", user: forgedStage, stage: terrarun.StagePlan, want: "executor identity rejected: pod team-a/x is not controlled by Job web-plan-1"},
		{name: "impersonating an executor's user", user: &user.DefaultInfo{Name: "impersonated", Extra: map[string][]string{"terrarun.dev/stage": {"plan"}}}, stage: terrarun.StagePlan, want: "impersonated is not an executor"},
		{name: "no executor", user: alice, stage: terrarun.StagePlan, want: "alice is not an executor"},
		{name: "a run of the same name", user: &user.DefaultInfo{Name: "other-run"}, stage: terrarun.StagePlan, want: "this executor was started for run team-a/web (UID uid-0), not for team-a/web (UID uid-1)"},
		{name: "another namespace", user: &user.DefaultInfo{Name: "other-space"}, stage: terrarun.StagePlan, want: "this executor was started for run team-b/web (UID uid-1), not for team-a/web (UID uid-1)"},
		{name: "an earlier attempt", user: &user.DefaultInfo{Name: "plan-1"}, stage: terrarun.StagePlan, want: "this executor runs stage plan attempt 1, which is not the run's current plan stage"},
		{name: "another stage", user: &user.DefaultInfo{Name: "plan-2"}, stage: terrarun.StageApply, want: "this executor runs stage plan attempt 2, which is not the run's current apply stage"},
		{name: "a completed stage", user: &user.DefaultInfo{Name: "apply-1"}, stage: terrarun.StageApply, want: "which is not the run's current apply stage"},
		{name: "another attempt", user: &user.DefaultInfo{Name: "plan-2"}, stage: terrarun.StagePlan, attempt: 3, want: "this executor runs attempt 2, not attempt 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkExecutor(requestContext(tc.user, "create", "plan"), run, tc.stage, tc.attempt, "plan")
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			code := tc.code
			if code == 0 {
				code = http.StatusForbidden
			}
			expectAPIError(t, err, code, tc.want)
		})
	}
}
