package terraformworkspace

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// rerun posts body to the rerun subresource of workspace name as u, with the
// request context the generic handler builds for it (its RequestInfo names
// the workspace), and returns the run it answers.
func (e *testEnv) rerun(u user.Info, name string, body *terrarun.TerraformWorkspaceRerun) (*terrarun.TerraformRun, error) {
	obj, err := e.workspaces.Rerun.Create(requestContext(u, "create", "terraformworkspaces", name, "rerun"), name, body, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return obj.(*terrarun.TerraformRun), nil
}

// serveRerun stands in for the workspace controller: once the status of
// workspace ws counts rerun request n, it creates run name for it. The
// channel receives the outcome, once.
func (e *testEnv) serveRerun(t *testing.T, ws string, n int64, name string) <-chan error {
	t.Helper()
	ctx := t.Context()
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			if err := e.awaitRerunRequest(ctx, ws, n); err != nil {
				return err
			}
			return e.createRun(ctx, ws, name, fmt.Sprint(n))
		}()
	}()
	return done
}

// awaitRerunRequest watches workspace ws until its status.rerunRequests is
// n.
func (e *testEnv) awaitRerunRequest(ctx context.Context, ws string, n int64) error {
	ctx = genericapirequest.WithNamespace(ctx, testNamespace)
	w, err := e.workspaces.Workspace.Watch(ctx, &metainternalversion.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", ws), ResourceVersion: "0",
	})
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		obj := ev.Object
		if c, ok := obj.(runtime.CacheableObject); ok {
			obj = c.GetObject()
		}
		if got, ok := obj.(*terrarun.TerraformWorkspace); ok && got.Status.RerunRequests == n {
			return nil
		}
	}
	return fmt.Errorf("the watch of workspace %s ended before it counted rerun request %d: %w", ws, n, ctx.Err())
}

// TestRerun reruns a workspace three times, with and without the watch
// cache: the controller's run for each request is the answer, whether the
// controller creates it after the rerun began to wait or before, and
// neither a run of an earlier request nor one of another workspace is.
func TestRerun(t *testing.T) {
	for _, c := range []struct {
		name   string
		newEnv func(*testing.T) *testEnv
	}{
		{"etcd", newTestEnv},
		// The watch cache took the name in the rerun's RequestInfo (the
		// workspace's) for the name of the runs watched, and never saw
		// web-3.
		{"watch cache", newCachedTestEnv},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := c.newEnv(t)
			env.createWorkspace(t, alice, "web", nil)
			if err := env.createRun(t.Context(), "other", "other-1", "1"); err != nil {
				t.Fatal(err)
			}

			for _, step := range []struct {
				user     user.Info
				request  int64
				run      string
				existing bool // the controller created the run before the rerun waits
			}{
				{user: bob, request: 1, run: "web-3"},
				{user: alice, request: 2, run: "web-4"},
				{user: bob, request: 3, run: "web-5", existing: true},
			} {
				var served <-chan error
				if step.existing {
					if err := env.createRun(t.Context(), "web", step.run, fmt.Sprint(step.request)); err != nil {
						t.Fatal(err)
					}
				} else {
					served = env.serveRerun(t, "web", step.request, step.run)
				}
				run, err := env.rerun(step.user, "web", &terrarun.TerraformWorkspaceRerun{Reason: "try again"})
				if err != nil {
					t.Fatalf("rerun %d: %v", step.request, err)
				}
				if served != nil {
					if err := <-served; err != nil {
						t.Fatalf("the controller's run for request %d: %v", step.request, err)
					}
				}
				if run.Name != step.run || run.Labels[terrarun.LabelWorkspace] != "web" || run.Annotations[terrarun.AnnotationRerunRequest] != fmt.Sprint(step.request) {
					t.Errorf("rerun %d answered run %s (labels %v, annotations %v), want %s", step.request, run.Name, run.Labels, run.Annotations, step.run)
				}
				st := env.getWorkspace(t, "web").Status
				if st.RerunRequests != step.request || st.RerunRequestedBy != step.user.GetName() {
					t.Errorf("after rerun %d: status.rerunRequests %d, rerunRequestedBy %q; want %d, %q",
						step.request, st.RerunRequests, st.RerunRequestedBy, step.request, step.user.GetName())
				}
			}
		})
	}
}

