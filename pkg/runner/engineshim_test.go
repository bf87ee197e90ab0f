package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/engineversion"
)

// countingEngine returns an engine that writes each command line it runs to
// a file, then runs the real engine, and that file.
func countingEngine(t *testing.T, real string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	bin := filepath.Join(dir, filepath.Base(real))
	script := fmt.Sprintf("#!/bin/sh\necho \"$*\" >> %s\nexec %s \"$@\"\n", shellQuote(calls), shellQuote(real))
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, calls
}

// versionCalls counts the engine's `version` commands in calls, and empties it.
func versionCalls(t *testing.T, calls string) int {
	t.Helper()
	data, err := os.ReadFile(calls)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.WriteFile(calls, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "version") {
			n++
		}
	}
	return n
}

// TestEngineVersionOnRecord: with the engine's version on record, no stage
// asks the engine for it; a record that no longer describes the binary, or
// that holds no version, is not taken.
func TestEngineVersionOnRecord(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]string{"main.tf": `resource "terraform_data" "x" {
  input = "v"
}`})
	bin, calls := countingEngine(t, h.engine)
	h.engine = bin
	rec, err := engineversion.Ask(context.Background(), bin)
	if err != nil {
		t.Fatal(err)
	}
	if n := versionCalls(t, calls); n != 1 {
		t.Fatalf("recording asked the engine %d times", n)
	}
	ctx := context.Background()

	// A plan that goes on to apply, a plan, and its apply in a stage of its
	// own: none asks.
	carried := h.spec(v1alpha1.StagePlan, 1)
	carried.EngineVersion, carried.ApplyAfterPlan = &rec, true
	if err := h.run(ctx, carried); err != nil {
		t.Fatalf("plan and apply: %v\n%s", err, h.srv.allLogs())
	}
	// Once the version is known, the commands start the engine itself.
	if target, err := os.Readlink(filepath.Join(carried.WorkDir, ".terrarun", "engine", filepath.Base(bin))); err != nil || target != bin {
		t.Errorf("the engine shim after the stage: %q, %v; want a link to %s", target, err, bin)
	}
	plan := h.spec(v1alpha1.StagePlan, 2)
	plan.EngineVersion = &rec
	if err := h.run(ctx, plan); err != nil {
		t.Fatalf("plan: %v\n%s", err, h.srv.allLogs())
	}
	apply := h.applySpec(2)
	apply.EngineVersion = &rec
	if err := h.run(ctx, apply); err != nil {
		t.Fatalf("apply: %v\n%s", err, h.srv.allLogs())
	}
	if n := versionCalls(t, calls); n != 0 {
		t.Errorf("with the version on record, the stages asked the engine %d times", n)
	}
	// (The carried apply has its plan's engine.)
	for _, log := range []string{h.srv.log(v1alpha1.StagePlan, 1), h.srv.log(v1alpha1.StagePlan, 2), h.srv.log(v1alpha1.StageApply, 2)} {
		if !strings.Contains(log, rec.Version+" (version on record)") {
			t.Errorf("the log does not say the version is on record:\n%s", log)
		}
	}

	// The record installed with the engine (as in the executor image).
	js, _ := json.Marshal(map[string]engineversion.Record{filepath.Base(bin): rec})
	if err := os.WriteFile(filepath.Join(filepath.Dir(bin), engineversion.InstalledFile), js, 0o644); err != nil {
		t.Fatal(err)
	}
	installed := h.spec(v1alpha1.StagePlan, 3)
	if err := h.run(ctx, installed); err != nil {
		t.Fatalf("plan: %v\n%s", err, h.srv.allLogs())
	}
	if n := versionCalls(t, calls); n != 0 || !strings.Contains(h.srv.log(v1alpha1.StagePlan, 3), "(version on record)") {
		t.Errorf("with the version installed with the engine, the stage asked it %d times:\n%s", n, h.srv.log(v1alpha1.StagePlan, 3))
	}

	// Records that must not be taken: the stage asks.
	stale := rec
	stale.Size++
	bad := rec
	bad.Version = "1.0.0'; exit 1; '"
	for i, r := range []*engineversion.Record{&stale, &bad} {
		plan := h.spec(v1alpha1.StagePlan, int32(4+i))
		plan.EngineVersion = r
		if err := h.run(ctx, plan); err != nil {
			t.Fatalf("plan with record %+v: %v\n%s", *r, err, h.srv.allLogs())
		}
		if n := versionCalls(t, calls); n != 1 {
			t.Errorf("with record %+v, the stage asked the engine %d times, want 1", *r, n)
		}
		if log := h.srv.log(v1alpha1.StagePlan, int32(4+i)); strings.Contains(log, "on record") {
			t.Errorf("with record %+v, the log says the version is on record:\n%s", *r, log)
		}
	}
}
