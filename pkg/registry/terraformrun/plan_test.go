package terraformrun

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/stage"
)

// testPlan is what a plan stage uploads.
var testPlan = map[string]string{
	"file":   "PLANFILE\x00\x01",
	"text":   "Plan: 1 to add, 0 to change, 0 to destroy.\n",
	"json":   `{"format_version":"1.2"}`,
	"source": "\x1f\x8bTARGZ",
	"result": `{"sourceRevision":"sha256:abc","add":1,"change":2,"destroy":3,"import":4,"hasChanges":true}`,
}

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// uploadPlan uploads every part of testPlan as the executor of attempt 1 of
// the plan stage of run name, the result last.
func uploadPlan(t *testing.T, env *testEnv, name string) {
	t.Helper()
	for _, part := range []string{"file", "text", "json", "source", "result"} {
		w := connect(t, env.storage.Plan, planStage, http.MethodPost, name, "attempt=1&part="+part, strings.NewReader(testPlan[part]))
		expectStatus(t, w, http.StatusNoContent)
	}
}

// newPlannedRun creates a run whose plan stage has uploaded testPlan.
func newPlannedRun(t *testing.T, env *testEnv, name string) *terrarun.TerraformRun {
	t.Helper()
	run := env.createRun(t, name, nil)
	env.runningStage(t, run, planStage, terrarun.StagePlan, 1)
	uploadPlan(t, env, name)
	return env.getRun(t, name)
}

