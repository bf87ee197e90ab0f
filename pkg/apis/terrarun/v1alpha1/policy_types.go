package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformPolicy checks what a plan does, as a ValidatingAdmissionPolicy
// checks what a request does: CEL expressions over the run's redacted plan,
// evaluated by the server when the plan is recorded, before anyone can
// approve it. Each validation has an enforcement level; approval rules raise
// what a run needs. The results are recorded in the run's status.policy, with
// the resourceVersion of each policy checked: editing a policy later does
// not change a recorded plan's results.
type TerraformPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// spec is what the policy matches and checks.
	Spec TerraformPolicySpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`
}

// TerraformPolicySpec is what a TerraformPolicy matches and checks.
type TerraformPolicySpec struct {
	// matchConstraints selects the runs the policy checks; every run when
	// unset.
	// +optional
	MatchConstraints *PolicyMatchConstraints `json:"matchConstraints,omitempty" protobuf:"bytes,1,opt,name=matchConstraints"`
	// variables are named CEL expressions, available to later variables,
	// validations and approval rules as variables.<name>. Each is evaluated
	// at most once per run, when first used.
	// +optional
	// +listType=map
	// +listMapKey=name
	Variables []PolicyVariable `json:"variables,omitempty" protobuf:"bytes,2,rep,name=variables"`
	// validations are the checks of the plan; each fails when its
	// expression is false.
	// +optional
	// +listType=atomic
	Validations []PolicyValidation `json:"validations,omitempty" protobuf:"bytes,3,rep,name=validations"`
	// approvals raise what a run needs to be approved when their condition
	// holds.
	// +optional
	// +listType=atomic
	Approvals []PolicyApprovalRule `json:"approvals,omitempty" protobuf:"bytes,4,rep,name=approvals"`
}

// PolicyMatchConstraints selects the runs a policy checks. A run must match
// every constraint that is set.
type PolicyMatchConstraints struct {
	// namespaceSelector selects runs by the labels of their namespace. In
	// standalone mode namespaces have no labels.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty" protobuf:"bytes,1,opt,name=namespaceSelector"`
	// runSelector selects runs by their own labels.
	// +optional
	RunSelector *metav1.LabelSelector `json:"runSelector,omitempty" protobuf:"bytes,2,opt,name=runSelector"`
	// operations are the run operations checked (Apply, Destroy, Plan);
	// all when empty.
	// +optional
	// +listType=set
	Operations []Operation `json:"operations,omitempty" protobuf:"bytes,3,rep,name=operations,casttype=Operation"`
	// triggers are why the runs checked were created: Direct (a run created
	// by a user, not by a workspace) or a workspace's trigger (SpecChange,
	// NewRevision, Rerun, DriftCheck, DriftRepair, Destroy); all when empty.
	// The server sets a run's trigger; no client can.
	// +optional
	// +listType=set
	Triggers []Trigger `json:"triggers,omitempty" protobuf:"bytes,4,rep,name=triggers,casttype=Trigger"`
}

// TriggerDirect is the trigger of a run that a user created, not a
// workspace, for policies' matchConstraints.triggers.
const TriggerDirect Trigger = "Direct"

// PolicyVariable is a named CEL expression.
type PolicyVariable struct {
	// name is how expressions refer to it: variables.<name>. A CEL
	// identifier.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// expression is the CEL expression whose value the variable is.
	Expression string `json:"expression" protobuf:"bytes,2,opt,name=expression"`
}

// Enforcement says what a failed validation does to a run.
// +enum
type Enforcement string

const (
	// EnforcementAdvisory records the failure; the run goes on.
	EnforcementAdvisory Enforcement = "Advisory"
	// EnforcementSoftMandatory holds the run until a user allowed to
	// override (create on terraformruns/override) overrides it.
	EnforcementSoftMandatory Enforcement = "SoftMandatory"
	// EnforcementHardMandatory ends the run Failed, reason PolicyDenied.
	EnforcementHardMandatory Enforcement = "HardMandatory"
)

