package benchcrd

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
	"github.com/terrarun/terrarun/test/internal/scale"
)

// Targets of BenchmarkStoredRuns (issue 11): with 100,000 runs stored, the
// server's RSS and the p99 of a LIST of a 1,000-run namespace.
const (
	storedRSSTargetMiB = 1024
	storedListTarget   = 100 * time.Millisecond
	defaultStoredRuns  = 100000
	storedCheckpoints  = 5
)

// BenchmarkStoredRuns is test/bench's StoredRuns in the topology the chart
// deploys: terrarun-apiserver behind kube-apiserver, with an etcd of its own
// in another process, so that the server's RSS is its own and not the
// embedded etcd's too. It stores TERRARUN_BENCH_SCALE_RUNS finished runs
// (default 100,000; a multiple of 5,000), with their artifacts and logs
// written to terrarun's etcd, 16 at a time through the server directly, and
// at each fifth measures the server's RSS and live heap (after a forced GC),
// its etcd's size, and a LIST of one 1,000-run namespace in JSON and in
// protobuf; then, the burst over, the server's memory once more when the
// watch cache's history of it has aged out. `make bench-crd BENCH=StoredRuns`.
func BenchmarkStoredRuns(b *testing.B) {
	total := defaultStoredRuns
	if v := os.Getenv("TERRARUN_BENCH_SCALE_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < scale.RunsPerNamespace*storedCheckpoints || n%(scale.RunsPerNamespace*storedCheckpoints) != 0 {
			b.Fatalf("TERRARUN_BENCH_SCALE_RUNS=%q: want a multiple of %d", v, scale.RunsPerNamespace*storedCheckpoints)
		}
		total = n
	}
	e := getEnv(b)
	defer logLoad(b)()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()

	// The namespaces, where kube-apiserver knows them (terrarun's
	// NamespaceLifecycle admission asks there).
	for i := 1; i <= total; i += scale.RunsPerNamespace {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scale.Namespace(i)}}
		if _, err := e.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(e.config)
	cfg.Host = e.trURL
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{e.trEtcd}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer etcd.Close()
	store := artifacts.New(etcd, artifacts.Options{})
	_, tr, _ := sides(e)
	art := scale.NewArtifacts()
	detail(b, "per run: %d bytes of artifacts and logs", art.Size())
	detail(b, "%8s %10s %10s %10s %10s %12s %12s %12s %12s %12s %12s %10s", "runs", "etcd-MiB", "rss-MiB", "anon-MiB", "heap-MiB", "list1k-p50", "list1k-p99", "read-p99", "pb-list-p50", "pb-list-p99", "pb-read-p99", "store-s")

	type point struct {
		runs  int
		st    serverState
		lists scale.Lists
	}
	var first, last point
	step := total / storedCheckpoints
	started := time.Now()
	for cp := 1; cp <= storedCheckpoints; cp++ {
		t0 := time.Now()
		if err := scale.Store(ctx, client, store, art, last.runs, step); err != nil {
			b.Fatal(err)
		}
		stored := time.Since(t0)
		pt := point{runs: last.runs + step}
		if pt.st, err = e.state(ctx, tr, fmt.Sprintf("stored-%d", pt.runs)); err != nil {
			b.Fatal(err)
		}
		if pt.lists, err = scale.ListLatencies(ctx, cfg); err != nil {
			b.Fatal(err)
		}
		l := pt.lists
		detail(b, "%8d %10.1f %10.1f %10.1f %10.1f %12.1f %12.1f %12.1f %12.1f %12.1f %12.1f %10.1f", pt.runs, pt.st.etcdDB, pt.st.rss.VmRSS, pt.st.rss.RssAnon, pt.st.heap,
			msOf(l.JSONDecoded[0]), msOf(l.JSONDecoded[1]), msOf(l.JSONRead[1]), msOf(l.ProtobufDecoded[0]), msOf(l.ProtobufDecoded[1]), msOf(l.ProtobufRead[1]), stored.Seconds())
		if cp == 1 {
			first = pt
		}
		last = pt
	}
	detail(b, "stored %d runs in %s", last.runs, time.Since(started).Round(time.Second))

	// Settled: the watch cache keeps the events of the last 75 s, with a
	// snapshot of its store for each, and drops them only as new events
	// arrive. After the burst, one write once they have aged shows what the
	// stored runs themselves cost.
	time.Sleep(80 * time.Second)
	if _, err := client.TerrarunV1alpha1().TerraformRuns(scale.Namespace(1)).Create(ctx, scale.Run("settle"), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	settled, err := e.state(ctx, tr, "settled")
	if err != nil {
		b.Fatal(err)
	}
	detail(b, "settled (80 s later, after one more write): rss %.1f MiB, anon %.1f MiB, live heap %.1f MiB", settled.rss.VmRSS, settled.rss.RssAnon, settled.heap)

	perRun := func(a, z float64) float64 { return (z - a) * 1024 / float64(last.runs-first.runs) }
	b.ReportMetric(float64(last.runs), "runs")
	b.ReportMetric(last.st.rss.VmRSS, "rss-MiB")
	b.ReportMetric(perRun(first.st.rss.VmRSS, last.st.rss.VmRSS), "rss-KiB/run")
	b.ReportMetric(last.st.heap, "heap-MiB")
	b.ReportMetric(perRun(first.st.heap, last.st.heap), "heap-KiB/run")
	b.ReportMetric(last.st.etcdDB, "etcd-MiB")
	b.ReportMetric(settled.rss.VmRSS, "settled-rss-MiB")
	b.ReportMetric(settled.heap, "settled-heap-MiB")
	b.ReportMetric(msOf(last.lists.JSONDecoded[1]), "list1k-p99-ms")
	b.ReportMetric(msOf(last.lists.JSONRead[1]), "list1k-read-p99-ms")
	b.ReportMetric(msOf(last.lists.ProtobufDecoded[1]), "list1k-protobuf-p99-ms")
	b.ReportMetric(msOf(last.lists.ProtobufRead[1]), "list1k-protobuf-read-p99-ms")
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	detail(b, "target: server RSS with %d runs ≤ %d MiB: %.0f MiB right after the stores, %s; %.0f MiB settled, %s", last.runs, storedRSSTargetMiB,
		last.st.rss.VmRSS, verdict(last.st.rss.VmRSS <= storedRSSTargetMiB), settled.rss.VmRSS, verdict(settled.rss.VmRSS <= storedRSSTargetMiB))
	for _, f := range []struct {
		what string
		p99  time.Duration
	}{
		{"JSON, decoded", last.lists.JSONDecoded[1]}, {"JSON, body read", last.lists.JSONRead[1]},
		{"protobuf, decoded", last.lists.ProtobufDecoded[1]}, {"protobuf, body read", last.lists.ProtobufRead[1]},
	} {
		detail(b, "target: LIST of a 1,000-run namespace, p99 ≤ %s: %s %.0f ms, %s", storedListTarget, f.what, msOf(f.p99), verdict(f.p99 <= storedListTarget))
	}
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
