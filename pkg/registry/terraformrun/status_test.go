package terraformrun

import (
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

func TestStatusREST(t *testing.T) {
	env := newTestEnv(t)
	env.createRun(t, "web", nil)
	ctx := requestContext(alice, "update", "status")

	obj, err := env.storage.Status.Get(ctx, "web", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run := obj.(*terrarun.TerraformRun).DeepCopy()
	run.Status.Phase = terrarun.RunPhasePlanning
	run.Spec.Workspace = "changed"
	obj, _, err = env.storage.Status.Update(ctx, "web", rest.DefaultUpdatedObjectInfo(run), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := obj.(*terrarun.TerraformRun); got.Status.Phase != terrarun.RunPhasePlanning || got.Spec.Workspace != "default" {
		t.Errorf("status update wrote phase %q and workspace %q; want the status only", got.Status.Phase, got.Spec.Workspace)
	}

	// A status write never creates a run, even when asked to.
	missing := run.DeepCopy()
	missing.Name, missing.ResourceVersion = "missing", ""
	_, _, err = env.storage.Status.Update(ctx, "missing", rest.DefaultUpdatedObjectInfo(missing), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, true, &metav1.UpdateOptions{})
	expectAPIError(t, err, http.StatusNotFound)

	if fields := env.storage.Status.GetResetFields(); fields["terrarun.dev/v1alpha1"] == nil {
		t.Errorf("reset fields = %v, want spec reset for v1alpha1", fields)
	}
	table, err := env.storage.Status.ConvertToTable(ctx, obj, nil)
	if err != nil || len(table.Rows) != 1 {
		t.Errorf("table = %+v, %v", table, err)
	}
}

func TestStatusWriter(t *testing.T) {
	env := newTestEnv(t)
	before := env.createRun(t, "web", nil)
	w := env.storage.Plan.status

	_, err := w.update(requestContext(alice, "update", "status"), "web", func(run *terrarun.TerraformRun) error {
		run.Status.Message = "not stored"
		return conflict(run.Name, "the run is %s", phaseOrPending(run))
	})
	expectAPIError(t, err, http.StatusConflict, "the run is Pending")
	if after := env.getRun(t, "web"); after.ResourceVersion != before.ResourceVersion {
		t.Errorf("an aborted update was stored: %q", after.Status.Message)
	}

	// Status validation applies.
	_, err = w.update(requestContext(alice, "update", "status"), "web", func(run *terrarun.TerraformRun) error {
		run.Status.Phase = "Sleeping"
		return nil
	})
	expectAPIError(t, err, http.StatusUnprocessableEntity, "status.phase")

	_, err = w.get(requestContext(alice, "get", ""), "missing")
	expectAPIError(t, err, http.StatusNotFound)
}