// multipartPlan is a part=all body of the named parts of testPlan, in order;
// a name that testPlan does not have gets a body of its own.
func multipartPlan(t *testing.T, names ...string) typedBody {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, name := range names {
		w, err := mw.CreateFormField(name)
		if err != nil {
			t.Fatal(err)
		}
		body, ok := testPlan[name]
		if !ok {
			body = "not a plan part"
		}
		if _, err := io.WriteString(w, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return typedBody{&buf, mw.FormDataContentType()}
}

// TestPlanUploadAll: the parts of a plan uploaded in one multipart body
// (part=all) are stored and recorded as parts uploaded one by one are; a
// body that is not multipart, a part of another name, a result that is not
// last, are refused and store nothing; without the result, the parts are
// stored and the plan is not recorded.
func TestPlanUploadAll(t *testing.T) {
	env := newTestEnv(t)
	one := newPlannedRun(t, env, "one-by-one")

	all := env.createRun(t, "all", nil)
	env.runningStage(t, all, planStage, terrarun.StagePlan, 1)
	w := connect(t, env.storage.Plan, planStage, http.MethodPost, "all", "attempt=1&part=all", multipartPlan(t, "file", "text", "json", "source", "result"))
	expectStatus(t, w, http.StatusNoContent)
	got := env.getRun(t, "all").Status.Plan
	if got == nil || got.Digest != one.Status.Plan.Digest || got.Parts == nil || *got.Parts != *one.Status.Plan.Parts || got.Add != 1 || !got.HasChanges {
		t.Fatalf("status.plan after part=all = %+v, want %+v", got, one.Status.Plan)
	}
	w = connect(t, env.storage.Plan, alice, http.MethodGet, "all", "format=text", nil)
	expectStatus(t, w, http.StatusOK)
	if w.Body.String() != testPlan["text"] {
		t.Errorf("the text of a plan uploaded with part=all is %q", w.Body.String())
	}

	for _, tc := range []struct {
		name string
		body io.Reader
		code int
		msg  string
	}{
		{"not multipart", typedBody{strings.NewReader(testPlan["text"]), "text/plain"}, http.StatusUnsupportedMediaType, "multipart/form-data"},
		{"a part of another name", multipartPlan(t, "text", "state", "file"), http.StatusBadRequest, "unknown plan part"},
		{"the result before a part", multipartPlan(t, "text", "json", "source", "result", "file"), http.StatusBadRequest, "the result must be the last part"},
		{"a part given twice", multipartPlan(t, "text", "file", "text"), http.StatusBadRequest, "given twice in the upload"},
	} {
		name := "refused-" + strings.ReplaceAll(tc.name, " ", "-")
		run := env.createRun(t, name, nil)
		env.runningStage(t, run, planStage, terrarun.StagePlan, 1)
		w := connect(t, env.storage.Plan, planStage, http.MethodPost, name, "attempt=1&part=all", tc.body)
		expectStatus(t, w, tc.code)
		if !strings.Contains(w.Body.String(), tc.msg) {
			t.Errorf("%s: %s, want it to say %q", tc.name, w.Body.String(), tc.msg)
		}
		for _, kind := range []artifacts.Kind{artifacts.PlanText, artifacts.PlanFile} {
			if _, err := env.artifacts.Stat(t.Context(), runRef(run), kind); !errors.Is(err, artifacts.ErrNotFound) {
				t.Errorf("%s: %s stored (%v), want nothing", tc.name, kind, err)
			}
		}
		if run := env.getRun(t, name); run.Status.Plan != nil {
			t.Errorf("%s: status.plan = %+v", tc.name, run.Status.Plan)
		}
	}

	carried := env.createRun(t, "carried", nil)
	env.runningStage(t, carried, planStage, terrarun.StagePlan, 1)
	w = connect(t, env.storage.Plan, planStage, http.MethodPost, "carried", "attempt=1&part=all", multipartPlan(t, "source", "file", "text", "json"))
	expectStatus(t, w, http.StatusNoContent)
	if run := env.getRun(t, "carried"); run.Status.Plan != nil {
		t.Errorf("status.plan = %+v before the result", run.Status.Plan)
	}
	w = connect(t, env.storage.Plan, planStage, http.MethodPost, "carried", "attempt=1&part=result", strings.NewReader(testPlan["result"]))
	expectStatus(t, w, http.StatusNoContent)
	if got := env.getRun(t, "carried").Status.Plan; got == nil || got.Digest != one.Status.Plan.Digest {
		t.Errorf("status.plan = %+v after the result, want digest %s", got, one.Status.Plan.Digest)
	}
}

func TestPlanUploadAndRead(t *testing.T) {
	env := newTestEnv(t)
	run := newPlannedRun(t, env, "web")

	parts := terrarun.PlanPartDigests{File: digestOf(testPlan["file"]), Source: digestOf(testPlan["source"]),
		Text: digestOf(testPlan["text"]), JSON: digestOf(testPlan["json"])}
	// The digest covers every part: the file and source applied, the text
	// and JSON read.
	manifest := "terrarun.dev/plan-digest/v1\nfile " + parts.File + "\nsource " + parts.Source + "\ntext " + parts.Text + "\njson " + parts.JSON + "\n"
	want := &terrarun.PlanSummary{Digest: digestOf(manifest), Add: 1, Change: 2, Destroy: 3, Import: 4, HasChanges: true}
	got := run.Status.Plan
	if got == nil || got.CompletedAt == nil || got.Parts == nil || *got.Parts != parts {
		t.Fatalf("status.plan = %+v, want it recorded with parts %+v", got, parts)
	}
	if got.Digest != want.Digest || got.Add != want.Add || got.Change != want.Change || got.Destroy != want.Destroy || got.Import != want.Import || !got.HasChanges {
		t.Errorf("status.plan = %+v, want %+v", got, want)
	}
	if run.Status.Source == nil || run.Status.Source.Revision != "sha256:abc" {
		t.Errorf("status.source = %+v", run.Status.Source)
	}

	for _, tc := range []struct {
		query, body, contentType string
	}{
		{"", testPlan["text"], "text/plain; charset=utf-8"},
		{"format=text", testPlan["text"], "text/plain; charset=utf-8"},
		{"format=json", testPlan["json"], "application/json"},
	} {
		w := connect(t, env.storage.Plan, alice, http.MethodGet, "web", tc.query, nil)
		expectStatus(t, w, http.StatusOK)
		if w.Body.String() != tc.body {
			t.Errorf("GET ?%s = %q, want %q", tc.query, w.Body.String(), tc.body)
		}
		h := w.Header()
		if h.Get("Content-Type") != tc.contentType || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Terrarun-Plan-Digest") != want.Digest {
			t.Errorf("GET ?%s headers = %v", tc.query, h)
		}
	}
}

// TestPlanPartReplacedIsNotServed: a part stored after the plan was recorded
// (which the upload handler refuses; here written straight to the store) is
// not what was approved, and is not served.
func TestPlanPartReplacedIsNotServed(t *testing.T) {
	env := newTestEnv(t)
	run := newPlannedRun(t, env, "web")
	if _, err := env.artifacts.Put(t.Context(), runRef(run), artifacts.PlanText, strings.NewReader("Plan: 0 to add, 0 to change, 0 to destroy.\n")); err != nil {
		t.Fatal(err)
	}
	w := connect(t, env.storage.Plan, alice, http.MethodGet, "web", "", nil)
	expectStatus(t, w, http.StatusConflict, "the stored plan-text is sha256:", "not the "+digestOf(testPlan["text"])+" recorded with plan "+run.Status.Plan.Digest)
	w = connect(t, env.storage.Plan, alice, http.MethodGet, "web", "format=json", nil)
	expectStatus(t, w, http.StatusOK)
}

func TestPlanNotFound(t *testing.T) {
	env := newTestEnv(t)
	env.createRun(t, "fresh", nil)
	w := connect(t, env.storage.Plan, alice, http.MethodGet, "fresh", "format=json", nil)
	st := expectStatus(t, w, http.StatusNotFound, `run "fresh" has no plan yet (it is Pending); add ?wait=true to wait for it`)
	if st.Details == nil || st.Details.Kind != "terraformruns/plan" || st.Details.Name != "fresh" {
		t.Errorf("details = %+v", st.Details)
	}
	w = connect(t, env.storage.Plan, alice, http.MethodGet, "missing", "", nil)
	expectStatus(t, w, http.StatusNotFound, `"missing" not found`)

	// A plan whose artifacts are gone, with the run's retention lease.
	run := newPlannedRun(t, env, "expired")
	if err := env.artifacts.DeleteRun(t.Context(), runRef(run)); err != nil {
		t.Fatal(err)
	}
	w = connect(t, env.storage.Plan, alice, http.MethodGet, "expired", "", nil)
	expectStatus(t, w, http.StatusNotFound, "is no longer stored", "create a new run to plan again")
}

func TestPlanFileAndSourceOnlyForTheApplyStage(t *testing.T) {
	env := newTestEnv(t)
	run := newPlannedRun(t, env, "web")
	for _, format := range []string{"file", "source"} {
		w := connect(t, env.storage.Plan, alice, http.MethodGet, "web", "format="+format, nil)
		expectStatus(t, w, http.StatusForbidden, "alice is not an executor")
		w = connect(t, env.storage.Plan, planStage, http.MethodGet, "web", "format="+format, nil)
		expectStatus(t, w, http.StatusForbidden, "this executor runs stage plan attempt 1, which is not the run's current apply stage")
	}

	env.runningStage(t, run, applyStage, terrarun.StageApply, 1)
	for _, tc := range []struct{ format, body, contentType string }{
		{"file", testPlan["file"], "application/octet-stream"},
		{"source", testPlan["source"], "application/gzip"},
	} {
		w := connect(t, env.storage.Plan, applyStage, http.MethodGet, "web", "format="+tc.format, nil)
		expectStatus(t, w, http.StatusOK)
		if w.Body.String() != tc.body || w.Header().Get("Content-Type") != tc.contentType || w.Header().Get("X-Terrarun-Plan-Digest") != run.Status.Plan.Digest {
			t.Errorf("format=%s: %q %v", tc.format, w.Body.String(), w.Header())
		}
	}
}

func TestPlanOptionsAndUploadErrors(t *testing.T) {
	env := newTestEnvWithArtifacts(t, artifacts.Options{Limits: artifacts.Limits{PlanFile: 1 << 10, PlanText: 1 << 10}})
	run := env.createRun(t, "web", nil)
	env.runningStage(t, run, planStage, terrarun.StagePlan, 1)

	cases := []struct {
		name   string
		u      user.Info
		method string
		query  string
		body   string
		code   int
		fields []string
		msg    []string
	}{
		{name: "unknown format", method: http.MethodGet, query: "format=yaml", code: http.StatusUnprocessableEntity, fields: []string{"format"}, msg: []string{`TerraformRunPlanOptions.terrarun.dev "web" is invalid`, `supported values: "text", "json"`}},
		{name: "wait that is no boolean", method: http.MethodGet, query: "wait=soon", code: http.StatusBadRequest, msg: []string{`invalid wait="soon": must be true or false`}},
		{name: "upload without part", method: http.MethodPost, query: "attempt=1", code: http.StatusUnprocessableEntity, fields: []string{"part"}},
		{name: "upload without attempt", method: http.MethodPost, query: "part=file", code: http.StatusUnprocessableEntity, fields: []string{"attempt"}},
		{name: "upload of an unknown part", method: http.MethodPost, query: "attempt=1&part=state", code: http.StatusUnprocessableEntity, fields: []string{"part"}},
		{name: "attempt that is no number", method: http.MethodPost, query: "attempt=one&part=file", code: http.StatusBadRequest, msg: []string{`invalid attempt="one"`}},
		{name: "upload by a user", u: alice, method: http.MethodPost, query: "attempt=1&part=file", code: http.StatusForbidden, msg: []string{"alice is not an executor"}},
		{name: "upload by the apply stage", u: applyStage, method: http.MethodPost, query: "attempt=1&part=file", code: http.StatusForbidden},
		{name: "upload by an unverifiable executor", u: brokenStage, method: http.MethodPost, query: "attempt=1&part=file", code: http.StatusServiceUnavailable, msg: []string{"cannot verify the executor identity now: the token review failed; retry"}},
		{name: "upload for another attempt", method: http.MethodPost, query: "attempt=2&part=file", code: http.StatusForbidden, msg: []string{"this executor runs attempt 1, not attempt 2"}},
		{name: "result before the plan file", method: http.MethodPost, query: "attempt=1&part=result", body: testPlan["result"], code: http.StatusBadRequest, msg: []string{"upload the plan file (part=file) before the result"}},
		{name: "plan file over the limit", method: http.MethodPost, query: "attempt=1&part=file", body: strings.Repeat("x", 2<<10), code: http.StatusRequestEntityTooLarge, msg: []string{"larger than the limit of 1024 bytes"}},
		{name: "plan text over the limit is truncated", method: http.MethodPost, query: "attempt=1&part=text", body: strings.Repeat("x", 2<<10), code: http.StatusNoContent},
		{name: "result that is no result", method: http.MethodPost, query: "attempt=1&part=result", body: `{"add":"one"}`, code: http.StatusBadRequest, msg: []string{"decoding the plan result"}},
		{name: "result over 64 KiB", method: http.MethodPost, query: "attempt=1&part=result", body: strings.Repeat(" ", 64<<10+1), code: http.StatusRequestEntityTooLarge, msg: []string{"larger than 64 KiB"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := tc.u
			if u == nil {
				u = planStage
			}
			w := connect(t, env.storage.Plan, u, tc.method, "web", tc.query, strings.NewReader(tc.body))
			st := expectStatus(t, w, tc.code, tc.msg...)
			if tc.fields != nil {
				expectCauses(t, st, tc.fields...)
			}
		})
	}
	if run := env.getRun(t, "web"); run.Status.Plan != nil {
		t.Errorf("a plan was recorded: %+v", run.Status.Plan)
	}
}

func TestPlanTruncatedJSON(t *testing.T) {
	env := newTestEnvWithArtifacts(t, artifacts.Options{Limits: artifacts.Limits{PlanJSON: 16}})
	newPlannedRun(t, env, "big")
	w := connect(t, env.storage.Plan, alice, http.MethodGet, "big", "format=json", nil)
	expectStatus(t, w, http.StatusRequestEntityTooLarge, `the redacted plan JSON of run "big" exceeded the server's --max-plan-bytes and was truncated`)
	w = connect(t, env.storage.Plan, alice, http.MethodGet, "big", "", nil)
	expectStatus(t, w, http.StatusOK)
}

func TestPlanWait(t *testing.T) {
	env := newTestEnv(t)

	t.Run("until the plan exists", func(t *testing.T) {
		run := env.createRun(t, "slow", nil)
		env.runningStage(t, run, planStage, terrarun.StagePlan, 1)
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- connect(t, env.storage.Plan, alice, http.MethodGet, "slow", "wait=true", nil) }()
		time.Sleep(200 * time.Millisecond)
		uploadPlan(t, env, "slow")
		w := <-done
		expectStatus(t, w, http.StatusOK)
		want := stage.PlanDigest(digestOf(testPlan["file"]), digestOf(testPlan["source"]), digestOf(testPlan["text"]), digestOf(testPlan["json"]))
		if w.Body.String() != testPlan["text"] || w.Header().Get("X-Terrarun-Plan-Digest") != want {
			t.Errorf("waited for %q %v", w.Body.String(), w.Header())
		}
	})

	t.Run("from a version of the run that is no longer in the history", func(t *testing.T) {
		// The run was last written before the history that watches start
		// from (compacted here; a replica's watch cache that started later
		// in a cluster): the wait starts from the run as it is.
		run := env.createRun(t, "idle", nil)
		env.runningStage(t, run, planStage, terrarun.StagePlan, 1)
		env.createRun(t, "busy", nil)
		env.createRun(t, "busier", nil)
		if _, err := env.etcd.Compact(t.Context(), env.revision(t)); err != nil {
			t.Fatal(err)
		}
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- connect(t, env.storage.Plan, alice, http.MethodGet, "idle", "wait=true", nil) }()
		time.Sleep(200 * time.Millisecond)
		uploadPlan(t, env, "idle")
		expectStatus(t, <-done, http.StatusOK)
	})

	t.Run("until the plan stage fails", func(t *testing.T) {
		run := env.createRun(t, "broken", nil)
		env.runningStage(t, run, planStage, terrarun.StagePlan, 1)
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- connect(t, env.storage.Plan, alice, http.MethodGet, "broken", "wait=1", nil) }()
		time.Sleep(200 * time.Millisecond)
		env.setStatus(t, "broken", func(st *terrarun.TerraformRunStatus) {
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: terrarun.ConditionPlanned, Status: metav1.ConditionFalse, Reason: terrarun.ReasonPlanFailed, Message: "Error: Invalid reference"})
		})
		expectStatus(t, <-done, http.StatusConflict, "the run has no plan: Error: Invalid reference")
	})

	t.Run("a run that ended without a plan", func(t *testing.T) {
		env.createRun(t, "canceled", func(st *terrarun.TerraformRunStatus) {
			st.Phase = terrarun.RunPhaseCanceled
			st.Message = "Canceled by alice."
		})
		w := connect(t, env.storage.Plan, alice, http.MethodGet, "canceled", "wait=true", nil)
		expectStatus(t, w, http.StatusNotFound, `run "canceled" ended Canceled without a plan: Canceled by alice.`)
	})
}

