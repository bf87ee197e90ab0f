package integration

import (
	"encoding/json"
	"fmt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/artifacts"
)

// largePlanTF plans 5000 resources: a plan text of well over a MiB and a plan
// JSON of several, each stored in many artifact chunks.
const largePlanTF = `resource "terraform_data" "r" {
  count = 5000
  input = count.index
}

output "count" {
  value = length(terraform_data.r)
}
`

// TestLargePlan plans 5000 resources: the plan text, the plan JSON and
// status.plan are complete.
func TestLargePlan(t *testing.T) {
	e := newRunEnv(t)
	e.create(t, runManifest("large", inline(map[string]string{"main.tf": largePlanTF}, "  operation: Plan\n")))
	run := e.waitPhase(t, "large", 15*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Fatalf("the 5000-resource plan ended %s: %s", run.Status.Phase, run.Status.Message)
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionPlanned); c == nil || c.Reason != v1alpha1.ReasonPlanOnly {
		t.Errorf("Planned condition = %+v, want reason PlanOnly", c)
	}
	if p := run.Status.Plan; p == nil || p.Add != 5000 || p.Change != 0 || p.Destroy != 0 || !p.HasChanges {
		t.Errorf("status.plan = %+v, want 5000 to add", p)
	}
	if n := applyStages(run); n != 0 {
		t.Errorf("a speculative plan has %d apply stages", n)
	}

	plan := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("large", "plan"))
	if !strings.Contains(plan, "Plan: 5000 to add, 0 to change, 0 to destroy.") {
		t.Errorf("the plan text (%d bytes) lacks the summary; its end:\n%s", len(plan), tail(plan, 2000))
	}
	// Served in full: every resource, the last one included, and no marker.
	for _, addr := range []string{"terraform_data.r[0] ", "terraform_data.r[2500] ", "terraform_data.r[4999] "} {
		if !strings.Contains(plan, "# "+addr+"will be created") {
			t.Errorf("the plan text (%d bytes) lacks %q", len(plan), addr)
		}
	}
	if got := strings.Count(plan, " will be created"); got != 5000 {
		t.Errorf("the plan text names %d resources to create, want 5000", got)
	}
	if strings.Contains(plan, "[terrarun: truncated") {
		t.Errorf("the plan text of a default server is truncated:\n%s", tail(plan, 500))
	}
	t.Logf("plan text: %d bytes", len(plan))

	planJSON := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("large", "plan?format=json"))
	var pj struct {
		ResourceChanges []struct {
			Address string `json:"address"`
			Change  struct {
				Actions []string `json:"actions"`
			} `json:"change"`
		} `json:"resource_changes"`
	}
	if err := json.Unmarshal([]byte(planJSON), &pj); err != nil {
		t.Fatalf("the plan JSON (%d bytes) does not parse: %v; its end:\n%s", len(planJSON), err, tail(planJSON, 500))
	}
	if len(pj.ResourceChanges) != 5000 {
		t.Errorf("the plan JSON has %d resource_changes, want 5000", len(pj.ResourceChanges))
	}
	seen := map[string]bool{}
	for _, rc := range pj.ResourceChanges {
		if len(rc.Change.Actions) != 1 || rc.Change.Actions[0] != "create" {
			t.Errorf("resource change %s: actions %v, want [create]", rc.Address, rc.Change.Actions)
			break
		}
		seen[rc.Address] = true
	}
	if !seen["terraform_data.r[4999]"] || len(seen) != 5000 {
		t.Errorf("the plan JSON has %d distinct addresses; terraform_data.r[4999] present: %v", len(seen), seen["terraform_data.r[4999]"])
	}
	t.Logf("plan JSON: %d bytes", len(planJSON))
}

// bigLogLines lines of exactly 1000 bytes, numbered, are printed by the
// apply of bigLogTF: 22,000,000 bytes before terraform prefixes each line with
// the resource's address. (Terraform takes some 35 seconds to relay them, and
// longer for shorter lines.)
const bigLogLines = 22000

