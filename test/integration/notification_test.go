package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
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

// delivery is one request a test receiver accepted or refused.
type delivery struct {
	kind     string // webhook, slack or cloudevents
	id       string
	trigger  string
	run      string
	body     []byte
	verified bool
	accepted bool
}

// notificationReceiver is a real HTTP server that takes the deliveries of
// the three kinds, by path, checks signatures with the Standard Webhooks
// library, and refuses the first webhook delivery with a 500.
type notificationReceiver struct {
	srv *httptest.Server
	key []byte

	mu         sync.Mutex
	deliveries []delivery
	failed     bool
}

func newNotificationReceiver(t *testing.T, key string) *notificationReceiver {
	r := &notificationReceiver{key: []byte(key)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *notificationReceiver) serve(w http.ResponseWriter, req *http.Request) {
	wh, _ := standardwebhooks.NewWebhookRaw(r.key)
	d := delivery{kind: strings.TrimPrefix(req.URL.Path, "/")}
	switch d.kind {
	case "cloudevents":
		ev, err := cloudevents.NewEventFromHTTPRequest(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		d.id, d.body = ev.ID(), ev.Data()
		d.verified = wh.Verify(d.body, req.Header) == nil
	default:
		d.body, _ = io.ReadAll(req.Body)
		d.id = req.Header.Get("webhook-id")
		d.verified = wh.Verify(d.body, req.Header) == nil
	}
	var p struct {
		Trigger string `json:"trigger"`
		Run     *struct {
			Name string `json:"name"`
		} `json:"run"`
		Workspace *struct {
			Name string `json:"name"`
		} `json:"workspace"`
	}
	var slackMessage struct {
		Text string `json:"text"`
	}
	if d.kind == "slack" && json.Unmarshal(d.body, &slackMessage) == nil {
		// Slack gets a sentence: the trigger is read from it.
		d.trigger, d.run = "Slack", slackMessage.Text
	} else if json.Unmarshal(d.body, &p) == nil {
		d.trigger = p.Trigger
		if p.Run != nil {
			d.run = p.Run.Name
		} else if p.Workspace != nil {
			d.run = "workspace " + p.Workspace.Name
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	d.accepted = d.kind != "webhook" || r.failed
	if d.kind == "webhook" {
		r.failed = true
	}
	r.deliveries = append(r.deliveries, d)
	if !d.accepted {
		http.Error(w, "down for a moment", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// accepted are the deliveries of kind the receiver accepted, as
// "TRIGGER RUN".
func (r *notificationReceiver) accepted(kind string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, d := range r.deliveries {
		if d.kind == kind && d.accepted {
			out = append(out, d.trigger+" "+d.run)
		}
	}
	slices.Sort(out)
	return out
}

func (r *notificationReceiver) waitFor(t *testing.T, kind string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		got := r.accepted(kind)
		if !slices.ContainsFunc(want, func(w string) bool { return !slices.Contains(got, w) }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s deliveries %q, want %q among them", kind, got, want)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestNotifications drives TerraformNotifications through the real server,
// engine and kubectl, with real HTTP receivers: each trigger (NeedsApproval,
// NeedsOverride, Applying, Succeeded, Failed, PolicyFailed, Drifted) is
// delivered once, signed as Standard Webhooks sign, to a webhook that
// refuses the first delivery (retried with the same ID), to Slack with a
// link to the web view, and as CloudEvents; no payload carries a secret; a
// viewer may not write a notification; status says what was delivered.
func TestNotifications(t *testing.T) {
	e := newRunEnv(t, "--web-view-url=https://runs.example.com/terrarun")
	kc := e.Kubeconfig
	const hmacKey = "hmac-key-of-the-notification-test"
	e.secret(t, "default", "db", "password", dbPassword)
	e.secret(t, "default", "hook", "key", hmacKey)
	r := newNotificationReceiver(t, hmacKey)
	e.secret(t, "default", "slack", "url", r.srv.URL+"/slack")
	admin := e.mint(t, "pat", "terrarun:policy-admins")
	viewer := e.mint(t, "vic", "terrarun:viewers")

	policies := filepath.Join(t.TempDir(), "policies.yaml")
	writeFile(t, policies, policyManifest("notify-hard", "scenario: denied", `  validations:
    - name: no-adds
      expression: size(summary.add) == 0
      enforcement: HardMandatory
`)+"---\n"+policyManifest("notify-soft", "scenario: held", `  validations:
    - name: no-adds
      expression: size(summary.add) == 0
      enforcement: SoftMandatory
`))
	mustKubectl(t, admin, "create", "-f", policies)

	notifications := filepath.Join(t.TempDir(), "notifications.yaml")
	writeFile(t, notifications, fmt.Sprintf(`apiVersion: terrarun.dev/v1alpha1
kind: TerraformNotification
metadata:
  name: hook
spec:
  triggers: [NeedsApproval, NeedsOverride, Applying, Succeeded, Failed, Drifted, PolicyFailed]
  webhook:
    url: %[1]s/webhook
    hmacKey: {name: hook, key: key}
---
apiVersion: terrarun.dev/v1alpha1
kind: TerraformNotification
metadata:
  name: chat
spec:
  triggers: [NeedsApproval]
  runSelector:
    matchLabels: {scenario: manual}
  slack:
    urlFrom: {name: slack, key: url}
---
apiVersion: terrarun.dev/v1alpha1
kind: TerraformNotification
metadata:
  name: events
spec:
  triggers: [Succeeded, Failed]
  webViewURL: https://elsewhere.example.com
  cloudEvents:
    url: %[1]s/cloudevents
    hmacKey: {name: hook, key: key}
`, r.srv.URL))
	if out, err := kubectl(t, viewer, "create", "-f", notifications); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("a viewer wrote notifications: %v\n%s", err, out)
	}
	// An editor writes them; kubectl shows the warning about plain http.
	if out := mustKubectl(t, e.bob, "create", "-f", notifications); !strings.Contains(out, "spec.webhook.url is http") {
		t.Errorf("no warning about an http receiver:\n%s", out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, bad, "apiVersion: terrarun.dev/v1alpha1\nkind: TerraformNotification\nmetadata:\n  name: bad\nspec:\n  triggers: [Exploded]\n  webhook: {url: \"https://user:pw@x.example\"}\n")
	if out, err := kubectl(t, kc, "create", "-f", bad); err == nil || !strings.Contains(out, `spec.triggers[0]: Unsupported value: "Exploded"`) || !strings.Contains(out, "spec.webhook.url: Invalid value") {
		t.Errorf("a bad notification: %v\n%s", err, out)
	}

	create := func(name, scenario, tf, extra string) {
		t.Helper()
		manifest := strings.Replace(runManifest(name, inline(map[string]string{"main.tf": tf}, `  variables:
  - name: db_password
    valueFrom:
      secretKeyRef: {name: db, key: password}
`+extra)), "metadata:\n", "metadata:\n  labels:\n    scenario: "+scenario+"\n", 1)
		e.create(t, manifest)
	}
	create("manual", "manual", helloTF, "")
	create("broken", "broken", helloTF+"\nresource \"terraform_data\" \"broken\" {\n  input = var.undeclared\n}\n", "")
	create("denied", "denied", helloTF, "")
	create("held", "held", helloTF, "")
	e.create(t, workspaceManifest("drifting", `resource "terraform_data" "t" {
  input = timestamp()
}
`, "  approval:\n    mode: Auto\n  interval: 10s\n"))

	run := e.waitPhase(t, "manual", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
	r.waitFor(t, "slack", "Slack Run default/manual waits for an approval: +1 ~0 -0, plan "+run.Status.Plan.Digest+"; it needs 1 more approval(s) from other users (0 of 1). <https://runs.example.com/terrarun/namespaces/default/terraformruns/manual|Open in terrarun>")
	// The webhook refuses its first delivery; a retry still due once the
	// run is approved would be given up (the run no longer needs anyone),
	// so the approval waits for the webhook to have it.
	r.waitFor(t, "webhook", "NeedsApproval manual")
	if out, err := e.approve(t, e.bob, run); err != nil {
		t.Fatalf("bob approves: %v\n%s", err, out)
	}
	e.waitPhase(t, "manual", 3*time.Minute, v1alpha1.RunPhaseSucceeded)
	e.waitPhase(t, "broken", 3*time.Minute, v1alpha1.RunPhaseFailed)
	e.waitPhase(t, "denied", 3*time.Minute, v1alpha1.RunPhaseFailed)
	e.waitPhase(t, "held", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
	e.waitWorkspace(t, "drifting", "Drifted", func(ws *v1alpha1.TerraformWorkspace) bool {
		return slices.ContainsFunc(ws.Status.Conditions, func(c metav1.Condition) bool {
			return c.Type == v1alpha1.WorkspaceConditionDrifted && c.Status == metav1.ConditionTrue
		})
	})

	r.waitFor(t, "webhook", "NeedsApproval manual", "Applying manual", "Succeeded manual", "Failed broken",
		"PolicyFailed denied", "Failed denied", "NeedsOverride held", "Succeeded drifting-1", "Drifted workspace drifting")
	r.waitFor(t, "cloudevents", "Succeeded manual", "Failed broken", "Failed denied")
	// Late deliveries would come now.
	time.Sleep(3 * time.Second)

	slackGot := r.accepted("slack")
	r.mu.Lock()
	deliveries := slices.Clone(r.deliveries)
	r.mu.Unlock()
	seen := map[string]int{}
	var first *delivery
	for i := range deliveries {
		d := &deliveries[i]
		if d.kind != "slack" && !d.verified {
			t.Errorf("an unsigned or badly signed %s delivery: %s", d.kind, d.body)
		}
		if bytes.Contains(d.body, []byte(dbPassword)) || bytes.Contains(d.body, []byte(hmacKey)) {
			t.Errorf("a secret in a %s delivery: %s", d.kind, d.body)
		}
		if d.accepted {
			seen[d.kind+" "+d.id]++
		}
		if first == nil && d.kind == "webhook" {
			first = d
		}
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("%s accepted %d times", k, n)
		}
	}
	if first == nil || first.accepted || seen["webhook "+first.id] != 1 {
		t.Errorf("the refused first webhook delivery was not retried with its ID: %+v", first)
	}
	for _, d := range deliveries {
		if d.kind == "cloudevents" && !strings.Contains(string(d.body), `"url":"https://elsewhere.example.com/namespaces/default/terraformruns/`) {
			t.Errorf("the CloudEvent does not link to its own web view: %s", d.body)
		}
	}
	if len(slackGot) != 1 {
		t.Errorf("Slack got %q, want only manual's NeedsApproval", slackGot)
	}

	hook, err := e.client.TerrarunV1alpha1().TerraformNotifications("default").Get(t.Context(), "hook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	retried := slices.IndexFunc(hook.Status.Deliveries, func(d v1alpha1.NotificationDelivery) bool { return d.ID == first.id })
	if retried < 0 || hook.Status.Deliveries[retried].Attempts != 2 || hook.Status.Deliveries[retried].State != v1alpha1.DeliveryDelivered {
		t.Errorf("the status of the retried delivery: %+v", hook.Status.Deliveries)
	}
	if out := mustKubectl(t, kc, "get", "tfnotif"); !strings.Contains(out, "webhook 127.0.0.1") || !strings.Contains(out, "slack") || strings.Contains(out, "/slack") {
		t.Errorf("kubectl get tfnotif:\n%s", out)
	}
	// Nobody but the server writes what was delivered.
	if out, err := kubectl(t, e.bob, "patch", "tfnotif", "hook", "--subresource=status", "--type=merge", "-p", `{"status":{"deliveries":[]}}`); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("bob wrote a notification's status: %v\n%s", err, out)
	}
}