// TestRerunRefusals checks the reruns refused before anything is recorded:
// a 409 that says why the workspace cannot start a run now (and, but for a
// workspace being deleted, what to do), a 403 without a user, and a 400,
// 422 or 404 for a wrong request.
func TestRerunRefusals(t *testing.T) {
	env := newTestEnv(t)
	for _, c := range []struct {
		name      string
		user      user.Info
		workspace func(t *testing.T, name string) // sets the workspace up; nil: none
		body      *terrarun.TerraformWorkspaceRerun
		code      int32
		messages  []string
	}{
		{
			name: "being deleted",
			user: alice,
			workspace: func(t *testing.T, name string) {
				env.createWorkspace(t, alice, name, func(ws *terrarun.TerraformWorkspace) { ws.Spec.DestroyOnDelete = true })
				// The destroy finalizer holds it.
				if _, _, err := env.workspaces.Workspace.Delete(requestContext(alice, "delete", "terraformworkspaces", name, ""), name, rest.ValidateAllObjectFunc, &metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				if env.getWorkspace(t, name).DeletionTimestamp == nil {
					t.Fatal("the workspace is not being deleted")
				}
			},
			code:     http.StatusConflict,
			messages: []string{`terraformworkspaces.terrarun.dev "being-deleted"`, "the workspace is being deleted"},
		},
		{
			name: "suspended",
			user: alice,
			workspace: func(t *testing.T, name string) {
				env.createWorkspace(t, alice, name, func(ws *terrarun.TerraformWorkspace) { ws.Spec.Suspend = true })
			},
			code:     http.StatusConflict,
			messages: []string{"the workspace is suspended; set spec.suspend to false first"},
		},
		{
			name: "run under way",
			user: alice,
			workspace: func(t *testing.T, name string) {
				env.createWorkspace(t, alice, name, nil)
				env.setStatus(t, name, func(st *terrarun.TerraformWorkspaceStatus) { st.CurrentRun = name + "-7" })
			},
			code: http.StatusConflict,
			messages: []string{"run run-under-way-7 of this workspace is under way; rerun once it has ended",
				"approve or discard its plan if it waits for approval, or cancel its stage in flight (the discard and cancel subresources of terraformruns/run-under-way-7)"},
		},
		{
			name:      "no user",
			workspace: func(t *testing.T, name string) { env.createWorkspace(t, alice, name, nil) },
			code:      http.StatusForbidden,
			messages:  []string{"a rerun requires an authenticated user"},
		},
		{
			name:      "user without a name",
			user:      &user.DefaultInfo{Groups: []string{user.AllAuthenticated}},
			workspace: func(t *testing.T, name string) { env.createWorkspace(t, alice, name, nil) },
			code:      http.StatusForbidden,
			messages:  []string{"a rerun requires an authenticated user"},
		},
		{
			name:      "body names another workspace",
			user:      alice,
			workspace: func(t *testing.T, name string) { env.createWorkspace(t, alice, name, nil) },
			body:      &terrarun.TerraformWorkspaceRerun{ObjectMeta: metav1.ObjectMeta{Name: "web"}},
			code:      http.StatusBadRequest,
			messages:  []string{`TerraformWorkspaceRerun names workspace "web" but was sent to workspace "other-name"; omit metadata.name or make it match`},
		},
		{
			name:      "reason too long",
			user:      alice,
			workspace: func(t *testing.T, name string) { env.createWorkspace(t, alice, name, nil) },
			body:      &terrarun.TerraformWorkspaceRerun{Reason: strings.Repeat("x", 1025)},
			code:      http.StatusUnprocessableEntity,
			messages:  []string{"reason: Too long", "shorten the reason"},
		},
		{
			name:     "no such workspace",
			user:     alice,
			code:     http.StatusNotFound,
			messages: []string{`terraformworkspaces.terrarun.dev "no-such-workspace" not found`},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := strings.ReplaceAll(c.name, " ", "-")
			if c.body != nil && c.body.Name != "" {
				name = "other-name"
			}
			if c.workspace != nil {
				c.workspace(t, name)
			}
			body := c.body
			if body == nil {
				body = &terrarun.TerraformWorkspaceRerun{}
			}
			_, err := env.rerun(c.user, name, body)
			expectAPIError(t, err, c.code, c.messages...)
			if c.workspace == nil {
				return
			}
			if st := env.getWorkspace(t, name).Status; st.RerunRequests != 0 || st.RerunRequestedBy != "" {
				t.Errorf("a refused rerun was recorded: rerunRequests %d, rerunRequestedBy %q", st.RerunRequests, st.RerunRequestedBy)
			}
		})
	}
}

