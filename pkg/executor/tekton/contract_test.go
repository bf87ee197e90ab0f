package tekton

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/executor/executortest"
)

// TestContract runs the executor contract (package executortest) against
// the Tekton executor on a fake cluster, in which the test plays Tekton's
// controller and the kubelet: a stage ends with its TaskRun's Succeeded
// condition and step, a canceled TaskRun ends TaskRunCancelled, and a lost
// stage's pod is gone while its TaskRun runs.
func TestContract(t *testing.T) {
	executortest.Run(t, func(t *testing.T) executortest.Platform {
		v := newEnv(t)
		codes := map[string]int32{}
		uid := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
		return executortest.Platform{
			New: func() executor.Executor {
				return &tektonPlatform{Executor: NewExecutor(v.kube, v.dyn, NewClaims(etcdClient), Options{Jobs: testOptions()}), t: t, v: v}
			},
			Run: func(name string, code int32, _ bool) *v1alpha1.TerraformRun {
				run := testRun(t)
				run.Name, run.UID = name, types.UID(uid+"-"+name)
				codes[name] = code
				return run
			},
			End: func(e executor.Executor, ex executor.Execution) {
				name, code := e.Name(ex), codes[ex.Run.Name]
				v.pod(t, name, types.UID(name+"-pod-uid"), nil)
				// The stage's pod proved its key when it spoke.
				if _, err := NewClaims(etcdClient).Claim(context.Background(), identityOf(ex), name+"-pod-uid"); err != nil {
					t.Fatal(err)
				}
				status, reason := "True", "Succeeded"
				if code != 0 {
					status, reason = "False", "Failed"
				}
				v.setStatus(t, name, map[string]any{"podName": PodName(name), "conditions": []any{condition(status, reason)}, "steps": steps(int64(code), map[bool]string{true: "Completed", false: "Error"}[code == 0])})
			},
			Lose: func(e executor.Executor, ex executor.Execution) executor.Executor {
				// The pod is gone (its node lost) while the TaskRun runs.
				v.setStatus(t, e.Name(ex), map[string]any{"podName": PodName(e.Name(ex)), "conditions": []any{condition("Unknown", "Running")}})
				return e
			},
		}
	})
}

// tektonPlatform is the Tekton executor on the fake cluster, where the
// test plays Tekton's controller: a TaskRun that Stop canceled ends
// TaskRunCancelled.
type tektonPlatform struct {
	*Executor
	t *testing.T
	v *env
}

func (p *tektonPlatform) Stop(ctx context.Context, ex executor.Execution, grace time.Duration) error {
	if err := p.Executor.Stop(ctx, ex, grace); err != nil {
		return err
	}
	tr, err := p.v.dyn.Resource(TaskRuns).Namespace(ex.Run.Namespace).Get(ctx, p.Name(ex), metav1.GetOptions{})
	if err != nil {
		return nil
	}
	st, err := readStatus(tr)
	if err != nil {
		return err
	}
	canceled, _, _ := unstructured.NestedString(tr.Object, "spec", "status")
	if ended, _, _ := st.succeeded(); canceled == cancelled && ended != "True" && ended != "False" {
		p.v.setStatus(p.t, p.Name(ex), map[string]any{"podName": st.PodName, "conditions": []any{condition("False", "TaskRunCancelled")}})
	}
	return nil
}
