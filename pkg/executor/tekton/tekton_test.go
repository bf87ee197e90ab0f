package tekton

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/executor/auth"
	"github.com/terrarun/terrarun/pkg/executor/job"
	"github.com/terrarun/terrarun/pkg/stage"
	"github.com/terrarun/terrarun/pkg/standalone"
)

var etcdClient *clientv3.Client

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "tekton-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	etcd, err := standalone.StartEtcd(context.Background(), filepath.Join(tmp, "etcd"), standalone.WithoutFsync())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer etcd.Close()
	etcdClient, err = clientv3.New(clientv3.Config{Endpoints: []string{etcd.ClientURL()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer etcdClient.Close()
	return m.Run()
}

const (
	testUID    = "6f1c2a3e-0000-4000-8000-000000000001"
	testServer = "https://terrarun-apiserver.terrarun-system.svc:443"
	testImage  = "ghcr.io/terrarun/terrarun-executor:v0.1.0"
)

func testOptions() job.JobOptions {
	return job.JobOptions{ServerURL: testServer, CABundle: []byte("test CA")}
}

// testRun is a run of its own UID (so that claims of different tests do not
// meet), with a variable from a Secret and an executor spec.
func testRun(t *testing.T) *v1alpha1.TerraformRun {
	return &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a", UID: types.UID(fmt.Sprintf("%s-%s", testUID, strings.ReplaceAll(t.Name(), "/", "-")))},
		Spec: v1alpha1.TerraformRunSpec{
			Operation: v1alpha1.OperationApply,
			Source:    v1alpha1.Source{Inline: map[string]string{"main.tf": `resource "terraform_data" "x" { input = var.password }`}},
			Variables: []v1alpha1.Variable{
				{Name: "password", ValueFrom: &v1alpha1.VariableSource{SecretKeyRef: &v1alpha1.KeySelector{Name: "db", Key: "password"}}},
			},
			Engine:   v1alpha1.Engine{Binary: v1alpha1.EngineTofu, Image: testImage},
			Timeouts: v1alpha1.Timeouts{Plan: &metav1.Duration{Duration: 20 * time.Minute}, Apply: &metav1.Duration{Duration: time.Hour}},
			Executor: &v1alpha1.ExecutorSpec{
				NodeSelector: map[string]string{"pool": "infra"},
			},
		},
	}
}

func plan(t *testing.T) executor.Execution {
	return executor.Execution{Run: testRun(t), Stage: v1alpha1.StagePlan, Attempt: 1}
}

// env is an executor with fake clusters: kube for pods and Secrets, dyn
// for TaskRuns.
type env struct {
	kube *fake.Clientset
	dyn  *dynamicfake.FakeDynamicClient
	e    *Executor
}

func newEnv(t *testing.T, objects ...runtime.Object) *env {
	t.Helper()
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{TaskRuns: "TaskRunList"}, objects...)
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
	// The fake API servers give what they create a UID, as real ones do.
	kube.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(k8stesting.CreateAction).GetObject().(*corev1.Secret)
		if s.UID == "" {
			s.UID = types.UID("uid-of-" + s.Name)
		}
		return false, nil, nil
	})
	dyn.PrependReactor("create", "taskruns", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured)
		if tr.GetUID() == "" {
			tr.SetUID(types.UID("uid-of-" + tr.GetName()))
		}
		return false, nil, nil
	})
	return &env{kube: kube, dyn: dyn, e: NewExecutor(kube, dyn, NewClaims(etcdClient), Options{Jobs: testOptions()})}
}

func (v *env) taskRun(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	tr, err := v.dyn.Resource(TaskRuns).Namespace("team-a").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("TaskRun %s: %v", name, err)
	}
	return tr
}

func spec(t *testing.T, tr *unstructured.Unstructured) *taskRunSpec {
	t.Helper()
	s, err := decodeSpec(tr)
	if err != nil {
		t.Fatalf("the TaskRun's spec: %v", err)
	}
	return s
}

