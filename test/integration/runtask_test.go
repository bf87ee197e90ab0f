package integration

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// taskCall is one call the test's run task server received.
type taskCall struct {
	task    string
	body    []byte
	payload map[string]any
	// signed says the X-TFC-Task-Signature header was the HMAC-SHA512 of
	// the body with the task's key.
	signed bool
	// plan is what the task read at the payload's plan_json_api_url, and
	// planStatus its HTTP status.
	plan       []byte
	planStatus int
	// answered is the HTTP status of its callback.
	answered int
	// others are the HTTP statuses of requests its token may not make.
	others map[string]int
}

// taskServer is a real HTTP run task service, on loopback: it checks each
// payload's signature, and answers through the callback as the task named
// by the URL's path does.
type taskServer struct {
	t      *testing.T
	srv    *httptest.Server
	key    []byte
	client *http.Client
	// release holds the checker's PostPlan answer until it is closed.
	release chan struct{}

	mu    sync.Mutex
	calls []*taskCall
}

func newTaskServer(t *testing.T, key string, server *rest.Config) *taskServer {
	ts := &taskServer{t: t, key: []byte(key), release: make(chan struct{})}
	// Callbacks go to terrarun over TLS, trusting its CA, with no
	// credential but the call's token.
	transport, err := rest.TransportFor(&rest.Config{Host: server.Host, TLSClientConfig: rest.TLSClientConfig{CAData: server.CAData, CAFile: server.CAFile}})
	if err != nil {
		t.Fatal(err)
	}
	ts.client = &http.Client{Transport: transport, Timeout: 30 * time.Second}
	ts.srv = httptest.NewTLSServer(http.HandlerFunc(ts.serve))
	t.Cleanup(ts.srv.Close)
	return ts
}

func (ts *taskServer) url(task string) string { return ts.srv.URL + "/" + task }

// caBundle is the base64 of the PEM of its certificate, for a task's
// spec.caBundle.
func (ts *taskServer) caBundle() string {
	return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.srv.Certificate().Raw}))
}

func (ts *taskServer) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	mac := hmac.New(sha512.New, ts.key)
	mac.Write(body)
	call := &taskCall{task: strings.TrimPrefix(req.URL.Path, "/"), body: body,
		signed: hmac.Equal([]byte(req.Header.Get("X-TFC-Task-Signature")), []byte(hex.EncodeToString(mac.Sum(nil))))}
	if err := json.Unmarshal(body, &call.payload); err != nil {
		http.Error(w, "not JSON", http.StatusBadRequest)
		return
	}
	ts.mu.Lock()
	ts.calls = append(ts.calls, call)
	ts.mu.Unlock()
	w.WriteHeader(http.StatusOK)
	stage, _ := call.payload["stage"].(string)
	switch call.task {
	case "silent":
		return
	case "checker":
		go func() {
			if stage == "post_plan" {
				<-ts.release
			}
			ts.readPlan(call)
			ts.answer(call, "passed", "no findings at "+stage, "https://scanner.example/report/"+stage)
		}()
	case "gate":
		go func() {
			ts.readPlan(call)
			ts.tryOthers(call)
			ts.answer(call, "failed", "2 critical findings", "https://scanner.example/findings")
		}()
	case "advisor":
		go ts.answer(call, "failed", "tag your resources", "")
	case "audit":
		go ts.answer(call, "failed", "the audit log is unreachable", "")
	case "spec":
		go func() {
			ts.readPlan(call)
			ts.answer(call, "passed", "fine", "")
		}()
	}
}

