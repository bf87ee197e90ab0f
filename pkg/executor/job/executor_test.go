package job

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
)

const testJobUID = types.UID("a0000000-0000-4000-8000-00000000j0b1")

func planExecution() executor.Execution {
	return executor.Execution{Run: testRun(), Stage: v1alpha1.StagePlan, Attempt: 2}
}

func TestStartCreatesSecretAndJob(t *testing.T) {
	client := fake.NewClientset()
	e := NewExecutor(client, testOptions())
	name, err := e.Start(context.Background(), planExecution())
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if name != "web-plan-2" {
		t.Errorf("Start = %q, want web-plan-2", name)
	}
	if _, err := client.BatchV1().Jobs("team-a").Get(context.Background(), name, metav1.GetOptions{}); err != nil {
		t.Errorf("Job: %v", err)
	}
	if _, err := client.CoreV1().Secrets("team-a").Get(context.Background(), name+"-stage", metav1.GetOptions{}); err != nil {
		t.Errorf("Secret: %v", err)
	}
	// The Secret is created before the Job, which mounts it.
	var order []string
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" {
			order = append(order, a.GetResource().Resource)
		}
	}
	if len(order) != 2 || order[0] != "secrets" || order[1] != "jobs" {
		t.Errorf("creates = %v, want secrets then jobs", order)
	}
}

func TestStartTwiceAdopts(t *testing.T) {
	client := fake.NewClientset()
	e := NewExecutor(client, testOptions())
	ctx := context.Background()
	first, err := e.Start(ctx, planExecution())
	if err != nil {
		t.Fatalf("first Start: %v", err)
	}
	second, err := e.Start(ctx, planExecution())
	if err != nil {
		t.Fatalf("second Start: %v", err)
	}
	if first != second {
		t.Errorf("Start names %q then %q", first, second)
	}
	jobs, _ := client.BatchV1().Jobs("team-a").List(ctx, metav1.ListOptions{})
	if len(jobs.Items) != 1 {
		t.Errorf("%d Jobs after two Starts, want 1", len(jobs.Items))
	}
	secrets, _ := client.CoreV1().Secrets("team-a").List(ctx, metav1.ListOptions{})
	if len(secrets.Items) != 1 {
		t.Errorf("%d Secrets after two Starts, want 1", len(secrets.Items))
	}
}

func TestStartConcurrentOneJob(t *testing.T) {
	client := fake.NewClientset()
	e := NewExecutor(client, testOptions())
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			if _, err := e.Start(context.Background(), planExecution()); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Start: %v", err)
	}
	jobs, _ := client.BatchV1().Jobs("team-a").List(context.Background(), metav1.ListOptions{})
	if len(jobs.Items) != 1 {
		t.Errorf("%d Jobs, want 1", len(jobs.Items))
	}
}

func TestStartForeignJob(t *testing.T) {
	foreign := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{
		Name: "web-plan-2", Namespace: "team-a",
		Labels: map[string]string{LabelRun: "web", LabelRunUID: "another-run-uid"},
	}}
	client := fake.NewClientset(foreign)
	if _, err := NewExecutor(client, testOptions()).Start(context.Background(), planExecution()); err == nil {
		t.Errorf("Start adopted a Job of another run")
	}
	// An unlabeled Job of the same name is foreign too.
	client = fake.NewClientset(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "web-plan-2", Namespace: "team-a"}})
	if _, err := NewExecutor(client, testOptions()).Start(context.Background(), planExecution()); err == nil {
		t.Errorf("Start adopted an unlabeled Job")
	}
}

func TestStartForeignSecret(t *testing.T) {
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "web-plan-2-stage", Namespace: "team-a"}}
	client := fake.NewClientset(foreign)
	if _, err := NewExecutor(client, testOptions()).Start(context.Background(), planExecution()); err == nil {
		t.Errorf("Start adopted a Secret of another run")
	}
	if jobs, _ := client.BatchV1().Jobs("team-a").List(context.Background(), metav1.ListOptions{}); len(jobs.Items) != 0 {
		t.Errorf("Start created a Job mounting a foreign Secret")
	}
}

