// Package terraformnotification serves terraformnotifications, the
// namespaced TerraformNotification objects that deliver run and workspace
// events to webhooks, Slack and CloudEvents receivers: storage, the
// strategies that validate them and keep their status the server's, and
// the table kubectl prints.
package terraformnotification

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
	"github.com/terrarun/terrarun/pkg/registry/table"
)

// Storage is the notifications' storage and their status subresource.
type Storage struct {
	Notification *REST
	Status       *StatusREST
}

// REST serves the terraformnotifications resource.
type REST struct {
	*genericregistry.Store
}

var (
	_ rest.ShortNamesProvider   = &REST{}
	_ rest.CategoriesProvider   = &REST{}
	_ rest.SingularNameProvider = &REST{}
)

// ShortNames lets kubectl resolve `tfnotif`.
func (r *REST) ShortNames() []string { return []string{"tfnotif"} }

// Categories puts notifications in `kubectl get terraform`.
func (r *REST) Categories() []string { return []string{"terraform"} }

// NewStorage builds the store of terraformnotifications.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*Storage, error) {
	s := strategy{ObjectTyper: scheme, NameGenerator: names.SimpleNameGenerator}
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &terrarun.TerraformNotification{} },
		NewListFunc:               func() runtime.Object { return &terrarun.TerraformNotificationList{} },
		PredicateFunc:             match,
		DefaultQualifiedResource:  terrarun.Resource("terraformnotifications"),
		SingularQualifiedResource: terrarun.Resource("terraformnotification"),

		CreateStrategy:      s,
		UpdateStrategy:      s,
		DeleteStrategy:      s,
		ResetFieldsStrategy: s,

		TableConvertor: tableConvertor{},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: getAttrs}); err != nil {
		return nil, fmt.Errorf("building terraformnotifications storage: %w", err)
	}
	statusStore := *store
	statusStore.UpdateStrategy = statusStrategy{s}
	statusStore.ResetFieldsStrategy = statusStrategy{s}
	return &Storage{Notification: &REST{store}, Status: &StatusREST{store: &statusStore}}, nil
}

// strategy validates notifications and keeps their status.
type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// NamespaceScoped is true: a notification delivers its namespace's events.
func (strategy) NamespaceScoped() bool { return true }

// GetResetFields says that writes of the main resource never change status.
func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"terrarun.dev/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

// PrepareForCreate clears status and starts the generation at 1.
func (strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	n := obj.(*terrarun.TerraformNotification)
	n.Status = terrarun.TerraformNotificationStatus{}
	n.Generation = 1
}

// PrepareForUpdate keeps status, and raises the generation when the spec
// changes.
func (strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	n, o := obj.(*terrarun.TerraformNotification), old.(*terrarun.TerraformNotification)
	n.Status = o.Status
	n.Generation = o.Generation
	if !apiequality.Semantic.DeepEqual(n.Spec, o.Spec) {
		n.Generation++
	}
}

// Validate validates a new notification.
func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateTerraformNotification(obj.(*terrarun.TerraformNotification))
}

// ValidateUpdate validates a changed notification.
func (strategy) ValidateUpdate(_ context.Context, obj, _ runtime.Object) field.ErrorList {
	return validation.ValidateTerraformNotification(obj.(*terrarun.TerraformNotification))
}

// WarningsOnCreate warns of a receiver reached without TLS.
func (strategy) WarningsOnCreate(_ context.Context, obj runtime.Object) []string {
	return warnings(obj.(*terrarun.TerraformNotification))
}

// WarningsOnUpdate warns of a receiver reached without TLS.
func (strategy) WarningsOnUpdate(_ context.Context, obj, _ runtime.Object) []string {
	return warnings(obj.(*terrarun.TerraformNotification))
}

// warnings says when deliveries go over plain http: anyone on the path
// reads them, and a signature proves only that the sender knew the key.
func warnings(n *terrarun.TerraformNotification) []string {
	var out []string
	for path, d := range map[string]*terrarun.WebhookDestination{"spec.webhook.url": n.Spec.Webhook, "spec.cloudEvents.url": n.Spec.CloudEvents} {
		if d != nil && strings.HasPrefix(d.URL, "http://") {
			out = append(out, path+" is http: anyone on the network path reads each delivery; prefer https")
		}
	}
	return out
}

// AllowCreateOnUpdate is false: create notifications with create.
func (strategy) AllowCreateOnUpdate(context.Context) bool { return false }

// AllowUnconditionalUpdate is true, as for most Kubernetes resources.
func (strategy) AllowUnconditionalUpdate(context.Context) bool { return true }

// Canonicalize does nothing.
func (strategy) Canonicalize(runtime.Object) {}

// statusStrategy implements the controller's writes of status, through the
// status subresource.
type statusStrategy struct {
	strategy
}

