package runtask

import (
	"context"
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

func TestToken(t *testing.T) {
	token, hash, err := NewToken("team-a", "web.prod-1")
	if err != nil {
		t.Fatal(err)
	}
	if ns, name, ok := parseToken(token); !ok || ns != "team-a" || name != "web.prod-1" || HashToken(token) != hash {
		t.Errorf("parseToken(%q) = %q, %q, %v", token, ns, name, ok)
	}
	other, _, _ := NewToken("team-a", "web.prod-1")
	if other == token {
		t.Error("two tokens are equal")
	}
	for _, bad := range []string{"", "trt_", "trt_a_b", "trt_a_b_short", "trt__b_" + strings.Repeat("a", 64), "xtrt_a_b_" + strings.Repeat("a", 64), "trt_a_b_c_" + strings.Repeat("a", 64)} {
		if _, _, ok := parseToken(bad); ok {
			t.Errorf("parseToken(%q) accepted", bad)
		}
	}
}

func TestSign(t *testing.T) {
	mac := hmac.New(sha512.New, []byte("key"))
	mac.Write([]byte(`{"payload_version":1}`))
	if got, want := sign([]byte("key"), []byte(`{"payload_version":1}`)), hex.EncodeToString(mac.Sum(nil)); got != want {
		t.Errorf("sign = %s, want %s", got, want)
	}
}

func TestParseResult(t *testing.T) {
	r, err := ParseResult([]byte(`{"data":{"type":"task-results","attributes":{"status":"failed","message":"2 findings","url":"https://scan.example/r/1"}}}`))
	if err != nil || r.Status != "failed" || r.Message != "2 findings" || r.URL != "https://scan.example/r/1" {
		t.Errorf("ParseResult = %+v, %v", r, err)
	}
	long, err := ParseResult([]byte(`{"data":{"type":"task-results","attributes":{"status":"running","message":"` + strings.Repeat("x", 5000) + `"}}}`))
	if err != nil || len(long.Message) > maxMessage+len("…") {
		t.Errorf("a long message: %d bytes, %v", len(long.Message), err)
	}
	for body, want := range map[string]string{
		`not json`: "not a JSON:API task-results document",
		`{"data":{"type":"runs","attributes":{"status":"passed"}}}`:                           "data.type",
		`{"data":{"type":"task-results","attributes":{"status":"ok"}}}`:                       "data.attributes.status",
		`{"data":{"type":"task-results","attributes":{"status":"passed","url":"file:///x"}}}`: "data.attributes.url",
	} {
		if _, err := ParseResult([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseResult(%s) = %v, want an error naming %s", body, err, want)
		}
	}
}

type runs map[string]*terrarun.TerraformRun

func (r runs) GetRun(_ context.Context, namespace, name string) (*terrarun.TerraformRun, error) {
	if run, ok := r[namespace+"/"+name]; ok {
		return run, nil
	}
	return nil, apierrors.NewNotFound(terrarun.Resource("terraformruns"), name)
}

// TestAuthenticator: a token is valid only while its call runs and before
// its deadline; every other credential goes to the next authenticator, and
// a task's token, valid or not, never does.
func TestAuthenticator(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	running, runningHash, _ := NewToken("dev", "web")
	answered, answeredHash, _ := NewToken("dev", "web")
	late, lateHash, _ := NewToken("dev", "web")
	deadline := metav1.NewTime(now.Add(time.Minute))
	past := metav1.NewTime(now.Add(-time.Second))
	run := &terrarun.TerraformRun{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "dev"}, Status: terrarun.TerraformRunStatus{Tasks: []terrarun.RunTaskCall{
		{Task: "scan", Stage: terrarun.RunTaskPostPlan, Status: terrarun.RunTaskRunning, Deadline: &deadline, TokenHash: runningHash},
		{Task: "scan", Stage: terrarun.RunTaskPrePlan, Status: terrarun.RunTaskPassed, Deadline: &deadline, TokenHash: answeredHash},
		{Task: "cost", Stage: terrarun.RunTaskPostPlan, Status: terrarun.RunTaskRunning, Deadline: &past, TokenHash: lateHash},
	}}}
	var nextSaw []string
	next := authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		nextSaw = append(nextSaw, req.Header.Get("Authorization"))
		return &authenticator.Response{User: &user.DefaultInfo{Name: "someone"}}, true, nil
	})
	a := NewAuthenticator(runs{"dev/web": run}, func() time.Time { return now }, next)
	auth := func(token string) (*authenticator.Response, bool, error) {
		req, _ := http.NewRequest(http.MethodGet, "https://terrarun/", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		return a.AuthenticateRequest(req)
	}
	resp, ok, err := auth(running)
	if err != nil || !ok {
		t.Fatalf("the running call's token: %v, %v", ok, err)
	}
	ctx := genericapirequest.WithUser(context.Background(), resp.User)
	if id, ok := CallFrom(ctx); !ok || id.Task != "scan" || id.Stage != terrarun.RunTaskPostPlan || id.Run != "web" || id.Namespace != "dev" {
		t.Errorf("CallFrom = %+v, %v", id, ok)
	}
	forged := "trt_dev_web_" + strings.Repeat("ab", 32)
	for name, token := range map[string]string{"answered": answered, "past its deadline": late, "forged": forged,
		"of another run": strings.Replace(running, "_web_", "_api_", 1), "malformed": "trt_dev"} {
		if _, ok, err := auth(token); ok || err == nil {
			t.Errorf("a token %s authenticated (%v, %v)", name, ok, err)
		}
	}
	if len(nextSaw) != 0 {
		t.Errorf("task tokens went to the next authenticator: %q", nextSaw)
	}
	if resp, ok, _ := auth("some-service-account-token"); !ok || resp.User.GetName() != "someone" {
		t.Error("another bearer token did not go to the next authenticator")
	}
	// Impersonating the task's user name yields no task.
	ctx = genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: resp.User.GetName(), Groups: resp.User.GetGroups()})
	if _, ok := CallFrom(ctx); ok {
		t.Error("a user.DefaultInfo with the task's name is a task")
	}
}

