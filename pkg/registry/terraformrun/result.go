package terraformrun

import (
	"context"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// ResultParameter is the query parameter with which a client of an action
// subresource (approve, discard, cancel) asks for a short result: a Status
// that says what happened, instead of the whole run. kubectl create --raw
// prints it as it comes, so `…/approve?result=short` reads well.
const ResultParameter = "result"

// resultShort is ResultParameter's one value.
const resultShort = "short"

var actions = sets.New("approve", "discard", "cancel")

type shortResultKey struct{}

// WithActionResult is a filter of the handler chain that reads
// ResultParameter on requests to the action subresources into their
// context, where the storage sees it, and refuses a value it does not know.
// It runs after the request info is known.
func WithActionResult(h http.Handler, codecs serializer.CodecFactory) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		values, ok := req.URL.Query()[ResultParameter]
		if !ok {
			h.ServeHTTP(w, req)
			return
		}
		info, found := genericapirequest.RequestInfoFrom(req.Context())
		if !found || info.APIGroup != terrarun.GroupName || info.Resource != "terraformruns" || !actions.Has(info.Subresource) {
			h.ServeHTTP(w, req)
			return
		}
		if len(values) != 1 || values[0] != resultShort {
			err := apierrors.NewBadRequest(fmt.Sprintf("?%s=%v: the only value is %q, for a short result instead of the whole run; omit it for the run", ResultParameter, values, resultShort))
			responsewriters.ErrorNegotiated(err, codecs, metav1.SchemeGroupVersion, w, req)
			return
		}
		h.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), shortResultKey{}, true)))
	})
}

// result is what an action answers: the run, or, when the client asked for
// a short result, a Status with the run's message.
func result(ctx context.Context, run *terrarun.TerraformRun, kind string) runtime.Object {
	if short, _ := ctx.Value(shortResultKey{}).(bool); !short {
		return run
	}
	return &metav1.Status{
		Status:  metav1.StatusSuccess,
		Code:    http.StatusCreated,
		Message: fmt.Sprintf("%s recorded for run %s/%s (now %s): %s", kind, run.Namespace, run.Name, phase(run), run.Status.Message),
		Details: &metav1.StatusDetails{Name: run.Name, Group: terrarun.GroupName, Kind: "terraformruns"},
	}
}
