package nodeagent

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func callLogs(a *Agent, ns, pod, container, query string) (int, string) {
	req := httptest.NewRequest(http.MethodGet, "/containerLogs/"+ns+"/"+pod+"/"+container+"?"+query, nil)
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func TestNodeRegistrationAndLease(t *testing.T) {
	var h *harness
	h = newHarness(t, nil)
	ctx := context.Background()
	node, err := h.cs.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		t.Errorf("node is not Ready: %+v", node.Status.Conditions)
	}
	if got := node.Status.Addresses; len(got) != 1 || got[0].Type != corev1.NodeInternalIP || got[0].Address != "127.0.0.1" {
		t.Errorf("addresses = %+v, want only InternalIP 127.0.0.1", got)
	}
	if port := node.Status.DaemonEndpoints.KubeletEndpoint.Port; port == 0 || int(port) != h.a.Port() {
		t.Errorf("kubelet port = %d, want %d", port, h.a.Port())
	}
	for name, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: "2", corev1.ResourceMemory: "8Gi", corev1.ResourcePods: "110"} {
		if q := node.Status.Capacity[name]; q.String() != want {
			t.Errorf("capacity %s = %s, want %s", name, q.String(), want)
		}
		if q := node.Status.Allocatable[name]; q.String() != want {
			t.Errorf("allocatable %s = %s, want %s", name, q.String(), want)
		}
	}
	if v := node.Status.NodeInfo.KubeletVersion; !strings.HasPrefix(v, "v1.") {
		t.Errorf("kubelet version = %q", v)
	}
	if node.Labels[corev1.LabelHostname] != testNode {
		t.Errorf("labels = %v", node.Labels)
	}

	lease, err := h.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(lease.Spec.HolderIdentity, "") != testNode || ptr.Deref(lease.Spec.LeaseDurationSeconds, 0) != 40 || lease.Spec.RenewTime == nil {
		t.Errorf("lease spec = %+v", lease.Spec)
	}
	// The fake gives the Node no UID; with one, the Lease is owned by it.
	if node.UID != "" && (len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].Kind != "Node" || lease.OwnerReferences[0].UID != node.UID) {
		t.Errorf("lease owners = %+v", lease.OwnerReferences)
	}

	// Heartbeats renew both.
	first := lease.Spec.RenewTime.Time
	if err := h.a.heartbeatOnce(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err = h.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !lease.Spec.RenewTime.After(first) {
		t.Errorf("lease not renewed: %v, then %v", first, lease.Spec.RenewTime.Time)
	}

	// The kubelet endpoint answers /healthz over TLS.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Get("https://127.0.0.1:" + strconv.Itoa(h.a.Port()) + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Errorf("/healthz: %d %q", resp.StatusCode, body)
	}
}

func TestHeartbeatLoop(t *testing.T) {
	hh := newHarness(t, nil)
	// Run's own loop ticks every 10s; a second loop with a short interval
	// shows that it renews the lease.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before, err := hh.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { hh.a.heartbeatLoop(ctx, 50*time.Millisecond); close(done) }()
	deadline := time.Now().Add(timeout)
	for {
		l, err := hh.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, testNode, metav1.GetOptions{})
		if err == nil && l.Spec.RenewTime.After(before.Spec.RenewTime.Time) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease was not renewed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
}