// TestAuthorizer: a task's token reads its run's plan and answers through
// its taskresult, and is denied everything else, whatever the other
// authorizers would say; other users are not its business.
func TestAuthorizer(t *testing.T) {
	task := &taskUser{DefaultInfo: user.DefaultInfo{Name: "system:terrarun:runtask:dev:web:scan"}, call: CallID{Namespace: "dev", Run: "web", Task: "scan"}}
	a := NewAuthorizer()
	attrs := func(u user.Info, verb, namespace, name, subresource string) authorizer.Attributes {
		return authorizer.AttributesRecord{User: u, Verb: verb, Namespace: namespace, APIGroup: v1alpha1.GroupName, Resource: "terraformruns",
			Subresource: subresource, Name: name, ResourceRequest: true}
	}
	for _, tc := range []struct {
		verb, namespace, name, subresource string
		want                               authorizer.Decision
	}{
		{"get", "dev", "web", "plan", authorizer.DecisionAllow},
		{"patch", "dev", "web", "taskresult", authorizer.DecisionAllow},
		{"create", "dev", "web", "taskresult", authorizer.DecisionAllow},
		{"get", "dev", "web", "", authorizer.DecisionDeny},
		{"get", "dev", "web", "outputs", authorizer.DecisionDeny},
		{"get", "dev", "web", "logs", authorizer.DecisionDeny},
		{"create", "dev", "web", "approve", authorizer.DecisionDeny},
		{"create", "dev", "web", "plan", authorizer.DecisionDeny},
		{"get", "dev", "api", "plan", authorizer.DecisionDeny},
		{"get", "prod", "web", "plan", authorizer.DecisionDeny},
		{"list", "dev", "", "", authorizer.DecisionDeny},
	} {
		if got, _, _ := a.Authorize(context.Background(), attrs(task, tc.verb, tc.namespace, tc.name, tc.subresource)); got != tc.want {
			t.Errorf("%s %s/%s/%s: %v, want %v", tc.verb, tc.namespace, tc.name, tc.subresource, got, tc.want)
		}
	}
	secrets := authorizer.AttributesRecord{User: task, Verb: "get", Namespace: "dev", Resource: "secrets", ResourceRequest: true}
	if got, _, _ := a.Authorize(context.Background(), secrets); got != authorizer.DecisionDeny {
		t.Errorf("a task's token reading Secrets: %v", got)
	}
	if got, _, _ := a.Authorize(context.Background(), attrs(&user.DefaultInfo{Name: task.Name}, "get", "dev", "web", "plan")); got != authorizer.DecisionNoOpinion {
		t.Errorf("another user: %v, want no opinion", got)
	}
}

