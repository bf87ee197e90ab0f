// Package event stores core/v1 Events in standalone mode, where no cluster
// keeps them: the controllers record the Events of runs and workspaces
// there, and kubectl reads them (`kubectl get events`, the Events section of
// `kubectl describe`). They expire an hour after their last write, as
// kube-apiserver's --event-ttl does by default. Behind a cluster, Events go
// to the cluster and this storage is not installed.
package event

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
)

// TTL is how long an Event is kept after its last write.
const TTL = time.Hour

// NewREST returns the storage of events.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*genericregistry.Store, error) {
	s := strategy{ObjectTyper: scheme, NameGenerator: names.SimpleNameGenerator}
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &corev1.Event{} },
		NewListFunc:               func() runtime.Object { return &corev1.EventList{} },
		PredicateFunc:             match,
		TTLFunc:                   func(runtime.Object, uint64, bool) (uint64, error) { return uint64(TTL.Seconds()), nil },
		DefaultQualifiedResource:  corev1.Resource("events"),
		SingularQualifiedResource: corev1.Resource("event"),

		CreateStrategy: s,
		UpdateStrategy: s,
		DeleteStrategy: s,

		TableConvertor: tableConvertor{},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: getAttrs}); err != nil {
		return nil, fmt.Errorf("building events storage: %w", err)
	}
	return store, nil
}

// AddFieldLabelConversions lets field selectors name the fields kube-apiserver
// lets them name for Events, such as involvedObject.uid, which kubectl
// describe uses.
func AddFieldLabelConversions(scheme *runtime.Scheme) error {
	return scheme.AddFieldLabelConversionFunc(corev1.SchemeGroupVersion.WithKind("Event"), func(label, value string) (string, string, error) {
		if _, ok := selectableFields(&corev1.Event{})[label]; ok {
			return label, value, nil
		}
		return "", "", fmt.Errorf("field label not supported for Events: %s", label)
	})
}

// selectableFields are the fields of an Event a field selector may use.
func selectableFields(e *corev1.Event) fields.Set {
	source := e.Source.Component
	if source == "" {
		source = e.ReportingController
	}
	return generic.AddObjectMetaFieldsSet(fields.Set{
		"involvedObject.kind":            e.InvolvedObject.Kind,
		"involvedObject.namespace":       e.InvolvedObject.Namespace,
		"involvedObject.name":            e.InvolvedObject.Name,
		"involvedObject.uid":             string(e.InvolvedObject.UID),
		"involvedObject.apiVersion":      e.InvolvedObject.APIVersion,
		"involvedObject.resourceVersion": e.InvolvedObject.ResourceVersion,
		"involvedObject.fieldPath":       e.InvolvedObject.FieldPath,
		"reason":                         e.Reason,
		"reportingComponent":             e.ReportingController,
		"source":                         source,
		"type":                           e.Type,
	}, &e.ObjectMeta, true)
}

func getAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	e, ok := obj.(*corev1.Event)
	if !ok {
		return nil, nil, fmt.Errorf("given object is not an Event but %T", obj)
	}
	return labels.Set(e.Labels), selectableFields(e), nil
}

func match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: getAttrs}
}

// strategy stores Events as kube-apiserver does: namespaced, about an object
// of their own namespace, created by an update when missing (the event
// recorder's series updates), and updated unconditionally.
type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

func (strategy) NamespaceScoped() bool                                            { return true }
func (strategy) PrepareForCreate(context.Context, runtime.Object)                 {}
func (strategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}
func (strategy) Canonicalize(runtime.Object)                                      {}
func (strategy) AllowCreateOnUpdate(context.Context) bool                         { return true }
func (strategy) AllowUnconditionalUpdate(context.Context) bool                    { return true }
func (strategy) WarningsOnCreate(context.Context, runtime.Object) []string        { return nil }
func (strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validate(obj.(*corev1.Event))
}

func (strategy) ValidateUpdate(_ context.Context, obj, _ runtime.Object) field.ErrorList {
	return validate(obj.(*corev1.Event))
}

// validate checks what kubectl relies on: an Event is about an object in its
// own namespace, and says why and what.
func validate(e *corev1.Event) field.ErrorList {
	var errs field.ErrorList
	if e.InvolvedObject.Namespace != e.Namespace {
		errs = append(errs, field.Invalid(field.NewPath("involvedObject", "namespace"), e.InvolvedObject.Namespace, "must match metadata.namespace"))
	}
	if e.InvolvedObject.Name == "" {
		errs = append(errs, field.Required(field.NewPath("involvedObject", "name"), ""))
	}
	if e.Type != "" && e.Type != corev1.EventTypeNormal && e.Type != corev1.EventTypeWarning {
		errs = append(errs, field.NotSupported(field.NewPath("type"), e.Type, []string{corev1.EventTypeNormal, corev1.EventTypeWarning}))
	}
	if len(e.Message) > 4096 {
		errs = append(errs, field.TooLong(field.NewPath("message"), "", 4096))
	}
	return errs
}