// GetResetFields says that /status never changes spec.
func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"terrarun.dev/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}

// PrepareForUpdate keeps spec.
func (statusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	obj.(*terrarun.TerraformNotification).Spec = old.(*terrarun.TerraformNotification).Spec
}

// ValidateUpdate accepts any status the server writes.
func (statusStrategy) ValidateUpdate(context.Context, runtime.Object, runtime.Object) field.ErrorList {
	return nil
}

// WarningsOnUpdate returns no warnings.
func (statusStrategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

// StatusREST serves terraformnotifications/status.
type StatusREST struct {
	store *genericregistry.Store
}

var _ rest.Patcher = &StatusREST{}

// New returns an empty notification.
func (r *StatusREST) New() runtime.Object { return &terrarun.TerraformNotification{} }

// Destroy does nothing: the main resource owns the store.
func (r *StatusREST) Destroy() {}

// Get returns the notification.
func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update writes the status of a notification and nothing else.
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, _ bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// GetResetFields says that /status never changes spec.
func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable prints notifications as the main resource does.
func (r *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

func getAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	n, ok := obj.(*terrarun.TerraformNotification)
	if !ok {
		return nil, nil, fmt.Errorf("given object is not a TerraformNotification but %T", obj)
	}
	return labels.Set(n.Labels), generic.ObjectMetaFieldsSet(&n.ObjectMeta, true), nil
}

func match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: getAttrs}
}

// tableConvertor prints notifications for `kubectl get`: NAME,
// DESTINATION, TRIGGERS, READY, LAST DELIVERY and AGE.
type tableConvertor struct{}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the notification."},
	{Name: "Destination", Type: "string", Description: "Where events go: webhook or cloudEvents with the receiver's host, or slack."},
	{Name: "Triggers", Type: "string", Description: "The events delivered."},
	{Name: "Ready", Type: "string", Description: "Whether the last delivery reached its receiver."},
	{Name: "Last Delivery", Type: "string", Description: "The latest delivery's trigger and state."},
	{Name: "Age", Type: "string", Description: "Time since the notification was created."},
}

// ConvertToTable converts one notification or a list of them into a table.
func (tableConvertor) ConvertToTable(_ context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return table.Convert(obj, tableOptions, columns, func(obj runtime.Object) ([]metav1.TableRow, error) {
		switch o := obj.(type) {
		case *terrarun.TerraformNotification:
			return []metav1.TableRow{row(o)}, nil
		case *terrarun.TerraformNotificationList:
			rows := make([]metav1.TableRow, 0, len(o.Items))
			for i := range o.Items {
				rows = append(rows, row(&o.Items[i]))
			}
			return rows, nil
		default:
			return nil, fmt.Errorf("cannot print %T as a TerraformNotification table", obj)
		}
	})
}

func row(n *terrarun.TerraformNotification) metav1.TableRow {
	triggers := make([]string, 0, len(n.Spec.Triggers))
	for _, t := range n.Spec.Triggers {
		triggers = append(triggers, string(t))
	}
	ready := "<unknown>"
	if c := meta.FindStatusCondition(n.Status.Conditions, terrarun.ConditionNotificationReady); c != nil {
		ready = string(c.Status)
	}
	last := "<none>"
	var latest *terrarun.NotificationDelivery
	for i := range n.Status.Deliveries {
		d := &n.Status.Deliveries[i]
		if d.LastAttemptTime != nil && (latest == nil || !d.LastAttemptTime.Before(latest.LastAttemptTime)) {
			latest = d
		}
	}
	if latest != nil {
		last = fmt.Sprintf("%s %s (%s ago)", latest.Trigger, latest.State, duration.HumanDuration(metav1.Now().Sub(latest.LastAttemptTime.Time)))
	}
	age := "<unknown>"
	if !n.CreationTimestamp.IsZero() {
		age = duration.HumanDuration(metav1.Now().Sub(n.CreationTimestamp.Time))
	}
	return metav1.TableRow{
		Object: runtime.RawExtension{Object: n},
		Cells:  []interface{}{n.Name, destination(n), strings.Join(triggers, ","), ready, last, age},
	}
}

// destination names where n delivers, without a Slack URL (a credential)
// or a path.
func destination(n *terrarun.TerraformNotification) string {
	host := func(kind, raw string) string {
		if u, err := url.Parse(raw); err == nil && u.Host != "" {
			return kind + " " + u.Host
		}
		return kind
	}
	switch {
	case n.Spec.Webhook != nil:
		return host("webhook", n.Spec.Webhook.URL)
	case n.Spec.CloudEvents != nil:
		return host("cloudEvents", n.Spec.CloudEvents.URL)
	case n.Spec.Slack != nil:
		return "slack"
	}
	return "<none>"
}
