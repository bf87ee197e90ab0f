package validation

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// Bounds of a TerraformPolicy, which every plan of the matching runs pays
// for: as ValidatingAdmissionPolicy bounds its expressions.
const (
	maxPolicyExpressions    = 64
	maxExpressionLength     = 5 * 1024
	maxPolicyMessageLength  = 1024
	maxPolicyApprovals      = 10
	maxJustificationLength  = 1024
	maxPolicyApprovalGroups = 16
)

// celIdentifier is what a variable's name must be to be read as
// variables.<name>.
var celIdentifier = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]{0,62}$`)

// ValidateTerraformPolicy validates a TerraformPolicy on create and update:
// its metadata (cluster-scoped) and the structure of its spec. Whether its
// expressions compile is checked by the registry (package planpolicy), with
// the same field paths.
func ValidateTerraformPolicy(p *terrarun.TerraformPolicy) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&p.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	spec, specPath := &p.Spec, field.NewPath("spec")
	if len(spec.Validations) == 0 && len(spec.Approvals) == 0 {
		allErrs = append(allErrs, field.Required(specPath.Child("validations"), "a policy needs at least one validation or approval rule"))
	}
	if n := len(spec.Variables) + len(spec.Validations) + len(spec.Approvals); n > maxPolicyExpressions {
		allErrs = append(allErrs, field.Invalid(specPath, n, fmt.Sprintf("has %d variables, validations and approvals together; at most %d: split it into several policies", n, maxPolicyExpressions)))
	}
	if m := spec.MatchConstraints; m != nil {
		allErrs = append(allErrs, validateMatchConstraints(m, specPath.Child("matchConstraints"))...)
	}
	seen := sets.New[string]()
	for i, v := range spec.Variables {
		path := specPath.Child("variables").Index(i)
		switch {
		case !celIdentifier.MatchString(v.Name):
			allErrs = append(allErrs, field.Invalid(path.Child("name"), v.Name, "must be a CEL identifier: a letter or _, then letters, digits or _, at most 63"))
		case seen.Has(v.Name):
			allErrs = append(allErrs, field.Duplicate(path.Child("name"), v.Name))
		}
		seen.Insert(v.Name)
		allErrs = append(allErrs, validateExpression(v.Expression, path.Child("expression"))...)
	}
	names := sets.New[string]()
	for i, v := range spec.Validations {
		path := specPath.Child("validations").Index(i)
		allErrs = append(allErrs, validatePolicyItemName(v.Name, names, path.Child("name"))...)
		allErrs = append(allErrs, validateExpression(v.Expression, path.Child("expression"))...)
		if v.MessageExpression != "" {
			allErrs = append(allErrs, validateExpression(v.MessageExpression, path.Child("messageExpression"))...)
		}
		allErrs = append(allErrs, validatePolicyMessage(v.Message, path.Child("message"))...)
		switch v.Enforcement {
		case "", terrarun.EnforcementAdvisory, terrarun.EnforcementSoftMandatory, terrarun.EnforcementHardMandatory:
		default:
			allErrs = append(allErrs, field.NotSupported(path.Child("enforcement"), v.Enforcement,
				[]terrarun.Enforcement{terrarun.EnforcementAdvisory, terrarun.EnforcementSoftMandatory, terrarun.EnforcementHardMandatory}))
		}
	}
	rules := sets.New[string]()
	if len(spec.Approvals) > maxPolicyApprovals {
		allErrs = append(allErrs, field.TooMany(specPath.Child("approvals"), len(spec.Approvals), maxPolicyApprovals))
	}
	for i, a := range spec.Approvals {
		path := specPath.Child("approvals").Index(i)
		allErrs = append(allErrs, validatePolicyItemName(a.Name, rules, path.Child("name"))...)
		allErrs = append(allErrs, validateExpression(a.Condition, path.Child("condition"))...)
		allErrs = append(allErrs, validatePolicyMessage(a.Message, path.Child("message"))...)
		if a.RequiredApprovals < 1 || a.RequiredApprovals > MaxRequiredApprovals {
			allErrs = append(allErrs, field.Invalid(path.Child("requiredApprovals"), a.RequiredApprovals, fmt.Sprintf("must be between 1 and %d", MaxRequiredApprovals)))
		}
		if len(a.Groups) > maxPolicyApprovalGroups {
			allErrs = append(allErrs, field.TooMany(path.Child("groups"), len(a.Groups), maxPolicyApprovalGroups))
		}
		groups := sets.New[string]()
		for j, g := range a.Groups {
			switch {
			case strings.TrimSpace(g) == "" || len(g) > 253:
				allErrs = append(allErrs, field.Invalid(path.Child("groups").Index(j), g, "must be a group name of 1 to 253 characters"))
			case groups.Has(g):
				allErrs = append(allErrs, field.Duplicate(path.Child("groups").Index(j), g))
			}
			groups.Insert(g)
		}
	}
	return allErrs
}

// ValidateTerraformPolicyUpdate validates an update of a TerraformPolicy.
func ValidateTerraformPolicyUpdate(p, old *terrarun.TerraformPolicy) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&p.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, ValidateTerraformPolicy(p)...)
}

func validateMatchConstraints(m *terrarun.PolicyMatchConstraints, path *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	opts := metav1validation.LabelSelectorValidationOptions{}
	if m.NamespaceSelector != nil {
		allErrs = append(allErrs, metav1validation.ValidateLabelSelector(m.NamespaceSelector, opts, path.Child("namespaceSelector"))...)
	}
	if m.RunSelector != nil {
		allErrs = append(allErrs, metav1validation.ValidateLabelSelector(m.RunSelector, opts, path.Child("runSelector"))...)
	}
	allErrs = append(allErrs, validateSet(m.Operations, []terrarun.Operation{terrarun.OperationApply, terrarun.OperationDestroy, terrarun.OperationPlan},
		path.Child("operations"))...)
	allErrs = append(allErrs, validateSet(m.Triggers, []terrarun.Trigger{terrarun.TriggerDirect, terrarun.TriggerSpecChange, terrarun.TriggerNewRevision, terrarun.TriggerUpstreamChanged,
		terrarun.TriggerRerun, terrarun.TriggerDriftCheck, terrarun.TriggerDriftRepair, terrarun.TriggerDestroy}, path.Child("triggers"))...)
	return allErrs
}

// validateSet refuses values that are not among supported, or repeat.
func validateSet[T ~string](values, supported []T, path *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	seen := sets.New[T]()
	for i, v := range values {
		switch {
		case !slices.Contains(supported, v):
			allErrs = append(allErrs, field.NotSupported(path.Index(i), v, supported))
		case seen.Has(v):
			allErrs = append(allErrs, field.Duplicate(path.Index(i), v))
		}
		seen.Insert(v)
	}
	return allErrs
}

func validateExpression(expr string, path *field.Path) field.ErrorList {
	switch {
	case strings.TrimSpace(expr) == "":
		return field.ErrorList{field.Required(path, "a CEL expression")}
	case len(expr) > maxExpressionLength:
		return field.ErrorList{field.TooLong(path, "", maxExpressionLength)}
	}
	return nil
}

func validatePolicyMessage(msg string, path *field.Path) field.ErrorList {
	if len(msg) > maxPolicyMessageLength {
		return field.ErrorList{field.TooLong(path, "", maxPolicyMessageLength)}
	}
	if strings.ContainsAny(msg, "\n\r") {
		return field.ErrorList{field.Invalid(path, msg, "must be one line")}
	}
	return nil
}

// validatePolicyItemName validates the optional name of a validation or an
// approval rule: unique in its list, and usable in an override's record.
func validatePolicyItemName(name string, seen sets.Set[string], path *field.Path) field.ErrorList {
	if name == "" {
		return nil
	}
	var allErrs field.ErrorList
	for _, msg := range apimachineryvalidation.NameIsDNSLabel(name, false) {
		allErrs = append(allErrs, field.Invalid(path, name, msg))
	}
	if seen.Has(name) {
		allErrs = append(allErrs, field.Duplicate(path, name))
	}
	seen.Insert(name)
	return allErrs
}

// ValidateTerraformRunOverride validates the body of a POST to the override
// subresource: the digest of the plan and a justification.
func ValidateTerraformRunOverride(o *terrarun.TerraformRunOverride) field.ErrorList {
	allErrs := validatePlanDigest(o.PlanDigest, true, field.NewPath("planDigest"))
	switch {
	case strings.TrimSpace(o.Justification) == "":
		allErrs = append(allErrs, field.Required(field.NewPath("justification"), "say why the policy failures may be overridden; it is recorded in status.policy.overrides"))
	case len(o.Justification) > maxJustificationLength:
		allErrs = append(allErrs, field.TooLong(field.NewPath("justification"), "", maxJustificationLength))
	}
	return allErrs
}
