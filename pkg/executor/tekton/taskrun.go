package tekton

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor/job"
)

// TaskRuns is the resource of Tekton Pipelines' v1 TaskRuns.
var TaskRuns = schema.GroupVersionResource{Group: "tekton.dev", Version: "v1", Resource: "taskruns"}

const (
	// apiVersion and kind of a TaskRun.
	apiVersion = "tekton.dev/v1"
	kind       = "TaskRun"
	// stepName is the stage's step; Tekton names its container
	// "step-executor".
	stepName      = "executor"
	containerName = "step-" + stepName
	// resultOutcome is the TaskRun's result that holds how the stage ended,
	// in terrarun-executor's words (its termination message, at most 1 KiB:
	// Tekton keeps a step's results in its 4 KiB termination message), for
	// Tekton Dashboard and Chains. terrarun does not read it: terrarun-executor
	// is not its container's PID 1 under Tekton's entrypoint, so what the
	// stage left running could write it after it.
	resultOutcome = "outcome"
	// resultPlanDigest is the TaskRun's result that holds, once the stage
	// succeeded, the digest of its plan, the one an approval names
	// (sha256:...): what Tekton Chains records of what the stage planned
	// or applied. terrarun does not read it either.
	resultPlanDigest = "plan-digest"
	// resultsDir is where Tekton's entrypoint collects a step's results.
	resultsDir = "/tekton/results"
	// cancelled is the spec.status that cancels a TaskRun.
	cancelled = "TaskRunCancelled"
	// labelTaskRun is the label Tekton sets on a TaskRun's pod.
	labelTaskRun = "tekton.dev/taskRun"
)

// The parts of Tekton's v1 TaskRun that terrarun writes and reads, with
// Tekton's JSON names. A TaskRun is built from them (buildTaskRun), and an
// existing one is read back into them strictly (decodeSpec): a field that
// terrarun never writes (another step, a sidecar, a stepSpecs override, a
// workspace) makes it one that terrarun did not build.
type (
	taskRunSpec struct {
		ServiceAccountName string           `json:"serviceAccountName,omitempty"`
		Timeout            *metav1.Duration `json:"timeout,omitempty"`
		PodTemplate        *podTemplate     `json:"podTemplate,omitempty"`
		TaskSpec           *taskSpec        `json:"taskSpec,omitempty"`
		// Status and StatusMessage are set by Stop (cancelled).
		Status        string `json:"status,omitempty"`
		StatusMessage string `json:"statusMessage,omitempty"`
	}
	taskSpec struct {
		Steps   []step          `json:"steps"`
		Volumes []corev1.Volume `json:"volumes,omitempty"`
		Results []taskResult    `json:"results,omitempty"`
	}
	taskResult struct {
		Name        string `json:"name"`
		Type        string `json:"type,omitempty"`
		Description string `json:"description,omitempty"`
	}
	step struct {
		Name             string                      `json:"name"`
		Image            string                      `json:"image"`
		Command          []string                    `json:"command,omitempty"`
		Args             []string                    `json:"args,omitempty"`
		Script           string                      `json:"script,omitempty"`
		Timeout          *metav1.Duration            `json:"timeout,omitempty"`
		WorkingDir       string                      `json:"workingDir,omitempty"`
		Env              []corev1.EnvVar             `json:"env,omitempty"`
		ComputeResources corev1.ResourceRequirements `json:"computeResources,omitempty"`
		VolumeMounts     []corev1.VolumeMount        `json:"volumeMounts,omitempty"`
		SecurityContext  *corev1.SecurityContext     `json:"securityContext,omitempty"`
	}
	// podTemplate is Tekton's pod.Template: what the TaskRun's pod takes
	// from it besides its steps and volumes.
	podTemplate struct {
		NodeSelector                 map[string]string                 `json:"nodeSelector,omitempty"`
		Tolerations                  []corev1.Toleration               `json:"tolerations,omitempty"`
		Affinity                     *corev1.Affinity                  `json:"affinity,omitempty"`
		SecurityContext              *corev1.PodSecurityContext        `json:"securityContext,omitempty"`
		RuntimeClassName             *string                           `json:"runtimeClassName,omitempty"`
		AutomountServiceAccountToken *bool                             `json:"automountServiceAccountToken,omitempty"`
		DNSPolicy                    *corev1.DNSPolicy                 `json:"dnsPolicy,omitempty"`
		DNSConfig                    *corev1.PodDNSConfig              `json:"dnsConfig,omitempty"`
		EnableServiceLinks           *bool                             `json:"enableServiceLinks,omitempty"`
		PriorityClassName            *string                           `json:"priorityClassName,omitempty"`
		SchedulerName                string                            `json:"schedulerName,omitempty"`
		ImagePullSecrets             []corev1.LocalObjectReference     `json:"imagePullSecrets,omitempty"`
		TopologySpreadConstraints    []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	}
)