// do sends a request to terrarun with token as the bearer token.
func (ts *taskServer) do(method, url, token string, body []byte) (int, []byte) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		ts.t.Error(err)
		return 0, nil
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/vnd.api+json")
	resp, err := ts.client.Do(req)
	if err != nil {
		ts.t.Errorf("%s %s: %v", method, url, err)
		return 0, nil
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (ts *taskServer) readPlan(call *taskCall) {
	if u, _ := call.payload["plan_json_api_url"].(string); u != "" {
		status, plan := ts.do(http.MethodGet, u, call.payload["access_token"].(string), nil)
		ts.mu.Lock()
		call.planStatus, call.plan = status, plan
		ts.mu.Unlock()
	}
}

// tryOthers makes, with call's token while it is valid, requests it may
// not make: the run itself, its plan file, its outputs, another run's plan.
func (ts *taskServer) tryOthers(call *taskCall) {
	token := call.payload["access_token"].(string)
	base := strings.TrimSuffix(call.payload["task_result_callback_url"].(string), "/taskresult")
	others := map[string]int{}
	for what, url := range map[string]string{
		"the run":                   base,
		"its plan file":             base + "/plan?format=file",
		"its outputs":               base + "/outputs",
		"another run's plan":        strings.TrimSuffix(base, "/gated") + "/all/plan?format=json",
		"the runs of its namespace": strings.TrimSuffix(base, "/gated"),
	} {
		others[what], _ = ts.do(http.MethodGet, url, token, nil)
	}
	ts.mu.Lock()
	call.others = others
	ts.mu.Unlock()
}

func (ts *taskServer) answer(call *taskCall, status, message, link string) {
	body := fmt.Sprintf(`{"data":{"type":"task-results","attributes":{"status":%q,"message":%q,"url":%q}}}`, status, message, link)
	code, out := ts.do(http.MethodPatch, call.payload["task_result_callback_url"].(string), call.payload["access_token"].(string), []byte(body))
	ts.mu.Lock()
	call.answered = code
	ts.mu.Unlock()
	if code != http.StatusOK {
		ts.t.Errorf("%s's answer at %s: %d %s", call.task, call.payload["stage"], code, out)
	}
}

// received returns the calls of the run with UID uid, in order.
func (ts *taskServer) received(uid string) []*taskCall {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var calls []*taskCall
	for _, c := range ts.calls {
		if c.payload["run_id"] == uid {
			cc := *c
			calls = append(calls, &cc)
		}
	}
	return calls
}

// TestRunTasks drives TerraformRunTasks through the real server, engine and
// kubectl, with a real HTTP task service that checks the HMAC signature of
// every payload: a Mandatory task called at each of the four stages with
// HCP Terraform's payload, reading the redacted plan JSON with its token
// (and no longer once it has answered, nor anything else ever), holding
// the approval until it answers; a Mandatory task that fails stops the run
// at PostPlan, and one at PostApply fails a run that applied; one that never
// answers stops it at its timeout, and one that cannot be reached at once;
// an Advisory failure is recorded; a speculative plan is called as one; no
// status write answers for a task; and no secret value is in any payload.
func TestRunTasks(t *testing.T) {
	e := newRunEnv(t)
	kc := e.Kubeconfig
	e.secret(t, "default", "db", "password", dbPassword)
	e.secret(t, "default", "task-hmac", "key", "hmac-key-of-the-test")
	admin := e.mint(t, "pat", "terrarun:policy-admins")
	ts := newTaskServer(t, "hmac-key-of-the-test", e.Config)

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := "https://" + closed.Addr().String() + "/task"
	closed.Close()

	task := func(name, url, scenario, stages, extra string) string {
		return fmt.Sprintf(`apiVersion: terrarun.dev/v1alpha1
kind: TerraformRunTask
metadata:
  name: %s
spec:
  url: %s
  caBundle: %s
  hmacKey: {name: task-hmac, key: key}
  stages: [%s]
  runSelector:
    matchLabels: {scenario: %s}
%s`, name, url, ts.caBundle(), stages, scenario, extra)
	}
	manifests := task("checker", ts.url("checker"), "all", "PrePlan, PostPlan, PreApply, PostApply", "") + "---\n" +
		task("gate", ts.url("gate"), "gate", "PostPlan", "") + "---\n" +
		task("silent", ts.url("silent"), "silent", "PrePlan", "  timeout: 5s\n") + "---\n" +
		task("unreachable", unreachable, "unreachable", "PrePlan", "") + "---\n" +
		task("advisor", ts.url("advisor"), "advisory", "PostPlan", "  enforcement: Advisory\n") + "---\n" +
		task("audit", ts.url("audit"), "audit", "PostApply", "") + "---\n" +
		task("spec", ts.url("spec"), "speculative", "PostPlan", "")
	path := filepath.Join(t.TempDir(), "tasks.yaml")
	writeFile(t, path, manifests)
	// Editors, whose runs tasks check, do not write them.
	if out, err := kubectl(t, e.bob, "create", "-f", path); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("bob, an editor and approver, wrote run tasks: %v\n%s", err, out)
	}
	mustKubectl(t, admin, "create", "-f", path)
	if out := mustKubectl(t, kc, "get", "tfrt", "silent"); !strings.Contains(out, "PrePlan") || !strings.Contains(out, "Mandatory") || !strings.Contains(out, "5s") {
		t.Errorf("kubectl get tfrt silent:\n%s", out)
	}

	create := func(name, scenario, extra string) {
		t.Helper()
		manifest := strings.Replace(runManifest(name, inline(map[string]string{"main.tf": helloTF}, `  variables:
  - name: db_password
    valueFrom:
      secretKeyRef: {name: db, key: password}
`+extra)), "metadata:\n", "metadata:\n  labels:\n    scenario: "+scenario+"\n", 1)
		e.create(t, manifest)
	}
	create("all", "all", "")
	create("gated", "gate", "")
	create("silent", "silent", "")
	create("unreachable", "unreachable", "")
	create("advised", "advisory", "  approval:\n    mode: Auto\n")
	create("audited", "audit", "  approval:\n    mode: Auto\n")
	create("speculative", "speculative", "  operation: Plan\n")

	t.Run("a Mandatory task at every stage", func(t *testing.T) {
		run := e.waitPhase(t, "all", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)
		// Its PostPlan answer is held: the plan cannot be approved yet.
		if out, err := e.approve(t, e.bob, run); err == nil || !strings.Contains(out, "waits for its run tasks") || !strings.Contains(out, "checker") {
			t.Errorf("approving while the PostPlan task runs: %v\n%s", err, out)
		}
		// No status write answers for the task.
		mustKubectl(t, kc, "patch", "tfr", "all", "--subresource=status", "--type=json", "-p", `[{"op":"replace","path":"/status/tasks/1/status","value":"Passed"}]`)
		time.Sleep(time.Second)
		if again := e.waitPhase(t, "all", time.Minute, v1alpha1.RunPhaseAwaitingApproval); again.Status.Tasks[1].Status != v1alpha1.RunTaskRunning {
			t.Fatalf("a status write answered for the task: %+v", again.Status.Tasks[1])
		}
		close(ts.release)
		deadline := time.Now().Add(time.Minute)
		for {
			run = e.waitPhase(t, "all", time.Minute, v1alpha1.RunPhaseAwaitingApproval)
			if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionTasksChecked); c != nil && c.Status == "True" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the PostPlan task's answer was not taken: %+v", run.Status.Tasks)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if out, err := e.approve(t, e.bob, run); err != nil {
			t.Fatalf("bob approves once the task passed: %v\n%s", err, out)
		}
		run = e.waitPhase(t, "all", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
			t.Fatalf("run all ended %s: %s", run.Status.Phase, run.Status.Message)
		}
		var stages []string
		for _, c := range run.Status.Tasks {
			stages = append(stages, string(c.Stage))
			if c.Task != "checker" || c.Status != v1alpha1.RunTaskPassed || c.Enforcement != v1alpha1.RunTaskMandatory || !strings.HasPrefix(c.URL, "https://scanner.example/report/") || c.CompletedAt == nil {
				t.Errorf("call %+v", c)
			}
		}
		if !slices.Equal(stages, []string{"PrePlan", "PostPlan", "PreApply", "PostApply"}) {
			t.Errorf("calls at %v", stages)
		}
		calls := ts.received(string(run.UID))
		var hcpStages []string
		for _, c := range calls {
			hcpStages = append(hcpStages, c.payload["stage"].(string))
			p := c.payload
			if !c.signed || p["payload_version"] != float64(1) || p["task_result_enforcement_level"] != "mandatory" || p["is_speculative"] != false ||
				p["organization_name"] != "default" || !strings.HasSuffix(p["task_result_callback_url"].(string), "/terraformruns/all/taskresult") ||
				!strings.HasPrefix(p["access_token"].(string), "trt_default_all_") || p["run_created_by"] != "terrarun-admin" {
				t.Errorf("payload at %s (signed %v): %s", p["stage"], c.signed, c.body)
			}
			if planURL, _ := p["plan_json_api_url"].(string); (p["stage"] == "pre_plan") != (planURL == "") {
				t.Errorf("plan_json_api_url at %s: %q", p["stage"], planURL)
			}
			if c.task == "checker" && p["stage"] != "pre_plan" && (c.planStatus != http.StatusOK || !bytes.Contains(c.plan, []byte(`"resource_changes"`))) {
				t.Errorf("the task read the plan at %s: %d %.300s", p["stage"], c.planStatus, c.plan)
			}
			for _, b := range [][]byte{c.body, c.plan} {
				if bytes.Contains(b, []byte(dbPassword)) || bytes.Contains(b, []byte("hmac-key-of-the-test")) {
					t.Errorf("a secret value in what the task got at %s", p["stage"])
				}
			}
		}
		if !slices.Equal(hcpStages, []string{"pre_plan", "post_plan", "pre_apply", "post_apply"}) {
			t.Fatalf("the task was called at %v", hcpStages)
		}
		// Answered, a call's token is worth nothing: not the plan, not
		// another answer.
		post := calls[1].payload
		token := post["access_token"].(string)
		if code, out := ts.do(http.MethodGet, post["plan_json_api_url"].(string), token, nil); code != http.StatusUnauthorized {
			t.Errorf("reading the plan with an answered call's token: %d %s", code, out)
		}
		if code, out := ts.do(http.MethodPatch, post["task_result_callback_url"].(string), token, []byte(`{"data":{"type":"task-results","attributes":{"status":"failed"}}}`)); code != http.StatusUnauthorized {
			t.Errorf("answering again: %d %s", code, out)
		}
		// A token no call was given is refused too.
		forged := "trt_default_all_" + strings.Repeat("ab", 32)
		if code, _ := ts.do(http.MethodGet, post["plan_json_api_url"].(string), forged, nil); code != http.StatusUnauthorized {
			t.Errorf("a forged token: %d", code)
		}
	})

	t.Run("a Mandatory task that fails stops the run", func(t *testing.T) {
		run := e.waitPhase(t, "gated", 3*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded)
		c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionTasksChecked)
		if run.Status.Phase != v1alpha1.RunPhaseFailed || c == nil || c.Reason != v1alpha1.ReasonTaskFailed || !strings.Contains(run.Status.Message, "gate (Mandatory) failed: 2 critical findings") {
			t.Errorf("run gated: %s %q, TasksChecked %+v", run.Status.Phase, run.Status.Message, c)
		}
		if slices.ContainsFunc(run.Status.Stages, func(s v1alpha1.StageStatus) bool { return s.Name == v1alpha1.StageApply }) {
			t.Errorf("a plan a task failed was applied: %+v", run.Status.Stages)
		}
	})

	t.Run("the token reads only its run's plan", func(t *testing.T) {
		run := e.waitPhase(t, "gated", time.Minute, v1alpha1.RunPhaseFailed)
		calls := ts.received(string(run.UID))
		if len(calls) != 1 {
			t.Fatalf("gate was called %d times", len(calls))
		}
		// While its call ran, the token read the plan; every other request
		// with it is refused, whatever it asks.
		if calls[0].planStatus != http.StatusOK {
			t.Errorf("gate read the plan: %d", calls[0].planStatus)
		}
		if len(calls[0].others) != 5 {
			t.Errorf("the forbidden requests were not all made: %v", calls[0].others)
		}
		for what, code := range calls[0].others {
			if code != http.StatusForbidden {
				t.Errorf("a task's token reading %s: %d, want 403", what, code)
			}
		}
	})

	t.Run("a task that never answers stops the run at its timeout", func(t *testing.T) {
		run := e.waitPhase(t, "silent", 3*time.Minute, v1alpha1.RunPhaseFailed)
		if !strings.Contains(run.Status.Message, "silent (Mandatory) errored: No answer within its timeout") || len(run.Status.Stages) != 0 {
			t.Errorf("run silent: %q, stages %+v", run.Status.Message, run.Status.Stages)
		}
		if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionPlanned); c == nil || c.Reason != v1alpha1.ReasonTaskFailed {
			t.Errorf("Planned = %+v", c)
		}
	})

	t.Run("a task that cannot be reached stops the run", func(t *testing.T) {
		run := e.waitPhase(t, "unreachable", 3*time.Minute, v1alpha1.RunPhaseFailed)
		if !strings.Contains(run.Status.Message, "unreachable (Mandatory) errored: Could not be called") || len(run.Status.Stages) != 0 {
			t.Errorf("run unreachable: %q, stages %+v", run.Status.Message, run.Status.Stages)
		}
	})

	t.Run("an Advisory failure is recorded", func(t *testing.T) {
		run := e.waitPhase(t, "advised", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionTasksChecked)
		if run.Status.Phase != v1alpha1.RunPhaseSucceeded || c == nil || c.Status != "True" || !strings.Contains(c.Message, "advisor (Advisory) failed: tag your resources") {
			t.Errorf("run advised: %s %q, TasksChecked %+v", run.Status.Phase, run.Status.Message, c)
		}
	})

	t.Run("a PostApply failure fails a run that applied", func(t *testing.T) {
		run := e.waitPhase(t, "audited", 3*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded)
		if run.Status.Phase != v1alpha1.RunPhaseFailed || !meta.IsStatusConditionTrue(run.Status.Conditions, v1alpha1.ConditionApplied) ||
			!strings.Contains(run.Status.Message, "audit (Mandatory) failed: the audit log is unreachable") || !strings.Contains(run.Status.Message, "The apply itself succeeded") {
			t.Errorf("run audited: %s %q, conditions %+v", run.Status.Phase, run.Status.Message, run.Status.Conditions)
		}
	})

	t.Run("a speculative plan is called as one", func(t *testing.T) {
		run := e.waitPhase(t, "speculative", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		calls := ts.received(string(run.UID))
		if run.Status.Phase != v1alpha1.RunPhaseSucceeded || len(calls) != 1 || calls[0].payload["is_speculative"] != true || calls[0].planStatus != http.StatusOK {
			t.Errorf("run speculative: %s %q, calls %d", run.Status.Phase, run.Status.Message, len(calls))
		}
	})
}