func TestBinding(t *testing.T) {
	h := newHarness(t, nil)
	pending := shPod("pending", "exit 0")
	pending.Spec.NodeName = ""
	pending.Spec.SchedulerName = corev1.DefaultSchedulerName
	pending.Spec.NodeSelector = map[string]string{"ignored": "yes"}
	other := shPod("other-scheduler", "exit 0")
	other.Spec.NodeName = ""
	other.Spec.SchedulerName = "my-scheduler"
	elsewhere := shPod("elsewhere", "exit 0")
	elsewhere.Spec.NodeName = "node-2"
	h.create(other)
	h.create(elsewhere)
	h.create(pending)

	p := h.waitPhase("pending", corev1.PodSucceeded)
	if p.Spec.NodeName != testNode {
		t.Errorf("nodeName = %q", p.Spec.NodeName)
	}
	if code := terminated(p, "main"); code == nil || code.ExitCode != 0 || code.Reason != "Completed" {
		t.Errorf("terminated = %+v", code)
	}
	bound := 0
	for _, a := range h.cs.Actions() {
		if a.GetVerb() == "create" && a.GetSubresource() == "binding" {
			bound++
		}
	}
	if bound != 1 {
		t.Errorf("%d bindings, want 1", bound)
	}
	for _, name := range []string{"other-scheduler", "elsewhere"} {
		p, err := h.get(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != "" || (name == "other-scheduler" && p.Spec.NodeName != "") {
			t.Errorf("pod %s was touched: node %q, status %+v", name, p.Spec.NodeName, p.Status)
		}
	}
}

func TestFailedPodAndLogs(t *testing.T) {
	h := newHarness(t, nil)
	h.create(shPod("fails", "echo hi; exit 3"))
	p := h.waitPhase("fails", corev1.PodFailed)
	term := terminated(p, "main")
	if term == nil || term.ExitCode != 3 || term.Reason != "Error" {
		t.Fatalf("terminated = %+v", term)
	}
	if term.StartedAt.IsZero() || term.FinishedAt.IsZero() || term.FinishedAt.Before(&term.StartedAt) {
		t.Errorf("times: started %v, finished %v", term.StartedAt, term.FinishedAt)
	}
	if p.Status.PodIP != "127.0.0.1" || p.Status.HostIP != "127.0.0.1" || p.Status.StartTime == nil {
		t.Errorf("status: podIP %q hostIP %q start %v", p.Status.PodIP, p.Status.HostIP, p.Status.StartTime)
	}
	if code, body := h.logs("fails", "main", ""); code != http.StatusOK || body != "hi\n" {
		t.Errorf("logs: %d %q", code, body)
	}
	if code, body := h.logs("fails", "main", "follow=true&timestamps=true"); code != http.StatusOK || body != "hi\n" {
		t.Errorf("followed logs: %d %q", code, body)
	}
	if code, _ := h.logs("fails", "nope", ""); code != http.StatusNotFound {
		t.Errorf("unknown container: %d", code)
	}
	if code, _ := h.logs("nope", "main", ""); code != http.StatusNotFound {
		t.Errorf("unknown pod: %d", code)
	}
}

func TestLogOptions(t *testing.T) {
	h := newHarness(t, nil)
	h.create(shPod("lines", "echo one; echo two >&2; echo three; printf four"))
	h.waitPhase("lines", corev1.PodSucceeded)
	for query, want := range map[string]string{
		"":                         "one\ntwo\nthree\nfour",
		"tailLines=2":              "three\nfour",
		"tailLines=10":             "one\ntwo\nthree\nfour",
		"tailLines=0":              "",
		"limitBytes=6":             "one\ntw",
		"tailLines=2&limitBytes=3": "thr",
	} {
		if code, body := h.logs("lines", "main", query); code != http.StatusOK || body != want {
			t.Errorf("?%s: %d %q, want %q", query, code, body, want)
		}
	}
	if code, _ := h.logs("lines", "main", "tailLines=x"); code != http.StatusBadRequest {
		t.Errorf("bad tailLines: %d", code)
	}
}

func TestFollowStreamsUntilExit(t *testing.T) {
	dir := worldDir(t)
	h := newHarness(t, nil)
	pod := shPod("follow", "echo first; while [ ! -e /out/go ]; do sleep 0.05; done; echo second")
	pod.Spec.Volumes = []corev1.Volume{{Name: "out", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "out", MountPath: "/out"}}
	h.create(pod)
	h.waitPhase("follow", corev1.PodRunning)
	got := make(chan string, 1)
	go func() {
		_, body := h.logs("follow", "main", "follow=true")
		got <- body
	}()
	time.Sleep(300 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case body := <-got:
		if body != "first\nsecond\n" {
			t.Errorf("followed %q", body)
		}
	case <-time.After(timeout):
		t.Fatal("follow did not end with the container")
	}
}

func TestLogsRequireClientCertificate(t *testing.T) {
	pki := newTestPKI(t)
	h := newHarness(t, func(o *Options) { o.ClientCAFile = pki.caFile })
	h.create(shPod("quiet", "echo secret"))
	h.waitPhase("quiet", corev1.PodSucceeded)
	if code, _ := h.logs("quiet", "main", ""); code != http.StatusUnauthorized {
		t.Errorf("logs without TLS: %d", code)
	}
	base := "https://127.0.0.1:" + strconv.Itoa(h.a.Port())
	get := func(client *http.Client, path string) (int, string) {
		t.Helper()
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	anonymous := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if code, _ := get(anonymous, "/containerLogs/ns/quiet/main"); code != http.StatusUnauthorized {
		t.Errorf("logs without a client certificate: %d", code)
	}
	if code, _ := get(anonymous, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	apiserver := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true,
		Certificates:       []tls.Certificate{pki.client},
	}}}
	if code, body := get(apiserver, "/containerLogs/ns/quiet/main"); code != http.StatusOK || body != "secret\n" {
		t.Errorf("logs with a client certificate: %d %q", code, body)
	}
}