// TestRerunDryRun: a dry run of a rerun is refused, and records no rerun.
func TestRerunDryRun(t *testing.T) {
	env := newTestEnv(t)
	env.createWorkspace(t, alice, "web", nil)
	_, err := env.workspaces.Rerun.Create(requestContext(alice, "create", "terraformworkspaces", "web", "rerun"), "web",
		&terrarun.TerraformWorkspaceRerun{}, rest.ValidateAllObjectFunc, &metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	expectAPIError(t, err, http.StatusBadRequest, "does not take dryRun")
	if st := env.getWorkspace(t, "web").Status; st.RerunRequests != 0 {
		t.Errorf("a dry run recorded a rerun: rerunRequests %d", st.RerunRequests)
	}
}

// fakeRuns is a rest.Watcher of runs whose watches send what next returns
// for them, in the order they are opened.
type fakeRuns struct {
	mu      sync.Mutex
	next    func(n int) *watch.FakeWatcher
	watches []*watch.FakeWatcher
}

// Watch implements rest.Watcher.
func (f *fakeRuns) Watch(context.Context, *metainternalversion.ListOptions) (watch.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.next(len(f.watches))
	f.watches = append(f.watches, w)
	return w, nil
}

// TestRerunWait checks what a rerun answers when the controller is slow or
// the watch ends, with a fake watch of runs in a synctest bubble, so that
// the 30s bound passes at once.
func TestRerunWait(t *testing.T) {
	run := func(request string) *terrarun.TerraformRun {
		return &terrarun.TerraformRun{ObjectMeta: metav1.ObjectMeta{
			Name: "web-9", Namespace: testNamespace,
			Labels:      map[string]string{terrarun.LabelWorkspace: "web"},
			Annotations: map[string]string{terrarun.AnnotationRerunRequest: request},
		}}
	}
	ctx := func() context.Context {
		return requestContext(alice, "create", "terraformworkspaces", "web", "rerun")
	}

	t.Run("the controller does not start the run", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			runs := &fakeRuns{next: func(int) *watch.FakeWatcher {
				w := watch.NewFakeWithChanSize(1, false)
				w.Add(run("2")) // an earlier request's run
				return w
			}}
			start := time.Now()
			_, err := (&RerunREST{runs: runs}).waitForRun(ctx(), "web", 3)
			expectAPIError(t, err, http.StatusGatewayTimeout,
				"rerun request 3 of workspace web is recorded, but the workspace controller has not started its run within 30s",
				"it starts when the controller runs: kubectl get terraformruns -l terrarun.dev/workspace=web")
			if waited := time.Since(start); waited != rerunWait {
				t.Errorf("the rerun waited %s, want %s", waited, rerunWait)
			}
			if len(runs.watches) != 1 || !runs.watches[0].IsStopped() {
				t.Errorf("watches %d, want one, stopped", len(runs.watches))
			}
		})
	})

	t.Run("the client goes away", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			runs := &fakeRuns{next: func(int) *watch.FakeWatcher { return watch.NewFake() }}
			ctx, cancel := context.WithTimeout(ctx(), time.Second)
			defer cancel()
			_, err := (&RerunREST{runs: runs}).waitForRun(ctx, "web", 3)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error %v, want the request's own deadline, not the rerun's timeout", err)
			}
		})
	})

	t.Run("a watch that ends is opened again", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			runs := &fakeRuns{next: func(n int) *watch.FakeWatcher {
				w := watch.NewFakeWithChanSize(1, false)
				if n == 0 {
					w.Stop() // as the watch cache ends its watches when it is re-initialized
				} else {
					w.Add(run("3"))
				}
				return w
			}}
			got, err := (&RerunREST{runs: runs}).waitForRun(ctx(), "web", 3)
			if err != nil {
				t.Fatal(err)
			}
			if run, _ := got.(*terrarun.TerraformRun); run == nil || run.Name != "web-9" || len(runs.watches) != 2 {
				t.Errorf("answered %#v after %d watches, want run web-9 after 2", got, len(runs.watches))
			}
		})
	})

	t.Run("a watch error, with the request recorded", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			runs := &fakeRuns{next: func(int) *watch.FakeWatcher {
				w := watch.NewFakeWithChanSize(1, false)
				w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError, Reason: metav1.StatusReasonInternalError, Message: "etcd is gone"})
				return w
			}}
			_, err := (&RerunREST{runs: runs}).waitForRun(ctx(), "web", 3)
			// Said with what happened to the request: recorded, so that a
			// client does not retry it into a second run.
			expectAPIError(t, err, http.StatusInternalServerError, "etcd is gone",
				"rerun request 3 of workspace web is recorded, and its run starts without a retry",
				"kubectl get terraformruns -l terrarun.dev/workspace=web")
		})
	})
}
