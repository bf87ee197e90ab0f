package notification

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) *metav1.Time { t := metav1.NewTime(t0.Add(d)); return &t }

// awaiting is a run whose plan waits for an approval.
func awaiting() *v1alpha1.TerraformRun {
	return &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "r1", Namespace: "dev", UID: "u1"},
		Spec: v1alpha1.TerraformRunSpec{Operation: v1alpha1.OperationApply, Creator: &v1alpha1.Creator{Username: "alice"},
			Variables: []v1alpha1.Variable{{Name: "db_password", Value: "s3cr3t-value"}}},
		Status: v1alpha1.TerraformRunStatus{
			Phase: v1alpha1.RunPhaseAwaitingApproval,
			Plan:  &v1alpha1.PlanSummary{Digest: "sha256:aaa", Add: 1, HasChanges: true},
			Conditions: []metav1.Condition{
				{Type: v1alpha1.ConditionApproved, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAwaitingApproval, LastTransitionTime: *at(time.Minute)},
			},
			Outputs: []v1alpha1.OutputStatus{{Name: "password", Sensitive: true, ValueOmitted: "Sensitive"}},
		},
	}
}

func triggers(events []Event) []v1alpha1.NotificationTrigger {
	var out []v1alpha1.NotificationTrigger
	for _, ev := range events {
		out = append(out, ev.Trigger)
	}
	return out
}

// TestRunEvents: each trigger is read from what the run's status says, at
// the time it happened, with an ID that does not change as the run goes on
// and differs between plans.
func TestRunEvents(t *testing.T) {
	policy := func(reason string) func(*v1alpha1.TerraformRun) {
		return func(r *v1alpha1.TerraformRun) {
			r.Status.Conditions = append(r.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionPolicyChecked, Status: metav1.ConditionFalse, Reason: reason, LastTransitionTime: *at(time.Minute)})
			result := v1alpha1.PolicyResult{Enforcement: v1alpha1.EnforcementSoftMandatory, Outcome: v1alpha1.PolicyFailed}
			if reason == v1alpha1.ReasonPolicyDenied {
				result.Enforcement = v1alpha1.EnforcementHardMandatory
			}
			r.Status.Policy = &v1alpha1.PolicyStatus{PlanDigest: "sha256:aaa", Policies: []v1alpha1.CheckedPolicy{{Name: "p"}}, Results: []v1alpha1.PolicyResult{result}}
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.TerraformRun)
		want   []v1alpha1.NotificationTrigger
	}{
		{name: "awaiting approval", change: func(*v1alpha1.TerraformRun) {}, want: []v1alpha1.NotificationTrigger{v1alpha1.TriggerNeedsApproval}},
		{name: "approved, not applying yet", change: func(r *v1alpha1.TerraformRun) {
			r.Status.Approval = &v1alpha1.ApprovalStatus{ApprovedBy: "bob", PlanDigest: "sha256:aaa"}
		}},
		{name: "held for an override", change: policy(v1alpha1.ReasonPolicyOverrideRequired), want: []v1alpha1.NotificationTrigger{v1alpha1.TriggerNeedsOverride}},
		{name: "denied", change: func(r *v1alpha1.TerraformRun) {
			policy(v1alpha1.ReasonPolicyDenied)(r)
			r.Status.Phase, r.Status.CompletionTime = v1alpha1.RunPhaseFailed, at(2*time.Minute)
		}, want: []v1alpha1.NotificationTrigger{v1alpha1.TriggerPolicyFailed, v1alpha1.TriggerFailed}},
		{name: "applied", change: func(r *v1alpha1.TerraformRun) {
			r.Status.Approval = &v1alpha1.ApprovalStatus{ApprovedBy: "bob", PlanDigest: "sha256:aaa"}
			r.Status.Stages = []v1alpha1.StageStatus{{Name: v1alpha1.StagePlan, Attempt: 1, StartTime: at(0)}, {Name: v1alpha1.StageApply, Attempt: 1, StartTime: at(3 * time.Minute)}}
			r.Status.Phase, r.Status.CompletionTime = v1alpha1.RunPhaseSucceeded, at(4*time.Minute)
		}, want: []v1alpha1.NotificationTrigger{v1alpha1.TriggerApplying, v1alpha1.TriggerSucceeded}},
		{name: "canceled", change: func(r *v1alpha1.TerraformRun) {
			r.Status.Phase, r.Status.CompletionTime = v1alpha1.RunPhaseCanceled, at(4*time.Minute)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := awaiting()
			tc.change(run)
			if got := triggers(RunEvents(run, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("triggers %v, want %v", got, tc.want)
			}
		})
	}

	run := awaiting()
	first := RunEvents(run, nil)[0]
	if !first.Time.Equal(t0.Add(time.Minute)) {
		t.Errorf("NeedsApproval at %s, want the Approved condition's transition", first.Time)
	}
	run.Status.Message = "changed"
	if again := RunEvents(run, nil)[0]; again.ID != first.ID {
		t.Errorf("the ID changed with the run's message: %s, then %s", first.ID, again.ID)
	}
	run.Status.Plan.Digest = "sha256:bbb"
	if other := RunEvents(run, nil)[0]; other.ID == first.ID {
		t.Error("two plans' NeedsApproval share an ID")
	}
	other := awaiting()
	other.UID = "u2"
	if RunEvents(other, nil)[0].ID == first.ID {
		t.Error("two runs' NeedsApproval share an ID")
	}
}

