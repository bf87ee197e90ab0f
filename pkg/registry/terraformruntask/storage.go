// Package terraformruntask serves terraformruntasks, the namespaced
// TerraformRunTask objects naming the external services that check runs at
// given stages: storage, the strategy that validates them, and the table
// kubectl prints.
package terraformruntask

import (
	"context"
	"fmt"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
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

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
	"github.com/terrarun/terrarun/pkg/registry/table"
)

// REST serves the terraformruntasks resource.
type REST struct {
	*genericregistry.Store
}

var (
	_ rest.ShortNamesProvider   = &REST{}
	_ rest.CategoriesProvider   = &REST{}
	_ rest.SingularNameProvider = &REST{}
)

// ShortNames lets kubectl resolve `tfrt`.
func (r *REST) ShortNames() []string { return []string{"tfrt"} }

// Categories puts run tasks in `kubectl get terraform`.
func (r *REST) Categories() []string { return []string{"terraform"} }

// NewREST builds the store of terraformruntasks.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*REST, error) {
	s := strategy{ObjectTyper: scheme, NameGenerator: names.SimpleNameGenerator}
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &terrarun.TerraformRunTask{} },
		NewListFunc:               func() runtime.Object { return &terrarun.TerraformRunTaskList{} },
		PredicateFunc:             match,
		DefaultQualifiedResource:  terrarun.Resource("terraformruntasks"),
		SingularQualifiedResource: terrarun.Resource("terraformruntask"),

		CreateStrategy: s,
		UpdateStrategy: s,
		DeleteStrategy: s,

		TableConvertor: tableConvertor{},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: getAttrs}); err != nil {
		return nil, fmt.Errorf("building terraformruntasks storage: %w", err)
	}
	return &REST{store}, nil
}

// strategy validates run tasks.
type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// NamespaceScoped is true: a task checks the runs of its namespace.
func (strategy) NamespaceScoped() bool { return true }

// PrepareForCreate starts the generation at 1.
func (strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	obj.(*terrarun.TerraformRunTask).Generation = 1
}

// PrepareForUpdate raises the generation when the spec changes.
func (strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	t, o := obj.(*terrarun.TerraformRunTask), old.(*terrarun.TerraformRunTask)
	t.Generation = o.Generation
	if !apiequality.Semantic.DeepEqual(t.Spec, o.Spec) {
		t.Generation++
	}
}

// Validate validates a new run task.
func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateTerraformRunTask(obj.(*terrarun.TerraformRunTask))
}

// ValidateUpdate validates a changed run task.
func (strategy) ValidateUpdate(_ context.Context, obj, _ runtime.Object) field.ErrorList {
	return validation.ValidateTerraformRunTask(obj.(*terrarun.TerraformRunTask))
}

// WarningsOnCreate returns no warnings.
func (strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }

// WarningsOnUpdate returns no warnings.
func (strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

// AllowCreateOnUpdate is false: create run tasks with create.
func (strategy) AllowCreateOnUpdate(context.Context) bool { return false }

// AllowUnconditionalUpdate is true, as for most Kubernetes resources.
func (strategy) AllowUnconditionalUpdate(context.Context) bool { return true }

// Canonicalize does nothing.
func (strategy) Canonicalize(runtime.Object) {}

func getAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	t, ok := obj.(*terrarun.TerraformRunTask)
	if !ok {
		return nil, nil, fmt.Errorf("given object is not a TerraformRunTask but %T", obj)
	}
	return labels.Set(t.Labels), generic.ObjectMetaFieldsSet(&t.ObjectMeta, true), nil
}

func match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: getAttrs}
}

// tableConvertor prints run tasks for `kubectl get`: NAME, URL, STAGES,
// ENFORCEMENT, TIMEOUT and AGE.
type tableConvertor struct{}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the run task."},
	{Name: "URL", Type: "string", Description: "Where the task is called."},
	{Name: "Stages", Type: "string", Description: "The stages the task runs at."},
	{Name: "Enforcement", Type: "string", Description: "Mandatory (a failure stops the run) or Advisory."},
	{Name: "Timeout", Type: "string", Description: "How long the task has to answer."},
	{Name: "Age", Type: "string", Description: "Time since the run task was created."},
}

// ConvertToTable converts one run task or a list of them into a table.
func (tableConvertor) ConvertToTable(_ context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return table.Convert(obj, tableOptions, columns, func(obj runtime.Object) ([]metav1.TableRow, error) {
		switch o := obj.(type) {
		case *terrarun.TerraformRunTask:
			return []metav1.TableRow{row(o)}, nil
		case *terrarun.TerraformRunTaskList:
			rows := make([]metav1.TableRow, 0, len(o.Items))
			for i := range o.Items {
				rows = append(rows, row(&o.Items[i]))
			}
			return rows, nil
		default:
			return nil, fmt.Errorf("cannot print %T as a TerraformRunTask table", obj)
		}
	})
}

func row(t *terrarun.TerraformRunTask) metav1.TableRow {
	stages := make([]string, 0, len(t.Spec.Stages))
	for _, s := range t.Spec.Stages {
		stages = append(stages, string(s))
	}
	timeout := "<default>"
	if t.Spec.Timeout != nil {
		timeout = t.Spec.Timeout.Duration.String()
	}
	age := "<unknown>"
	if !t.CreationTimestamp.IsZero() {
		age = duration.HumanDuration(metav1.Now().Sub(t.CreationTimestamp.Time))
	}
	return metav1.TableRow{
		Object: runtime.RawExtension{Object: t},
		Cells:  []interface{}{t.Name, t.Spec.URL, strings.Join(stages, ","), string(t.Spec.Enforcement), timeout, age},
	}
}
