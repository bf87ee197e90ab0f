// Package planpolicy checks plans against TerraformPolicies: it compiles a
// policy's CEL expressions in Kubernetes' CEL environment, with its
// libraries and cost limits (Compile, used when a policy is written and when
// it is evaluated), builds what the expressions see of a run (NewInput:
// plan, summary, run, namespaceObject, workspace), and evaluates the
// policies that match a run when its plan is recorded (Checker). Mandatory
// levels fail closed: an expression that errors, runs out of cost, or meets a
// plan that could not be read fails its validation with outcome Error.
//
// What the results do to a run (denied, held for an override, approvals
// raised) is decided by package runrules.
package planpolicy
