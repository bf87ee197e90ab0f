package tekton

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/terrarun/terrarun/pkg/executor"
)

const testDefaults = `
env:
- {name: HTTPS_PROXY, value: "http://proxy.example:3128"}
volumes:
- {name: corp-ca, configMap: {name: corp-ca}}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
nodeSelector: {pool: ci}
`

// merged is the TaskRun's podTemplate as Tekton's webhook leaves it with
// testDefaults: the env and volumes added, the fields the TaskRun leaves
// unset set, its own node selector kept.
func merged(pt map[string]any) {
	pt["env"] = []any{map[string]any{"name": "HTTPS_PROXY", "value": "http://proxy.example:3128"}}
	pt["volumes"] = []any{map[string]any{"name": "corp-ca", "configMap": map[string]any{"name": "corp-ca"}}}
	pt["hostNetwork"] = true
	pt["dnsPolicy"] = "ClusterFirstWithHostNet"
}

// TestTektonDefaults: what Tekton's webhook merges into a TaskRun from its
// default-pod-template (config-defaults) is not a forgery, exactly that:
// the same fields elsewhere, another env entry, or another value of a
// field terrarun sets, still are; and without config-defaults nothing is
// taken for a default.
func TestTektonDefaults(t *testing.T) {
	for _, c := range []struct {
		name      string
		namespace string // Options.Namespace
		spoil     func(pt map[string]any)
		forged    string
	}{
		{"merged by Tekton", "tekton-pipelines", merged, ""},
		{"no config-defaults to read", "elsewhere", merged, "spec: json: unknown field"},
		{"another env entry", "tekton-pipelines", func(pt map[string]any) {
			merged(pt)
			pt["env"] = append(pt["env"].([]any), map[string]any{"name": "TF_CLI_ARGS", "value": "-lock=false"})
		}, "spec: json: unknown field \"env\""},
		{"another DNS policy", "tekton-pipelines", func(pt map[string]any) {
			merged(pt)
			pt["dnsPolicy"] = "None"
		}, "its pod's"},
		{"the run's node selector replaced", "tekton-pipelines", func(pt map[string]any) {
			merged(pt)
			pt["nodeSelector"] = map[string]any{"pool": "ci"}
		}, "its pod's"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newEnv(t)
			if _, err := v.kube.CoreV1().ConfigMaps("tekton-pipelines").Create(context.Background(), &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: defaultsConfigMap, Namespace: "tekton-pipelines"},
				Data:       map[string]string{defaultPodTemplate: testDefaults},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			v.e = NewExecutor(v.kube, v.dyn, NewClaims(etcdClient), Options{Jobs: testOptions(), Namespace: c.namespace})
			ex := plan(t)
			if _, err := v.e.Start(context.Background(), ex); err != nil {
				t.Fatal(err)
			}
			tr := v.taskRun(t, "web-plan-1")
			pt, _, _ := unstructured.NestedMap(tr.Object, "spec", "podTemplate")
			c.spoil(pt)
			if err := unstructured.SetNestedMap(tr.Object, pt, "spec", "podTemplate"); err != nil {
				t.Fatal(err)
			}
			if _, err := v.dyn.Resource(TaskRuns).Namespace("team-a").Update(context.Background(), tr, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			st, err := v.e.Status(context.Background(), ex)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.forged == "" && st.State != executor.StateRunning:
				t.Errorf("Status = %+v; want Running", st)
			case c.forged != "" && (st.Reason != executor.ReasonForged || !strings.Contains(st.Message, c.forged)):
				t.Errorf("Status = %+v; want forged saying %q", st, c.forged)
			}
		})
	}
}
