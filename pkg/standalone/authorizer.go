package standalone

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	rbacvalidation "k8s.io/component-helpers/auth/rbac/validation"
	"sigs.k8s.io/yaml"

	chart "github.com/terrarun/terrarun/charts/terrarun"
)

// The groups, in a user's client certificate, that grant terrarun's roles in
// standalone mode. The admin kubeconfig's system:masters may do everything.
const (
	// ViewersGroup grants terrarun-view: read runs, plans and logs.
	ViewersGroup = "terrarun:viewers"
	// EditorsGroup grants terrarun-edit: create, delete, cancel and discard
	// runs, and read their outputs.
	EditorsGroup = "terrarun:editors"
	// ApproversGroup grants terrarun-view and terrarun-approve: read and
	// approve plans.
	ApproversGroup = "terrarun:approvers"
	// OverridersGroup grants terrarun-view and terrarun-override: read plans
	// and override their soft-mandatory policy failures.
	OverridersGroup = "terrarun:overriders"
	// PolicyAdminsGroup grants terrarun-view and terrarun-policy-admin:
	// write the TerraformPolicies.
	PolicyAdminsGroup = "terrarun:policy-admins"
)

// groupRoles are the ClusterRoles (of charts/terrarun/files/roles.yaml) that each
// group is bound to, cluster-wide.
var groupRoles = map[string][]string{
	ViewersGroup:      {"terrarun-view"},
	EditorsGroup:      {"terrarun-edit"},
	ApproversGroup:    {"terrarun-view", "terrarun-approve"},
	OverridersGroup:   {"terrarun-view", "terrarun-override"},
	PolicyAdminsGroup: {"terrarun-view", "terrarun-policy-admin", "terrarun-runtask-admin"},
}

// discovery is what every authenticated user may read, as Kubernetes'
// system:discovery and system:public-info-viewer roles allow.
var discovery = rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{
	"/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/version", "/version/", "/healthz", "/livez", "/readyz",
}}

// selfReviews are what every authenticated user may ask about herself, as
// Kubernetes' system:basic-user role allows: `kubectl auth can-i` and
// `kubectl auth whoami`.
var selfReviews = []rbacv1.PolicyRule{
	{Verbs: []string{"create"}, APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectaccessreviews", "selfsubjectrulesreviews"}},
	{Verbs: []string{"create"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"selfsubjectreviews"}},
}

// readEvents lets each of the groups above read the Events the server
// records about runs and workspaces; in cluster mode, the cluster's roles
// decide who reads Events.
var readEvents = rbacv1.PolicyRule{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"events"}}

// Authorizer is standalone mode's authorizer: the roles of
// charts/terrarun/files/roles.yaml, bound to the groups above, with reading
// Events; self reviews and discovery for every authenticated user; and
// everything for system:masters. Everybody else, and everything else, is
// denied: status writes, impersonation and the executors' writes among them
// (executors are authorized apart, by pkg/executor/auth). It also lists
// what a user may (`kubectl auth can-i --list`).
type Authorizer struct {
	// AuthorizerFunc is authorize, with the conditions-aware methods of a
	// conditions-unaware authorizer.
	authorizer.AuthorizerFunc
	// rules are the rules each group grants.
	rules map[string][]rbacv1.PolicyRule
}

var (
	_ authorizer.Authorizer   = &Authorizer{}
	_ authorizer.RuleResolver = &Authorizer{}
)

// NewAuthorizer returns standalone mode's authorizer.
func NewAuthorizer() (*Authorizer, error) {
	roles, err := clusterRoles(chart.Roles)
	if err != nil {
		return nil, err
	}
	rules := map[string][]rbacv1.PolicyRule{user.AllAuthenticated: append([]rbacv1.PolicyRule{discovery}, selfReviews...)}
	for group, names := range groupRoles {
		rules[group] = append(rules[group], readEvents)
		for _, name := range names {
			role, ok := roles[name]
			if !ok {
				return nil, fmt.Errorf("charts/terrarun/files/roles.yaml has no ClusterRole %s", name)
			}
			rules[group] = append(rules[group], role.Rules...)
		}
	}
	z := &Authorizer{rules: rules}
	z.AuthorizerFunc = z.authorize
	return z, nil
}

// authorize decides a by the groups of its user.
func (z *Authorizer) authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	u := a.GetUser()
	if u == nil {
		return authorizer.DecisionNoOpinion, "no user", nil
	}
	groups := u.GetGroups()
	if slices.Contains(groups, user.SystemPrivilegedGroup) {
		return authorizer.DecisionAllow, "system:masters", nil
	}
	request := requestRule(a)
	for _, g := range groups {
		if covered, _ := rbacvalidation.Covers(z.rules[g], []rbacv1.PolicyRule{request}); covered && len(z.rules[g]) > 0 {
			return authorizer.DecisionAllow, fmt.Sprintf("group %s may", g), nil
		}
	}
	return authorizer.DecisionNoOpinion, fmt.Sprintf("no group of %q grants this; the groups %s, %s, %s, %s and %s grant terrarun's roles in standalone mode",
		u.GetName(), ViewersGroup, EditorsGroup, ApproversGroup, OverridersGroup, PolicyAdminsGroup), nil
}

// RulesFor implements authorizer.RuleResolver: the rules of u's groups, the
// same in every namespace (the roles are bound cluster-wide); everything for
// system:masters.
func (z *Authorizer) RulesFor(_ context.Context, u user.Info, _ string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	var rules []rbacv1.PolicyRule
	if slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup) {
		rules = []rbacv1.PolicyRule{
			{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
			{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
		}
	}
	for _, g := range u.GetGroups() {
		rules = append(rules, z.rules[g]...)
	}
	var resource []authorizer.ResourceRuleInfo
	var nonResource []authorizer.NonResourceRuleInfo
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 {
			nonResource = append(nonResource, &authorizer.DefaultNonResourceRuleInfo{Verbs: r.Verbs, NonResourceURLs: r.NonResourceURLs})
			continue
		}
		resource = append(resource, &authorizer.DefaultResourceRuleInfo{Verbs: r.Verbs, APIGroups: r.APIGroups, Resources: r.Resources, ResourceNames: r.ResourceNames})
	}
	return resource, nonResource, false, nil
}

// requestRule is the policy rule that allows exactly the request a.
func requestRule(a authorizer.Attributes) rbacv1.PolicyRule {
	if !a.IsResourceRequest() {
		return rbacv1.PolicyRule{Verbs: []string{a.GetVerb()}, NonResourceURLs: []string{a.GetPath()}}
	}
	resource := a.GetResource()
	if a.GetSubresource() != "" {
		resource += "/" + a.GetSubresource()
	}
	rule := rbacv1.PolicyRule{Verbs: []string{a.GetVerb()}, APIGroups: []string{a.GetAPIGroup()}, Resources: []string{resource}}
	if a.GetName() != "" {
		rule.ResourceNames = []string{a.GetName()}
	}
	return rule
}

// clusterRoles returns the ClusterRoles of a multi-document YAML, by name.
func clusterRoles(manifests []byte) (map[string]rbacv1.ClusterRole, error) {
	roles := map[string]rbacv1.ClusterRole{}
	for _, doc := range bytes.Split(manifests, []byte("\n---")) {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal(doc, &role); err != nil {
			return nil, fmt.Errorf("charts/terrarun/files/roles.yaml: %w", err)
		}
		if role.Kind == "ClusterRole" {
			roles[role.Name] = role
		}
	}
	return roles, nil
}