func TestDeletionSendsSIGTERMFirst(t *testing.T) {
	dir := worldDir(t)
	h := newHarness(t, nil)
	pod := shPod("sleeper", `trap 'echo term > /out/termed; exit 0' TERM; echo started > /out/started; while :; do sleep 0.05; done`)
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532)}
	pod.Spec.Volumes = []corev1.Volume{{Name: "out", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "out", MountPath: "/out"}}
	h.create(pod)
	h.waitPhase("sleeper", corev1.PodRunning)
	waitFile(t, filepath.Join(dir, "started"))
	r := h.a.runner(testNS, "sleeper")
	if r == nil {
		t.Fatal("no runner")
	}
	podDir := r.dir
	pid := r.containers[0].pid

	h.deleteGracefully("sleeper", 30)
	if got := waitFile(t, filepath.Join(dir, "termed")); got != "term\n" {
		t.Errorf("termed = %q", got)
	}
	h.waitGone("sleeper")
	waitNoProcess(t, pid)
	waitNoFile(t, podDir)
	// The pod ended Failed? It exited 0 on SIGTERM: Succeeded, as the kubelet
	// reports it; the status written before the deletion says so.
	if !sawStatus(h, "sleeper", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded }) {
		t.Errorf("no terminal status before the deletion")
	}
	assertDeletedWithGraceZero(t, h, "sleeper")
}

func TestDeletionKillsAfterGrace(t *testing.T) {
	dir := worldDir(t)
	h := newHarness(t, nil)
	pod := shPod("stubborn", `trap '' TERM; echo started > /out/started; while :; do sleep 0.05; done`)
	pod.Spec.Volumes = []corev1.Volume{{Name: "out", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "out", MountPath: "/out"}}
	h.create(pod)
	h.waitPhase("stubborn", corev1.PodRunning)
	waitFile(t, filepath.Join(dir, "started"))
	pid := h.a.runner(testNS, "stubborn").containers[0].pid
	start := time.Now()
	h.deleteGracefully("stubborn", 1)
	h.waitGone("stubborn")
	if d := time.Since(start); d < time.Second {
		t.Errorf("killed after %v, before the 1s grace period", d)
	}
	waitNoProcess(t, pid)
	if !sawStatus(h, "stubborn", func(p *corev1.Pod) bool {
		term := terminated(p, "main")
		return p.Status.Phase == corev1.PodFailed && term != nil && term.ExitCode == 137
	}) {
		t.Errorf("no Failed status with exit code 137 before the deletion")
	}
}

func TestForceDeletionAndShutdownKill(t *testing.T) {
	h := newHarness(t, nil)
	h.create(shPod("forced", "while :; do sleep 0.05; done"))
	h.waitPhase("forced", corev1.PodRunning)
	pid := h.a.runner(testNS, "forced").containers[0].pid
	// Deleted without the node: the process dies at once.
	if err := h.cs.CoreV1().Pods(testNS).Delete(context.Background(), "forced", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	waitNoProcess(t, pid)

	// A pod still running when the agent stops is killed with it.
	h2 := newHarness(t, nil)
	h2.create(shPod("orphan", "while :; do sleep 0.05; done"))
	h2.waitPhase("orphan", corev1.PodRunning)
	pid = h2.a.runner(testNS, "orphan").containers[0].pid
	dir := h2.a.runner(testNS, "orphan").dir
	h2.stop()
	waitNoProcess(t, pid)
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the pod directory is not kept: %v", err)
	}
}

func waitNoProcess(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("process %d still runs", pid)
}

func waitNoFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); os.IsNotExist(err) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("%s still exists", path)
}

