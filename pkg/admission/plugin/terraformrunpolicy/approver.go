package terraformrunpolicy

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/terrarun/terrarun/pkg/admission/policy"
	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/runrules"
)

// checkApprover enforces separation of duties for the approve subresource:
// unless the policy sets separationOfDuties: false (a nil cfg keeps it on),
// no user who requested the run (its creator, and spec.requestedBy: who
// deleted its workspace or asked for its rerun) may approve it. It returns
// nil when approver may approve, and otherwise a Forbidden API error.
//
// A run without a recorded creator (which the server never produces) has no
// one to separate from, and is allowed. A missing approver is forbidden.
func checkApprover(cfg *policy.Config, run *terrarun.TerraformRun, approver user.Info) error {
	gr := terrarun.Resource("terraformruns")
	if run == nil {
		return apierrors.NewBadRequest("no run to approve")
	}
	if approver == nil {
		return apierrors.NewForbidden(gr, run.Name, fmt.Errorf("the approving user is unknown; approvals require an authenticated user"))
	}
	if !cfg.SeparationOfDutiesEnabled() {
		return nil
	}
	if how, ok := runrules.Requested(runrules.FromInternal(run), approver.GetName()); ok {
		return apierrors.NewForbidden(gr, run.Name, fmt.Errorf(
			"separation of duties: %s %s and may not approve it; ask another user with create on terraformruns/approve",
			approver.GetName(), how))
	}
	return nil
}