// started returns a client holding the execution's Job with the given
// status, and its pod with the given container state.
func started(t *testing.T, jobStatus batchv1.JobStatus, container *corev1.ContainerState) (*fake.Clientset, *Executor) {
	t.Helper()
	client := fake.NewClientset()
	e := NewExecutor(client, testOptions())
	ctx := context.Background()
	name, err := e.Start(ctx, planExecution())
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	job, err := client.BatchV1().Jobs("team-a").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	job.UID = testJobUID
	job.Status = jobStatus
	if _, err := client.BatchV1().Jobs("team-a").Update(ctx, job, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if container != nil {
		pod := jobPod(job, "p0d-uid")
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: *container}}
		if _, err := client.CoreV1().Pods("team-a").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return client, e
}

// jobPod returns a pod as the Job controller makes it for job.
func jobPod(job *batchv1.Job, uid types.UID) *corev1.Pod {
	labels := map[string]string{batchv1.JobNameLabel: job.Name, "job-name": job.Name}
	for k, v := range job.Spec.Template.Labels {
		labels[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: job.Name + "-x7k2q", Namespace: job.Namespace, UID: uid,
			Labels:      labels,
			Annotations: job.Spec.Template.Annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true),
			}},
		},
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
}

func TestStatus(t *testing.T) {
	start := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	end := metav1.NewTime(start.Add(time.Minute))
	cases := []struct {
		name      string
		status    batchv1.JobStatus
		container *corev1.ContainerState
		state     executor.State
		exitCode  *int32
		reason    string
		message   string // when set, st.Message
	}{
		{
			name:   "running, no pod yet",
			status: batchv1.JobStatus{StartTime: &start, Active: 1},
			state:  executor.StateRunning,
		},
		{
			name:      "running",
			status:    batchv1.JobStatus{StartTime: &start, Active: 1},
			container: &corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: start}},
			state:     executor.StateRunning,
		},
		{
			name:   "waiting for a missing Secret",
			status: batchv1.JobStatus{StartTime: &start, Active: 1},
			container: &corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "CreateContainerConfigError", Message: `secret "db-credentials" not found`,
			}},
			state:  executor.StateRunning,
			reason: "CreateContainerConfigError",
		},
		{
			name: "succeeded",
			status: batchv1.JobStatus{StartTime: &start, CompletionTime: &end, Succeeded: 1, Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue},
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: end},
			}},
			container: &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}},
			state:     executor.StateSucceeded,
			exitCode:  ptr.To[int32](0),
			reason:    "Completed",
		},
		{
			name: "failed with an exit code",
			status: batchv1.JobStatus{StartTime: &start, Failed: 1, Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded},
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: end},
			}},
			container: &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error"}},
			state:     executor.StateFailed,
			exitCode:  ptr.To[int32](3),
			reason:    "Error",
			message:   "terrarun-executor exited with code 3",
		},
		{
			name: "failed, saying why in its termination message",
			status: batchv1.JobStatus{StartTime: &start, Failed: 1, Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: end},
			}},
			container: &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "git clone: fatal: could not resolve host (exit status 128)"}},
			state:     executor.StateFailed,
			exitCode:  ptr.To[int32](1),
			reason:    "Error",
			message:   "terrarun-executor exited with code 1: git clone: fatal: could not resolve host (exit status 128)",
		},
		{
			name: "failed: OOMKilled",
			status: batchv1.JobStatus{StartTime: &start, Failed: 1, Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: end},
			}},
			container: &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}},
			state:     executor.StateFailed,
			exitCode:  ptr.To[int32](137),
			reason:    "OOMKilled",
		},
		{
			name: "failed: deadline exceeded",
			status: batchv1.JobStatus{StartTime: &start, Failed: 1, Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded, Message: "Job was active longer than specified deadline", LastTransitionTime: end},
			}},
			container: &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 130, Reason: "Error"}},
			state:     executor.StateFailed,
			exitCode:  ptr.To[int32](130),
			reason:    batchv1.JobReasonDeadlineExceeded,
		},
		{
			name: "failing, not yet failed",
			status: batchv1.JobStatus{StartTime: &start, Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded},
			}},
			state: executor.StateRunning,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, e := started(t, c.status, c.container)
			st, err := e.Status(context.Background(), planExecution())
			if err != nil {
				t.Fatalf("Status: %v", err)
			}
			if st.State != c.state {
				t.Errorf("State = %s, want %s", st.State, c.state)
			}
			if st.Name != "web-plan-2" {
				t.Errorf("Name = %q", st.Name)
			}
			if (st.ExitCode == nil) != (c.exitCode == nil) || (st.ExitCode != nil && *st.ExitCode != *c.exitCode) {
				t.Errorf("ExitCode = %v, want %v", ptr.Deref(st.ExitCode, -1), ptr.Deref(c.exitCode, -1))
			}
			if st.Reason != c.reason {
				t.Errorf("Reason = %q, want %q (message %q)", st.Reason, c.reason, st.Message)
			}
			if c.message != "" && st.Message != c.message {
				t.Errorf("Message = %q, want %q", st.Message, c.message)
			}
			if st.StartTime == nil || !st.StartTime.Equal(start.Time) {
				t.Errorf("StartTime = %v, want %v", st.StartTime, start)
			}
			if ended := c.state != executor.StateRunning; ended != (st.CompletionTime != nil) {
				t.Errorf("CompletionTime = %v in state %s", st.CompletionTime, st.State)
			} else if ended && !st.CompletionTime.Equal(end.Time) {
				t.Errorf("CompletionTime = %v, want %v", st.CompletionTime, end)
			}
		})
	}
}

