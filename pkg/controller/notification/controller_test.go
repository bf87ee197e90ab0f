package notification

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned/fake"
	informers "github.com/terrarun/terrarun/pkg/generated/informers/externalversions"
	"github.com/terrarun/terrarun/pkg/notification"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

// sent records the deliveries and answers each with the next of answers.
type sent struct {
	mu       sync.Mutex
	payloads []notification.Payload
	answers  []error
}

func (s *sent) send(_ context.Context, _ notification.Destination, p notification.Payload, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.payloads = append(s.payloads, p)
	if len(s.answers) > 0 {
		err := s.answers[0]
		s.answers = s.answers[1:]
		return err
	}
	return nil
}

func (s *sent) triggers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, p := range s.payloads {
		name := "-"
		if p.Run != nil {
			name = p.Run.Name
		}
		out = append(out, string(p.Trigger)+" "+name)
	}
	return out
}

func succeeded(name string, completed time.Time, labels map[string]string) *v1alpha1.TerraformRun {
	c := metav1.NewTime(completed)
	return &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "dev", UID: k8stypes.UID("uid-" + name), Labels: labels},
		Status:     v1alpha1.TerraformRunStatus{Phase: v1alpha1.RunPhaseSucceeded, CompletionTime: &c},
	}
}

func newNotification(triggers ...v1alpha1.NotificationTrigger) *v1alpha1.TerraformNotification {
	return &v1alpha1.TerraformNotification{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "dev", Generation: 1, CreationTimestamp: metav1.NewTime(t0)},
		Spec:       v1alpha1.TerraformNotificationSpec{Triggers: triggers, Webhook: &v1alpha1.WebhookDestination{URL: "https://hooks.example"}},
	}
}

// setup starts a controller on objects, with s as its sender, at clock's time.
func setup(t *testing.T, s *sent, clock *clocktesting.FakeClock, objects ...runtime.Object) (*Controller, *fake.Clientset) {
	t.Helper()
	client := fake.NewSimpleClientset(objects...)
	factory := informers.NewSharedInformerFactory(client, 0)
	v1 := factory.Terrarun().V1alpha1()
	c, err := New(client, v1.TerraformNotifications(), v1.TerraformRuns(), v1.TerraformWorkspaces(), Options{Clock: clock, Send: s.send})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(t.Context().Done())
	factory.WaitForCacheSync(t.Context().Done())
	return c, client
}

func status(t *testing.T, client *fake.Clientset) v1alpha1.TerraformNotificationStatus {
	t.Helper()
	n, err := client.TerrarunV1alpha1().TerraformNotifications("dev").Get(t.Context(), "n", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Status
}

// TestDeliversEachEventOnce: an event that happened before the
// notification existed is not delivered; one after is, once, also by a
// controller that starts again from the recorded status; a run of another
// workspace or not selected is not.
func TestDeliversEachEventOnce(t *testing.T) {
	s := &sent{}
	clock := clocktesting.NewFakeClock(t0.Add(time.Hour))
	ws := &v1alpha1.TerraformWorkspace{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "dev", UID: "ws-uid"}}
	owned := succeeded("app-1", t0.Add(time.Minute), map[string]string{v1alpha1.LabelWorkspace: "app"})
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "terrarun.dev/v1alpha1", Kind: "TerraformWorkspace", Name: "app", UID: "ws-uid", Controller: new(true)}}
	// A label alone does not make a run the workspace's.
	forged := succeeded("forged", t0.Add(time.Minute), map[string]string{v1alpha1.LabelWorkspace: "app"})
	n := newNotification(v1alpha1.TriggerSucceeded)
	n.Spec.Workspaces = []string{"app"}
	objects := []runtime.Object{n, ws, owned, forged, succeeded("before", t0.Add(-time.Minute), nil)}
	c, client := setup(t, s, clock, objects...)
	if _, err := c.sync(t.Context(), "dev/n"); err != nil {
		t.Fatal(err)
	}
	if got := s.triggers(); !slices.Equal(got, []string{"Succeeded app-1"}) {
		t.Fatalf("delivered %v, want only app-1's Succeeded", got)
	}
	st := status(t, client)
	if len(st.Deliveries) != 1 || st.Deliveries[0].State != v1alpha1.DeliveryDelivered || st.Deliveries[0].Attempts != 1 || st.Conditions[0].Reason != v1alpha1.ReasonDelivered {
		t.Errorf("status %+v", st)
	}
	// A new leader starts from what the status recorded.
	recorded, _ := client.TerrarunV1alpha1().TerraformNotifications("dev").Get(t.Context(), "n", metav1.GetOptions{})
	objects[0] = recorded
	again, _ := setup(t, s, clock, objects...)
	if _, err := again.sync(t.Context(), "dev/n"); err != nil {
		t.Fatal(err)
	}
	if got := s.triggers(); len(got) != 1 {
		t.Errorf("delivered again by a new controller: %v", got)
	}
}