// TestPlanIsImmutableOnceRecorded has the plan stage, still running with its
// token live, try to replace what approvers read after its result was
// recorded.
func TestPlanIsImmutableOnceRecorded(t *testing.T) {
	env := newTestEnv(t)
	run := env.createRun(t, "web", nil)
	env.runningStage(t, run, planStage, terrarun.StagePlan, 1)
	for _, part := range []string{"source", "file", "text", "json", "result"} {
		w := connect(t, env.storage.Plan, planStage, http.MethodPost, "web", "attempt=1&part="+part, strings.NewReader(testPlan[part]))
		expectStatus(t, w, http.StatusNoContent)
	}
	recorded := env.getRun(t, "web").Status.Plan
	if recorded == nil || recorded.Digest == "" {
		t.Fatal("the plan was not recorded")
	}
	for _, part := range []string{"source", "file", "text", "json", "result"} {
		w := connect(t, env.storage.Plan, planStage, http.MethodPost, "web", "attempt=1&part="+part, strings.NewReader("forged"))
		expectStatus(t, w, http.StatusConflict)
		if !strings.Contains(w.Body.String(), "the plan is recorded") {
			t.Errorf("part %s: %s", part, w.Body.String())
		}
	}
	if got := env.getRun(t, "web").Status.Plan; got.Digest != recorded.Digest {
		t.Errorf("the recorded digest changed: %s, want %s", got.Digest, recorded.Digest)
	}
	w := connect(t, env.storage.Plan, alice, http.MethodGet, "web", "", nil)
	expectStatus(t, w, http.StatusOK)
	if w.Body.String() != testPlan["text"] {
		t.Errorf("the plan text is %q, want the recorded %q", w.Body.String(), testPlan["text"])
	}
}