// TestWorkspaceEvents: Drifted while the condition is True, a new ID for
// each drift.
func TestWorkspaceEvents(t *testing.T) {
	ws := &v1alpha1.TerraformWorkspace{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "dev", UID: "w1"}}
	if got := WorkspaceEvents(ws); len(got) != 0 {
		t.Errorf("a workspace that never drifted: %v", triggers(got))
	}
	ws.Status.Conditions = []metav1.Condition{{Type: v1alpha1.WorkspaceConditionDrifted, Status: metav1.ConditionTrue, Reason: "ChangesFound", Message: "Drift check app-7 found changes: +0 ~1 -0", LastTransitionTime: *at(0)}}
	first := WorkspaceEvents(ws)
	if !slices.Equal(triggers(first), []v1alpha1.NotificationTrigger{v1alpha1.TriggerDrifted}) {
		t.Fatalf("triggers %v", triggers(first))
	}
	ws.Status.Conditions[0].LastTransitionTime = *at(time.Hour)
	if WorkspaceEvents(ws)[0].ID == first[0].ID {
		t.Error("a later drift has the same ID")
	}
	p := NewPayload(first[0], "dev/n", "https://runs.example/")
	if p.Run != nil || p.Workspace.Name != "app" || p.URL != "https://runs.example/namespaces/dev/terraformworkspaces/app" || !strings.Contains(p.Message, "~1") {
		t.Errorf("payload %+v", p)
	}
}

// TestPayload: names, counts, digest, who is missing and a link; never a
// variable's value.
func TestPayload(t *testing.T) {
	ev := RunEvents(awaiting(), nil)[0]
	p := NewPayload(ev, "dev/approvals", "https://runs.example")
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "s3cr3t-value") {
		t.Errorf("a variable's value is in the payload: %s", b)
	}
	if p.URL != "https://runs.example/namespaces/dev/terraformruns/r1" || p.Run.Plan.Digest != "sha256:aaa" || p.Run.Creator != "alice" ||
		!strings.Contains(p.Message, "waits for an approval: +1 ~0 -0, plan sha256:aaa") || p.Run.Path != "/apis/terrarun.dev/v1alpha1/namespaces/dev/terraformruns/r1" {
		t.Errorf("payload %s", b)
	}
	if p := NewPayload(ev, "dev/approvals", ""); p.URL != "" {
		t.Errorf("a link without a web view: %q", p.URL)
	}
	failed := awaiting()
	failed.Status.Phase, failed.Status.CompletionTime = v1alpha1.RunPhaseFailed, at(time.Hour)
	failed.Status.Message = strings.Repeat("x", 5000) + " <https://evil.example|Approve here> <!channel>"
	p = NewPayload(RunEvents(failed, nil)[0], "dev/n", "https://runs.example")
	if len(p.Message) > maxMessage {
		t.Errorf("a message of %d bytes", len(p.Message))
	}
	failed.Status.Message = "apply failed <https://evil.example|Approve here> <!channel> & more"
	text := SlackText(NewPayload(RunEvents(failed, nil)[0], "dev/n", "https://runs.example"))
	if strings.Contains(text, "<https://evil") || strings.Contains(text, "<!channel>") || !strings.Contains(text, "&lt;!channel&gt; &amp; more") ||
		!strings.HasSuffix(text, "<https://runs.example/namespaces/dev/terraformruns/r1|Open in terrarun>") {
		t.Errorf("Slack text %q", text)
	}
}

// receiver is a real HTTP server that records what it receives and answers
// with the statuses queued in answers (then 200).
type receiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []*http.Request
	// bodies are the bodies received, in order.
	bodies  [][]byte
	answers []int
}