func TestStatusUnknown(t *testing.T) {
	e := NewExecutor(fake.NewClientset(), testOptions())
	st, err := e.Status(context.Background(), planExecution())
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if st.State != executor.StateUnknown || st.Name != "web-plan-2" || st.Reason != "NotStarted" {
		t.Errorf("Status of a missing Job = %+v, want Unknown/NotStarted web-plan-2", st)
	}
}

// TestStatusJobGone: a Job that existed and is gone (its Secret remains) is
// lost, never "not started", so the controller never starts it again.
func TestStatusJobGone(t *testing.T) {
	client := fake.NewClientset()
	e := NewExecutor(client, testOptions())
	ctx := context.Background()
	name, err := e.Start(ctx, planExecution())
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := client.BatchV1().Jobs("team-a").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := e.Status(ctx, planExecution())
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if st.State != executor.StateUnknown || st.Reason != "ExecutorLost" {
		t.Errorf("Status of a deleted Job = %+v, want Unknown/ExecutorLost", st)
	}
}

func TestStatusForeignJob(t *testing.T) {
	client := fake.NewClientset(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{
		Name: "web-plan-2", Namespace: "team-a", Labels: map[string]string{LabelRunUID: "other"},
	}})
	if _, err := NewExecutor(client, testOptions()).Status(context.Background(), planExecution()); err == nil {
		t.Errorf("Status of another run's Job succeeded")
	}
}

