package planpolicy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	"k8s.io/apimachinery/pkg/labels"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/lazy"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// checkFrequency is how many comprehension iterations pass between checks of
// the cost limit and of the context.
const checkFrequency = celconfig.CheckFrequency

// policyBudget is the cost all expressions of one policy may spend on one
// plan, as Kubernetes allows a ValidatingAdmissionPolicy binding; each
// expression is also held to its own limit (PerCallLimit).
const policyBudget = celconfig.RuntimeCELCostBudget

// Input is what a policy's expressions see of one run.
type Input struct {
	// Plan is the redacted plan JSON, decoded; nil when it could not be
	// read, and PlanError says why.
	Plan      map[string]any
	PlanError error
	// Summary is the plan's resources by action (Summarize).
	Summary map[string]any
	// Run is the run's metadata and spec.
	Run map[string]any
	// Namespace is the run's namespace object, and NamespaceLabels its labels.
	Namespace       map[string]any
	NamespaceLabels labels.Set
	// Workspace is the workspace that made the run, or nil.
	Workspace map[string]any

	// RunLabels, Operation and Trigger are what matchConstraints select on.
	RunLabels labels.Set
	Operation v1alpha1.Operation
	Trigger   v1alpha1.Trigger
}

// Matches says whether the policy checks the run of in.
func (p *Policy) Matches(in *Input) bool {
	return p.namespaces.Matches(in.NamespaceLabels) && p.runs.Matches(in.RunLabels) &&
		(p.operations == nil || p.operations.Has(in.Operation)) &&
		(p.triggers == nil || p.triggers.Has(in.Trigger))
}

// Evaluation is what one policy said of one plan.
type Evaluation struct {
	Results   []v1alpha1.PolicyResult
	Approvals []v1alpha1.PolicyApprovalRequirement
	// Cost is the CEL cost spent.
	Cost int64
}

// Evaluate runs the policy's validations and approval rules against in. An
// expression that cannot be evaluated (an error, its own cost limit, the
// policy's budget, a plan that could not be read) fails its validation
// with outcome Error and applies its approval rule: mandatory levels fail
// closed.
func (p *Policy) Evaluate(ctx context.Context, in *Input) Evaluation {
	var out Evaluation
	remaining := int64(policyBudget)
	vars := lazy.NewMapValue(types.NewObjectType("terrarun.dev.variables"))
	act := &activation{vars: map[string]any{
		varPlan: in.Plan, varSummary: in.Summary, varRun: in.Run,
		varNamespace: in.Namespace, varWorkspace: in.Workspace, varVariables: vars,
	}}
	eval := func(prog cel.Program) (ref.Val, error) {
		if in.PlanError != nil {
			return nil, fmt.Errorf("the plan could not be read: %w", in.PlanError)
		}
		if remaining <= 0 {
			return nil, fmt.Errorf("the policy's cost budget of %d ran out before this expression", policyBudget)
		}
		v, details, err := prog.ContextEval(ctx, act)
		if details != nil && details.ActualCost() != nil {
			c := *details.ActualCost()
			if c > math.MaxInt64 {
				c = math.MaxInt64
			}
			cost := int64(c)
			out.Cost += cost
			remaining -= cost
		}
		if err == nil && types.IsError(v) {
			err = v.Value().(error)
		}
		if err != nil {
			return nil, explain(err)
		}
		if remaining < 0 {
			return nil, fmt.Errorf("the policy's cost budget of %d ran out", policyBudget)
		}
		return v, nil
	}
	for _, v := range p.variables {
		prog := v.program
		name := v.name
		vars.Append(name, func(*lazy.MapValue) ref.Val {
			val, err := eval(prog)
			if err != nil {
				return types.NewErr("variables.%s: %v", name, err)
			}
			return val
		})
	}

	for _, v := range p.validations {
		r := v1alpha1.PolicyResult{Policy: p.Name, Validation: v.name, Enforcement: v.enforcement, Outcome: v1alpha1.PolicyPassed}
		val, err := eval(v.program)
		switch {
		case err != nil:
			r.Outcome = v1alpha1.PolicyError
			r.Message = fmt.Sprintf("%s: %v", failsClosed(v.enforcement), err)
		case val != types.True:
			r.Outcome = v1alpha1.PolicyFailed
			r.Message = v.failure(eval)
		}
		out.Results = append(out.Results, r)
	}
	for _, a := range p.approvals {
		val, err := eval(a.program)
		if err == nil && val != types.True {
			continue
		}
		req := v1alpha1.PolicyApprovalRequirement{Policy: p.Name, Rule: a.name, RequiredApprovals: a.required, Groups: a.groups, Message: a.message}
		if err != nil {
			req.Message = fmt.Sprintf("applied because its condition could not be evaluated: %v", err)
		}
		out.Approvals = append(out.Approvals, req)
	}
	return out
}

// failure is the message of a failed validation: its messageExpression's
// value, else its message, else one that names the expression.
func (v *compiledValidation) failure(eval func(cel.Program) (ref.Val, error)) string {
	if v.messageProgram != nil {
		if val, err := eval(v.messageProgram); err == nil {
			if s, ok := val.Value().(string); ok && strings.TrimSpace(s) != "" {
				return s
			}
		}
	}
	if v.message != "" {
		return v.message
	}
	return "failed expression: " + v.expression
}

// failsClosed says how an expression that could not be evaluated counts.
func failsClosed(e v1alpha1.Enforcement) string {
	if e == v1alpha1.EnforcementAdvisory {
		return "could not be evaluated (advisory: recorded only)"
	}
	return "could not be evaluated, so it fails closed"
}

// explain makes CEL's evaluation errors say what happened.
func explain(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("evaluation stopped: %w", err)
	}
	if strings.Contains(err.Error(), "cost limit exceeded") {
		return fmt.Errorf("the expression exceeded its cost limit of %d (%v); make it do less, for example filter before nesting comprehensions", celconfig.PerCallLimit, err)
	}
	return err
}

// activation resolves the names of a policy's expressions.
type activation struct{ vars map[string]any }

func (a *activation) ResolveName(name string) (any, bool) {
	v, ok := a.vars[name]
	if ok && v == nil {
		return types.NullValue, true
	}
	if m, isMap := v.(map[string]any); isMap && m == nil {
		return types.NullValue, true
	}
	return v, ok
}

func (a *activation) Parent() interpreter.Activation { return nil }
