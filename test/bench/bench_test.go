package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	typedv1alpha1 "github.com/terrarun/terrarun/pkg/generated/clientset/versioned/typed/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/test/internal/harness"
	"github.com/terrarun/terrarun/test/internal/scale"
)

// Sample counts. They are fixed instead of being derived from b.N so that
// `-benchtime 1x` (one call of each benchmark, the default of `make bench`)
// still measures enough operations for a p99; -benchtime Nx with a larger N
// raises every count to N. With fewer than 100 samples the p99 is the slowest
// sample.
const (
	createSamples           = 1000 // serial creates
	concurrentCreateSamples = 2000 // creates spread over `creators` goroutines
	getSamples              = 1000
	watchSamples            = 1000 // half creates, half label patches
	list1kSamples           = 100
	list10kSamples          = 50
	pageSize                = 500 // for the paginated list walk
	// creators is the number of concurrent creators, in BenchmarkCreate and
	// when filling the BenchmarkList namespaces.
	creators = 16
	warmup   = 10 // unmeasured operations before each measurement
)

// created counts the runs the benchmarks have stored in the server.
var created atomic.Int64

// nameSeq makes run names unique across repeated calls of a benchmark.
var nameSeq atomic.Int64

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%07d", prefix, nameSeq.Add(1))
}

func runsIn(b *testing.B, namespace string) typedv1alpha1.TerraformRunInterface {
	return getServer(b).Client.TerrarunV1alpha1().TerraformRuns(namespace)
}

// benchCtx bounds every benchmark in time.
func benchCtx(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

func samples(fixed int, b *testing.B) int { return max(fixed, b.N) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// reportLatency reports the p50 and p99 of lat as <prefix>p50-ms and
// <prefix>p99-ms, and the number of samples they come from as
// <prefix>samples: a p99 of fewer than 100 samples is their maximum.
func reportLatency(b *testing.B, prefix string, lat []time.Duration) {
	sorted := slices.Clone(lat)
	slices.Sort(sorted)
	b.ReportMetric(ms(harness.Percentile(sorted, 0.50)), prefix+"p50-ms")
	b.ReportMetric(ms(harness.Percentile(sorted, 0.99)), prefix+"p99-ms")
	b.ReportMetric(float64(len(sorted)), prefix+"samples")
}

// reportMean sets ns/op to the mean of lat, replacing the wall time of the
// whole benchmark call divided by b.N, which is meaningless with fixed sample
// counts.
func reportMean(b *testing.B, lat []time.Duration) {
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	b.ReportMetric(float64(sum)/float64(len(lat)), "ns/op")
}

// createMany creates n runs named <prefix>-<seq> with `workers` concurrent
// creators and returns the latency of each create and the wall time.
func createMany(ctx context.Context, runs typedv1alpha1.TerraformRunInterface, prefix string, n, workers int) ([]time.Duration, time.Duration, error) {
	return harness.Concurrently(ctx, n, workers, func(ctx context.Context, i int) error {
		if _, err := runs.Create(ctx, scale.Run(uniqueName(prefix)), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create %d: %w", i, err)
		}
		created.Add(1)
		return nil
	})
}

// BenchmarkCreate measures creating runs with an inline configuration: one
// client creating serially (latency without queueing), and `creators`
// concurrent clients (throughput, and latency under that load).
func BenchmarkCreate(b *testing.B) {
	for _, tc := range []struct {
		name    string
		n       int
		workers int
	}{
		{"serial", createSamples, 1},
		{fmt.Sprintf("concurrent-%d", creators), concurrentCreateSamples, creators},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := benchCtx(b)
			runs := runsIn(b, "bench-create")
			logLoad(b, "at the start")
			defer logLoad(b, "at the end")
			if _, _, err := createMany(ctx, runs, "warm", warmup, 1); err != nil {
				b.Fatal(err)
			}
			n := samples(tc.n, b)
			b.ResetTimer()
			lat, elapsed, err := createMany(ctx, runs, "c", n, tc.workers)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			reportLatency(b, "", lat)
			reportMean(b, lat)
			b.ReportMetric(float64(n)/elapsed.Seconds(), "creates/s")
		})
	}
}