// TestRetries: a failure that may pass is retried after a backoff, with the
// same ID, until it is delivered; a final refusal is not retried; a retry
// whose event is gone is given up.
func TestRetries(t *testing.T) {
	s := &sent{answers: []error{
		&notification.Error{Retry: true, Message: "the receiver answered 503 Service Unavailable"},
		&notification.Error{Message: "the receiver answered 404 Not Found"},
	}}
	clock := clocktesting.NewFakeClock(t0.Add(time.Hour))
	c, client := setup(t, s, clock, newNotification(v1alpha1.TriggerSucceeded),
		succeeded("a", t0.Add(time.Minute), nil), succeeded("b", t0.Add(2*time.Minute), nil))
	wait, err := c.sync(t.Context(), "dev/n")
	if err != nil {
		t.Fatal(err)
	}
	st := status(t, client)
	if wait != retryBase || st.Deliveries[0].State != v1alpha1.DeliveryRetrying || st.Deliveries[1].State != v1alpha1.DeliveryFailed {
		t.Fatalf("after a 503 and a 404: wait %s, deliveries %+v", wait, st.Deliveries)
	}
	if c := st.Conditions[0]; c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonDeliveryFailed {
		t.Errorf("Ready %+v", c)
	}
	// Not due yet: nothing is sent.
	if _, err := c.sync(t.Context(), "dev/n"); err != nil || len(s.triggers()) != 2 {
		t.Fatalf("sent before the retry was due: %v %v", s.triggers(), err)
	}
	clock.Step(retryBase)
	if _, err := c.sync(t.Context(), "dev/n"); err != nil {
		t.Fatal(err)
	}
	st = status(t, client)
	if got := s.triggers(); !slices.Equal(got, []string{"Succeeded a", "Succeeded b", "Succeeded a"}) || st.Deliveries[0].State != v1alpha1.DeliveryDelivered || st.Deliveries[0].Attempts != 2 {
		t.Errorf("after the retry: sent %v, deliveries %+v", got, st.Deliveries)
	}
	if s.payloads[0].ID != s.payloads[2].ID {
		t.Error("a retry has another ID")
	}
}

// TestTrim: the status keeps the newest deliveries, and an event at or
// before the horizon is not delivered again.
func TestTrim(t *testing.T) {
	st := &v1alpha1.TerraformNotificationStatus{}
	for i := range v1alpha1.MaxNotificationDeliveries + 5 {
		at := metav1.NewTime(t0.Add(time.Duration(i) * time.Second))
		state := v1alpha1.DeliveryDelivered
		if i == 0 {
			state = v1alpha1.DeliveryRetrying
		}
		st.Deliveries = append(st.Deliveries, v1alpha1.NotificationDelivery{ID: string(rune('a' + i%26)), EventTime: &at, State: state})
	}
	trim(st)
	if len(st.Deliveries) != v1alpha1.MaxNotificationDeliveries || st.Deliveries[0].State != v1alpha1.DeliveryRetrying || !st.Horizon.Equal(&metav1.Time{Time: t0.Add(5 * time.Second)}) {
		t.Errorf("%d deliveries, first %+v, horizon %v", len(st.Deliveries), st.Deliveries[0], st.Horizon)
	}
}
