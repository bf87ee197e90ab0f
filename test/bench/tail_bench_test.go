package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/test/internal/scale"
)

const (
	// tailLogBytes is the size of BenchmarkTailOfFinishedLog's log.
	tailLogBytes = 100 << 20
	// tailLineBytes is the length of each of its lines, newline included.
	tailLineBytes = 100
	tailSamples   = 50
)

// BenchmarkTailOfFinishedLog times the last 100 lines of a finished log of
// 100 MB as the API serves them (GET <run>/logs?stage=plan&tailLines=100,
// to the body's last byte), side by side: a server with the object store,
// where the closed log has moved into one encrypted object read with range
// reads, and a server with etcd alone, where it is 400 chunks of 256 KiB.
// Both are standalone servers without the run controller; the benchmark
// writes each log through an artifacts.Store of the server's etcd (and
// bucket), as the server writes a stage's log, closes it, and moves it into
// the object store as the server does when a stage ends. Requests
// alternate between the servers, tailSamples each; the body is checked
// against the log's last 100 lines.
func BenchmarkTailOfFinishedLog(b *testing.B) {
	bin, err := binaries()
	if err != nil {
		b.Fatal(err)
	}
	objs := startObjectStore(b)
	ctx := boundedCtx(b, 20*time.Minute)
	log, want := tailLog()
	arms := []struct {
		name    string
		args    []string
		objects bool
		url     string
		http    *http.Client
		lat     []time.Duration
	}{
		{name: "object store", args: objs.Args, objects: true},
		{name: "etcd", args: nil},
	}
	for i := range arms {
		a := &arms[i]
		s, err := startServer(bin+"/terrarun-apiserver", append([]string{"--run-controller=false"}, a.args...), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			if err := s.stop(); err != nil {
				b.Error(err)
			}
		}()
		etcd, _, err := s.etcdClient()
		if err != nil {
			b.Fatal(err)
		}
		defer etcd.Close()
		opts := artifacts.Options{Limits: artifacts.Limits{Log: 2 * tailLogBytes, RunLogs: 2 * tailLogBytes}}
		if a.objects {
			opts.Objects = objs.Store
		}
		store := artifacts.New(etcd, opts)
		run, err := s.Client.TerrarunV1alpha1().TerraformRuns("default").Create(ctx, scale.Run("tail"), metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		ref := artifacts.RunRef{Namespace: run.Namespace, Name: run.Name, UID: string(run.UID)}
		t0 := time.Now()
		for p := log; len(p) > 0; {
			n := min(len(p), 256<<10)
			if err := store.AppendLog(ctx, ref, "plan", 1, p[:n]); err != nil {
				b.Fatal(err)
			}
			p = p[n:]
		}
		if err := store.CloseLog(ctx, ref, "plan", 1); err != nil {
			b.Fatal(err)
		}
		if a.objects {
			moved, err := store.MigrateToObjects(ctx)
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("%s: the log moved into the object store (%+v)", a.name, moved)
		}
		b.Logf("%s: %d MiB stored in %.1f s", a.name, len(log)>>20, time.Since(t0).Seconds())
		a.url = strings.TrimSuffix(s.Config.Host, "/") + "/apis/terrarun.dev/v1alpha1/namespaces/default/terraformruns/tail/logs?stage=plan&tailLines=100"
		if a.http, err = rest.HTTPClientFor(s.Config); err != nil {
			b.Fatal(err)
		}
	}
	logLoad(b, "at the start")
	b.ResetTimer()
	for i := range samples(tailSamples, b) + warmup {
		for j := range arms {
			a := &arms[(i+j)%len(arms)]
			d, body, err := timedRead(ctx, a.http, a.url)
			if err != nil {
				b.Fatalf("%s: %v", a.name, err)
			}
			if !bytes.Equal(body, want) {
				b.Fatalf("%s: the last 100 lines served are %d bytes, want %d: %.200q", a.name, len(body), len(want), body)
			}
			if i >= warmup {
				a.lat = append(a.lat, d)
			}
		}
	}
	b.StopTimer()
	logLoad(b, "at the end")
	reportLatency(b, "objects-", arms[0].lat)
	reportLatency(b, "etcd-", arms[1].lat)
	b.ReportMetric(ms(median(arms[0].lat))/ms(median(arms[1].lat)), "objects/etcd-median")
}

// tailLog is a log of tailLogBytes in lines of tailLineBytes, and its last
// 100 lines.
func tailLog() (log, last100 []byte) {
	var buf bytes.Buffer
	buf.Grow(tailLogBytes)
	pad := strings.Repeat("x", tailLineBytes-len("line 0000000000: \n"))
	for i := 0; buf.Len() < tailLogBytes; i++ {
		fmt.Fprintf(&buf, "line %010d: %s\n", i, pad)
	}
	log = buf.Bytes()
	return log, log[len(log)-100*tailLineBytes:]
}

// timedRead GETs url and returns the time to its body's last byte and the
// body.
func timedRead(ctx context.Context, hc *http.Client, url string) (time.Duration, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	t0 := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	d := time.Since(t0)
	if err != nil {
		return 0, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, nil, fmt.Errorf("GET %s: %s: %.500s", url, resp.Status, body)
	}
	return d, body, nil
}
