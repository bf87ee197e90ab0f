package standalone

import (
	"context"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

func TestAuthorizer(t *testing.T) {
	a, err := NewAuthorizer()
	if err != nil {
		t.Fatal(err)
	}
	run := func(verb, subresource string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{Verb: verb, Namespace: "default", APIGroup: "terrarun.dev", APIVersion: "v1alpha1",
			Resource: "terraformruns", Subresource: subresource, Name: "hello", ResourceRequest: true}
	}
	as := func(groups ...string) user.Info {
		return &user.DefaultInfo{Name: "someone", Groups: append(groups, user.AllAuthenticated)}
	}
	allow, deny := authorizer.DecisionAllow, authorizer.DecisionNoOpinion
	for _, tc := range []struct {
		name string
		u    user.Info
		attr authorizer.AttributesRecord
		want authorizer.Decision
	}{
		{"nobody reads runs", as(), run("get", ""), deny},
		{"nobody reads discovery", as(), authorizer.AttributesRecord{Verb: "get", Path: "/apis/terrarun.dev/v1alpha1"}, allow},
		{"nobody reads metrics", as(ViewersGroup, EditorsGroup, ApproversGroup), authorizer.AttributesRecord{Verb: "get", Path: "/metrics"}, deny},
		{"nobody profiles the server", as(ViewersGroup, EditorsGroup, ApproversGroup), authorizer.AttributesRecord{Verb: "get", Path: "/debug/pprof/heap"}, deny},
		{"nobody changes the log level", as(EditorsGroup), authorizer.AttributesRecord{Verb: "put", Path: "/debug/flags/v"}, deny},
		{"the admin reads metrics", as(user.SystemPrivilegedGroup), authorizer.AttributesRecord{Verb: "get", Path: "/metrics"}, allow},
		{"a viewer reads runs", as(ViewersGroup), run("list", ""), allow},
		{"a viewer reads plans", as(ViewersGroup), run("get", "plan"), allow},
		{"a viewer reads no outputs", as(ViewersGroup), run("get", "outputs"), deny},
		{"a viewer creates no runs", as(ViewersGroup), run("create", ""), deny},
		{"an editor creates runs", as(EditorsGroup), run("create", ""), allow},
		{"an editor reads outputs", as(EditorsGroup), run("get", "outputs"), allow},
		{"an editor cancels", as(EditorsGroup), run("create", "cancel"), allow},
		{"an editor does not approve", as(EditorsGroup), run("create", "approve"), deny},
		{"an editor writes no status", as(EditorsGroup), run("patch", "status"), deny},
		{"an editor writes no plan", as(EditorsGroup), run("create", "plan"), deny},
		{"an editor impersonates nobody", as(EditorsGroup), authorizer.AttributesRecord{Verb: "impersonate", Resource: "users", Name: "system:terrarun:executor:default:hello", ResourceRequest: true}, deny},
		{"an approver approves", as(ApproversGroup), run("create", "approve"), allow},
		{"an approver reads the plan", as(ApproversGroup), run("get", "plan"), allow},
		{"an approver creates no runs", as(ApproversGroup), run("create", ""), deny},
		{"the admin writes status", as(user.SystemPrivilegedGroup), run("update", "status"), allow},
		{"anybody asks what she may do", as(), authorizer.AttributesRecord{Verb: "create", APIGroup: "authorization.k8s.io", Resource: "selfsubjectaccessreviews", ResourceRequest: true}, allow},
		{"anybody asks who she is", as(), authorizer.AttributesRecord{Verb: "create", APIGroup: "authentication.k8s.io", Resource: "selfsubjectreviews", ResourceRequest: true}, allow},
		{"nobody asks about others", as(ViewersGroup, EditorsGroup, ApproversGroup), authorizer.AttributesRecord{Verb: "create", APIGroup: "authorization.k8s.io", Resource: "subjectaccessreviews", ResourceRequest: true}, deny},
		{"nobody reads events", as(), authorizer.AttributesRecord{Verb: "list", Namespace: "default", Resource: "events", APIVersion: "v1", ResourceRequest: true}, deny},
		{"a viewer reads events", as(ViewersGroup), authorizer.AttributesRecord{Verb: "watch", Namespace: "default", Resource: "events", APIVersion: "v1", ResourceRequest: true}, allow},
		{"an editor writes no events", as(EditorsGroup), authorizer.AttributesRecord{Verb: "create", Namespace: "default", Resource: "events", APIVersion: "v1", ResourceRequest: true}, deny},
		{"the admin impersonates", as(user.SystemPrivilegedGroup), authorizer.AttributesRecord{Verb: "impersonate", Resource: "users", Name: "bob", ResourceRequest: true}, allow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.attr.User = tc.u
			got, reason, err := a.Authorize(context.Background(), tc.attr)
			if err != nil || got != tc.want {
				t.Errorf("Authorize = %v (%s, %v), want %v", got, reason, err, tc.want)
			}
		})
	}
}

// TestRulesFor: the rules listed for a user are what Authorize allows her
// (`kubectl auth can-i --list` says what `can-i` answers): each rule
// listed is allowed, and a verb nothing lists is not.
func TestRulesFor(t *testing.T) {
	a, err := NewAuthorizer()
	if err != nil {
		t.Fatal(err)
	}
	viewer := &user.DefaultInfo{Name: "vic", Groups: []string{ViewersGroup, user.AllAuthenticated}}
	resource, nonResource, incomplete, err := a.RulesFor(context.Background(), viewer, "team-a")
	if err != nil || incomplete || len(resource) == 0 || len(nonResource) == 0 {
		t.Fatalf("rules %v %v incomplete %v: %v", resource, nonResource, incomplete, err)
	}
	lists := func(verb, res string) bool {
		for _, r := range resource {
			if slices.Contains(r.GetVerbs(), verb) && slices.Contains(r.GetResources(), res) {
				return true
			}
		}
		return false
	}
	for _, r := range resource {
		res, sub, _ := strings.Cut(r.GetResources()[0], "/")
		attr := authorizer.AttributesRecord{User: viewer, Verb: r.GetVerbs()[0], Namespace: "team-a", APIGroup: r.GetAPIGroups()[0],
			Resource: res, Subresource: sub, ResourceRequest: true}
		if d, _, _ := a.Authorize(context.Background(), attr); d != authorizer.DecisionAllow {
			t.Errorf("listed %v, but %s %s is not allowed", r, attr.Verb, r.GetResources()[0])
		}
	}
	if !lists("get", "terraformruns/plan") || lists("create", "terraformruns/approve") || lists("get", "terraformruns/outputs") {
		t.Errorf("a viewer's rules: %v", resource)
	}
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}
	if resource, _, _, _ := a.RulesFor(context.Background(), admin, "team-a"); len(resource) == 0 || resource[0].GetVerbs()[0] != "*" {
		t.Errorf("the admin's rules: %v", resource)
	}
}