// BenchmarkGet measures serial Gets of one existing run (a consistent read:
// no resourceVersion in the request).
func BenchmarkGet(b *testing.B) {
	ctx := benchCtx(b)
	runs := runsIn(b, "bench-get")
	logLoad(b, "at the start")
	defer logLoad(b, "at the end")
	name := uniqueName("get")
	if _, err := runs.Create(ctx, scale.Run(name), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	created.Add(1)
	var obj *v1alpha1.TerraformRun
	for range warmup {
		var err error
		if obj, err = runs.Get(ctx, name, metav1.GetOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	// The size of the object as served, managedFields included.
	raw, err := json.Marshal(obj)
	if err != nil {
		b.Fatal(err)
	}
	n := samples(getSamples, b)
	lat := make([]time.Duration, 0, n)
	b.ResetTimer()
	for range n {
		t0 := time.Now()
		if _, err := runs.Get(ctx, name, metav1.GetOptions{}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, "", lat)
	reportMean(b, lat)
	b.ReportMetric(float64(len(raw)), "object-json-bytes")
}

// population is a namespace filled with runs, once per process.
type population struct {
	once      sync.Once
	err       error
	elapsed   time.Duration
	lat       []time.Duration
	memBefore harness.MemStatus
	memAfter  harness.MemStatus
	etcdDB    float64 // MiB, size of etcd's bbolt file afterwards
	stored    int64   // runs stored in the whole server afterwards
}

var populations sync.Map // namespace -> *population

// populate fills namespace with size runs, `creators` at a time, and records
// the server's resident set before and after.
func populate(b *testing.B, namespace string, size int) *population {
	s := getServer(b)
	v, _ := populations.LoadOrStore(namespace, &population{})
	p := v.(*population)
	p.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if p.memBefore, p.err = harness.ReadMem(s.Pid); p.err != nil {
			return
		}
		runs := s.Client.TerrarunV1alpha1().TerraformRuns(namespace)
		if p.lat, p.elapsed, p.err = createMany(ctx, runs, "r", size, creators); p.err != nil {
			return
		}
		p.stored = created.Load()
		if p.memAfter, p.err = harness.ReadMem(s.Pid); p.err != nil {
			return
		}
		p.etcdDB, p.err = s.etcdDBSize()
	})
	if p.err != nil {
		b.Fatalf("populating %s with %d runs: %v", namespace, size, p.err)
	}
	return p
}

// BenchmarkList measures listing every run of a namespace holding 1,000 and
// 10,000 runs: a full list in one response, and a walk through pages of
// pageSize (limit/continue). The client decodes JSON (the types have no
// protobuf encoding), and that decoding is part of the latency.
//
// The 10k case also reports the server's resident set (VmRSS of the process,
// which holds both the API server, with its watch cache, and embedded etcd)
// before and after storing the 10,000 runs, and the growth per 1,000 runs.
func BenchmarkList(b *testing.B) {
	for _, tc := range []struct {
		name      string
		size      int
		samples   int
		reportRSS bool
	}{
		{"1k", 1000, list1kSamples, false},
		{"10k", 10000, list10kSamples, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := benchCtx(b)
			namespace := "bench-list-" + tc.name
			getServer(b)
			logLoad(b, "at the start")
			defer logLoad(b, "at the end")
			p := populate(b, namespace, tc.size)
			runs := runsIn(b, namespace)

			list := func() error {
				l, err := runs.List(ctx, metav1.ListOptions{})
				if err == nil && len(l.Items) != tc.size {
					err = fmt.Errorf("list returned %d runs, want %d", len(l.Items), tc.size)
				}
				return err
			}
			paged := func() error {
				opts := metav1.ListOptions{Limit: pageSize}
				total := 0
				for {
					l, err := runs.List(ctx, opts)
					if err != nil {
						return err
					}
					total += len(l.Items)
					if l.Continue == "" {
						break
					}
					opts.Continue = l.Continue
				}
				if total != tc.size {
					return fmt.Errorf("paged list returned %d runs, want %d", total, tc.size)
				}
				return nil
			}
			if err := list(); err != nil { // warm-up
				b.Fatal(err)
			}

			n := samples(tc.samples, b)
			full := make([]time.Duration, 0, n)
			pages := make([]time.Duration, 0, n)
			b.ResetTimer()
			for range n {
				t0 := time.Now()
				if err := list(); err != nil {
					b.Fatal(err)
				}
				full = append(full, time.Since(t0))
			}
			b.StopTimer()
			for range n {
				t0 := time.Now()
				if err := paged(); err != nil {
					b.Fatal(err)
				}
				pages = append(pages, time.Since(t0))
			}

			reportLatency(b, "", full)
			reportMean(b, full)
			reportLatency(b, "paged-", pages)
			b.ReportMetric(float64(tc.size), "runs")
			b.ReportMetric(float64(tc.size)/p.elapsed.Seconds(), "fill-creates/s")
			reportLatency(b, "fill-create-", p.lat)
			if tc.reportRSS {
				growth := p.memAfter.VmRSS - p.memBefore.VmRSS
				b.ReportMetric(growth/float64(tc.size)*1000, "rss-MiB-per-1k-runs")
				b.ReportMetric(p.memBefore.VmRSS, "rss-before-MiB")
				b.ReportMetric(p.memAfter.VmRSS, "rss-MiB")
				b.ReportMetric(p.memAfter.RssAnon, "rss-anon-MiB")
				b.ReportMetric(float64(p.stored), "runs-stored")
				b.ReportMetric(p.etcdDB, "etcd-db-MiB")
				m, err := harness.ReadMem(getServer(b).Pid)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(m.VmRSS, "rss-after-lists-MiB")
			}
		})
	}
}

// BenchmarkWatchDelivery measures how long after a write returns to its
// client a watcher of the namespace (clientset Watch, its own HTTP/2 stream on
// the same connection) receives the event: half the writes create runs, half
// patch a label of those runs. Writes are serial and each waits for its
// event, so no event queues behind another. Latencies are matched by
// resourceVersion. An event can arrive before the write's response has been
// decoded; that shows as a latency of zero or less, and early-events counts
// those. from-call- figures measure from the start of the write call instead,
// and ns/op is their mean.
func BenchmarkWatchDelivery(b *testing.B) {
	ctx := benchCtx(b)
	runs := runsIn(b, "bench-watch")
	logLoad(b, "at the start")
	defer logLoad(b, "at the end")
	w, err := runs.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()

	type arrival struct {
		rv  string
		typ watch.EventType
		at  time.Time
		err error
	}
	arrivals := make(chan arrival, 64)
	go func() {
		defer close(arrivals)
		for ev := range w.ResultChan() {
			at := time.Now()
			run, ok := ev.Object.(*v1alpha1.TerraformRun)
			if !ok {
				arrivals <- arrival{err: fmt.Errorf("watch event %s with %T: %v", ev.Type, ev.Object, ev.Object)}
				return
			}
			select {
			case arrivals <- arrival{rv: run.ResourceVersion, typ: ev.Type, at: at}:
			case <-ctx.Done():
				return
			}
		}
	}()
	// await returns when the event of rv arrived. Events of other writers
	// (the run controller's status updates, when it is running) are skipped
	// and counted in foreign.
	foreign := 0
	await := func(rv string, typ watch.EventType) (time.Time, error) {
		timeout := time.After(30 * time.Second)
		for {
			select {
			case a, ok := <-arrivals:
				switch {
				case !ok:
					return time.Time{}, fmt.Errorf("watch closed while waiting for %s rv %s", typ, rv)
				case a.err != nil:
					return time.Time{}, a.err
				case a.rv == rv && a.typ == typ:
					return a.at, nil
				case a.rv == rv:
					return time.Time{}, fmt.Errorf("watch delivered %s rv %s, want %s", a.typ, rv, typ)
				}
				foreign++
			case <-timeout:
				return time.Time{}, fmt.Errorf("no watch event for %s rv %s within 30s", typ, rv)
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			}
		}
	}

	// write creates (the first half) or updates one run and returns the
	// resulting object and the event type the watcher should see. Updates are
	// merge patches of a label: they carry no resourceVersion precondition, so
	// status writes by the run controller cannot make them conflict.
	n := samples(watchSamples, b)
	half := n / 2
	objs := make([]*v1alpha1.TerraformRun, 0, n-half)
	write := func(i int) (*v1alpha1.TerraformRun, watch.EventType, error) {
		if i < n-half {
			obj, err := runs.Create(ctx, scale.Run(uniqueName("w")), metav1.CreateOptions{})
			if err == nil {
				created.Add(1)
			}
			return obj, watch.Added, err
		}
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{"bench":"updated-%d"}}}`, i)
		obj, err := runs.Patch(ctx, objs[i-(n-half)].Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return obj, watch.Modified, err
	}

	// Warm-up: the watch is established once the first event arrives.
	for range warmup {
		obj, err := runs.Create(ctx, scale.Run(uniqueName("warm")), metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		created.Add(1)
		if _, err := await(obj.ResourceVersion, watch.Added); err != nil {
			b.Fatal(err)
		}
	}

	fromReturn := make([]time.Duration, 0, n)
	fromCall := make([]time.Duration, 0, n)
	early := 0
	b.ResetTimer()
	for i := range n {
		t0 := time.Now()
		obj, typ, err := write(i)
		returned := time.Now()
		if err != nil {
			b.Fatal(err)
		}
		if typ == watch.Added {
			objs = append(objs, obj)
		}
		at, err := await(obj.ResourceVersion, typ)
		if err != nil {
			b.Fatal(err)
		}
		d := at.Sub(returned)
		if d <= 0 {
			early++
		}
		fromReturn = append(fromReturn, d)
		fromCall = append(fromCall, at.Sub(t0))
	}
	b.StopTimer()
	reportLatency(b, "", fromReturn)
	reportLatency(b, "from-call-", fromCall)
	reportMean(b, fromCall) // fromReturn can be negative; see above
	b.ReportMetric(float64(early), "early-events")
	b.ReportMetric(float64(foreign), "foreign-events")
}
