package benchcrd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// Sample counts, fixed rather than derived from b.N (-benchtime 1x still
// yields percentiles). Percentiles are nearest-rank; with fewer than 100
// samples the p99 is the slowest.
const (
	fillSize     = 10000 // objects stored on each side
	fillBatch    = 1000  // creates per batch; the sides take turns
	creators     = 16    // concurrent creators
	getSamples   = 1000  // GETs per side, in getBatches turns
	getBatches   = 5
	listSamples  = 30 // full LISTs of the 10,000, per side and format
	pagedSamples = 20 // walks through pages of pageSize, per side
	pageSize     = 500
	warmup       = 10 // unmeasured operations per side before each figure
)

// Targets of issue 11, as terrarun / CRD ratios.
const (
	listTargetJSON     = 0.2 // LIST 10k p99, both in JSON
	listTargetProtobuf = 0.1 // LIST 10k p99, terrarun in protobuf
	rssTarget          = 0.2 // RSS growth per 1,000 stored objects
)

// side is one way to the same kind: the CRD in kube-apiserver, terrarun
// directly, or terrarun through kube-apiserver's aggregator.
type side struct {
	name       string
	apiVersion string
	// collection is the URL of the namespace's TerraformRuns.
	collection string
}

// sides are the three ways to the benchmark's namespace.
func sides(e *environment) (crd, terrarun, aggregated side) {
	trGV := v1alpha1.SchemeGroupVersion
	crd = side{"crd", crdGV.String(), collectionURL(e.kubeURL, crdGV, namespace)}
	terrarun = side{"terrarun", trGV.String(), collectionURL(e.trURL, trGV, namespace)}
	aggregated = side{"aggregated", trGV.String(), collectionURL(e.kubeURL, trGV, namespace)}
	return
}

// collectionURL is the URL of the TerraformRuns of namespace ns in gv on the
// server at base.
func collectionURL(base string, gv schema.GroupVersion, ns string) string {
	return base + "/apis/" + gv.String() + "/namespaces/" + ns + "/terraformruns"
}

// body is the create body of object name: the existing API benchmarks' run
// (test/bench), a 191-byte inline configuration, as client-go sends it.
func (s side) body(name string) ([]byte, error) {
	return json.Marshal(&v1alpha1.TerraformRun{
		TypeMeta:   metav1.TypeMeta{APIVersion: s.apiVersion, Kind: "TerraformRun"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.TerraformRunSpec{Source: v1alpha1.Source{Inline: map[string]string{"main.tf": harness.BenchTF}}},
	})
}

// jsonDecoder decodes both sides' JSON into terrarun's Go types.
var jsonDecoder = jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, scheme, scheme, jsonserializer.SerializerOptions{})

// format is a wire format of the LIST figures.
type format struct {
	name, accept string
	decoder      runtime.Decoder
	sides        []side
}

// formats are JSON on every side and, when terrarun answers a protobuf
// request with protobuf (probed once), protobuf on terrarun's sides; a CRD
// is never served in protobuf.
func formats(ctx context.Context, b *testing.B, e *environment) []format {
	crd, tr, agg := sides(e)
	fs := []format{{"json", "application/json", jsonDecoder, []side{crd, tr, agg}}}
	const pb = "application/vnd.kubernetes.protobuf"
	got, err := probe(ctx, e, tr.collection+"?limit=1", pb)
	if err != nil {
		b.Fatal(err)
	}
	if strings.HasPrefix(got, pb) {
		fs = append(fs, format{"protobuf", pb, protobuf.NewSerializer(scheme, scheme), []side{tr, agg}})
		detail(b, "protobuf: served by terrarun-apiserver, measured")
	} else {
		detail(b, "protobuf: NOT served by terrarun-apiserver (Accept: %s answered %s): terrarun is measured in JSON only, the protobuf target is not measured", pb, got)
	}
	return fs
}

// probe GETs url with Accept accept and says what came back: the
// Content-Type of a 200, else the status (406 Not Acceptable from a server
// that does not serve the format).
func probe(ctx context.Context, e *environment, url, accept string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", accept)
	resp, err := e.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return resp.Header.Get("Content-Type"), nil
	case http.StatusNotAcceptable:
		return resp.Status, nil
	default:
		return "", fmt.Errorf("GET %s with Accept %s: %s", url, accept, resp.Status)
	}
}

