package runner

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tfjson "github.com/hashicorp/terraform-json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runner/oci/ocitest"
	"github.com/terrarun/terrarun/pkg/stage"
)

// engine returns the terraform or tofu binary the tests run. It fails the
// test when there is none: the runner's tests are worthless without one.
func engine(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TERRARUN_ENGINE"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("TERRARUN_ENGINE=%s: %v", p, err)
		}
		return p
	}
	for _, name := range []string{"tofu", "terraform"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no tofu or terraform found on PATH and TERRARUN_ENGINE is not set: run `make engine` to install one")
	return ""
}

// syncBuffer is a bytes.Buffer safe for the runner's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// harness is one run against a fake server, with a local backend.
type harness struct {
	t        *testing.T
	srv      *fakeServer
	engine   string
	stateDir string
	config   string
	stdout   syncBuffer
}

func newHarness(t *testing.T, files map[string]string) *harness {
	t.Helper()
	h := &harness{t: t, srv: newFakeServer(t), engine: engine(t), stateDir: t.TempDir(), config: t.TempDir()}
	for name, content := range files {
		p := filepath.Join(h.config, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func (h *harness) spec(stageName v1alpha1.StageName, attempt int32) stage.Spec {
	s := h.srv.spec(stageName, attempt)
	s.Binary = h.engine
	s.WorkDir = h.t.TempDir()
	s.Backend = stage.Backend{Type: "local", Config: map[string]string{"path": filepath.Join(h.stateDir, "terraform.tfstate")}}
	if stageName == v1alpha1.StagePlan {
		s.Source = stage.Source{Dir: h.config}
	}
	return s
}

func (h *harness) run(ctx context.Context, spec stage.Spec, opts ...RunOption) error {
	h.t.Helper()
	client, err := NewHTTPClient(spec)
	if err != nil {
		h.t.Fatal(err)
	}
	return Run(ctx, spec, client, &h.stdout, opts...)
}

// applySpec returns an apply spec for the plan the server holds.
func (h *harness) applySpec(attempt int32) stage.Spec {
	s := h.spec(v1alpha1.StageApply, attempt)
	s.PlanDigest, s.PlanParts = h.srv.plan()
	return s
}

func (h *harness) secretFile(value string) string {
	p := filepath.Join(h.t.TempDir(), "value")
	if err := os.WriteFile(p, []byte(value), 0o600); err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (h *harness) result() stage.Result {
	h.t.Helper()
	var r stage.Result
	if err := json.Unmarshal(h.srv.part(v1alpha1.PlanPartResult), &r); err != nil {
		h.t.Fatalf("result: %v", err)
	}
	return r
}

func (h *harness) outputs() map[string]struct {
	Sensitive bool            `json:"sensitive"`
	Type      json.RawMessage `json:"type"`
	Value     json.RawMessage `json:"value"`
} {
	h.t.Helper()
	var out map[string]struct {
		Sensitive bool            `json:"sensitive"`
		Type      json.RawMessage `json:"type"`
		Value     json.RawMessage `json:"value"`
	}
	h.srv.mu.Lock()
	b := h.srv.outputs
	h.srv.mu.Unlock()
	if err := json.Unmarshal(b, &out); err != nil {
		h.t.Fatalf("outputs %s: %v", b, err)
	}
	return out
}

const basicConfig = `
variable "name" {
  type = string
}

variable "password" {
  type      = string
  sensitive = true
}

variable "zones" {
  type = list(string)
}

variable "tricky" {
  type = string
}

resource "terraform_data" "main" {
  input = {
    name     = var.name
    password = var.password
    zones    = var.zones
  }
}

output "name" {
  value = terraform_data.main.output.name
}

output "zones" {
  value = var.zones
}

output "tricky" {
  value = var.tricky
}

output "password" {
  value     = var.password
  sensitive = true
}
`

// tricky is a string that needs every kind of HCL escaping.
const tricky = "a \"quoted\" \\back\\slash ${not_interpolated} %{not_a_directive} $${x} %%{y} $ % {} tab\there\nnew line ünï €"

func TestPlanApplyDestroy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]string{"main.tf": basicConfig})
	ctx := context.Background()

	vars := []stage.Variable{
		{Name: "name", Value: "db-1"},
		{Name: "password", File: h.secretFile("pa55-w0rd-value"), Secret: true},
		{Name: "zones", Value: `["a", "b"]`, HCL: true},
		{Name: "tricky", Value: tricky},
	}
	plan := h.spec(v1alpha1.StagePlan, 1)
	plan.Variables = vars
	var planned, applied string
	if err := h.run(ctx, plan, WithPlanDigest(func(d string) { planned = d })); err != nil {
		t.Fatalf("plan: %v\nlog:\n%s", err, h.srv.allLogs())
	}
	// The plan's digest, as the server computes it from the parts it got.
	if digest, _ := h.srv.plan(); planned != digest {
		t.Errorf("the plan stage reported plan %q, the server holds %q", planned, digest)
	}

	// Parts, in order, result last.
	want := []string{v1alpha1.PlanPartSource, v1alpha1.PlanPartFile, v1alpha1.PlanPartText, v1alpha1.PlanPartJSON, v1alpha1.PlanPartResult}
	if !reflect.DeepEqual(h.srv.partOrder, want) {
		t.Errorf("uploads = %v, want %v", h.srv.partOrder, want)
	}
	res := h.result()
	if res.Add != 1 || res.Change != 0 || res.Destroy != 0 || res.Import != 0 || !res.HasChanges {
		t.Errorf("result = %+v", res)
	}
	if res.SourceRevision != digestOf(h.srv.part(v1alpha1.PlanPartSource)) {
		t.Errorf("revision %s is not the source tarball's digest %s", res.SourceRevision, digestOf(h.srv.part(v1alpha1.PlanPartSource)))
	}
	text := string(h.srv.part(v1alpha1.PlanPartText))
	if !strings.Contains(text, "1 to add") {
		t.Errorf("plan text lacks the summary:\n%s", text)
	}
	var p tfjson.Plan
	if err := json.Unmarshal(h.srv.part(v1alpha1.PlanPartJSON), &p); err != nil {
		t.Fatalf("plan JSON: %v", err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]string{"text": text, "json": string(h.srv.part(v1alpha1.PlanPartJSON)), "log": h.srv.log(v1alpha1.StagePlan, 1), "stdout": h.stdout.String()} {
		if strings.Contains(b, "pa55-w0rd-value") {
			t.Errorf("plan %s holds the secret", name)
		}
	}
	if !strings.Contains(string(h.srv.part(v1alpha1.PlanPartJSON)), "(sensitive value)") {
		t.Errorf("plan JSON is not redacted")
	}
	if !strings.Contains(h.srv.log(v1alpha1.StagePlan, 1), "terrarun: running terraform plan") && !strings.Contains(h.srv.log(v1alpha1.StagePlan, 1), "terrarun: running tofu plan") {
		t.Errorf("log lacks the command line:\n%s", h.srv.log(v1alpha1.StagePlan, 1))
	}
	if !strings.Contains(h.stdout.String(), "1 to add") {
		t.Errorf("stdout lacks terraform's output:\n%s", h.stdout.String())
	}
	// The tarball holds the configuration only.
	names := tarNames(t, h.srv.part(v1alpha1.PlanPartSource))
	if !reflect.DeepEqual(names, []string{"main.tf"}) {
		t.Errorf("source tarball holds %v", names)
	}

	// Apply.
	apply := h.applySpec(1)
	apply.Variables = vars
	if err := h.run(ctx, apply, WithPlanDigest(func(d string) { applied = d })); err != nil {
		t.Fatalf("apply: %v\nlog:\n%s", err, h.srv.log(v1alpha1.StageApply, 1))
	}
	if applied != planned {
		t.Errorf("the apply stage reported plan %q, it applied %q", applied, planned)
	}
	outs := h.outputs()
	if string(outs["name"].Value) != `"db-1"` || outs["name"].Sensitive {
		t.Errorf("output name = %+v", outs["name"])
	}
	if !outs["password"].Sensitive || string(outs["password"].Value) != `"pa55-w0rd-value"` {
		t.Errorf("output password = %+v", outs["password"])
	}
	var zones []string
	if err := json.Unmarshal(outs["zones"].Value, &zones); err != nil || !reflect.DeepEqual(zones, []string{"a", "b"}) {
		t.Errorf("output zones = %s (%v)", outs["zones"].Value, err)
	}
	var gotTricky string
	if err := json.Unmarshal(outs["tricky"].Value, &gotTricky); err != nil || gotTricky != tricky {
		t.Errorf("output tricky = %q, want %q (%v)", gotTricky, tricky, err)
	}
	if !strings.Contains(h.srv.log(v1alpha1.StageApply, 1), "Apply complete!") {
		t.Errorf("apply log:\n%s", h.srv.log(v1alpha1.StageApply, 1))
	}
	if strings.Contains(h.srv.log(v1alpha1.StageApply, 1), "pa55-w0rd-value") {
		t.Errorf("apply log holds the secret")
	}

	// A destroy plan of what was applied.
	destroy := h.spec(v1alpha1.StagePlan, 2)
	destroy.Variables = vars
	destroy.Operation = "Destroy"
	if err := h.run(ctx, destroy); err != nil {
		t.Fatalf("destroy plan: %v\nlog:\n%s", err, h.srv.log(v1alpha1.StagePlan, 2))
	}
	if res := h.result(); res.Destroy != 1 || res.Add != 0 || !res.HasChanges {
		t.Errorf("destroy result = %+v", res)
	}
	if !strings.Contains(string(h.srv.part(v1alpha1.PlanPartText)), "1 to destroy") {
		t.Errorf("destroy plan text:\n%s", h.srv.part(v1alpha1.PlanPartText))
	}

	// Planning again without changes.
	again := h.spec(v1alpha1.StagePlan, 3)
	again.Variables = vars
	if err := h.run(ctx, again); err != nil {
		t.Fatalf("plan: %v", err)
	}
	if res := h.result(); res != (stage.Result{SourceRevision: res.SourceRevision}) {
		t.Errorf("no-change result = %+v", res)
	}
}

func tarNames(t *testing.T, b []byte) []string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeXGlobalHeader {
			names = append(names, h.Name)
		}
	}
}

