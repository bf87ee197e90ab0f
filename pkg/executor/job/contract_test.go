package job

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/executor/executortest"
)

// TestContract runs the executor contract (package executortest) against
// the Job executor on a fake cluster, in which the test plays the Job
// controller and the kubelet: a stage ends with its pod's container
// terminated and its Job's condition, and a lost stage's Job is gone.
func TestContract(t *testing.T) {
	executortest.Run(t, func(t *testing.T) executortest.Platform {
		client := fake.NewClientset()
		codes := map[string]int32{}
		return executortest.Platform{
			New: func() executor.Executor { return NewExecutor(client, testOptions()) },
			Run: func(name string, code int32, _ bool) *v1alpha1.TerraformRun {
				run := testRun()
				run.Name, run.UID = name, types.UID(testUID[:len(testUID)-len(name)]+name)
				codes[name] = code
				return run
			},
			End: func(e executor.Executor, ex executor.Execution) {
				ctx := context.Background()
				name := e.Name(ex)
				job, err := client.BatchV1().Jobs(ex.Run.Namespace).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				code := codes[ex.Run.Name]
				reason := executor.ReasonCompleted
				if code != 0 {
					reason = executor.ReasonError
				}
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: name + "-x", Namespace: job.Namespace, Labels: map[string]string{jobNameLabel: name},
						OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: name, UID: job.UID, Controller: ptr.To(true)}}},
					Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: ContainerName,
						State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}}}},
				}
				if _, err := client.CoreV1().Pods(job.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				cond := batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}
				if code != 0 {
					cond = batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded}
				}
				job.Status.Conditions = append(job.Status.Conditions, cond)
				if _, err := client.BatchV1().Jobs(job.Namespace).UpdateStatus(ctx, job, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			Lose: func(e executor.Executor, ex executor.Execution) executor.Executor {
				// The Job is gone (its node lost and collected, or deleted).
				if err := client.BatchV1().Jobs(ex.Run.Namespace).Delete(context.Background(), e.Name(ex), metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				return e
			},
		}
	})
}
