package artifacts

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// signalWriter reports every write on a channel.
type signalWriter struct{ got chan int }

func (w signalWriter) Write(p []byte) (int, error) {
	w.got <- len(p)
	return len(p), nil
}

func (signalWriter) Flush() {}

// BenchmarkLogFollowLatency measures the time from the start of an AppendLog
// of one short line until a follower (on its own etcd client, as on another
// replica) has it written to its writer. It reports the p50 and p99 in µs.
func BenchmarkLogFollowLatency(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cli := startEtcd(b)
	writer := New(cli, Options{})
	reader := New(newClient(b, cli.Endpoints()[0]), Options{})
	run := RunRef{Namespace: "bench", Name: "latency", UID: "u1"}

	w := signalWriter{got: make(chan int, 1)}
	done := make(chan error, 1)
	go func() { done <- reader.StreamLog(ctx, run, "plan", 0, LogOptions{Follow: true}, w) }()
	// Warm up: the log is created and the follower's watch delivers.
	for i := 0; i < 20; i++ {
		if err := writer.AppendLog(ctx, run, "plan", 0, []byte("warm-up\n")); err != nil {
			b.Fatal(err)
		}
		<-w.got
	}

	const samples = 500
	lat := make([]time.Duration, 0, samples*b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := 0; j < samples; j++ {
			line := []byte(fmt.Sprintf("2026-01-01T00:00:00Z aws_instance.web[%d]: Still creating... [%ds elapsed]\n", j, i))
			start := time.Now()
			if err := writer.AppendLog(ctx, run, "plan", 0, line); err != nil {
				b.Fatal(err)
			}
			select {
			case <-w.got:
			case <-time.After(10 * time.Second):
				b.Fatal("follower did not receive a line within 10s")
			}
			lat = append(lat, time.Since(start))
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[int(float64(len(lat)-1)*p)].Nanoseconds()) / 1e3
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	if err := writer.CloseLog(ctx, run, "plan", 0); err != nil {
		b.Fatal(err)
	}
	go func() {
		for range w.got {
		}
	}()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLogThroughput appends 20 MiB in 64 KiB pieces while one follower
// reads the log, and reports the throughput until the follower has all of it.
func BenchmarkLogThroughput(b *testing.B) {
	const total, piece = 20 << 20, 64 << 10
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cli := startEtcd(b)
	writer := New(cli, Options{})
	reader := New(newClient(b, cli.Endpoints()[0]), Options{})
	data := randomBytes(b, piece)

	b.SetBytes(total)
	b.ResetTimer()
	var elapsed time.Duration
	for i := 0; i < b.N; i++ {
		run := RunRef{Namespace: "bench", Name: "throughput", UID: fmt.Sprintf("u%d", i)}
		received := make(chan int, 1024)
		done := make(chan error, 1)
		go func() {
			done <- reader.StreamLog(ctx, run, "apply", 0, LogOptions{Follow: true}, signalWriter{got: received})
			close(received)
		}()
		var got int
		counted := make(chan struct{})
		go func() {
			for n := range received {
				got += n
			}
			close(counted)
		}()
		start := time.Now()
		for sent := 0; sent < total; sent += piece {
			if err := writer.AppendLog(ctx, run, "apply", 0, data); err != nil {
				b.Fatal(err)
			}
		}
		if err := writer.CloseLog(ctx, run, "apply", 0); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		<-counted
		elapsed += time.Since(start)
		if got != total {
			b.Fatalf("follower received %d bytes, want %d", got, total)
		}
		b.StopTimer()
		if err := writer.DeleteRun(ctx, run); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(total)*float64(b.N)/(1<<20)/elapsed.Seconds(), "MiB/s")
}
