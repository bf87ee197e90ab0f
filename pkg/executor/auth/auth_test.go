package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
)

var planID = executor.Identity{Namespace: "team-a", Name: "web", UID: "uid-1", Stage: v1alpha1.StagePlan, Attempt: 1}

// fakeTokens authenticates "Bearer <name>" as the user of that name.
type fakeTokens map[string]user.Info

func (f fakeTokens) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	u, ok := f[req.Header.Get("Authorization")]
	if !ok {
		return nil, false, nil
	}
	return &authenticator.Response{User: u}, true, nil
}

// fakeResolver resolves users by name.
type fakeResolver map[string]struct {
	id  executor.Identity
	err error
}

func (f fakeResolver) ExecutorIdentity(_ context.Context, u user.Info) (executor.Identity, bool, error) {
	r, ok := f[u.GetName()]
	if !ok {
		return executor.Identity{}, false, nil
	}
	return r.id, true, r.err
}

var (
	stageUser     = &user.DefaultInfo{Name: "system:serviceaccount:team-a:default", Groups: []string{"system:serviceaccounts"}}
	rejectedUser  = &user.DefaultInfo{Name: "system:serviceaccount:team-a:forged"}
	transientUser = &user.DefaultInfo{Name: "system:serviceaccount:team-a:unchecked"}
	plainUser     = &user.DefaultInfo{Name: "alice"}
)

func newAuthenticator() authenticator.Request {
	return NewAuthenticator(
		fakeTokens{"Bearer stage": stageUser, "Bearer forged": rejectedUser, "Bearer unchecked": transientUser, "Bearer alice": plainUser},
		fakeResolver{
			stageUser.Name:     {id: planID},
			rejectedUser.Name:  {err: fmt.Errorf("%w: pod team-a/x is not controlled by Job web-plan-1", ErrRejected)},
			transientUser.Name: {err: errors.New("getting pod team-a/x: connection refused")},
		})
}

// authenticate returns the request context of a request with the given
// bearer credential, as the authentication filter leaves it.
func authenticate(t *testing.T, credential string) (context.Context, bool) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	req.Header.Set("Authorization", "Bearer "+credential)
	resp, ok, err := newAuthenticator().AuthenticateRequest(req)
	if err != nil {
		t.Fatalf("AuthenticateRequest(%s): %v", credential, err)
	}
	if !ok {
		return context.Background(), false
	}
	return genericapirequest.WithUser(context.Background(), resp.User), true
}

func TestIdentityFrom(t *testing.T) {
	if _, ok := authenticate(t, "unknown"); ok {
		t.Errorf("an unknown credential authenticated")
	}

	ctx, _ := authenticate(t, "stage")
	id, isExecutor, err := IdentityFrom(ctx)
	if err != nil || !isExecutor || id != planID {
		t.Errorf("stage credential: IdentityFrom = %+v, %v, %v; want %+v", id, isExecutor, err, planID)
	}
	u, _ := genericapirequest.UserFrom(ctx)
	if u.GetName() != stageUser.Name || len(u.GetGroups()) != 1 {
		t.Errorf("the executor user hides its credential's user: %s %v", u.GetName(), u.GetGroups())
	}

	ctx, _ = authenticate(t, "alice")
	if _, isExecutor, err := IdentityFrom(ctx); isExecutor || err != nil {
		t.Errorf("a user the resolver does not claim: executor %v, err %v", isExecutor, err)
	}

	ctx, _ = authenticate(t, "forged")
	if _, isExecutor, err := IdentityFrom(ctx); !isExecutor || !errors.Is(err, ErrRejected) {
		t.Errorf("a false claim: executor %v, err %v; want ErrRejected", isExecutor, err)
	}

	ctx, _ = authenticate(t, "unchecked")
	var unavailable *Unavailable
	if _, isExecutor, err := IdentityFrom(ctx); !isExecutor || !errors.As(err, &unavailable) {
		t.Errorf("an unchecked claim: executor %v, err %v; want *Unavailable", isExecutor, err)
	}

	// What impersonation produces: the name, groups and extras of an
	// executor, without its credential.
	forged := &user.DefaultInfo{
		Name:   "system:terrarun:executor:team-a:web",
		Groups: []string{"system:terrarun:executors"},
		Extra:  map[string][]string{"terrarun.dev/run-uid": {"uid-1"}, "terrarun.dev/stage": {"plan"}, "terrarun.dev/attempt": {"1"}},
	}
	if _, isExecutor, err := IdentityFrom(genericapirequest.WithUser(context.Background(), forged)); isExecutor || err != nil {
		t.Errorf("an impersonated executor is an executor: %v, %v", isExecutor, err)
	}
}