const leakConfig = `
variable "token" {
  type = string
}

variable "pair" {
  type    = list(string)
  default = []
}

resource "terraform_data" "echo" {
  input = ["token-is-${var.token}", var.pair]

  # nonsensitive hides the values from terraform's own redaction: only
  # the runner's can catch them.
  provisioner "local-exec" {
    command = "echo ${nonsensitive(var.token)} ${join(",", nonsensitive(var.pair))}"
  }
}

output "token" {
  value     = var.token
  sensitive = true
}

output "derived" {
  value     = upper(var.token)
  sensitive = true
}
`

// TestSecretsAreRedacted proves that a Secret-sourced variable the
// configuration does not declare sensitive is sensitive to terraform (its
// outputs must be marked so), and that the redactor hides it where
// terraform cannot (a command that strips the sensitivity).
func TestSecretsAreRedacted(t *testing.T) {
	t.Parallel()
	const secret = "Sup3rS3cretValue42"
	h := newHarness(t, map[string]string{"main.tf": leakConfig})
	ctx := context.Background()
	vars := []stage.Variable{
		{Name: "token", File: h.secretFile(secret), Secret: true},
		{Name: "pair", File: h.secretFile(`["PartOneSecret", "PartTwoSecret"]`), Secret: true, HCL: true},
	}

	plan := h.spec(v1alpha1.StagePlan, 1)
	plan.Variables = vars
	if err := h.run(ctx, plan); err != nil {
		t.Fatalf("plan: %v", err)
	}
	apply := h.applySpec(1)
	apply.Variables = vars
	if err := h.run(ctx, apply); err != nil {
		t.Fatalf("apply: %v", err)
	}
	logs := h.srv.allLogs()
	if !strings.Contains(logs, "(local-exec): "+Redacted+" "+Redacted+","+Redacted) {
		t.Errorf("the echo should be in the log, redacted:\n%s", logs)
	}
	for name, b := range map[string]string{
		"log":    logs,
		"stdout": h.stdout.String(),
		"text":   string(h.srv.part(v1alpha1.PlanPartText)),
		"json":   string(h.srv.part(v1alpha1.PlanPartJSON)),
	} {
		for _, s := range []string{secret, "PartOneSecret", "PartTwoSecret"} {
			if strings.Contains(b, s) {
				t.Errorf("%s holds the secret %s:\n%s", name, s, b)
			}
		}
	}
	// The outputs are the one place that holds values.
	outs := h.outputs()
	if string(outs["token"].Value) != `"`+secret+`"` || !outs["token"].Sensitive || !outs["derived"].Sensitive {
		t.Errorf("outputs = %s", h.srv.outputs)
	}
}