// serverState is what the fill measures of one side before and after.
type serverState struct {
	rss    harness.MemStatus
	heap   float64 // MiB, go_memstats_heap_alloc_bytes after a forced GC
	etcdDB float64 // MiB, etcd_mvcc_db_total_size_in_bytes
	inUse  float64 // MiB, etcd_mvcc_db_total_size_in_use_in_bytes
}

// fillResult is the fill of one side.
type fillResult struct {
	lat           []time.Duration
	elapsed       time.Duration // the sum of its batches' wall times
	before, after serverState
}

var (
	fillOnce sync.Once
	fills    map[string]*fillResult
	fillErr  error
)

// fill stores fillSize objects on each side, `creators` at a time, in
// batches of fillBatch that alternate between the sides (the side that goes
// first alternates too), and measures each server before and after.
func fill(b *testing.B, e *environment) map[string]*fillResult {
	fillOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		crd, tr, _ := sides(e)
		fills = map[string]*fillResult{crd.name: {}, tr.name: {}}
		for _, s := range []side{crd, tr} {
			if _, _, fillErr = createMany(ctx, e, s, "warm", warmup, 1); fillErr != nil {
				return
			}
			if fills[s.name].before, fillErr = e.state(ctx, s, "before"); fillErr != nil {
				return
			}
		}
		for batch := range fillSize / fillBatch {
			order := []side{crd, tr}
			if batch%2 == 1 {
				order = []side{tr, crd}
			}
			for _, s := range order {
				lat, elapsed, err := createMany(ctx, e, s, fmt.Sprintf("r%02d", batch), fillBatch, creators)
				if err != nil {
					fillErr = err
					return
				}
				f := fills[s.name]
				f.lat = append(f.lat, lat...)
				f.elapsed += elapsed
			}
		}
		for _, s := range []side{crd, tr} {
			if fills[s.name].after, fillErr = e.state(ctx, s, "after"); fillErr != nil {
				return
			}
		}
	})
	if fillErr != nil {
		b.Fatalf("storing %d objects on each side: %v", fillSize, fillErr)
	}
	return fills
}

// state measures the server and the etcd of side s, at the moment called
// when (before or after the fill). With $TERRARUN_BENCH_CRD_PROFILES set to
// a directory, it keeps the server's live heap profile there as
// <side>-<when>.heap.pb.gz (read with `go tool pprof`).
func (e *environment) state(ctx context.Context, s side, when string) (serverState, error) {
	var st serverState
	proc, server, etcd := e.kubeAPI, e.kubeURL, e.kubeEtcd
	if s.name != "crd" {
		proc, server, etcd = e.terrarun, e.trURL, e.trEtcd
	}
	var err error
	if st.rss, err = harness.ReadMem(proc.Cmd.Process.Pid); err != nil {
		return st, err
	}
	// A forced collection first (pprof's gc=1), so that the heap is the live one.
	profile, err := e.get(ctx, server+"/debug/pprof/heap?gc=1", "")
	if err != nil {
		return st, fmt.Errorf("forcing a GC (profiling must be on): %w", err)
	}
	if dir := os.Getenv(profilesEnv); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, s.name+"-"+when+".heap.pb.gz"), profile, 0o644); err != nil {
			return st, fmt.Errorf("keeping the heap profile (%s): %w", profilesEnv, err)
		}
	}
	metrics, err := e.get(ctx, server+"/metrics", "")
	if err != nil {
		return st, err
	}
	if st.heap, err = metric(metrics, "go_memstats_heap_alloc_bytes"); err != nil {
		return st, fmt.Errorf("%s: %w", server, err)
	}
	resp, err := http.Get(etcd + "/metrics")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	etcdMetrics, err := io.ReadAll(resp.Body)
	if err != nil {
		return st, err
	}
	if st.etcdDB, err = metric(etcdMetrics, "etcd_mvcc_db_total_size_in_bytes"); err != nil {
		return st, err
	}
	st.inUse, err = metric(etcdMetrics, "etcd_mvcc_db_total_size_in_use_in_bytes")
	return st, err
}

// metric is the value, in MiB, of the unlabelled sample name in a
// Prometheus text exposition.
func metric(exposition []byte, name string) (float64, error) {
	for line := range strings.Lines(string(exposition)) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f / (1 << 20), err
		}
	}
	return 0, fmt.Errorf("no metric %s", name)
}