// TestBuildTaskRun: the TaskRun runs the pod the Job executor builds: one
// step (the same image, command, environment and mounts, and the outcome
// result), the same volumes, the pod's hardening, labels and owner, and the
// stage's timeout.
func TestBuildTaskRun(t *testing.T) {
	ex := plan(t)
	opts := testOptions()
	opts.HostName = PodName
	built, secret, err := job.BuildJob(ex, opts)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := buildTaskRun(built, &shape{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.GetAPIVersion() != "tekton.dev/v1" || tr.GetKind() != "TaskRun" || tr.GetName() != "web-plan-1" || tr.GetNamespace() != "team-a" {
		t.Errorf("TaskRun %s %s %s/%s", tr.GetAPIVersion(), tr.GetKind(), tr.GetNamespace(), tr.GetName())
	}
	labels := tr.GetLabels()
	for k, want := range map[string]string{job.LabelRun: "web", job.LabelRunUID: string(ex.Run.UID), job.LabelStage: "plan", job.LabelAttempt: "1"} {
		if labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, labels[k], want)
		}
	}
	if a := tr.GetAnnotations(); a[job.AnnotationRunName] != "web" || a[defaultContainerAnnotation] != "step-executor" {
		t.Errorf("annotations %v", a)
	}
	owners := tr.GetOwnerReferences()
	if len(owners) != 1 || owners[0].Kind != "TerraformRun" || owners[0].UID != ex.Run.UID || !ptr.Deref(owners[0].Controller, false) || ptr.Deref(owners[0].BlockOwnerDeletion, true) {
		t.Errorf("owner references %+v", owners)
	}
	s := spec(t, tr)
	pod := built.Spec.Template.Spec
	if s.ServiceAccountName != "default" || s.Timeout == nil || s.Timeout.Duration != 20*time.Minute {
		t.Errorf("serviceAccountName %q, timeout %v", s.ServiceAccountName, s.Timeout)
	}
	p := s.PodTemplate
	if p == nil || !ptr.Deref(p.SecurityContext.RunAsNonRoot, false) || ptr.Deref(p.AutomountServiceAccountToken, true) || ptr.Deref(p.EnableServiceLinks, true) || p.NodeSelector["pool"] != "infra" {
		t.Errorf("podTemplate %+v", p)
	}
	if len(s.TaskSpec.Steps) != 1 {
		t.Fatalf("%d steps", len(s.TaskSpec.Steps))
	}
	st, c := s.TaskSpec.Steps[0], pod.Containers[0]
	if st.Name != "executor" || st.Image != testImage || !slices.Equal(st.Command, append(slices.Clone(c.Command), "--outcome-file", "/tekton/results/outcome", "--plan-digest-file", "/tekton/results/plan-digest")) {
		t.Errorf("step %s %s %v", st.Name, st.Image, st.Command)
	}
	if !equalJSON(st.Env, c.Env) || !equalJSON(st.VolumeMounts, c.VolumeMounts) || !equalJSON(st.SecurityContext, c.SecurityContext) || !equalJSON(st.ComputeResources, c.Resources) {
		t.Errorf("the step is not the Job's container:\n%+v\n%+v", st, c)
	}
	if !equalJSON(s.TaskSpec.Volumes, pod.Volumes) {
		t.Errorf("volumes differ from the Job's")
	}
	if len(s.TaskSpec.Results) != 2 || s.TaskSpec.Results[0].Name != resultOutcome || s.TaskSpec.Results[1].Name != resultPlanDigest || s.TaskSpec.Results[0].Type != "string" {
		t.Errorf("results %+v", s.TaskSpec.Results)
	}
	// Secrets are files: the password's value is nowhere in the TaskRun.
	raw, _ := json.Marshal(tr.Object)
	if strings.Contains(string(raw), "stage-key") && strings.Contains(string(raw), string(secret.Data[job.StageKeyKey])) && len(secret.Data[job.StageKeyKey]) > 0 {
		t.Errorf("the stage key is in the TaskRun")
	}
	// The host names of earlier plan attempts are Tekton's pod names.
	ex.Attempt = 2
	_, secret, err = job.BuildJob(ex, opts)
	if err != nil {
		t.Fatal(err)
	}
	var st2 stage.Spec
	if err := json.Unmarshal(secret.Data[job.StageKey], &st2); err != nil || !slices.Equal(st2.LostPlanHosts, []string{"web-plan-1-pod"}) {
		t.Errorf("lost plan hosts %v (%v), want [web-plan-1-pod]", st2.LostPlanHosts, err)
	}
}

