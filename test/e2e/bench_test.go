package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/terrarun/terrarun/test/internal/harness"
)

// The benchmarks of the HA topology (make bench-ha). Each runs once
// (-benchtime 1x) and reports its figures with b.ReportMetric.

// BenchmarkLeaderFailover: the leading replica's pod is deleted with no
// grace period (its process is SIGKILLed) TERRARUN_BENCH_HA_KILLS times
// (default 20); each time, a run is created at once, and the figure is the
// time from the kill until the new leader's controller has acted on that run
// (its phase moved on from Pending): election, cache sync and a reconcile.
func BenchmarkLeaderFailover(b *testing.B) {
	kills := envInt("TERRARUN_BENCH_HA_KILLS", 20)
	ns := newNamespace(b)
	var lat []time.Duration
	for b.Loop() {
		for i := range kills {
			waitFor(b, 5*time.Minute, "two ready replicas", func() bool {
				out, _ := cl.kubectlAs("admin", "get", "deployment", "terrarun-apiserver", "-n", "terrarun-system", "-o", "jsonpath={.status.readyReplicas}")
				return out == "2"
			})
			leader := leaderPod(b)
			start := time.Now()
			mustAs(b, "admin", "delete", "pod", leader, "-n", "terrarun-system", "--grace-period=0", "--force", "--wait=false")
			name := fmt.Sprintf("failover-%02d", i)
			manifest := fmt.Sprintf("apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n"+
				"  workspace: %s\n  operation: Plan\n  approval:\n    mode: Auto\n  source:\n    inline:\n      main.tf: \"\"\n", name, ns, name)
			waitFor(b, 2*time.Minute, "run "+name+" to be created", func() bool {
				out, err := cl.kubectlStdin("alice", manifest, "create", "-f", "-")
				return err == nil || strings.Contains(out+err.Error(), "already exists")
			})
			waitFor(b, 2*time.Minute, "the new leader to act on "+name, func() bool {
				p := phase(b, ns, name)
				return p != "" && p != "Pending"
			})
			lat = append(lat, time.Since(start))
			b.Logf("kill %d of %s: the next leader acted after %s", i+1, leader, lat[len(lat)-1].Round(time.Millisecond))
		}
	}
	slices.Sort(lat)
	b.ReportMetric(harness.Percentile(lat, 0.5).Seconds(), "failover-p50-s")
	b.ReportMetric(harness.Percentile(lat, 0.99).Seconds(), "failover-p99-s")
	b.ReportMetric(float64(len(lat)), "kills")
	b.ReportMetric(loadAverage(), "load1")
}

