// Package fluxsource reads the Flux sources (GitRepository, OCIRepository
// and Bucket of source.toolkit.fluxcd.io/v1) that a run's
// spec.source.sourceRef names, in cluster mode: the artifact that
// source-controller reports in a source's status, once the source is Ready,
// and only when the artifact is served from source-controller's own
// artifact server for that very object.
package fluxsource

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// GroupVersion is the version of Flux's source API that terrarun reads.
var GroupVersion = schema.GroupVersion{Group: v1alpha1.FluxSourceGroup, Version: "v1"}

// resources are the resources of the kinds a sourceRef may name.
var resources = map[string]string{
	v1alpha1.SourceKindGitRepository: "gitrepositories",
	v1alpha1.SourceKindOCIRepository: "ocirepositories",
	v1alpha1.SourceKindBucket:        "buckets",
}

// Resource is the resource of kind, "" when kind is not a Flux source.
func Resource(kind string) string { return resources[kind] }

// DefaultArtifactHost is where source-controller's artifact server is
// reached in a cluster where Flux is installed as usual (its Service in
// flux-system, the --storage-adv-addr it advertises by default).
const DefaultArtifactHost = "source-controller.flux-system.svc.cluster.local."

// Artifact is the artifact a source's status reports.
type Artifact struct {
	// URL is where source-controller serves its tarball.
	URL string
	// Digest is the tarball's sha256:<hex>.
	Digest string
	// Revision is the source's revision, such as main@sha1:<commit>.
	Revision string
}

// NotReadyError is a source that has no artifact to use yet: missing, not
// Ready, or still being fetched. Message says why, in the source's own
// words where it has some.
type NotReadyError struct {
	Message string
}

func (e *NotReadyError) Error() string { return e.Message }

// ErrUntrusted is an artifact that terrarun does not download: served
// from elsewhere than source-controller's artifact server for its source,
// or without a sha256 digest.
var ErrUntrusted = errors.New("untrusted artifact")

// digestRegexp is the digest format terrarun checks: source-controller's
// default algorithm.
var digestRegexp = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// Reader reads Flux sources through a dynamic client: Get now, from the
// API server, for what a run pins; Cached from informers that start on
// first use, for what a workspace follows.
type Reader struct {
	client dynamic.Interface
	host   string

	mu       sync.Mutex
	ctx      context.Context
	factory  dynamicinformer.DynamicSharedInformerFactory
	watched  map[string]cache.SharedIndexInformer
	handlers []func(namespace, kind, name string)
}

// NewReader returns a Reader that accepts an artifact only when it is
// served from artifactHost (host[:port]).
func NewReader(client dynamic.Interface, artifactHost string) *Reader {
	return &Reader{client: client, host: artifactHost, factory: dynamicinformer.NewDynamicSharedInformerFactory(client, 0), watched: map[string]cache.SharedIndexInformer{}}
}

// Start lets informers run until ctx ends; they start on the first Cached
// call of their kind.
func (r *Reader) Start(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ctx = ctx
	r.factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		r.factory.Shutdown()
	}()
}

// OnChange calls handler with every source of a watched kind that is
// added, changed or deleted. Register handlers before the first Cached
// call.
func (r *Reader) OnChange(handler func(namespace, kind, name string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handlers = append(r.handlers, handler)
}

// Get reads the source kind/name of namespace from the API server and
// returns its artifact; a source that has none to use yet is a
// *NotReadyError.
func (r *Reader) Get(ctx context.Context, namespace, kind, name string) (Artifact, error) {
	res := Resource(kind)
	if res == "" {
		return Artifact{}, fmt.Errorf("%s is not a Flux source kind", kind)
	}
	u, err := r.client.Resource(GroupVersion.WithResource(res)).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && notServed(err):
		return Artifact{}, &NotReadyError{Message: fmt.Sprintf("the cluster does not serve %s (%s): install Flux's source-controller and its CRDs", GroupVersion.WithResource(res).GroupResource(), GroupVersion)}
	case apierrors.IsNotFound(err):
		return Artifact{}, &NotReadyError{Message: fmt.Sprintf("%s %s/%s does not exist yet", kind, namespace, name)}
	case apierrors.IsForbidden(err):
		return Artifact{}, fmt.Errorf("terrarun may not read %s %s/%s: grant its ServiceAccount get, list and watch on %s: %w", kind, namespace, name, GroupVersion.WithResource(res).GroupResource(), err)
	case err != nil:
		return Artifact{}, fmt.Errorf("reading %s %s/%s: %w", kind, namespace, name, err)
	}
	return r.artifactOf(u, kind)
}

// notServed reports whether a NotFound is the resource's (no CRD), not the
// object's.
func notServed(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	d := status.Status().Details
	return d == nil || d.Name == ""
}