func newReceiver(t *testing.T, answers ...int) *receiver {
	r := &receiver{answers: answers}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got, r.bodies = append(r.got, req), append(r.bodies, body)
		code := http.StatusOK
		if len(r.answers) > 0 {
			code, r.answers = r.answers[0], r.answers[1:]
		}
		r.mu.Unlock()
		if code == http.StatusFound {
			http.Redirect(w, req, "/elsewhere", code)
			return
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, "internal page the receiver must not read back")
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// TestSendWebhook: a webhook gets the JSON payload signed as Standard
// Webhooks sign it; 5xx and 429 are retried, other refusals and redirects
// are final, and no error carries what the receiver answered.
func TestSendWebhook(t *testing.T) {
	ctx := context.Background()
	p := NewPayload(RunEvents(awaiting(), nil)[0], "dev/n", "")
	key := []byte("the-hmac-key-of-the-test")
	r := newReceiver(t, http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusNotFound, http.StatusFound)
	d := Destination{Kind: KindWebhook, URL: r.srv.URL + "/hook", Key: key}
	for _, want := range []struct {
		retry bool
		msg   string
	}{{true, "503 Service Unavailable"}, {true, "429 Too Many Requests"}, {false, "404 Not Found"}, {false, "a redirect is not followed"}} {
		err := Send(ctx, d, p, time.Now())
		var e *Error
		if !errors.As(err, &e) || e.Retry != want.retry || !strings.Contains(e.Message, want.msg) || strings.Contains(e.Message, "internal page") {
			t.Errorf("Send: %v (%+v), want retry %v and %q", err, e, want.retry, want.msg)
		}
	}
	if err := Send(ctx, d, p, time.Now()); err != nil {
		t.Fatalf("Send to a receiver that answers 200: %v", err)
	}
	if len(r.got) != 5 {
		t.Fatalf("%d requests, want 5 (no redirect followed)", len(r.got))
	}
	last := r.got[4]
	wh, _ := standardwebhooks.NewWebhookRaw(key)
	if err := wh.Verify(r.bodies[4], last.Header); err != nil {
		t.Errorf("the signature does not verify: %v (headers %v)", err, last.Header)
	}
	if last.Header.Get("webhook-id") != p.ID || last.Header.Get("Content-Type") != "application/json" {
		t.Errorf("headers %v", last.Header)
	}
	forged := append([]byte{}, r.bodies[4]...)
	forged = []byte(strings.Replace(string(forged), "NeedsApproval", "Succeeded", 1))
	if err := wh.Verify(forged, last.Header); err == nil {
		t.Error("a changed body verifies")
	}
	var got Payload
	if err := json.Unmarshal(r.bodies[4], &got); err != nil || got.ID != p.ID || got.Trigger != v1alpha1.TriggerNeedsApproval {
		t.Errorf("body %s: %v", r.bodies[4], err)
	}
	unsigned := d
	unsigned.Key = nil
	if err := Send(ctx, unsigned, p, time.Now()); err != nil || r.got[5].Header.Get("webhook-signature") != "" {
		t.Errorf("unsigned: %v, headers %v", err, r.got[5].Header)
	}
}

// TestSendSlack: Slack gets a text message; an unreachable URL (a
// credential) is never in the error.
func TestSendSlack(t *testing.T) {
	r := newReceiver(t)
	p := NewPayload(RunEvents(awaiting(), nil)[0], "dev/n", "https://runs.example")
	if err := Send(context.Background(), Destination{Kind: KindSlack, URL: r.srv.URL + "/services/T0/B0/secret-token"}, p, time.Now()); err != nil {
		t.Fatal(err)
	}
	var msg map[string]any
	if err := json.Unmarshal(r.bodies[0], &msg); err != nil || !strings.Contains(msg["text"].(string), "waits for an approval") {
		t.Errorf("Slack got %s: %v", r.bodies[0], err)
	}
	r.srv.Close()
	err := Send(context.Background(), Destination{Kind: KindSlack, URL: r.srv.URL + "/services/T0/B0/secret-token"}, p, time.Now())
	var e *Error
	if !errors.As(err, &e) || !e.Retry || strings.Contains(e.Message, "secret-token") {
		t.Errorf("an unreachable Slack URL: %v", err)
	}
}

// TestSendCloudEvent: a CloudEvents receiver gets a 1.0 event in binary
// mode whose id is the event's, its data the payload, signed.
func TestSendCloudEvent(t *testing.T) {
	key := []byte("k")
	var got *cloudevents.Event
	var verified error
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ev, err := cloudevents.NewEventFromHTTPRequest(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got = ev
		wh, _ := standardwebhooks.NewWebhookRaw(key)
		verified = wh.Verify(ev.Data(), req.Header)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	p := NewPayload(RunEvents(awaiting(), nil)[0], "dev/n", "")
	if err := Send(context.Background(), Destination{Kind: KindCloudEvents, URL: srv.URL, Key: key}, p, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.ID() != p.ID || got.Type() != "dev.terrarun.run.NeedsApproval" || got.Source() != p.Run.Path || got.Subject() != "r1" || got.SpecVersion() != "1.0" {
		t.Fatalf("event %v", got)
	}
	if verified != nil {
		t.Errorf("the signature does not verify: %v", verified)
	}
	var data Payload
	if err := got.DataAs(&data); err != nil || data.ID != p.ID {
		t.Errorf("data %s: %v", got.Data(), err)
	}
}