// bigLogTF prints lines numbered lines of 1000 bytes through local-exec during
// the apply, after a pause that leaves time to start a follower.
func bigLogTF(lines int) string {
	return fmt.Sprintf(`resource "terraform_data" "noisy" {
  provisioner "local-exec" {
    command = "sleep 3; seq -f 'line %%09.0f %s' 1 %d"
  }
}
`, strings.Repeat("x", 985), lines)
}

// provisionerPrefix starts every line terraform relays from bigLogTF's
// command.
const provisionerPrefix = "terraform_data.noisy (local-exec):"

// checkProvisionerOutput checks that log relays the output of bigLogTF's
// command in full: the numbered lines 1..want, each once and in order.
// Terraform relays a line in pieces, each on a line of its own, when the
// rest of it is slow to come (go-linereader's timeout), so the pieces are
// joined before they are compared.
func checkProvisionerOutput(t *testing.T, what, log string, want int) {
	t.Helper()
	var got strings.Builder
	for _, line := range strings.Split(log, "\n") {
		if rest, ok := strings.CutPrefix(line, provisionerPrefix); ok && !strings.HasPrefix(rest, " Executing: ") {
			got.WriteString(strings.TrimPrefix(rest, " "))
		}
	}
	var expect strings.Builder
	xs := strings.Repeat("x", 985)
	for i := 1; i <= want; i++ {
		fmt.Fprintf(&expect, "line %09d %s", i, xs)
	}
	// terraform splits a slow line in two and the pieces' separator is
	// ambiguous, so spaces are not compared: every other byte is, in order.
	g, e := strings.ReplaceAll(got.String(), " ", ""), strings.ReplaceAll(expect.String(), " ", "")
	if g == e {
		return
	}
	i := 0
	for i < len(g) && i < len(e) && g[i] == e[i] {
		i++
	}
	t.Errorf("%s: the command's output differs from byte %d of %d (%d relayed): want %q, got %q",
		what, i, len(e), len(g), abbreviate(e[max(0, i-40):min(len(e), i+200)]), abbreviate(g[max(0, i-40):min(len(g), i+200)]))
}

var xRuns = regexp.MustCompile(`x{20,}`)

// abbreviate shortens runs of x.
func abbreviate(s string) string {
	return xRuns.ReplaceAllStringFunc(s, func(x string) string { return fmt.Sprintf("x{%d}", len(x)) })
}

