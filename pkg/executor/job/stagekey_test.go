package job

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/executor/auth"
	"github.com/terrarun/terrarun/pkg/stage"
)

// TestStageKey: a Job's stage Secret holds its attempt's key, bound with the
// rest; a request of the stage's pod-bound token is the stage's only with
// that key: without it (a token minted for the pod), or with another
// attempt's, it is rejected.
func TestStageKey(t *testing.T) {
	keys, err := NewStageKeys([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	opts.StageKeys = keys
	ex := executor.Execution{Run: testRun(), Stage: v1alpha1.StagePlan, Attempt: 2}
	job, secret, err := BuildJob(ex, opts)
	if err != nil {
		t.Fatal(err)
	}
	id := executor.Identity{Namespace: "team-a", Name: "web", UID: testUID, Stage: v1alpha1.StagePlan, Attempt: 2}
	if got := string(secret.Data[StageKeyKey]); got != keys.For(id) {
		t.Fatalf("the stage Secret's key %q, want the attempt's", got)
	}
	if !strings.Contains(string(secret.Data[StageKey]), `"stageKeyFile":"`+StageKeyFile+`"`) || !strings.Contains(string(secret.Data[StageKey]), StageKeyFile) {
		t.Errorf("the stage file does not name the key file: %s", secret.Data[StageKey])
	}
	other := id
	other.Attempt = 3
	if keys.For(other) == keys.For(id) {
		t.Error("two attempts share a key")
	}

	job.UID = testJobUID
	pod := jobPod(job, testPodUID)
	resolver := NewIdentityResolver(fake.NewClientset(job, pod), keys)
	tokens := authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
		return &authenticator.Response{User: podUser(pod, testPodUID)}, true, nil
	})
	authn := auth.NewAuthenticator(tokens, resolver)
	for name, c := range map[string]struct {
		key  string
		want error
	}{
		"the stage's key":         {keys.For(id), nil},
		"no key (a minted token)": {"", auth.ErrRejected},
		"another attempt's key":   {keys.For(other), auth.ErrRejected},
	} {
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		if c.key != "" {
			req.Header.Set(stage.StageKeyHeader, c.key)
		}
		resp, ok, err := authn.AuthenticateRequest(req)
		if err != nil || !ok {
			t.Fatalf("%s: AuthenticateRequest = %v, %v", name, ok, err)
		}
		got, isExecutor, err := auth.IdentityFrom(genericapirequest.WithUser(context.Background(), resp.User))
		switch {
		case c.want == nil && (err != nil || !isExecutor || got != id):
			t.Errorf("%s: identity %+v, %v, %v; want %+v", name, got, isExecutor, err, id)
		case c.want != nil && !errors.Is(err, c.want):
			t.Errorf("%s: identity %+v, %v, %v; want rejected", name, got, isExecutor, err)
		}
	}
}
