package terraformworkspace

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/install"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/registry/terraformrun"
	"github.com/terrarun/terrarun/pkg/standalone"
)

// The tests run the workspace registry on real storage, as
// pkg/registry/terraformrun's tests do: the generic registry stores of
// terraformworkspaces and terraformruns on one embedded etcd per test,
// called with request contexts as the generic handlers build them.

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

// Users of the tests; controller is the server's loopback client, as which
// the workspace controller creates a workspace's runs.
var (
	alice      = &user.DefaultInfo{Name: "alice", UID: "uid-alice", Groups: []string{"team-a", user.AllAuthenticated}}
	bob        = &user.DefaultInfo{Name: "bob", UID: "uid-bob", Groups: []string{"team-a", user.AllAuthenticated}}
	controller = &user.DefaultInfo{Name: user.APIServerUser, Groups: []string{user.SystemPrivilegedGroup}}
)

// testEnv is the storage of workspaces and of the runs a rerun waits for.
type testEnv struct {
	workspaces *Storage
	runs       *terraformrun.Storage
}

// restOptions is a generic.RESTOptionsGetter of resources on one etcd, each
// under its own prefix, decorated with decorator.
type restOptions struct {
	config    *storagebackend.Config
	decorator generic.StorageDecorator
}

// GetRESTOptions implements generic.RESTOptionsGetter.
func (o restOptions) GetRESTOptions(resource schema.GroupResource, _ runtime.Object) (generic.RESTOptions, error) {
	return generic.RESTOptions{
		StorageConfig:           o.config.ForResource(resource),
		Decorator:               o.decorator,
		ResourcePrefix:          resource.Group + "/" + resource.Resource,
		DeleteCollectionWorkers: 1,
	}, nil
}

// newTestEnv starts an etcd and builds the storage of workspaces and runs on
// it, straight on etcd (no watch cache).
func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	return newTestEnvWith(t, generic.UndecoratedStorage)
}

// newCachedTestEnv is newTestEnv with the watch cache in front of etcd, as
// the server builds its stores; it returns once the caches are ready.
func newCachedTestEnv(t *testing.T) *testEnv {
	t.Helper()
	env := newTestEnvWith(t, genericregistry.StorageWithCacher())
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return env.runs.Run.ReadinessCheck() == nil && env.workspaces.Workspace.ReadinessCheck() == nil, nil
	})
	if err != nil {
		t.Fatalf("the watch caches did not become ready: %v", err)
	}
	return env
}

// newTestEnvWith starts an etcd and builds the stores on it with decorator.
func newTestEnvWith(t *testing.T, decorator generic.StorageDecorator) *testEnv {
	t.Helper()
	e, err := standalone.StartEtcd(t.Context(), t.TempDir(), standalone.WithoutFsync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	cfg := storagebackend.NewDefaultConfig("/registry", testCodecs.LegacyCodec(v1alpha1.SchemeGroupVersion))
	cfg.Transport.ServerList = []string{e.ClientURL()}
	opts := restOptions{config: cfg, decorator: decorator}
	runs, err := terraformrun.NewStorage(testScheme, opts, terraformrun.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(runs.Run.Destroy)
	workspaces, err := NewStorage(testScheme, opts, terrarun.ServerDefaults{Image: terrarun.DefaultExecutorImage}, false, runs.Run)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(workspaces.Workspace.Destroy)
	return &testEnv{workspaces: workspaces, runs: runs}
}

// requestContext is the context of a request of u (none when nil) to verb
// resource/subresource name in the test namespace.
func requestContext(u user.Info, verb, resource, name, subresource string) context.Context {
	ctx := genericapirequest.WithNamespace(context.Background(), testNamespace)
	if u != nil {
		ctx = genericapirequest.WithUser(ctx, u)
	}
	return genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: verb, APIGroup: terrarun.GroupName, APIVersion: "v1alpha1",
		Namespace: testNamespace, Resource: resource, Name: name, Subresource: subresource,
	})
}

// newWorkspace returns workspace name with an inline source, changed by
// change when not nil.
func newWorkspace(name string, change func(*terrarun.TerraformWorkspace)) *terrarun.TerraformWorkspace {
	ws := &terrarun.TerraformWorkspace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace},
		Spec: terrarun.TerraformWorkspaceSpec{
			Template: terrarun.TerraformRunSpec{
				Source: terrarun.Source{Inline: map[string]string{"main.tf": `output "x" { value = 1 }`}},
			},
		},
	}
	if change != nil {
		change(ws)
	}
	return ws
}

// createWorkspace creates workspace name as u, changed by change, and
// returns it as stored.
func (e *testEnv) createWorkspace(t *testing.T, u user.Info, name string, change func(*terrarun.TerraformWorkspace)) *terrarun.TerraformWorkspace {
	t.Helper()
	obj, err := e.workspaces.Workspace.Create(requestContext(u, "create", "terraformworkspaces", "", ""), newWorkspace(name, change), rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating workspace %s: %v", name, err)
	}
	return obj.(*terrarun.TerraformWorkspace)
}

// updateWorkspace changes workspace name with change, as u through the main
// resource, and returns what the store answered.
func (e *testEnv) updateWorkspace(u user.Info, name string, change func(*terrarun.TerraformWorkspace)) (*terrarun.TerraformWorkspace, error) {
	obj, _, err := e.workspaces.Workspace.Update(requestContext(u, "update", "terraformworkspaces", name, ""), name,
		rest.DefaultUpdatedObjectInfo(nil, func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
			ws := old.(*terrarun.TerraformWorkspace).DeepCopy()
			change(ws)
			return ws, nil
		}), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return obj.(*terrarun.TerraformWorkspace), nil
}

// setStatus changes the status of workspace name through the status
// subresource, as the workspace controller does.
func (e *testEnv) setStatus(t *testing.T, name string, status func(*terrarun.TerraformWorkspaceStatus)) {
	t.Helper()
	_, _, err := e.workspaces.Status.Update(requestContext(controller, "update", "terraformworkspaces", name, "status"), name,
		rest.DefaultUpdatedObjectInfo(nil, func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
			ws := old.(*terrarun.TerraformWorkspace).DeepCopy()
			status(&ws.Status)
			return ws, nil
		}), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("setting the status of workspace %s: %v", name, err)
	}
}

// getWorkspace returns workspace name as stored.
func (e *testEnv) getWorkspace(t *testing.T, name string) *terrarun.TerraformWorkspace {
	t.Helper()
	obj, err := e.workspaces.Workspace.Get(requestContext(alice, "get", "terraformworkspaces", name, ""), name, &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*terrarun.TerraformWorkspace)
}

// createRun creates run name of workspace ws for its rerun request
// request, as the workspace controller does: as the server itself, with
// the workspace label and the rerun-request annotation.
func (e *testEnv) createRun(ctx context.Context, ws, name, request string) error {
	run := &terrarun.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: testNamespace,
			Labels:      map[string]string{terrarun.LabelWorkspace: ws},
			Annotations: map[string]string{terrarun.AnnotationRerunRequest: request},
		},
		Spec: newWorkspace(ws, nil).Spec.Template,
	}
	_, err := e.runs.Run.Create(genericapirequest.WithUser(genericapirequest.WithNamespace(ctx, testNamespace), controller),
		run, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	return err
}

// expectAPIError fails unless err is an API error with code and a message
// that contains every one of messages. It returns the error's Status.
func expectAPIError(t *testing.T, err error, code int32, messages ...string) metav1.Status {
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
	return status.Status()
}
