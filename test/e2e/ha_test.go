package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/terrarun/terrarun/test/internal/harness"
)

// leaderPod names the terrarun pod whose controllers run: the first
// candidate of the election in etcd, whose identity is <host>_<uuid> and
// whose host name is its pod's.
func leaderPod(t testing.TB) string {
	t.Helper()
	resp := etcdGet(t, "/terrarun/leader/run-controller", clientv3.WithFirstCreate()...)
	if len(resp.Kvs) == 0 {
		t.Fatal("no terrarun replica leads")
	}
	id := string(resp.Kvs[0].Value)
	return id[:strings.LastIndex(id, "_")]
}

// killLeader kills the leading replica's server process on its node, as a
// crash would, and returns its pod.
func killLeader(t *testing.T) string {
	t.Helper()
	pod := leaderPod(t)
	id := mustAs(t, "admin", "get", "pod", pod, "-n", "terrarun-system", "-o", "jsonpath={.status.containerStatuses[0].containerID}")
	pid, err := strconv.Atoi(id[strings.LastIndex(id, "-")+1:])
	if err != nil {
		t.Fatalf("container ID %q of %s: %v", id, pod, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the leader %s (pid %d)", pod, pid)
	return pod
}

// TestReplicasSpread: the chart's two replicas run on different nodes, and
// both serve.
func TestReplicasSpread(t *testing.T) {
	var out string
	var lines []string
	waitFor(t, 2*time.Minute, "two terrarun pods", func() bool {
		out, _ = cl.kubectlAs("admin", "get", "pods", "-n", "terrarun-system", "--selector=app.kubernetes.io/name=terrarun-apiserver",
			"-o", `jsonpath={range .items[*]}{.spec.nodeName} {.status.podIP} {.status.containerStatuses[0].ready}{"\n"}{end}`)
		lines = strings.Split(strings.TrimSpace(out), "\n")
		return len(lines) == 2
	})
	a, b := strings.Fields(lines[0]), strings.Fields(lines[1])
	if a[0] == b[0] || a[2] != "true" || b[2] != "true" {
		t.Errorf("the replicas are not ready on two nodes:\n%s", out)
	}
	slices := mustAs(t, "admin", "get", "endpointslices", "-n", "terrarun-system", "--selector=kubernetes.io/service-name=terrarun-apiserver",
		"-o", `jsonpath={range .items[*].endpoints[*]}{.addresses[0]} {end}`)
	if !strings.Contains(slices, a[1]) || !strings.Contains(slices, b[1]) {
		t.Errorf("the Service's endpoints %q do not list both replicas %s and %s", slices, a[1], b[1])
	}
}

// TestLeaderKilled: the leading replica is killed while a run plans, and
// the new leader is killed while it applies; each time the other replica
// takes over, adopts the stage in flight (its Job) and the run ends
// Succeeded, having applied once.
func TestLeaderKilled(t *testing.T) {
	ns := newNamespace(t)
	marker := markerRun(t, ns, "failover", 20, "  approval:\n    mode: Auto\n")
	waitPhase(t, ns, "failover", 2*time.Minute, "Planning")
	first := killLeader(t)
	waitFor(t, time.Minute, "another replica to lead", func() bool { return leaderPod(t) != first })

	waitPhase(t, ns, "failover", 5*time.Minute, "Applying")
	second := killLeader(t)
	waitFor(t, time.Minute, "another replica to lead", func() bool { return leaderPod(t) != second })

	appliedOnce(t, ns, "failover", marker)
	// The killed containers came back (the Deployment's pods restart them).
	for _, pod := range []string{first, second} {
		waitFor(t, 2*time.Minute, pod+" to restart", func() bool {
			out, _ := cl.kubectlAs("admin", "get", "pod", pod, "-n", "terrarun-system", "-o", "jsonpath={.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].ready}")
			n, _ := strconv.Atoi(strings.Fields(out + " 0")[0])
			return n >= 1 && strings.HasSuffix(out, "true")
		})
	}
}

// TestFollowAcrossReplicas: a log follower connected to each replica sees
// every line of a stage, whichever replica the executor writes through.
func TestFollowAcrossReplicas(t *testing.T) {
	ns := newNamespace(t)
	tf := `resource "terraform_data" "slow" {
  provisioner "local-exec" {
    command = "for i in 1 2 3 4 5; do echo line-$i; sleep 1; done"
  }
}
`
	createRun(t, "alice", ns, "follow", tf, "  approval:\n    mode: Auto\n")
	ips := strings.Fields(mustAs(t, "admin", "get", "pods", "-n", "terrarun-system", "--selector=app.kubernetes.io/name=terrarun-apiserver",
		"-o", `jsonpath={.items[*].status.podIP}`))
	if len(ips) != 2 {
		t.Fatalf("replica addresses %v", ips)
	}
	waitPhase(t, ns, "follow", 3*time.Minute, "Applying", "Succeeded", "Failed")
	results := make(chan string, len(ips))
	for _, ip := range ips {
		go func() { results <- followDirect(t, ip, ns, "follow") }()
	}
	for range ips {
		got := <-results
		for i := 1; i <= 5; i++ {
			if !strings.Contains(got, fmt.Sprintf("line-%d", i)) {
				t.Errorf("a follower lacks line-%d:\n%s", i, got)
			}
		}
	}
}

// followDirect follows the apply stage's log on one replica, as alice,
// bypassing the aggregator, until the stage ends.
func followDirect(t *testing.T, ip, ns, run string) string {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	ca, err := os.ReadFile(cl.trCA)
	if err != nil {
		return err.Error()
	}
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: "terrarun-apiserver.terrarun-system.svc",
	}}}
	url := fmt.Sprintf("https://%s:%d%s?follow=true&stage=apply", ip, terrarunPort, raw(ns, run, "logs"))
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer alice-token")
	resp, err := hc.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("%s: %s", url, resp.Status)
	}
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	return b.String()
}

