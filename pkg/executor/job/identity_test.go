package job

import (
	"context"
	"errors"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/executor/auth"
)

const testPodUID = types.UID("b0000000-0000-4000-8000-0000000000d1")

// executorObjects returns the Job and pod of run's plan attempt 2, as the
// executor and the Job controller make them.
func executorObjects(t *testing.T, run *v1alpha1.TerraformRun, jobUID, podUID types.UID) (*batchv1.Job, *corev1.Pod) {
	t.Helper()
	job, _, err := BuildJob(executor.Execution{Run: run, Stage: v1alpha1.StagePlan, Attempt: 2}, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	job.UID = jobUID
	pod := jobPod(job, podUID)
	return job, pod
}

func podUser(pod *corev1.Pod, podUID types.UID) user.Info {
	return &user.DefaultInfo{
		Name:   serviceaccount.MakeUsername(pod.Namespace, pod.Spec.ServiceAccountName),
		Groups: serviceaccount.MakeGroupNames(pod.Namespace),
		Extra: map[string][]string{
			serviceaccount.PodNameKey: {pod.Name},
			serviceaccount.PodUIDKey:  {string(podUID)},
		},
	}
}

func TestIdentityAllowed(t *testing.T) {
	job, pod := executorObjects(t, testRun(), testJobUID, testPodUID)
	r := NewIdentityResolver(fake.NewClientset(job, pod), nil)
	id, ok, err := r.ExecutorIdentity(context.Background(), podUser(pod, testPodUID))
	if err != nil || !ok {
		t.Fatalf("ExecutorIdentity = %v, %v", ok, err)
	}
	want := executor.Identity{Namespace: "team-a", Name: "web", UID: testUID, Stage: "plan", Attempt: 2}
	if id != want {
		t.Errorf("identity = %+v, want %+v", id, want)
	}
}

func TestIdentityLongRunName(t *testing.T) {
	run := testRun()
	run.Name = "a-run-name-that-is-much-longer-than-sixty-three-characters-as-label-values-allow"
	job, pod := executorObjects(t, run, testJobUID, testPodUID)
	id, ok, err := NewIdentityResolver(fake.NewClientset(job, pod), nil).ExecutorIdentity(context.Background(), podUser(pod, testPodUID))
	if err != nil || !ok || id.Name != run.Name {
		t.Errorf("ExecutorIdentity = %+v, %v, %v; want run %s", id, ok, err, run.Name)
	}
}

// TestIdentityOtherRun: the pod of another run resolves to that other run,
// never to this one, so the server refuses its writes to this run.
func TestIdentityOtherRun(t *testing.T) {
	other := testRun()
	other.Name, other.UID = "db", "c0000000-0000-4000-8000-000000000002"
	job, pod := executorObjects(t, other, testJobUID, testPodUID)
	id, ok, err := NewIdentityResolver(fake.NewClientset(job, pod), nil).ExecutorIdentity(context.Background(), podUser(pod, testPodUID))
	if err != nil || !ok {
		t.Fatalf("ExecutorIdentity = %v, %v", ok, err)
	}
	if id.Name != "db" || id.UID != string(other.UID) {
		t.Errorf("identity of run db's pod = %+v", id)
	}
}

func TestIdentityDenied(t *testing.T) {
	cases := []struct {
		name string
		// mutate changes the objects, and may return a different user.
		mutate func(job *batchv1.Job, pod *corev1.Pod) user.Info
	}{
		{"wrong pod UID", func(job *batchv1.Job, pod *corev1.Pod) user.Info {
			return podUser(pod, "d0000000-0000-4000-8000-000000000bad")
		}},
		{"pod of another run claiming this run", func(job *batchv1.Job, pod *corev1.Pod) user.Info {
			// A pod of run db, labeled as run web's, still controlled by db's Job.
			pod.OwnerReferences[0].Name = "db-plan-2"
			return nil
		}},
		{"pod relabeled to another attempt", func(job *batchv1.Job, pod *corev1.Pod) user.Info {
			pod.Labels[LabelAttempt] = "3"
			return nil
		}},
		{"pod relabeled to another run UID", func(job *batchv1.Job, pod *corev1.Pod) user.Info {
			pod.Labels[LabelRunUID] = "e0000000-0000-4000-8000-000000000003"
			return nil
		}},
		{"forged pod pointing at the Job with another UID", func(job *batchv1.Job, pod *corev1.Pod) user.Info {
			pod.OwnerReferences[0].UID = "f0000000-0000-4000-8000-000000000004"
			return nil
		}},
		{"pod without a controller", func(job *batchv1.Job, pod *corev1.Pod) user.Info {
			pod.OwnerReferences = nil
			return nil
		}},
		{"Job not controlled by the run", func(job *batchv1.Job, pod *corev1.Pod) user.Info {
			job.OwnerReferences = nil
			return nil
		}},
		// Each of the next three is caught by one check only: removing it
		// from identity.go fails its case.
		{"Job controlled by another run of the same name (deleted and created again), its label unchanged", func(job *batchv1.Job, pod *corev1.Pod) user.Info {
			job.OwnerReferences[0].UID = "c0000000-0000-4000-8000-000000000009"
			return nil
		}},
		{"Job controlled by a run of another name", func(job *batchv1.Job, pod *corev1.Pod) user.Info {
			job.OwnerReferences[0].Name = "db"
			return nil
		}},
		{"Job of a stale run UID under the run's controller", func(job *batchv1.Job, pod *corev1.Pod) user.Info {
			job.Labels[LabelRunUID] = "c0000000-0000-4000-8000-000000000009"
			return nil
		}},
		{"Job controlled by something else than a run", func(job *batchv1.Job, pod *corev1.Pod) user.Info {
			job.OwnerReferences[0].Kind = "CronJob"
			job.OwnerReferences[0].APIVersion = "batch/v1"
			return nil
		}},
		{"token of another service account", func(job *batchv1.Job, pod *corev1.Pod) user.Info {
			u := podUser(pod, testPodUID).(*user.DefaultInfo)
			u.Name = serviceaccount.MakeUsername(pod.Namespace, "other")
			return u
		}},
		{"bad stage label", func(job *batchv1.Job, pod *corev1.Pod) user.Info {
			pod.Labels[LabelStage] = "destroy"
			return nil
		}},
		{"bad attempt label", func(job *batchv1.Job, pod *corev1.Pod) user.Info {
			pod.Labels[LabelAttempt] = "x"
			return nil
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			job, pod := executorObjects(t, testRun(), testJobUID, testPodUID)
			u := c.mutate(job, pod)
			if u == nil {
				u = podUser(pod, testPodUID)
			}
			id, ok, err := NewIdentityResolver(fake.NewClientset(job, pod), nil).ExecutorIdentity(context.Background(), u)
			if ok || err == nil {
				t.Fatalf("ExecutorIdentity = %+v, %v, %v; want rejected", id, ok, err)
			}
			if !errors.Is(err, auth.ErrRejected) {
				t.Errorf("error %v does not wrap auth.ErrRejected", err)
			}
		})
	}
}

func TestIdentityMissingObjects(t *testing.T) {
	job, pod := executorObjects(t, testRun(), testJobUID, testPodUID)
	for name, objects := range map[string][]runtime.Object{
		"pod gone": {job},
		"Job gone": {pod},
	} {
		t.Run(name, func(t *testing.T) {
			_, ok, err := NewIdentityResolver(fake.NewClientset(objects...), nil).ExecutorIdentity(context.Background(), podUser(pod, testPodUID))
			if ok || !errors.Is(err, auth.ErrRejected) {
				t.Errorf("ExecutorIdentity = %v, %v; want rejected", ok, err)
			}
		})
	}
}

func TestIdentityNotExecutor(t *testing.T) {
	job, pod := executorObjects(t, testRun(), testJobUID, testPodUID)
	plain := pod.DeepCopy()
	plain.Name, plain.UID, plain.Labels, plain.OwnerReferences = "plain", "plain-uid", nil, nil
	r := NewIdentityResolver(fake.NewClientset(job, pod, plain), nil)
	cases := map[string]user.Info{
		"nil user":          nil,
		"non-SA user":       &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}},
		"non-SA with extra": &user.DefaultInfo{Name: "alice", Extra: podUser(pod, testPodUID).GetExtra()},
		"SA without pod binding": &user.DefaultInfo{
			Name: serviceaccount.MakeUsername("team-a", "terraform"),
		},
		"pod without terrarun labels": podUser(plain, "plain-uid"),
	}
	for name, u := range cases {
		t.Run(name, func(t *testing.T) {
			id, ok, err := r.ExecutorIdentity(context.Background(), u)
			if ok || err != nil {
				t.Errorf("ExecutorIdentity = %+v, %v, %v; want not an executor", id, ok, err)
			}
		})
	}
}
