package planpolicy

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// NewInput builds what a policy sees of run, whose redacted plan JSON is
// planJSON (planErr when it could not be read). namespace is the run's
// namespace object (one with only a name in standalone mode), workspace the
// workspace that made the run, or nil.
func NewInput(run *v1alpha1.TerraformRun, planJSON []byte, planErr error, namespace runtime.Object, workspace *v1alpha1.TerraformWorkspace) (*Input, error) {
	in := &Input{
		RunLabels: labels.Set(run.Labels),
		Operation: run.Spec.Operation,
		Trigger:   TriggerOf(run),
		PlanError: planErr,
	}
	var err error
	if planErr == nil {
		if err := utiljson.Unmarshal(planJSON, &in.Plan); err != nil {
			in.PlanError = fmt.Errorf("the redacted plan JSON does not decode: %w", err)
		} else if in.Plan == nil {
			in.PlanError = fmt.Errorf("the redacted plan JSON is not an object")
		}
	}
	if in.PlanError == nil {
		in.Summary = Summarize(in.Plan)
	}
	// The run as its readers see it, without status (which the policy
	// decides) and without managedFields.
	r := run.DeepCopy()
	r.ManagedFields = nil
	r.Status = v1alpha1.TerraformRunStatus{}
	if in.Run, err = runtime.DefaultUnstructuredConverter.ToUnstructured(r); err != nil {
		return nil, err
	}
	delete(in.Run, "status")
	if namespace != nil {
		if in.Namespace, err = runtime.DefaultUnstructuredConverter.ToUnstructured(namespace); err != nil {
			return nil, err
		}
		if md, ok := in.Namespace["metadata"].(map[string]any); ok {
			delete(md, "managedFields")
			if l, ok := md["labels"].(map[string]any); ok {
				in.NamespaceLabels = labels.Set{}
				for k, v := range l {
					in.NamespaceLabels[k], _ = v.(string)
				}
			}
		}
	}
	if workspace != nil {
		w := workspace.DeepCopy()
		w.ManagedFields = nil
		if in.Workspace, err = runtime.DefaultUnstructuredConverter.ToUnstructured(w); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// TriggerOf is why run was created: the trigger its workspace recorded
// (terrarun.dev/trigger, which only the server may set), or Direct.
func TriggerOf(run *v1alpha1.TerraformRun) v1alpha1.Trigger {
	if t := run.Annotations[v1alpha1.AnnotationTrigger]; t != "" {
		return v1alpha1.Trigger(t)
	}
	return v1alpha1.TriggerDirect
}

// Summarize lists the resources a plan changes, by action, from its
// resource_changes: add (created), change (updated in place), replace
// (destroyed and created again, in either order) and delete (destroyed).
// Each entry has the resource's address, type, mode and providerName.
// Reads and no-ops are left out.
func Summarize(plan map[string]any) map[string]any {
	out := map[string][]any{"add": {}, "change": {}, "replace": {}, "delete": {}}
	changes, _ := plan["resource_changes"].([]any)
	for _, c := range changes {
		rc, ok := c.(map[string]any)
		if !ok {
			continue
		}
		change, _ := rc["change"].(map[string]any)
		raw, _ := change["actions"].([]any)
		var actions []string
		for _, a := range raw {
			if s, ok := a.(string); ok {
				actions = append(actions, s)
			}
		}
		var key string
		switch {
		case slices.Equal(actions, []string{"create"}):
			key = "add"
		case slices.Equal(actions, []string{"update"}):
			key = "change"
		case slices.Equal(actions, []string{"delete"}):
			key = "delete"
		case slices.Contains(actions, "create") && slices.Contains(actions, "delete"):
			key = "replace"
		default:
			continue
		}
		out[key] = append(out[key], map[string]any{
			"address":      rc["address"],
			"type":         rc["type"],
			"mode":         rc["mode"],
			"providerName": rc["provider_name"],
		})
	}
	m := make(map[string]any, len(out))
	for k, v := range out {
		m[k] = v
	}
	return m
}