func TestStop(t *testing.T) {
	running := batchv1.JobStatus{Active: 1}
	client, e := started(t, running, &corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
	ctx := context.Background()
	client.ClearActions()
	if err := e.Stop(ctx, planExecution(), 45*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	var jobDelete, podDelete *metav1.DeleteOptions
	for _, a := range client.Actions() {
		d, ok := a.(k8stesting.DeleteActionImpl)
		if !ok {
			continue
		}
		opts := d.GetDeleteOptions()
		switch d.GetResource().Resource {
		case "jobs":
			jobDelete = &opts
		case "pods":
			podDelete = &opts
		}
	}
	if jobDelete == nil {
		t.Fatalf("Stop did not delete the Job; actions %v", client.Actions())
	}
	if p := jobDelete.PropagationPolicy; p == nil || *p != metav1.DeletePropagationBackground {
		t.Errorf("Job propagationPolicy = %v, want Background", p)
	}
	if g := ptr.Deref(jobDelete.GracePeriodSeconds, 0); g != 45 {
		t.Errorf("Job gracePeriodSeconds = %d, want 45", g)
	}
	if podDelete == nil {
		t.Fatalf("Stop did not delete the pod with the grace period")
	}
	if g := ptr.Deref(podDelete.GracePeriodSeconds, 0); g != 45 {
		t.Errorf("pod gracePeriodSeconds = %d, want 45", g)
	}
	if _, err := client.BatchV1().Jobs("team-a").Get(ctx, "web-plan-2", metav1.GetOptions{}); err == nil {
		t.Errorf("Job still exists after Stop")
	}
	st, err := e.Status(ctx, planExecution())
	if err != nil || st.State != executor.StateUnknown {
		t.Errorf("Status after Stop = %+v, %v; want Unknown", st, err)
	}
	// Stopping again, or a stage that never started, does nothing.
	if err := e.Stop(ctx, planExecution(), time.Second); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestStopFinishedDoesNothing(t *testing.T) {
	done := batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}
	client, e := started(t, done, &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}})
	client.ClearActions()
	if err := e.Stop(context.Background(), planExecution(), time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "delete" {
			t.Errorf("Stop of a finished Job: %v", a)
		}
	}
}

func TestForget(t *testing.T) {
	client := fake.NewClientset()
	if err := NewExecutor(client, testOptions()).Forget(context.Background(), "team-a", "web", testUID); err != nil {
		t.Errorf("Forget: %v", err)
	}
	if len(client.Actions()) != 0 {
		t.Errorf("Forget acted: %v", client.Actions())
	}
}