// TestSecretDerivedOutputMustBeSensitive: the engine itself knows that a
// Secret-sourced variable is sensitive, so a root output derived from it
// (here through upper and base64encode) fails the plan with terraform's
// explanation, unless the configuration marks it sensitive.
func TestSecretDerivedOutputMustBeSensitive(t *testing.T) {
	t.Parallel()
	const secret = "DerivedS3cretValue"
	h := newHarness(t, map[string]string{"main.tf": `variable "token" {
  type = string
}

output "leak" {
  value = base64encode(upper(var.token))
}
`})
	plan := h.spec(v1alpha1.StagePlan, 1)
	plan.Variables = []stage.Variable{{Name: "token", File: h.secretFile(secret), Secret: true}}
	err := h.run(context.Background(), plan)
	if err == nil || !strings.Contains(err.Error(), "Output refers to sensitive values") {
		t.Fatalf("plan error = %v, want terraform's \"Output refers to sensitive values\"", err)
	}
	if logs := h.srv.allLogs(); strings.Contains(logs, secret) || strings.Contains(logs, "REVSSVZFRFMzQ1JFVFZBTFVF") {
		t.Errorf("the log holds the secret:\n%s", logs)
	}
}

// TestBackendConfigSecretIsRedacted: every value of the backend's
// configSecret file is secret, though terraform does not know it: a
// local-exec that prints the file leaks nothing.
func TestBackendConfigSecretIsRedacted(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-backend-value"
	dir := t.TempDir()
	file := filepath.Join(dir, "backend.hcl")
	h := newHarness(t, map[string]string{"main.tf": `resource "terraform_data" "x" {
  provisioner "local-exec" {
    command = "cat ` + file + `"
  }
}`})
	if err := os.WriteFile(file, []byte(`path = "`+filepath.Join(h.stateDir, secret+".tfstate")+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	plan := h.spec(v1alpha1.StagePlan, 1)
	plan.Backend.ConfigFile = file
	if err := h.run(ctx, plan); err != nil {
		t.Fatalf("plan: %v\n%s", err, h.srv.allLogs())
	}
	apply := h.applySpec(1)
	apply.Backend.ConfigFile = file
	if err := h.run(ctx, apply); err != nil {
		t.Fatalf("apply: %v\n%s", err, h.srv.allLogs())
	}
	logs := h.srv.allLogs()
	if !strings.Contains(logs, "(local-exec): path = \""+Redacted) {
		t.Errorf("the file should be in the log, redacted:\n%s", logs)
	}
	for name, b := range map[string]string{"log": logs, "stdout": h.stdout.String(),
		"text": string(h.srv.part(v1alpha1.PlanPartText)), "json": string(h.srv.part(v1alpha1.PlanPartJSON))} {
		if strings.Contains(b, secret) {
			t.Errorf("%s holds the backend configuration's value:\n%s", name, b)
		}
	}
	if _, err := os.Stat(filepath.Join(h.stateDir, secret+".tfstate")); err != nil {
		t.Errorf("the backend configuration was not used: %v", err)
	}
}

// TestSecretInErrorIsRedacted makes terraform print the secret in an error:
// nonsensitive strips the sensitivity the engine knows, so only the runner's
// redaction can hide it.
func TestSecretInErrorIsRedacted(t *testing.T) {
	t.Parallel()
	const secret = "An0therS3cretValue"
	h := newHarness(t, map[string]string{"main.tf": `
variable "token" {
  type = string
  validation {
    condition     = length(var.token) > 100
    error_message = "The token ${nonsensitive(var.token)} is too short."
  }
}
`})
	plan := h.spec(v1alpha1.StagePlan, 1)
	plan.Variables = []stage.Variable{{Name: "token", File: h.secretFile(secret), Secret: true}}
	err := h.run(context.Background(), plan)
	if err == nil {
		t.Fatal("plan succeeded")
	}
	if !strings.Contains(err.Error(), "The token "+Redacted+" is too short") {
		t.Errorf("error lacks terraform's message: %v", err)
	}
	for name, b := range map[string]string{"error": err.Error(), "log": h.srv.allLogs(), "stdout": h.stdout.String()} {
		if strings.Contains(b, secret) {
			t.Errorf("%s holds the secret:\n%s", name, b)
		}
	}
	if len(h.srv.partOrder) != 0 {
		t.Errorf("a failed plan uploaded %v", h.srv.partOrder)
	}
}

// TestOutputInErrorIsRedacted: a variable read from another run's output
// (a JSON value) is redacted as the strings it holds, not only as its JSON
// text, when terraform prints it declassified in an error.
func TestOutputInErrorIsRedacted(t *testing.T) {
	t.Parallel()
	const secret = "Upstr3amOutputValue"
	h := newHarness(t, map[string]string{"main.tf": `
variable "conn" {
  type = object({ password = string })
  validation {
    condition     = length(var.conn.password) > 100
    error_message = "The password ${nonsensitive(var.conn.password)} is too short."
  }
}
`})
	plan := h.spec(v1alpha1.StagePlan, 1)
	plan.Variables = []stage.Variable{{Name: "conn", File: h.secretFile(`{"password":"` + secret + `"}`), Secret: true, JSON: true}}
	err := h.run(context.Background(), plan)
	if err == nil {
		t.Fatal("plan succeeded")
	}
	if !strings.Contains(err.Error(), "The password "+Redacted+" is too short") {
		t.Errorf("error lacks terraform's message: %v", err)
	}
	for name, b := range map[string]string{"error": err.Error(), "log": h.srv.allLogs(), "stdout": h.stdout.String()} {
		if strings.Contains(b, secret) {
			t.Errorf("%s holds the output's value:\n%s", name, b)
		}
	}
}

func TestSyntaxError(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]string{"main.tf": "resource \"terraform_data\" \"x\" {\n  input = \n"})
	err := h.run(context.Background(), h.spec(v1alpha1.StagePlan, 1))
	if err == nil {
		t.Fatal("plan succeeded")
	}
	if !strings.Contains(err.Error(), "Error:") || !strings.Contains(err.Error(), "main.tf") {
		t.Errorf("error lacks terraform's message: %v", err)
	}
	log := h.srv.log(v1alpha1.StagePlan, 1)
	if !strings.Contains(log, "main.tf") || !strings.Contains(log, "Error:") {
		t.Errorf("log lacks terraform's message:\n%s", log)
	}
	if !strings.Contains(log, "terrarun: stage plan attempt 1 failed:") {
		t.Errorf("log lacks the final line:\n%s", log)
	}
	if errors.Is(err, ErrCanceled) || errors.Is(err, ErrForbidden) {
		t.Errorf("error misclassified: %v", err)
	}
}