// TestPodName: Tekton's pod names (knative's kmeta.ChildName), as knative
// v0.0.0-20250415155312 computes them.
func TestPodName(t *testing.T) {
	for name, want := range map[string]string{
		"web-plan-1": "web-plan-1-pod",
		"exactly-fifty-nine-characters-long-name-for-a-taskrun-xyzw":     "exactly-fifty-nine-characters-long-name-for-a-taskrun-xyzw-pod",
		"a-run-whose-name-is-long-enough-to-need-hashing-5f2a9c-plan-12": "a-run-whose-name-is-long-en6ece876494b3f6d36e34a50999c1931a-pod",
	} {
		if got := PodName(name); got != want {
			t.Errorf("PodName(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestStartCreatesSecretAndTaskRun(t *testing.T) {
	v := newEnv(t)
	ctx := context.Background()
	name, err := v.e.Start(ctx, plan(t))
	if err != nil || name != "web-plan-1" {
		t.Fatalf("Start = %q, %v", name, err)
	}
	v.taskRun(t, name)
	if _, err := v.kube.CoreV1().Secrets("team-a").Get(ctx, name+"-stage", metav1.GetOptions{}); err != nil {
		t.Errorf("stage Secret: %v", err)
	}
	// Again: the same TaskRun is adopted, not a second one made.
	if again, err := v.e.Start(ctx, plan(t)); err != nil || again != name {
		t.Errorf("Start again = %q, %v", again, err)
	}
	list, _ := v.dyn.Resource(TaskRuns).Namespace("team-a").List(ctx, metav1.ListOptions{})
	if len(list.Items) != 1 {
		t.Errorf("%d TaskRuns", len(list.Items))
	}
}

// TestStartRefused: a TaskRun the API server refuses for good (Tekton's
// webhook down, a denial) leaves no stage Secret, so that the attempt
// reads as never started and starts again, rather than lost.
func TestStartRefused(t *testing.T) {
	v := newEnv(t)
	refuse := true
	v.dyn.PrependReactor("create", "taskruns", func(k8stesting.Action) (bool, runtime.Object, error) {
		if refuse {
			return true, nil, apierrors.NewInternalError(errors.New(`failed calling webhook "validation.webhook.pipeline.tekton.dev": connection refused`))
		}
		return false, nil, nil
	})
	ctx := context.Background()
	if _, err := v.e.Start(ctx, plan(t)); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Fatalf("Start = %v", err)
	}
	if sh, err := v.e.claims.recordedShape(ctx, identityOf(plan(t))); err != nil || sh != nil {
		t.Errorf("the refused TaskRun's template is still recorded (%s, %v): the next Start would not take the template as it is then", sh, err)
	}
	if st, err := v.e.Status(ctx, plan(t)); err != nil || !st.Startable() {
		t.Errorf("Status after the refusal = %+v, %v; want startable", st, err)
	}
	refuse = false
	if _, err := v.e.Start(ctx, plan(t)); err != nil {
		t.Fatal(err)
	}
	if st, err := v.e.Status(ctx, plan(t)); err != nil || st.State != executor.StateRunning {
		t.Errorf("Status = %+v, %v; want Running", st, err)
	}
}

// TestForgedTaskRun: a TaskRun of the execution's name and the run's
// labels that terrarun did not build (another image, a second step or a
// sidecar, an override of its steps, another service account) is never
// adopted, and its state is not the stage's.
func TestForgedTaskRun(t *testing.T) {
	for what, spoil := range map[string]func(*unstructured.Unstructured){
		"another image": func(tr *unstructured.Unstructured) {
			s := tr.Object["spec"].(map[string]any)
			firstStep(s)["image"] = "evil.example/exfiltrate:latest"
		},
		"another command": func(tr *unstructured.Unstructured) {
			s := tr.Object["spec"].(map[string]any)
			firstStep(s)["command"] = []any{"sh", "-c", "cat /etc/terrarun/stage/*"}
		},
		"a second step": func(tr *unstructured.Unstructured) {
			s := tr.Object["spec"].(map[string]any)
			ts := s["taskSpec"].(map[string]any)
			ts["steps"] = append(ts["steps"].([]any), map[string]any{"name": "steal", "image": "busybox"})
		},
		"a sidecar": func(tr *unstructured.Unstructured) {
			s := tr.Object["spec"].(map[string]any)
			s["taskSpec"].(map[string]any)["sidecars"] = []any{map[string]any{"name": "steal", "image": "busybox"}}
		},
		"a script on the stage's step": func(tr *unstructured.Unstructured) {
			firstStep(tr.Object["spec"].(map[string]any))["script"] = "cat /etc/terrarun/stage/*"
		},
		"stepSpecs": func(tr *unstructured.Unstructured) {
			s := tr.Object["spec"].(map[string]any)
			s["stepSpecs"] = []any{map[string]any{"name": "executor", "computeResources": map[string]any{}}}
		},
		"another service account": func(tr *unstructured.Unstructured) {
			s := tr.Object["spec"].(map[string]any)
			s["serviceAccountName"] = "admin"
		},
		"env in the pod template": func(tr *unstructured.Unstructured) {
			s := tr.Object["spec"].(map[string]any)
			s["podTemplate"].(map[string]any)["env"] = []any{map[string]any{"name": "TF_CLI_ARGS", "value": "-lock=false"}}
		},
		"another volume": func(tr *unstructured.Unstructured) {
			s := tr.Object["spec"].(map[string]any)
			ts := s["taskSpec"].(map[string]any)
			vols := ts["volumes"].([]any)
			vols[0].(map[string]any)["secret"].(map[string]any)["secretName"] = "someone-elses"
		},
		"another timeout": func(tr *unstructured.Unstructured) {
			tr.Object["spec"].(map[string]any)["timeout"] = "72h0m0s"
		},
		"a DNS policy": func(tr *unstructured.Unstructured) {
			tr.Object["spec"].(map[string]any)["podTemplate"].(map[string]any)["dnsPolicy"] = "None"
		},
		"a sidecar injector's annotation": func(tr *unstructured.Unstructured) {
			a := tr.GetAnnotations()
			a["sidecar.istio.io/inject"] = "true"
			tr.SetAnnotations(a)
		},
		"another stage label": func(tr *unstructured.Unstructured) {
			l := tr.GetLabels()
			l[job.LabelAttempt] = "2"
			tr.SetLabels(l)
		},
	} {
		t.Run(what, func(t *testing.T) {
			ex := plan(t)
			opts := testOptions()
			opts.HostName = PodName
			built, _, err := job.BuildJob(ex, opts)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := buildTaskRun(built, &shape{})
			if err != nil {
				t.Fatal(err)
			}
			spoil(tr)
			tr.SetUID("f0f0f0f0-0000-4000-8000-000000000001")
			v := newEnv(t, tr)
			if _, err := v.e.Start(context.Background(), ex); err == nil || !strings.Contains(err.Error(), "is not the one terrarun builds") {
				t.Errorf("Start adopted the forged TaskRun: %v", err)
			}
			// Its pod never gets the stage's key: the stage Secret is not written.
			if _, err := v.kube.CoreV1().Secrets("team-a").Get(context.Background(), "web-plan-1-stage", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the stage Secret was written for the forged TaskRun's pod to mount (%v)", err)
			}
			st, err := v.e.Status(context.Background(), ex)
			if err != nil || st.State != executor.StateUnknown || st.Reason != executor.ReasonForged {
				t.Errorf("Status = %+v, %v; want Unknown, Forged", st, err)
			}
		})
	}
	// An option changed since the TaskRun was made (the token's lifetime)
	// is no forgery.
	ex := plan(t)
	v := newEnv(t)
	if _, err := v.e.Start(context.Background(), ex); err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	opts.TokenExpiration = 3 * time.Hour
	changed := NewExecutor(v.kube, v.dyn, NewClaims(etcdClient), Options{Jobs: opts})
	if st, err := changed.Status(context.Background(), ex); err != nil || st.State != executor.StateRunning {
		t.Errorf("Status after the token's lifetime changed = %+v, %v; want Running", st, err)
	}
}

func firstStep(spec map[string]any) map[string]any {
	return spec["taskSpec"].(map[string]any)["steps"].([]any)[0].(map[string]any)
}

// setStatus sets the TaskRun's status as Tekton would.
func (v *env) setStatus(t *testing.T, name string, status map[string]any) {
	t.Helper()
	tr := v.taskRun(t, name)
	tr.Object["status"] = status
	if _, err := v.dyn.Resource(TaskRuns).Namespace("team-a").Update(context.Background(), tr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// pod creates the TaskRun's pod, as Tekton would.
func (v *env) pod(t *testing.T, trName string, uid types.UID, mutate func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	tr := v.taskRun(t, trName)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: PodName(trName), Namespace: "team-a", UID: uid, Labels: tr.GetLabels(), Annotations: tr.GetAnnotations(),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: trName, UID: tr.GetUID(), Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{ServiceAccountName: "default", NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if mutate != nil {
		mutate(p)
	}
	created, err := v.kube.CoreV1().Pods("team-a").Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func condition(status, reason string) map[string]any {
	return map[string]any{"type": "Succeeded", "status": status, "reason": reason, "message": reason + " said Tekton"}
}

func steps(exit int64, reason string) []any {
	return []any{map[string]any{"name": "executor", "container": "step-executor", "terminated": map[string]any{"exitCode": exit, "reason": reason}}}
}

// TestStatus maps a TaskRun's condition and step to the execution's state.
func TestStatus(t *testing.T) {
	started := "2026-12-07T10:00:00Z"
	for _, c := range []struct {
		name   string
		status map[string]any
		pod    func(*corev1.Pod)
		state  executor.State
		reason string
		exit   *int32
		says   string
		// silent: the pod never spoke to terrarun (claimed no attempt).
		silent bool
	}{
		{name: "no pod yet", status: map[string]any{"conditions": []any{condition("Unknown", "Pending")}}, state: executor.StateRunning},
		{name: "running", status: map[string]any{"podName": "web-plan-1-pod", "startTime": started, "conditions": []any{condition("Unknown", "Running")}}, state: executor.StateRunning},
		{name: "image pull back-off", status: map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("Unknown", "Pending")}},
			pod: func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodPending
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "step-executor", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "no such image"}}}}
			},
			state: executor.StateRunning, reason: "ImagePullBackOff", says: "no such image"},
		{name: "succeeded", status: map[string]any{"podName": "web-plan-1-pod", "completionTime": started, "conditions": []any{condition("True", "Succeeded")}, "steps": steps(0, "Completed")},
			state: executor.StateSucceeded, reason: executor.ReasonCompleted, exit: ptr.To[int32](0)},
		{name: "failed", status: map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("False", "Failed")}, "steps": steps(1, "Error")},
			state: executor.StateFailed, reason: executor.ReasonError, exit: ptr.To[int32](1), says: "terrarun-executor exited with code 1"},
		{name: "out of memory", status: map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("False", "Failed")}, "steps": steps(137, "OOMKilled")},
			state: executor.StateFailed, reason: "OOMKilled", exit: ptr.To[int32](137)},
		{name: "timed out", status: map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("False", "TaskRunTimeout")}},
			state: executor.StateFailed, reason: executor.ReasonDeadlineExceeded},
		{name: "canceled", status: map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("False", "TaskRunCancelled")}, "steps": steps(130, "Error")},
			state: executor.StateFailed, reason: executor.ReasonCanceled, exit: ptr.To[int32](130)},
		{name: "image never pulled", status: map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("False", "TaskRunImagePullFailed")}},
			state: executor.StateFailed, reason: "TaskRunImagePullFailed", silent: true},
		{name: "succeeded, but no pod proved the stage's key", status: map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("True", "Succeeded")}, "steps": steps(0, "Completed")},
			state: executor.StateUnknown, reason: executor.ReasonExecutorLost, says: "no pod of it ever proved the stage's key", silent: true},
		{name: "failed before its step ended", status: map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("False", "Failed")}},
			state: executor.StateUnknown, reason: executor.ReasonExecutorLost, says: "failed before its step ended"},
		{name: "the executor refused a forged stage", status: map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("False", "Failed")}, "steps": steps(int64(stage.ExitForged), "Error")},
			state: executor.StateUnknown, reason: executor.ReasonForged, says: "refused to run it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newEnv(t)
			ex := plan(t)
			if _, err := v.e.Start(context.Background(), ex); err != nil {
				t.Fatal(err)
			}
			v.setStatus(t, "web-plan-1", c.status)
			if _, ok := c.status["podName"]; ok {
				v.pod(t, "web-plan-1", "pod-uid-1", c.pod)
			}
			if _, ok := c.status["podName"]; ok && !c.silent {
				// The pod proved the stage's key, as the stage's does.
				if _, err := v.e.claims.Claim(context.Background(), identityOf(ex), "pod-uid-1"); err != nil {
					t.Fatal(err)
				}
			}
			st, err := v.e.Status(context.Background(), ex)
			if err != nil {
				t.Fatal(err)
			}
			if st.State != c.state || st.Reason != c.reason || !equalJSON(st.ExitCode, c.exit) || !strings.Contains(st.Message, c.says) || st.Name != "web-plan-1" {
				t.Errorf("Status = %+v (exit %v), want %s %s exit %v saying %q", st, ptr.Deref(st.ExitCode, -1), c.state, c.reason, ptr.Deref(c.exit, -1), c.says)
			}
		})
	}
}