// createMany creates n objects named <prefix>-<i> on side s with `workers`
// concurrent creators; it returns each create's latency and the wall time.
func createMany(ctx context.Context, e *environment, s side, prefix string, n, workers int) ([]time.Duration, time.Duration, error) {
	return harness.Concurrently(ctx, n, workers, func(ctx context.Context, i int) error {
		body, err := s.body(fmt.Sprintf("%s-%05d", prefix, i))
		if err != nil {
			return err
		}
		if err := e.postRaw(ctx, s.collection, body); err != nil {
			return fmt.Errorf("%s: create %d: %w", s.name, i, err)
		}
		return nil
	})
}

// BenchmarkCRD compares terrarun with the CRD, figure by figure; each
// sub-benchmark reports both sides and their ratio (terrarun / CRD).
func BenchmarkCRD(b *testing.B) {
	b.Run("Create", benchCreate)
	b.Run("Get", benchGet)
	b.Run("List", benchList)
	b.Run("ListPaged", benchListPaged)
	b.Run("Memory", benchMemory)
	b.Run("Etcd", benchEtcd)
}

// benchCreate: the fill's creates, 16 concurrent clients.
func benchCreate(b *testing.B) {
	e := getEnv(b)
	defer logLoad(b)()
	f := fill(b, e)
	crd, tr := f["crd"], f["terrarun"]
	rate := func(r *fillResult) float64 { return float64(len(r.lat)) / r.elapsed.Seconds() }
	compare(b, "creates/s, 16 clients", "creates/s", rate(tr), rate(crd))
	compareLatency(b, "create latency, 16 clients", "create-", tr.lat, crd.lat)
}

// benchGet: serial GETs of one stored object (a consistent read), decoded,
// in turns of getSamples/getBatches per side.
func benchGet(b *testing.B) {
	ctx := benchCtx(b)
	e := getEnv(b)
	fill(b, e)
	defer logLoad(b)()
	crd, tr, _ := sides(e)
	get := func(s side) ([]byte, error) {
		body, err := e.get(ctx, s.collection+"/r00-00000", "application/json")
		if err != nil {
			return nil, err
		}
		var run v1alpha1.TerraformRun
		if _, _, err := jsonDecoder.Decode(body, nil, &run); err != nil {
			return nil, fmt.Errorf("%s: decoding: %w", s.name, err)
		}
		return body, nil
	}
	lat := map[string][]time.Duration{}
	size := map[string]int{}
	for _, s := range []side{crd, tr} {
		var body []byte
		for range warmup {
			var err error
			if body, err = get(s); err != nil {
				b.Fatal(err)
			}
		}
		size[s.name] = len(body)
		detail(b, "%s serves the object as %s", s.name, body)
	}
	for batch := range getBatches {
		order := []side{crd, tr}
		if batch%2 == 1 {
			order = []side{tr, crd}
		}
		for _, s := range order {
			for range getSamples / getBatches {
				t0 := time.Now()
				if _, err := get(s); err != nil {
					b.Fatal(err)
				}
				lat[s.name] = append(lat[s.name], time.Since(t0))
			}
		}
	}
	compareLatency(b, "GET", "", lat["terrarun"], lat["crd"])
	compare(b, "object as served, JSON (bytes)", "object-bytes", float64(size["terrarun"]), float64(size["crd"]))
}

