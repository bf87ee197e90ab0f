package terraformrun

import (
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
	"github.com/terrarun/terrarun/pkg/runrules"
)

// newOverrideREST serves terraformruns/override: POST a TerraformRunOverride
// to override the soft-mandatory policy failures of the plan with the given
// digest, with a justification. RBAC decides who may (create on
// terraformruns/override, a verb no built-in role but terrarun-override
// grants); whoever requested the run never may.
func newOverrideREST(status statusWriter) *actionREST[*terrarun.TerraformRunOverride] {
	return &actionREST[*terrarun.TerraformRunOverride]{
		status:   status,
		kind:     "TerraformRunOverride",
		newBody:  func() *terrarun.TerraformRunOverride { return &terrarun.TerraformRunOverride{} },
		validate: validation.ValidateTerraformRunOverride,
		record:   override,
	}
}

// override records u's override of the soft-mandatory failures of the run's
// plan in status.policy.overrides. The run controller then goes on as if
// they had passed: Auto mode applies, Manual waits for its approvals.
func override(run *terrarun.TerraformRun, body *terrarun.TerraformRunOverride, u user.Info) error {
	who := u.GetName()
	v := runrules.FromInternal(run)
	if run.Status.Phase != terrarun.RunPhaseAwaitingApproval {
		return conflict(run.Name, "the run is %s; policy failures can be overridden only while the run is AwaitingApproval", runrules.Phase(v))
	}
	if meta.IsStatusConditionTrue(run.Status.Conditions, terrarun.ConditionDiscardRequested) || run.DeletionTimestamp != nil {
		return conflict(run.Name, "the plan is being discarded or the run deleted; it will not be applied")
	}
	if err := currentPlan(run, body.PlanDigest, "overrode", "review the current plan and its policy results, and override its digest (status.plan.digest)"); err != nil {
		return err
	}
	if denied := runrules.PolicyDenials(v, body.PlanDigest); len(denied) > 0 {
		return conflict(run.Name, "plan %s is denied by hard-mandatory policy, which no override lifts: %s", shortDigest(body.PlanDigest), runrules.DescribeResults(denied))
	}
	pending := runrules.PendingOverrides(v, body.PlanDigest)
	if len(pending) == 0 {
		return conflict(run.Name, "plan %s has no soft-mandatory policy failure to override", shortDigest(body.PlanDigest))
	}
	if how, ok := runrules.Requested(v, who); ok {
		return apierrors.NewForbidden(terrarun.Resource("terraformruns/override"), run.Name, fmt.Errorf(
			"%s %s: whoever requested a run never overrides its policies; ask another user allowed to override", who, how))
	}
	names := make([]string, 0, len(pending))
	for _, r := range pending {
		names = append(names, runrules.ResultName(r))
	}
	now := metav1.Now()
	run.Status.Policy.Overrides = append(run.Status.Policy.Overrides, terrarun.PolicyOverride{
		OverriddenBy:  who,
		OverriddenAt:  &now,
		PlanDigest:    body.PlanDigest,
		Justification: body.Justification,
		Validations:   names,
	})
	msg := fmt.Sprintf("%s overrode %s of plan %s: %s", who, strings.Join(names, ", "), shortDigest(body.PlanDigest), body.Justification)
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
		Type:               terrarun.ConditionPolicyChecked,
		Status:             metav1.ConditionTrue,
		Reason:             terrarun.ReasonPolicyOverridden,
		Message:            msg,
		ObservedGeneration: run.Generation,
	})
	run.Status.Message = msg
	return nil
}
