package terraformrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/tools/cache"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/install"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/executor/auth"
	"github.com/terrarun/terrarun/pkg/runrules"
	"github.com/terrarun/terrarun/pkg/standalone"
	"github.com/terrarun/terrarun/pkg/statestore"
)

// The tests of the subresources run them on real storage: the generic
// registry store of terraformruns and an artifacts.Store, both on one
// embedded etcd per test, started as pkg/artifacts's tests start theirs. Requests go through connect, which does what the
// generic handler does with a rest.Connecter.

const testNamespace = "team-a"

var (
	testScheme = runtime.NewScheme()
	testCodecs = serializer.NewCodecFactory(testScheme)
)

func init() {
	install.Install(testScheme)
	// As in pkg/apiserver: Status and the other meta types.
	metav1.AddToGroupVersion(testScheme, schema.GroupVersion{Version: "v1"})
	testScheme.AddUnversionedTypes(schema.GroupVersion{Version: "v1"}, &metav1.Status{})
}

// Users of the tests. The executors are the identities of fakeIdentities.
var (
	alice       = &user.DefaultInfo{Name: "alice"}
	planStage   = &user.DefaultInfo{Name: "executor-plan"}
	applyStage  = &user.DefaultInfo{Name: "executor-apply"}
	brokenStage = &user.DefaultInfo{Name: "executor-broken"}
	forgedStage = &user.DefaultInfo{Name: "executor-forged"}
)

// fakeIdentities is an auth.Resolver: the users of ids are the executors of
// the given identities, brokenStage cannot be resolved now, forgedStage claims
// an identity it cannot prove, and every other user is no executor.
type fakeIdentities struct {
	ids map[string]executor.Identity
}

func (f *fakeIdentities) ExecutorIdentity(_ context.Context, u user.Info) (executor.Identity, bool, error) {
	switch u.GetName() {
	case brokenStage.Name:
		return executor.Identity{}, true, errors.New("the token review failed")
	case forgedStage.Name:
		return executor.Identity{}, true, fmt.Errorf("%w: pod team-a/x is not controlled by Job web-plan-1", auth.ErrRejected)
	}
	id, ok := f.ids[u.GetName()]
	return id, ok, nil
}

// testIdentities are the executors of the running test; newTestEnv empties it.
var testIdentities = &fakeIdentities{ids: map[string]executor.Identity{}}

// authenticated returns the user that the server's authenticator makes of
// u's credential (pkg/executor/auth): an executor for the executors of
// testIdentities, u itself for everybody else.
func authenticated(u user.Info) user.Info {
	a := auth.NewAuthenticator(authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
		return &authenticator.Response{User: u}, true, nil
	}), testIdentities)
	resp, _, _ := a.AuthenticateRequest(httptest.NewRequest(http.MethodGet, "/", nil))
	return resp.User
}

type testEnv struct {
	storage    *Storage
	artifacts  *artifacts.Store
	identities *fakeIdentities
	etcd       *clientv3.Client
}

// revision is etcd's revision: each transaction raises it by one.
func (e *testEnv) revision(t *testing.T) int64 {
	t.Helper()
	resp, err := e.etcd.Get(t.Context(), "/revision-probe")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// writesSince counts the transactions after revision before that wrote
// more than a log follower's own key, which a follower removes when the log
// ends, whenever it sees the end.
func (e *testEnv) writesSince(t *testing.T, before int64) int {
	t.Helper()
	now := e.revision(t)
	n := 0
	for rev := before + 1; rev <= now; rev++ {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		w := e.etcd.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(rev))
		resp := <-w
		cancel()
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision == rev && !strings.Contains(string(ev.Kv.Key), "/log-followers/") {
				n++
				break
			}
		}
	}
	return n
}

// newTestEnv starts an etcd and builds the storage of terraformruns on it.
func newTestEnv(t *testing.T) *testEnv {
	return newTestEnvWithArtifacts(t, artifacts.Options{})
}

func newTestEnvWithArtifacts(t *testing.T, opts artifacts.Options) *testEnv {
	return newTestEnvWith(t, opts, false)
}

// newTestEnvWithStates is newTestEnv with the state terrarun serves, in a
// namespace of UID "uid-1".
func newTestEnvWithStates(t *testing.T) *testEnv {
	return newTestEnvWith(t, artifacts.Options{}, true)
}

func newTestEnvWith(t *testing.T, opts artifacts.Options, states bool) *testEnv {
	t.Helper()
	endpoint := startEtcd(t)
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { client.Close() })
	cfg := storagebackend.NewDefaultConfig("/registry", testCodecs.LegacyCodec(v1alpha1.SchemeGroupVersion))
	cfg.Transport.ServerList = []string{endpoint}
	restOptions := generic.RESTOptions{
		StorageConfig:           cfg.ForResource(terrarun.Resource("terraformruns")),
		Decorator:               generic.UndecoratedStorage,
		ResourcePrefix:          "terrarun.dev/terraformruns",
		DeleteCollectionWorkers: 1,
	}
	opts.Prefix = "/artifacts/"
	testIdentities.ids = map[string]executor.Identity{}
	env := &testEnv{artifacts: artifacts.New(client, opts), identities: testIdentities, etcd: client}
	deps := Deps{Artifacts: env.artifacts, RunsOnState: env.runsOnState}
	if states {
		deps.States = &StateBackend{
			Store:        statestore.New(client, nil, statestore.Limits{}),
			NamespaceUID: func(context.Context, string) (string, error) { return "uid-1", nil },
		}
	}
	storage, err := NewStorage(testScheme, restOptions, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(storage.Run.Destroy)
	env.storage = storage
	return env
}