// TestStatusMissing: no TaskRun and no stage Secret is an execution never
// started; a stage Secret without its TaskRun is one that existed and is
// gone, lost, never started again.
func TestStatusMissing(t *testing.T) {
	v := newEnv(t)
	ex := plan(t)
	if st, err := v.e.Status(context.Background(), ex); err != nil || !st.Startable() {
		t.Errorf("Status before Start = %+v, %v; want startable", st, err)
	}
	if _, err := v.e.Start(context.Background(), ex); err != nil {
		t.Fatal(err)
	}
	if err := v.dyn.Resource(TaskRuns).Namespace("team-a").Delete(context.Background(), "web-plan-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if st, err := v.e.Status(context.Background(), ex); err != nil || st.State != executor.StateUnknown || st.Reason != executor.ReasonExecutorLost || !strings.Contains(st.Message, "TaskRun team-a/web-plan-1 no longer exists") {
		t.Errorf("Status of a deleted TaskRun = %+v, %v", st, err)
	}
}

// cancelled says whether the TaskRun was canceled.
func (v *env) cancelled(t *testing.T, name string) bool {
	s, _, _ := unstructured.NestedString(v.taskRun(t, name).Object, "spec", "status")
	return s == cancelled
}

// TestStatusPodReplaced: Tekton starts the pod of a running TaskRun again
// when it is gone. The stage attempt is lost, and its TaskRun canceled, both
// when the pod is gone and when another pod than the one that first spoke
// runs: an apply never runs twice.
func TestStatusPodReplaced(t *testing.T) {
	for _, c := range []struct {
		name    string
		replace bool
		node    string
		says    string
	}{
		{"gone", false, "", "pod web-apply-1-pod of TaskRun web-apply-1 no longer exists"},
		{"replaced", true, "", "is not the stage's first pod (UID first-pod)"},
		{"its node gone", false, "node-2", "ran on node node-2, which no longer exists"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newEnv(t)
			ex := executor.Execution{Run: testRun(t), Stage: v1alpha1.StageApply, Attempt: 1, PlanDigest: "sha256:abc"}
			if _, err := v.e.Start(context.Background(), ex); err != nil {
				t.Fatal(err)
			}
			v.setStatus(t, "web-apply-1", map[string]any{"podName": "web-apply-1-pod", "conditions": []any{condition("Unknown", "Running")}})
			id := executor.Identity{Namespace: "team-a", Name: "web", UID: string(ex.Run.UID), Stage: v1alpha1.StageApply, Attempt: 1}
			if ok, err := v.e.claims.Claim(context.Background(), id, "first-pod"); !ok || err != nil {
				t.Fatalf("claim: %v %v", ok, err)
			}
			if c.replace {
				v.pod(t, "web-apply-1", "second-pod", nil)
			}
			if c.node != "" {
				v.pod(t, "web-apply-1", "first-pod", func(p *corev1.Pod) { p.Spec.NodeName = c.node })
			}
			st, err := v.e.Status(context.Background(), ex)
			if err != nil || st.State != executor.StateUnknown || st.Reason != executor.ReasonExecutorLost || !strings.Contains(st.Message, c.says) {
				t.Errorf("Status = %+v, %v; want lost saying %q", st, err, c.says)
			}
			if st.Startable() {
				t.Errorf("a lost apply is startable")
			}
			if !v.cancelled(t, "web-apply-1") {
				t.Errorf("the TaskRun of the lost attempt was not canceled")
			}
			// Tekton ends the TaskRun canceled: the stage is still lost,
			// not canceled.
			v.setStatus(t, "web-apply-1", map[string]any{"podName": "web-apply-1-pod", "conditions": []any{condition("False", "TaskRunCancelled")}})
			if st, err := v.e.Status(context.Background(), ex); err != nil || st.Reason != executor.ReasonExecutorLost {
				t.Errorf("Status once Tekton canceled the lost TaskRun = %+v, %v; want lost", st, err)
			}
		})
	}
	// The first pod, running, is the stage's.
	v := newEnv(t)
	ex := plan(t)
	if _, err := v.e.Start(context.Background(), ex); err != nil {
		t.Fatal(err)
	}
	v.setStatus(t, "web-plan-1", map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("Unknown", "Running")}})
	v.pod(t, "web-plan-1", "first-pod", nil)
	if _, err := v.e.claims.Claim(context.Background(), executor.Identity{Namespace: "team-a", Name: "web", UID: string(ex.Run.UID), Stage: v1alpha1.StagePlan, Attempt: 1}, "first-pod"); err != nil {
		t.Fatal(err)
	}
	if st, err := v.e.Status(context.Background(), ex); err != nil || st.State != executor.StateRunning {
		t.Errorf("Status of the first pod = %+v, %v", st, err)
	}
	if v.cancelled(t, "web-plan-1") {
		t.Errorf("a running stage's TaskRun was canceled")
	}
}