// sawStatus reports whether a status update of pod name satisfied cond.
func sawStatus(h *harness, name string, cond func(*corev1.Pod) bool) bool {
	for _, a := range h.cs.Actions() {
		if a.GetVerb() != "update" || a.GetSubresource() != "status" {
			continue
		}
		obj := a.(k8stesting.UpdateAction).GetObject()
		if p, ok := obj.(*corev1.Pod); ok && p.Name == name && cond(p) {
			return true
		}
	}
	return false
}

func assertDeletedWithGraceZero(t *testing.T, h *harness, name string) {
	t.Helper()
	for _, a := range h.cs.Actions() {
		if a.GetVerb() != "delete" || a.GetResource().Resource != "pods" {
			continue
		}
		d := a.(k8stesting.DeleteAction)
		if d.GetName() != name {
			continue
		}
		opts := d.GetDeleteOptions()
		if ptr.Deref(opts.GracePeriodSeconds, -1) != 0 || opts.Preconditions == nil || ptr.Deref(opts.Preconditions.UID, "") != types.UID("uid-"+name) {
			t.Errorf("deleted with %+v", opts)
		}
		return
	}
	t.Errorf("pod %s was not deleted by the agent", name)
}

func TestUnsupportedPods(t *testing.T) {
	h := newHarness(t, nil)
	p := shPod("noimage", "")
	p.Spec.Containers[0].Command = nil
	p.Spec.Containers[0].Image = "example.com/unknown:1"
	h.create(p)
	got := h.waitPhase("noimage", corev1.PodFailed)
	if !strings.Contains(got.Status.Message, "example.com/unknown:1") {
		t.Errorf("status: %q %q", got.Status.Reason, got.Status.Message)
	}

	p = shPod("notfound", "")
	p.Spec.Containers[0].Command = []string{"no-such-command-anywhere"}
	h.create(p)
	got = h.waitPhase("notfound", corev1.PodFailed)
	if term := terminated(got, "main"); term == nil || term.ExitCode != 128 || term.Reason != "StartError" || !strings.Contains(term.Message, "no-such-command-anywhere") {
		t.Errorf("terminated: %+v", term)
	}

	p = shPod("nfs", "exit 0")
	p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		NFS: &corev1.NFSVolumeSource{Server: "nfs.example", Path: "/exports"},
	}}}
	h.create(p)
	got = h.waitPhase("nfs", corev1.PodFailed)
	if got.Status.Reason != "UnsupportedVolume" || !strings.Contains(got.Status.Message, "volume data") {
		t.Errorf("status: %q %q", got.Status.Reason, got.Status.Message)
	}

	// A failure inside the helper, after the fork: a working directory that
	// cannot exist.
	p = shPod("baddir", "exit 0")
	p.Spec.Containers[0].WorkingDir = "/proc/self/no/such/dir"
	h.create(p)
	got = h.waitPhase("baddir", corev1.PodFailed)
	if term := terminated(got, "main"); term == nil || term.ExitCode != 128 || term.Reason != "StartError" || !strings.Contains(term.Message, "working directory") {
		t.Errorf("terminated: %+v", term)
	}
}

func TestMissingSecretWaitsThenRuns(t *testing.T) {
	h := newHarness(t, nil)
	p := shPod("waits", "cat /s/key")
	p.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "late"}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "s", MountPath: "/s", ReadOnly: true}}
	h.create(p)
	h.waitPod("waits", "ContainerCreating with a message", func(p *corev1.Pod) bool {
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Reason == "ContainerCreating" && strings.Contains(w.Message, "late") {
				return true
			}
		}
		return false
	})
	if _, err := h.cs.CoreV1().Secrets(testNS).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: testNS},
		Data:       map[string][]byte{"key": []byte("arrived")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitPhase("waits", corev1.PodSucceeded)
	if _, body := h.logs("waits", "main", ""); body != "arrived" {
		t.Errorf("logs %q", body)
	}
}

func TestPodDeletedWhileWaiting(t *testing.T) {
	h := newHarness(t, nil)
	p := shPod("never", "exit 0")
	p.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "missing"}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "s", MountPath: "/s"}}
	h.create(p)
	h.waitPod("never", "waiting", func(p *corev1.Pod) bool { return len(p.Status.ContainerStatuses) == 1 })
	h.deleteGracefully("never", 30)
	h.waitGone("never")
	if !sawStatus(h, "never", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed }) {
		t.Error("no Failed status before the deletion")
	}
}

