package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What Tekton's TaskRun pods need of a node, each tested on its own: init
// containers, a binary where its image has it, and downward API files that
// follow the pod's annotations.

// TestInitContainers: init containers run one after the other, each to its
// end, before the containers, which see what they left in a shared
// emptyDir; the pod is Pending (PodInitializing) meanwhile, with
// initContainerStatuses. An init container that fails fails the pod, and
// the containers never run.
func TestInitContainers(t *testing.T) {
	h := newHarness(t, nil)
	out := worldDir(t)
	p := shPod("init", "cat /shared/order > "+out+"/seen")
	shared := corev1.VolumeMount{Name: "shared", MountPath: "/shared"}
	p.Spec.Volumes = []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{shared}
	p.Spec.InitContainers = []corev1.Container{
		{Name: "first", Image: "busybox", Command: []string{"/bin/sh", "-c", "sleep 1; echo first >> /shared/order"}, VolumeMounts: []corev1.VolumeMount{shared}},
		{Name: "second", Image: "busybox", Command: []string{"/bin/sh", "-c", "echo second >> /shared/order"}, VolumeMounts: []corev1.VolumeMount{shared}},
	}
	h.create(p)
	pending := h.waitPod("init", "initializing", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodPending && len(p.Status.InitContainerStatuses) == 2 && p.Status.InitContainerStatuses[0].State.Running != nil
	})
	if w := pending.Status.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "PodInitializing" {
		t.Errorf("the container while the init containers run: %+v", pending.Status.ContainerStatuses[0].State)
	}
	got := h.waitPhase("init", corev1.PodSucceeded)
	if seen := waitFile(t, filepath.Join(out, "seen")); seen != "first\nsecond\n" {
		t.Errorf("the container saw %q, want first then second", seen)
	}
	for _, cs := range got.Status.InitContainerStatuses {
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			t.Errorf("init container %s: %+v", cs.Name, cs.State)
		}
	}
	if !podCondition(got, corev1.PodInitialized) {
		t.Errorf("PodInitialized is not True: %+v", got.Status.Conditions)
	}

	p = shPod("initfails", "touch "+out+"/ran")
	p.Spec.InitContainers = []corev1.Container{{Name: "prepare", Image: "busybox", Command: []string{"/bin/sh", "-c", "exit 3"}}}
	h.create(p)
	got = h.waitPhase("initfails", corev1.PodFailed)
	if cs := got.Status.InitContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != 3 {
		t.Errorf("the failed init container: %+v", cs)
	}
	if _, err := os.Stat(filepath.Join(out, "ran")); !os.IsNotExist(err) {
		t.Errorf("the container ran after its init container failed")
	}
	if podCondition(got, corev1.PodInitialized) {
		t.Errorf("PodInitialized is True after an init container failed")
	}
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestImageBinaryAtItsPath: a command that names its image's binary by the
// path it has in the image (Tekton's prepare container runs
// /ko-app/entrypoint, which copies itself from that path) finds it there.
func TestImageBinaryAtItsPath(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "entrypoint")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexec /bin/sh -c \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(o *Options) { o.Images = map[string]string{"tekton/entrypoint": bin} })
	out := worldDir(t)
	p := shPod("ko", "")
	p.Spec.Containers[0].Image = "registry.example/tekton/entrypoint:v1.9.0"
	p.Spec.Containers[0].Command = []string{"/ko-app/entrypoint", "cp /ko-app/entrypoint " + out + "/copy"}
	h.create(p)
	got := h.waitPhase("ko", corev1.PodSucceeded)
	if term := terminated(got, "main"); term == nil || term.ExitCode != 0 {
		t.Fatalf("terminated: %+v", term)
	}
	want, _ := os.ReadFile(bin)
	if copied, err := os.ReadFile(filepath.Join(out, "copy")); err != nil || string(copied) != string(want) {
		t.Errorf("the copy of /ko-app/entrypoint: %q (%v), want the image's binary", copied, err)
	}
}

// TestDownwardAPIFollowsAnnotations: a downward API file of an annotation
// is written again when the annotation changes while the pod runs, as the
// kubelet does; Tekton's entrypoint waits on tekton.dev/ready so.
func TestDownwardAPIFollowsAnnotations(t *testing.T) {
	h := newHarness(t, nil)
	out := worldDir(t)
	p := shPod("ready", "until [ \"$(cat /tekton/downward/ready)\" = READY ]; do sleep 0.1; done; echo go > "+out+"/went")
	p.Spec.Volumes = []corev1.Volume{{Name: "downward", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
		Items: []corev1.DownwardAPIVolumeFile{{Path: "ready", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['tekton.dev/ready']"}}},
	}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "downward", MountPath: "/tekton/downward", ReadOnly: true}}
	h.create(p)
	h.waitPod("ready", "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if _, err := os.Stat(filepath.Join(out, "went")); !os.IsNotExist(err) {
		t.Fatalf("the container went on before the annotation was set")
	}
	pod, err := h.get("ready")
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations = map[string]string{"tekton.dev/ready": "READY"}
	if _, err := h.cs.CoreV1().Pods(testNS).Update(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if went := waitFile(t, filepath.Join(out, "went")); strings.TrimSpace(went) != "go" {
		t.Errorf("went = %q", went)
	}
	h.waitPhase("ready", corev1.PodSucceeded)
}

// TestContainerEndsWithItsMainProcess: when a container's main process
// ends, nothing it started lives on, not even a process in a process group
// or session of its own (Tekton's entrypoint starts its step so), as with a
// runtime's container (its PID namespace).
func TestContainerEndsWithItsMainProcess(t *testing.T) {
	h := newHarness(t, nil)
	out := worldDir(t)
	p := shPod("leaver", "setsid /bin/sh -c 'sleep 2; touch "+out+"/survived' & sleep 0.5; echo left > "+out+"/left")
	h.create(p)
	h.waitPhase("leaver", corev1.PodSucceeded)
	waitFile(t, filepath.Join(out, "left"))
	time.Sleep(4 * time.Second)
	if _, err := os.Stat(filepath.Join(out, "survived")); !os.IsNotExist(err) {
		t.Errorf("a process the container started in a session of its own outlived it (%v)", err)
	}
}