// buildTaskRun returns the TaskRun that runs the pod of built, the Job the
// Job executor builds for the same execution (job.BuildJob): the same
// name, labels, annotations and owner (the run); a step that is the
// Job's container (the same image, command, environment, mounts and
// security context), with terrarun-executor's outcome as the result
// resultOutcome; the Job's volumes; its pod's security context, service
// account, node selector, tolerations and spread in podTemplate; and the
// Job's deadline as the TaskRun's timeout. Tekton retries nothing: a retry
// is a new attempt, with a new TaskRun. The steps of s, the cluster
// policy's Task, run before and after the stage's step; what s says of
// the pod is in built already (shape.apply).
func buildTaskRun(built *batchv1.Job, s *shape) (*unstructured.Unstructured, error) {
	pod := &built.Spec.Template.Spec
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
		return nil, fmt.Errorf("the Job %s has %d containers and %d init containers, want one container", built.Name, len(pod.Containers), len(pod.InitContainers))
	}
	spec := taskRunSpec{
		ServiceAccountName: serviceAccount(pod),
		PodTemplate: &podTemplate{
			NodeSelector:                 pod.NodeSelector,
			Tolerations:                  pod.Tolerations,
			Affinity:                     pod.Affinity,
			SecurityContext:              pod.SecurityContext,
			RuntimeClassName:             pod.RuntimeClassName,
			AutomountServiceAccountToken: pod.AutomountServiceAccountToken,
			EnableServiceLinks:           pod.EnableServiceLinks,
			SchedulerName:                pod.SchedulerName,
			ImagePullSecrets:             pod.ImagePullSecrets,
			TopologySpreadConstraints:    pod.TopologySpreadConstraints,
		},
		TaskSpec: &taskSpec{
			Steps:   slices.Concat(s.Before, []step{stepOf(&pod.Containers[0])}, s.After),
			Volumes: pod.Volumes,
			Results: []taskResult{
				{Name: resultOutcome, Type: "string", Description: "How the stage ended, in terrarun-executor's words."},
				{Name: resultPlanDigest, Type: "string", Description: "The digest of the plan the stage made or applied, the one an approval names, once it succeeded."},
			},
		},
	}
	if pod.PriorityClassName != "" {
		spec.PodTemplate.PriorityClassName = &pod.PriorityClassName
	}
	if d := built.Spec.ActiveDeadlineSeconds; d != nil {
		spec.Timeout = &metav1.Duration{Duration: secondsDuration(*d)}
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	if err != nil {
		return nil, fmt.Errorf("TaskRun %s/%s: %w", built.Namespace, built.Name, err)
	}
	tr := &unstructured.Unstructured{Object: map[string]any{"spec": obj}}
	tr.SetAPIVersion(apiVersion)
	tr.SetKind(kind)
	tr.SetName(built.Name)
	tr.SetNamespace(built.Namespace)
	tr.SetLabels(maps.Clone(built.Labels))
	annotations := maps.Clone(built.Annotations)
	for k, v := range built.Spec.Template.Annotations {
		annotations[k] = v
	}
	annotations[defaultContainerAnnotation] = containerName
	tr.SetAnnotations(annotations)
	tr.SetOwnerReferences(slices.Clone(built.OwnerReferences))
	return tr, nil
}

// defaultContainerAnnotation makes kubectl logs and exec pick the stage's
// container of the pod (Tekton copies a TaskRun's annotations to its pod).
const defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"