// PolicyValidation is one check of a plan.
type PolicyValidation struct {
	// name names the validation in results and overrides; validations[i]
	// when empty.
	// +optional
	Name string `json:"name,omitempty" protobuf:"bytes,1,opt,name=name"`
	// expression is a CEL expression that is true when the plan passes.
	// It sees plan (the redacted plan JSON, as the plan subresource serves
	// it with format=json), summary (the resources to add, change, replace
	// and delete: lists of {address, type, mode, providerName}), run
	// (metadata and spec), namespaceObject, workspace (null for a run no
	// workspace made) and variables.
	Expression string `json:"expression" protobuf:"bytes,2,opt,name=expression"`
	// message is the failure's message; a default names the expression.
	// +optional
	Message string `json:"message,omitempty" protobuf:"bytes,3,opt,name=message"`
	// messageExpression is a CEL expression whose string value is the
	// failure's message; message is used when it fails.
	// +optional
	MessageExpression string `json:"messageExpression,omitempty" protobuf:"bytes,4,opt,name=messageExpression"`
	// enforcement is what a failure does: Advisory, SoftMandatory or
	// HardMandatory (the default). An expression that cannot be evaluated
	// (an error, or its cost limit) counts as failed.
	// +optional
	Enforcement Enforcement `json:"enforcement,omitempty" protobuf:"bytes,5,opt,name=enforcement,casttype=Enforcement"`
}