// TestStatusEndedAfterReplacement: what Tekton says of a TaskRun whose
// first pod is gone is not the stage's: a failure once it replaced the
// pod (the replacement, refused as the stage, exited non-zero; or it could
// not be created) is a lost stage, which a plan retries, not a failed one.
func TestStatusEndedAfterReplacement(t *testing.T) {
	for _, c := range []struct {
		name    string
		status  map[string]any
		replace bool
	}{
		{"the replacement failed", map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("False", "Failed")}, "steps": steps(1, "Error")}, true},
		{"the replacement succeeded", map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("True", "Succeeded")}, "steps": steps(0, "Completed")}, true},
		{"the replacement could not be created", map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("False", "PodCreationFailed")}}, false},
		{"the replacement was not admitted", map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("False", "PodAdmissionFailed")}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newEnv(t)
			ex := plan(t)
			if _, err := v.e.Start(context.Background(), ex); err != nil {
				t.Fatal(err)
			}
			id := executor.Identity{Namespace: "team-a", Name: "web", UID: string(ex.Run.UID), Stage: v1alpha1.StagePlan, Attempt: 1}
			if _, err := v.e.claims.Claim(context.Background(), id, "first-pod"); err != nil {
				t.Fatal(err)
			}
			v.setStatus(t, "web-plan-1", c.status)
			if c.replace {
				v.pod(t, "web-plan-1", "second-pod", nil)
			}
			st, err := v.e.Status(context.Background(), ex)
			if err != nil || st.State != executor.StateUnknown || st.Reason != executor.ReasonExecutorLost {
				t.Errorf("Status = %+v, %v; want lost", st, err)
			}
		})
	}
}