func TestPayload(t *testing.T) {
	run := &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "dev", UID: "uid-1", Labels: map[string]string{v1alpha1.LabelWorkspace: "app"},
			Annotations: map[string]string{v1alpha1.AnnotationTrigger: "SpecChange"}},
		Spec: v1alpha1.TerraformRunSpec{Operation: v1alpha1.OperationApply, Creator: &v1alpha1.Creator{Username: "alice"}},
	}
	call := &v1alpha1.RunTaskCall{Task: "scan", Stage: v1alpha1.RunTaskPreApply, Enforcement: v1alpha1.RunTaskAdvisory}
	p := NewPayload(run, call, "trt_x", "https://terrarun.example")
	base := "https://terrarun.example/apis/terrarun.dev/v1alpha1/namespaces/dev/terraformruns/web"
	if p.PayloadVersion != 1 || p.Stage != "pre_apply" || p.TaskResultEnforcementLevel != "advisory" || p.TaskResultCallbackURL != base+"/taskresult" ||
		p.PlanJSONAPIURL != base+"/plan?format=json" || p.RunID != "uid-1" || p.RunCreatedBy != "alice" || p.WorkspaceName != "app" ||
		p.OrganizationName != "dev" || p.IsSpeculative || p.AccessToken != "trt_x" || !strings.Contains(p.RunMessage, "SpecChange") {
		t.Errorf("payload %+v", p)
	}
	call.Stage = v1alpha1.RunTaskPrePlan
	if p := NewPayload(run, call, "trt_x", "https://terrarun.example"); p.PlanJSONAPIURL != "" || p.Stage != "pre_plan" {
		t.Errorf("a PrePlan payload has a plan URL %q, stage %q", p.PlanJSONAPIURL, p.Stage)
	}
}

// TestSendKeepsTheTokenOutOfErrors: a task that refuses the call and echoes
// the payload does not put the call's token in the error, which goes to the
// run's status and Events.
func TestSendKeepsTheTokenOutOfErrors(t *testing.T) {
	var signature string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		signature = req.Header.Get(signatureHeader)
		body, _ := io.ReadAll(req.Body)
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(append(body, []byte(" internal page")...))
	}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	err := Send(context.Background(), srv.URL, ca, []byte("key"), Payload{PayloadVersion: 1, AccessToken: "trt_dev_web_secret-token"})
	if err == nil || strings.Contains(err.Error(), "secret-token") || strings.Contains(err.Error(), "internal page") || !strings.Contains(err.Error(), "400") {
		t.Errorf("Send = %v", err)
	}
	if signature == "" {
		t.Error("the payload was not signed")
	}
}

// TestSendOnlyToAServerThatProvesItself: a payload goes only over TLS, to a
// server the task's CA bundle (or the system) trusts, and no redirect is
// followed.
func TestSendOnlyToAServerThatProvesItself(t *testing.T) {
	received := 0
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { received++ }))
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/redirect" {
			http.Redirect(w, req, "/elsewhere", http.StatusTemporaryRedirect)
			return
		}
		received++
	}))
	defer tlsSrv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw})
	p := Payload{PayloadVersion: 1, AccessToken: "trt_dev_web_token"}
	if err := Send(context.Background(), plain.URL, nil, nil, p); err == nil || !strings.Contains(err.Error(), "not an https URL") {
		t.Errorf("sent over plain http: %v", err)
	}
	if err := Send(context.Background(), tlsSrv.URL, nil, nil, p); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("sent to a server no CA vouches for: %v", err)
	}
	if err := Send(context.Background(), tlsSrv.URL+"/redirect", ca, nil, p); err == nil || !strings.Contains(err.Error(), "307") {
		t.Errorf("a redirect: %v", err)
	}
	if received != 0 {
		t.Fatalf("%d payloads reached a server they must not", received)
	}
	if err := Send(context.Background(), tlsSrv.URL, ca, nil, p); err != nil || received != 1 {
		t.Errorf("sent to the task's server: %v (%d received)", err, received)
	}
}