func TestAuthorizer(t *testing.T) {
	run := func(verb, name, subresource string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{
			Verb: verb, Namespace: "team-a", APIGroup: v1alpha1.GroupName, APIVersion: "v1alpha1",
			Resource: "terraformruns", Name: name, Subresource: subresource, ResourceRequest: true,
		}
	}
	other := func(a authorizer.AttributesRecord) authorizer.AttributesRecord {
		a.Namespace = "team-b"
		return a
	}
	applyID := planID
	applyID.Stage = v1alpha1.StageApply

	cases := []struct {
		name string
		ctx  string // credential
		id   *executor.Identity
		attr authorizer.AttributesRecord
		want authorizer.Decision
	}{
		{"plan writes its logs", "stage", nil, run("create", "web", "logs"), authorizer.DecisionAllow},
		{"plan uploads its plan", "stage", nil, run("create", "web", "plan"), authorizer.DecisionAllow},
		// A plan stage that carries the apply reads the approved plan file
		// and uploads outputs; the handlers allow only that one
		// (pkg/registry/terraformrun TestCarriedApply).
		{"plan asks for the plan file, to the handler", "stage", nil, run("get", "web", "plan"), authorizer.DecisionAllow},
		{"plan uploads outputs, to the handler", "stage", nil, run("create", "web", "outputs"), authorizer.DecisionAllow},
		{"no other run's logs", "stage", nil, run("create", "db", "logs"), authorizer.DecisionDeny},
		{"no run of another namespace", "stage", nil, other(run("create", "web", "logs")), authorizer.DecisionDeny},
		{"no reading outputs", "stage", nil, run("get", "web", "outputs"), authorizer.DecisionDeny},
		{"no reading another run's outputs", "stage", nil, run("get", "db", "outputs"), authorizer.DecisionDeny},
		{"no approving", "stage", nil, run("create", "web", "approve"), authorizer.DecisionDeny},
		{"no approving another run", "stage", nil, run("create", "db", "approve"), authorizer.DecisionDeny},
		{"no creating runs", "stage", nil, run("create", "", ""), authorizer.DecisionDeny},
		{"no reading runs", "stage", nil, run("get", "web", ""), authorizer.DecisionDeny},
		{"no status writes", "stage", nil, run("update", "web", "status"), authorizer.DecisionDeny},
		{"no impersonation", "stage", nil, authorizer.AttributesRecord{Verb: "impersonate", Resource: "users", Name: "alice", ResourceRequest: true}, authorizer.DecisionDeny},
		{"no non-resource paths", "stage", nil, authorizer.AttributesRecord{Verb: "get", Path: "/apis"}, authorizer.DecisionDeny},
		{"apply reads its plan", "", &applyID, run("get", "web", "plan"), authorizer.DecisionAllow},
		{"apply uploads outputs", "", &applyID, run("create", "web", "outputs"), authorizer.DecisionAllow},
		{"apply may not upload a plan", "", &applyID, run("create", "web", "plan"), authorizer.DecisionDeny},
		{"false claim", "forged", nil, run("create", "web", "logs"), authorizer.DecisionDeny},
		{"unchecked claim: runner request, to the handler", "unchecked", nil, run("create", "web", "logs"), authorizer.DecisionAllow},
		{"unchecked claim: other namespace", "unchecked", nil, other(run("create", "web", "logs")), authorizer.DecisionDeny},
		{"unchecked claim: not a runner request", "unchecked", nil, run("create", "web", "approve"), authorizer.DecisionDeny},
		{"users are not decided here", "alice", nil, run("create", "web", "approve"), authorizer.DecisionNoOpinion},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.id != nil {
				c.attr.User = &executorUser{Info: stageUser, id: *c.id}
			} else {
				ctx, ok := authenticate(t, c.ctx)
				if !ok {
					t.Fatalf("%s did not authenticate", c.ctx)
				}
				c.attr.User, _ = genericapirequest.UserFrom(ctx)
			}
			got, reason, err := NewAuthorizer().Authorize(context.Background(), c.attr)
			if err != nil || got != c.want {
				t.Errorf("Authorize = %v (%q, %v), want %v", got, reason, err, c.want)
			}
		})
	}
}