// TestStatusLostBeforeAnyPodSpoke: a stage lost before any pod proved its
// key is claimed for no pod: a pod Tekton starts again is never the stage.
func TestStatusLostBeforeAnyPodSpoke(t *testing.T) {
	v := newEnv(t)
	ex := plan(t)
	if _, err := v.e.Start(context.Background(), ex); err != nil {
		t.Fatal(err)
	}
	v.setStatus(t, "web-plan-1", map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("Unknown", "Running")}})
	if st, err := v.e.Status(context.Background(), ex); err != nil || st.Reason != executor.ReasonExecutorLost {
		t.Fatalf("Status of a running TaskRun whose pod is gone = %+v, %v; want lost", st, err)
	}
	if first, err := v.e.claims.Claim(context.Background(), identityOf(ex), "late-pod"); err != nil || first {
		t.Errorf("a pod that speaks after the stage was lost claimed it: %v %v", first, err)
	}
}

// TestStatusLostCancelRefused: a lost stage whose TaskRun cannot be
// canceled (Tekton's webhook down) is reported lost all the same: a pod
// Tekton starts again is refused as the stage.
func TestStatusLostCancelRefused(t *testing.T) {
	v := newEnv(t)
	ex := plan(t)
	if _, err := v.e.Start(context.Background(), ex); err != nil {
		t.Fatal(err)
	}
	v.setStatus(t, "web-plan-1", map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("Unknown", "Running")}})
	v.dyn.PrependReactor("patch", "taskruns", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInternalError(errors.New(`failed calling webhook "validation.webhook.pipeline.tekton.dev": connection refused`))
	})
	st, err := v.e.Status(context.Background(), ex)
	if err != nil || st.Reason != executor.ReasonExecutorLost || !strings.Contains(st.Message, "canceling its TaskRun failed") {
		t.Errorf("Status = %+v, %v; want lost, saying the cancel failed", st, err)
	}
}