func TestCancelDuringApply(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]string{"main.tf": `
resource "terraform_data" "slow" {
  provisioner "local-exec" {
    command = "echo started; sleep 37"
  }
}
`})
	if err := h.run(context.Background(), h.spec(v1alpha1.StagePlan, 1)); err != nil {
		t.Fatalf("plan: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const grace = 8 * time.Second
	done := make(chan error, 1)
	go func() { done <- h.run(ctx, h.applySpec(1), WithGracePeriod(grace)) }()

	// The log streams: the provisioner's output reaches the server while
	// terraform still runs.
	h.srv.waitForLog(t, v1alpha1.StageApply, 1, "(local-exec): started", 60*time.Second)
	start := time.Now()
	cancel()
	var err error
	select {
	case err = <-done:
	case <-time.After(grace + 10*time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if elapsed := time.Since(start); elapsed > grace {
		t.Errorf("Run took %s to stop, grace %s", elapsed, grace)
	}
	if err == nil || !errors.Is(err, ErrCanceled) || !strings.Contains(err.Error(), "canceled") {
		t.Fatalf("err = %v", err)
	}
	log := h.srv.log(v1alpha1.StageApply, 1)
	if !strings.Contains(log, "Interrupt received") && !strings.Contains(log, "Gracefully shutting down") {
		t.Errorf("terraform was not interrupted gracefully:\n%s", log)
	}
	if !strings.Contains(log, "terrarun: stage apply attempt 1 failed: stage canceled") {
		t.Errorf("log lacks the final line:\n%s", log)
	}
	if h.srv.outputs != nil {
		t.Errorf("a canceled apply uploaded outputs")
	}
	// The provisioner's abandoned sleep is gone too.
	time.Sleep(200 * time.Millisecond)
	if pids := processesWithArgs("sleep 37"); len(pids) > 0 {
		t.Errorf("sleep 37 still runs: %v", pids)
	}
}

// processesWithArgs returns the pids whose command line is args.
func processesWithArgs(args string) []string {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if strings.TrimRight(strings.ReplaceAll(string(b), "\x00", " "), " ") == args {
			out = append(out, filepath.Base(filepath.Dir(f)))
		}
	}
	return out
}

func TestApplyRefusesDigestMismatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]string{"main.tf": `resource "terraform_data" "x" {}`})
	if err := h.run(context.Background(), h.spec(v1alpha1.StagePlan, 1)); err != nil {
		t.Fatalf("plan: %v", err)
	}
	// An approved digest that its part digests do not make.
	apply := h.applySpec(1)
	apply.PlanDigest = "sha256:" + strings.Repeat("0", 64)
	err := h.run(context.Background(), apply)
	if !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), "refusing to apply") {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(h.srv.log(v1alpha1.StageApply, 1), "running terraform apply") || strings.Contains(h.srv.log(v1alpha1.StageApply, 1), "running tofu apply") {
		t.Errorf("terraform apply ran")
	}
	if _, err := os.Stat(filepath.Join(h.stateDir, "terraform.tfstate")); err == nil {
		t.Errorf("state was written")
	}

	// A tampered plan file, or a tampered configuration, under the approved
	// digest is refused too.
	for attempt, part := range map[int32]string{2: v1alpha1.PlanPartFile, 3: v1alpha1.PlanPartSource} {
		h.srv.mu.Lock()
		h.srv.serve = map[string][]byte{part: append(append([]byte(nil), h.srv.parts[part]...), 0)}
		h.srv.mu.Unlock()
		err = h.run(context.Background(), h.applySpec(attempt))
		if !errors.Is(err, ErrDigestMismatch) {
			t.Fatalf("tampered %s: err = %v", part, err)
		}
	}
	if _, err := os.Stat(filepath.Join(h.stateDir, "terraform.tfstate")); err == nil {
		t.Errorf("state was written")
	}
}

