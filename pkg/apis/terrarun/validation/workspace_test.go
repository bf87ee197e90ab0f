package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

func validWorkspace() *terrarun.TerraformWorkspace {
	ws := &terrarun.TerraformWorkspace{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "dev"},
		Spec: terrarun.TerraformWorkspaceSpec{
			Template: terrarun.TerraformRunSpec{Source: terrarun.Source{Inline: map[string]string{"main.tf": "# empty"}}},
			Approval: terrarun.Approval{Mode: terrarun.ApprovalModeManual},
		},
	}
	terrarun.SetBuiltinDefaults(&ws.Spec.Template, terrarun.ServerDefaults{Image: terrarun.DefaultExecutorImage})
	ws.Spec.Template.Approval = terrarun.Approval{}
	return ws
}

// TestValidateTerraformWorkspace: each mistake is refused with the path of
// the field it is in.
func TestValidateTerraformWorkspace(t *testing.T) {
	if errs := ValidateTerraformWorkspace(validWorkspace()); len(errs) > 0 {
		t.Fatalf("a valid workspace: %v", errs)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*terrarun.TerraformWorkspace)
		want   string
	}{
		{"a template operation", func(ws *terrarun.TerraformWorkspace) { ws.Spec.Template.Operation = terrarun.OperationDestroy }, "spec.template.operation"},
		{"a template approval", func(ws *terrarun.TerraformWorkspace) { ws.Spec.Template.Approval.Mode = terrarun.ApprovalModeAuto }, "spec.template.approval"},
		{"a template outputsSecret", func(ws *terrarun.TerraformWorkspace) { ws.Spec.Template.OutputsSecret = "out" }, "spec.template.outputsSecret"},
		{"a template forceUnlock", func(ws *terrarun.TerraformWorkspace) { ws.Spec.Template.ForceUnlock = "5c1b2a5e" }, "spec.template.forceUnlock"},
		{"template trusted keys", func(ws *terrarun.TerraformWorkspace) {
			ws.Spec.Template.Source = terrarun.Source{OCI: &terrarun.OCISource{URL: "oci://ghcr.io/org/infra", Verify: &terrarun.OCIVerification{TrustedKeys: "keys"}}}
		}, "spec.template.source.oci.verify.trustedKeys"},
		{"a template imageDigest", func(ws *terrarun.TerraformWorkspace) {
			ws.Spec.Template.Engine.ImageDigest = "sha256:" + strings.Repeat("a", 64)
		}, "spec.template.engine.imageDigest"},
		{"an approval mode", func(ws *terrarun.TerraformWorkspace) { ws.Spec.Approval.Mode = "Sometimes" }, "spec.approval.mode"},
		{"no source", func(ws *terrarun.TerraformWorkspace) { ws.Spec.Template.Source = terrarun.Source{} }, "spec.template.source"},
		{"a short interval", func(ws *terrarun.TerraformWorkspace) { ws.Spec.Interval = &metav1.Duration{Duration: time.Second} }, "spec.interval"},
		{"a drift policy", func(ws *terrarun.TerraformWorkspace) { ws.Spec.DriftPolicy = "Ignore" }, "spec.driftPolicy"},
		{"a history limit", func(ws *terrarun.TerraformWorkspace) { ws.Spec.HistoryLimits.Failed = ptr.To[int32](0) }, "spec.historyLimits.failed"},
		{"a long name", func(ws *terrarun.TerraformWorkspace) { ws.Name = strings.Repeat("a", MaxWorkspaceNameLength+1) }, "metadata.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := validWorkspace()
			tc.mutate(ws)
			errs := ValidateTerraformWorkspace(ws)
			if len(errs) == 0 || !strings.HasPrefix(errs[0].Field, tc.want) {
				t.Errorf("errors %v, want one at %s", errs, tc.want)
			}
		})
	}
}

// TestValidateTerraformWorkspaceUpdate: a changed spec is validated again;
// an unchanged one is not, so a rule tightened after the workspace was
// stored never blocks the removal of its finalizer.
func TestValidateTerraformWorkspaceUpdate(t *testing.T) {
	old := validWorkspace()
	old.ResourceVersion = "7"
	old.Spec.Template.Variables = []terrarun.Variable{{Name: "stored_before_the_rule"}}
	ws := old.DeepCopy()
	ws.Finalizers = nil
	if errs := ValidateTerraformWorkspaceUpdate(ws, old); len(errs) > 0 {
		t.Errorf("a metadata update of a stored workspace: %v", errs)
	}
	ws.Spec.Interval = &metav1.Duration{Duration: time.Hour}
	if errs := ValidateTerraformWorkspaceUpdate(ws, old); len(errs) != 1 || errs[0].Field != "spec.template.variables[0].value" {
		t.Errorf("a spec update: %v, want the variable refused", errs)
	}
}

// TestValidateDiscardReason: a discard's reason is a CamelCase word.
func TestValidateDiscardReason(t *testing.T) {
	for reason, ok := range map[string]bool{"": true, "Superseded": true, "superseded": false, "Two words": false, strings.Repeat("A", 65): false} {
		errs := ValidateTerraformRunDiscard(&terrarun.TerraformRunDiscard{Reason: reason})
		if ok != (len(errs) == 0) || !ok && errs[0].Field != "reason" {
			t.Errorf("reason %q: %v", reason, errs)
		}
	}
}