// stepOf is the step of the Job's container c: terrarun-executor also
// writes its outcome and its plan's digest where Tekton's entrypoint
// collects the step's results.
func stepOf(c *corev1.Container) step {
	command := append(slices.Clone(c.Command), "--outcome-file", resultsDir+"/"+resultOutcome, "--plan-digest-file", resultsDir+"/"+resultPlanDigest)
	return step{
		Name:             stepName,
		Image:            c.Image,
		Command:          command,
		Args:             c.Args,
		WorkingDir:       c.WorkingDir,
		Env:              c.Env,
		ComputeResources: c.Resources,
		VolumeMounts:     c.VolumeMounts,
		SecurityContext:  c.SecurityContext,
	}
}

// serviceAccount is the pod's service account, "default" when it names
// none, as Tekton's defaulting would make it.
func serviceAccount(pod *corev1.PodSpec) string {
	if pod.ServiceAccountName == "" {
		return "default"
	}
	return pod.ServiceAccountName
}

// checkTaskRun refuses existing, a TaskRun of the execution's name, when it
// is not of run or not the one built from the Job builtJob with stage
// Secret secret and shape sh: its spec must hold nothing terrarun does not
// write (decodeSpec), the same steps around the stage's (sh's), the same
// step name, result, service account, timeout, labels and annotations
// (but Tekton's own), and, but for what Tekton's default-pod-template
// (defaults) merged into its podTemplate (withoutPodDefaults), the
// pod it describes must be the one the Job's template describes, as the
// Job executor compares them (job.CheckPod: an option changed while a
// stage runs is not a forgery). A cancel (spec.status) is terrarun's.
func checkTaskRun(existing *unstructured.Unstructured, builtJob *batchv1.Job, secret *corev1.Secret, run *v1alpha1.TerraformRun, sh *shape, defaults map[string]any) error {
	meta := &metav1.ObjectMeta{Name: existing.GetName(), Namespace: existing.GetNamespace(), Labels: existing.GetLabels()}
	if err := job.CheckOwned(meta, kind, string(run.UID)); err != nil {
		return err
	}
	built, err := buildTaskRun(builtJob, sh)
	if err != nil {
		return err
	}
	want, err := decodeSpec(built)
	if err != nil {
		return err
	}
	if defaults != nil {
		existing = existing.DeepCopy()
		gotTemplate, _, _ := unstructured.NestedMap(existing.Object, "spec", "podTemplate")
		wantTemplate, _, _ := unstructured.NestedMap(built.Object, "spec", "podTemplate")
		if gotTemplate != nil {
			withoutPodDefaults(gotTemplate, wantTemplate, defaults)
			if err := unstructured.SetNestedMap(existing.Object, gotTemplate, "spec", "podTemplate"); err != nil {
				return err
			}
		}
	}
	got, err := decodeSpec(existing)
	if err != nil {
		return forged(meta, err.Error())
	}
	if got.Status != "" && got.Status != cancelled {
		return forged(meta, fmt.Sprintf("spec.status %q", got.Status))
	}
	if !equalJSON(got.Timeout, want.Timeout) && want.Timeout != nil {
		return forged(meta, "spec.timeout")
	}
	for _, m := range []struct {
		field     string
		got, want map[string]string
	}{{"metadata.labels", existing.GetLabels(), built.GetLabels()}, {"metadata.annotations", existing.GetAnnotations(), built.GetAnnotations()}} {
		if key, ok := sameMetadata(m.got, m.want); !ok {
			return forged(meta, fmt.Sprintf("%s[%s]", m.field, key))
		}
	}
	if got.TaskSpec == nil || len(got.TaskSpec.Steps) != len(want.TaskSpec.Steps) {
		return forged(meta, "spec.taskSpec.steps")
	}
	at := len(sh.Before)
	for i := range got.TaskSpec.Steps {
		if i != at && !equalJSON(got.TaskSpec.Steps[i], want.TaskSpec.Steps[i]) || i == at && got.TaskSpec.Steps[i].Name != stepName {
			return forged(meta, fmt.Sprintf("spec.taskSpec.steps[%d]", i))
		}
	}
	// The stage's step is a container: a script or a step timeout of
	// Tekton's would change what it runs.
	if own := got.TaskSpec.Steps[at]; own.Script != "" || own.Timeout != nil {
		return forged(meta, fmt.Sprintf("spec.taskSpec.steps[%d]", at))
	}
	// What is left to compare is the stage's step, as the pod's container.
	got.TaskSpec.Steps, want.TaskSpec.Steps = got.TaskSpec.Steps[at:at+1], want.TaskSpec.Steps[at:at+1]
	if !slices.Equal(got.TaskSpec.Results, want.TaskSpec.Results) {
		return forged(meta, "spec.taskSpec.results")
	}
	if got.ServiceAccountName != want.ServiceAccountName {
		return forged(meta, "spec.serviceAccountName")
	}
	return job.CheckPod(kind, meta, "pod's ", podOf(got, builtJob), podOf(want, builtJob), secret, run)
}

