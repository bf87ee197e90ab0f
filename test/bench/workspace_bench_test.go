package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/test/internal/harness"
)

const workspaceBenchTF = `variable "v" {
  type = string
}

resource "terraform_data" "x" {
  input = var.v
}
`

// workspaceSpec is a workspace whose template sets variable v.
func (rs *runServer) workspace(name, v string, suspend bool) *v1alpha1.TerraformWorkspace {
	run := rs.autoRun("", name, inline(workspaceBenchTF))
	spec := run.Spec
	spec.Approval = v1alpha1.Approval{}
	spec.Variables = []v1alpha1.Variable{{Name: "v", Value: v}}
	return &v1alpha1.TerraformWorkspace{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TerraformWorkspaceSpec{
			Template: spec,
			Approval: v1alpha1.Approval{Mode: v1alpha1.ApprovalModeAuto},
			Suspend:  suspend,
		},
	}
}

// BenchmarkWorkspaceSpecChange measures, over 100 changes of a workspace's
// template (each applied before the next), the time from the change's
// response to the watch seeing the new run created, and seeing it Planning.
func BenchmarkWorkspaceSpecChange(b *testing.B) {
	rs := startRunServer(b)
	defer rs.close(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	logLoad(b, "at the start")
	const ns, name, changes = "default", "bench", 100
	wss := rs.Client.TerrarunV1alpha1().TerraformWorkspaces(ns)
	runs := rs.runs(ns)

	var mu sync.Mutex
	created, planning := map[string]time.Time{}, map[string]time.Time{}
	list, err := runs.List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	w, err := runs.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, LabelSelector: v1alpha1.LabelWorkspace + "=" + name})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	go func() {
		for ev := range w.ResultChan() {
			r, ok := ev.Object.(*v1alpha1.TerraformRun)
			if !ok {
				continue
			}
			now := time.Now()
			mu.Lock()
			if _, ok := created[r.Name]; !ok {
				created[r.Name] = now
			}
			if _, ok := planning[r.Name]; !ok && r.Status.Phase != "" && r.Status.Phase != v1alpha1.RunPhasePending {
				planning[r.Name] = now
			}
			mu.Unlock()
		}
	}()
	ready := func(run string) {
		for ctx.Err() == nil {
			ws, err := wss.Get(ctx, name, metav1.GetOptions{})
			if err == nil && ws.Status.LastAppliedRun == run && meta.IsStatusConditionTrue(ws.Status.Conditions, v1alpha1.WorkspaceConditionReady) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		b.Fatalf("workspace %s was not applied by %s: %v", name, run, ctx.Err())
	}
	if _, err := wss.Create(ctx, rs.workspace(name, "0", false), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	ready(name + "-1")

	var toCreated, toPlanning []time.Duration
	for i := 1; i <= changes; i++ {
		run := fmt.Sprintf("%s-%d", name, i+1)
		patch := fmt.Sprintf(`{"spec":{"template":{"variables":[{"name":"v","value":"%d"}]}}}`, i)
		if _, err := wss.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		changed := time.Now()
		ready(run)
		mu.Lock()
		c, p := created[run], planning[run]
		mu.Unlock()
		if c.IsZero() || p.IsZero() {
			b.Fatalf("the watch did not see run %s created and planning", run)
		}
		toCreated = append(toCreated, max(c.Sub(changed), 0))
		toPlanning = append(toPlanning, max(p.Sub(changed), 0))
	}
	reportLatency(b, "created-", toCreated)
	reportLatency(b, "planning-", toPlanning)
	reportMean(b, toCreated)
	logLoad(b, "at the end")
}

// BenchmarkIdleWorkspaces measures what 1,000 idle workspaces (suspended:
// each reconciled, none running) cost the server: resident memory per
// workspace, the time until every one has a status, and the CPU the server
// uses over 60 s idle, without and then with them.
func BenchmarkIdleWorkspaces(b *testing.B) {
	rs := startRunServer(b)
	defer rs.close(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	const ns, n, idle = "idle", 1000, 60 * time.Second
	wss := rs.Client.TerrarunV1alpha1().TerraformWorkspaces(ns)
	time.Sleep(5 * time.Second) // settle after start-up
	before, err := harness.ReadMem(rs.Pid)
	if err != nil {
		b.Fatal(err)
	}
	logLoad(b, "at the start")
	// The server's own idle cost, for the ratio.
	base0, err := cpuSeconds(rs.Pid)
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(idle)
	base1, err := cpuSeconds(rs.Pid)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := wss.Create(ctx, rs.workspace(fmt.Sprintf("ws-%04d", i), "x", true), metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	for ctx.Err() == nil {
		list, err := wss.List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		done := 0
		for _, ws := range list.Items {
			if ws.Status.ObservedGeneration == ws.Generation {
				done++
			}
		}
		if done == n {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	reconciled := time.Since(start)
	cpu0, err := cpuSeconds(rs.Pid)
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(idle)
	cpu1, err := cpuSeconds(rs.Pid)
	if err != nil {
		b.Fatal(err)
	}
	after, err := harness.ReadMem(rs.Pid)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(reconciled)/float64(time.Millisecond), "create-and-reconcile-1000-ms")
	b.ReportMetric((after.VmRSS-before.VmRSS)*1024/n, "rss-KiB/workspace")
	b.ReportMetric(after.VmRSS, "rss-MiB")
	b.ReportMetric(100*(cpu1-cpu0)/idle.Seconds(), "idle-cpu-%")
	b.ReportMetric(100*(base1-base0)/idle.Seconds(), "idle-cpu-without-%")
	detail(b, "RSS %.0f MiB before, %.0f MiB with %d idle workspaces; server CPU over %s idle: %.2f s without them, %.2f s with them", before.VmRSS, after.VmRSS, n, idle, base1-base0, cpu1-cpu0)
	logLoad(b, "at the end")
}

// cpuSeconds is the user and system CPU time of pid, in seconds.
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ... utime is field 14, stime 15 (1-based).
	i := strings.LastIndexByte(string(data), ')')
	f := strings.Fields(string(data[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected content", pid)
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected times", pid)
	}
	return (utime + stime) / 100, nil // USER_HZ is 100 on Linux
}
