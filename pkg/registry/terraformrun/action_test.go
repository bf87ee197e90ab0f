package terraformrun

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

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

// TestActionShortResult: ?result=short gets a Status that says what
// happened instead of the whole run; another value is refused with 400
// naming the parameter, before the action; other requests are untouched.
func TestActionShortResult(t *testing.T) {
	env := newTestEnv(t)
	env.createRun(t, "web", nil)
	var seenShort bool
	h := WithActionResult(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		seenShort, _ = req.Context().Value(shortResultKey{}).(bool)
		w.WriteHeader(http.StatusNoContent)
	}), testCodecs)
	serve := func(path, subresource string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, nil)
		req = req.WithContext(genericapirequest.WithRequestInfo(req.Context(), &genericapirequest.RequestInfo{
			IsResourceRequest: true, Verb: "create", APIGroup: terrarun.GroupName, Resource: "terraformruns", Subresource: subresource, Name: "web",
		}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	if w := serve("/x/cancel?result=short", "cancel"); w.Code != http.StatusNoContent || !seenShort {
		t.Errorf("?result=short: %d, short %v", w.Code, seenShort)
	}
	if w := serve("/x/cancel?result=long", "cancel"); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "?result=[long]: the only value is") {
		t.Errorf("?result=long: %d %s", w.Code, w.Body.String())
	}
	if w := serve("/x/plan?result=long", "plan"); w.Code != http.StatusNoContent || seenShort {
		t.Errorf("another subresource: %d, short %v", w.Code, seenShort)
	}

	ctx := context.WithValue(requestContext(alice, "create", "cancel"), shortResultKey{}, true)
	obj, err := env.storage.Cancel.Create(ctx, "web", &terrarun.TerraformRunCancel{Comment: "wrong workspace"}, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, ok := obj.(*metav1.Status)
	if !ok || st.Status != metav1.StatusSuccess || st.Details == nil || st.Details.Name != "web" ||
		!strings.HasPrefix(st.Message, "TerraformRunCancel recorded for run "+testNamespace+"/web (now Pending): ") {
		t.Fatalf("short result = %#v", obj)
	}
	if c := meta.FindStatusCondition(env.getRun(t, "web").Status.Conditions, terrarun.ConditionCancelRequested); c == nil {
		t.Error("the cancel was not recorded")
	}
}