// startEtcd starts an embedded single-member etcd without fsync, with its
// data in t.TempDir(), and returns its client URL. It is stopped when the test
// ends.
func startEtcd(t *testing.T) string {
	t.Helper()
	e, err := standalone.StartEtcd(t.Context(), t.TempDir(), standalone.WithoutFsync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e.ClientURL()
}

// requestContext is the context of a request of u to namespace.
func requestContext(u user.Info, verb, subresource string) context.Context {
	ctx := genericapirequest.WithNamespace(context.Background(), testNamespace)
	if u != nil {
		ctx = genericapirequest.WithUser(ctx, authenticated(u))
	}
	return genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: verb, APIGroup: terrarun.GroupName, APIVersion: "v1alpha1",
		Namespace: testNamespace, Resource: "terraformruns", Subresource: subresource,
	})
}

// createRun creates a run named name and sets its status with status, and
// returns it as stored.
func (e *testEnv) createRun(t *testing.T, name string, status func(*terrarun.TerraformRunStatus)) *terrarun.TerraformRun {
	t.Helper()
	return e.createRunWith(t, name, nil, status)
}

// createRunWith creates run name as alice, with spec changed by spec, and then
// sets its status with status.
func (e *testEnv) createRunWith(t *testing.T, name string, spec func(*terrarun.TerraformRunSpec), status func(*terrarun.TerraformRunStatus)) *terrarun.TerraformRun {
	t.Helper()
	run := &terrarun.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace},
		Spec: terrarun.TerraformRunSpec{
			Source: terrarun.Source{Inline: map[string]string{"main.tf": `output "x" { value = 1 }`}},
		},
	}
	if spec != nil {
		spec(&run.Spec)
	}
	ctx := requestContext(alice, "create", "")
	if _, err := e.storage.Run.Create(ctx, run, rest.ValidateAllObjectFunc, &metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating run %s: %v", name, err)
	}
	return e.setStatus(t, name, status)
}

