package terraformrun

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor/auth"
	"github.com/terrarun/terrarun/pkg/runrules"
)

// checkExecutor returns nil when the request is from the executor of the
// run's current, unfinished attempt of stageName, and of that attempt when
// attempt is not 0; otherwise a Forbidden error about the subresource what
// (plan, logs or outputs), or 503 when the executor's identity could not be
// verified now, so that it retries. The identity is the one the
// authenticator resolved from the request's credential (pkg/executor/auth).
func checkExecutor(ctx context.Context, run *terrarun.TerraformRun, stageName terrarun.StageName, attempt int32, what string) error {
	forbidden := func(format string, args ...interface{}) error {
		return apierrors.NewForbidden(terrarun.Resource("terraformruns/"+what), run.Name, fmt.Errorf(format, args...))
	}
	id, isExecutor, err := auth.IdentityFrom(ctx)
	var unavailable *auth.Unavailable
	switch {
	case errors.As(err, &unavailable):
		return apierrors.NewServiceUnavailable(unavailable.Error() + "; retry")
	case err != nil:
		return forbidden("%v", err)
	case !isExecutor:
		name := "the anonymous user"
		if u, ok := genericapirequest.UserFrom(ctx); ok {
			name = u.GetName()
		}
		return forbidden("only the executor of this run's current stage may write its %s; %s is not an executor", what, name)
	}
	if id.Namespace != run.Namespace || id.Name != run.Name || id.UID != string(run.UID) {
		return forbidden("this executor was started for run %s/%s (UID %s), not for %s/%s (UID %s)", id.Namespace, id.Name, id.UID, run.Namespace, run.Name, run.UID)
	}
	v := runrules.FromInternal(run)
	idStage, idAttempt := runrules.WritesFor(v, v1alpha1.StageName(id.Stage), id.Attempt)
	if carrier := runrules.Carrier(v); carrier != 0 && v1alpha1.StageName(id.Stage) == v1alpha1.StageApply {
		return forbidden("the run's apply stage is carried by the executor of plan attempt %d; no other executor writes for it", carrier)
	}
	current := runrules.CurrentStage(v, v1alpha1.StageName(stageName))
	if string(idStage) != string(stageName) || current == nil || idAttempt != current.Attempt || current.CompletionTime != nil {
		return forbidden("this executor runs stage %s attempt %d, which is not the run's current %s stage", idStage, idAttempt, stageName)
	}
	if attempt != 0 && attempt != idAttempt {
		return forbidden("this executor runs attempt %d, not attempt %d", idAttempt, attempt)
	}
	return nil
}
