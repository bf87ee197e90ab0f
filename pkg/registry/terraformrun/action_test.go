package terraformrun

import (
	"context"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// TestActionCreate covers what every action subresource does before it
// records anything: the body's run name, validation, admission and the user.
func TestActionCreate(t *testing.T) {
	env := newTestEnv(t)
	env.createRun(t, "web", nil)
	cancelREST := env.storage.Cancel
	called := 0
	admission := func(context.Context, runtime.Object) error { called++; return nil }
	create := func(ctx context.Context, body *terrarun.TerraformRunCancel) error {
		_, err := cancelREST.Create(ctx, "web", body, admission, &metav1.CreateOptions{})
		return err
	}
	ctx := requestContext(alice, "create", "cancel")

	err := create(ctx, &terrarun.TerraformRunCancel{ObjectMeta: metav1.ObjectMeta{Name: "api"}})
	expectAPIError(t, err, http.StatusBadRequest, `TerraformRunCancel names run "api" but was sent to run "web"; omit metadata.name or make it match`)
	err = create(ctx, &terrarun.TerraformRunCancel{Comment: strings.Repeat("x", 1025)})
	expectAPIError(t, err, http.StatusUnprocessableEntity, "comment")
	if called != 0 {
		t.Errorf("admission saw %d bodies that were refused before it", called)
	}
	err = create(requestContext(nil, "create", "cancel"), &terrarun.TerraformRunCancel{})
	expectAPIError(t, err, http.StatusForbidden, "TerraformRunCancel requires an authenticated user")

	if err := create(ctx, &terrarun.TerraformRunCancel{ObjectMeta: metav1.ObjectMeta{Name: "web"}}); err != nil {
		t.Errorf("refused a body that names its run: %v", err)
	}
	if called != 2 {
		t.Errorf("admission called %d times, want 2 (the anonymous request and the accepted one)", called)
	}
	if _, err := cancelREST.Create(ctx, "web", &terrarun.TerraformRunApproval{}, admission, &metav1.CreateOptions{}); err == nil {
		t.Errorf("accepted an approval as a cancel")
	}
}