func TestRunNotifies(t *testing.T) {
	client := fake.NewClientset()
	// Only labeled Jobs reach the informer, as with a real server.
	client.PrependReactor("list", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if sel := a.(k8stesting.ListAction).GetListRestrictions().Labels.String(); sel != LabelRun {
			t.Errorf("list Jobs with selector %q, want %q", sel, LabelRun)
		}
		return false, nil, nil
	})
	e := NewExecutor(client, testOptions())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 16)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, func(ns, name string) { got <- ns + "/" + name }) }()

	// A Job of another controller is not reported.
	if _, err := client.BatchV1().Jobs("team-a").Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	run := testRun()
	run.Name = "a-run-name-that-is-much-longer-than-sixty-three-characters-as-label-values-allow"
	if _, err := e.Start(ctx, executor.Execution{Run: run, Stage: v1alpha1.StagePlan, Attempt: 1}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	select {
	case n := <-got:
		if n != "team-a/"+run.Name {
			t.Errorf("notified %q, want team-a/%s", n, run.Name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notification for a new Job")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestName(t *testing.T) {
	e := NewExecutor(fake.NewClientset(), testOptions())
	ex := planExecution()
	if got, want := e.Name(ex), JobName("web", v1alpha1.StagePlan, 2); got != want {
		t.Errorf("Name = %q, want %q", got, want)
	}
	name, err := e.Start(context.Background(), ex)
	if err != nil || name != e.Name(ex) {
		t.Errorf("Start = %q, %v; want Name %q", name, err, e.Name(ex))
	}
}

// TestStartForgedSecret is the attack of a tenant who may create Secrets in
// the run's namespace but not approve: before the apply stage starts, she
// creates its stage Secret with the run's labels (the run's UID is readable)
// and a stage.json that sends the executor's token to her server. Start must
// not adopt it, and no Job may mount it.
func TestStartForgedSecret(t *testing.T) {
	ctx := context.Background()
	ex := planExecution()
	_, built, err := BuildJob(ex, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	for name, forge := range map[string]func(s *corev1.Secret){
		"another server": func(s *corev1.Secret) {
			s.Data[StageKey] = []byte(`{"server":"https://attacker.example","stage":"plan","attempt":2}`)
		},
		"an extra key": func(s *corev1.Secret) { s.Data["extra"] = []byte("x") },
		"mutable":      func(s *corev1.Secret) { s.Immutable = nil },
	} {
		t.Run(name, func(t *testing.T) {
			forged := built.DeepCopy()
			forge(forged)
			client := fake.NewClientset(forged)
			_, err := NewExecutor(client, testOptions()).Start(ctx, ex)
			if err == nil {
				t.Fatal("Start adopted a forged stage Secret carrying the run's labels")
			}
			t.Logf("Start: %v", err)
			if jobs, _ := client.BatchV1().Jobs("team-a").List(ctx, metav1.ListOptions{}); len(jobs.Items) != 0 {
				t.Errorf("Start created a Job mounting the forged Secret")
			}
			// Nor is it taken for the Secret of a Job that ran and is gone.
			if st, err := NewExecutor(client, testOptions()).Status(ctx, ex); err != nil || st.Reason != executor.ReasonForged || !strings.Contains(st.Message, "data") && !strings.Contains(st.Message, "immutable") {
				t.Errorf("Status with a forged stage Secret = %+v, %v; want reason Forged naming the field", st, err)
			}
		})
	}
}

// TestStartForgedJob is the same attack with a Job: one of the execution's
// name and labels whose pod runs something else is never adopted.
func TestStartForgedJob(t *testing.T) {
	ctx := context.Background()
	ex := planExecution()
	builtJob, _, err := BuildJob(ex, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	for name, forge := range map[string]func(j *batchv1.Job){
		"another image": func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].Image = "attacker/image" },
		"another command": func(j *batchv1.Job) {
			j.Spec.Template.Spec.Containers[0].Command = []string{"sh", "-c", "cat /var/run/terrarun/token/token"}
		},
		"args": func(j *batchv1.Job) {
			j.Spec.Template.Spec.Containers[0].Args = []string{"--server", "https://attacker.example"}
		},
		"a sidecar": func(j *batchv1.Job) {
			j.Spec.Template.Spec.Containers = append(j.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar", Image: "attacker/image"})
		},
		"an init container": func(j *batchv1.Job) {
			j.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "attacker/image"}}
		},
		"envFrom": func(j *batchv1.Job) {
			j.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "loot"}}}}
		},
		"a postStart hook": func(j *batchv1.Job) {
			j.Spec.Template.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh"}}}}
		},
		"another stage Secret": func(j *batchv1.Job) {
			for i := range j.Spec.Template.Spec.Volumes {
				if s := j.Spec.Template.Spec.Volumes[i].Secret; s != nil {
					s.SecretName = "forged"
				}
			}
		},
		"host PID":                func(j *batchv1.Job) { j.Spec.Template.Spec.HostPID = true },
		"the node's resolver":     func(j *batchv1.Job) { j.Spec.Template.Spec.DNSPolicy = corev1.DNSDefault },
		"another service account": func(j *batchv1.Job) { j.Spec.Template.Spec.ServiceAccountName = "admin" },
	} {
		t.Run(name, func(t *testing.T) {
			forged := builtJob.DeepCopy()
			forge(forged)
			client := fake.NewClientset(forged)
			e := NewExecutor(client, testOptions())
			if _, err := e.Start(ctx, ex); err == nil {
				t.Fatal("Start adopted a forged Job carrying the run's labels")
			} else {
				t.Logf("Start: %v", err)
			}
			if st, err := e.Status(ctx, ex); err != nil || st.State != executor.StateUnknown || st.Reason != executor.ReasonForged {
				t.Errorf("Status of a forged Job = %+v, %v; want state Unknown, reason Forged", st, err)
			}
		})
	}
}

