package integration

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestLocalBackendStaysInItsNamespace attacks another namespace's state
// through the local backend's settings: a run in team-a that points path or
// workspace_dir at default's state, or takes them from a Secret, is refused
// at create, with the field that says why.
func TestLocalBackendStaysInItsNamespace(t *testing.T) {
	s := startBinary(t, t.TempDir())
	victim := filepath.Join(s.DataDir, "state", "default", "default", "terraform.tfstate")
	for _, tc := range []struct {
		backend, field string
	}{
		{"  backend:\n    type: local\n    config:\n      path: " + victim + "\n", "spec.backend.config[path]"},
		{"  backend:\n    type: local\n    config:\n      workspace_dir: " + filepath.Dir(filepath.Dir(victim)) + "\n", "spec.backend.config[workspace_dir]"},
		{"  backend:\n    type: local\n    configSecret: elsewhere\n", "spec.backend.configSecret"},
	} {
		manifest := "apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: thief\n  namespace: team-a\nspec:\n" +
			inline(map[string]string{"main.tf": `resource "terraform_data" "x" {}`}, tc.backend)
		path := filepath.Join(t.TempDir(), "run.yaml")
		writeFile(t, path, manifest)
		out, err := kubectl(t, s.Kubeconfig, "create", "-f", path)
		if err == nil || !strings.Contains(out, tc.field) || !strings.Contains(out, "Forbidden") {
			t.Errorf("a run with %q: %v\n%s\nwant refused, naming %s", strings.TrimSpace(tc.backend), err, out, tc.field)
		}
	}
}
