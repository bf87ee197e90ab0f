package planpolicy

import (
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// The names expressions see.
const (
	varPlan      = "plan"
	varSummary   = "summary"
	varRun       = "run"
	varNamespace = "namespaceObject"
	varWorkspace = "workspace"
	varVariables = "variables"
)

// baseEnv is Kubernetes' CEL environment (its libraries and cost limits) with
// the inputs of a policy, all dynamically typed: the plan JSON has no schema.
var baseEnv = sync.OnceValues(func() (*environment.EnvSet, error) {
	return environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions: []cel.EnvOption{
			cel.Variable(varPlan, cel.DynType),
			cel.Variable(varSummary, cel.DynType),
			cel.Variable(varRun, cel.DynType),
			cel.Variable(varNamespace, cel.DynType),
			cel.Variable(varWorkspace, cel.DynType),
		},
	})
})

// Policy is a TerraformPolicy compiled: its selectors parsed and every
// expression a program.
type Policy struct {
	// Name and ResourceVersion identify what was compiled.
	Name, ResourceVersion string

	namespaces, runs labels.Selector
	operations       sets.Set[v1alpha1.Operation]
	triggers         sets.Set[v1alpha1.Trigger]

	variables   []compiledVariable
	validations []compiledValidation
	approvals   []compiledApproval
}

type compiledVariable struct {
	name    string
	program cel.Program
}

type compiledValidation struct {
	name, expression, message string
	enforcement               v1alpha1.Enforcement
	program, messageProgram   cel.Program
}

type compiledApproval struct {
	name, message string
	required      int32
	groups        []string
	program       cel.Program
}

// Mode says which CEL environment compiles a policy: NewExpressions when it
// is written (only what every server of this version knows), and
// StoredExpressions when it is evaluated (whatever was once accepted).
type Mode = environment.Type

// The modes of Compile.
const (
	NewExpressions    = environment.NewExpressions
	StoredExpressions = environment.StoredExpressions
)

// Compile compiles policy. Its errors name the field of each expression or
// selector that does not compile, under spec.
func Compile(policy *v1alpha1.TerraformPolicy, mode Mode) (*Policy, field.ErrorList) {
	spec := &policy.Spec
	specPath := field.NewPath("spec")
	p := &Policy{Name: policy.Name, ResourceVersion: policy.ResourceVersion, namespaces: labels.Everything(), runs: labels.Everything()}
	var errs field.ErrorList

	if m := spec.MatchConstraints; m != nil {
		mPath := specPath.Child("matchConstraints")
		var err error
		if m.NamespaceSelector != nil {
			if p.namespaces, err = metav1.LabelSelectorAsSelector(m.NamespaceSelector); err != nil {
				errs = append(errs, field.Invalid(mPath.Child("namespaceSelector"), m.NamespaceSelector, err.Error()))
			}
		}
		if m.RunSelector != nil {
			if p.runs, err = metav1.LabelSelectorAsSelector(m.RunSelector); err != nil {
				errs = append(errs, field.Invalid(mPath.Child("runSelector"), m.RunSelector, err.Error()))
			}
		}
		if len(m.Operations) > 0 {
			p.operations = sets.New(m.Operations...)
		}
		if len(m.Triggers) > 0 {
			p.triggers = sets.New(m.Triggers...)
		}
	}

	base, err := baseEnv()
	if err != nil {
		return nil, field.ErrorList{field.InternalError(specPath, err)}
	}
	// variables.<name> type-checks for the variables declared before the
	// expression's own; each is dynamically typed.
	varsType := apiservercel.NewObjectType("terrarun.dev.variables", map[string]*apiservercel.DeclField{})
	set, err := base.Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        []cel.EnvOption{cel.Variable(varVariables, varsType.CelType())},
		DeclTypes:         []*apiservercel.DeclType{varsType},
	})
	if err != nil {
		return nil, field.ErrorList{field.InternalError(specPath, err)}
	}
	env, err := set.Env(mode)
	if err != nil {
		return nil, field.ErrorList{field.InternalError(specPath, err)}
	}
	compile := func(path *field.Path, expr string, want *cel.Type) cel.Program {
		ast, issues := env.Compile(expr)
		if issues != nil && issues.Err() != nil {
			errs = append(errs, field.Invalid(path, expr, "compilation failed: "+issues.Err().Error()))
			return nil
		}
		if want != nil && !ast.OutputType().IsExactType(want) && !ast.OutputType().IsExactType(cel.DynType) {
			errs = append(errs, field.Invalid(path, expr, fmt.Sprintf("must evaluate to %s, not %s", want, ast.OutputType())))
			return nil
		}
		prog, err := env.Program(ast, cel.InterruptCheckFrequency(checkFrequency))
		if err != nil {
			errs = append(errs, field.Invalid(path, expr, "program instantiation failed: "+err.Error()))
			return nil
		}
		return prog
	}

	for i, v := range spec.Variables {
		prog := compile(specPath.Child("variables").Index(i).Child("expression"), v.Expression, nil)
		varsType.Fields[v.Name] = apiservercel.NewDeclField(v.Name, apiservercel.DynType, true, nil, nil)
		p.variables = append(p.variables, compiledVariable{name: v.Name, program: prog})
	}
	for i, v := range spec.Validations {
		path := specPath.Child("validations").Index(i)
		c := compiledValidation{name: v.Name, expression: v.Expression, message: v.Message, enforcement: v.Enforcement}
		if c.name == "" {
			c.name = fmt.Sprintf("validations[%d]", i)
		}
		if c.enforcement == "" {
			c.enforcement = v1alpha1.EnforcementHardMandatory
		}
		c.program = compile(path.Child("expression"), v.Expression, cel.BoolType)
		if v.MessageExpression != "" {
			c.messageProgram = compile(path.Child("messageExpression"), v.MessageExpression, cel.StringType)
		}
		p.validations = append(p.validations, c)
	}
	for i, a := range spec.Approvals {
		c := compiledApproval{name: a.Name, message: a.Message, required: a.RequiredApprovals, groups: a.Groups}
		if c.name == "" {
			c.name = fmt.Sprintf("approvals[%d]", i)
		}
		c.program = compile(specPath.Child("approvals").Index(i).Child("condition"), a.Condition, cel.BoolType)
		p.approvals = append(p.approvals, c)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}
