package tekton

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// Tekton's defaults: its webhook merges the default-pod-template of the
// ConfigMap config-defaults, in Tekton's namespace, into every TaskRun's
// spec.podTemplate, where the TaskRun leaves a field unset (env and
// volumes: the entries of names the TaskRun has not).
const (
	defaultsConfigMap  = "config-defaults"
	defaultPodTemplate = "default-pod-template"
	// defaultsTTL is how long a read of config-defaults is used.
	defaultsTTL = 10 * time.Second
)

// podDefaults reads Tekton's default-pod-template, at most every
// defaultsTTL. A config-defaults the server may not read, or that does not
// exist, is no default: a TaskRun that holds one then reads as not
// terrarun's, and the run says which field.
type podDefaults struct {
	kube      kubernetes.Interface
	namespace string

	mu      sync.Mutex
	read    time.Time
	current map[string]any
}

// get returns the default pod template, as JSON fields; nil when none.
func (d *podDefaults) get(ctx context.Context) (map[string]any, error) {
	if d == nil || d.namespace == "" {
		return nil, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if time.Since(d.read) < defaultsTTL {
		return d.current, nil
	}
	cm, err := d.kube.CoreV1().ConfigMaps(d.namespace).Get(ctx, defaultsConfigMap, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		d.current = nil
	case apierrors.IsForbidden(err):
		klog.InfoS("Cannot read Tekton's defaults: TaskRuns into which its webhook merged a default-pod-template read as not terrarun's", "configMap", d.namespace+"/"+defaultsConfigMap, "err", err)
		d.current = nil
	case err != nil:
		return nil, fmt.Errorf("reading Tekton's defaults (ConfigMap %s/%s): %w", d.namespace, defaultsConfigMap, err)
	default:
		d.current = nil
		if raw := cm.Data[defaultPodTemplate]; raw != "" {
			var tpl map[string]any
			if err := yaml.Unmarshal([]byte(raw), &tpl); err != nil {
				return nil, fmt.Errorf("Tekton's ConfigMap %s/%s: %s: %w", d.namespace, defaultsConfigMap, defaultPodTemplate, err)
			}
			d.current = tpl
		}
	}
	d.read = time.Now()
	return d.current, nil
}

// withoutPodDefaults takes out of got, a TaskRun's spec.podTemplate, what
// Tekton merged into it from defaults where want, terrarun's, leaves the
// field unset (MergePodTemplateWithDefault): a field equal to the
// default's, env and volumes included, whose entries Tekton then copies as
// they are. What is left is compared as terrarun built it.
func withoutPodDefaults(got, want, defaults map[string]any) {
	for field, value := range defaults {
		if _, set := want[field]; set {
			continue
		}
		if have, ok := got[field]; ok && equalJSON(have, value) {
			delete(got, field)
		}
	}
}
