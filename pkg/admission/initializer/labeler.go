package initializer

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
)

// InformerNamespaceLabeler reads namespace labels from a namespace lister,
// normally backed by a shared informer on the Kubernetes API (cluster mode).
// A namespace missing from the lister is an error.
type InformerNamespaceLabeler struct {
	lister corev1listers.NamespaceLister
}

var _ NamespaceLabeler = &InformerNamespaceLabeler{}

// NewInformerNamespaceLabeler returns a labeler that reads from lister.
func NewInformerNamespaceLabeler(lister corev1listers.NamespaceLister) *InformerNamespaceLabeler {
	return &InformerNamespaceLabeler{lister: lister}
}

// NamespaceLabels implements NamespaceLabeler. It returns a copy of the
// namespace's labels; when the namespace is not in the lister's cache the
// error wraps the lister's NotFound error.
func (l *InformerNamespaceLabeler) NamespaceLabels(_ context.Context, namespace string) (map[string]string, error) {
	if l == nil || l.lister == nil {
		return nil, fmt.Errorf("no namespace lister configured")
	}
	ns, err := l.lister.Get(namespace)
	if err != nil {
		return nil, fmt.Errorf("reading namespace %q: %w", namespace, err)
	}
	out := make(map[string]string, len(ns.Labels))
	for k, v := range ns.Labels {
		out[k] = v
	}
	return out, nil
}

// NameOnlyNamespaceLabeler is the labeler of standalone mode, where there is
// no Kubernetes API to read namespaces from. It returns only
// kubernetes.io/metadata.name=<namespace>, the label Kubernetes sets on every
// namespace, so that selectors on that label behave the same in both modes.
type NameOnlyNamespaceLabeler struct{}

var _ NamespaceLabeler = NameOnlyNamespaceLabeler{}

// NamespaceLabels implements NamespaceLabeler.
func (NameOnlyNamespaceLabeler) NamespaceLabels(_ context.Context, namespace string) (map[string]string, error) {
	return map[string]string{corev1.LabelMetadataName: namespace}, nil
}
