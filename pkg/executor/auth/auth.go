// Package auth authenticates and authorizes the executors' requests: the
// writes of a stage's plan, logs and outputs back to its run, and the apply
// stage's download of the approved plan.
//
// An executor presents a credential of its backend: a per-stage token of the
// local executor, or a pod-bound service-account token for the terrarun.dev
// audience in Kubernetes mode. The Authenticator resolves that credential to
// the executor.Identity it was issued for (run, stage and attempt) once per
// request, and returns a user that carries the identity. Only an authenticated
// credential yields such a user: a request that impersonates an executor's
// user name, groups or extras is an ordinary user, and no executor.
//
// The Authorizer lets an executor identity do only what the runner needs, on
// its own run, and denies it everything else, whatever other authorizers
// would allow. The subresource handlers then read the identity with
// IdentityFrom and accept only the run's current stage attempt.
//
// When an identity cannot be resolved for a transient reason (kube-apiserver
// unreachable, say), the request is let through to its handler, which answers
// 503 so that the runner retries instead of stopping its stage.
package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
)

// ErrRejected wraps every error of a Resolver that means the credential
// claims an executor identity it cannot prove, as opposed to a failure to
// check the claim. Requests with such a claim are denied.
var ErrRejected = errors.New("executor identity rejected")

// Resolver maps the user of an authenticated executor credential to the
// identity the credential was issued for.
type Resolver interface {
	// ExecutorIdentity returns the identity of u; false and no error when u
	// makes no claim to be an executor; an error wrapping ErrRejected when the
	// claim is false, and any other error when it cannot be checked now.
	ExecutorIdentity(ctx context.Context, u user.Info) (executor.Identity, bool, error)
}

// RequestProver is a Resolver that also checks, of each request, a proof
// beyond the credential that it comes from the identity's own stage (the
// Job executor's stage key). It is called only once ExecutorIdentity has
// resolved u to id, and is the place for what may be done only for a
// proven stage (the Tekton executor's claim of an attempt's pod).
type RequestProver interface {
	// ProveRequest returns an error wrapping ErrRejected when req, of user
	// u, does not prove that it comes from id's stage.
	ProveRequest(req *http.Request, u user.Info, id executor.Identity) error
}

// executorUser is the user of an executor credential. Only the Authenticator
// creates it, so it cannot be impersonated.
type executorUser struct {
	user.Info
	id executor.Identity
	// err is why id could not be resolved: ErrRejected, or a transient failure.
	err error
}

// NewAuthenticator returns an authenticator of executor credentials: tokens
// authenticates the credential, and resolver maps its user to the identity.
// A credential that tokens does not know yields false, so that other
// authenticators may try it; a user that resolver says is no executor is
// returned as it is.
func NewAuthenticator(tokens authenticator.Request, resolver Resolver) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		resp, ok, err := tokens.AuthenticateRequest(req)
		if err != nil || !ok {
			return resp, ok, err
		}
		id, isExecutor, err := resolver.ExecutorIdentity(req.Context(), resp.User)
		if err == nil && !isExecutor {
			return resp, true, nil
		}
		if p, ok := resolver.(RequestProver); ok && err == nil {
			err = p.ProveRequest(req, resp.User, id)
		}
		resp.User = &executorUser{Info: resp.User, id: id, err: err}
		return resp, true, nil
	})
}

// Unavailable is the error of IdentityFrom when an executor's identity could
// not be checked for a transient reason; the request may be retried.
type Unavailable struct{ Err error }

func (u *Unavailable) Error() string {
	return fmt.Sprintf("cannot verify the executor identity now: %v", u.Err)
}

func (u *Unavailable) Unwrap() error { return u.Err }

// IdentityFrom returns the executor identity of the request in ctx. It
// returns false when the request is not from an executor credential. The
// error wraps ErrRejected for a false claim, and is an *Unavailable when the
// claim could not be checked.
func IdentityFrom(ctx context.Context) (executor.Identity, bool, error) {
	u, _ := genericapirequest.UserFrom(ctx)
	return identityOf(u)
}

