package tekton

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/terrarun/terrarun/pkg/admission/policy"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
)

// tasks is the resource of Tekton Pipelines' v1 Tasks.
var tasks = schema.GroupVersionResource{Group: "tekton.dev", Version: "v1", Resource: "tasks"}

// stagePlaceholder is the name of the step of the cluster policy's Task
// (taskRunTemplate.task) that marks where the stage runs.
const stagePlaceholder = "stage"

// shape is what the cluster policy's taskRunTemplate adds to a stage's
// TaskRun: the ServiceAccount of runs that name none, the scheduling
// fields of its pod, and the steps of the policy's Task around the stage's
// step. A stage's shape is the template as it was when the stage started,
// recorded then in terrarun's etcd (Claims.recordShape): its TaskRun is
// checked against what it was built with, not against a template an
// operator changed while it ran.
type shape struct {
	ServiceAccountName string                   `json:"serviceAccountName,omitempty"`
	PodTemplate        *policy.StagePodTemplate `json:"podTemplate,omitempty"`
	// Task is the Task's namespace/name, for messages.
	Task   string `json:"task,omitempty"`
	Before []step `json:"before,omitempty"`
	After  []step `json:"after,omitempty"`
}

// currentShape is the shape the template gives a stage now: it reads the
// policy's Task, whose steps must be ones a TaskRun's taskSpec holds, and
// whose step stagePlaceholder marks the stage's place.
func (e *Executor) currentShape(ctx context.Context) (*shape, error) {
	t := e.template
	if t == nil {
		return &shape{}, nil
	}
	s := &shape{ServiceAccountName: t.ServiceAccountName, PodTemplate: t.PodTemplate}
	if t.Task == nil {
		return s, nil
	}
	s.Task = t.Task.Namespace + "/" + t.Task.Name
	obj, err := e.dyn.Resource(tasks).Namespace(t.Task.Namespace).Get(ctx, t.Task.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("the cluster policy's taskRunTemplate.task: Task %s not found; create it, or remove taskRunTemplate.task", s.Task)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the cluster policy's Task %s (taskRunTemplate.task): %w", s.Task, err)
	}
	raw, err := json.Marshal(obj.Object["spec"])
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var spec struct {
		Description string `json:"description,omitempty"`
		DisplayName string `json:"displayName,omitempty"`
		Steps       []step `json:"steps"`
	}
	if err := dec.Decode(&spec); err != nil {
		return nil, fmt.Errorf("Task %s (taskRunTemplate.task): spec: %v: terrarun takes only steps (name, image, command, args, script, workingDir, env, computeResources, volumeMounts, securityContext, timeout) from it", s.Task, err)
	}
	at := -1
	for i, st := range spec.Steps {
		switch st.Name {
		case stagePlaceholder:
			if at >= 0 {
				return nil, fmt.Errorf("Task %s (taskRunTemplate.task): spec.steps[%d]: a second step named %q", s.Task, i, stagePlaceholder)
			}
			at = i
		case stepName:
			return nil, fmt.Errorf("Task %s (taskRunTemplate.task): spec.steps[%d]: the name %q is the stage's own step's; rename it", s.Task, i, stepName)
		}
	}
	if at < 0 {
		return nil, fmt.Errorf("Task %s (taskRunTemplate.task): spec.steps: no step named %q; add one where the stage runs (its image and script are not used)", s.Task, stagePlaceholder)
	}
	s.Before, s.After = spec.Steps[:at], spec.Steps[at+1:]
	return s, nil
}

// shapeFor is the shape of ex's stage: the one recorded when it started,
// else the template's now, recorded when record is true (Start).
func (e *Executor) shapeFor(ctx context.Context, ex executor.Execution, record bool) (*shape, error) {
	id := identityOf(ex)
	recorded, err := e.claims.recordedShape(ctx, id)
	if err != nil {
		return nil, err
	}
	if recorded == nil {
		s, err := e.currentShape(ctx)
		if err != nil || !record {
			return s, err
		}
		data, err := json.Marshal(s)
		if err != nil {
			return nil, err
		}
		if recorded, err = e.claims.recordShape(ctx, id, data); err != nil {
			return nil, err
		}
	}
	var s shape
	if err := json.Unmarshal(recorded, &s); err != nil {
		return nil, fmt.Errorf("the recorded TaskRun template of the %s stage of run %s/%s: %w", ex.Stage, ex.Run.Namespace, ex.Run.Name, err)
	}
	return &s, nil
}

// apply gives built, the Job built for run's stage, what s says of its pod:
// s's ServiceAccount when the run names none; the pod template's node
// selector, over the run's; its tolerations, before the run's; and its
// affinity, priority class, runtime class, scheduler and image pull
// Secrets.
func (s *shape) apply(built *batchv1.Job, run *v1alpha1.TerraformRun) {
	pod := &built.Spec.Template.Spec
	if s.ServiceAccountName != "" && (run.Spec.Executor == nil || run.Spec.Executor.ServiceAccountName == "") {
		pod.ServiceAccountName = s.ServiceAccountName
	}
	p := s.PodTemplate
	if p == nil {
		return
	}
	if len(p.NodeSelector) > 0 {
		selector := maps.Clone(pod.NodeSelector)
		if selector == nil {
			selector = map[string]string{}
		}
		maps.Copy(selector, p.NodeSelector)
		pod.NodeSelector = selector
	}
	if len(p.Tolerations) > 0 {
		pod.Tolerations = append(slices.Clone(p.Tolerations), pod.Tolerations...)
	}
	if p.Affinity != nil {
		pod.Affinity = p.Affinity.DeepCopy()
	}
	if p.PriorityClassName != "" {
		pod.PriorityClassName = p.PriorityClassName
	}
	if p.RuntimeClassName != "" {
		pod.RuntimeClassName = &p.RuntimeClassName
	}
	if p.SchedulerName != "" {
		pod.SchedulerName = p.SchedulerName
	}
	if len(p.ImagePullSecrets) > 0 {
		pod.ImagePullSecrets = slices.Clone(p.ImagePullSecrets)
	}
}

// identityOf is the stage attempt of ex.
func identityOf(ex executor.Execution) executor.Identity {
	return executor.Identity{Namespace: ex.Run.Namespace, Name: ex.Run.Name, UID: string(ex.Run.UID), Stage: ex.Stage, Attempt: ex.Attempt}
}