// TestExecutorJobsSpread: the plan pods of runs that execute together land
// on different nodes (the Job's topology spread constraint over
// kubernetes.io/hostname, honoured by kube-scheduler), even though one node
// is far larger than the others, which without the constraint would draw
// every pod (kube-scheduler favours the least allocated node). Each plan
// blocks on a FIFO until all three pods run, so every pod is scheduled while
// the others are alive: the constraint only counts pods that have not ended.
func TestExecutorJobsSpread(t *testing.T) {
	ns := newNamespace(t)
	for _, n := range nodes {
		waitFor(t, 2*time.Minute, n.name+" to be Ready, schedulable and untainted", func() bool {
			out, _ := cl.kubectlAs("admin", "get", "node", n.name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.spec.unschedulable} {.spec.taints}`)
			return strings.TrimSpace(out) == "True"
		})
	}
	// The agents set a node's capacity only when they register it.
	resize := func(node, cpu, memory string) {
		res := fmt.Sprintf(`{"cpu":%q,"memory":%q,"pods":"110"}`, cpu, memory)
		mustAs(t, "admin", "patch", "node", node, "--subresource=status", "--type=merge",
			"-p", fmt.Sprintf(`{"status":{"capacity":%s,"allocatable":%s}}`, res, res))
	}
	big := nodes[0].name
	resize(big, "64", "256Gi")
	t.Cleanup(func() { resize(big, "2", "8Gi") })
	gate := newGate(t, sharedDir(t))
	tf := harness.TestProviderRequirement + fmt.Sprintf(`
data "testing_file" "gate" {
  path = %q
}

resource "terraform_data" "gated" {
  input = data.testing_file.gate.content
}
`, gate)
	runs := []string{"spread-a", "spread-b", "spread-c"}
	for _, name := range runs {
		createRun(t, "alice", ns, name, tf, "")
	}
	var pods []string
	waitFor(t, 3*time.Minute, "three running executor pods", func() bool {
		out, _ := cl.kubectlAs("admin", "get", "pods", "-n", ns, "-o", `jsonpath={range .items[*]}{.spec.nodeName}/{.status.phase} {end}`)
		pods = strings.Fields(out)
		running := 0
		for _, p := range pods {
			if strings.HasSuffix(p, "/Running") {
				running++
			}
		}
		return running == len(runs)
	})
	stop := openGate(gate)
	defer stop()
	distinct := map[string]bool{}
	for _, p := range pods {
		distinct[strings.TrimSuffix(p, "/Running")] = true
	}
	if len(distinct) != len(nodes) {
		t.Errorf("the executor pods ran on %v, want one on each of the %d nodes", pods, len(nodes))
	}
	for _, name := range runs {
		waitPhase(t, ns, name, 5*time.Minute, "AwaitingApproval")
	}
}