// TestStartInputs: a plan stage that reads another run's output gets its
// value in an inputs Secret, mounted as a file, never in the stage file;
// the apply stage mounts none; a forged inputs Secret is not adopted.
func TestStartInputs(t *testing.T) {
	ctx := context.Background()
	ex := planExecution()
	ex.Run.Spec.Variables = append(ex.Run.Spec.Variables, v1alpha1.Variable{Name: "vpc",
		ValueFrom: &v1alpha1.VariableSource{RunOutput: &v1alpha1.OutputSelector{Name: "network-1", Output: "vpc"}}})
	const value = `{"id":"vpc-S3CRET"}`
	ex.Inputs = map[string][]byte{"vpc": []byte(value)}

	client := fake.NewClientset()
	if _, err := NewExecutor(client, testOptions()).Start(ctx, ex); err != nil {
		t.Fatalf("Start: %v", err)
	}
	inputs, err := client.CoreV1().Secrets("team-a").Get(ctx, "web-plan-2-inputs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(inputs.Data["vpc"]) != value || !ptr.Deref(inputs.Immutable, false) {
		t.Errorf("inputs Secret %+v, want vpc's value, immutable", inputs)
	}
	stageSecret, _ := client.CoreV1().Secrets("team-a").Get(ctx, "web-plan-2-stage", metav1.GetOptions{})
	if strings.Contains(string(stageSecret.Data[StageKey]), "S3CRET") {
		t.Errorf("the stage file holds the output's value")
	}
	job, _ := client.BatchV1().Jobs("team-a").Get(ctx, "web-plan-2", metav1.GetOptions{})
	mounted := false
	for _, v := range job.Spec.Template.Spec.Volumes {
		mounted = mounted || v.Secret != nil && v.Secret.SecretName == "web-plan-2-inputs"
	}
	if !mounted {
		t.Errorf("the plan Job does not mount its inputs Secret")
	}

	// Without the value, nothing starts.
	missing := ex
	missing.Inputs = nil
	if _, err := NewExecutor(fake.NewClientset(), testOptions()).Start(ctx, missing); err == nil {
		t.Errorf("Start without the output's value succeeded")
	}

	// Someone else's inputs Secret is not adopted.
	forged := inputs.DeepCopy()
	forged.Data["vpc"] = []byte(`{"id":"vpc-attacker"}`)
	client = fake.NewClientset(forged)
	if _, err := NewExecutor(client, testOptions()).Start(ctx, ex); err == nil {
		t.Errorf("Start adopted a forged inputs Secret")
	}

	// The apply stage applies the saved plan: no inputs.
	apply := executor.Execution{Run: ex.Run, Stage: v1alpha1.StageApply, Attempt: 1}
	job, _, err = BuildJob(apply, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range job.Spec.Template.Spec.Volumes {
		if v.Secret != nil && strings.HasSuffix(v.Secret.SecretName, "-inputs") {
			t.Errorf("the apply Job mounts %s", v.Secret.SecretName)
		}
	}
}

// node returns a Node whose Ready condition has had status since since.
func node(name string, status corev1.ConditionStatus, since time.Time) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(since),
		Message: "Kubelet stopped posting node status.",
	}}}}
}

