package bench

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/test/internal/harness"
	"github.com/terrarun/terrarun/test/internal/scale"
)

// Scale simulation sizes: TERRARUN_BENCH_SCALE_RUNS finished runs (default
// 50,000, about 2.6 GiB in etcd: the server runs with an embedded etcd quota
// of scaleQuota instead of etcd's default 2 GiB, which fills near 39,000, see
// docs/scaling.md), in namespaces of scale.RunsPerNamespace.
const (
	defaultScaleRuns = 50000
	scaleQuota       = 8 << 30
	scaleCheckpoints = 5
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
// every run is stored. With $TERRARUN_BENCH_ARTIFACT_STORE=s3 the artifacts
// are in a real S3-compatible server (versitygw, $TERRARUN_OBJECTSTORE), as
// --artifact-store=s3 keeps them.
func BenchmarkStoredRuns(b *testing.B) {
	total := defaultScaleRuns
	if v := os.Getenv("TERRARUN_BENCH_SCALE_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < scale.RunsPerNamespace*scaleCheckpoints {
			b.Fatalf("TERRARUN_BENCH_SCALE_RUNS=%q: want a number of runs, at least %d", v, scale.RunsPerNamespace*scaleCheckpoints)
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	var opts artifacts.Options
	if benchArtifactStore() {
		// Artifacts in a real S3-compatible server, encrypted, as
		// --artifact-store=s3 keeps them: etcd keeps the metas only, and
		// the finished logs move out of it as they close.
		opts.Objects = startObjectStore(b).Store
		b.Logf("artifacts in the object store (TERRARUN_BENCH_ARTIFACT_STORE=s3)")
	}
	store := artifacts.New(etcd, opts)
	go store.RunObjectMaintenance(ctx)
	logLoad(b, "at the start")
	defer logLoad(b, "at the end")

	art := scale.NewArtifacts()
	b.Logf("per run: %d bytes of artifacts and logs", art.Size())
	b.Logf("%8s %10s %10s %10s %12s %12s %12s %12s %12s %12s %12s %12s %10s", "runs", "etcd-MiB", "rss-MiB", "anon-MiB", "list1k-p50", "list1k-p99", "read-p99", "pb-list-p50", "pb-list-p99", "pb-read-p99", "watch-p50", "watch-p99", "store-s")
	var (
		stored  int
		first   checkpoint
		last    checkpoint
		started = time.Now()
	)
	step := total / scaleCheckpoints
	for cp := 1; cp <= scaleCheckpoints; cp++ {
		t0 := time.Now()
		if err := scale.Store(ctx, s.Client, store, art, stored, step); err != nil {
			b.Fatal(err)
		}
		if opts.Objects != nil {
			// The logs still moving (a queue of them closed in a burst)
			// move now, so that etcd is measured as it settles.
			if _, err := store.MigrateToObjects(ctx); err != nil {
				b.Fatal(err)
			}
		}
		stored += step
		c, err := s.measure(ctx, stored)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%8d %10.1f %10.1f %10.1f %12.1f %12.1f %12.1f %12.1f %12.1f %12.1f %12.1f %12.1f %10.1f", stored, c.dbMiB, c.rssMiB, c.anonMiB,
			ms(c.lists.JSONDecoded[0]), ms(c.lists.JSONDecoded[1]), ms(c.lists.JSONRead[1]), ms(c.lists.ProtobufDecoded[0]), ms(c.lists.ProtobufDecoded[1]), ms(c.lists.ProtobufRead[1]),
			ms(c.watch[0]), ms(c.watch[1]), time.Since(t0).Seconds())
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
	byClass, err := keysOfNamespace(ctx, etcd, scale.Namespace(1))
	if err != nil {
		b.Fatal(err)
	}
	var logical int
	for _, c := range slices.Sorted(maps.Keys(byClass)) {
		logical += byClass[c].bytes
		detail(b, "etcd keys of a run, %-22s %5.2f keys, %6.0f bytes of key and value", c, float64(byClass[c].keys)/scale.RunsPerNamespace, float64(byClass[c].bytes)/scale.RunsPerNamespace)
	}
	detail(b, "etcd keys of a run, all: %.0f bytes of keys and values; the database after defragmentation, %.0f bytes a run", float64(logical)/scale.RunsPerNamespace, after*(1<<20)/float64(stored))
	b.ReportMetric(float64(logical)/scale.RunsPerNamespace, "etcd-kv-bytes/run")

	perRun := func(a, z float64) float64 { return (z - a) * 1024 / float64(last.runs-first.runs) }
	b.ReportMetric(float64(stored), "runs")
	b.ReportMetric(last.dbMiB, "etcd-MiB")
	b.ReportMetric(after, "etcd-defragmented-MiB")
	b.ReportMetric(perRun(first.dbMiB, last.dbMiB), "etcd-KiB/run")
	b.ReportMetric(last.rssMiB, "rss-MiB")
	b.ReportMetric(perRun(first.rssMiB, last.rssMiB), "rss-KiB/run")
	b.ReportMetric(last.anonMiB, "rss-anon-MiB")
	b.ReportMetric(perRun(first.anonMiB, last.anonMiB), "rss-anon-KiB/run")
	b.ReportMetric(ms(last.lists.JSONDecoded[1]), "list1k-p99-ms")
	b.ReportMetric(ms(last.lists.JSONRead[1]), "list1k-read-p99-ms")
	b.ReportMetric(ms(last.lists.ProtobufDecoded[1]), "list1k-protobuf-p99-ms")
	b.ReportMetric(ms(last.lists.ProtobufRead[1]), "list1k-protobuf-read-p99-ms")
	b.ReportMetric(ms(last.watch[1]), "watch-p99-ms")
	b.ReportMetric(ms(full[1]), "list-all-ms")
	b.ReportMetric(compact.Seconds(), "compact-s")
	b.ReportMetric(defrag.Seconds(), "defrag-s")
}

// keyClass is what keysOfNamespace counts of one class of keys.
type keyClass struct{ keys, bytes int }

// keysOfNamespace reads every key etcd holds of the runs of namespace ns
// (their objects, under the API's prefix, and their artifacts' keys) and
// sums their keys and values by class (classOfKey). A key's protobuf and
// bbolt overhead is not counted: the database's size after defragmentation
// holds it.
func keysOfNamespace(ctx context.Context, etcd *clientv3.Client, ns string) (map[string]keyClass, error) {
	byClass := map[string]keyClass{}
	for _, prefix := range []string{"/registry/terrarun.dev/terrarun.dev/terraformruns/" + ns + "/", "/terrarun/artifacts/" + ns + "/", "/terrarun/artifacts/_log-usage/" + ns + "/"} {
		resp, err := etcd.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			class := classOfKey(string(kv.Key))
			c := byClass[class]
			c.keys++
			c.bytes += len(kv.Key) + len(kv.Value)
			byClass[class] = c
		}
	}
	return byClass, nil
}

// classOfKey names what an etcd key of terrarun's holds: "run object" (or
// another resource's objects), or an artifact key by its part after the
// run's prefix: a kind's meta or chunks, a log's meta or chunks, the index
// of logs, a follower, a log's usage.
func classOfKey(key string) string {
	if rest, ok := strings.CutPrefix(key, "/registry/terrarun.dev/terrarun.dev/"); ok {
		resource, _, _ := strings.Cut(rest, "/")
		return strings.TrimSuffix(resource, "s") + " object"
	}
	if rest, ok := strings.CutPrefix(key, "/registry/"); ok {
		resource, _, _ := strings.Cut(rest, "/")
		return resource
	}
	rest, ok := strings.CutPrefix(key, "/terrarun/artifacts/")
	if !ok {
		// The local executor's records, the served state backend's
		// states, the leader's key: by their first two segments.
		parts := strings.SplitN(strings.TrimPrefix(key, "/"), "/", 3)
		return "/" + strings.Join(parts[:min(len(parts), 2)], "/")
	}
	if strings.HasPrefix(rest, "_log-usage/") {
		return "log usage"
	}
	// <namespace>/<name>/<uid>/<what>...
	parts := strings.SplitN(rest, "/", 4)
	if len(parts) < 4 {
		return "other artifact key"
	}
	what := parts[3]
	first, _, _ := strings.Cut(what, "/")
	switch {
	case first == "logs" && strings.HasSuffix(what, "/meta"):
		return "log meta"
	case first == "logs":
		return "log chunks"
	case first == "log-index" || first == "log-followers" || first == "lease":
		return first
	case strings.HasSuffix(what, "/meta"):
		return first + " meta"
	default:
		return first + " chunks"
	}
}

// checkpoint is what BenchmarkStoredRuns measures with runs stored.
type checkpoint struct {
	runs                   int
	dbMiB, rssMiB, anonMiB float64
	lists                  scale.Lists
	watch                  [2]time.Duration // p50, p99
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

// measure takes a checkpoint with runs stored: etcd's size, the server's RSS
// (with embedded etcd: its anonymous part is the heaps, the rest mostly
// etcd's memory-mapped database),
// 20 LISTs of the first namespace (1,000 runs) in each of JSON and
// protobuf, and 20 watch deliveries.
func (s *server) measure(ctx context.Context, runs int) (checkpoint, error) {
	c := checkpoint{runs: runs}
	var err error
	if c.dbMiB, err = s.etcdDBSize(); err != nil {
		return c, err
	}
	mem, err := harness.ReadMem(s.Pid)
	if err != nil {
		return c, err
	}
	c.rssMiB, c.anonMiB = mem.VmRSS, mem.RssAnon
	if c.lists, err = scale.ListLatencies(ctx, s.Config); err != nil {
		return c, err
	}

	runsAPI := s.Client.TerrarunV1alpha1().TerraformRuns("scale-watch")
	w, err := runsAPI.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return c, err
	}
	defer w.Stop()
	var watch []time.Duration
	for range 20 {
		t0 := time.Now()
		created, err := runsAPI.Create(ctx, scale.Run(uniqueName("watch")), metav1.CreateOptions{})
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
	c.watch = scale.P50P99(watch)
	return c, nil
}
