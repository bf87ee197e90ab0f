package bench

// Benchmarks of the run machinery: the controller, the local executor,
// terrarun-executor and the real engine, each against a standalone server of
// its own (see runs_harness_test.go). Like the API benchmarks they take fixed
// sample counts, so `-benchtime 1x` is meaningful; every one is bounded in
// time, and logs the load average before and after (the machine is shared).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runrules"
	"github.com/terrarun/terrarun/test/internal/harness"
)

const (
	// overheadIterations is the number of measured runs of each arm of
	// BenchmarkOrchestrationOverhead (after one unmeasured warm-up each):
	// the interleaved pairs its ratios are the medians of.
	overheadIterations = 20
	// tickLines is the number of timestamped log lines of
	// BenchmarkLogFollowLatency, one every tickInterval.
	tickLines    = 500
	tickInterval = 20 * time.Millisecond
	// floodLines lines of floodLineLen bytes (newline included) make the
	// 50 MB log of BenchmarkLogThroughput.
	floodLines   = 50000
	floodLineLen = 1000
	// defaultWorkers is the server's default --controller-workers.
	defaultWorkers = 4
	// concurrentDeadline bounds each BenchmarkConcurrentRuns variant.
	concurrentDeadline = 15 * time.Minute
	// minMemAvailableMiB: BenchmarkConcurrentRuns stops the server when the
	// machine's MemAvailable falls below this, rather than risk the OOM killer
	// on a shared machine.
	minMemAvailableMiB = 2048
)

// trivialTF is the configuration of BenchmarkOrchestrationOverhead and
// BenchmarkConcurrentRuns: one built-in terraform_data, no variables, no
// provider to install.
const trivialTF = `resource "terraform_data" "bench" {
  input = "terrarun"
}
`

// boundedCtx returns a context that ends after d or when the benchmark ends.
func boundedCtx(b *testing.B, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	b.Cleanup(cancel)
	return ctx
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return harness.Percentile(s, 0.5)
}

// ---------------------------------------------------------------------------
// Orchestration overhead

// directStep is one engine command of the direct arm, as terrarun-executor
// runs it through terraform-exec (same flags); with with, another command
// that runs at the same time, as the executor's runner runs show and
// show -json of one plan file at once.
type directStep struct {
	name string
	args []string
	with *directStep
}

// directRun runs, in a fresh temporary directory that holds config (file
// names and contents) with the local backend, and in the executor's
// environment (PATH, a private HOME and TMPDIR, CHECKPOINT_DISABLE=1) and
// extraEnv, the commands the executor runs for a run, as a careful script
// would: init, plan -out, show and show -json at once, apply of the plan
// file, output -json. It returns the wall time of all of it and of each
// step.
func directRun(ctx context.Context, engine string, config map[string]string, extraEnv []string) (time.Duration, map[string]time.Duration, error) {
	start := time.Now()
	dir, err := os.MkdirTemp("", "terrarun-bench-direct-")
	if err != nil {
		return 0, nil, err
	}
	defer os.RemoveAll(dir)
	cfg, state, home, tmp := filepath.Join(dir, "config"), filepath.Join(dir, "state"), filepath.Join(dir, "home"), filepath.Join(dir, "tmp")
	for _, d := range []string{cfg, filepath.Join(state, "default"), home, tmp} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return 0, nil, err
		}
	}
	for name, content := range config {
		if err := os.WriteFile(filepath.Join(cfg, name), []byte(content), 0o600); err != nil {
			return 0, nil, err
		}
	}
	// As the executor: the backend is chosen by an override file.
	if err := os.WriteFile(filepath.Join(cfg, "zz_terrarun_backend_override.tf"), []byte("terraform {\n  backend \"local\" {}\n}\n"), 0o600); err != nil {
		return 0, nil, err
	}
	plan := filepath.Join(dir, "plan.tfplan")
	steps := []directStep{
		{"init", []string{"init", "-no-color", "-input=false", "-backend=true", "-get=true", "-upgrade=false",
			"-backend-config=path=" + filepath.Join(state, "default", "terraform.tfstate"), "-backend-config=workspace_dir=" + state}, nil},
		{"plan", []string{"plan", "-no-color", "-input=false", "-detailed-exitcode", "-lock-timeout=0s", "-out=" + plan, "-lock=true", "-parallelism=10", "-refresh=true"}, nil},
		{"show", []string{"show", "-no-color", plan}, &directStep{"show-json", []string{"show", "-json", "-no-color", plan}, nil}},
		{"apply", []string{"apply", "-no-color", "-auto-approve", "-input=false", "-lock-timeout=0s", "-lock=true", "-parallelism=10", "-refresh=true", plan}, nil},
		{"output", []string{"output", "-no-color", "-json"}, nil},
	}
	env := append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + tmp, "CHECKPOINT_DISABLE=1"}, extraEnv...)
	times := map[string]time.Duration{}
	run := func(s *directStep) error {
		cmd := exec.CommandContext(ctx, engine, s.args...)
		cmd.Dir, cmd.Env = cfg, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !(s.name == "plan" && errors.As(err, &ee) && ee.ExitCode() == 2) { // 2: the plan has changes
			return fmt.Errorf("%s %s: %v\n%s", engine, s.name, err, out.String())
		}
		return nil
	}
	for _, s := range steps {
		t0 := time.Now()
		with := make(chan error, 1)
		if s.with != nil {
			go func() { with <- run(s.with) }()
		} else {
			with <- nil
		}
		err := run(&s)
		if werr := <-with; err == nil {
			err = werr
		}
		if err != nil {
			return 0, nil, err
		}
		name := s.name
		if s.with != nil {
			name += "+" + s.with.name
		}
		times[name] = time.Since(t0)
	}
	return time.Since(start), times, nil
}

// apiRun creates an Auto run of config and waits until it has Succeeded. It
// returns the wall time from just before the create to the watch event that
// shows Succeeded, and the time each phase was first seen. afterCreate, if
// set, is called once the run exists (to start log followers: a follow of a
// run that does not exist yet is a 404).
func apiRun(ctx context.Context, rs *runServer, namespace, name, workspace string, config map[string]string, afterCreate func()) (time.Duration, phaseTimes, time.Time, error) {
	start := time.Now()
	created, err := rs.runs(namespace).Create(ctx, rs.autoRun(name, workspace, config), metav1.CreateOptions{})
	if err != nil {
		return 0, nil, start, err
	}
	if afterCreate != nil {
		afterCreate()
	}
	run, seen, err := rs.watchRun(ctx, namespace, name, created.ResourceVersion)
	d := time.Since(start)
	if err != nil {
		return 0, nil, start, err
	}
	if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
		return 0, nil, start, fmt.Errorf("run %s/%s ended %s: %s", namespace, name, run.Status.Phase, run.Status.Message)
	}
	return d, seen, start, nil
}