// BenchmarkFollowAcrossReplicas: a stage prints a timestamped line every
// 50 ms; a follower on each replica, connected directly, measures when each
// line arrives. The executor writes through the Service, to either replica:
// the p99 over both followers bounds the delay across replicas.
func BenchmarkFollowAcrossReplicas(b *testing.B) {
	lines := envInt("TERRARUN_BENCH_HA_LINES", 200)
	ns := newNamespace(b)
	var lat []time.Duration
	for b.Loop() {
		createRun(b, "alice", ns, "follow", fmt.Sprintf(`resource "terraform_data" "ticks" {
  provisioner "local-exec" {
    command = "i=0; while [ $i -lt %d ]; do echo tick-$(date +%%s%%N); i=$((i+1)); sleep 0.05; done"
  }
}
`, lines), "  approval:\n    mode: Auto\n")
		ips := strings.Fields(mustAs(b, "admin", "get", "pods", "-n", "terrarun-system", "--selector=app.kubernetes.io/name=terrarun-apiserver",
			"-o", `jsonpath={.items[*].status.podIP}`))
		waitPhase(b, ns, "follow", 3*time.Minute, "Applying", "Succeeded", "Failed")
		results := make(chan []time.Duration, len(ips))
		for _, ip := range ips {
			go func() { results <- followTicks(b, ip, ns, "follow") }()
		}
		for range ips {
			got := <-results
			if len(got) < lines/2 {
				b.Errorf("a follower saw %d of %d lines as they came", len(got), lines)
			}
			lat = append(lat, got...)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(harness.Percentile(lat, 0.5))/float64(time.Millisecond), "follow-p50-ms")
	b.ReportMetric(float64(harness.Percentile(lat, 0.99))/float64(time.Millisecond), "follow-p99-ms")
	b.ReportMetric(float64(len(lat)), "lines")
	b.ReportMetric(loadAverage(), "load1")
}

// BenchmarkThroughput: TERRARUN_BENCH_HA_RUNS trivial Auto runs (default
// 1,000) go through one terrarun replica whose executor pods all land on one
// node (the others cordoned), then through two replicas and three nodes; the
// figure is each configuration's runs per minute, and their ratio.
func BenchmarkThroughput(b *testing.B) {
	runs := envInt("TERRARUN_BENCH_HA_RUNS", 1000)
	for b.Loop() {
		b.Cleanup(func() {
			for _, n := range nodes {
				_, _ = cl.kubectlAs("admin", "uncordon", n.name)
			}
			restoreReplicas(b)
		})
		scale := func(replicas int) {
			mustAs(b, "admin", "-n", "terrarun-system", "scale", "deployment/terrarun-apiserver", fmt.Sprintf("--replicas=%d", replicas))
			waitFor(b, 5*time.Minute, fmt.Sprintf("%d replicas, ready", replicas), func() bool {
				out, _ := cl.kubectlAs("admin", "get", "pods", "-n", "terrarun-system", "--selector=app.kubernetes.io/name=terrarun-apiserver",
					"-o", `jsonpath={range .items[*]}{.status.containerStatuses[0].ready} {end}`)
				return strings.TrimSpace(out) == strings.TrimSpace(strings.Repeat("true ", replicas))
			})
			mustAs(b, "admin", "wait", "apiservice/v1alpha1.terrarun.dev", "--for=condition=Available", "--timeout=120s")
		}

		scale(1)
		node := strings.TrimSpace(mustAs(b, "admin", "get", "pods", "-n", "terrarun-system", "--selector=app.kubernetes.io/name=terrarun-apiserver",
			"-o", "jsonpath={.items[0].spec.nodeName}"))
		for _, n := range nodes {
			if n.name != node {
				mustAs(b, "admin", "cordon", n.name)
			}
		}
		one := burst(b, runs)
		for _, n := range nodes {
			mustAs(b, "admin", "uncordon", n.name)
		}
		scale(2)
		ha := burst(b, runs)
		b.ReportMetric(one, "runs/min-1replica-1node")
		b.ReportMetric(ha, "runs/min-2replicas-3nodes")
		b.ReportMetric(ha/one, "ratio")
		b.ReportMetric(loadAverage(), "load1")
	}
}

// burst creates runs trivial Auto runs in a new namespace with one kubectl
// create, waits for every one to end Succeeded, and returns runs per minute
// from the create to the last.
func burst(b *testing.B, runs int) float64 {
	ns := newNamespace(b)
	var manifest strings.Builder
	for i := range runs {
		fmt.Fprintf(&manifest, "---\napiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: r-%04d\n  namespace: %s\nspec:\n"+
			"  workspace: r-%04d\n  approval:\n    mode: Auto\n  source:\n    inline:\n      main.tf: |\n        resource \"terraform_data\" \"x\" {}\n", i, ns, i)
	}
	start := time.Now()
	if out, err := cl.kubectlStdin("alice", manifest.String(), "create", "-f", "-"); err != nil {
		b.Fatalf("creating %d runs: %v %s", runs, err, out)
	}
	var phases []string
	waitFor(b, 3*time.Hour, fmt.Sprintf("%d runs to end", runs), func() bool {
		out, err := cl.kubectlAs("admin", "get", "tfr", "-n", ns, "-o", "jsonpath={.items[*].status.phase}")
		if err != nil {
			return false
		}
		phases = strings.Fields(out)
		return countOf(phases, "Succeeded")+countOf(phases, "Failed") == runs
	})
	took := time.Since(start)
	if failed := len(phases) - countOf(phases, "Succeeded"); failed > 0 {
		b.Errorf("%d of %d runs did not succeed", failed, runs)
	}
	b.Logf("%d runs in %s", runs, took.Round(time.Second))
	return float64(runs) / took.Minutes()
}

// followTicks follows the apply log on one replica and returns, for each
// tick line, the time from its printing to its arrival. Lines that were
// already written when the follower connected are skipped.
func followTicks(b *testing.B, ip, ns, run string) []time.Duration {
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(cl.trCA)
	if err != nil {
		b.Error(err)
		return nil
	}
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: "terrarun-apiserver.terrarun-system.svc",
	}}}
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("https://%s:%d%s?follow=true&stage=apply", ip, terrarunPort, raw(ns, run, "logs")), nil)
	req.Header.Set("Authorization", "Bearer alice-token")
	connected := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		b.Error(err)
		return nil
	}
	defer resp.Body.Close()
	var lat []time.Duration
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		now := time.Now()
		_, ts, ok := strings.Cut(sc.Text(), "tick-")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(ts), 10, 64)
		if err != nil || time.Unix(0, n).Before(connected) {
			continue
		}
		lat = append(lat, now.Sub(time.Unix(0, n)))
	}
	return lat
}

// countOf is how many of phases are phase.
func countOf(phases []string, phase string) int {
	n := 0
	for _, p := range phases {
		if p == phase {
			n++
		}
	}
	return n
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// loadAverage is the one-minute load average, reported beside each figure.
func loadAverage() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return f
}

// BenchmarkExecutorOverhead: the same trivial Auto run (one terraform_data,
// planned and applied in the plan stage's execution), one after the other,
// TERRARUN_BENCH_EXECUTOR_RUNS times (default 5) with the Job executor,
// then with the Tekton executor under a real Tekton controller; the figures
// are each one's mean seconds from create to Succeeded, and their ratio.
func BenchmarkExecutorOverhead(b *testing.B) {
	runs := envInt("TERRARUN_BENCH_EXECUTOR_RUNS", 5)
	for b.Loop() {
		startTekton(b)
		b.Cleanup(func() {
			if err := cl.applyTerrarun(nil); err != nil {
				b.Errorf("restoring the Job executor: %v", err)
			}
		})
		ns := newNamespace(b)
		series := func(prefix string) float64 {
			start := time.Now()
			for i := range runs {
				name := fmt.Sprintf("%s-%d", prefix, i)
				begun := time.Now()
				createRun(b, "alice", ns, name, `resource "terraform_data" "x" {}`+"\n", "  approval:\n    mode: Auto\n")
				if got := waitPhase(b, ns, name, 5*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
					b.Fatalf("run %s: %s", name, got)
				}
				b.Logf("%s: %s", name, time.Since(begun).Round(10*time.Millisecond))
			}
			return time.Since(start).Seconds() / float64(runs)
		}
		jobs := series("jobs")
		if err := cl.applyTerrarun(func(values map[string]any) { values["executor"] = "tekton" }); err != nil {
			b.Fatal(err)
		}
		tekton := series("tekton")
		b.ReportMetric(jobs, "s/run-jobs")
		b.ReportMetric(tekton, "s/run-tekton")
		b.ReportMetric(tekton/jobs, "ratio")
		b.ReportMetric(loadAverage(), "load1")
	}
}
