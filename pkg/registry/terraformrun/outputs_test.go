package terraformrun

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
)

const testOutputs = `{
  "url": {"sensitive": false, "type": "string", "value": "https://example.com"},
  "password": {"sensitive": true, "type": "string", "value": "hunter2"},
  "ports": {"sensitive": false, "type": ["list", "number"], "value": [80, 443]}
}`

func TestOutputsUploadAndRead(t *testing.T) {
	env := newTestEnv(t)
	run := env.createRun(t, "web", nil)

	w := connect(t, env.storage.Outputs, alice, http.MethodGet, "web", "", nil)
	expectStatus(t, w, http.StatusNotFound, `run "web" has no outputs yet (it is Pending); outputs exist once the apply has succeeded`)

	env.runningStage(t, run, applyStage, terrarun.StageApply, 1)
	w = connect(t, env.storage.Outputs, applyStage, http.MethodPost, "web", "attempt=1", strings.NewReader(testOutputs))
	expectStatus(t, w, http.StatusNoContent)

	want := []terrarun.OutputStatus{
		{Name: "password", Type: rawJSON(`"string"`), Sensitive: true, ValueOmitted: terrarun.OutputSensitive},
		{Name: "ports", Type: rawJSON(`["list","number"]`), Value: rawJSON(`[80,443]`)},
		{Name: "url", Type: rawJSON(`"string"`), Value: rawJSON(`"https://example.com"`)},
	}
	if diff := cmp.Diff(want, env.getRun(t, "web").Status.Outputs); diff != "" {
		t.Errorf("status.outputs (-want +got):\n%s", diff)
	}

	w = connect(t, env.storage.Outputs, alice, http.MethodGet, "web", "", nil)
	expectStatus(t, w, http.StatusOK)
	if w.Body.String() != testOutputs {
		t.Errorf("GET = %q, want the uploaded document with its sensitive values", w.Body.String())
	}
	if w.Header().Get("Content-Type") != "application/json" || w.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("headers = %v", w.Header())
	}
}

// TestOutputsTooLargeForStatus: a 1.6 MB output, and more small ones than
// status can hold, do not fail the upload: status keeps the values that fit,
// says why the others are missing, and the subresource serves them all.
func TestOutputsTooLargeForStatus(t *testing.T) {
	env := newTestEnv(t)
	run := env.createRun(t, "web", nil)
	env.runningStage(t, run, applyStage, terrarun.StageApply, 1)

	big := strings.Repeat("x", 1600*1000)
	small := strings.Repeat("y", 3000)
	outputs := map[string]any{"a_big": map[string]any{"type": "string", "value": big}}
	for i := range 30 {
		outputs[fmt.Sprintf("s%02d", i)] = map[string]any{"type": "string", "value": small}
	}
	doc, err := json.Marshal(outputs)
	if err != nil {
		t.Fatal(err)
	}
	w := connect(t, env.storage.Outputs, applyStage, http.MethodPost, "web", "attempt=1", bytes.NewReader(doc))
	expectStatus(t, w, http.StatusNoContent)

	st := env.getRun(t, "web").Status.Outputs
	if len(st) != 31 || st[0].Name != "a_big" || st[0].Value != nil || st[0].ValueOmitted != terrarun.OutputTooLarge {
		t.Fatalf("status.outputs[0] = %+v, want a_big without its value, TooLarge", st[0])
	}
	kept, total := 0, 0
	for _, o := range st[1:] {
		switch o.ValueOmitted {
		case "":
			if kept != total {
				t.Errorf("%s kept after an omitted value", o.Name)
			}
			kept++
		case terrarun.OutputTooLarge:
		default:
			t.Errorf("%s: valueOmitted = %q", o.Name, o.ValueOmitted)
		}
		total++
	}
	if want := validation.MaxOutputValuesBytes / (len(small) + 2); kept != want {
		t.Errorf("kept %d values in status, want %d (as many as fit in %d bytes)", kept, want, validation.MaxOutputValuesBytes)
	}
	w = connect(t, env.storage.Outputs, alice, http.MethodGet, "web", "", nil)
	expectStatus(t, w, http.StatusOK)
	if !bytes.Equal(w.Body.Bytes(), doc) {
		t.Errorf("GET served %d bytes, want the %d uploaded", w.Body.Len(), len(doc))
	}
}

func TestOutputsUploadErrors(t *testing.T) {
	env := newTestEnv(t)
	run := env.createRun(t, "web", nil)
	env.runningStage(t, run, applyStage, terrarun.StageApply, 1)

	for _, tc := range []struct {
		name   string
		query  string
		body   string
		code   int
		fields []string
		msg    []string
	}{
		{name: "without attempt", body: testOutputs, code: http.StatusUnprocessableEntity, fields: []string{"attempt"}, msg: []string{`TerraformRunOutputsOptions.terrarun.dev "web" is invalid`}},
		{name: "attempt that is no number", query: "attempt=1.0", body: testOutputs, code: http.StatusBadRequest, msg: []string{`invalid attempt="1.0"`}},
		{name: "another attempt", query: "attempt=2", body: testOutputs, code: http.StatusForbidden, msg: []string{"this executor runs attempt 1, not attempt 2"}},
		{name: "not terraform output -json", query: "attempt=1", body: `["x"]`, code: http.StatusBadRequest, msg: []string{"the outputs are not `terraform output -json`"}},
		{name: "over 4 MiB", query: "attempt=1", body: strings.Repeat(" ", 4<<20+1), code: http.StatusRequestEntityTooLarge, msg: []string{"the outputs are larger than 4 MiB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := connect(t, env.storage.Outputs, applyStage, http.MethodPost, "web", tc.query, strings.NewReader(tc.body))
			st := expectStatus(t, w, tc.code, tc.msg...)
			if tc.fields != nil {
				expectCauses(t, st, tc.fields...)
			}
		})
	}
	// Only the apply stage uploads outputs.
	env.runningStage(t, run, planStage, terrarun.StagePlan, 2)
	w := connect(t, env.storage.Outputs, planStage, http.MethodPost, "web", "attempt=2", strings.NewReader(testOutputs))
	expectStatus(t, w, http.StatusForbidden, "this executor runs stage plan attempt 2, which is not the run's current apply stage")
	if outputs := env.getRun(t, "web").Status.Outputs; outputs != nil {
		t.Errorf("outputs were recorded: %+v", outputs)
	}
}

func rawJSON(s string) *terrarun.JSON { return &terrarun.JSON{Raw: []byte(s)} }
