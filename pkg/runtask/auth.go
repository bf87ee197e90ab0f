package runtask

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// RunGetter reads a run from the server's own storage.
type RunGetter interface {
	GetRun(ctx context.Context, namespace, name string) (*terrarun.TerraformRun, error)
}

// CallID identifies the call a token was minted for.
type CallID struct {
	Namespace, Run, Task string
	Stage                terrarun.RunTaskStage
	// TokenHash is the token's hash, as status.tasks records it.
	TokenHash string
}

// taskUser is the user of a run task token. Only the Authenticator creates
// it, so it cannot be impersonated.
type taskUser struct {
	user.DefaultInfo
	call CallID
}

// CallFrom returns the call of the run task token that authenticated the
// request in ctx; false when the request did not come with one.
func CallFrom(ctx context.Context) (CallID, bool) {
	u, _ := genericapirequest.UserFrom(ctx)
	tu, ok := u.(*taskUser)
	if !ok {
		return CallID{}, false
	}
	return tu.call, true
}

// FindCall returns the call of run that id names, if it is Running and
// before its deadline at now.
func FindCall(run *terrarun.TerraformRun, id CallID, now time.Time) *terrarun.RunTaskCall {
	for i := range run.Status.Tasks {
		c := &run.Status.Tasks[i]
		if c.TokenHash == "" || subtle.ConstantTimeCompare([]byte(c.TokenHash), []byte(id.TokenHash)) != 1 {
			continue
		}
		if c.Status != terrarun.RunTaskRunning || c.Deadline == nil || !now.Before(c.Deadline.Time) {
			return nil
		}
		return c
	}
	return nil
}

// NewAuthenticator returns the authenticator of run task tokens: a bearer
// token that starts with trt_ is checked against the run it names, and is
// valid only while its call is Running and before its deadline. It decides
// alone: a task's token, valid or not, never reaches next (the cluster's
// TokenReview, say), which authenticates every other request.
func NewAuthenticator(runs RunGetter, now func() time.Time, next authenticator.Request) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		token, ok := strings.CutPrefix(strings.TrimSpace(req.Header.Get("Authorization")), "Bearer ")
		token = strings.TrimSpace(token)
		if !ok || !strings.HasPrefix(token, tokenPrefix) {
			if next == nil {
				return nil, false, nil
			}
			return next.AuthenticateRequest(req)
		}
		namespace, name, ok := parseToken(token)
		if !ok {
			return nil, false, fmt.Errorf("the run task token is malformed")
		}
		run, err := runs.GetRun(req.Context(), namespace, name)
		if apierrors.IsNotFound(err) {
			return nil, false, fmt.Errorf("the run task token's run %s/%s does not exist", namespace, name)
		}
		if err != nil {
			return nil, false, fmt.Errorf("checking a run task token: %w", err)
		}
		id := CallID{Namespace: namespace, Run: name, TokenHash: HashToken(token)}
		call := FindCall(run, id, now())
		if call == nil {
			return nil, false, fmt.Errorf("the run task token is not valid: its call has been answered, or its deadline has passed")
		}
		id.Task, id.Stage = call.Task, call.Stage
		return &authenticator.Response{User: &taskUser{
			DefaultInfo: user.DefaultInfo{
				Name:   fmt.Sprintf("system:terrarun:runtask:%s:%s:%s", namespace, name, call.Task),
				Groups: []string{"system:terrarun:runtasks"},
			},
			call: id,
		}}, true, nil
	})
}

// NewAuthorizer returns the authorizer of run task tokens, to put first in
// the server's union: a task's token may read its run's plan (text or
// JSON; the plan handler serves the plan file and source to executors
// only) and answer through its run's taskresult subresource, and nothing
// else, whatever other authorizers would allow. It has no opinion on other
// users.
func NewAuthorizer() authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		tu, ok := a.GetUser().(*taskUser)
		if !ok {
			return authorizer.DecisionNoOpinion, "", nil
		}
		if a.IsResourceRequest() && a.GetAPIGroup() == terrarun.GroupName && a.GetResource() == "terraformruns" &&
			a.GetNamespace() == tu.call.Namespace && a.GetName() == tu.call.Run && allowed(a.GetVerb(), a.GetSubresource()) {
			return authorizer.DecisionAllow, "run task " + tu.call.Task + " of this run", nil
		}
		return authorizer.DecisionDeny, fmt.Sprintf("a run task's token may only read run %s/%s's plan and answer through its taskresult subresource", tu.call.Namespace, tu.call.Run), nil
	})
}

func allowed(verb, subresource string) bool {
	switch subresource {
	case "plan":
		return verb == "get"
	case "taskresult":
		return verb == "patch" || verb == "create" || verb == "update"
	}
	return false
}