func identityOf(u user.Info) (executor.Identity, bool, error) {
	eu, ok := u.(*executorUser)
	if !ok {
		return executor.Identity{}, false, nil
	}
	switch {
	case eu.err == nil:
		return eu.id, true, nil
	case errors.Is(eu.err, ErrRejected):
		return executor.Identity{}, true, eu.err
	default:
		return executor.Identity{}, true, &Unavailable{Err: eu.err}
	}
}

// runnerAccess is what the runner of a stage does: the resource request
// attributes of each of its requests, by stage. A plan stage that goes on to
// apply (stage.Spec.ApplyAfterPlan) does what an apply stage does too; the
// handlers allow it only once the run's apply stage is recorded as carried by
// its execution.
var runnerAccess = map[v1alpha1.StageName][]struct{ verb, subresource string }{
	v1alpha1.StagePlan: {
		{"create", "logs"},
		{"create", "plan"},    // the plan file, text, JSON, source and result
		{"get", "plan"},       // the approved plan file, when it carries the apply
		{"create", "outputs"}, // when it carries the apply
		{"get", "state"},      // the state terrarun serves (stage.ServedBackend)
		{"create", "state"},   // when it carries the apply
		{"get", "statelock"},  // to name a lock's holder
		{"create", "statelock"},
		{"delete", "statelock"}, // its own, or the one spec.forceUnlock names
	},
	v1alpha1.StageApply: {
		{"create", "logs"},
		{"get", "plan"}, // the approved plan file and source
		{"create", "outputs"},
		{"get", "state"},
		{"create", "state"},
		{"create", "statelock"},
		{"delete", "statelock"},
	},
}

// NewAuthorizer returns the authorizer of executor identities, to put first in
// the server's union of authorizers. It has no opinion on other users. An
// executor identity is allowed what its stage's runner does on its own run,
// and denied everything else. A claim that could not be checked is allowed
// what a runner does on any run in its namespace, so that the handler can
// answer 503; a false claim is denied.
func NewAuthorizer() authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		id, isExecutor, err := identityOf(a.GetUser())
		if !isExecutor {
			return authorizer.DecisionNoOpinion, "", nil
		}
		var unavailable *Unavailable
		switch {
		case errors.As(err, &unavailable):
			// Checked again, and answered 503, by the handler. A pod-bound
			// token is of a service account of the run's namespace.
			namespace, _, nsErr := serviceaccount.SplitUsername(a.GetUser().GetName())
			if nsErr == nil && runnerRequest(a, "", namespace, a.GetName()) {
				return authorizer.DecisionAllow, "executor identity to be verified by the handler", nil
			}
			return authorizer.DecisionDeny, "executor credentials may only be used by a stage's runner", nil
		case err != nil:
			return authorizer.DecisionDeny, err.Error(), nil
		}
		if runnerRequest(a, id.Stage, id.Namespace, id.Name) {
			return authorizer.DecisionAllow, fmt.Sprintf("executor of run %s/%s, stage %s", id.Namespace, id.Name, id.Stage), nil
		}
		return authorizer.DecisionDeny, fmt.Sprintf("the executor of run %s/%s, stage %s, may only write that stage's results", id.Namespace, id.Name, id.Stage), nil
	})
}

// runnerRequest says whether a is one of the requests of stage's runner
// (of any stage, when stage is empty) on run namespace/name.
func runnerRequest(a authorizer.Attributes, stage v1alpha1.StageName, namespace, name string) bool {
	if !a.IsResourceRequest() || a.GetAPIGroup() != v1alpha1.GroupName || a.GetResource() != "terraformruns" ||
		a.GetNamespace() != namespace || a.GetName() != name || name == "" {
		return false
	}
	for s, access := range runnerAccess {
		if stage != "" && s != stage {
			continue
		}
		for _, r := range access {
			if a.GetVerb() == r.verb && a.GetSubresource() == r.subresource {
				return true
			}
		}
	}
	return false
}
