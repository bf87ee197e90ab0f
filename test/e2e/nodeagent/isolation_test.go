package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestMountNamespaceIsolation runs two pods at once that mount their own
// ConfigMap at the same container path, and their own emptyDir at /tmp (where
// the pod directories of this test live too): each sees its own files, and
// the node sees none of them.
func TestMountNamespaceIsolation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: the node agent runs containers in private mount namespaces")
	}
	base := fmt.Sprintf("/var/tmp/terrarun-nodeagent-test-%d", os.Getpid())
	t.Cleanup(func() { os.RemoveAll(base) })
	mountPath := base + "/data"
	sync := worldDir(t)

	h := newHarness(t, nil)
	for _, who := range []string{"a", "b"} {
		if _, err := h.cs.CoreV1().ConfigMaps(testNS).Create(context.Background(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "who-" + who, Namespace: testNS},
			Data:       map[string]string{"who": who},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		script := strings.Join([]string{
			`echo "first=$(cat ` + mountPath + `/who)"`,
			`echo ` + who + ` > /tmp/mark`,
			`touch /sync/ready-` + who,
			// Both run now, each with its own /tmp and data.
			`while [ ! -e /sync/ready-a ] || [ ! -e /sync/ready-b ]; do sleep 0.05; done`,
			`echo "second=$(cat ` + mountPath + `/who) mark=$(cat /tmp/mark)"`,
			`touch ` + mountPath + `/x 2>/dev/null && echo data-writable || echo data-readonly`,
			// The staged copies of the volumes are gone once mounted.
			`cat ` + DefaultStagingDir + `/vol/0/who 2>/dev/null || echo staging-empty`,
		}, "\n")
		pod := shPod("iso-"+who, script)
		if who == "b" {
			pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](65532), FSGroup: ptr.To[int64](65532)}
		}
		pod.Spec.Volumes = []corev1.Volume{
			{Name: "data", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "who-" + who}}}},
			{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "sync", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: sync}}},
		}
		pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
			{Name: "data", MountPath: mountPath, ReadOnly: true},
			{Name: "tmp", MountPath: "/tmp"},
			{Name: "sync", MountPath: "/sync"},
		}
		h.create(pod)
	}
	for _, who := range []string{"a", "b"} {
		name := "iso-" + who
		p := h.waitPod(name, "terminal", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		})
		_, log := h.logs(name, "main", "")
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("pod %s: %s: %+v\n%s", name, p.Status.Phase, p.Status.ContainerStatuses, log)
		}
		want := "first=" + who + "\nsecond=" + who + " mark=" + who + "\ndata-readonly\nstaging-empty\n"
		if log != want {
			t.Errorf("pod %s logged %q, want %q", name, log, want)
		}
	}
	// The node's own view: empty mount points, no /tmp/mark.
	entries, err := os.ReadDir(mountPath)
	if err != nil || len(entries) != 0 {
		t.Errorf("the node sees %v in %s (%v)", entries, mountPath, err)
	}
	if b, err := os.ReadFile("/tmp/mark"); err == nil {
		t.Errorf("a container's /tmp leaked to the node: %q", b)
	}
	if _, err := os.Stat(filepath.Join(DefaultStagingDir, "vol")); !os.IsNotExist(err) {
		t.Errorf("staging leaked to the node: %v", err)
	}
}