// TestCarriedApply: the plan stage of an automatically approved run goes on
// to apply in its own process (stage.Spec.ApplyAfterPlan). It waits for the
// apply stage with GET ?format=file&wait=true, is answered once the
// controller records the apply stage with its execution's name, and then
// writes for that apply stage; no other executor does, and the plan stage of
// a run approved by people never gets the plan file.
func TestCarriedApply(t *testing.T) {
	env := newTestEnv(t)
	auto := func(spec *terrarun.TerraformRunSpec) { spec.Approval.Mode = terrarun.ApprovalModeAuto }
	planRunning := func(name string) func(*terrarun.TerraformRunStatus) {
		return func(st *terrarun.TerraformRunStatus) {
			now := metav1.Now()
			st.Phase = terrarun.RunPhasePlanning
			st.Stages = []terrarun.StageStatus{{Name: terrarun.StagePlan, Attempt: 1, Job: name + "-plan-1", StartTime: &now}}
		}
	}
	// What the controller writes when it grants the apply to the plan execution.
	grant := func(st *terrarun.TerraformRunStatus) {
		now := metav1.Now()
		st.Stages[0].CompletionTime = &now
		st.Phase = terrarun.RunPhaseApplying
		st.Stages = append(st.Stages, terrarun.StageStatus{Name: terrarun.StageApply, Attempt: 1, Job: st.Stages[0].Job, CarrierAttempt: st.Stages[0].Attempt, StartTime: &now})
	}
	setup := func(name string, spec func(*terrarun.TerraformRunSpec)) *terrarun.TerraformRun {
		run := env.createRunWith(t, name, spec, planRunning(name))
		env.identities.ids[planStage.Name] = executor.Identity{Namespace: run.Namespace, Name: name, UID: string(run.UID), Stage: v1alpha1.StagePlan, Attempt: 1}
		uploadPlan(t, env, name)
		return run
	}

	t.Run("a manually approved run's plan stage is refused at once", func(t *testing.T) {
		setup("manual", nil)
		w := connect(t, env.storage.Plan, planStage, http.MethodGet, "manual", "format=file&wait=true", nil)
		expectStatus(t, w, http.StatusForbidden, "not the run's current apply stage")
	})

	t.Run("granted to a carrier that holds the approved plan file", func(t *testing.T) {
		setup("held", auto)
		env.setStatus(t, "held", grant)
		plan := env.getRun(t, "held").Status.Plan
		ifNoneMatch := func(etag string) io.Reader {
			return headerBody{strings.NewReader(""), http.Header{"If-None-Match": {etag}}}
		}
		// Its own plan file is the approved one: not sent again.
		w := connect(t, env.storage.Plan, planStage, http.MethodGet, "held", "format=file&wait=true", ifNoneMatch(`"`+plan.Parts.File+`"`))
		if w.Code != http.StatusNotModified || w.Body.Len() != 0 || w.Header().Get("ETag") != `"`+plan.Parts.File+`"` || w.Header().Get("X-Terrarun-Plan-Digest") != plan.Digest {
			t.Errorf("answered %d %q %v, want 304 without a body, the file's digest as ETag and the plan's", w.Code, w.Body.String(), w.Header())
		}
		// Another file is not the approved one: the approved file is sent.
		w = connect(t, env.storage.Plan, planStage, http.MethodGet, "held", "format=file&wait=true", ifNoneMatch(`"`+plan.Parts.Text+`", W/"`+plan.Parts.File+`"`))
		expectStatus(t, w, http.StatusOK)
		if w.Body.String() != testPlan["file"] || w.Header().Get("ETag") != `"`+plan.Parts.File+`"` {
			t.Errorf("served %q %v", w.Body.String(), w.Header())
		}
	})

	t.Run("granted", func(t *testing.T) {
		run := setup("auto", auto)
		done := make(chan *httptest.ResponseRecorder)
		go func() {
			done <- connect(t, env.storage.Plan, planStage, http.MethodGet, "auto", "format=file&wait=true", nil)
		}()
		time.Sleep(200 * time.Millisecond)
		select {
		case w := <-done:
			t.Fatalf("answered before the apply stage was granted: %d %s", w.Code, w.Body)
		default:
		}
		// Before the grant, the plan stage writes no apply log.
		expectStatus(t, connect(t, env.storage.Logs, planStage, http.MethodPost, "auto", "stage=apply&attempt=1", strings.NewReader("early\n")), http.StatusForbidden)
		env.setStatus(t, "auto", grant)
		w := <-done
		expectStatus(t, w, http.StatusOK)
		if w.Body.String() != testPlan["file"] || w.Header().Get("X-Terrarun-Plan-Digest") != env.getRun(t, "auto").Status.Plan.Digest {
			t.Errorf("served %q %v", w.Body.String(), w.Header())
		}
		// The carrier writes the apply stage's log and outputs.
		expectStatus(t, connect(t, env.storage.Logs, planStage, http.MethodPost, "auto", "stage=apply&attempt=1", strings.NewReader("Apply complete!\n")), http.StatusNoContent)
		// No executor of apply attempt 1 but the carrier writes for it.
		env.identities.ids[applyStage.Name] = executor.Identity{Namespace: run.Namespace, Name: "auto", UID: string(run.UID), Stage: v1alpha1.StageApply, Attempt: 1}
		expectStatus(t, connect(t, env.storage.Outputs, applyStage, http.MethodPost, "auto", "attempt=1", strings.NewReader(testOutputs)), http.StatusForbidden,
			"carried by the executor of plan attempt 1")
		expectStatus(t, connect(t, env.storage.Plan, applyStage, http.MethodGet, "auto", "format=file", nil), http.StatusForbidden)
		expectStatus(t, connect(t, env.storage.Outputs, planStage, http.MethodPost, "auto", "attempt=1", strings.NewReader(testOutputs)), http.StatusNoContent)
		// Nor does it write the plan stage's any more.
		expectStatus(t, connect(t, env.storage.Logs, planStage, http.MethodPost, "auto", "stage=plan&attempt=1", strings.NewReader("late\n")), http.StatusForbidden)
	})

	t.Run("ended without the apply", func(t *testing.T) {
		setup("stopped", auto)
		done := make(chan *httptest.ResponseRecorder)
		go func() {
			done <- connect(t, env.storage.Plan, planStage, http.MethodGet, "stopped", "format=file&wait=true", nil)
		}()
		time.Sleep(200 * time.Millisecond)
		env.setStatus(t, "stopped", func(st *terrarun.TerraformRunStatus) {
			now := metav1.Now()
			st.Stages[0].CompletionTime = &now
			st.Phase = terrarun.RunPhaseCanceled
			st.Message = "Canceled by alice."
		})
		expectStatus(t, <-done, http.StatusConflict, "the plan stage ended without the apply stage (the run is Canceled: Canceled by alice.)")
	})
}

// TestDeclaredDigest: a part's Content-Digest (RFC 9530) declares its
// SHA-256 to the artifact store; a malformed one is 400; other algorithms
// and no header declare nothing.
func TestDeclaredDigest(t *testing.T) {
	sum := sha256.Sum256([]byte("plan"))
	for _, tc := range []struct {
		header   string
		declared bool
		bad      bool
	}{
		{"sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":", true, false},
		{"sha-512=:AAAA:, sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":", true, false},
		{"sha-512=:AAAA:", false, false},
		{"", false, false},
		{"sha-256=:AAAA:", false, true},
		{"sha-256=" + base64.StdEncoding.EncodeToString(sum[:]), false, true},
	} {
		h := textproto.MIMEHeader{}
		if tc.header != "" {
			h.Set("Content-Digest", tc.header)
		}
		body := strings.NewReader("plan")
		got, err := declaredDigest(h, body)
		switch {
		case tc.bad:
			if !apierrors.IsBadRequest(err) {
				t.Errorf("%q: %v, want 400", tc.header, err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.header, err)
		case tc.declared == (got == io.Reader(body)):
			t.Errorf("%q: declared %v, want %v", tc.header, got != io.Reader(body), tc.declared)
		}
	}
}
