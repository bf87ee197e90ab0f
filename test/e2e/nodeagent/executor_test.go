package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	kexec "github.com/terrarun/terrarun/pkg/executor/job"
)

// fakeExecutor stands in for terrarun-executor: it prints what the real one
// would rely on.
const fakeExecutor = `#!/bin/sh
echo "args: $*"
echo "uid: $(id -u) gid: $(id -g) groups: $(id -G)"
echo "pwd: $(pwd) home: $HOME tmpdir: $TMPDIR"
echo "stage: $(cat /etc/terrarun/stage/stage.json)"
echo "ca: $(cat /etc/terrarun/stage/ca.crt)"
echo "token: $(cat /var/run/secrets/terrarun/token)"
echo "kube-api: $(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace) $(cat /var/run/secrets/kubernetes.io/serviceaccount/ca.crt) $(cat /var/run/secrets/kubernetes.io/serviceaccount/token)"
echo "source: $(ls /etc/terrarun/source)"
echo "engine: $(terraform version)"
echo "other engine: $(tofu version)"
touch /work/x && touch /tmp/x && echo writable
touch /etc/terrarun/stage/x 2>/dev/null || echo stage-readonly
echo "reason" > /dev/termination-log
`

// TestExecutorJobPod runs the pod of a Job built by the kubernetes executor,
// with a fake terrarun-executor image binary and a fake terraform on
// PathDirs.
func TestExecutorJobPod(t *testing.T) {
	bin := t.TempDir()
	engineDir := t.TempDir()
	executorBin := filepath.Join(bin, "terrarun-executor")
	if err := os.WriteFile(executorBin, []byte(fakeExecutor), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(engineDir, "terraform"), []byte("#!/bin/sh\necho Terraform v1.9.0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A directory anyone may search is staged whole; engineDir (0700) file by
	// file.
	openDir := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(openDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(openDir, "tofu"), []byte("#!/bin/sh\necho OpenTofu v1.8.0\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	run := &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: testNS, UID: "run-uid"},
		Spec: v1alpha1.TerraformRunSpec{
			Source: v1alpha1.Source{Inline: map[string]string{"main.tf": "output \"x\" { value = 1 }\n"}},
			Engine: v1alpha1.Engine{Image: "ghcr.io/terrarun/terrarun-executor:v0.0.1"},
			// The kubernetes backend of a run that names its ServiceAccount:
			// the one pod that mounts a kube-apiserver token too.
			Backend:  &v1alpha1.Backend{Type: "kubernetes", Config: map[string]string{"in_cluster_config": "true"}},
			Executor: &v1alpha1.ExecutorSpec{ServiceAccountName: "deployer"},
		},
	}
	job, secret, err := kexec.BuildJob(executor.Execution{Run: run, Stage: v1alpha1.StagePlan, Attempt: 1}, kexec.JobOptions{
		ServerURL: "https://terrarun.example:8443",
		CABundle:  []byte("TERRARUN-CA"),
	})
	if err != nil {
		t.Fatal(err)
	}
	tmpl := job.Spec.Template
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: job.Name + "-abcde", Namespace: testNS, UID: "pod-uid",
			Labels: tmpl.Labels, Annotations: tmpl.Annotations,
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	rootCA := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: testNS},
		Data:       map[string]string{"ca.crt": "KUBE-CA"},
	}
	h := newHarness(t, func(o *Options) {
		o.Images = map[string]string{"example.com/anything/terrarun-executor:dev": executorBin}
		o.PathDirs = []string{engineDir, openDir}
	}, secret, rootCA)
	if _, err := h.cs.CoreV1().Pods(testNS).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := h.waitPod(pod.Name, "terminal", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
	_, log := h.logs(pod.Name, kexec.ContainerName, "")
	t.Logf("executor log:\n%s", log)
	if p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("phase %s: %+v\n%s", p.Status.Phase, p.Status.ContainerStatuses, log)
	}
	if term := terminated(p, kexec.ContainerName); term == nil || term.Message != "reason\n" {
		t.Errorf("termination message: %+v", term)
	}
	calls := h.tokenCalls()
	if len(calls) != 2 {
		t.Fatalf("%d token requests, want 2 (terrarun's and kube-api-access)", len(calls))
	}
	var terrarunToken, kubeToken string
	for _, c := range calls {
		if ref := c.req.Spec.BoundObjectRef; ref == nil || ref.Kind != "Pod" || ref.Name != pod.Name || ref.UID != "pod-uid" {
			t.Errorf("token not bound to the pod: %+v", ref)
		}
		switch strings.Join(c.req.Spec.Audiences, ",") {
		case kexec.DefaultAudience:
			terrarunToken = c.token
		case "":
			kubeToken = c.token
		default:
			t.Errorf("audiences %v", c.req.Spec.Audiences)
		}
	}
	stageJSON := string(secret.Data[kexec.StageKey])
	for _, want := range []string{
		"args: --stage-file /etc/terrarun/stage/stage.json\n",
		"uid: 65532 gid: 65532 groups: 65532",
		"pwd: /work home: /work tmpdir: /tmp\n",
		"stage: " + stageJSON + "\n",
		"ca: TERRARUN-CA\n",
		"token: " + terrarunToken + "\n",
		"kube-api: ns KUBE-CA " + kubeToken + "\n",
		"source: main.tf\n",
		"engine: Terraform v1.9.0\n",
		"other engine: OpenTofu v1.8.0\n",
		"writable\n",
		"stage-readonly\n",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}