func TestForbiddenStopsTheRunner(t *testing.T) {
	t.Parallel()
	t.Run("uploads", func(t *testing.T) {
		h := newHarness(t, map[string]string{"main.tf": `resource "terraform_data" "x" {}`})
		h.srv.forbidWrites = true
		err := h.run(context.Background(), h.spec(v1alpha1.StagePlan, 1))
		if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "not the current stage attempt") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("log stream", func(t *testing.T) {
		h := newHarness(t, map[string]string{"main.tf": `
resource "terraform_data" "x" {
  provisioner "local-exec" {
    command = "sleep 30"
  }
}`})
		if err := h.run(context.Background(), h.spec(v1alpha1.StagePlan, 1)); err != nil {
			t.Fatal(err)
		}
		h.srv.mu.Lock()
		h.srv.forbid = true
		h.srv.mu.Unlock()
		start := time.Now()
		err := h.run(context.Background(), h.applySpec(1))
		if !errors.Is(err, ErrForbidden) {
			t.Fatalf("err = %v", err)
		}
		if time.Since(start) > 20*time.Second {
			t.Errorf("the runner took %s to stop", time.Since(start))
		}
	})
}

func TestGitSource(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is required")
	}
	h := newHarness(t, nil)
	root := t.TempDir()
	bare := filepath.Join(root, "repo.git")
	work := filepath.Join(root, "work")
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1", "HOME="+root)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(name, content string) {
		p := filepath.Join(work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(root, "init", "--quiet", "--bare", "-b", "main", bare)
	git(root, "init", "--quiet", "-b", "main", work)
	write("modules/m/main.tf", "variable \"v\" {}\nresource \"terraform_data\" \"m\" {\n  input = var.v\n}\noutput \"v\" {\n  value = var.v\n}\n")
	write("envs/dev/main.tf", "module \"m\" {\n  source = \"../../modules/m\"\n  v      = \"first\"\n}\noutput \"v\" {\n  value = module.m.v\n}\n")
	write("README.md", "docs\n")
	git(work, "add", ".")
	git(work, "commit", "--quiet", "-m", "first")
	first := git(work, "rev-parse", "HEAD")
	git(work, "tag", "v1")
	write("envs/dev/main.tf", "module \"m\" {\n  source = \"../../modules/m\"\n  v      = \"second\"\n}\noutput \"v\" {\n  value = module.m.v\n}\nresource \"terraform_data\" \"extra\" {}\n")
	git(work, "commit", "--quiet", "-am", "second")
	second := git(work, "rev-parse", "HEAD")
	git(work, "push", "--quiet", "--tags", bare, "main")

	url := "file://" + bare
	for _, tc := range []struct {
		ref      string
		revision string
		add      int32
		value    string
	}{
		{"v1", first, 1, "first"},
		{"main", second, 2, "second"},
		{first, first, 1, "first"},
		{"", second, 2, "second"},
	} {
		t.Run("ref="+tc.ref, func(t *testing.T) {
			plan := h.spec(v1alpha1.StagePlan, 1)
			plan.Source = stage.Source{Git: &stage.GitSource{URL: url, Ref: tc.ref, Path: "envs/dev"}}
			plan.Backend.Config["path"] = filepath.Join(t.TempDir(), "terraform.tfstate")
			if err := h.run(context.Background(), plan); err != nil {
				t.Fatalf("plan: %v\n%s", err, h.srv.log(v1alpha1.StagePlan, 1))
			}
			res := h.result()
			if res.SourceRevision != tc.revision || res.Add != tc.add {
				t.Errorf("result = %+v, want revision %s and %d to add", res, tc.revision, tc.add)
			}
			names := tarNames(t, h.srv.part(v1alpha1.PlanPartSource))
			for _, n := range names {
				if strings.HasPrefix(n, ".git") || strings.Contains(n, ".terraform/") || strings.Contains(n, backendOverrideFile) {
					t.Errorf("source tarball holds %s", n)
				}
			}
			apply := h.applySpec(1)
			apply.Backend = plan.Backend
			if err := h.run(context.Background(), apply); err != nil {
				t.Fatalf("apply: %v\n%s", err, h.srv.log(v1alpha1.StageApply, 1))
			}
			if v := string(h.outputs()["v"].Value); v != `"`+tc.value+`"` {
				t.Errorf("output v = %s", v)
			}
		})
	}

	t.Run("path escaping the repository", func(t *testing.T) {
		for _, p := range []string{"../..", "/etc", "envs/../../x"} {
			plan := h.spec(v1alpha1.StagePlan, 1)
			plan.Source = stage.Source{Git: &stage.GitSource{URL: url, Ref: "main", Path: p}}
			if err := h.run(context.Background(), plan); err == nil {
				t.Errorf("path %q accepted", p)
			}
		}
	})
	t.Run("unknown ref", func(t *testing.T) {
		plan := h.spec(v1alpha1.StagePlan, 1)
		plan.Source = stage.Source{Git: &stage.GitSource{URL: url, Ref: "nope"}}
		if err := h.run(context.Background(), plan); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestWorkspace(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]string{"main.tf": `output "ws" {
  value = terraform.workspace
}`})
	for attempt := int32(1); attempt <= 2; attempt++ { // creates, then selects
		plan := h.spec(v1alpha1.StagePlan, attempt)
		plan.Workspace = "staging"
		// The local backend keeps workspaces next to the working directory.
		plan.Backend.Config["workspace_dir"] = filepath.Join(h.stateDir, "ws")
		if err := h.run(context.Background(), plan); err != nil {
			t.Fatalf("plan: %v\n%s", err, h.srv.log(v1alpha1.StagePlan, attempt))
		}
		apply := h.applySpec(attempt)
		apply.Workspace = "staging"
		apply.Backend = plan.Backend
		if err := h.run(context.Background(), apply); err != nil {
			t.Fatalf("apply: %v\n%s", err, h.srv.log(v1alpha1.StageApply, attempt))
		}
		if v := string(h.outputs()["ws"].Value); v != `"staging"` {
			t.Errorf("workspace = %s", v)
		}
		// Selecting the workspace starts no engine command of its own.
		for _, log := range []string{h.srv.log(v1alpha1.StagePlan, attempt), h.srv.log(v1alpha1.StageApply, attempt)} {
			if strings.Contains(log, " workspace new") || strings.Contains(log, " workspace select") || !strings.Contains(log, "terrarun: workspace staging selected") {
				t.Errorf("the stage ran workspace commands:\n%s", log)
			}
		}
	}
}

func TestRunValidatesSpec(t *testing.T) {
	t.Parallel()
	srv := newFakeServer(t)
	base := srv.spec(v1alpha1.StagePlan, 1)
	base.WorkDir = t.TempDir()
	base.Backend = stage.Backend{Type: "local"}
	base.Source = stage.Source{Dir: t.TempDir()}
	client, err := NewHTTPClient(base)
	if err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*stage.Spec){
		"stage":        func(s *stage.Spec) { s.Stage = "destroy" },
		"attempt":      func(s *stage.Spec) { s.Attempt = 0 },
		"workdir":      func(s *stage.Spec) { s.WorkDir = "relative" },
		"backend":      func(s *stage.Spec) { s.Backend.Type = `local" {} x {` },
		"no source":    func(s *stage.Spec) { s.Source = stage.Source{} },
		"two sources":  func(s *stage.Spec) { s.Source.Git = &stage.GitSource{URL: "https://x"} },
		"apply digest": func(s *stage.Spec) { s.Stage = v1alpha1.StageApply },
		"variable":     func(s *stage.Spec) { s.Variables = []stage.Variable{{Name: "a b", Value: "x"}} },
	} {
		s := base
		s.Backend.Config = nil
		mutate(&s)
		if err := Run(context.Background(), s, client, io.Discard); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestGitCredentialsStayWithTheirHost attacks git credentials bound to one
// host: a URL on another host, and a bound host that redirects git to
// another, which then asks for credentials. The other host never gets them;
// the bound host does.
func TestGitCredentialsStayWithTheirHost(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is required")
	}
	type seen struct {
		mu   sync.Mutex
		auth []string
	}
	asking := func(s *seen) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			s.auth = append(s.auth, r.Header.Get("Authorization"))
			s.mu.Unlock()
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			w.WriteHeader(http.StatusUnauthorized)
		}))
	}
	var thief, bound seen
	thiefSrv := asking(&thief)
	defer thiefSrv.Close()
	boundSrv := asking(&bound)
	defer boundSrv.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, thiefSrv.URL+r.URL.RequestURI(), http.StatusFound)
	}))
	defer redirector.Close()
	host := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

	creds := func(h string) string {
		dir := t.TempDir()
		writeTree(t, dir, map[string]string{"host": h, "username": "deploy-bot", "password": "hunter2-secret"})
		return dir
	}
	run := func(url, credsDir string) (string, error) {
		h := newHarness(t, nil)
		plan := h.spec(v1alpha1.StagePlan, 1)
		plan.Source = stage.Source{Git: &stage.GitSource{URL: url, Ref: "main", CredentialsDir: credsDir}}
		err := h.run(context.Background(), plan)
		return h.srv.log(v1alpha1.StagePlan, 1), err
	}

	// A URL on another host: refused before git runs.
	log, err := run(thiefSrv.URL+"/repo.git", creds(host(boundSrv)))
	if err == nil || !strings.Contains(err.Error(), "refusing to offer them") {
		t.Errorf("credentials for %s with a URL on %s: %v\n%s", host(boundSrv), host(thiefSrv), err, log)
	}
	// The bound host redirects to another, which asks: git gets nothing to send.
	log, err = run(redirector.URL+"/repo.git", creds(host(redirector)))
	if err == nil || !strings.Contains(log, "git credentials are not offered to "+host(thiefSrv)) {
		t.Errorf("after a redirect: %v\n%s", err, log)
	}
	thief.mu.Lock()
	for _, a := range thief.auth {
		if a != "" {
			t.Errorf("the other host received credentials: %q", a)
		}
	}
	if len(thief.auth) == 0 {
		t.Error("the redirect was not followed; the test proves nothing")
	}
	thief.mu.Unlock()
	// The bound host itself gets them.
	if _, err := run(boundSrv.URL+"/repo.git", creds(host(boundSrv))); err == nil {
		t.Error("a clone from a server that refuses every credential succeeded")
	}
	bound.mu.Lock()
	defer bound.mu.Unlock()
	if !slices.Contains(bound.auth, "Basic "+base64.StdEncoding.EncodeToString([]byte("deploy-bot:hunter2-secret"))) {
		t.Errorf("the bound host never received the credentials: %q", bound.auth)
	}
}

