package terraformrun

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"

	restful "github.com/emicklei/go-restful/v3"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/artifacts"
)

func TestArtifactError(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("artifacts: writing plan-file of run team-a/web: %w", err) }
	for _, tc := range []struct {
		name string
		err  error
		code int32
		want string
	}{
		{"too large", fmt.Errorf("%w: the plan file is larger than the limit", artifacts.ErrTooLarge), http.StatusRequestEntityTooLarge, "the plan file is larger than the limit"},
		{"not found", wrap(artifacts.ErrNotFound), http.StatusNotFound, "what to do"},
		{"log closed", fmt.Errorf("%w: log of stage plan", artifacts.ErrLogClosed), http.StatusConflict, "what to do"},
		{"deadline", wrap(context.DeadlineExceeded), http.StatusServiceUnavailable, "the artifact store is unavailable, try again"},
		{"etcd timed out", wrap(rpctypes.ErrTimeout), http.StatusServiceUnavailable, "etcdserver: request timed out"},
		{"etcd has no leader", wrap(rpctypes.ErrNoLeader), http.StatusServiceUnavailable, "etcdserver: no leader"},
		{"connection unavailable", wrap(status.Error(codes.Unavailable, "connection refused")), http.StatusServiceUnavailable, "connection refused"},
		{"gRPC deadline", wrap(status.Error(codes.DeadlineExceeded, "too slow")), http.StatusServiceUnavailable, "too slow"},
		{"etcd out of space", wrap(rpctypes.ErrNoSpace), http.StatusServiceUnavailable, "etcd is out of space (its NOSPACE alarm is raised) and accepts only reads and deletes: delete old runs"},
		{"request too large for etcd", wrap(rpctypes.ErrRequestTooLarge), http.StatusInternalServerError, "etcdserver: request is too large"},
		{"permission denied", wrap(status.Error(codes.PermissionDenied, "no")), http.StatusInternalServerError, "no"},
		{"canceled", wrap(context.Canceled), http.StatusInternalServerError, "context canceled"},
		{"transformer", errors.New("artifacts: transforming: KMS is sealed"), http.StatusInternalServerError, "KMS is sealed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := artifactError(tc.err, "web", "plan", "what to do")
			expectAPIError(t, err, tc.code, tc.want)
		})
	}

	// Without a message, a 404 says what the store says.
	err := artifactError(wrap(artifacts.ErrNotFound), "web", "outputs", "")
	expectAPIError(t, err, http.StatusNotFound, "artifact not found")
	var details *metav1.StatusDetails
	if s, ok := err.(interface{ Status() metav1.Status }); ok {
		details = s.Status().Details
	}
	if details == nil || details.Name != "web" || details.Kind != "terraformruns/outputs" {
		t.Errorf("404 details = %+v", details)
	}
}

func TestIsUpload(t *testing.T) {
	for verb, want := range map[string]bool{"create": true, "get": false} {
		got, err := isUpload(requestContext(alice, verb, "logs"))
		if err != nil || got != want {
			t.Errorf("isUpload(%s) = %v, %v; want %v", verb, got, err, want)
		}
	}
	_, err := isUpload(requestContext(alice, "delete", "logs"))
	expectAPIError(t, err, http.StatusMethodNotAllowed)
	_, err = isUpload(context.Background())
	expectAPIError(t, err, http.StatusInternalServerError)
}

// TestConnectOptionsAreQueryParameters does what the endpoint installer does
// to document a connecter's query parameters: it converts the internal
// options type of NewConnectOptions to the served version's type, and adds
// its fields as parameters of the route.
func TestConnectOptionsAreQueryParameters(t *testing.T) {
	for _, tc := range []struct {
		name      string
		connecter rest.Connecter
		want      []string
	}{
		{"plan", &PlanREST{}, []string{"attempt:integer", "format:string", "part:string", "wait:boolean"}},
		{"logs", &LogsREST{}, []string{"attempt:integer", "end:boolean", "follow:boolean", "limitBytes:integer", "stage:string", "tailLines:integer"}},
		{"outputs", &OutputsREST{}, []string{"attempt:integer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, subpath, _ := tc.connecter.NewConnectOptions()
			if subpath {
				t.Error("the subresource has no subpath")
			}
			kinds, _, err := testScheme.ObjectKinds(opts)
			if err != nil {
				t.Fatal(err)
			}
			versioned, err := testScheme.New(v1alpha1.SchemeGroupVersion.WithKind(kinds[0].Kind))
			if err != nil {
				t.Fatal(err)
			}
			ws := new(restful.WebService)
			route := ws.POST("/" + tc.name).To(func(*restful.Request, *restful.Response) {})
			if err := endpoints.AddObjectParams(ws, route, versioned); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range route.Build().ParameterDocs {
				d := p.Data()
				got = append(got, d.Name+":"+d.DataType)
				if d.Description == "" {
					t.Errorf("parameter %s has no description", d.Name)
				}
			}
			sort.Strings(got)
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("parameters %q, want %q", got, tc.want)
			}
		})
	}
}