// TestCancelOnlyItsTaskRun: the cancel is a patch that tests the TaskRun's
// UID: another TaskRun made under the name since is not canceled.
func TestCancelOnlyItsTaskRun(t *testing.T) {
	v := newEnv(t)
	ex := plan(t)
	if _, err := v.e.Start(context.Background(), ex); err != nil {
		t.Fatal(err)
	}
	old := v.taskRun(t, "web-plan-1")
	now := old.DeepCopy()
	now.SetUID("another-taskrun")
	if _, err := v.dyn.Resource(TaskRuns).Namespace("team-a").Update(context.Background(), now, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := v.e.cancel(context.Background(), old, stopMessage); err != nil {
		t.Errorf("cancel of a TaskRun that is gone: %v", err)
	}
	if v.cancelled(t, "web-plan-1") {
		t.Errorf("another TaskRun of the name was canceled")
	}
}

// TestStop cancels the TaskRun first (so that Tekton starts no pod again),
// then deletes its pod with the grace period.
func TestStop(t *testing.T) {
	v := newEnv(t)
	ex := plan(t)
	if _, err := v.e.Start(context.Background(), ex); err != nil {
		t.Fatal(err)
	}
	v.setStatus(t, "web-plan-1", map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("Unknown", "Running")}})
	v.pod(t, "web-plan-1", "pod-1", nil)
	var deleted *metav1.DeleteOptions
	v.kube.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o := a.(k8stesting.DeleteActionImpl).DeleteOptions
		deleted = &o
		return false, nil, nil
	})
	if err := v.e.Stop(context.Background(), ex, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if !v.cancelled(t, "web-plan-1") {
		t.Errorf("the TaskRun was not canceled")
	}
	if deleted == nil || ptr.Deref(deleted.GracePeriodSeconds, 0) != 20 || deleted.Preconditions == nil || ptr.Deref(deleted.Preconditions.UID, "") != "pod-1" {
		t.Errorf("the pod's deletion: %+v", deleted)
	}
	// An ended TaskRun is left alone.
	v = newEnv(t)
	if _, err := v.e.Start(context.Background(), ex); err != nil {
		t.Fatal(err)
	}
	v.setStatus(t, "web-plan-1", map[string]any{"conditions": []any{condition("True", "Succeeded")}})
	if err := v.e.Stop(context.Background(), ex, time.Second); err != nil || v.cancelled(t, "web-plan-1") {
		t.Errorf("Stop of an ended TaskRun: %v, canceled %v", err, v.cancelled(t, "web-plan-1"))
	}
}

// TestForget removes the run's claims.
func TestForget(t *testing.T) {
	v := newEnv(t)
	run := testRun(t)
	id := executor.Identity{Namespace: "team-a", Name: "web", UID: string(run.UID), Stage: v1alpha1.StageApply, Attempt: 1}
	if _, err := v.e.claims.Claim(context.Background(), id, "pod-1"); err != nil {
		t.Fatal(err)
	}
	if err := v.e.Forget(context.Background(), "team-a", "web", string(run.UID)); err != nil {
		t.Fatal(err)
	}
	if got, err := v.e.claims.Pod(context.Background(), id); err != nil || got != "" {
		t.Errorf("claim after Forget: %q, %v", got, err)
	}
}