// timedLine is a log line and when the follower read it.
type timedLine struct {
	at   time.Time
	line string
}

// collectLines follows a log and returns, once it ends, its lines with the
// time each was read.
func collectLines(ctx context.Context, rs *runServer, namespace, name, query string) <-chan []timedLine {
	ch := make(chan []timedLine, 1)
	go func() {
		var lines []timedLine
		defer func() { ch <- lines }()
		body, err := rs.follow(ctx, namespace, name, query)
		if err != nil {
			lines = append(lines, timedLine{time.Now(), "follow failed: " + err.Error()})
			return
		}
		defer body.Close()
		br := bufio.NewReader(body)
		for {
			l, err := br.ReadString('\n')
			if l != "" {
				lines = append(lines, timedLine{time.Now(), strings.TrimRight(l, "\n")})
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// providerTF is the configuration of BenchmarkOrchestrationOverhead's
// provider arms: one resource of the test provider (a real plugin, installed
// from a filesystem mirror), which keeps a file in the working directory.
const providerTF = harness.TestProviderRequirement + `
resource "testing_file" "bench" {
  path    = "${abspath(path.root)}/bench.txt"
  content = "terrarun"
}
`

// BenchmarkOrchestrationOverhead compares the wall time of a run through the
// API (create → Succeeded, approval.mode Auto) with the same engine commands
// run directly in a temporary directory. Six arms alternate, after one
// unmeasured warm-up each, overheadIterations times (or b.N when larger),
// in an order rotated each iteration:
//
//   - direct: init, plan -out, show and show -json at once (as the executor
//     runs them), apply <plan>, output -json, of one built-in terraform_data;
//   - api: a run of it in the default workspace of a namespace of its own
//     (the executor runs the direct arm's commands, plan and apply in one
//     process, the engine's version on record);
//   - api-ws: a run in a workspace of its own, as most runs are (the
//     executor also selects or creates the workspace);
//   - api-objects: the api arm on a second server that keeps its artifacts
//     in a real S3-compatible server (versitygw, $TERRARUN_OBJECTSTORE,
//     which make bench sets; without it the arm is skipped);
//   - direct-provider and api-provider: the same with one resource of the
//     test provider instead, its dependency lock file beside it, installed
//     from a filesystem mirror through a plugin cache (the direct arm's
//     own, and the server's, which is on by default).
//
// Reported: the medians in ms; overhead-ratio, the median over the
// iterations of api / direct measured in the same iteration (target ≤
// 1.10), likewise overhead-ratio-ws (api-ws / direct) and
// overhead-ratio-provider (api-provider / direct-provider, target ≤ 1.05),
// with overhead-ratio-objects (api-objects / direct) and objects/etcd
// (api-objects / api), and etcd-txns-per-run of the api and api-objects
// arms, broken down in the log by the keys each transaction writes;
// with pairs, the number of iterations they come from: a pair measured
// side by side shares the machine's load, which a ratio of medians taken
// minutes apart does not. Also the medians of the phases of the api arm as a
// watch saw them, and, in the log, the median of each direct step and the
// timeline of one more api run from its log lines.
func BenchmarkOrchestrationOverhead(b *testing.B) {
	provider, err := harness.InstallTestProvider(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	lock, err := provider.LockFile()
	if err != nil {
		b.Fatal(err)
	}
	withProvider := map[string]string{"main.tf": providerTF, ".terraform.lock.hcl": lock}
	// The direct arm's plugin cache, kept across its runs as a user's is.
	directEnv := append(provider.Env(), "TF_PLUGIN_CACHE_DIR="+b.TempDir())
	args := []string{"--local-executor-mount", provider.Dir, "--local-executor-env", provider.Env()[0]}
	rs := startRunServer(b, args...)
	defer rs.close(b)
	// A second server keeps its artifacts in a real object store
	// (versitygw, $TERRARUN_OBJECTSTORE, which make bench sets), for the
	// api-objects arm beside the others.
	var withObjects *runServer
	if os.Getenv("TERRARUN_OBJECTSTORE") != "" && !benchArtifactStore() {
		withObjects = startRunServer(b, append(args, startObjectStore(b).Args...)...)
		defer withObjects.close(b)
	}
	ctx := boundedCtx(b, 20*time.Minute)
	logLoad(b, "at the start")
	n := samples(overheadIterations, b)

	var direct, api, apiWS, directProvider, apiProvider, apiObjects []time.Duration
	var pending, planning, applying []time.Duration
	var txns, txnsObjects transactions
	steps := map[string][]time.Duration{}
	seq := 0
	arms := []struct {
		name string
		run  func(measured bool) error
	}{
		{"direct", func(measured bool) error {
			d, st, err := directRun(ctx, rs.Engine, inline(trivialTF), nil)
			if err == nil && measured {
				direct = append(direct, d)
				for k, v := range st {
					steps[k] = append(steps[k], v)
				}
			}
			return err
		}},
		{"api", func(measured bool) error {
			seq++
			d, seen, start, err := countedRun(ctx, rs, fmt.Sprintf("overhead-%d", seq), &txns, measured)
			if err == nil && measured {
				api = append(api, d)
				pl, ap, ok := seen[v1alpha1.RunPhasePlanning], seen[v1alpha1.RunPhaseApplying], seen[v1alpha1.RunPhaseSucceeded]
				if !pl.IsZero() && !ap.IsZero() {
					pending = append(pending, pl.Sub(start))
					planning = append(planning, ap.Sub(pl))
					applying = append(applying, ok.Sub(ap))
				}
			}
			return err
		}},
		{"api-objects", func(measured bool) error {
			if withObjects == nil {
				return nil
			}
			seq++
			d, _, _, err := countedRun(ctx, withObjects, fmt.Sprintf("overhead-%d", seq), &txnsObjects, measured)
			if err == nil && measured {
				apiObjects = append(apiObjects, d)
			}
			return err
		}},
		{"api-ws", func(measured bool) error {
			seq++
			d, _, _, err := apiRun(ctx, rs, "overhead-ws", fmt.Sprintf("run-%d", seq), fmt.Sprintf("ws-%d", seq), inline(trivialTF), nil)
			if err == nil && measured {
				apiWS = append(apiWS, d)
			}
			return err
		}},
		{"direct-provider", func(measured bool) error {
			d, _, err := directRun(ctx, rs.Engine, withProvider, directEnv)
			if err == nil && measured {
				directProvider = append(directProvider, d)
			}
			return err
		}},
		{"api-provider", func(measured bool) error {
			seq++
			d, _, _, err := apiRun(ctx, rs, fmt.Sprintf("overhead-%d", seq), "run", "", withProvider, nil)
			if err == nil && measured {
				apiProvider = append(apiProvider, d)
			}
			return err
		}},
	}
	for _, a := range arms {
		if err := a.run(false); err != nil {
			b.Fatalf("warm-up %s: %v", a.name, err)
		}
	}
	b.ResetTimer()
	for i := range n {
		// Rotate the order, so that no arm always follows the same one.
		for j := range arms {
			a := arms[(i+j)%len(arms)]
			if err := a.run(true); err != nil {
				b.Fatalf("iteration %d, %s: %v", i, a.name, err)
			}
		}
	}
	b.StopTimer()

	dm, am, wm := median(direct), median(api), median(apiWS)
	b.ReportMetric(ms(dm), "direct-median-ms")
	b.ReportMetric(ms(am), "api-median-ms")
	b.ReportMetric(ms(wm), "api-ws-median-ms")
	b.ReportMetric(pairRatio(api, direct), "overhead-ratio")
	b.ReportMetric(pairRatio(apiWS, direct), "overhead-ratio-ws")
	dpm, apm := median(directProvider), median(apiProvider)
	b.ReportMetric(ms(dpm), "direct-provider-median-ms")
	b.ReportMetric(ms(apm), "api-provider-median-ms")
	b.ReportMetric(pairRatio(apiProvider, directProvider), "overhead-ratio-provider")
	b.ReportMetric(float64(len(direct)), "pairs")
	if len(pending) > 0 {
		b.ReportMetric(ms(median(pending)), "api-to-planning-ms")
		b.ReportMetric(ms(median(planning)), "api-planning-ms")
		b.ReportMetric(ms(median(applying)), "api-applying-ms")
	}
	reportMean(b, api)
	if len(txns.counts) > 0 {
		b.ReportMetric(txns.median(), "etcd-txns-per-run")
		detail(b, "etcd transactions per api run: %v", txns.counts)
		detail(b, "etcd transactions per api run, by the keys they write: %s", txns.perRun())
	}
	if len(apiObjects) > 0 {
		b.ReportMetric(ms(median(apiObjects)), "api-objects-median-ms")
		b.ReportMetric(pairRatio(apiObjects, direct), "overhead-ratio-objects")
		b.ReportMetric(pairRatio(apiObjects, api), "objects/etcd")
		b.ReportMetric(txnsObjects.median(), "etcd-txns-per-run-objects")
		detail(b, "api-objects (ms): %v", msList(apiObjects))
		detail(b, "etcd transactions per api-objects run: %v", txnsObjects.counts)
		detail(b, "etcd transactions per api-objects run, by the keys they write: %s", txnsObjects.perRun())
	}
	detail(b, "direct (ms): %v", msList(direct))
	detail(b, "api    (ms): %v", msList(api))
	detail(b, "api-ws (ms): %v", msList(apiWS))
	detail(b, "direct-provider (ms): %v", msList(directProvider))
	detail(b, "api-provider    (ms): %v", msList(apiProvider))
	names := make([]string, 0, len(steps))
	for k := range steps {
		names = append(names, k)
	}
	sort.Strings(names)
	var sb strings.Builder
	for _, k := range names {
		fmt.Fprintf(&sb, " %s=%.0f", k, ms(median(steps[k])))
	}
	detail(b, "direct, median per command (ms):%s", sb.String())

	// One more api run, unmeasured, whose log lines are timestamped as they
	// arrive: where the time of a run goes.
	var plan, apply <-chan []timedLine
	d, seen, start, err := apiRun(ctx, rs, "overhead-timeline", "run", "", inline(trivialTF), func() {
		plan = collectLines(ctx, rs, "overhead-timeline", "run", "stage=plan")
		apply = collectLines(ctx, rs, "overhead-timeline", "run", "stage=apply")
	})
	if err != nil {
		b.Fatalf("timeline run: %v", err)
	}
	var events []timedLine
	for _, l := range append(<-plan, <-apply...) {
		if strings.HasPrefix(l.line, "terrarun:") {
			events = append(events, l)
		}
	}
	for p, at := range seen {
		events = append(events, timedLine{at, "(watch) phase " + string(p)})
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].at.Before(events[j].at) })
	sb.Reset()
	for _, e := range events {
		fmt.Fprintf(&sb, "\n  +%5.0f ms  %s", ms(e.at.Sub(start)), e.line)
	}
	detail(b, "timeline of one api run (%.0f ms; log lines as a follower received them):%s", ms(d), sb.String())
	logLoad(b, "at the end")
}

func msList(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmt.Sprintf("%.0f", ms(d))
	}
	return out
}

// ---------------------------------------------------------------------------
// Log follow latency

// tickTF prints n lines "tick <unix ns>" from its apply, one every ~20ms.
func tickTF(n int) string {
	return fmt.Sprintf(`resource "terraform_data" "ticker" {
  provisioner "local-exec" {
    command = "i=0; while [ $i -lt %d ]; do echo \"tick $(date +%%s%%N)\"; i=$((i+1)); sleep 0.02; done"
  }
}
`, n)
}

// slowTF keeps its apply stage running (for the terrarun-only paths, which
// write to the log of a running stage with its token).
const slowTF = `resource "terraform_data" "slow" {
  provisioner "local-exec" {
    command = "sleep 900"
  }
}
`

// tickLatency returns the latency of a line that carries "<marker><unix ns>"
// and was read at at.
func tickLatency(line, marker string, at time.Time) (time.Duration, bool) {
	i := strings.Index(line, marker)
	if i < 0 {
		return 0, false
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(line[i+len(marker):]), 10, 64)
	if err != nil {
		return 0, false
	}
	return at.Sub(time.Unix(0, ns)), true
}

// engineTicks runs the ticker configuration's apply directly and returns
// the delay between each line's timestamp and the moment the engine's stdout
// delivered it: the engine's own buffering, which no follower can beat.
func engineTicks(ctx context.Context, engine string, n int) ([]time.Duration, error) {
	dir, err := os.MkdirTemp("", "terrarun-bench-engine-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(tickTF(n)), 0o600); err != nil {
		return nil, err
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + os.TempDir(), "CHECKPOINT_DISABLE=1"}
	init := exec.CommandContext(ctx, engine, "init", "-no-color", "-input=false")
	init.Dir, init.Env = dir, env
	if out, err := init.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("init: %v\n%s", err, out)
	}
	apply := exec.CommandContext(ctx, engine, "apply", "-no-color", "-input=false", "-auto-approve")
	apply.Dir, apply.Env = dir, env
	stdout, err := apply.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := apply.Start(); err != nil {
		return nil, err
	}
	var lat []time.Duration
	br := bufio.NewReader(stdout)
	for {
		l, err := br.ReadString('\n')
		if d, ok := tickLatency(l, "(local-exec): tick ", time.Now()); ok {
			lat = append(lat, d)
		}
		if err != nil {
			break
		}
	}
	if err := apply.Wait(); err != nil {
		return nil, fmt.Errorf("apply: %v", err)
	}
	return lat, nil
}

// cancelRun cancels a run and waits (boundedly) until it has ended.
func cancelRun(ctx context.Context, b *testing.B, rs *runServer, namespace, name string) {
	if _, err := rs.runs(namespace).Cancel(ctx, name, &v1alpha1.TerraformRunCancel{Comment: "benchmark done"}, metav1.CreateOptions{}); err != nil {
		detail(b, "cancel %s/%s: %v", namespace, name, err)
		return
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, _, err := rs.watchRun(wctx, namespace, name, ""); err != nil {
		detail(b, "run %s/%s did not end within a minute of its cancel: %v", namespace, name, err)
	}
}

// startSlowRun creates a run whose apply sleeps, waits until the sleep runs,
// and returns the run with its apply stage's token.
func startSlowRun(ctx context.Context, rs *runServer, namespace, name string) (*v1alpha1.TerraformRun, string, error) {
	created, err := rs.runs(namespace).Create(ctx, rs.autoRun(name, name, inline(slowTF)), metav1.CreateOptions{})
	if err != nil {
		return nil, "", err
	}
	run, _, err := rs.watchRun(ctx, namespace, name, created.ResourceVersion, v1alpha1.RunPhaseApplying)
	if err != nil {
		return nil, "", err
	}
	if run.Status.Phase != v1alpha1.RunPhaseApplying {
		return nil, "", fmt.Errorf("run %s ended %s: %s", name, run.Status.Phase, run.Status.Message)
	}
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	token, err := harness.StageToken(tctx, rs.DataDir, run, "plan-1", time.Hour) // an Auto run applies in its plan execution
	if err != nil {
		return nil, "", err
	}
	// Wait until the engine runs the sleep, so that its own output (init,
	// "Creating...", "Executing: ...") is not mixed with what the benchmark
	// writes; from then on it prints only "Still creating..." every 10s.
	body, err := rs.follow(tctx, namespace, name, "stage=apply&attempt=1")
	if err != nil {
		return nil, "", err
	}
	defer body.Close()
	br := bufio.NewReader(body)
	for {
		l, err := br.ReadString('\n')
		if strings.Contains(l, "(local-exec): Executing:") {
			return run, token, nil
		}
		if err != nil {
			return nil, "", fmt.Errorf("the apply of %s did not start its sleep: %w", name, err)
		}
	}
}

// BenchmarkLogFollowLatency measures how long a log line takes from its
// writer to a follower (GET .../logs?follow=true as the admin user):
//
//   - e2e: a run whose apply's local-exec prints tickLines lines
//     "tick <date +%s%N>", one every ~20ms; the follower subtracts the
//     embedded time from the time it read the line. This includes the
//     engine's own handling of local-exec output (go-linereader, the UI)
//     and terraform-exec's pipe, then terrarun-executor, the server, etcd
//     and the follower's stream.
//   - engine: the same apply run directly, timed at the engine's stdout: the
//     part of e2e that belongs to the engine.
//   - terrarun: the terrarun-only path: while a run's apply sleeps, the
//     benchmark writes "bench-tick <unix ns>" lines every 20ms to the
//     run's log through a streaming POST with the stage's token (what
//     terrarun-executor does), and a follower reads them.
//
// Target: p99 ≤ 50 ms.
func BenchmarkLogFollowLatency(b *testing.B) {
	rs := startRunServer(b, "--cancel-grace-period", "2s")
	defer rs.close(b)
	ctx := boundedCtx(b, 15*time.Minute)
	logLoad(b, "at the start")
	n := samples(tickLines, b)

	// e2e.
	const ns = "follow"
	var followed <-chan []timedLine
	if _, _, _, err := apiRun(ctx, rs, ns, "ticker", "ticker", inline(tickTF(n)), func() {
		followed = collectLines(ctx, rs, ns, "ticker", "stage=apply")
	}); err != nil {
		b.Fatal(err)
	}
	var e2e []time.Duration
	for _, l := range <-followed {
		if d, ok := tickLatency(l.line, "(local-exec): tick ", l.at); ok {
			e2e = append(e2e, d)
		}
	}
	if len(e2e) != n {
		b.Errorf("e2e: the follower read %d of %d tick lines", len(e2e), n)
	}

	// engine.
	engine, err := engineTicks(ctx, rs.Engine, n)
	if err != nil {
		b.Fatalf("engine-only ticks: %v", err)
	}

	// terrarun.
	run, token, err := startSlowRun(ctx, rs, ns, "slow")
	if err != nil {
		b.Fatal(err)
	}
	fctx, stopFollow := context.WithCancel(ctx)
	defer stopFollow()
	lines := make(chan timedLine, n+16)
	go func() {
		defer close(lines)
		body, err := rs.follow(fctx, ns, run.Name, "stage=apply&attempt=1")
		if err != nil {
			b.Errorf("follow: %v", err)
			return
		}
		defer body.Close()
		br := bufio.NewReader(body)
		for {
			l, err := br.ReadString('\n')
			if strings.HasPrefix(l, "bench-") {
				lines <- timedLine{time.Now(), l}
			}
			if err != nil {
				return
			}
		}
	}()
	stream, err := rs.openLogStream(ctx, ns, run.Name, token, "stage=apply&attempt=1")
	if err != nil {
		b.Fatal(err)
	}
	// A first line, unmeasured, and its arrival: the stream and the follow
	// are both established before the measured lines.
	if _, err := io.WriteString(stream, "bench-hello\n"); err != nil {
		b.Fatal(err)
	}
	select {
	case <-lines:
	case <-time.After(30 * time.Second):
		b.Fatal("the follower did not read the first line within 30s")
	}
	var terrarun []time.Duration
	var collect sync.WaitGroup
	collect.Add(1)
	go func() {
		defer collect.Done()
		timeout := time.After(5 * time.Minute)
		for len(terrarun) < n {
			select {
			case l, ok := <-lines:
				if !ok {
					return
				}
				if d, ok := tickLatency(l.line, "bench-tick ", l.at); ok {
					terrarun = append(terrarun, d)
				}
			case <-timeout:
				return
			}
		}
	}()
	tick := time.NewTicker(tickInterval)
	for range n {
		<-tick.C
		if _, err := fmt.Fprintf(stream, "bench-tick %d\n", time.Now().UnixNano()); err != nil {
			b.Fatalf("writing the log stream: %v", err)
		}
	}
	tick.Stop()
	if err := stream.Close(); err != nil {
		b.Errorf("closing the log stream: %v", err)
	}
	collect.Wait()
	if len(terrarun) != n {
		b.Errorf("terrarun-only: the follower read %d of %d lines", len(terrarun), n)
	}
	stopFollow()
	cancelRun(ctx, b, rs, ns, run.Name)

	for _, m := range []struct {
		prefix string
		lat    []time.Duration
	}{{"e2e-", e2e}, {"engine-", engine}, {"terrarun-", terrarun}} {
		if len(m.lat) == 0 {
			continue
		}
		reportLatency(b, m.prefix, m.lat)
		b.ReportMetric(ms(slices.Max(m.lat)), m.prefix+"max-ms")
	}
	if len(terrarun) > 0 {
		reportMean(b, terrarun)
	}
	detail(b, "lines read: e2e %d, engine %d, terrarun-only %d (of %d each)", len(e2e), len(engine), len(terrarun), n)
	detail(b, "slowest lines (line number: ms): e2e %s; engine %s; terrarun-only %s", slowest(e2e, 6), slowest(engine, 6), slowest(terrarun, 6))
	logLoad(b, "at the end")
}

// slowest lists the k largest latencies with their (1-based) positions, in
// order of position: whether the tail is a warm-up or spread over the run.
func slowest(lat []time.Duration, k int) string {
	idx := make([]int, len(lat))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return lat[idx[a]] > lat[idx[b]] })
	idx = idx[:min(k, len(idx))]
	sort.Ints(idx)
	parts := make([]string, len(idx))
	for i, j := range idx {
		parts[i] = fmt.Sprintf("%d:%.1f", j+1, ms(lat[j]))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// ---------------------------------------------------------------------------
// Log throughput

// floodLine is one line of the flood, newline included.
var floodLine = strings.Repeat("x", floodLineLen-1) + "\n"

// floodTF prints "flood-begin", floodLines lines of floodLine and
// "flood-end" from its apply.
func floodTF() string {
	return fmt.Sprintf(`resource "terraform_data" "flood" {
  provisioner "local-exec" {
    command = "echo flood-begin; yes %s | head -n %d; echo flood-end"
  }
}
`, strings.TrimSuffix(floodLine, "\n"), floodLines)
}

// floodCount is what a reader of a flood saw: when it read the begin and the
// end markers, the bytes it read in between, the flood lines, and the 'x'
// characters of their payload (after the engine's "<address> (local-exec): "
// prefix), which must be floodLines*(floodLineLen-1) whatever the line
// boundaries: the engine may split a long line in two (go-linereader hands
// on a partial line after 100ms), and lines of another writer of the same
// log (the engine's "Still creating..." while the terrarun-only paths write)
// may land between two appends of the stream.
type floodCount struct {
	begin, end time.Time
	lines      int
	bytes      int64
	xs         int64
	markers    []string
}

const floodXs = int64(floodLines) * (floodLineLen - 1)

func (f floodCount) mbps() float64 {
	if f.end.IsZero() || f.begin.IsZero() || !f.end.After(f.begin) {
		return 0
	}
	return float64(f.bytes) / 1e6 / f.end.Sub(f.begin).Seconds()
}

// countFlood reads r until it ends or the end marker, counting the flood.
func countFlood(r io.Reader) floodCount {
	var c floodCount
	br := bufio.NewReaderSize(r, 256<<10)
	prefix := []byte("(local-exec): ")
	for {
		l, err := br.ReadSlice('\n')
		switch {
		case bytes.HasSuffix(l, []byte("flood-begin\n")):
			c.begin = time.Now()
		case bytes.HasSuffix(l, []byte("flood-end\n")):
			c.end = time.Now()
			return c
		case !c.begin.IsZero():
			c.bytes += int64(len(l))
			if bytes.Contains(l, []byte("[terrarun:")) {
				c.markers = append(c.markers, strings.TrimSpace(string(l)))
			}
			body := l
			if i := bytes.Index(l, prefix); i >= 0 {
				body = l[i+len(prefix):]
			}
			c.xs += int64(bytes.Count(body, []byte("x")))
			if bytes.HasSuffix(l, []byte("x\n")) {
				c.lines++
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return c
		}
	}
}

// engineFlood runs the flood configuration's apply directly and counts the
// flood on the engine's stdout: the rate at which the engine itself prints.
func engineFlood(ctx context.Context, engine string) (floodCount, error) {
	dir, err := os.MkdirTemp("", "terrarun-bench-engine-")
	if err != nil {
		return floodCount{}, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(floodTF()), 0o600); err != nil {
		return floodCount{}, err
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + os.TempDir(), "CHECKPOINT_DISABLE=1"}
	init := exec.CommandContext(ctx, engine, "init", "-no-color", "-input=false")
	init.Dir, init.Env = dir, env
	if out, err := init.CombinedOutput(); err != nil {
		return floodCount{}, fmt.Errorf("init: %v\n%s", err, out)
	}
	apply := exec.CommandContext(ctx, engine, "apply", "-no-color", "-input=false", "-auto-approve")
	apply.Dir, apply.Env = dir, env
	stdout, err := apply.StdoutPipe()
	if err != nil {
		return floodCount{}, err
	}
	if err := apply.Start(); err != nil {
		return floodCount{}, err
	}
	c := countFlood(stdout)
	_, _ = io.Copy(io.Discard, stdout)
	if err := apply.Wait(); err != nil {
		return c, fmt.Errorf("apply: %v", err)
	}
	return c, nil
}

// postFlood writes the flood to a running apply stage's log through a
// streaming POST, in writes of writeSize bytes (rounded to whole lines), while
// a follower counts it. It returns what the follower saw, the time from the
// first write to the follower reading the end marker, and the time the POST
// took until the server's answer.
func postFlood(ctx context.Context, rs *runServer, run *v1alpha1.TerraformRun, token string, writeSize int) (floodCount, time.Duration, time.Duration, error) {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	body, err := rs.follow(fctx, run.Namespace, run.Name, "stage=apply&attempt=1")
	if err != nil {
		return floodCount{}, 0, 0, err
	}
	defer body.Close()
	counted := make(chan floodCount, 1)
	go func() { counted <- countFlood(body) }()
	stream, err := rs.openLogStream(ctx, run.Namespace, run.Name, token, "stage=apply&attempt=1")
	if err != nil {
		return floodCount{}, 0, 0, err
	}
	perWrite := max(writeSize/floodLineLen, 1)
	buf := []byte(strings.Repeat(floodLine, perWrite))
	start := time.Now()
	if _, err := io.WriteString(stream, "flood-begin\n"); err != nil {
		return floodCount{}, 0, 0, err
	}
	for left := floodLines; left > 0; left -= perWrite {
		if _, err := stream.Write(buf[:min(left, perWrite)*floodLineLen]); err != nil {
			return floodCount{}, 0, 0, fmt.Errorf("writing the log stream: %w", err)
		}
	}
	if _, err := io.WriteString(stream, "flood-end\n"); err != nil {
		return floodCount{}, 0, 0, err
	}
	if err := stream.Close(); err != nil {
		return floodCount{}, 0, 0, err
	}
	posted := time.Since(start)
	select {
	case c := <-counted:
		return c, c.end.Sub(start), posted, nil
	case <-time.After(5 * time.Minute):
		return floodCount{}, 0, 0, errors.New("the follower did not read the end of the flood within 5 minutes")
	}
}

// BenchmarkLogThroughput measures the rate at which one run's log reaches a
// follower, in MB/s (10^6 bytes per second, counting the bytes the follower
// reads):
//
//   - e2e: a run whose apply's local-exec prints 50,000 lines of 1,000
//     bytes (50 MB, plus the engine's "terraform_data.flood (local-exec): "
//     prefix on each line); from the follower reading "flood-begin" to
//     reading "flood-end".
//   - engine: the same apply run directly, counted at the engine's stdout:
//     how fast the engine itself prints it.
//   - terrarun-64k / terrarun-lines: the terrarun-only path: 50 MB POSTed to
//     a running apply stage's log with its token, in 64 KB writes and in
//     1,000-byte writes (one line per write, as the executor sends
//     terraform's output), timed from the first write to the follower
//     reading the end.
//
// The server's peak RSS (sampled every 100ms) is reported too.
func BenchmarkLogThroughput(b *testing.B) {
	rs := startRunServer(b, "--cancel-grace-period", "2s")
	defer rs.close(b)
	ctx := boundedCtx(b, 20*time.Minute)
	logLoad(b, "at the start")
	mem := startMemSampler(rs.Pid, 100*time.Millisecond, 0, nil)
	const ns = "throughput"

	// e2e.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	counted := make(chan floodCount, 1)
	total, _, _, err := apiRun(ctx, rs, ns, "flood", "flood", inline(floodTF()), func() {
		go func() {
			body, err := rs.follow(fctx, ns, "flood", "stage=apply")
			if err != nil {
				b.Errorf("follow: %v", err)
				counted <- floodCount{}
				return
			}
			defer body.Close()
			counted <- countFlood(body)
		}()
	})
	if err != nil {
		b.Fatal(err)
	}
	e2e := <-counted
	if e2e.xs != floodXs || len(e2e.markers) > 0 {
		b.Errorf("e2e: the follower read %d of %d bytes of payload; markers %q", e2e.xs, floodXs, e2e.markers)
	}

	// engine.
	engine, err := engineFlood(ctx, rs.Engine)
	if err != nil {
		b.Fatalf("engine-only flood: %v", err)
	}
	if engine.xs != floodXs {
		b.Errorf("engine: %d of %d bytes of payload on its stdout", engine.xs, floodXs)
	}

	// terrarun-only, two running apply stages.
	type variant struct {
		name      string
		writeSize int
		c         floodCount
		d, posted time.Duration
	}
	variants := []*variant{{name: "terrarun-64k", writeSize: 64 << 10}, {name: "terrarun-lines", writeSize: floodLineLen}}
	for _, v := range variants {
		run, token, err := startSlowRun(ctx, rs, ns, "slow-"+strings.TrimPrefix(v.name, "terrarun-"))
		if err != nil {
			b.Fatal(err)
		}
		v.c, v.d, v.posted, err = postFlood(ctx, rs, run, token, v.writeSize)
		if err != nil {
			b.Fatalf("%s: %v", v.name, err)
		}
		if v.c.xs != floodXs || len(v.c.markers) > 0 {
			b.Errorf("%s: the follower read %d of %d bytes of payload; markers %q", v.name, v.c.xs, floodXs, v.c.markers)
		}
		cancelRun(ctx, b, rs, ns, run.Name)
	}
	peak, _, _ := mem.Stop()

	b.ReportMetric(e2e.mbps(), "e2e-MB/s")
	b.ReportMetric(engine.mbps(), "engine-MB/s")
	for _, v := range variants {
		if v.d > 0 {
			b.ReportMetric(float64(v.c.bytes)/1e6/v.d.Seconds(), v.name+"-MB/s")
		}
	}
	b.ReportMetric(peak.ServerRSS, "server-peak-rss-MiB")
	detail(b, "e2e: %d lines (the engine splits a few), %.1f MB in %.2fs from begin to end at the follower; the whole run took %.1fs", e2e.lines, float64(e2e.bytes)/1e6, e2e.end.Sub(e2e.begin).Seconds(), total.Seconds())
	detail(b, "engine: %d lines, %.1f MB in %.2fs at its stdout", engine.lines, float64(engine.bytes)/1e6, engine.end.Sub(engine.begin).Seconds())
	for _, v := range variants {
		detail(b, "%s: %d lines, %.1f MB read by the follower %.2fs after the first write; the POST was answered after %.2fs", v.name, v.c.lines, float64(v.c.bytes)/1e6, v.d.Seconds(), v.posted.Seconds())
	}
	logLoad(b, "at the end")
}

// ---------------------------------------------------------------------------
// Concurrent runs

// reconcileErrors counts the run controller's "Reconciling run" errors in
// the server's log and returns the first k of them, shortened.
func reconcileErrors(logPath string, k int) (int, []string) {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return 0, nil
	}
	n := 0
	var first []string
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.Contains(line, "Reconciling run") {
			continue
		}
		n++
		if len(first) < k {
			if len(line) > 400 {
				line = line[:400] + "..."
			}
			first = append(first, line)
		}
	}
	return n, first
}

// BenchmarkConcurrentRuns creates N Auto runs of one terraform_data each, in
// workspaces of their own, as fast as 8 concurrent creators can, and waits
// until every one has ended, on a server with --controller-workers W.
// Variants: N=20 and N=200 with the default W=4, and N=200 with W=16.
// Reported: the wall time from the first create to the last run Succeeded,
// runs/min, the per-run time from create to Succeeded (p50/p99), the server's
// peak RSS (VmRSS sampled every 100ms, and VmHWM at the end), the peaks of
// the sums of VmRSS and of RssAnon over the server and all its descendants
// (executors, engines; sampled every second; the VmRSS sum counts shared
// pages once per process), the peak number of those processes, and the
// number of reconcile errors in the server's log. A variant is stopped (and
// reported as such) when the machine's MemAvailable falls below
// minMemAvailableMiB or after concurrentDeadline.
func BenchmarkConcurrentRuns(b *testing.B) {
	// The server's default bound on concurrent stages (two per CPU here),
	// against no bound: early runs should end early, at the same throughput.
	for _, v := range []struct {
		runs   int
		stages string
	}{{20, "default"}, {200, "default"}, {200, "0"}} {
		args := []string{"--controller-workers", strconv.Itoa(defaultWorkers)}
		if v.stages != "default" {
			args = append(args, "--max-concurrent-stages", v.stages)
		}
		b.Run(fmt.Sprintf("runs=%d,max-concurrent-stages=%s", v.runs, v.stages), func(b *testing.B) { concurrentRuns(b, max(v.runs, b.N), args) })
	}
}

func concurrentRuns(b *testing.B, n int, args []string) {
	rs := startRunServer(b, args...)
	defer rs.close(b)
	ctx, cancel := context.WithTimeout(context.Background(), concurrentDeadline)
	defer cancel()
	logLoad(b, "at the start")
	detail(b, "MemAvailable at the start: %.0f MiB; server flags %v", memAvailableMiB(), args)
	const ns = "concurrent"
	runs := rs.runs(ns)

	// Every run's state, from a watch of the namespace started before the
	// first create.
	list, err := runs.List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	type state struct {
		created, planning, final time.Time
		phase                    v1alpha1.RunPhase
		message                  string
	}
	var mu sync.Mutex
	states := map[string]*state{}
	allDone := make(chan struct{})
	finished := 0
	observe := func(r *v1alpha1.TerraformRun) {
		mu.Lock()
		defer mu.Unlock()
		s := states[r.Name]
		if s == nil {
			s = &state{}
			states[r.Name] = s
		}
		now := time.Now()
		if r.Status.Phase == v1alpha1.RunPhasePlanning && s.planning.IsZero() {
			s.planning = now
		}
		if runrules.Final(r.Status.Phase) && s.final.IsZero() {
			s.final, s.phase, s.message = now, r.Status.Phase, r.Status.Message
			if finished++; finished == n {
				close(allDone)
			}
		}
	}
	go func() {
		rv := list.ResourceVersion
		for ctx.Err() == nil {
			w, err := runs.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if r, ok := ev.Object.(*v1alpha1.TerraformRun); ok {
					rv = r.ResourceVersion
					observe(r)
				}
			}
			w.Stop()
		}
	}()

	var lowMem sync.Once
	lowMemCh := make(chan treeSample, 1)
	mem := startMemSampler(rs.Pid, 100*time.Millisecond, 10, func(s treeSample) {
		if s.MemAvailableMiB >= 0 && s.MemAvailableMiB < minMemAvailableMiB {
			lowMem.Do(func() { lowMemCh <- s })
		}
	})

	start := time.Now()
	var next sync.Mutex
	i := 0
	var wg sync.WaitGroup
	createErrs := make(chan error, n)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				next.Lock()
				k := i
				i++
				next.Unlock()
				if k >= n {
					return
				}
				name := fmt.Sprintf("run-%03d", k)
				mu.Lock()
				if states[name] == nil {
					states[name] = &state{}
				}
				states[name].created = time.Now()
				mu.Unlock()
				if _, err := runs.Create(ctx, rs.autoRun(name, fmt.Sprintf("ws-%03d", k), inline(trivialTF)), metav1.CreateOptions{}); err != nil {
					createErrs <- fmt.Errorf("create %s: %w", name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	created := time.Since(start)
	close(createErrs)
	for err := range createErrs {
		b.Fatal(err)
	}

	outcome := "all ended"
	select {
	case <-allDone:
	case s := <-lowMemCh:
		outcome = fmt.Sprintf("STOPPED: MemAvailable fell to %.0f MiB (tree RSS %.0f MiB, anon %.0f MiB, %d processes)", s.MemAvailableMiB, s.TreeRSS, s.TreeAnon, s.Procs)
	case <-ctx.Done():
		outcome = fmt.Sprintf("STOPPED: not all runs ended within %s", concurrentDeadline)
	}
	wall := time.Since(start)
	hwm := vmHWM(rs.Pid)
	peak, serverSamples, treeSamples := mem.Stop()

	mu.Lock()
	var perRun []time.Duration
	var lastPlanning time.Time
	var ends []time.Duration // from the first create to each run's Succeeded
	phases := map[v1alpha1.RunPhase]int{}
	var failures []string
	for name, s := range states {
		if s.planning.After(lastPlanning) {
			lastPlanning = s.planning
		}
		if s.final.IsZero() {
			phases["(not ended)"]++
			continue
		}
		phases[s.phase]++
		if s.phase == v1alpha1.RunPhaseSucceeded {
			perRun = append(perRun, s.final.Sub(s.created))
			ends = append(ends, s.final.Sub(start))
		} else if len(failures) < 5 {
			failures = append(failures, fmt.Sprintf("%s %s: %s", name, s.phase, s.message))
		}
	}
	mu.Unlock()

	succeeded := phases[v1alpha1.RunPhaseSucceeded]
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.ReportMetric(float64(succeeded)/wall.Minutes(), "runs/min")
	b.ReportMetric(float64(succeeded), "succeeded")
	if len(perRun) > 0 {
		sorted := slices.Clone(perRun)
		slices.Sort(sorted)
		b.ReportMetric(harness.Percentile(sorted, 0.5).Seconds(), "run-p50-s")
		b.ReportMetric(harness.Percentile(sorted, 0.99).Seconds(), "run-p99-s")
	}
	b.ReportMetric(peak.ServerRSS, "server-peak-rss-MiB")
	b.ReportMetric(hwm, "server-vmhwm-MiB")
	b.ReportMetric(peak.TreeRSS, "tree-peak-rss-MiB")
	b.ReportMetric(peak.TreeAnon, "tree-peak-anon-MiB")
	b.ReportMetric(float64(peak.Procs), "peak-procs")
	b.ReportMetric(float64(wall.Nanoseconds())/float64(n), "ns/op")
	detail(b, "%d runs: %s after %.1fs; phases %v; created in %.1fs; last run Planning after %.1fs; min MemAvailable %.0f MiB; %d server and %d process-tree memory samples",
		n, outcome, wall.Seconds(), phases, created.Seconds(), lastPlanning.Sub(start).Seconds(), peak.MemAvailableMiB, serverSamples, treeSamples)
	if len(ends) > 0 {
		slices.Sort(ends)
		detail(b, "runs Succeeded after (s from the first create): first %.1f, 10%% %.1f, 50%% %.1f, 90%% %.1f, last %.1f",
			ends[0].Seconds(), harness.Percentile(ends, 0.1).Seconds(), harness.Percentile(ends, 0.5).Seconds(), harness.Percentile(ends, 0.9).Seconds(), ends[len(ends)-1].Seconds())
	}
	for _, f := range failures {
		detail(b, "not succeeded: %s", f)
	}
	errs, first := reconcileErrors(rs.logPath, 3)
	b.ReportMetric(float64(errs), "reconcile-errors")
	if errs > 0 {
		detail(b, "%d reconcile errors in the server's log (each requeued with the rate limiter); the first:\n%s", errs, strings.Join(first, "\n"))
	}
	logLoad(b, "at the end")
	if outcome != "all ended" || succeeded != n {
		b.Errorf("%d of %d runs succeeded: %s", succeeded, n, outcome)
	}
}

// pairRatio is the median of num[i] / den[i]: the ratios of the arms'
// measurements in the same iteration.
func pairRatio(num, den []time.Duration) float64 {
	n := min(len(num), len(den))
	if n == 0 {
		return 0
	}
	ratios := make([]float64, n)
	for i := range n {
		ratios[i] = float64(num[i]) / float64(den[i])
	}
	slices.Sort(ratios)
	if n%2 == 1 {
		return ratios[n/2]
	}
	return (ratios[n/2-1] + ratios[n/2]) / 2
}

// countedRun is apiRun of an Auto run of the trivial configuration, named
// run, in namespace ns of rs; measured, its etcd transactions are counted
// in t (the etcd revision, which objects and artifacts share, once it has
// ended).
func countedRun(ctx context.Context, rs *runServer, ns string, t *transactions, measured bool) (time.Duration, phaseTimes, time.Time, error) {
	before, err := rs.revision(ctx)
	if err != nil {
		return 0, nil, time.Time{}, err
	}
	d, seen, start, err := apiRun(ctx, rs, ns, "run", "", inline(trivialTF), nil)
	if err == nil && measured {
		err = t.add(ctx, rs, before)
	}
	return d, seen, start, err
}

// transactions counts the etcd transactions of runs, and what they write.
type transactions struct {
	counts  []int64        // each run's
	byClass map[string]int // over all runs
	first   []string       // the first run's, in order
}

// add counts the transactions of rs's etcd since the revision before (a
// run ended since), by the classes (classOfKey) of the keys each wrote or
// deleted, from etcd's history (a watch from before+1).
func (t *transactions) add(ctx context.Context, rs *runServer, before int64) error {
	after, err := rs.revision(ctx)
	if err != nil || after <= before {
		return err
	}
	etcd, _, err := rs.etcdClient()
	if err != nil {
		return err
	}
	defer etcd.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	classes := map[int64]map[string]bool{}
	seen := before
	// A revision's events come in one response.
	for resp := range etcd.Watch(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(before+1)) {
		if err := resp.Err(); err != nil {
			return err
		}
		for _, ev := range resp.Events {
			rev := ev.Kv.ModRevision
			seen = max(seen, rev)
			if rev > after {
				continue
			}
			if classes[rev] == nil {
				classes[rev] = map[string]bool{}
			}
			classes[rev][classOfKey(string(ev.Kv.Key))] = true
		}
		if seen >= after {
			break
		}
	}
	if seen < after {
		return fmt.Errorf("etcd's history from revision %d ended at %d, before %d: %w", before+1, seen, after, ctx.Err())
	}
	if t.byClass == nil {
		t.byClass = map[string]int{}
	}
	for _, rev := range slices.Sorted(maps.Keys(classes)) {
		class := strings.Join(slices.Sorted(maps.Keys(classes[rev])), " + ")
		t.byClass[class]++
		if len(t.counts) == 0 {
			t.first = append(t.first, class)
		}
	}
	t.counts = append(t.counts, after-before)
	return nil
}

// median is the median of the runs' counts.
func (t *transactions) median() float64 {
	sorted := slices.Clone(t.counts)
	slices.Sort(sorted)
	return float64(sorted[len(sorted)/2])
}

// perRun says how many transactions of each kind a run made, on average.
func (t *transactions) perRun() string {
	var sb strings.Builder
	for _, c := range slices.Sorted(maps.Keys(t.byClass)) {
		fmt.Fprintf(&sb, "\n  %5.2f  %s", float64(t.byClass[c])/float64(max(len(t.counts), 1)), c)
	}
	sb.WriteString("\n  the first run's, in order:")
	for i, c := range t.first {
		fmt.Fprintf(&sb, "\n  %2d. %s", i+1, c)
	}
	return sb.String()
}
