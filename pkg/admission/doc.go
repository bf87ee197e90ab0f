// Package admission registers terrarun's native, in-process admission plugins.
// There are no webhooks: the plugins run inside terrarun-apiserver, in the
// server's admission chain, for the terraformruns resource of terrarun.dev and
// its approve subresource (never for other resources, or for subresources such
// as status).
//
// # Plugins and order
//
// PluginOrder lists them in the order they must run:
//
//  1. TerraformRunDefaults (package plugin/terraformrundefaults, mutating, create only) fills the
//     fields a user left empty from the cluster policy's defaults:
//     spec.engine.binary, spec.engine.image, spec.approval.mode,
//     spec.approval.timeout, spec.timeouts.plan and spec.timeouts.apply. It
//     never overwrites a value the user set.
//  2. TerraformRunPolicy (package plugin/terraformrunpolicy, validating, create and update)
//     enforces the policy: spec.source.git.url must point to an allowed host;
//     spec.approval.mode Auto is forbidden in namespaces matching
//     manualApprovalNamespaceSelector; timeouts may not exceed maxTimeouts; and
//     spec.creator, recorded by the server from the creating user, must name
//     the requesting user on create and can never change. On update the policy
//     rules apply only when the (immutable) spec changed, so tightening the
//     policy never blocks metadata updates of existing runs.
//
// Mutating plugins always run before validating ones, so defaulted values are
// validated too; the registry strategy's own defaulting and validation run
// between the two phases and hold even with admission disabled.
//
// Separation of duties on the approve subresource is an admission step too:
// TerraformRunPolicy sees an approval as a create of terraformruns/approve,
// reads the run (initializer.RunGetter) and refuses its creator
// (CheckApprover), unless the policy sets separationOfDuties: false. The
// approve handler then records the approver from the request's user.
//
// # Configuration
//
// Both plugins read one TerraformRunPolicy file, given through the standard
// --admission-control-config-file flag, whose AdmissionConfiguration points
// both plugins at it (a relative path is resolved against the directory of
// the AdmissionConfiguration file):
//
//	apiVersion: apiserver.config.k8s.io/v1
//	kind: AdmissionConfiguration
//	plugins:
//	- name: TerraformRunDefaults
//	  path: terrarun-policy.yaml
//	- name: TerraformRunPolicy
//	  path: terrarun-policy.yaml
//
// The policy file (package policy; decoded strictly, so an unknown field is an
// error that names it; every field optional):
//
//	apiVersion: admission.terrarun.dev/v1alpha1
//	kind: TerraformRunPolicy
//	defaults:            # applied by TerraformRunDefaults to empty fields
//	  engine: {binary: tofu, image: registry.example.com/terrarun-executor:v1}
//	  approval: {mode: Manual, timeout: 24h}
//	  timeouts: {plan: 30m, apply: 1h}
//	allowedGitHosts: ["github.com", "*.corp.example.com"]  # empty: any host; "*.x": subdomains of x
//	manualApprovalNamespaceSelector: {matchLabels: {env: prod}}  # Auto approval forbidden there
//	maxTimeouts: {plan: 2h, apply: 4h, approval: 72h}
//	separationOfDuties: true  # default true: a run's creator may not approve it
//
// Without a file the plugins run with the zero policy: no defaults, no
// restrictions beyond the creator checks, separation of duties on. A sample
// lives in artifacts/policy.
//
// # Namespace labels
//
// manualApprovalNamespaceSelector needs namespace labels. In cluster mode the
// generic admission initializer hands TerraformRunPolicy the Kubernetes
// informer factory, from which it builds a namespace informer (only when a
// selector is configured; the server then needs list and watch on
// namespaces). In standalone mode the server passes
// initializer.NewInitializer(initializer.NameOnlyNamespaceLabeler{}, nil), which
// knows only the kubernetes.io/metadata.name label that Kubernetes sets on
// every namespace, so selectors on that label work in both modes.
package admission

import (
	"k8s.io/apiserver/pkg/admission"

	"github.com/terrarun/terrarun/pkg/admission/plugin/terraformrundefaults"
	"github.com/terrarun/terrarun/pkg/admission/plugin/terraformrunpolicy"
)

// PluginOrder is the order of terrarun's plugins in the admission chain:
// TerraformRunDefaults (mutating) first, then TerraformRunPolicy (validating).
var PluginOrder = []string{terraformrundefaults.PluginName, terraformrunpolicy.PluginName}

// Register registers every terrarun admission plugin.
func Register(plugins *admission.Plugins) {
	terraformrundefaults.Register(plugins)
	terraformrunpolicy.Register(plugins)
}
