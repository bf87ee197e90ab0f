package bench

// The harness of the run benchmarks (runs_bench_test.go). Unlike the API
// benchmarks, these need the run controller and a real engine, so each of
// them starts a standalone terrarun-apiserver of its own, with the controller
// and the local executor, on a fresh data directory, and stops it (SIGTERM)
// when it ends. The engine is $TERRARUN_ENGINE (which `make bench` sets), else
// tofu or terraform on PATH; its directory is put first on the server's PATH,
// so that the executors find it by its name. Without an engine the run
// benchmarks fail.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/artifacts/objectstore"
	"github.com/terrarun/terrarun/pkg/artifacts/objectstore/objectstoretest"
	typedv1alpha1 "github.com/terrarun/terrarun/pkg/generated/clientset/versioned/typed/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runrules"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// engineVersion is the first line of `<engine> version`.
func engineVersion(engine string) string {
	out, err := exec.Command(engine, "version").Output()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return line
}

// runServer is a standalone server with the run controller and the local
// executor.
type runServer struct {
	*server
	Engine     string // absolute path
	EngineName string // spec.engine.binary: terraform or tofu
	// HTTP is an HTTP client authenticated with the admin kubeconfig's
	// client certificate, for the streaming subresources.
	HTTP *http.Client
}

// startRunServer starts a server with the controller (extraArgs are appended
// to its command line) and returns it; the caller must call close.
func startRunServer(b *testing.B, extraArgs ...string) *runServer {
	b.Helper()
	engine, err := harness.Engine()
	if err != nil {
		b.Fatalf("%v (make bench finds or builds one with hack/engine.sh)", err)
	}
	name := filepath.Base(engine)
	if name != string(v1alpha1.EngineTerraform) && name != string(v1alpha1.EngineTofu) {
		b.Fatalf("the engine %s is neither terraform nor tofu by name; set TERRARUN_ENGINE to one of them", engine)
	}
	dir, err := binaries()
	if err != nil {
		b.Fatal(err)
	}
	detail(b, "engine %s: %s", engine, engineVersion(engine))
	env := append(os.Environ(), "PATH="+filepath.Dir(engine)+string(os.PathListSeparator)+os.Getenv("PATH"))
	if benchArtifactStore() {
		extraArgs = append(extraArgs, startObjectStore(b).Args...)
		b.Logf("artifacts in the object store (TERRARUN_BENCH_ARTIFACT_STORE=s3)")
	}
	s, err := startServer(filepath.Join(dir, "terrarun-apiserver"), extraArgs, env)
	if err != nil {
		b.Fatal(err)
	}
	rs := &runServer{server: s, Engine: engine, EngineName: name}
	if rs.HTTP, err = rest.HTTPClientFor(s.Config); err != nil {
		rs.close(b)
		b.Fatal(err)
	}
	return rs
}

// benchArtifactStore tells whether the benchmarks keep artifacts in a real
// S3-compatible server ($TERRARUN_BENCH_ARTIFACT_STORE=s3) rather than in
// etcd.
func benchArtifactStore() bool { return os.Getenv("TERRARUN_BENCH_ARTIFACT_STORE") == "s3" }

// benchObjects is a real S3-compatible server (versitygw,
// $TERRARUN_OBJECTSTORE) started for a benchmark.
type benchObjects struct {
	// Args are the server flags that keep the artifacts in its bucket,
	// encrypted, as a deployment with --artifact-store=s3 does.
	Args []string
	// Store is a client of the same bucket with the same key, for the
	// benchmark's own writes through an artifacts.Store.
	Store *objectstore.Store
}

// startObjectStore starts versitygw for the benchmark, with a fresh bucket
// and encryption key.
func startObjectStore(b *testing.B) benchObjects {
	srv := objectstoretest.Start(b)
	dir := b.TempDir()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		b.Fatal(err)
	}
	encoded := base64.StdEncoding.EncodeToString(key)
	keys := filepath.Join(dir, "keys.yaml")
	creds := filepath.Join(dir, "credentials")
	for path, data := range map[string]string{
		keys:  "primary: bench\nkeys:\n  bench: " + encoded + "\n",
		creds: "[default]\naws_access_key_id = " + srv.AccessKey + "\naws_secret_access_key = " + srv.SecretKey + "\n",
	} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	keyring, err := objectstore.NewKeyring("bench", map[string]string{"bench": encoded})
	if err != nil {
		b.Fatal(err)
	}
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		b.Setenv(k, v)
	}
	store, err := objectstore.New(objectstore.Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "terrarun", PathStyle: true, Region: "us-east-1", Keys: keyring})
	if err != nil {
		b.Fatal(err)
	}
	return benchObjects{
		Args: []string{"--artifact-store=s3", "--artifact-store-endpoint=" + srv.Endpoint, "--artifact-store-bucket=" + srv.Bucket,
			"--artifact-store-path-style", "--artifact-store-region=us-east-1", "--artifact-store-credentials-file=" + creds,
			"--artifact-encryption-keys=" + keys},
		Store: store,
	}
}