// TestApplyAfterPlan: a plan stage with ApplyAfterPlan records its plan,
// waits for the apply stage (here the fake server grants it at once), and
// applies with the engine it planned with: one init, the apply stage's own
// log and outputs.
func TestApplyAfterPlan(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]string{"main.tf": `resource "terraform_data" "x" {
  input = "v"
}
output "x" {
  value = terraform_data.x.output
}`})
	plan := h.spec(v1alpha1.StagePlan, 1)
	plan.Workspace = "carried"
	plan.Backend.Config["workspace_dir"] = filepath.Join(h.stateDir, "ws")
	plan.ApplyAfterPlan = true
	// The plan stage succeeds when its plan is recorded: its log must not
	// say so before.
	var uploads atomic.Int32
	h.srv.intercept = func(_ http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/plan") {
			uploads.Add(1)
			if log := h.srv.log(v1alpha1.StagePlan, 1); strings.Contains(log, "succeeded") {
				t.Errorf("the plan log ended before the plan was uploaded:\n%s", log)
			}
		}
		return false
	}
	var reported []string
	if err := h.run(context.Background(), plan, WithPlanDigest(func(d string) { reported = append(reported, d) })); err != nil {
		t.Fatalf("run: %v\n%s", err, h.stdout.String())
	}
	if digest, _ := h.srv.plan(); len(reported) != 1 || reported[0] != digest {
		t.Errorf("reported plans %q, want the one the server holds, %s, once", reported, digest)
	}
	if n := uploads.Load(); n != 1 {
		t.Errorf("the plan went up in %d requests, want one", n)
	}
	if n := h.srv.downloads[v1alpha1.PlanFormatFile]; n != 0 {
		t.Errorf("the plan file it made came back %d times", n)
	}
	planLog, applyLog := h.srv.log(v1alpha1.StagePlan, 1), h.srv.log(v1alpha1.StageApply, 1)
	if !strings.HasSuffix(planLog, "terrarun: stage plan attempt 1 succeeded\n") {
		t.Errorf("plan log:\n%s", planLog)
	}
	if !strings.Contains(applyLog, "Apply complete! Resources: 1 added") || !strings.HasSuffix(applyLog, "terrarun: stage apply attempt 1 succeeded\n") {
		t.Errorf("apply log:\n%s", applyLog)
	}
	if n := strings.Count(planLog+applyLog, " init\n"); n != 1 {
		t.Errorf("init ran %d times:\n%s\n%s", n, planLog, applyLog)
	}
	if v := string(h.outputs()["x"].Value); v != `"v"` {
		t.Errorf("output x = %s", v)
	}

	// Its plan file changed on disk after the upload (by the run's own
	// code, say): the carried apply is refused, and applies nothing.
	h.srv.intercept = func(_ http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodGet && r.URL.Query().Get("wait") == "true" {
			if err := os.WriteFile(filepath.Join(plan.WorkDir, ".terrarun", "plan.tfplan"), []byte("tampered"), 0o600); err != nil {
				t.Error(err)
			}
		}
		return false
	}
	again := h.spec(v1alpha1.StagePlan, 2)
	again.Workspace, again.ApplyAfterPlan = "carried-again", true
	again.Backend.Config["workspace_dir"] = filepath.Join(h.stateDir, "ws")
	plan = again
	h.srv.mu.Lock()
	h.srv.parts = map[string][]byte{} // the wait is for the new plan
	h.srv.mu.Unlock()
	err := h.run(context.Background(), again)
	if !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), "the plan file is now") {
		t.Errorf("with its plan file changed, the carried apply ended with %v, want ErrDigestMismatch for the file on disk", err)
	}
	if log := h.srv.log(v1alpha1.StageApply, 1); strings.Count(log, "Apply complete!") != 1 {
		t.Errorf("the changed plan file was applied:\n%s", log)
	}
}