// sameMetadata says whether got, a TaskRun's labels or annotations, are
// want's, but for those Tekton and its tools (Chains, Results, the
// Dashboard) add, in Tekton's domain: Tekton copies a TaskRun's labels and
// annotations to its pod, where others (a sidecar injector's, an AppArmor
// profile's) would change what runs. It returns the first key that
// differs.
func sameMetadata(got, want map[string]string) (string, bool) {
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if v, ok := got[k]; !ok || v != want[k] {
			return k, false
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; ok || tektons(k) {
			continue
		}
		return k, false
	}
	return "", true
}

// tektons says whether key is of Tekton's domain (tekton.dev/...,
// chains.tekton.dev/..., ...) or the managed-by label Tekton sets.
func tektons(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	return ok && (prefix == "tekton.dev" || strings.HasSuffix(prefix, ".tekton.dev")) || key == "app.kubernetes.io/managed-by"
}

// decodeSpec reads a TaskRun's spec strictly into taskRunSpec: any field
// it does not know is an error that names it.
func decodeSpec(tr *unstructured.Unstructured) (*taskRunSpec, error) {
	raw, err := json.Marshal(tr.Object["spec"])
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var spec taskRunSpec
	if err := dec.Decode(&spec); err != nil {
		return nil, fmt.Errorf("spec: %v", err)
	}
	return &spec, nil
}

// podOf is the pod spec that spec describes, with what a TaskRun does not
// say (the Job's restart policy, grace period, host name and termination
// message) taken from builtJob, so that CheckPod compares what both say.
func podOf(spec *taskRunSpec, builtJob *batchv1.Job) *corev1.PodSpec {
	base := builtJob.Spec.Template.Spec.DeepCopy()
	out := &corev1.PodSpec{
		RestartPolicy:                 base.RestartPolicy,
		TerminationGracePeriodSeconds: base.TerminationGracePeriodSeconds,
		Hostname:                      base.Hostname,
		ServiceAccountName:            base.ServiceAccountName,
	}
	if p := spec.PodTemplate; p != nil {
		out.NodeSelector, out.Tolerations, out.Affinity = p.NodeSelector, p.Tolerations, p.Affinity
		out.SecurityContext, out.RuntimeClassName = p.SecurityContext, p.RuntimeClassName
		out.AutomountServiceAccountToken, out.EnableServiceLinks = p.AutomountServiceAccountToken, p.EnableServiceLinks
		out.PriorityClassName = ptr.Deref(p.PriorityClassName, "")
		out.SchedulerName, out.ImagePullSecrets, out.TopologySpreadConstraints = p.SchedulerName, p.ImagePullSecrets, p.TopologySpreadConstraints
		if p.DNSPolicy != nil {
			out.DNSPolicy = *p.DNSPolicy
		}
		out.DNSConfig = p.DNSConfig
	}
	if t := spec.TaskSpec; t != nil {
		out.Volumes = t.Volumes
		for _, s := range t.Steps {
			c := corev1.Container{
				Name: job.ContainerName, Image: s.Image, Command: s.Command, Args: s.Args, WorkingDir: s.WorkingDir,
				Env: s.Env, Resources: s.ComputeResources, VolumeMounts: s.VolumeMounts, SecurityContext: s.SecurityContext,
			}
			if len(base.Containers) == 1 {
				c.TerminationMessagePolicy = base.Containers[0].TerminationMessagePolicy
			}
			out.Containers = append(out.Containers, c)
		}
	}
	return out
}

func equalJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// forged is the refusal of a TaskRun whose field says that terrarun did not
// build it.
func forged(m *metav1.ObjectMeta, field string) error {
	return job.NotBuilt(kind, m, field)
}

func secondsDuration(s int64) time.Duration { return time.Duration(s) * time.Second }