// TestLargeLog streams an apply log of more than 20 MiB in full, to a reader
// and to a follower; and on a server with --max-log-bytes and --max-plan-bytes,
// logs and plan texts over the caps end in the truncation marker while the runs
// still succeed.
func TestLargeLog(t *testing.T) {
	t.Run("Full", func(t *testing.T) {
		t.Parallel()
		e := newRunEnv(t)
		e.create(t, runManifest("noisy", inline(map[string]string{"main.tf": bigLogTF(bigLogLines)}, "  approval:\n    mode: Auto\n")))
		e.waitPhase(t, "noisy", 5*time.Minute, v1alpha1.RunPhaseApplying, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		followed := startFollow(t, e.Kubeconfig, raw("noisy", "logs?follow=true&stage=apply"))
		run := e.waitPhase(t, "noisy", 10*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
			t.Fatalf("the noisy run ended %s: %s", run.Status.Phase, run.Status.Message)
		}
		if s := run.Status.Stages; len(s) != 2 || s[1].Name != v1alpha1.StageApply || s[1].StartTime == nil {
			t.Fatalf("stages: %+v", s)
		}

		log := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("noisy", "logs?stage=apply"))
		t.Logf("apply log: %d bytes", len(log))
		if len(log) < 22_000_000 {
			t.Errorf("the apply log has %d bytes, want at least 22,000,000", len(log))
		}
		if !strings.Contains(log, "Apply complete! Resources: 1 added") {
			t.Errorf("the apply log lacks `Apply complete!`; its end:\n%s", tail(log, 1000))
		}
		if strings.Contains(log, "[terrarun:") {
			t.Errorf("the apply log of a default server holds a terrarun marker: %s", firstLineWith(log, "[terrarun:"))
		}
		checkProvisionerOutput(t, "apply log", log, bigLogLines)

		f := waitFollow(t, followed)
		t.Logf("followed apply log: %d bytes", len(f))
		if strings.TrimRight(f, "\n") != strings.TrimRight(log, "\n") {
			t.Errorf("the follower received %d bytes, the log has %d", len(f), len(log))
		}
		if !strings.Contains(f, "Apply complete! Resources: 1 added") {
			t.Errorf("the followed apply log lacks `Apply complete!`; its end:\n%s", tail(f, 1000))
		}
		checkProvisionerOutput(t, "followed apply log", f, bigLogLines)
	})

	// 20,000 short lines, each relayed by terraform on its own, are served
	// in full and stored in a small fraction of 20,000 etcd transactions:
	// the etcd revision (the resourceVersion of a list, objects and
	// artifacts sharing the standalone etcd) counts every one of the run's.
	t.Run("ShortLines", func(t *testing.T) {
		t.Parallel()
		e := newRunEnv(t)
		const lines = 20000
		revision := func() int64 {
			list, err := e.client.TerrarunV1alpha1().TerraformRuns("default").List(ctxT(t), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rv, err := strconv.ParseInt(list.ResourceVersion, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return rv
		}
		before := revision()
		e.create(t, runManifest("lines", inline(map[string]string{"main.tf": fmt.Sprintf(`resource "terraform_data" "lines" {
  provisioner "local-exec" {
    command = "seq -f 'short line %%05.0f' 1 %d"
  }
}
`, lines)}, "  approval:\n    mode: Auto\n")))
		run := e.waitPhase(t, "lines", 5*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
			t.Fatalf("the run ended %s: %s", run.Status.Phase, run.Status.Message)
		}
		txns := revision() - before
		log := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("lines", "logs?stage=apply"))
		got := strings.Count(log, "(local-exec): short line ")
		t.Logf("%d lines relayed; the whole run cost %d etcd transactions", got, txns)
		if got != lines || !strings.Contains(log, fmt.Sprintf("short line %05d\n", lines)) {
			t.Errorf("the apply log relays %d of the %d lines; its end:\n%s", got, lines, tail(log, 500))
		}
		if txns > lines/20 {
			t.Errorf("the run cost %d etcd transactions for %d log lines, want at most %d", txns, lines, lines/20)
		}
	})

	t.Run("Capped", func(t *testing.T) {
		t.Parallel()
		const maxLog, maxPlan = 4 << 20, 64 << 10
		e := newRunEnv(t, "--max-log-bytes", strconv.Itoa(maxLog), "--max-plan-bytes", strconv.Itoa(maxPlan))
		// 6 MB of output: past the cap of 4 MiB.
		e.create(t, runManifest("noisy", inline(map[string]string{"main.tf": bigLogTF(6000)}, "  approval:\n    mode: Auto\n")))
		// 300 resources with 1000-character inputs: a plan text of some 330 KB.
		e.create(t, runManifest("wide", inline(map[string]string{"main.tf": `locals {
  long = join("", [for i in range(100) : "abcdefghij"])
}

resource "terraform_data" "w" {
  count = 300
  input = "${count.index}-${local.long}"
}
`}, "  operation: Plan\n")))

		logMarker := fmt.Sprintf(artifacts.TruncationMarker, maxLog)
		run := e.waitPhase(t, "noisy", 10*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
			t.Errorf("the noisy run with a capped log ended %s: %s", run.Status.Phase, run.Status.Message)
		}
		log := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("noisy", "logs?stage=apply"))
		t.Logf("capped apply log: %d bytes", len(log))
		if len(log) > maxLog+len(logMarker) {
			t.Errorf("the capped apply log has %d bytes, more than %d plus the marker", len(log), maxLog)
		}
		if len(log) < maxLog {
			t.Errorf("the capped apply log has %d bytes, less than the cap of %d", len(log), maxLog)
		}
		if !strings.HasSuffix(log, logMarker) {
			t.Errorf("the capped apply log does not end with the truncation marker %q; its end:\n%s", logMarker, tail(log, 500))
		}
		if strings.Contains(log, "Apply complete!") {
			t.Errorf("the capped apply log holds the end of the apply, past the cap")
		}
		if !strings.Contains(log, "line 000000001 ") {
			t.Errorf("the capped apply log lacks its beginning:\n%.2000s", log)
		}
		planLog := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("noisy", "logs?stage=plan"))
		if strings.Contains(planLog, "[terrarun: truncated") || !strings.Contains(planLog, "1 to add") {
			t.Errorf("the plan log, under the cap, is not intact:\n%s", tail(planLog, 2000))
		}

		planMarker := fmt.Sprintf(artifacts.TruncationMarker, maxPlan)
		wide := e.waitPhase(t, "wide", 10*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
		if wide.Status.Phase != v1alpha1.RunPhaseSucceeded {
			t.Errorf("the wide plan with a capped plan text ended %s: %s", wide.Status.Phase, wide.Status.Message)
		}
		if p := wide.Status.Plan; p == nil || p.Add != 300 {
			t.Errorf("status.plan of the wide plan = %+v, want 300 to add", p)
		}
		plan := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("wide", "plan"))
		t.Logf("capped plan text: %d bytes", len(plan))
		if len(plan) > maxPlan+len(planMarker) || !strings.HasSuffix(plan, planMarker) {
			t.Errorf("the capped plan text has %d bytes (cap %d) and ends:\n%s", len(plan), maxPlan, tail(plan, 500))
		}
		if !strings.Contains(plan, "terraform_data.w[0]") {
			t.Errorf("the capped plan text lacks its beginning:\n%.2000s", plan)
		}
		// The redacted plan JSON has the same cap; truncated JSON is not
		// served as JSON, but refused with a reason.
		out, err := kubectl(t, e.Kubeconfig, "get", "--raw", raw("wide", "plan?format=json"))
		if err == nil || !strings.Contains(out, "exceeded the server's --max-plan-bytes") {
			t.Errorf("the capped plan JSON: err=%v, want a refusal naming --max-plan-bytes; got %d bytes ending:\n%s", err, len(out), tail(out, 500))
		}
	})
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// firstLineWith returns the first line of s that contains sub.
func firstLineWith(s, sub string) string {
	i := strings.Index(s, sub)
	if i < 0 {
		return ""
	}
	start := strings.LastIndexByte(s[:i], '\n') + 1
	end := strings.IndexByte(s[i:], '\n')
	if end < 0 {
		return s[start:]
	}
	return s[start : i+end]
}