// setStatus changes the status of run name through the status store.
func (e *testEnv) setStatus(t *testing.T, name string, status func(*terrarun.TerraformRunStatus)) *terrarun.TerraformRun {
	t.Helper()
	run, err := e.storage.Plan.status.update(requestContext(alice, "update", "status"), name, func(run *terrarun.TerraformRun) error {
		if status != nil {
			status(&run.Status)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("setting the status of run %s: %v", name, err)
	}
	return run
}

func (e *testEnv) getRun(t *testing.T, name string) *terrarun.TerraformRun {
	t.Helper()
	run, err := e.storage.Plan.status.get(requestContext(alice, "get", ""), name)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// runningStage sets a status in which attempt of stageName runs, and makes
// u its executor.
func (e *testEnv) runningStage(t *testing.T, run *terrarun.TerraformRun, u user.Info, stageName terrarun.StageName, attempt int32) *terrarun.TerraformRun {
	t.Helper()
	e.identities.ids[u.GetName()] = executor.Identity{Namespace: run.Namespace, Name: run.Name, UID: string(run.UID), Stage: v1alpha1.StageName(stageName), Attempt: attempt}
	return e.setStatus(t, run.Name, func(st *terrarun.TerraformRunStatus) {
		st.Phase = terrarun.RunPhasePlanning
		if stageName == terrarun.StageApply {
			st.Phase = terrarun.RunPhaseApplying
		}
		now := metav1.Now()
		st.Stages = append(st.Stages, terrarun.StageStatus{Name: stageName, Attempt: attempt, StartTime: &now})
	})
}

// connect sends a request to a subresource as the generic handler
// (k8s.io/apiserver/pkg/endpoints/handlers.ConnectResource) does: it decodes
// the query into the options of NewConnectOptions with the parameter codec
// (400 when that fails), calls Connect with the request's context, writes a
// Connect error as a Status, and serves the request with the returned
// handler otherwise.
// typedBody is a request body with its Content-Type, for connect.
type typedBody struct {
	io.Reader
	contentType string
}

// headerBody is a request body with header fields of the request, for
// connect.
type headerBody struct {
	io.Reader
	header http.Header
}

func connect(t *testing.T, c rest.Connecter, u user.Info, method, name, query string, body io.Reader) *httptest.ResponseRecorder {
	t.Helper()
	return connectContext(t, context.Background(), c, u, method, name, query, body)
}

func connectContext(t *testing.T, parent context.Context, c rest.Connecter, u user.Info, method, name, query string, body io.Reader) *httptest.ResponseRecorder {
	t.Helper()
	verb, subresource := "get", ""
	switch method {
	case http.MethodPost:
		verb = "create"
	case http.MethodDelete:
		verb = "delete"
	}
	switch c.(type) {
	case *PlanREST:
		subresource = "plan"
	case *LogsREST:
		subresource = "logs"
	case *OutputsREST:
		subresource = "outputs"
	case *StateREST:
		subresource = "state"
	case *StateLockREST:
		subresource = "statelock"
	}
	req := httptest.NewRequest(method, "/apis/terrarun.dev/v1alpha1/namespaces/"+testNamespace+"/terraformruns/"+name+"/"+subresource+"?"+query, body)
	if tb, ok := body.(typedBody); ok {
		req.Header.Set("Content-Type", tb.contentType)
	}
	if hb, ok := body.(headerBody); ok {
		for k, v := range hb.header {
			req.Header[k] = v
		}
	}
	ctx := requestContext(u, verb, subresource)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(parent, cancel)
	defer stop()
	req = req.WithContext(ctx)
	w := httptest.NewRecorder()

	opts, _, _ := c.NewConnectOptions()
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	if err := runtime.NewParameterCodec(testScheme).DecodeParameters(q, v1alpha1.SchemeGroupVersion, opts); err != nil {
		responsewriters.ErrorNegotiated(apierrors.NewBadRequest(err.Error()), testCodecs, v1alpha1.SchemeGroupVersion, w, req)
		return w
	}
	handler, err := c.Connect(ctx, name, opts, &testResponder{w: w, req: req})
	if err != nil {
		responsewriters.ErrorNegotiated(err, testCodecs, v1alpha1.SchemeGroupVersion, w, req)
		return w
	}
	handler.ServeHTTP(w, req)
	return w
}

// testResponder is the rest.Responder of the generic handler.
type testResponder struct {
	w   http.ResponseWriter
	req *http.Request
}

func (r *testResponder) Object(code int, obj runtime.Object) {
	responsewriters.WriteObjectNegotiated(testCodecs, negotiation.DefaultEndpointRestrictions, v1alpha1.SchemeGroupVersion, r.w, r.req, code, obj, false)
}

func (r *testResponder) Error(err error) {
	responsewriters.ErrorNegotiated(err, testCodecs, v1alpha1.SchemeGroupVersion, r.w, r.req)
}

// expectStatus fails unless the response has code, and, for an error, a
// Status whose message contains every one of messages. It returns the Status
// of an error response.
func expectStatus(t *testing.T, w *httptest.ResponseRecorder, code int, messages ...string) metav1.Status {
	t.Helper()
	if w.Code != code {
		t.Fatalf("status %d, want %d; body: %s", w.Code, code, w.Body.String())
	}
	var st metav1.Status
	if code >= 300 {
		if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || st.Kind != "Status" {
			t.Fatalf("the body of a %d is not a Status (%v): %s", code, err, w.Body.String())
		}
		for _, m := range messages {
			if !strings.Contains(st.Message, m) {
				t.Errorf("message %q does not contain %q", st.Message, m)
			}
		}
	}
	return st
}

// expectCauses fails unless the Status of an Invalid error names exactly
// fields.
func expectCauses(t *testing.T, st metav1.Status, fields ...string) {
	t.Helper()
	if st.Reason != metav1.StatusReasonInvalid || st.Details == nil {
		t.Fatalf("not an Invalid status: %+v", st)
	}
	var got []string
	for _, c := range st.Details.Causes {
		got = append(got, c.Field)
	}
	if strings.Join(got, ",") != strings.Join(fields, ",") {
		t.Errorf("invalid fields %q, want %q", got, fields)
	}
}

// expectAPIError fails unless err is an API error with code and a message
// that contains every one of messages.
func expectAPIError(t *testing.T, err error, code int32, messages ...string) {
	t.Helper()
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != code {
		t.Fatalf("error %v, want an API error with code %d", err, code)
	}
	for _, m := range messages {
		if !strings.Contains(status.Status().Message, m) {
			t.Errorf("message %q does not contain %q", status.Status().Message, m)
		}
	}
}

// runsOnState stands in for the server's informer of runs: it lists the
// store, converts every run, and keeps those on run's state.
func (env *testEnv) runsOnState(ctx context.Context, run *v1alpha1.TerraformRun) ([]*v1alpha1.TerraformRun, error) {
	obj, err := env.storage.Run.List(genericapirequest.WithNamespace(ctx, run.Namespace), &metainternalversion.ListOptions{})
	if err != nil {
		return nil, err
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, runrules.StateIndexers)
	for i := range obj.(*terrarun.TerraformRunList).Items {
		if err := indexer.Add(runrules.FromInternal(&obj.(*terrarun.TerraformRunList).Items[i])); err != nil {
			return nil, err
		}
	}
	return runrules.SameState(indexer, run), nil
}