// TestOCISource plans from a real registry: the artifact's subdirectory,
// with its relative modules, and tag@digest as the revision; a signature
// that does not verify is ErrVerificationFailed, which the executor turns
// into its own exit code; the registry's password is redacted from the
// stage's output even when an error would print it.
func TestOCISource(t *testing.T) {
	t.Parallel()
	reg := ocitest.Start(t, ocitest.Options{Private: true})
	key := ocitest.NewKey(t)
	digest := reg.Push("infra/app", "v1", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{
		"modules/m/main.tf": "resource \"terraform_data\" \"m\" {}\n",
		"envs/dev/main.tf":  "module \"m\" {\n  source = \"../../modules/m\"\n}\n",
	})})
	reg.Sign("infra/app", digest, key.Signer)
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{".dockerconfigjson": string(reg.DockerConfig()), "ca.crt": string(reg.CA),
		"cosign.pub": string(key.PublicPEM), "other.pub": string(ocitest.NewKey(t).PublicPEM)})
	source := func(keys string) *stage.OCISource {
		return &stage.OCISource{URL: reg.URL("infra/app"), Tag: "v1", Path: "envs/dev", KeysFile: filepath.Join(dir, keys), KeysSecret: "cosign-keys"}
	}
	access := &stage.RegistryAccess{CredentialsFile: filepath.Join(dir, ".dockerconfigjson"), CAFile: filepath.Join(dir, "ca.crt")}

	h := newHarness(t, nil)
	plan := h.spec(v1alpha1.StagePlan, 1)
	plan.Source, plan.Registry = stage.Source{OCI: source("cosign.pub")}, access
	plan.Backend.Config["path"] = filepath.Join(t.TempDir(), "terraform.tfstate")
	if err := h.run(context.Background(), plan); err != nil {
		t.Fatalf("plan: %v\n%s", err, h.srv.log(v1alpha1.StagePlan, 1))
	}
	if res := h.result(); res.SourceRevision != "v1@"+digest || res.Add != 1 {
		t.Errorf("result = %+v, want revision v1@%s and 1 to add", res, digest)
	}

	h = newHarness(t, nil)
	plan = h.spec(v1alpha1.StagePlan, 1)
	plan.Source, plan.Registry = stage.Source{OCI: source("other.pub")}, access
	err := h.run(context.Background(), plan)
	if !errors.Is(err, ErrVerificationFailed) || !strings.Contains(err.Error(), "Secret cosign-keys") {
		t.Errorf("a signature by another key: %v, want ErrVerificationFailed naming the Secret", err)
	}

	// An error that quotes the password (a registry answering with it, say)
	// is redacted: the runner knows the docker config's secrets.
	h = newHarness(t, nil)
	plan = h.spec(v1alpha1.StagePlan, 1)
	plan.Source, plan.Registry = stage.Source{OCI: &stage.OCISource{URL: reg.URL("infra/" + reg.Password)}}, access
	err = h.run(context.Background(), plan)
	log := h.srv.log(v1alpha1.StagePlan, 1)
	if err == nil || strings.Contains(err.Error(), reg.Password) || strings.Contains(log, reg.Password) || !strings.Contains(log, "pulling") {
		t.Errorf("the password in a repository's name: %v\n%s", err, log)
	}
}

// TestFluxArtifact: the plan stage downloads a Flux artifact, unpacks it
// only when it is the digest the server pinned, and records the pinned
// revision; another archive at that URL is ErrVerificationFailed.
func TestFluxArtifact(t *testing.T) {
	t.Parallel()
	archive := ocitest.TarGz(map[string]string{
		"modules/m/main.tf": "resource \"terraform_data\" \"m\" {}\n",
		"envs/dev/main.tf":  "module \"m\" {\n  source = \"../../modules/m\"\n}\n",
	})
	served := archive
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(served) }))
	t.Cleanup(srv.Close)
	sum := sha256.Sum256(archive)
	source := &stage.ArtifactSource{URL: srv.URL + "/gitrepository/ns/infra/abc.tar.gz", Digest: "sha256:" + hex.EncodeToString(sum[:]),
		Revision: "main@sha1:abc", Path: "envs/dev", Source: "GitRepository ns/infra"}

	h := newHarness(t, nil)
	plan := h.spec(v1alpha1.StagePlan, 1)
	plan.Source = stage.Source{Artifact: source}
	plan.Backend.Config["path"] = filepath.Join(t.TempDir(), "terraform.tfstate")
	if err := h.run(context.Background(), plan); err != nil {
		t.Fatalf("plan: %v\n%s", err, h.srv.log(v1alpha1.StagePlan, 1))
	}
	if res := h.result(); res.SourceRevision != "main@sha1:abc" || res.Add != 1 {
		t.Errorf("result = %+v, want revision main@sha1:abc and 1 to add", res)
	}

	served = ocitest.TarGz(map[string]string{"envs/dev/main.tf": "resource \"terraform_data\" \"planted\" {}\n"})
	h = newHarness(t, nil)
	plan = h.spec(v1alpha1.StagePlan, 1)
	plan.Source = stage.Source{Artifact: source}
	err := h.run(context.Background(), plan)
	if !errors.Is(err, ErrVerificationFailed) || !strings.Contains(err.Error(), "GitRepository ns/infra") {
		t.Errorf("another archive at the artifact's URL: %v, want ErrVerificationFailed naming the source", err)
	}
}

// tofuBinary is the OpenTofu binary: $TERRARUN_TOFU (make unit sets it),
// else the engine under test when it is tofu. Only OpenTofu installs
// oci:// modules, so a test that needs it fails without one.
func tofuBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TERRARUN_TOFU"); p != "" {
		return p
	}
	if e := engine(t); filepath.Base(e) == "tofu" {
		return e
	}
	t.Fatal("this test needs OpenTofu: set TERRARUN_TOFU (hack/engine.sh --build prints one), or TERRARUN_ENGINE to a tofu binary")
	return ""
}