// Cached returns the artifact of the source kind/name of namespace from
// the informer of kind, which it starts on first use; until the informer
// has synced, the source is a *NotReadyError.
func (r *Reader) Cached(namespace, kind, name string) (Artifact, error) {
	inf, err := r.informer(kind)
	if err != nil {
		return Artifact{}, err
	}
	if !inf.HasSynced() {
		return Artifact{}, &NotReadyError{Message: fmt.Sprintf("terrarun is still reading the cluster's %ss", kind)}
	}
	obj, ok, err := inf.GetIndexer().GetByKey(namespace + "/" + name)
	switch {
	case err != nil:
		return Artifact{}, err
	case !ok:
		return Artifact{}, &NotReadyError{Message: fmt.Sprintf("%s %s/%s does not exist yet", kind, namespace, name)}
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return Artifact{}, fmt.Errorf("%s %s/%s: unexpected %T in the cache", kind, namespace, name, obj)
	}
	return r.artifactOf(u, kind)
}

// informer returns the informer of kind, started once Start was called.
func (r *Reader) informer(kind string) (cache.SharedIndexInformer, error) {
	res := Resource(kind)
	if res == "" {
		return nil, fmt.Errorf("%s is not a Flux source kind", kind)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if inf, ok := r.watched[kind]; ok {
		return inf, nil
	}
	inf := r.factory.ForResource(GroupVersion.WithResource(res)).Informer()
	handlers := append([]func(string, string, string){}, r.handlers...)
	notify := func(obj interface{}) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		m, ok := obj.(metav1.Object)
		if !ok {
			return
		}
		for _, h := range handlers {
			h(m.GetNamespace(), kind, m.GetName())
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, obj interface{}) { notify(obj) },
		DeleteFunc: notify,
	}); err != nil {
		return nil, err
	}
	r.watched[kind] = inf
	if r.ctx != nil {
		r.factory.Start(r.ctx.Done())
	}
	return inf, nil
}

// artifactOf returns the artifact of u, a source of kind, when it is Ready
// and served from the artifact host for u itself.
func (r *Reader) artifactOf(u *unstructured.Unstructured, kind string) (Artifact, error) {
	id := fmt.Sprintf("%s %s/%s", kind, u.GetNamespace(), u.GetName())
	ready, reason, msg := readyCondition(u)
	artURL, found, _ := unstructured.NestedString(u.Object, "status", "artifact", "url")
	switch {
	case ready != string(metav1.ConditionTrue):
		detail := "source-controller has not reported it Ready"
		if msg != "" {
			detail = fmt.Sprintf("%s: %s", reason, msg)
		}
		return Artifact{}, &NotReadyError{Message: fmt.Sprintf("%s is not Ready (%s)", id, detail)}
	case !found || artURL == "":
		return Artifact{}, &NotReadyError{Message: fmt.Sprintf("%s is Ready but reports no artifact yet", id)}
	}
	a := Artifact{URL: artURL}
	a.Digest, _, _ = unstructured.NestedString(u.Object, "status", "artifact", "digest")
	a.Revision, _, _ = unstructured.NestedString(u.Object, "status", "artifact", "revision")
	if err := r.check(a, kind, u.GetNamespace(), u.GetName()); err != nil {
		return Artifact{}, fmt.Errorf("%w: %s: %v", ErrUntrusted, id, err)
	}
	return a, nil
}

// check accepts an artifact only from the artifact host, at the path
// source-controller stores the object's artifacts under
// (<kind>/<namespace>/<name>/), with a sha256 digest.
func (r *Reader) check(a Artifact, kind, namespace, name string) error {
	u, err := url.Parse(a.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil {
		return fmt.Errorf("its artifact URL is not an http:// or https:// URL without credentials")
	}
	if !sameHost(u.Host, r.host) {
		return fmt.Errorf("its artifact is served from %q, not from source-controller's artifact server %q (the server's --flux-artifact-host): terrarun downloads artifacts from there alone", u.Host, r.host)
	}
	prefix := "/" + strings.ToLower(kind) + "/" + namespace + "/" + name + "/"
	if !strings.HasPrefix(u.EscapedPath(), prefix) {
		return fmt.Errorf("its artifact URL's path %q is not below %q, where source-controller stores this source's artifacts", u.EscapedPath(), prefix)
	}
	if !digestRegexp.MatchString(a.Digest) {
		return fmt.Errorf("its artifact's digest %q is not sha256:<64 hex digits>: run source-controller with its default --artifact-digest-algo=sha256", a.Digest)
	}
	if a.Revision == "" {
		return fmt.Errorf("its artifact has no revision")
	}
	return nil
}

// sameHost compares two host[:port]s, a trailing dot of a fully qualified
// name ignored.
func sameHost(a, b string) bool {
	norm := func(h string) string {
		h = strings.ToLower(h)
		if host, port, err := net.SplitHostPort(h); err == nil {
			return strings.TrimSuffix(host, ".") + ":" + port
		}
		return strings.TrimSuffix(h, ".")
	}
	return norm(a) == norm(b)
}

// readyCondition returns the status, reason and message of u's Ready
// condition, "" when it has none.
func readyCondition(u *unstructured.Unstructured) (status, reason, message string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]interface{})
		if !ok || m["type"] != "Ready" {
			continue
		}
		s, _ := m["status"].(string)
		rs, _ := m["reason"].(string)
		msg, _ := m["message"].(string)
		return s, rs, msg
	}
	return "", "", ""
}