// close stops the server; it keeps the server's log when the benchmark
// failed and removes the data directory.
func (rs *runServer) close(b *testing.B) {
	if err := rs.stop(); err != nil {
		b.Errorf("stopping the server: %v", err)
	}
	if b.Failed() {
		rs.dumpLog()
	}
	_ = os.RemoveAll(rs.DataDir)
}

// autoRun is an Auto-approved run of the inline configuration config (file
// names and contents).
func (rs *runServer) autoRun(name, workspace string, config map[string]string) *v1alpha1.TerraformRun {
	return &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TerraformRunSpec{
			Source:    v1alpha1.Source{Inline: config},
			Workspace: workspace,
			Approval:  v1alpha1.Approval{Mode: v1alpha1.ApprovalModeAuto},
			Engine:    v1alpha1.Engine{Binary: v1alpha1.EngineBinary(rs.EngineName)},
		},
	}
}

// inline is the configuration of one file, main.tf, that holds tf.
func inline(tf string) map[string]string { return map[string]string{"main.tf": tf} }

func (rs *runServer) runs(namespace string) typedv1alpha1.TerraformRunInterface {
	return rs.Client.TerrarunV1alpha1().TerraformRuns(namespace)
}

// phaseTimes are the times at which a watch first saw each phase of a run.
type phaseTimes map[v1alpha1.RunPhase]time.Time

// watchRun watches the run (created at resourceVersion rv) until it reaches
// one of until or a final phase, and returns it with the time each phase was
// first seen. The watch is re-established if it breaks.
func (rs *runServer) watchRun(ctx context.Context, namespace, name, rv string, until ...v1alpha1.RunPhase) (*v1alpha1.TerraformRun, phaseTimes, error) {
	seen := phaseTimes{}
	runs := rs.runs(namespace)
	done := func(r *v1alpha1.TerraformRun) bool {
		if _, ok := seen[r.Status.Phase]; !ok {
			seen[r.Status.Phase] = time.Now()
		}
		if runrules.Final(r.Status.Phase) {
			return true
		}
		for _, p := range until {
			if r.Status.Phase == p {
				return true
			}
		}
		return false
	}
	for {
		w, err := runs.Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
			ResourceVersion: rv,
		})
		if err != nil {
			return nil, seen, err
		}
		for ev := range w.ResultChan() {
			r, ok := ev.Object.(*v1alpha1.TerraformRun)
			if !ok {
				continue
			}
			rv = r.ResourceVersion
			if done(r) {
				w.Stop()
				return r, seen, nil
			}
		}
		w.Stop()
		if err := ctx.Err(); err != nil {
			return nil, seen, err
		}
		// The watch ended (timeout, compaction): read the run and watch again.
		r, err := runs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, seen, err
		}
		rv = r.ResourceVersion
		if done(r) {
			return r, seen, nil
		}
	}
}

// runPath is the API path of a run's subresource, with a query.
// revision is the etcd revision the server has seen: the resourceVersion of
// a list of runs. Objects and artifacts share the standalone etcd, so its
// growth counts every transaction of a run.
func (rs *runServer) revision(ctx context.Context) (int64, error) {
	list, err := rs.runs("default").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(list.ResourceVersion, 10, 64)
}

func (rs *runServer) runPath(namespace, name, sub string) string {
	return fmt.Sprintf("%s/apis/terrarun.dev/v1alpha1/namespaces/%s/terraformruns/%s/%s", rs.Config.Host, namespace, name, sub)
}

// follow opens GET <run>/logs?follow=true&<query> as the admin user; the
// body streams the log and ends when the stage ends.
func (rs *runServer) follow(ctx context.Context, namespace, name, query string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rs.runPath(namespace, name, "logs?follow=true&"+query), nil)
	if err != nil {
		return nil, err
	}
	resp, err := rs.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, fmt.Errorf("GET logs: %d %s", resp.StatusCode, body)
	}
	return resp.Body, nil
}

// logStream is a streaming POST to a run's logs subresource, authenticated
// with a stage token, as terrarun-executor sends its log: every Write is sent
// as it happens (the body is an io.Pipe).
type logStream struct {
	pw   *io.PipeWriter
	done chan struct{}
	code int
	body string
	err  error
}

