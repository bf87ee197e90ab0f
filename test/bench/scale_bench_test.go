package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/apiserver"
	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// Scale simulation sizes: TERRARUN_BENCH_SCALE_RUNS finished runs (default
// 50,000, about 2.6 GiB in etcd: the server runs with an embedded etcd quota
// of scaleQuota instead of etcd's default 2 GiB, which fills near 39,000, see
// docs/scaling.md), in namespaces of runsPerNamespace.
const (
	defaultScaleRuns = 50000
	scaleQuota       = 8 << 30
	runsPerNamespace = 1000
	scaleCheckpoints = 5
	scaleWriters     = 16
	// Per run: a plan log of planLogLines and an apply log of applyLogLines
	// lines of about 70 bytes, the plan text, redacted JSON and file, and
	// outputs.
	planLogLines  = 150
	applyLogLines = 100
)

// BenchmarkStoredRuns simulates the etcd and the server of a busy
// installation: it stores finished runs as the controller and the executors
// leave them (a Succeeded status with a plan summary, two stages and
// conditions; through the artifact store, as the server writes them: plan
// text, redacted plan JSON, plan file, outputs, and a plan and an apply log
// of a few hundred lines), and at each fifth of the way measures etcd's
// database size, the server's RSS, a LIST of one 1,000-run namespace (in
// JSON and in protobuf) and watch delivery. At the end it measures a paged
// LIST of every run, and etcd's compaction and defragmentation.
// docs/scaling.md extrapolates from the slopes. With $TERRARUN_BENCH_PROFILES
// set to a directory, it keeps the server's live heap profile there once
// every run is stored.
func BenchmarkStoredRuns(b *testing.B) {
	total := defaultScaleRuns
	if v := os.Getenv("TERRARUN_BENCH_SCALE_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < runsPerNamespace*scaleCheckpoints {
			b.Fatalf("TERRARUN_BENCH_SCALE_RUNS=%q: want a number of runs, at least %d", v, runsPerNamespace*scaleCheckpoints)
		}
		total = n
	}
	bin, err := binaries()
	if err != nil {
		b.Fatal(err)
	}
	s, err := startServer(bin+"/terrarun-apiserver", []string{"--run-controller=false", fmt.Sprintf("--embedded-etcd-quota-bytes=%d", scaleQuota)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := s.stop(); err != nil {
			b.Error(err)
		}
	}()
	etcd, endpoint, err := s.etcdClient()
	if err != nil {
		b.Fatal(err)
	}
	defer etcd.Close()
	store := artifacts.New(etcd, artifacts.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	logLoad(b, "at the start")
	defer logLoad(b, "at the end")

	art := newRunArtifacts()
	b.Logf("per run: %d bytes of artifacts and logs", art.size())
	b.Logf("%8s %10s %10s %10s %12s %12s %12s %12s %12s %12s %10s", "runs", "etcd-MiB", "rss-MiB", "anon-MiB", "list1k-p50", "list1k-p99", "pb-list-p50", "pb-list-p99", "watch-p50", "watch-p99", "store-s")
	var (
		stored  int
		first   checkpoint
		last    checkpoint
		started = time.Now()
	)
	step := total / scaleCheckpoints
	for cp := 1; cp <= scaleCheckpoints; cp++ {
		t0 := time.Now()
		if err := storeRuns(ctx, s.Client, store, art, stored, step); err != nil {
			b.Fatal(err)
		}
		stored += step
		c, err := s.measure(ctx, stored)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%8d %10.1f %10.1f %10.1f %12.1f %12.1f %12.1f %12.1f %12.1f %12.1f %10.1f", stored, c.dbMiB, c.rssMiB, c.anonMiB,
			ms(c.list[0]), ms(c.list[1]), ms(c.listProto[0]), ms(c.listProto[1]), ms(c.watch[0]), ms(c.watch[1]), time.Since(t0).Seconds())
		if cp == 1 {
			first = c
		}
		last = c
	}
	b.Logf("stored %d runs in %s", stored, time.Since(started).Round(time.Second))
	if dir := os.Getenv("TERRARUN_BENCH_PROFILES"); dir != "" {
		// The live heap (pprof's gc=1) with every run stored, for `go tool pprof`.
		profile, err := s.Client.Discovery().RESTClient().Get().AbsPath("/debug/pprof/heap").Param("gc", "1").DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "stored-runs.heap.pb.gz"), profile, 0o644)
		}
		if err != nil {
			b.Fatalf("keeping the heap profile (TERRARUN_BENCH_PROFILES): %v", err)
		}
	}

	// A paged LIST of every run, as a controller's initial list does.
	var full []time.Duration
	for range 3 {
		t0 := time.Now()
		n := 0
		opts := metav1.ListOptions{Limit: 500}
		for {
			l, err := s.Client.TerrarunV1alpha1().TerraformRuns("").List(ctx, opts)
			if err != nil {
				b.Fatal(err)
			}
			n += len(l.Items)
			if opts.Continue = l.Continue; opts.Continue == "" {
				break
			}
		}
		full = append(full, time.Since(t0))
		if n < stored {
			b.Fatalf("the paged LIST returned %d runs, want %d", n, stored)
		}
	}
	slices.Sort(full)

	// Compaction and defragmentation, as the server's maintenance does them.
	status, err := etcd.Status(ctx, endpoint)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	if _, err := etcd.Compact(ctx, status.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		b.Fatal(err)
	}
	compact := time.Since(t0)
	t0 = time.Now()
	if _, err := etcd.Defragment(ctx, endpoint); err != nil {
		b.Fatal(err)
	}
	defrag := time.Since(t0)
	after, err := s.etcdDBSize()
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("full paged LIST of %d runs: %.0f ms (median of 3); compaction %.1f s, defragmentation %.1f s; etcd %.0f MiB before, %.0f MiB after",
		stored, ms(full[1]), compact.Seconds(), defrag.Seconds(), last.dbMiB, after)

	perRun := func(a, z float64) float64 { return (z - a) * 1024 / float64(last.runs-first.runs) }
	b.ReportMetric(float64(stored), "runs")
	b.ReportMetric(last.dbMiB, "etcd-MiB")
	b.ReportMetric(after, "etcd-defragmented-MiB")
	b.ReportMetric(perRun(first.dbMiB, last.dbMiB), "etcd-KiB/run")
	b.ReportMetric(last.rssMiB, "rss-MiB")
	b.ReportMetric(perRun(first.rssMiB, last.rssMiB), "rss-KiB/run")
	b.ReportMetric(last.anonMiB, "rss-anon-MiB")
	b.ReportMetric(perRun(first.anonMiB, last.anonMiB), "rss-anon-KiB/run")
	b.ReportMetric(ms(last.list[1]), "list1k-p99-ms")
	b.ReportMetric(ms(last.listProto[1]), "list1k-protobuf-p99-ms")
	b.ReportMetric(ms(last.watch[1]), "watch-p99-ms")
	b.ReportMetric(ms(full[1]), "list-all-ms")
	b.ReportMetric(compact.Seconds(), "compact-s")
	b.ReportMetric(defrag.Seconds(), "defrag-s")
}