// TestIdentity: the first pod of a TaskRun of the run that proves its
// stage key is the stage attempt; a second pod of the same TaskRun
// (Tekton's, after the first was gone), a pod of a TaskRun that is not the
// run's, a pod not controlled by the TaskRun its labels name, or one not
// named as Tekton names the TaskRun's pod, is refused; and a request
// without the key (a token minted for a pending pod) claims nothing.
func TestIdentity(t *testing.T) {
	v := newEnv(t)
	ex := executor.Execution{Run: testRun(t), Stage: v1alpha1.StageApply, Attempt: 1, PlanDigest: "sha256:abc"}
	if _, err := v.e.Start(context.Background(), ex); err != nil {
		t.Fatal(err)
	}
	keys, err := job.NewStageKeys([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	claims := NewClaims(etcdClient)
	r := NewIdentityResolver(v.kube, v.dyn, keys, claims)
	tokenOf := func(p *corev1.Pod) user.Info {
		return &user.DefaultInfo{Name: serviceaccount.MakeUsername("team-a", "default"),
			Extra: map[string][]string{serviceaccount.PodNameKey: {p.Name}, serviceaccount.PodUIDKey: {string(p.UID)}}}
	}
	want := executor.Identity{Namespace: "team-a", Name: "web", UID: string(ex.Run.UID), Stage: v1alpha1.StageApply, Attempt: 1}
	// resolve is what auth.NewAuthenticator does with a request of pod p,
	// with the stage key or without.
	resolve := func(p *corev1.Pod, withKey bool) (executor.Identity, error) {
		u := tokenOf(p)
		id, ok, err := r.ExecutorIdentity(context.Background(), u)
		if err != nil || !ok {
			return id, fmt.Errorf("ExecutorIdentity: %v, %w", ok, err)
		}
		req, _ := http.NewRequest(http.MethodGet, "https://terrarun/", nil)
		if withKey {
			req.Header.Set(stage.StageKeyHeader, keys.For(id))
		}
		return id, r.ProveRequest(req, u, id)
	}
	first := v.pod(t, "web-apply-1", "first-pod", nil)
	// A token minted for the pending pod, without the stage key: refused,
	// and the attempt is still unclaimed.
	if _, err := resolve(first, false); !errors.Is(err, auth.ErrRejected) || !strings.Contains(err.Error(), "carries no stage key") {
		t.Errorf("the pod's token without the stage key: %v", err)
	}
	if got, err := claims.Pod(context.Background(), want); got != "" || err != nil {
		t.Fatalf("a request without the stage key claimed the attempt for pod %q (%v)", got, err)
	}
	for range 2 {
		id, err := resolve(first, true)
		if err != nil || id != want {
			t.Fatalf("the first pod: %+v %v", id, err)
		}
	}
	if err := v.kube.CoreV1().Pods("team-a").Delete(context.Background(), first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	second := v.pod(t, "web-apply-1", "second-pod", nil)
	if _, err := resolve(second, true); !errors.Is(err, auth.ErrRejected) || !strings.Contains(err.Error(), "is not the first pod of TaskRun web-apply-1") {
		t.Errorf("Tekton's second pod of the attempt: %v", err)
	}
	// A pod that copies the labels, controlled by no TaskRun.
	stray := v.pod(t, "web-apply-1", "stray-pod", func(p *corev1.Pod) {
		p.Name, p.OwnerReferences = "stray", nil
	})
	if _, err := resolve(stray, true); !errors.Is(err, auth.ErrRejected) || !strings.Contains(err.Error(), "is not the pod Tekton names for TaskRun web-apply-1") {
		t.Errorf("a pod with the run's labels and another name: %v", err)
	}
	if err := v.kube.CoreV1().Pods("team-a").Delete(context.Background(), second.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	orphan := v.pod(t, "web-apply-1", "orphan-pod", func(p *corev1.Pod) { p.OwnerReferences = nil })
	if _, err := resolve(orphan, true); !errors.Is(err, auth.ErrRejected) || !strings.Contains(err.Error(), "is not controlled by TaskRun web-apply-1") {
		t.Errorf("a pod of the TaskRun's name controlled by no TaskRun: %v", err)
	}
	if err := v.kube.CoreV1().Pods("team-a").Delete(context.Background(), orphan.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod that names the TaskRun as its controller, with another UID.
	forged := v.pod(t, "web-apply-1", "forged-pod", func(p *corev1.Pod) {
		p.OwnerReferences[0].UID = "another-taskrun"
	})
	if _, err := resolve(forged, true); !errors.Is(err, auth.ErrRejected) || !strings.Contains(err.Error(), "is controlled by TaskRun UID another-taskrun") {
		t.Errorf("a pod of another TaskRun of the name: %v", err)
	}
	// Not an executor's pod at all: no claim.
	plain, err := v.kube.CoreV1().Pods("team-a").Create(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-a", UID: "app-uid"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := r.ExecutorIdentity(context.Background(), tokenOf(plain)); ok || err != nil {
		t.Errorf("a pod that is no executor's: %v %v", ok, err)
	}
}