func (rs *runServer) openLogStream(ctx context.Context, namespace, name, token, query string) (*logStream, error) {
	c := rest.AnonymousClientConfig(rs.Config)
	c.BearerToken = token
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rs.runPath(namespace, name, "logs?"+query), pr)
	if err != nil {
		return nil, err
	}
	req.ContentLength = -1
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	ls := &logStream{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(ls.done)
		resp, err := hc.Do(req)
		if err != nil {
			ls.err = err
			pr.CloseWithError(err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		ls.code, ls.body = resp.StatusCode, string(b)
		pr.CloseWithError(fmt.Errorf("the server answered %d: %s", resp.StatusCode, b))
	}()
	return ls, nil
}

func (ls *logStream) Write(p []byte) (int, error) { return ls.pw.Write(p) }

// Close ends the body and returns an error unless the server answered 204.
func (ls *logStream) Close() error {
	_ = ls.pw.Close()
	<-ls.done
	if ls.err != nil {
		return ls.err
	}
	if ls.code != http.StatusNoContent {
		return fmt.Errorf("POST logs: %d %s", ls.code, ls.body)
	}
	return nil
}

// detail prints a line of a run benchmark's findings to stdout, prefixed with
// the benchmark's name. (b.Logf output is cut after ten lines, and the
// timelines are longer; with the default -benchtime 1x the benchmark body
// runs before its result line is printed, so the lines do not interleave.)
func detail(b *testing.B, format string, args ...any) {
	msg := strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", "\n    ")
	fmt.Printf("    %s: %s\n", b.Name(), msg)
}

// logLoad logs the load average and reports the 1-minute load as a metric,
// so that every figure has the machine's load next to it.
func logLoad(b *testing.B, when string) {
	b.Helper()
	detail(b, "load average (1m 5m 15m) %s: %s", when, harness.LoadAvg())
	if when == "at the end" {
		b.ReportMetric(harness.Load1(), "load1-end")
	}
}

// memAvailableMiB is MemAvailable of /proc/meminfo in MiB, or -1.
func memAvailableMiB() float64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			fs := strings.Fields(rest)
			if len(fs) > 0 {
				kb, err := strconv.ParseFloat(fs[0], 64)
				if err == nil {
					return kb / 1024
				}
			}
		}
	}
	return -1
}

// ppids maps every process in /proc to its parent.
func ppids() map[int]int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	m := make(map[int]int, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(data), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			m[pid] = pp
		}
	}
	return m
}

// descendants returns root and every process below it.
func descendants(root int) []int {
	children := map[int][]int{}
	for pid, pp := range ppids() {
		children[pp] = append(children[pp], pid)
	}
	out := []int{root}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// treeSample is one sample of the memory of the server and its descendants.
type treeSample struct {
	ServerRSS       float64 // MiB
	TreeRSS         float64 // MiB, the sum of VmRSS (shared pages counted in each process)
	TreeAnon        float64 // MiB, the sum of RssAnon
	Procs           int
	MemAvailableMiB float64
}

// memSampler polls the server's resident set every interval and, every
// treeEvery-th time, the whole process tree (which reads /proc/*/stat of
// every process of the machine, too costly to do every 100ms on a loaded
// 2-core machine).
type memSampler struct {
	stop chan struct{}
	done chan struct{}

	mu   sync.Mutex
	peak treeSample // each field its own peak; MemAvailableMiB the minimum
	n    int        // server samples
	nt   int        // tree samples
	// onSample, when set, sees every sample (from the sampler's goroutine);
	// the tree fields are those of the last tree sample.
	onSample func(treeSample)
}

func startMemSampler(pid int, interval time.Duration, treeEvery int, onSample func(treeSample)) *memSampler {
	m := &memSampler{stop: make(chan struct{}), done: make(chan struct{}), onSample: onSample}
	m.peak.MemAvailableMiB = -1
	go func() {
		defer close(m.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		var last treeSample
		for i := 0; ; i++ {
			last = m.sample(pid, treeEvery > 0 && i%treeEvery == 0, last)
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

func (m *memSampler) sample(pid int, tree bool, last treeSample) treeSample {
	s := last
	if tree {
		s.TreeRSS, s.TreeAnon, s.Procs = 0, 0, 0
		for _, p := range descendants(pid) {
			mem, err := harness.ReadMem(p)
			if err != nil {
				continue // exited, or a zombie
			}
			s.TreeRSS += mem.VmRSS
			s.TreeAnon += mem.RssAnon
			s.Procs++
		}
	}
	if mem, err := harness.ReadMem(pid); err == nil {
		s.ServerRSS = mem.VmRSS
	}
	s.MemAvailableMiB = memAvailableMiB()
	m.mu.Lock()
	m.n++
	if tree {
		m.nt++
	}
	m.peak.ServerRSS = max(m.peak.ServerRSS, s.ServerRSS)
	m.peak.TreeRSS = max(m.peak.TreeRSS, s.TreeRSS)
	m.peak.TreeAnon = max(m.peak.TreeAnon, s.TreeAnon)
	m.peak.Procs = max(m.peak.Procs, s.Procs)
	if m.peak.MemAvailableMiB < 0 || s.MemAvailableMiB < m.peak.MemAvailableMiB {
		m.peak.MemAvailableMiB = s.MemAvailableMiB
	}
	m.mu.Unlock()
	if m.onSample != nil {
		m.onSample(s)
	}
	return s
}

// Stop stops sampling and returns the peaks and the numbers of server and
// tree samples.
func (m *memSampler) Stop() (treeSample, int, int) {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak, m.n, m.nt
}

// vmHWM is the peak resident set (VmHWM) of pid in MiB, or -1.
func vmHWM(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 {
				if kb, err := strconv.ParseFloat(f[0], 64); err == nil {
					return kb / 1024
				}
			}
		}
	}
	return -1
}