// checkpoint is what BenchmarkStoredRuns measures with runs stored.
type checkpoint struct {
	runs                   int
	dbMiB, rssMiB, anonMiB float64
	list, listProto, watch [2]time.Duration // p50, p99
}

// etcdClient connects to the server's embedded etcd, with the client
// certificate that its log names.
func (s *server) etcdClient() (*clientv3.Client, string, error) {
	data, err := os.ReadFile(s.logPath)
	if err != nil {
		return nil, "", err
	}
	m := regexp.MustCompile(`"Embedded etcd is serving" url="([^"]+)" cacert="([^"]+)" cert="([^"]+)" key="([^"]+)"`).FindSubmatch(data)
	if m == nil {
		return nil, "", fmt.Errorf("the server's log does not say where its etcd serves")
	}
	tlsConfig, err := transport.TLSInfo{TrustedCAFile: string(m[2]), CertFile: string(m[3]), KeyFile: string(m[4])}.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{string(m[1])}, TLS: tlsConfig, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	return c, string(m[1]), err
}

// runArtifacts are the artifacts every simulated run gets.
type runArtifacts struct {
	planText, planJSON, planFile, outputs, planLog, applyLog []byte
}

func newRunArtifacts() *runArtifacts {
	var planText, planJSON bytes.Buffer
	planText.WriteString("OpenTofu will perform the following actions:\n\n")
	planJSON.WriteString(`{"format_version":"1.2","resource_changes":[`)
	for i := range 12 {
		fmt.Fprintf(&planText, "  # terraform_data.item[%d] will be created\n  + resource \"terraform_data\" \"item\" {\n      + id     = (known after apply)\n      + input  = \"value-%d\"\n    }\n\n", i, i)
		if i > 0 {
			planJSON.WriteByte(',')
		}
		fmt.Fprintf(&planJSON, `{"address":"terraform_data.item[%d]","type":"terraform_data","change":{"actions":["create"],"after":{"input":"value-%d"},"after_unknown":{"id":true}}}`, i, i)
	}
	planText.WriteString("Plan: 12 to add, 0 to change, 0 to destroy.\n")
	planJSON.WriteString("]}")
	planFile := make([]byte, 3<<10)
	_, _ = rand.Read(planFile) // a zip: incompressible
	logOf := func(stage string, n int) []byte {
		var l bytes.Buffer
		for i := range n {
			fmt.Fprintf(&l, "terraform_data.item[%d]: %s complete after 0s [id=5f2d7c1e-9a3b-4c6d-8e0f-%012d]\n", i%12, stage, i)
		}
		return l.Bytes()
	}
	return &runArtifacts{
		planText: planText.Bytes(), planJSON: planJSON.Bytes(), planFile: planFile,
		outputs: []byte(`{"greeting":{"sensitive":false,"type":"string","value":"hello"}}`),
		planLog: logOf("Refreshing", planLogLines), applyLog: logOf("Creation", applyLogLines),
	}
}

