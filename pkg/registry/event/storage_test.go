package event

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"github.com/terrarun/terrarun/pkg/standalone"
)

const testNamespace = "team-a"

// testScheme holds core/v1 Events as the standalone server does: as their
// own internal version.
var testScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(corev1.SchemeGroupVersion, &corev1.Event{}, &corev1.EventList{})
	s.AddKnownTypes(schema.GroupVersion{Version: runtime.APIVersionInternal}, &corev1.Event{}, &corev1.EventList{})
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	if err := AddFieldLabelConversions(s); err != nil {
		panic(err)
	}
	return s
}()

// testEnv is the store of Events on an embedded etcd, and a client of that
// etcd to look at what the store wrote.
type testEnv struct {
	store *genericregistry.Store
	etcd  *clientv3.Client
}

// newTestEnv starts an etcd and builds the store of Events on it.
func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	e, err := standalone.StartEtcd(t.Context(), t.TempDir(), standalone.WithoutFsync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{e.ClientURL()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	cfg := storagebackend.NewDefaultConfig("/registry", serializer.NewCodecFactory(testScheme).LegacyCodec(corev1.SchemeGroupVersion))
	cfg.Transport.ServerList = []string{e.ClientURL()}
	store, err := NewREST(testScheme, generic.RESTOptions{
		StorageConfig:           cfg.ForResource(corev1.Resource("events")),
		Decorator:               generic.UndecoratedStorage,
		ResourcePrefix:          "events",
		DeleteCollectionWorkers: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Destroy)
	return &testEnv{store: store, etcd: client}
}

// ctx is the context of a request to the test namespace.
func ctx() context.Context {
	return genericapirequest.WithNamespace(context.Background(), testNamespace)
}

// newEvent returns Event name about run web-1 of the test namespace,
// changed by change when not nil.
func newEvent(name string, change func(*corev1.Event)) *corev1.Event {
	e := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "terrarun.dev/v1alpha1", Kind: "TerraformRun", Namespace: testNamespace, Name: "web-1", UID: "uid-web-1",
		},
		Reason: "Planned", Message: "Plan: 1 to add.", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "terrarun-controller"},
	}
	if change != nil {
		change(e)
	}
	return e
}