// TestLargeOutput: a run whose output is 1.6 MB succeeds; status says the
// value is too large for it, and the outputs subresource serves it whole.
func TestLargeOutput(t *testing.T) {
	e := newRunEnv(t)
	e.create(t, runManifest("bigout", inline(map[string]string{"main.tf": `output "big" {
  value = format("%01600000d", 7)
}

output "small" {
  value = "fits"
}
`}, "  approval:\n    mode: Auto\n")))
	run := e.waitPhase(t, "bigout", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Fatalf("the run ended %s: %s", run.Status.Phase, run.Status.Message)
	}
	got := map[string]v1alpha1.OutputStatus{}
	for _, o := range run.Status.Outputs {
		got[o.Name] = o
	}
	if b := got["big"]; b.Value != nil || b.ValueOmitted != v1alpha1.OutputTooLarge {
		t.Errorf("status.outputs big = %.100v, want no value, TooLarge", b)
	}
	if s := got["small"]; outputValue(s) != `"fits"` {
		t.Errorf("status.outputs small = %+v", s)
	}
	outputs := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("bigout", "outputs"))
	if !strings.Contains(outputs, strings.Repeat("0", 1599999)+"7") {
		t.Errorf("the outputs subresource does not serve the 1.6 MB value: %d bytes", len(outputs))
	}
}