// TestStatusNodeLost: a stage whose pod's node is gone, or has been silent
// for NodeLostAfter, is lost; while the node is silent for less, the stage
// runs and the controller is told when to look again.
func TestStatusNodeLost(t *testing.T) {
	start := metav1.NewTime(time.Now().Add(-5 * time.Minute))
	running := &corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: start}}
	cases := []struct {
		name    string
		node    *corev1.Node
		state   executor.State
		message string
		recheck bool
	}{
		{name: "node ready", node: node("node-1", corev1.ConditionTrue, start.Time), state: executor.StateRunning},
		{name: "node not ready, still reporting", node: node("node-1", corev1.ConditionFalse, start.Time), state: executor.StateRunning},
		{name: "node silent for a while", node: node("node-1", corev1.ConditionUnknown, time.Now().Add(-10*time.Second)), state: executor.StateRunning, recheck: true},
		{name: "node silent too long", node: node("node-1", corev1.ConditionUnknown, time.Now().Add(-2*time.Minute)), state: executor.StateUnknown,
			message: "pod web-plan-2-x7k2q ran on node node-1, which stopped reporting at"},
		{name: "node gone", state: executor.StateUnknown, message: "pod web-plan-2-x7k2q ran on node node-1, which no longer exists"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			client, e := started(t, batchv1.JobStatus{StartTime: &start, Active: 1}, nil)
			ctx := context.Background()
			job, err := client.BatchV1().Jobs("team-a").Get(ctx, "web-plan-2", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pod := jobPod(job, "p0d-uid")
			pod.Spec.NodeName = "node-1"
			pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: *running}}
			if _, err := client.CoreV1().Pods("team-a").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if c.node != nil {
				if _, err := client.CoreV1().Nodes().Create(ctx, c.node, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			st, err := e.Status(ctx, planExecution())
			if err != nil {
				t.Fatalf("Status: %v", err)
			}
			if st.State != c.state || (c.state == executor.StateUnknown && st.Reason != executor.ReasonExecutorLost) {
				t.Errorf("State %s, Reason %q; want %s", st.State, st.Reason, c.state)
			}
			if !strings.HasPrefix(st.Message, c.message) {
				t.Errorf("Message = %q, want it to start with %q", st.Message, c.message)
			}
			if c.recheck != (st.Recheck > 0) || st.Recheck > DefaultNodeLostAfter-9*time.Second {
				t.Errorf("Recheck = %v (want one: %v), NodeLostAfter %v", st.Recheck, c.recheck, DefaultNodeLostAfter)
			}
		})
	}

	// A pod deleted before its container ended (evicted from its node) fails
	// the Job: that stage is lost too, not failed.
	end := metav1.NewTime(start.Add(time.Minute))
	_, e := started(t, batchv1.JobStatus{StartTime: &start, Failed: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, Message: "Job has reached the specified backoff limit", LastTransitionTime: end},
	}}, running)
	st, err := e.Status(context.Background(), planExecution())
	if err != nil || st.State != executor.StateUnknown || st.Reason != executor.ReasonExecutorLost ||
		!strings.Contains(st.Message, "failed before its container ended (BackoffLimitExceeded") {
		t.Errorf("Status of a Job whose pod went before its container ended = %+v, %v; want lost", st, err)
	}
}

// TestRunNotifiesNodeLoss: when a node stops reporting, the runs with a pod
// on it are told, so that their stages are looked at.
func TestRunNotifiesNodeLoss(t *testing.T) {
	client, e := started(t, batchv1.JobStatus{Active: 1}, &corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pods, err := client.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v %v", pods, err)
	}
	pod := &pods.Items[0]
	pod.Spec.NodeName = "node-1"
	if _, err := client.CoreV1().Pods("team-a").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n, err := client.CoreV1().Nodes().Create(ctx, node("node-1", corev1.ConditionTrue, time.Now()), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 16)
	go func() { _ = e.Run(ctx, func(ns, name string) { got <- ns + "/" + name }) }()
	drain := time.After(2 * time.Second) // the Job's own notifications
	for waiting := true; waiting; {
		select {
		case <-got:
		case <-drain:
			waiting = false
		}
	}
	n.Status.Conditions[0].Status = corev1.ConditionUnknown
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-got:
		if name != "team-a/web" {
			t.Errorf("notified %q, want team-a/web", name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notification when the pod's node stopped reporting")
	}
}

// TestStatusMissingVolume: a pod that waits to mount a Secret or ConfigMap
// that does not exist says which, until it exists; the stage Secret, which Start
// creates, is never the one named.
func TestStatusMissingVolume(t *testing.T) {
	client, e := started(t, batchv1.JobStatus{Active: 1}, nil)
	ctx := context.Background()
	job, err := client.BatchV1().Jobs("team-a").Get(ctx, "web-plan-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := jobPod(job, "p0d-uid")
	pod.Spec = *job.Spec.Template.Spec.DeepCopy()
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "git-credentials", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "git-creds"}}})
	pod.Status.Phase = corev1.PodPending
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
	if _, err := client.CoreV1().Pods("team-a").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The variables' Secrets first, then the git credentials.
	for _, c := range []struct{ kind, secret, volume string }{
		{"Secret", "db-credentials", "var-secret-0"}, {"Secret", "api", "var-secret-1"}, {"ConfigMap", "settings", "var-configmap-2"}, {"Secret", "s3-backend", "backend-config"}, {"Secret", "git-creds", "git-credentials"},
	} {
		st, err := e.Status(ctx, planExecution())
		if err != nil {
			t.Fatal(err)
		}
		if st.State != executor.StateRunning || st.Reason != reasonVolumeNotFound || !strings.Contains(st.Message, c.kind+" team-a/"+c.secret+" not found") || !strings.Contains(st.Message, "volume "+c.volume) {
			t.Errorf("a pod waiting for the missing Secret %s: %+v", c.secret, st)
		}
		meta := metav1.ObjectMeta{Name: c.secret, Namespace: "team-a"}
		if c.kind == "ConfigMap" {
			_, err = client.CoreV1().ConfigMaps("team-a").Create(ctx, &corev1.ConfigMap{ObjectMeta: meta}, metav1.CreateOptions{})
		} else {
			_, err = client.CoreV1().Secrets("team-a").Create(ctx, &corev1.Secret{ObjectMeta: meta}, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if st, err := e.Status(ctx, planExecution()); err != nil || st.Reason != "" || st.State != executor.StateRunning {
		t.Errorf("once the Secrets exist: %+v, %v", st, err)
	}
}

// withUIDs makes the fake API server give each Secret it creates a UID, as
// a real one does.
func withUIDs(client *fake.Clientset) {
	client.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(k8stesting.CreateAction).GetObject().(*corev1.Secret)
		s.UID = types.UID("uid-of-" + s.Name)
		return false, nil, nil
	})
}