func (a *runArtifacts) size() int {
	return len(a.planText) + len(a.planJSON) + len(a.planFile) + len(a.outputs) + len(a.planLog) + len(a.applyLog)
}

// storeRuns stores runs from+1 … from+n: created, their status that of a
// finished run, their artifacts and logs written through store.
func storeRuns(ctx context.Context, client versioned.Interface, store *artifacts.Store, art *runArtifacts, from, n int) error {
	var next atomic.Int64
	next.Store(int64(from))
	errs := make(chan error, scaleWriters)
	var wg sync.WaitGroup
	for range scaleWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > from+n || ctx.Err() != nil {
					return
				}
				if err := storeRun(ctx, client, store, art, i); err != nil {
					errs <- fmt.Errorf("run %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func storeRun(ctx context.Context, client versioned.Interface, store *artifacts.Store, art *runArtifacts, i int) error {
	ns := fmt.Sprintf("scale-%03d", (i-1)/runsPerNamespace)
	runs := client.TerrarunV1alpha1().TerraformRuns(ns)
	run := benchRun(fmt.Sprintf("run-%06d", i))
	run.Spec.Workspace = "app"
	run, err := runs.Create(ctx, run, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	start := metav1.NewTime(now.Add(-40 * time.Second))
	run.Status = v1alpha1.TerraformRunStatus{
		Phase:              v1alpha1.RunPhase("Succeeded"),
		ObservedGeneration: run.Generation,
		Plan:               &v1alpha1.PlanSummary{Digest: "sha256:" + strings.Repeat("ab", 32), Add: 12, HasChanges: true},
		Stages: []v1alpha1.StageStatus{
			{Name: "plan", Attempt: 1, Job: run.Name + "-plan-1", StartTime: &start, CompletionTime: &now, ExitCode: ptr.To[int32](0)},
			{Name: "apply", Attempt: 1, Job: run.Name + "-apply-1", StartTime: &start, CompletionTime: &now, ExitCode: ptr.To[int32](0)},
		},
		StartTime: &start, CompletionTime: &now,
		Message: "Applied: 12 added, 0 changed, 0 destroyed.",
	}
	for _, c := range []string{"Planned", "Approved", "Applied", "Complete", "Ready"} {
		meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "Applied: 12 added.", ObservedGeneration: run.Generation})
	}
	if _, err := runs.UpdateStatus(ctx, run, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	ref := artifacts.RunRef{Namespace: ns, Name: run.Name, UID: string(run.UID)}
	for kind, data := range map[artifacts.Kind][]byte{
		artifacts.PlanText: art.planText, artifacts.PlanJSON: art.planJSON, artifacts.PlanFile: art.planFile, artifacts.Outputs: art.outputs,
	} {
		if _, err := store.Put(ctx, ref, kind, bytes.NewReader(data)); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
	}
	for stage, log := range map[string][]byte{"plan": art.planLog, "apply": art.applyLog} {
		if err := store.AppendLog(ctx, ref, stage, 1, log); err != nil {
			return fmt.Errorf("%s log: %w", stage, err)
		}
		if err := store.CloseLog(ctx, ref, stage, 1); err != nil {
			return fmt.Errorf("%s log: %w", stage, err)
		}
	}
	return nil
}

// measure takes a checkpoint with runs stored: etcd's size, the server's RSS
// (with embedded etcd: its anonymous part is the heaps, the rest mostly
// etcd's memory-mapped database),
// 20 LISTs of the first namespace (1,000 runs) in each of JSON and
// protobuf, and 20 watch deliveries.
func (s *server) measure(ctx context.Context, runs int) (checkpoint, error) {
	c := checkpoint{runs: runs}
	proto, err := versioned.NewForConfig(apiserver.ProtobufClientConfig(s.Config))
	if err != nil {
		return c, err
	}
	if c.dbMiB, err = s.etcdDBSize(); err != nil {
		return c, err
	}
	mem, err := harness.ReadMem(s.Pid)
	if err != nil {
		return c, err
	}
	c.rssMiB, c.anonMiB = mem.VmRSS, mem.RssAnon
	// The same LIST in JSON and in protobuf, alternating.
	var list, listProto []time.Duration
	for i := range 40 {
		client, into := s.Client, &list
		if i%2 == 1 {
			client, into = proto, &listProto
		}
		t0 := time.Now()
		l, err := client.TerrarunV1alpha1().TerraformRuns("scale-000").List(ctx, metav1.ListOptions{})
		if err != nil {
			return c, err
		}
		*into = append(*into, time.Since(t0))
		if len(l.Items) != runsPerNamespace {
			return c, fmt.Errorf("LIST scale-000: %d runs, want %d", len(l.Items), runsPerNamespace)
		}
	}
	c.list, c.listProto = p50p99(list), p50p99(listProto)

	runsAPI := s.Client.TerrarunV1alpha1().TerraformRuns("scale-watch")
	w, err := runsAPI.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return c, err
	}
	defer w.Stop()
	var watch []time.Duration
	for range 20 {
		t0 := time.Now()
		created, err := runsAPI.Create(ctx, benchRun(uniqueName("watch")), metav1.CreateOptions{})
		if err != nil {
			return c, err
		}
		for ev := range w.ResultChan() {
			if r, ok := ev.Object.(*v1alpha1.TerraformRun); ok && r.UID == created.UID {
				break
			}
		}
		watch = append(watch, time.Since(t0))
	}
	c.watch = p50p99(watch)
	return c, nil
}

func p50p99(d []time.Duration) [2]time.Duration {
	slices.Sort(d)
	return [2]time.Duration{harness.Percentile(d, 0.5), harness.Percentile(d, 0.99)}
}
