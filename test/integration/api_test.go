package integration

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	applyv1alpha1 "github.com/terrarun/terrarun/pkg/generated/applyconfiguration/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned/scheme"
	"github.com/terrarun/terrarun/test/internal/harness"
)

const mainTF = `resource "terraform_data" "hello" {
  input = "hello"
}
`

// apiOnly runs the server without the run controller: these tests are about
// the API (CRUD, watch, validation, immutability, apply), and a controller
// moving runs along would add watch events and resourceVersions of its own.
const apiOnly = "--run-controller=false"

func inlineRun(name string) *v1alpha1.TerraformRun {
	return &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TerraformRunSpec{
			Source: v1alpha1.Source{Inline: map[string]string{"main.tf": mainTF}},
		},
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestClientsetLifecycle drives create, get, list, watch, update and delete
// through the generated clientset.
func TestClientsetLifecycle(t *testing.T) {
	s := startInProcess(t, t.TempDir(), apiOnly)
	ctx := ctxT(t)
	runs := s.Client.TerrarunV1alpha1().TerraformRuns("default")

	w, err := runs.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()

	created, err := runs.Create(ctx, inlineRun("hello"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	// Defaults and server-recorded fields.
	if created.Status.Phase != v1alpha1.RunPhasePending {
		t.Errorf("phase = %q, want Pending", created.Status.Phase)
	}
	if created.Spec.Operation != v1alpha1.OperationApply || created.Spec.Approval.Mode != v1alpha1.ApprovalModeManual ||
		created.Spec.Engine.Binary != v1alpha1.EngineTerraform || created.Spec.Timeouts.Plan == nil || created.Spec.Workspace != "default" {
		t.Errorf("spec was not defaulted: %+v", created.Spec)
	}
	if created.Spec.Creator == nil || created.Spec.Creator.Username != "terrarun-admin" {
		t.Errorf("creator = %+v, want the admin kubeconfig's user terrarun-admin", created.Spec.Creator)
	}
	if created.Generation != 1 {
		t.Errorf("generation = %d, want 1", created.Generation)
	}

	got, err := runs.Get(ctx, "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.UID != created.UID {
		t.Errorf("get returned another object: uid %s, want %s", got.UID, created.UID)
	}

	if _, err := runs.Create(ctx, inlineRun("second"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create second: %v", err)
	}
	list, err := runs.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(list.Items) != 2 {
		t.Fatalf("list has %d items, want 2", len(list.Items))
	}
	pending, err := runs.List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Pending"})
	if err != nil || len(pending.Items) != 2 {
		t.Fatalf("list by status.phase: %v, %d items", err, len(pending.Items))
	}
	if other, err := s.Client.TerrarunV1alpha1().TerraformRuns("other").List(ctx, metav1.ListOptions{}); err != nil || len(other.Items) != 0 {
		t.Fatalf("namespace isolation: %v, %d items", err, len(other.Items))
	}

	got.Labels = map[string]string{"team": "infra"}
	updated, err := runs.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("metadata update: %v", err)
	}
	if updated.Labels["team"] != "infra" || updated.Generation != 1 {
		t.Errorf("after update: labels %v, generation %d", updated.Labels, updated.Generation)
	}

	// Status goes through /status only.
	updated.Status.Phase = v1alpha1.RunPhaseSucceeded
	ignored, err := runs.Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update with status: %v", err)
	}
	if ignored.Status.Phase != v1alpha1.RunPhasePending {
		t.Errorf("the main resource wrote status: phase %q", ignored.Status.Phase)
	}
	ignored.Status.Phase = v1alpha1.RunPhasePlanning
	viaStatus, err := runs.UpdateStatus(ctx, ignored, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status: %v", err)
	}
	if viaStatus.Status.Phase != v1alpha1.RunPhasePlanning {
		t.Errorf("phase after /status = %q, want Planning", viaStatus.Status.Phase)
	}

	if err := runs.Delete(ctx, "hello", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := runs.Get(ctx, "hello", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: %v, want NotFound", err)
	}

	// The watch saw every step, in order.
	want := []watch.EventType{watch.Added, watch.Added, watch.Modified, watch.Modified, watch.Deleted}
	for i, typ := range want {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != typ {
				t.Fatalf("watch event %d = %s, want %s", i, ev.Type, typ)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("watch event %d (%s) did not arrive", i, typ)
		}
	}
}

// TestInvalidSpecReportsFieldPath sends bad specs and reads the exact field errors.
func TestInvalidSpecReportsFieldPath(t *testing.T) {
	s := startInProcess(t, t.TempDir(), apiOnly)
	ctx := ctxT(t)
	runs := s.Client.TerrarunV1alpha1().TerraformRuns("default")

	cases := map[string]struct {
		mutate func(*v1alpha1.TerraformRun)
		field  string
	}{
		"bad variable name": {
			mutate: func(r *v1alpha1.TerraformRun) { r.Spec.Variables = []v1alpha1.Variable{{Name: "9lives", Value: "x"}} },
			field:  "spec.variables[0].name",
		},
		"two sources": {
			mutate: func(r *v1alpha1.TerraformRun) {
				r.Spec.Source.Git = &v1alpha1.GitSource{URL: "https://github.com/x/y.git", Ref: "main"}
			},
			field: "spec.source.git",
		},
		"credentials in git url": {
			mutate: func(r *v1alpha1.TerraformRun) {
				r.Spec.Source = v1alpha1.Source{Git: &v1alpha1.GitSource{URL: "https://bob:hunter2@github.com/x/y.git", Ref: "main"}}
			},
			field: "spec.source.git.url",
		},
		"bad inline file name": {
			mutate: func(r *v1alpha1.TerraformRun) { r.Spec.Source.Inline["../evil.sh"] = "echo" },
			field:  "spec.source.inline[../evil.sh]",
		},
		"timeout too long": {
			mutate: func(r *v1alpha1.TerraformRun) { r.Spec.Timeouts.Plan = &metav1.Duration{Duration: 48 * time.Hour} },
			field:  "spec.timeouts.plan",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run := inlineRun("bad")
			tc.mutate(run)
			_, err := runs.Create(ctx, run, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create: %v, want 422 Invalid", err)
			}
			if !hasCause(err, tc.field) {
				t.Fatalf("error %q has no cause at %s", err, tc.field)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error echoes the git password: %s", err)
			}
		})
	}
	// A duration that does not parse is named by its field too.
	body := `{"apiVersion":"terrarun.dev/v1alpha1","kind":"TerraformRun","metadata":{"name":"bad"},` +
		`"spec":{"source":{"inline":{"main.tf":""}},"timeouts":{"plan":"10m","apply":"5x"}}}`
	err := s.Client.TerrarunV1alpha1().RESTClient().Post().Namespace("default").Resource("terraformruns").
		SetHeader("Content-Type", "application/json").Body([]byte(body)).Do(ctx).Error()
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), `spec.timeouts.apply: time: unknown unit "x" in duration "5x"`) {
		t.Errorf("a bad duration: %v, want 400 naming spec.timeouts.apply", err)
	}
	// Nothing was stored.
	if list, err := runs.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Fatalf("list after invalid creates: %v, %d items", err, len(list.Items))
	}
}

