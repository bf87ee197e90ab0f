package terraformworkspace

import (
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// dependsOn sets spec.dependsOn to names.
func dependsOn(names ...string) func(*terrarun.TerraformWorkspace) {
	return func(ws *terrarun.TerraformWorkspace) {
		ws.Spec.DependsOn = nil
		for _, n := range names {
			ws.Spec.DependsOn = append(ws.Spec.DependsOn, terrarun.WorkspaceReference{Name: n})
		}
	}
}

// expectCauses fails unless the Status of an Invalid error names exactly
// fields, in order.
func expectCauses(t *testing.T, err error, fields ...string) {
	t.Helper()
	st := expectAPIError(t, err, http.StatusUnprocessableEntity)
	if st.Details == nil {
		t.Fatalf("an Invalid error without details: %+v", st)
	}
	var got []string
	for _, c := range st.Details.Causes {
		got = append(got, c.Field)
	}
	if len(got) != len(fields) {
		t.Fatalf("invalid fields %q, want %q", got, fields)
	}
	for i := range got {
		if got[i] != fields[i] {
			t.Errorf("invalid fields %q, want %q", got, fields)
		}
	}
}

// TestDependencyCycle checks that a spec.dependsOn through which the
// dependencies lead back to the workspace is refused, on update and on
// create, naming the field and the path, and that dependencies without a
// cycle are not.
func TestDependencyCycle(t *testing.T) {
	env := newTestEnv(t)
	// a diamond: a → b → d, a → c → d; and e → f, f to come.
	env.createWorkspace(t, alice, "d", nil)
	env.createWorkspace(t, alice, "b", dependsOn("d"))
	env.createWorkspace(t, alice, "c", dependsOn("d"))
	env.createWorkspace(t, alice, "a", dependsOn("b", "c"))
	env.createWorkspace(t, alice, "e", dependsOn("f"))

	t.Run("two workspaces", func(t *testing.T) {
		_, err := env.updateWorkspace(alice, "b", dependsOn("d", "a"))
		expectCauses(t, err, "spec.dependsOn[1].name")
		expectAPIError(t, err, http.StatusUnprocessableEntity,
			`spec.dependsOn[1].name: Invalid value: "a": makes a dependency cycle (b → a → b): no workspace of it could ever start; remove one of the dependencies`)
	})
	t.Run("through the diamond", func(t *testing.T) {
		_, err := env.updateWorkspace(alice, "d", dependsOn("a"))
		expectCauses(t, err, "spec.dependsOn[0].name")
		expectAPIError(t, err, http.StatusUnprocessableEntity, "makes a dependency cycle (d → a → c → d)")
	})
	t.Run("on create", func(t *testing.T) {
		_, err := env.workspaces.Workspace.Create(requestContext(alice, "create", "terraformworkspaces", "", ""), newWorkspace("f", dependsOn("e")), rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
		expectCauses(t, err, "spec.dependsOn[0].name")
		expectAPIError(t, err, http.StatusUnprocessableEntity, "makes a dependency cycle (f → e → f)")
	})
	t.Run("no cycle", func(t *testing.T) {
		// d, which a reaches twice, may depend on a workspace beside it.
		env.createWorkspace(t, alice, "g", nil)
		if _, err := env.updateWorkspace(alice, "d", dependsOn("g")); err != nil {
			t.Errorf("a dependency without a cycle was refused: %v", err)
		}
		if _, err := env.updateWorkspace(alice, "c", dependsOn("d", "b")); err != nil {
			t.Errorf("a dependency without a cycle was refused: %v", err)
		}
	})
}