// benchList: full LISTs of the 10,000 (plus the warm-up objects) in every
// format and on every side, the order rotating each sample: the time to the
// body read, and to it decoded into a TerraformRunList.
func benchList(b *testing.B) {
	ctx := benchCtx(b)
	e := getEnv(b)
	fill(b, e)
	defer logLoad(b)()
	type combo struct {
		f format
		s side
	}
	var combos []combo
	for _, f := range formats(ctx, b, e) {
		for _, s := range f.sides {
			combos = append(combos, combo{f, s})
		}
	}
	list := func(c combo) (read, decoded time.Duration, size int, err error) {
		var l v1alpha1.TerraformRunList
		if read, decoded, size, err = harness.TimedGet(ctx, e.client, c.s.collection, c.f.accept, c.f.decoder, &l); err != nil {
			return 0, 0, 0, fmt.Errorf("%s: %w", c.s.name, err)
		}
		if want := fillSize + warmup; len(l.Items) != want {
			return 0, 0, 0, fmt.Errorf("%s: the %s list has %d objects, want %d", c.s.name, c.f.name, len(l.Items), want)
		}
		return read, decoded, size, nil
	}
	for _, c := range combos {
		if _, _, _, err := list(c); err != nil {
			b.Fatal(err)
		}
	}
	reads := map[string][]time.Duration{}
	decodes := map[string][]time.Duration{}
	sizes := map[string]int{}
	for i := range listSamples {
		for j := range combos {
			c := combos[(i+j)%len(combos)]
			r, d, n, err := list(c)
			if err != nil {
				b.Fatal(err)
			}
			key := c.s.name + "-" + c.f.name
			reads[key] = append(reads[key], r)
			decodes[key] = append(decodes[key], d)
			sizes[key] = n
		}
	}
	for _, c := range combos {
		if c.s.name == "crd" {
			continue
		}
		key := c.s.name + "-" + c.f.name
		what := "LIST 10k, " + strings.Replace(key, "-", " in ", 1)
		compareLatency(b, what+", body read", key+"-read-", reads[key], reads["crd-json"])
		compareLatency(b, what+", decoded", key+"-decoded-", decodes[key], decodes["crd-json"])
		compare(b, what+", body (MiB)", key+"-MiB", float64(sizes[key])/(1<<20), float64(sizes["crd-json"])/(1<<20))
		target := listTargetJSON
		switch {
		case c.s.name == "terrarun" && c.f.name == "protobuf":
			target = listTargetProtobuf
		case c.s.name != "terrarun":
			continue
		}
		for _, m := range []struct {
			what string
			lat  map[string][]time.Duration
		}{{"body read", reads}, {"decoded", decodes}} {
			ratio := p(m.lat[key], 0.99) / p(m.lat["crd-json"], 0.99)
			verdict := "met"
			if ratio > target {
				verdict = "MISSED"
			}
			detail(b, "target: LIST 10k p99 (%s), terrarun in %s / CRD in JSON ≤ %.2f: %.3f, %s", m.what, c.f.name, target, ratio, verdict)
		}
	}
	if len(combos) == 3 {
		detail(b, "target: LIST 10k p99, terrarun in protobuf / CRD in JSON ≤ %.2f: not measured, terrarun does not serve protobuf", listTargetProtobuf)
	}
	// What the LISTs left in memory: terrarun's list cache keeps the items'
	// encodings (the fill's figures in Memory are taken before any LIST).
	tr, err := harness.ReadMem(e.terrarun.Cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	crd, err := harness.ReadMem(e.kubeAPI.Cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	compare(b, "RSS after the LISTs (MiB)", "rss-after-lists-MiB", tr.VmRSS, crd.VmRSS)
	metrics, err := e.get(ctx, e.trURL+"/metrics", "")
	if err != nil {
		b.Fatal(err)
	}
	cached, err := metric(metrics, "terrarun_list_cache_bytes")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(cached, "terrarun-list-cache-MiB")
	detail(b, "terrarun's list cache after the LISTs: %.1f MiB", cached)
}

// benchListPaged: walks through all objects in pages of pageSize
// (limit/continue), decoded, the sides taking turns.
func benchListPaged(b *testing.B) {
	ctx := benchCtx(b)
	e := getEnv(b)
	fill(b, e)
	defer logLoad(b)()
	crd, tr, _ := sides(e)
	walk := func(s side) error {
		total, cont := 0, ""
		for {
			u := s.collection + "?limit=" + strconv.Itoa(pageSize)
			if cont != "" {
				u += "&continue=" + url.QueryEscape(cont)
			}
			body, err := e.get(ctx, u, "application/json")
			if err != nil {
				return err
			}
			var l v1alpha1.TerraformRunList
			if _, _, err := jsonDecoder.Decode(body, nil, &l); err != nil {
				return fmt.Errorf("%s: decoding a page: %w", s.name, err)
			}
			total += len(l.Items)
			if cont = l.Continue; cont == "" {
				break
			}
		}
		if want := fillSize + warmup; total != want {
			return fmt.Errorf("%s: the pages held %d objects, want %d", s.name, total, want)
		}
		return nil
	}
	lat := map[string][]time.Duration{}
	for i := range pagedSamples + 1 {
		order := []side{crd, tr}
		if i%2 == 1 {
			order = []side{tr, crd}
		}
		for _, s := range order {
			t0 := time.Now()
			if err := walk(s); err != nil {
				b.Fatal(err)
			}
			if i > 0 { // the first walk of each is the warm-up
				lat[s.name] = append(lat[s.name], time.Since(t0))
			}
		}
	}
	compareLatency(b, fmt.Sprintf("LIST 10k in pages of %d, decoded", pageSize), "paged-", lat["terrarun"], lat["crd"])
}

// benchMemory: the server's resident set and live heap before and after
// the fill, as growth per 1,000 stored objects.
func benchMemory(b *testing.B) {
	e := getEnv(b)
	defer logLoad(b)()
	f := fill(b, e)
	crd, tr := f["crd"], f["terrarun"]
	per1k := func(before, after float64) float64 { return (after - before) / fillSize * 1000 }
	compare(b, "RSS before the fill (MiB)", "rss-before-MiB", tr.before.rss.VmRSS, crd.before.rss.VmRSS)
	compare(b, "RSS after the fill (MiB)", "rss-after-MiB", tr.after.rss.VmRSS, crd.after.rss.VmRSS)
	rss := compare(b, "RSS growth per 1,000 objects (MiB)", "rss-MiB-per-1k", per1k(tr.before.rss.VmRSS, tr.after.rss.VmRSS), per1k(crd.before.rss.VmRSS, crd.after.rss.VmRSS))
	compare(b, "RssAnon growth per 1,000 objects (MiB)", "rss-anon-MiB-per-1k", per1k(tr.before.rss.RssAnon, tr.after.rss.RssAnon), per1k(crd.before.rss.RssAnon, crd.after.rss.RssAnon))
	compare(b, "live heap after a forced GC, after the fill (MiB)", "heap-after-MiB", tr.after.heap, crd.after.heap)
	compare(b, "live heap growth per 1,000 objects (MiB)", "heap-MiB-per-1k", per1k(tr.before.heap, tr.after.heap), per1k(crd.before.heap, crd.after.heap))
	verdict := "met"
	if rss > rssTarget {
		verdict = "MISSED"
	}
	detail(b, "target: RSS growth per 1,000 stored objects, terrarun / CRD ≤ %.2f: %.3f, %s", rssTarget, rss, verdict)
}

// benchEtcd: each side's etcd after the fill, and its growth.
func benchEtcd(b *testing.B) {
	e := getEnv(b)
	defer logLoad(b)()
	f := fill(b, e)
	crd, tr := f["crd"], f["terrarun"]
	compare(b, "etcd db after the fill (MiB)", "etcd-db-MiB", tr.after.etcdDB, crd.after.etcdDB)
	compare(b, "etcd db growth per 1,000 objects (MiB)", "etcd-db-MiB-per-1k", (tr.after.etcdDB-tr.before.etcdDB)/fillSize*1000, (crd.after.etcdDB-crd.before.etcdDB)/fillSize*1000)
	compare(b, "etcd in use growth per 1,000 objects (MiB)", "etcd-in-use-MiB-per-1k", (tr.after.inUse-tr.before.inUse)/fillSize*1000, (crd.after.inUse-crd.before.inUse)/fillSize*1000)
}

// compare reports one figure of both sides and their ratio, and prints it as
// a row of the table in docs/benchmarks.md; it returns the ratio.
func compare(b *testing.B, what, unit string, terrarun, crd float64) float64 {
	ratio := terrarun / crd
	b.ReportMetric(terrarun, "terrarun-"+unit)
	b.ReportMetric(crd, "crd-"+unit)
	b.ReportMetric(ratio, "ratio-"+unit)
	fmt.Printf("| %s | %.4g | %.4g | %.3f |\n", what, terrarun, crd, ratio)
	return ratio
}

// compareLatency compares the p50 and p99 of two samples.
func compareLatency(b *testing.B, what, prefix string, terrarun, crd []time.Duration) {
	compare(b, what+", p50 (ms)", prefix+"p50-ms", p(terrarun, 0.50), p(crd, 0.50))
	compare(b, what+", p99 (ms)", prefix+"p99-ms", p(terrarun, 0.99), p(crd, 0.99))
}

// p is the nearest-rank percentile q of lat in milliseconds.
func p(lat []time.Duration, q float64) float64 {
	sorted := slices.Clone(lat)
	slices.Sort(sorted)
	return float64(harness.Percentile(sorted, q)) / float64(time.Millisecond)
}

// benchCtx bounds a figure in time.
func benchCtx(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

// logLoad logs the load average and reports the 1-minute load as
// load1-start now and as load1-end when the returned function is called.
func logLoad(b *testing.B) func() {
	detail(b, "load average (1m 5m 15m) at the start: %s", harness.LoadAvg())
	b.ReportMetric(harness.Load1(), "load1-start")
	return func() {
		detail(b, "load average (1m 5m 15m) at the end: %s", harness.LoadAvg())
		b.ReportMetric(harness.Load1(), "load1-end")
	}
}

// detail prints a line of the benchmark's output.
func detail(b *testing.B, format string, args ...any) {
	fmt.Printf("    %s: %s\n", b.Name(), fmt.Sprintf(format, args...))
}
