// Package terraformpolicy serves terraformpolicies, the cluster-scoped
// TerraformPolicy objects that check what plans do: storage, the strategy
// that validates a policy and compiles every expression when it is written,
// and the table kubectl prints.
package terraformpolicy

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
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
	"github.com/terrarun/terrarun/pkg/planpolicy"
	"github.com/terrarun/terrarun/pkg/registry/table"
)

// REST serves the terraformpolicies resource.
type REST struct {
	*genericregistry.Store
}

var (
	_ rest.ShortNamesProvider   = &REST{}
	_ rest.CategoriesProvider   = &REST{}
	_ rest.SingularNameProvider = &REST{}
)

// ShortNames lets kubectl resolve `tfpol`.
func (r *REST) ShortNames() []string { return []string{"tfpol"} }

// Categories puts policies in `kubectl get terraform`.
func (r *REST) Categories() []string { return []string{"terraform"} }

// NewREST builds the store of terraformpolicies.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*REST, error) {
	s := strategy{ObjectTyper: scheme, NameGenerator: names.SimpleNameGenerator, scheme: scheme}
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &terrarun.TerraformPolicy{} },
		NewListFunc:               func() runtime.Object { return &terrarun.TerraformPolicyList{} },
		PredicateFunc:             match,
		DefaultQualifiedResource:  terrarun.Resource("terraformpolicies"),
		SingularQualifiedResource: terrarun.Resource("terraformpolicy"),

		CreateStrategy: s,
		UpdateStrategy: s,
		DeleteStrategy: s,

		TableConvertor: tableConvertor{},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: getAttrs}); err != nil {
		return nil, fmt.Errorf("building terraformpolicies storage: %w", err)
	}
	return &REST{store}, nil
}

// strategy validates policies, and compiles each of their expressions.
type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
	scheme *runtime.Scheme
}

// NamespaceScoped is false: a policy applies to the runs of every namespace
// its namespaceSelector selects.
func (strategy) NamespaceScoped() bool { return false }

// PrepareForCreate starts the generation at 1.
func (strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	obj.(*terrarun.TerraformPolicy).Generation = 1
}

// PrepareForUpdate raises the generation when the spec changes.
func (strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	p, o := obj.(*terrarun.TerraformPolicy), old.(*terrarun.TerraformPolicy)
	p.Generation = o.Generation
	if !equalSpec(p, o) {
		p.Generation++
	}
}

// Validate validates a new policy and compiles its expressions.
func (s strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	p := obj.(*terrarun.TerraformPolicy)
	return append(validation.ValidateTerraformPolicy(p), s.compile(p)...)
}

// ValidateUpdate validates a changed policy and compiles its expressions.
func (s strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	p := obj.(*terrarun.TerraformPolicy)
	return append(validation.ValidateTerraformPolicyUpdate(p, old.(*terrarun.TerraformPolicy)), s.compile(p)...)
}

// compile compiles p's expressions in the environment of new expressions;
// its errors name the field of each expression that does not compile.
func (s strategy) compile(p *terrarun.TerraformPolicy) field.ErrorList {
	v := &v1alpha1.TerraformPolicy{}
	if err := s.scheme.Convert(p, v, nil); err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("spec"), err)}
	}
	_, errs := planpolicy.Compile(v, planpolicy.NewExpressions)
	return errs
}

func equalSpec(a, b *terrarun.TerraformPolicy) bool {
	return apiequality.Semantic.DeepEqual(a.Spec, b.Spec)
}

// WarningsOnCreate returns no warnings.
func (strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }

// WarningsOnUpdate returns no warnings.
func (strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

// AllowCreateOnUpdate is false: create policies with create.
func (strategy) AllowCreateOnUpdate(context.Context) bool { return false }

// AllowUnconditionalUpdate is true, as for most Kubernetes resources.
func (strategy) AllowUnconditionalUpdate(context.Context) bool { return true }

// Canonicalize does nothing.
func (strategy) Canonicalize(runtime.Object) {}

func getAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	p, ok := obj.(*terrarun.TerraformPolicy)
	if !ok {
		return nil, nil, fmt.Errorf("given object is not a TerraformPolicy but %T", obj)
	}
	return labels.Set(p.Labels), generic.ObjectMetaFieldsSet(&p.ObjectMeta, false), nil
}

func match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: getAttrs}
}

// tableConvertor prints policies for `kubectl get`: NAME, VALIDATIONS (by
// enforcement), APPROVALS, OPERATIONS and AGE.
type tableConvertor struct{}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the policy."},
	{Name: "Validations", Type: "string", Description: "Validations by enforcement: hard-mandatory/soft-mandatory/advisory."},
	{Name: "Approvals", Type: "integer", Description: "Approval rules."},
	{Name: "Operations", Type: "string", Description: "The run operations the policy checks; <all> when it does not select."},
	{Name: "Age", Type: "string", Description: "Time since the policy was created."},
}

// ConvertToTable converts one policy or a list of them into a table.
func (tableConvertor) ConvertToTable(_ context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return table.Convert(obj, tableOptions, columns, func(obj runtime.Object) ([]metav1.TableRow, error) {
		switch o := obj.(type) {
		case *terrarun.TerraformPolicy:
			return []metav1.TableRow{row(o)}, nil
		case *terrarun.TerraformPolicyList:
			rows := make([]metav1.TableRow, 0, len(o.Items))
			for i := range o.Items {
				rows = append(rows, row(&o.Items[i]))
			}
			return rows, nil
		default:
			return nil, fmt.Errorf("cannot print %T as a TerraformPolicy table", obj)
		}
	})
}

func row(p *terrarun.TerraformPolicy) metav1.TableRow {
	counts := map[terrarun.Enforcement]int{}
	for _, v := range p.Spec.Validations {
		e := v.Enforcement
		if e == "" {
			e = terrarun.EnforcementHardMandatory
		}
		counts[e]++
	}
	validations := fmt.Sprintf("%d/%d/%d", counts[terrarun.EnforcementHardMandatory], counts[terrarun.EnforcementSoftMandatory], counts[terrarun.EnforcementAdvisory])
	ops := "<all>"
	if m := p.Spec.MatchConstraints; m != nil && len(m.Operations) > 0 {
		var s []string
		for _, op := range m.Operations {
			s = append(s, string(op))
		}
		ops = strings.Join(s, ",")
	}
	age := "<unknown>"
	if !p.CreationTimestamp.IsZero() {
		age = duration.HumanDuration(metav1.Now().Sub(p.CreationTimestamp.Time))
	}
	return metav1.TableRow{
		Object: runtime.RawExtension{Object: p},
		Cells:  []interface{}{p.Name, validations, int64(len(p.Spec.Approvals)), ops, age},
	}
}