// TestValidation checks the Events the store refuses, each under the field
// at fault, and that the others are stored.
func TestValidation(t *testing.T) {
	env := newTestEnv(t)
	for _, c := range []struct {
		name   string
		change func(*corev1.Event)
		field  string // "": stored
		detail string
	}{
		{name: "normal"},
		{name: "warning", change: func(e *corev1.Event) { e.Type = corev1.EventTypeWarning }},
		{name: "no type", change: func(e *corev1.Event) { e.Type = "" }},
		{name: "message of 4096 bytes", change: func(e *corev1.Event) { e.Message = strings.Repeat("x", 4096) }},
		{
			name:   "about an object of another namespace",
			change: func(e *corev1.Event) { e.InvolvedObject.Namespace = "team-b" },
			field:  "involvedObject.namespace", detail: "must match metadata.namespace",
		},
		{
			name:   "about an object of no namespace",
			change: func(e *corev1.Event) { e.InvolvedObject.Namespace = "" },
			field:  "involvedObject.namespace", detail: "must match metadata.namespace",
		},
		{
			name:   "about nothing",
			change: func(e *corev1.Event) { e.InvolvedObject.Name = "" },
			field:  "involvedObject.name", detail: "Required value",
		},
		{
			name:   "unknown type",
			change: func(e *corev1.Event) { e.Type = "Error" },
			field:  "type", detail: `Unsupported value: "Error": supported values: "Normal", "Warning"`,
		},
		{
			name:   "message too long",
			change: func(e *corev1.Event) { e.Message = strings.Repeat("x", 4097) },
			field:  "message", detail: "may not be more than 4096 bytes",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := strings.ReplaceAll(c.name, " ", "-")
			_, err := env.store.Create(ctx(), newEvent(name, c.change), rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
			if c.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var status apierrors.APIStatus
			if !errors.As(err, &status) || status.Status().Code != http.StatusUnprocessableEntity {
				t.Fatalf("error %v, want a 422", err)
			}
			st := status.Status()
			if st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Field != c.field || !strings.Contains(st.Details.Causes[0].Message, c.detail) {
				t.Errorf("refused with %+v, want one cause of field %s saying %q", st.Details, c.field, c.detail)
			}
			// An update is validated as a create is.
			if _, err := env.store.Create(ctx(), newEvent(name, nil), rest.ValidateAllObjectFunc, &metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			_, _, err = env.store.Update(ctx(), name, rest.DefaultUpdatedObjectInfo(newEvent(name, c.change)), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Errorf("update: error %v, want Invalid", err)
			}
		})
	}
}

// TestUpdate checks the writes of the event recorder: an update creates a
// missing Event, and needs no resourceVersion.
func TestUpdate(t *testing.T) {
	env := newTestEnv(t)
	update := func(e *corev1.Event) (bool, error) {
		_, created, err := env.store.Update(ctx(), e.Name, rest.DefaultUpdatedObjectInfo(e), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
		return created, err
	}
	if created, err := update(newEvent("series", func(e *corev1.Event) { e.Count = 1 })); err != nil || !created {
		t.Fatalf("an update of a missing Event: created %v, %v; want it created", created, err)
	}
	if created, err := update(newEvent("series", func(e *corev1.Event) { e.Count = 2 })); err != nil || created {
		t.Fatalf("an update without resourceVersion: created %v, %v; want it updated", created, err)
	}
	obj, err := env.store.Get(ctx(), "series", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := obj.(*corev1.Event).Count; got != 2 {
		t.Errorf("count %d, want 2", got)
	}
}

// TestTTL checks that an Event expires an hour after its last write: each
// write stores it with an etcd lease of about an hour (the store reuses a
// lease for up to 5% of its TTL).
func TestTTL(t *testing.T) {
	env := newTestEnv(t)
	expectLease := func(when string) {
		t.Helper()
		resp, err := env.etcd.Get(t.Context(), "/registry/events/"+testNamespace+"/deploy")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("%s: reading the Event from etcd: %v, %d keys", when, err, len(resp.Kvs))
		}
		lease := clientv3.LeaseID(resp.Kvs[0].Lease)
		if lease == clientv3.NoLease {
			t.Fatalf("%s: the Event has no lease: it never expires", when)
		}
		ttl, err := env.etcd.TimeToLive(t.Context(), lease)
		if err != nil {
			t.Fatal(err)
		}
		if min, max := int64(TTL.Seconds())-60, int64(TTL.Seconds()*1.05); ttl.TTL < min || ttl.TTL > max {
			t.Errorf("%s: the Event expires in %ds, want %d to %d", when, ttl.TTL, min, max)
		}
	}
	if _, err := env.store.Create(ctx(), newEvent("deploy", nil), rest.ValidateAllObjectFunc, &metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectLease("created")
	_, _, err := env.store.Update(ctx(), "deploy", rest.DefaultUpdatedObjectInfo(newEvent("deploy", func(e *corev1.Event) { e.Count = 2 })),
		rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expectLease("updated")
}

// TestFieldSelectors checks the field selectors kubectl uses on Events:
// those of kube-apiserver are accepted, others refused, and they select.
func TestFieldSelectors(t *testing.T) {
	env := newTestEnv(t)
	for _, e := range []*corev1.Event{
		newEvent("planned", nil),
		newEvent("failed", func(e *corev1.Event) {
			e.Reason, e.Type = "Failed", corev1.EventTypeWarning
			e.InvolvedObject.Name, e.InvolvedObject.UID = "web-2", "uid-web-2"
			// An events.k8s.io recorder sets no source component.
			e.Source, e.ReportingController = corev1.EventSource{}, "terrarun.dev/workspace-controller"
		}),
	} {
		if _, err := env.store.Create(ctx(), e, rest.ValidateAllObjectFunc, &metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ selector, want string }{
		{"involvedObject.uid=uid-web-2", "failed"},
		{"involvedObject.name=web-1,involvedObject.kind=TerraformRun,involvedObject.namespace=team-a", "planned"},
		{"type=Warning", "failed"},
		{"reason=Planned", "planned"},
		{"source=terrarun-controller", "planned"},
		{"source=terrarun.dev/workspace-controller", "failed"},
		{"reportingComponent=terrarun.dev/workspace-controller", "failed"},
		{"metadata.name=planned", "planned"},
		{"involvedObject.apiVersion=terrarun.dev/v1alpha1", "failed,planned"},
	} {
		t.Run(c.selector, func(t *testing.T) {
			sel, err := fields.ParseSelector(c.selector)
			if err != nil {
				t.Fatal(err)
			}
			// As the handler does: each field label converted first.
			for _, r := range sel.Requirements() {
				if _, _, err := testScheme.ConvertFieldLabel(corev1.SchemeGroupVersion.WithKind("Event"), r.Field, r.Value); err != nil {
					t.Fatalf("field %s refused: %v", r.Field, err)
				}
			}
			obj, err := env.store.List(ctx(), &metainternalversion.ListOptions{FieldSelector: sel})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range obj.(*corev1.EventList).Items {
				got = append(got, e.Name)
			}
			if strings.Join(got, ",") != c.want {
				t.Errorf("selected %q, want %s", got, c.want)
			}
		})
	}
	t.Run("unknown field", func(t *testing.T) {
		_, _, err := testScheme.ConvertFieldLabel(corev1.SchemeGroupVersion.WithKind("Event"), "spec.reason", "x")
		if err == nil || err.Error() != "field label not supported for Events: spec.reason" {
			t.Errorf("error %v, want field label not supported for Events: spec.reason", err)
		}
	})
}