// TestRestartPolicies: a container of a pod with restartPolicy Always runs
// again whenever it exits (a Deployment's pod killed on its node), the first
// time at once, with its restart count and last state in the status; with
// OnFailure only a failure restarts it; deletion ends the restarts.
func TestRestartPolicies(t *testing.T) {
	h := newHarness(t, nil)
	dir := worldDir(t)
	runs := filepath.Join(dir, "runs")
	// Exits with 3 on its first run, then stays up.
	p := shPod("always", "echo run >> "+runs+"; [ $(wc -l < "+runs+") -gt 1 ] && exec sleep 300; exit 3")
	p.Spec.RestartPolicy = corev1.RestartPolicyAlways
	h.create(p)
	got := h.waitPod("always", "running again after one restart", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount == 1 && cs[0].State.Running != nil
	})
	if last := got.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 3 || last.Reason != "Error" {
		t.Errorf("last state %+v, want terminated with 3", last)
	}
	if got.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %s", got.Status.Phase)
	}
	// Killed on the node, as a crashing server is: it runs again, after
	// the back-off.
	pid := containerPID(t, got)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	got = h.waitPod("always", "restarted after SIGKILL", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount == 2 && cs[0].State.Running != nil
	})
	if last := got.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 137 {
		t.Errorf("last state %+v, want terminated with 137", last)
	}
	h.deleteGracefully("always", 5)
	h.waitGone("always")
	waitNoProcess(t, containerPID(t, got))

	p = shPod("onfailure", "exit 0")
	p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	h.create(p)
	got = h.waitPhase("onfailure", corev1.PodSucceeded)
	if n := got.Status.ContainerStatuses[0].RestartCount; n != 0 {
		t.Errorf("a container that succeeded with OnFailure restarted %d times", n)
	}
}

// containerPID reads the process of the pod's only container from its
// container ID (nodeagent://<uid>-<name>-<pid>).
func containerPID(t *testing.T, p *corev1.Pod) int {
	t.Helper()
	id := p.Status.ContainerStatuses[0].ContainerID
	pid, err := strconv.Atoi(id[strings.LastIndex(id, "-")+1:])
	if err != nil {
		t.Fatalf("container ID %q: %v", id, err)
	}
	return pid
}

// TestContainerHostname: a container's host name is its pod's, as in a real
// pod (servers name themselves after it, e.g. in leader election).
func TestContainerHostname(t *testing.T) {
	h := newHarness(t, nil)
	h.create(shPod("named", "cat /proc/sys/kernel/hostname"))
	h.waitPhase("named", corev1.PodSucceeded)
	if _, body := h.logs("named", "main", ""); strings.TrimSpace(body) != "named" {
		t.Errorf("host name %q, want the pod's name", body)
	}
	if host, _ := os.Hostname(); host == "named" {
		t.Error("the container renamed the node")
	}
}

// TestScheduledAgentLeavesBinding: with a scheduler, an agent binds nothing
// and runs only what is bound to its node.
func TestScheduledAgentLeavesBinding(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Scheduled = true })
	p := shPod("unbound", "exit 0")
	p.Spec.NodeName = ""
	h.create(p)
	other := shPod("elsewhere", "exit 0")
	other.Spec.NodeName = "another-node"
	h.create(other)
	mine := shPod("mine", "exit 0")
	h.create(mine)
	h.waitPhase("mine", corev1.PodSucceeded)
	for _, name := range []string{"unbound", "elsewhere"} {
		got, err := h.get(name)
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.NodeName != p.Spec.NodeName && name == "unbound" || got.Status.Phase != "" {
			t.Errorf("pod %s: node %q, phase %q: the agent bound or ran it", name, got.Spec.NodeName, got.Status.Phase)
		}
	}
}

// TestReadyRestored: the node lifecycle controller marks the pods of a node
// that went silent not ready; once the node reports again, the agent writes
// its own view back, as the kubelet's status manager does.
func TestReadyRestored(t *testing.T) {
	h := newHarness(t, nil)
	h.create(shPod("steady", "sleep 600"))
	pod := h.waitPod("steady", "ready", func(p *corev1.Pod) bool { return readyStatus(&p.Status) == corev1.ConditionTrue })
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			pod.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	if _, err := h.cs.CoreV1().Pods(testNS).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitPod("steady", "ready again", func(p *corev1.Pod) bool { return readyStatus(&p.Status) == corev1.ConditionTrue })
}
