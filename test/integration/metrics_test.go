package integration

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// TestMetrics: /metrics has what a run operator watches: runs by phase and
// namespace, plans waiting for approval and their age, stage durations,
// executor starts, queue wait and log bytes; and only the admin reads it.
func TestMetrics(t *testing.T) {
	e := newRunEnv(t)
	viewer := e.mint(t, "vic", "terrarun:viewers")
	small := map[string]string{"main.tf": `resource "terraform_data" "x" {}`}
	e.create(t, runManifest("auto", inline(small, "  approval:\n    mode: Auto\n")))
	e.create(t, runManifest("manual", inline(small, "")))
	e.waitPhase(t, "auto", 3*time.Minute, v1alpha1.RunPhaseSucceeded)
	e.waitPhase(t, "manual", 3*time.Minute, v1alpha1.RunPhaseAwaitingApproval)

	want := map[string]*regexp.Regexp{
		"runs by phase":        regexp.MustCompile(`(?m)^terrarun_runs\{namespace="default",phase="Succeeded"\} 1$`),
		"approvals waiting":    regexp.MustCompile(`(?m)^terrarun_approvals_waiting\{namespace="default"\} 1$`),
		"oldest approval":      regexp.MustCompile(`(?m)^terrarun_approval_oldest_wait_seconds\{namespace="default"\} [0-9.e+-]+$`),
		"stage durations":      regexp.MustCompile(`(?m)^terrarun_stage_duration_seconds_count\{reason="Completed",stage="apply"\} 1$`),
		"executor starts":      regexp.MustCompile(`(?m)^terrarun_executor_starts_total\{result="ok",stage="plan"\} 2$`),
		"queue wait":           regexp.MustCompile(`(?m)^terrarun_queue_wait_seconds_count 2$`),
		"log bytes, non-zero":  regexp.MustCompile(`(?m)^terrarun_log_bytes_total\{namespace="default"\} [1-9][0-9.e+]*$`),
		"the server's own too": regexp.MustCompile(`(?m)^apiserver_request_total\{`),
	}
	var out string
	err := harness.Poll(ctxT(t), 200*time.Millisecond, 30*time.Second, "the metrics", func(context.Context) bool {
		out = mustKubectl(t, e.Kubeconfig, "get", "--raw", "/metrics")
		for _, re := range want {
			if !re.MatchString(out) {
				return false
			}
		}
		return true
	})
	if err != nil {
		for what, re := range want {
			if !re.MatchString(out) {
				t.Errorf("/metrics lacks %s (%s); terrarun lines:\n%s", what, re, grepLines(out, "terrarun_"))
			}
		}
	}
	if age := regexp.MustCompile(`(?m)^terrarun_approval_oldest_wait_seconds\{namespace="default"\} (\S+)$`).FindStringSubmatch(out); age != nil {
		if s, err := strconv.ParseFloat(age[1], 64); err != nil || s < 0 || s > 300 {
			t.Errorf("the oldest approval has waited %s seconds", age[1])
		}
	}
	if out, err := kubectl(t, viewer, "get", "--raw", "/metrics"); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("a viewer read /metrics: %v\n%.200s", err, out)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestGCTarget: the server collects garbage at GOGC 50 unless its
// environment sets GOGC (docs/benchmarks.md, "Memory per stored run"), as
// the Go runtime's own metric shows.
func TestGCTarget(t *testing.T) {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOGC=") {
			env = append(env, kv)
		}
	}
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"GOGC unset", env, "50"},
		{"GOGC=80", append(slices.Clone(env), "GOGC=80"), "80"},
	} {
		s, err := harness.StartServer(harness.ServerOptions{Binary: apiserverBinary, DataDir: t.TempDir(), Env: tc.env})
		if err != nil {
			t.Fatal(err)
		}
		out := mustKubectl(t, s.Kubeconfig, "get", "--raw", "/metrics")
		if err := s.Stop(90 * time.Second); err != nil {
			t.Error(err)
		}
		m := regexp.MustCompile(`(?m)^go_gc_gogc_percent (\S+)$`).FindStringSubmatch(out)
		if m == nil || m[1] != tc.want {
			t.Errorf("%s: go_gc_gogc_percent %v, want %s", tc.name, m, tc.want)
		}
	}
}