// TestSpecUpdateIsRefused checks spec immutability end to end.
func TestSpecUpdateIsRefused(t *testing.T) {
	s := startInProcess(t, t.TempDir(), apiOnly)
	ctx := ctxT(t)
	runs := s.Client.TerrarunV1alpha1().TerraformRuns("default")
	run, err := runs.Create(ctx, inlineRun("hello"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run.Spec.Operation = v1alpha1.OperationDestroy
	_, err = runs.Update(ctx, run, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !hasCause(err, "spec") {
		t.Fatalf("spec update: %v, want Invalid with a cause at spec", err)
	}
	if !strings.Contains(err.Error(), "create a new TerraformRun") {
		t.Errorf("error does not say what to do: %v", err)
	}

	// A patch is refused the same way, and a forged creator too.
	_, err = runs.Patch(ctx, "hello", types.MergePatchType, []byte(`{"spec":{"creator":{"username":"mallory"}}}`), metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) || !hasCause(err, "spec") {
		t.Fatalf("creator patch: %v, want Invalid at spec", err)
	}
	after, err := runs.Get(ctx, "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Spec.Operation != v1alpha1.OperationApply || after.Spec.Creator.Username != "terrarun-admin" {
		t.Fatalf("the refused update changed the object: %+v", after.Spec)
	}
}

// TestRestartKeepsObjects restarts the server on the same data directory,
// switching its storage encoding: runs stored in JSON (as before protobuf
// storage) are read by a server that stores protobuf, and a directory that
// holds both is read by either.
func TestRestartKeepsObjects(t *testing.T) {
	dir := t.TempDir()
	// Stored in JSON, as versions before protobuf storage stored them.
	s := startInProcess(t, dir, apiOnly, "--storage-media-type=application/json")
	ctx := ctxT(t)
	for _, name := range []string{"one", "two", "three"} {
		if _, err := s.Client.TerrarunV1alpha1().TerraformRuns("default").Create(ctx, inlineRun(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before, err := s.Client.TerrarunV1alpha1().TerraformRuns("default").Get(ctx, "two", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Stop()

	s2 := startInProcess(t, dir, apiOnly)
	list, err := s2.Client.TerrarunV1alpha1().TerraformRuns("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 3 {
		t.Fatalf("after restart: %d runs, want 3", len(list.Items))
	}
	after, err := s2.Client.TerrarunV1alpha1().TerraformRuns("default").Get(ctx, "two", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != before.UID || after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("run changed across restart: uid %s→%s rv %s→%s", before.UID, after.UID, before.ResourceVersion, after.ResourceVersion)
	}
	// Rewritten in protobuf, then read by a server that stores JSON.
	after.Labels = map[string]string{"stored": "protobuf"}
	if _, err := s2.Client.TerrarunV1alpha1().TerraformRuns("default").Update(ctx, after, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s2.Stop()
	s3 := startInProcess(t, dir, apiOnly, "--storage-media-type=application/json")
	list, err = s3.Client.TerrarunV1alpha1().TerraformRuns("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 3 {
		t.Fatalf("after the second restart: %d runs, want 3", len(list.Items))
	}
	for _, run := range list.Items {
		if run.Name == "two" && (run.Labels["stored"] != "protobuf" || run.Spec.Source.Inline["main.tf"] != mainTF) {
			t.Fatalf("the run stored in protobuf read back as labels %v, source %v", run.Labels, run.Spec.Source)
		}
	}
}

// TestServerSideApplyConflict applies with two field managers.
func TestServerSideApplyConflict(t *testing.T) {
	s := startInProcess(t, t.TempDir(), apiOnly)
	ctx := ctxT(t)
	runs := s.Client.TerrarunV1alpha1().TerraformRuns("default")

	cfg := applyv1alpha1.TerraformRun("applied", "default").
		WithLabels(map[string]string{"owner": "alice"}).
		WithSpec(applyv1alpha1.TerraformRunSpec().
			WithWorkspace("staging").
			WithSource(applyv1alpha1.Source().WithInline(map[string]string{"main.tf": mainTF})))
	run, err := runs.Apply(ctx, cfg, metav1.ApplyOptions{FieldManager: "alice"})
	if err != nil {
		t.Fatalf("first apply: %v", err)
	}
	if len(run.ManagedFields) == 0 {
		t.Fatal("no managedFields after server-side apply")
	}
	// Re-applying the same configuration is a no-op, not a spec change.
	if _, err := runs.Apply(ctx, cfg, metav1.ApplyOptions{FieldManager: "alice"}); err != nil {
		t.Fatalf("re-apply by the same manager: %v", err)
	}

	bob := applyv1alpha1.TerraformRun("applied", "default").
		WithLabels(map[string]string{"owner": "bob"}).
		WithSpec(applyv1alpha1.TerraformRunSpec().WithWorkspace("production"))
	_, err = runs.Apply(ctx, bob, metav1.ApplyOptions{FieldManager: "bob"})
	if !apierrors.IsConflict(err) {
		t.Fatalf("apply by bob: %v, want a 409 conflict", err)
	}
	for _, f := range []string{".metadata.labels.owner", ".spec.workspace"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("conflict does not name %s: %v", f, err)
		}
	}
	if !strings.Contains(err.Error(), `"alice"`) {
		t.Errorf("conflict does not name the other manager: %v", err)
	}

	// Forcing takes the label, but the spec stays immutable.
	labelsOnly := applyv1alpha1.TerraformRun("applied", "default").WithLabels(map[string]string{"owner": "bob"})
	if _, err := runs.Apply(ctx, labelsOnly, metav1.ApplyOptions{FieldManager: "bob", Force: true}); err != nil {
		t.Fatalf("forced label apply: %v", err)
	}
	_, err = runs.Apply(ctx, bob, metav1.ApplyOptions{FieldManager: "bob", Force: true})
	if !apierrors.IsInvalid(err) || !hasCause(err, "spec") {
		t.Fatalf("forced spec apply: %v, want Invalid at spec", err)
	}
}

func hasCause(err error, field string) bool {
	status, ok := err.(apierrors.APIStatus)
	if !ok || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Field == field {
			return true
		}
	}
	return false
}

// TestContentNegotiation: the types are served in protobuf, to a client
// that accepts only protobuf and to one that accepts protobuf or JSON, as
// many Kubernetes clients send; tables stay JSON, and CBOR needs its feature
// gate. A clientset that speaks protobuf creates, reads, lists, updates and
// watches runs.
func TestContentNegotiation(t *testing.T) {
	s := startInProcess(t, t.TempDir(), apiOnly)
	ctx := ctxT(t)
	if _, err := s.Client.TerrarunV1alpha1().TerraformRuns("default").Create(ctx, inlineRun("hello"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const (
		runs = "/apis/terrarun.dev/v1alpha1/namespaces/default/terraformruns"
		pb   = runtime.ContentTypeProtobuf
	)
	for _, tc := range []struct {
		path, accept, wantType, wantBody string
		wantCode                         int
	}{
		{runs, pb + ", application/json", pb, "", http.StatusOK},
		{runs + "/hello", pb + ", */*", pb, "", http.StatusOK},
		{runs + "/hello", pb, pb, "", http.StatusOK},
		{runs, "application/json;as=Table;v=v1;g=meta.k8s.io, application/json", "application/json", `"kind":"Table"`, http.StatusOK},
		// CBOR only with its feature gate (TestCBOR).
		{runs + "/hello", "application/cbor", "application/json", "", http.StatusNotAcceptable},
	} {
		code, ctype, body, err := harness.GetWithAccept(ctx, s.Config, tc.path, tc.accept)
		if err != nil {
			t.Fatal(err)
		}
		if code != tc.wantCode || ctype != tc.wantType || !strings.Contains(string(body), tc.wantBody) {
			t.Errorf("GET %s with Accept %q: %d %s %.200q; want %d %s with %s", tc.path, tc.accept, code, ctype, body, tc.wantCode, tc.wantType, tc.wantBody)
			continue
		}
		if ctype != pb {
			continue
		}
		// Protobuf: Kubernetes' envelope, which decodes to the run(s).
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
		if err != nil {
			t.Errorf("GET %s: decoding the protobuf body: %v", tc.path, err)
			continue
		}
		switch obj := obj.(type) {
		case *v1alpha1.TerraformRunList:
			if len(obj.Items) != 1 || obj.Items[0].Name != "hello" || obj.Items[0].Spec.Source.Inline["main.tf"] != mainTF {
				t.Errorf("GET %s: protobuf list %+v, want the run hello with its configuration", tc.path, obj.Items)
			}
		case *v1alpha1.TerraformRun:
			if obj.Name != "hello" || obj.Spec.Source.Inline["main.tf"] != mainTF {
				t.Errorf("GET %s: protobuf run %s with source %v, want hello with its configuration", tc.path, obj.Name, obj.Spec.Source)
			}
		default:
			t.Errorf("GET %s: protobuf body decoded to %T", tc.path, obj)
		}
	}

	cfg := rest.CopyConfig(s.Config)
	cfg.ContentType = pb
	cfg.AcceptContentTypes = pb
	client := versioned.NewForConfigOrDie(cfg).TerrarunV1alpha1().TerraformRuns("default")
	w, err := client.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=proto"})
	if err != nil {
		t.Fatalf("watch in protobuf: %v", err)
	}
	defer w.Stop()
	created, err := client.Create(ctx, inlineRun("proto"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create in protobuf: %v", err)
	}
	if created.Spec.Source.Inline["main.tf"] != mainTF || created.Spec.Creator == nil {
		t.Errorf("created in protobuf: source %v, creator %v; want the configuration and the recorded creator", created.Spec.Source, created.Spec.Creator)
	}
	created.Labels = map[string]string{"format": "protobuf"}
	if _, err := client.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update in protobuf: %v", err)
	}
	got, err := client.Get(ctx, "proto", metav1.GetOptions{})
	if err != nil || got.Labels["format"] != "protobuf" {
		t.Fatalf("get in protobuf: %v, labels %v", err, got.Labels)
	}
	list, err := client.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("list in protobuf: %v, %d runs, want 2", err, len(list.Items))
	}
	for _, want := range []watch.EventType{watch.Added, watch.Modified} {
		select {
		case ev := <-w.ResultChan():
			run, ok := ev.Object.(*v1alpha1.TerraformRun)
			if ev.Type != want || !ok || run.Name != "proto" {
				t.Fatalf("watch in protobuf: %s %T, want %s of the run proto", ev.Type, ev.Object, want)
			}
		case <-ctx.Done():
			t.Fatalf("watch in protobuf: no %s event", want)
		}
	}
}

// TestCBOR: with --feature-gates=CBORServingAndStorage=true the server
// serves CBOR to a client that asks for it, and JSON to everyone else.
func TestCBOR(t *testing.T) {
	e := newRunEnv(t, "--feature-gates=CBORServingAndStorage=true", "--run-controller=false")
	ctx := ctxT(t)
	if _, err := e.client.TerrarunV1alpha1().TerraformRuns("default").Create(ctx, inlineRun("hello"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, accept, wantType, wantBody string }{
		{"/apis/terrarun.dev/v1alpha1/namespaces/default/terraformruns/hello", "application/cbor", "application/cbor", "TerraformRun"},
		{"/apis/terrarun.dev/v1alpha1/namespaces/default/terraformruns", "application/cbor", "application/cbor", "TerraformRunList"},
		{"/apis/terrarun.dev/v1alpha1/namespaces/default/terraformruns/hello", "application/json", "application/json", `"kind":"TerraformRun"`},
	} {
		code, ctype, body, err := harness.GetWithAccept(ctx, e.Config, tc.path, tc.accept)
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusOK || ctype != tc.wantType || !bytes.Contains(body, []byte(tc.wantBody)) {
			t.Errorf("GET %s with Accept %q: %d %s %.200q; want 200 %s holding %s", tc.path, tc.accept, code, ctype, body, tc.wantType, tc.wantBody)
		}
		if tc.wantType == "application/cbor" && !bytes.HasPrefix(body, []byte{0xd9, 0xd9, 0xf7}) {
			t.Errorf("GET %s: the body does not start with CBOR's self-describe tag: % x", tc.path, body[:min(8, len(body))])
		}
	}
}

// TestListsFollowChanges: LISTs in JSON and protobuf (which write the items
// an earlier LIST encoded, from the list cache) show every change to a run
// or a workspace: a label, a status write, a deletion, a new run; and they
// hold what a GET of each object holds.
func TestListsFollowChanges(t *testing.T) {
	s := startInProcess(t, t.TempDir(), apiOnly)
	ctx := ctxT(t)
	runs := s.Client.TerrarunV1alpha1().TerraformRuns("default")
	for _, name := range []string{"one", "two", "three"} {
		if _, err := runs.Create(ctx, inlineRun(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	workspaces := s.Client.TerrarunV1alpha1().TerraformWorkspaces("default")
	ws := &v1alpha1.TerraformWorkspace{ObjectMeta: metav1.ObjectMeta{Name: "net"},
		Spec: v1alpha1.TerraformWorkspaceSpec{Template: v1alpha1.TerraformRunSpec{Source: v1alpha1.Source{Inline: map[string]string{"main.tf": mainTF}}}}}
	if _, err := workspaces.Create(ctx, ws, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const path = "/apis/terrarun.dev/v1alpha1/namespaces/default/"
	// list LISTs runs and workspaces in both formats, and requires each list
	// to hold exactly what GETs of its objects hold.
	list := func(when string) {
		t.Helper()
		for _, accept := range []string{"application/json", runtime.ContentTypeProtobuf} {
			for _, resource := range []string{"terraformruns", "terraformworkspaces"} {
				code, _, body, err := harness.GetWithAccept(ctx, s.Config, path+resource, accept)
				if err != nil || code != http.StatusOK {
					t.Fatalf("%s: LIST %s in %s: %d %v %.200s", when, resource, accept, code, err, body)
				}
				obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
				if err != nil {
					t.Fatalf("%s: decoding the LIST of %s in %s: %v", when, resource, accept, err)
				}
				var items []runtime.Object
				switch l := obj.(type) {
				case *v1alpha1.TerraformRunList:
					want, err := runs.List(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
					if err != nil || len(want.Items) != len(l.Items) {
						t.Fatalf("%s: LIST %s in %s has %d runs, a LIST through the client %v: %v", when, resource, accept, len(l.Items), want, err)
					}
					for i := range l.Items {
						items = append(items, &l.Items[i])
					}
				case *v1alpha1.TerraformWorkspaceList:
					for i := range l.Items {
						items = append(items, &l.Items[i])
					}
				default:
					t.Fatalf("%s: LIST %s in %s decoded to %T", when, resource, accept, obj)
				}
				for _, item := range items {
					var got runtime.Object
					switch item := item.(type) {
					case *v1alpha1.TerraformRun:
						got, err = runs.Get(ctx, item.Name, metav1.GetOptions{})
					case *v1alpha1.TerraformWorkspace:
						got, err = workspaces.Get(ctx, item.Name, metav1.GetOptions{})
					}
					if err != nil {
						t.Fatal(err)
					}
					got.GetObjectKind().SetGroupVersionKind(item.GetObjectKind().GroupVersionKind())
					if !apiequality.Semantic.DeepEqual(got, item) {
						t.Errorf("%s: LIST %s in %s holds\n%+v\nwhere a GET holds\n%+v", when, resource, accept, item, got)
					}
				}
			}
		}
	}
	list("first")
	list("again, unchanged")

	one, err := runs.Patch(ctx, "one", types.MergePatchType, []byte(`{"metadata":{"labels":{"listed":"twice"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	one.Status.Message = "a status write"
	if _, err := runs.UpdateStatus(ctx, one, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := runs.Delete(ctx, "two", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := runs.Create(ctx, inlineRun("four"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := workspaces.Patch(ctx, "net", types.MergePatchType, []byte(`{"metadata":{"annotations":{"changed":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	list("after the changes")

	got, err := runs.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range got.Items {
		names = append(names, r.Name)
		if r.Name == "one" && (r.Labels["listed"] != "twice" || r.Status.Message != "a status write") {
			t.Errorf("run one is listed as it was: labels %v, status message %q", r.Labels, r.Status.Message)
		}
	}
	if strings.Join(names, ",") != "four,one,three" {
		t.Errorf("runs listed: %v, want four, one and three", names)
	}
	metrics := mustKubectl(t, s.Kubeconfig, "get", "--raw", "/metrics")
	for _, format := range []string{"json", "protobuf"} {
		if !strings.Contains(metrics, `terrarun_list_cache_items_total{format="`+format+`",result="hit"}`) {
			t.Errorf("no LIST in %s was answered from the list cache:\n%s", format, grepLines(metrics, "terrarun_list_cache"))
		}
	}
}

// TestInternedRunsStayApart: runs decoded from storage share the strings and
// managed field sets they have in common (the storage codec interns them);
// changing one run by server-side apply, merge patch and update leaves the
// other as it was, in the watch cache and in etcd.
func TestInternedRunsStayApart(t *testing.T) {
	s := startInProcess(t, t.TempDir(), apiOnly)
	ctx := ctxT(t)
	runs := s.Client.TerrarunV1alpha1().TerraformRuns("default")
	for _, name := range []string{"one", "two"} {
		cfg := applyv1alpha1.TerraformRun(name, "default").
			WithLabels(map[string]string{"team": "a"}).
			WithSpec(applyv1alpha1.TerraformRunSpec().
				WithWorkspace("shared").
				WithSource(applyv1alpha1.Source().WithInline(map[string]string{"main.tf": mainTF})))
		if _, err := runs.Apply(ctx, cfg, metav1.ApplyOptions{FieldManager: "alice"}); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) map[string]*v1alpha1.TerraformRun {
		got := map[string]*v1alpha1.TerraformRun{}
		for _, rv := range []string{"0", ""} { // the watch cache, then etcd
			r, err := runs.Get(ctx, name, metav1.GetOptions{ResourceVersion: rv})
			if err != nil {
				t.Fatal(err)
			}
			got["rv="+rv] = r
		}
		return got
	}
	before := read("two")

	one := applyv1alpha1.TerraformRun("one", "default").WithLabels(map[string]string{"team": "b", "extra": "x"})
	if _, err := runs.Apply(ctx, one, metav1.ApplyOptions{FieldManager: "bob", Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := runs.Patch(ctx, "one", types.MergePatchType, []byte(`{"metadata":{"labels":{"patched":"yes"}}}`), metav1.PatchOptions{FieldManager: "carol"}); err != nil {
		t.Fatal(err)
	}
	r, err := runs.Get(ctx, "one", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.Annotations = map[string]string{"updated": "yes"}
	if _, err := runs.Update(ctx, r, metav1.UpdateOptions{FieldManager: "dave"}); err != nil {
		t.Fatal(err)
	}

	for how, after := range read("two") {
		b := before[how]
		if !apiequality.Semantic.DeepEqual(b.ManagedFields, after.ManagedFields) || !apiequality.Semantic.DeepEqual(b.Labels, after.Labels) || !apiequality.Semantic.DeepEqual(b.Annotations, after.Annotations) {
			t.Errorf("run two (%s) changed with run one:\nbefore %+v %v\nafter  %+v %v %v", how, b.ManagedFields, b.Labels, after.ManagedFields, after.Labels, after.Annotations)
		}
	}
	managers := map[string]bool{}
	for _, f := range read("one")["rv="].ManagedFields {
		managers[f.Manager] = true
	}
	for _, m := range []string{"alice", "bob", "carol", "dave"} {
		if !managers[m] {
			t.Errorf("run one's managed fields lack %s: %v", m, managers)
		}
	}
}
