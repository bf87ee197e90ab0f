package terraformworkspace

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// maxDependencyWalk bounds the workspaces a cycle check reads.
const maxDependencyWalk = 1000

// dependencies reads the other workspaces of a request's namespace, to
// refuse a spec.dependsOn that makes a cycle.
type dependencies struct {
	get func(ctx context.Context, name string) (*terrarun.TerraformWorkspace, error)
}

// checkCycle refuses a dependency of ws through which the dependencies lead
// back to ws, naming the path.
func (d *dependencies) checkCycle(ctx context.Context, ws *terrarun.TerraformWorkspace) field.ErrorList {
	if d == nil || d.get == nil {
		return nil
	}
	var allErrs field.ErrorList
	read := 0
	for i, dep := range ws.Spec.DependsOn {
		// Depth-first from the dependency, with the path that led there.
		type step struct {
			name string
			path []string
		}
		stack := []step{{dep.Name, []string{ws.Name, dep.Name}}}
		seen := map[string]bool{}
		for len(stack) > 0 && read < maxDependencyWalk {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if s.name == ws.Name {
				allErrs = append(allErrs, field.Invalid(field.NewPath("spec", "dependsOn").Index(i).Child("name"), dep.Name,
					fmt.Sprintf("makes a dependency cycle (%s): no workspace of it could ever start; remove one of the dependencies", strings.Join(s.path, " → "))))
				break
			}
			if seen[s.name] {
				continue
			}
			seen[s.name] = true
			other, err := d.get(ctx, s.name)
			read++
			if err != nil {
				continue // not there (yet): no cycle through it
			}
			for _, next := range other.Spec.DependsOn {
				stack = append(stack, step{next.Name, append(append([]string(nil), s.path...), next.Name)})
			}
		}
	}
	return allErrs
}