// TestOCIModules installs an oci:// module with OpenTofu from the private
// registry of the run's OCI source, in the plan stage and again in the
// apply stage (whose init installs modules too), with the stage's registry
// access alone: the run's environment holds no credential. It runs tofu
// whatever the engine under test: terraform has no OCI modules.
func TestOCIModules(t *testing.T) {
	t.Parallel()
	tofu := tofuBinary(t)
	reg := ocitest.Start(t, ocitest.Options{Private: true})
	reg.PushModule("modules/greeting", "v1", map[string]string{"main.tf": "output \"text\" {\n  value = \"from an OCI module\"\n}\n"})
	reg.Push("infra/app", "v1", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{"main.tf": fmt.Sprintf(
		"module \"greeting\" {\n  source = \"oci://%s/modules/greeting?tag=v1\"\n}\n\nresource \"terraform_data\" \"x\" {\n  input = module.greeting.text\n}\n\noutput \"text\" {\n  value = terraform_data.x.output\n}\n", reg.Host)})})
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{".dockerconfigjson": string(reg.DockerConfig()), "ca.crt": string(reg.CA)})
	access := &stage.RegistryAccess{CredentialsFile: filepath.Join(dir, ".dockerconfigjson"), CAFile: filepath.Join(dir, "ca.crt")}

	for _, withAccess := range []bool{true, false} {
		h := newHarness(t, nil)
		h.engine = tofu
		plan := h.spec(v1alpha1.StagePlan, 1)
		plan.Source = stage.Source{OCI: &stage.OCISource{URL: reg.URL("infra/app"), Tag: "v1"}}
		plan.Registry = access
		plan.Backend.Config["path"] = filepath.Join(t.TempDir(), "terraform.tfstate")
		if !withAccess {
			// The source from a public copy; the module still needs credentials.
			public := ocitest.Start(t, ocitest.Options{Insecure: true})
			public.Push("infra/app", "v1", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{"main.tf": fmt.Sprintf(
				"module \"greeting\" {\n  source = \"oci://%s/modules/greeting?tag=v1\"\n}\n", reg.Host)})})
			plan.Source.OCI = &stage.OCISource{URL: public.URL("infra/app"), Tag: "v1", Insecure: true}
			plan.Registry = nil
			if err := h.run(context.Background(), plan); err == nil {
				t.Errorf("the module of a private registry installed without its credentials:\n%s", h.srv.log(v1alpha1.StagePlan, 1))
			}
			continue
		}
		if err := h.run(context.Background(), plan); err != nil {
			t.Fatalf("plan: %v\n%s", err, h.srv.log(v1alpha1.StagePlan, 1))
		}
		apply := h.applySpec(1)
		apply.Backend, apply.Registry = plan.Backend, access
		if err := h.run(context.Background(), apply); err != nil {
			t.Fatalf("apply: %v\n%s", err, h.srv.log(v1alpha1.StageApply, 1))
		}
		if v := string(h.outputs()["text"].Value); v != `"from an OCI module"` {
			t.Errorf("output text = %s", v)
		}
		for _, st := range []v1alpha1.StageName{v1alpha1.StagePlan, v1alpha1.StageApply} {
			if log := h.srv.log(st, 1); strings.Contains(log, reg.Password) {
				t.Errorf("the %s log holds the registry's password", st)
			}
		}
	}
}

// TestApplyAfterPlanOutlivesItsPlanLog: once the plan is recorded, the
// server refuses the plan stage's log stream, as it refuses the log of
// every stage it has recorded as complete (a new leader refuses a
// reconnected stream so). The refusal ends that log, not the execution: the
// apply this process carries still runs, once. The stream is refused, not
// cut: whether a cut stream is opened again depends on whether the plan
// writes to it once more, which the test cannot decide.
func TestApplyAfterPlanOutlivesItsPlanLog(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]string{"main.tf": `resource "terraform_data" "x" {
  input = "v"
}
output "x" {
  value = terraform_data.x.output
}`})
	plan := h.spec(v1alpha1.StagePlan, 1)
	plan.ApplyAfterPlan = true
	// The first plan log stream is refused when the plan goes up; the
	// upload waits until it is.
	var first atomic.Bool
	cutNow, cutDone := make(chan struct{}), make(chan struct{})
	var cutOnce, doneOnce sync.Once
	var refusals atomic.Int32
	h.srv.intercept = func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost {
			return false
		}
		if strings.HasSuffix(r.URL.Path, "/plan") {
			cutOnce.Do(func() { close(cutNow) })
			<-cutDone
			return false
		}
		if !strings.HasSuffix(r.URL.Path, "/logs") || r.URL.Query().Get("stage") != string(v1alpha1.StagePlan) {
			return false
		}
		if first.Load() {
			// A reconnect may race the plan's upload; it is refused once
			// the plan is recorded, as the server refuses it then.
			for h.srv.part(v1alpha1.PlanPartResult) == nil {
				select {
				case <-r.Context().Done():
					return true
				case <-time.After(10 * time.Millisecond):
				}
			}
			refusals.Add(1)
			writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
				`terraformruns.terrarun.dev "run1" is forbidden: this executor runs stage apply attempt 1, which is not the run's current plan stage`)
			return true
		}
		first.Store(true)
		defer doneOnce.Do(func() { close(cutDone) })
		read := make(chan struct{})
		go func() {
			_, _ = io.Copy(io.Discard, r.Body)
			close(read)
		}()
		select {
		case <-read:
			t.Error("the plan log ended before its plan went up")
		case <-cutNow:
			refusals.Add(1)
			writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
				`terraformruns.terrarun.dev "run1" is forbidden: the plan stage, attempt 1, is complete: its log takes no more output`)
		}
		return true
	}
	if err := h.run(context.Background(), plan); err != nil {
		t.Fatalf("run: %v\n%s", err, h.stdout.String())
	}
	if refusals.Load() == 0 {
		t.Fatal("the plan log was never refused: the test did not reach the refusal it is about")
	}
	if log := h.srv.log(v1alpha1.StageApply, 1); strings.Count(log, "Apply complete! Resources: 1 added") != 1 || !strings.HasSuffix(log, "terrarun: stage apply attempt 1 succeeded\n") {
		t.Errorf("apply log:\n%s", log)
	}
	if v := string(h.outputs()["x"].Value); v != `"v"` {
		t.Errorf("output x = %s", v)
	}
}

// TestStageLogRefusal: a refusal of the current stage's log stops the
// execution until the stage settles (its outcome is going up, and the
// upload's answer decides); a refusal of an ended stage's log never does.
func TestStageLogRefusal(t *testing.T) {
	var stopped []error
	log := &stageLog{stop: func(err error) { stopped = append(stopped, err) }}
	log.open = func(v1alpha1.StageName, int32) *logSink { return &logSink{} }
	log.start(v1alpha1.StagePlan, 1)
	plan := log.sink
	refusal := errors.New("refused")

	log.refused(plan, refusal)
	if len(stopped) != 1 {
		t.Fatalf("a refusal of the running stage's log stopped %d times, want once", len(stopped))
	}
	log.settle()
	log.refused(plan, refusal)
	log.start(v1alpha1.StageApply, 1)
	log.refused(plan, refusal)
	if len(stopped) != 1 {
		t.Errorf("refusals of a settled or ended stage's log stopped the execution: %v", stopped)
	}
	log.refused(log.sink, refusal)
	if len(stopped) != 2 {
		t.Errorf("a refusal of the next stage's log did not stop the execution")
	}
}