// TestStartRefused: a Job the API server refuses for good (a denial, an
// admission webhook that could not be called) leaves no stage Secret, so
// that the attempt reads as never started and starts again, rather than
// lost; a create whose outcome is unknown (a timeout) leaves it.
func TestStartRefused(t *testing.T) {
	for _, c := range []struct {
		name    string
		err     error
		started bool
	}{
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Group: "batch", Resource: "jobs"}, "web-plan-2", errors.New("quota")), true},
		{"a webhook that could not be called", apierrors.NewInternalError(errors.New(`failed calling webhook "x.example": connection refused`)), true},
		{"a timeout", apierrors.NewTimeoutError("the request did not complete", 1), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := fake.NewClientset()
			withUIDs(client)
			refuse := true
			client.PrependReactor("create", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
				if refuse {
					return true, nil, c.err
				}
				return false, nil, nil
			})
			e := NewExecutor(client, testOptions())
			ctx := context.Background()
			if _, err := e.Start(ctx, planExecution()); err == nil {
				t.Fatal("Start succeeded")
			}
			st, err := e.Status(ctx, planExecution())
			if err != nil {
				t.Fatal(err)
			}
			if st.Startable() != c.started {
				t.Errorf("Status after the refusal = %+v, startable %v; want %v", st, st.Startable(), c.started)
			}
			if !c.started {
				return
			}
			refuse = false
			if _, err := e.Start(ctx, planExecution()); err != nil {
				t.Errorf("Start once the API server accepts the Job: %v", err)
			}
			if st, err := e.Status(ctx, planExecution()); err != nil || st.State != executor.StateRunning {
				t.Errorf("Status = %+v, %v; want Running", st, err)
			}
		})
	}
	// A stage Secret this Start adopted (an earlier Start's, whose Job
	// existed and is gone) is never deleted: the attempt stays lost.
	client := fake.NewClientset()
	withUIDs(client)
	e := NewExecutor(client, testOptions())
	ctx := context.Background()
	name, err := e.Start(ctx, planExecution())
	if err != nil {
		t.Fatal(err)
	}
	if err := client.BatchV1().Jobs("team-a").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	client.PrependReactor("create", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "batch", Resource: "jobs"}, name, errors.New("quota"))
	})
	if _, err := e.Start(ctx, planExecution()); err == nil {
		t.Fatal("Start succeeded")
	}
	if st, err := e.Status(ctx, planExecution()); err != nil || st.Reason != executor.ReasonExecutorLost {
		t.Errorf("Status of a gone Job whose later create was refused = %+v, %v; want lost", st, err)
	}
}