// PolicyApprovalRule raises what a run needs to be approved when its
// condition holds: requiredApprovals distinct approvers, from one of groups
// when groups is set. It adds to spec.approval.requiredApprovals; a run in
// approval mode Auto waits for these approvals like a Manual one.
type PolicyApprovalRule struct {
	// name names the rule in the run's status; approvals[i] when empty.
	// +optional
	Name string `json:"name,omitempty" protobuf:"bytes,1,opt,name=name"`
	// condition is a CEL expression that is true when the rule applies. It
	// sees what a validation's expression sees. One that cannot be
	// evaluated applies the rule.
	Condition string `json:"condition" protobuf:"bytes,2,opt,name=condition"`
	// requiredApprovals is how many distinct users must approve; at least 1.
	RequiredApprovals int32 `json:"requiredApprovals" protobuf:"varint,3,opt,name=requiredApprovals"`
	// groups, when set, are the groups whose members' approvals count for
	// the rule.
	// +optional
	// +listType=set
	Groups []string `json:"groups,omitempty" protobuf:"bytes,4,rep,name=groups"`
	// message says why the rule applies, in the run's status.
	// +optional
	Message string `json:"message,omitempty" protobuf:"bytes,5,opt,name=message"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformPolicyList is a list of TerraformPolicies.
type TerraformPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// items are the policies.
	Items []TerraformPolicy `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// PolicyStatus is what the policies said of a run's plan, recorded by the
// server with the plan.
type PolicyStatus struct {
	// planDigest is the digest of the plan checked.
	PlanDigest string `json:"planDigest" protobuf:"bytes,1,opt,name=planDigest"`
	// checkedAt is when it was checked.
	// +optional
	CheckedAt *metav1.Time `json:"checkedAt,omitempty" protobuf:"bytes,2,opt,name=checkedAt"`
	// policies are the policies that matched the run, at the
	// resourceVersion checked.
	// +optional
	// +listType=atomic
	Policies []CheckedPolicy `json:"policies,omitempty" protobuf:"bytes,3,rep,name=policies"`
	// results are the results of each validation of those policies.
	// +optional
	// +listType=atomic
	Results []PolicyResult `json:"results,omitempty" protobuf:"bytes,4,rep,name=results"`
	// approvals are the approval rules that apply to the plan.
	// +optional
	// +listType=atomic
	Approvals []PolicyApprovalRequirement `json:"approvals,omitempty" protobuf:"bytes,5,rep,name=approvals"`
	// overrides are the overrides of soft-mandatory failures, recorded by
	// the override subresource.
	// +optional
	// +listType=atomic
	Overrides []PolicyOverride `json:"overrides,omitempty" protobuf:"bytes,6,rep,name=overrides"`
}

// CheckedPolicy is a policy as it was when a plan was checked.
type CheckedPolicy struct {
	// name is the policy's name.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// resourceVersion is the policy's resourceVersion when it was checked.
	ResourceVersion string `json:"resourceVersion" protobuf:"bytes,2,opt,name=resourceVersion"`
}

// PolicyOutcome is the result of one validation.
// +enum
type PolicyOutcome string

const (
	// PolicyPassed: the expression was true.
	PolicyPassed PolicyOutcome = "Passed"
	// PolicyFailed: the expression was false.
	PolicyFailed PolicyOutcome = "Failed"
	// PolicyError: the expression could not be evaluated (an error, or its
	// cost limit); it counts as failed.
	PolicyError PolicyOutcome = "Error"
)

// PolicyResult is the result of one validation of one policy.
type PolicyResult struct {
	// policy is the policy's name.
	Policy string `json:"policy" protobuf:"bytes,1,opt,name=policy"`
	// validation is the validation's name, or validations[i].
	Validation string `json:"validation" protobuf:"bytes,2,opt,name=validation"`
	// enforcement is the validation's enforcement.
	Enforcement Enforcement `json:"enforcement" protobuf:"bytes,3,opt,name=enforcement,casttype=Enforcement"`
	// outcome is Passed, Failed or Error.
	Outcome PolicyOutcome `json:"outcome" protobuf:"bytes,4,opt,name=outcome,casttype=PolicyOutcome"`
	// message says why it failed.
	// +optional
	Message string `json:"message,omitempty" protobuf:"bytes,5,opt,name=message"`
}

// PolicyApprovalRequirement is an approval rule that applies to a plan.
type PolicyApprovalRequirement struct {
	// policy is the policy's name.
	Policy string `json:"policy" protobuf:"bytes,1,opt,name=policy"`
	// rule is the rule's name, or approvals[i].
	Rule string `json:"rule" protobuf:"bytes,2,opt,name=rule"`
	// requiredApprovals is how many distinct users must approve.
	RequiredApprovals int32 `json:"requiredApprovals" protobuf:"varint,3,opt,name=requiredApprovals"`
	// groups, when set, are the groups whose members' approvals count.
	// +optional
	// +listType=atomic
	Groups []string `json:"groups,omitempty" protobuf:"bytes,4,rep,name=groups"`
	// message says why the rule applies.
	// +optional
	Message string `json:"message,omitempty" protobuf:"bytes,5,opt,name=message"`
}

// PolicyOverride is an override of a plan's soft-mandatory failures.
type PolicyOverride struct {
	// overriddenBy is the authenticated user who overrode.
	OverriddenBy string `json:"overriddenBy" protobuf:"bytes,1,opt,name=overriddenBy"`
	// overriddenAt is when the override was accepted.
	// +optional
	OverriddenAt *metav1.Time `json:"overriddenAt,omitempty" protobuf:"bytes,2,opt,name=overriddenAt"`
	// planDigest is the digest of the plan whose failures were overridden.
	PlanDigest string `json:"planDigest" protobuf:"bytes,3,opt,name=planDigest"`
	// justification is why, as the user gave it.
	Justification string `json:"justification" protobuf:"bytes,4,opt,name=justification"`
	// validations are the failures overridden, as policy/validation.
	// +optional
	// +listType=atomic
	Validations []string `json:"validations,omitempty" protobuf:"bytes,5,rep,name=validations"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformRunOverride is the body of a POST to the override subresource:
// it overrides the soft-mandatory policy failures of the plan with the given
// digest. The user is the authenticated user of the request; whoever
// requested the run never overrides it.
type TerraformRunOverride struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata; name, when set, must match the run.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// planDigest is the digest of the plan whose failures are overridden,
	// from status.plan.digest.
	PlanDigest string `json:"planDigest" protobuf:"bytes,2,opt,name=planDigest"`
	// justification says why; it is required and recorded.
	Justification string `json:"justification" protobuf:"bytes,3,opt,name=justification"`
}

// Conditions and reasons of policy checks.
const (
	// ConditionPolicyChecked is True when the plan's policies let it go
	// on (all passed, only advisory ones failed, or the soft-mandatory
	// failures were overridden), False when they hold or deny it.
	ConditionPolicyChecked = "PolicyChecked"
	// ReasonPolicyPassed: no mandatory validation failed.
	ReasonPolicyPassed = "PolicyPassed"
	// ReasonPolicyDenied: a hard-mandatory validation failed; the run ends Failed.
	ReasonPolicyDenied = "PolicyDenied"
	// ReasonPolicyOverrideRequired: a soft-mandatory validation failed; the
	// run waits for an override.
	ReasonPolicyOverrideRequired = "PolicyOverrideRequired"
	// ReasonPolicyOverridden: the soft-mandatory failures were overridden.
	ReasonPolicyOverridden = "PolicyOverridden"
)
