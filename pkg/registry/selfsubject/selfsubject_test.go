package selfsubject

import (
	"context"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// TestAccessReview: the review asks the server's authorizer about the
// requesting user, never about one the body names, and says why; a review
// that names no attributes, or both kinds, is refused naming the field.
func TestAccessReview(t *testing.T) {
	var asked authorizer.Attributes
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		asked = a
		if a.GetUser().GetName() == "bob" && a.GetSubresource() == "approve" {
			return authorizer.DecisionAllow, "bob approves", nil
		}
		return authorizer.DecisionNoOpinion, "no group grants this", nil
	})
	r := NewAccessReviewREST(authz)
	as := func(name string) context.Context {
		return genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: name})
	}
	review := func(ctx context.Context, spec authorizationv1.SelfSubjectAccessReviewSpec) (*authorizationv1.SelfSubjectAccessReview, error) {
		obj, err := r.Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: spec}, nil, &metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		return obj.(*authorizationv1.SelfSubjectAccessReview), nil
	}
	approve := authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
		Namespace: "default", Verb: "create", Group: "terrarun.dev", Resource: "terraformruns", Subresource: "approve",
	}}
	if got, err := review(as("bob"), approve); err != nil || !got.Status.Allowed || got.Status.Reason != "bob approves" {
		t.Errorf("bob: %+v, %v", got, err)
	}
	if got, err := review(as("eve"), approve); err != nil || got.Status.Allowed || asked.GetUser().GetName() != "eve" || asked.GetNamespace() != "default" {
		t.Errorf("eve: %+v, %v (asked %+v)", got, err, asked)
	}
	_, err := review(as("eve"), authorizationv1.SelfSubjectAccessReviewSpec{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.resourceAttributes") {
		t.Errorf("no attributes: %v", err)
	}
	_, err = review(as("eve"), authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: approve.ResourceAttributes, NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.nonResourceAttributes") {
		t.Errorf("both attributes: %v", err)
	}
	if _, err := review(context.Background(), approve); !apierrors.IsBadRequest(err) {
		t.Errorf("without a user: %v", err)
	}
}

// TestReview answers with the requesting user.
func TestReview(t *testing.T) {
	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "eve", Groups: []string{"terrarun:editors"}, Extra: map[string][]string{"k": {"v"}}})
	obj, err := ReviewREST{}.Create(ctx, &authenticationv1.SelfSubjectReview{}, nil, &metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u := obj.(*authenticationv1.SelfSubjectReview).Status.UserInfo
	if u.Username != "eve" || len(u.Groups) != 1 || u.Groups[0] != "terrarun:editors" || u.Extra["k"][0] != "v" {
		t.Errorf("user info %+v", u)
	}
}

// rulesOf lists, for a user, the rules its table gives her name.
type rulesOf map[string][]authorizer.ResourceRuleInfo

func (r rulesOf) RulesFor(_ context.Context, u user.Info, _ string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	return r[u.GetName()], []authorizer.NonResourceRuleInfo{&authorizer.DefaultNonResourceRuleInfo{Verbs: []string{"get"}, NonResourceURLs: []string{"/version"}}}, false, nil
}

// TestRulesReview: the review lists the requesting user's rules, never
// those of one the body names; a review without a namespace is refused
// naming the field.
func TestRulesReview(t *testing.T) {
	r := NewRulesReviewREST(rulesOf{"bob": {&authorizer.DefaultResourceRuleInfo{Verbs: []string{"create"}, APIGroups: []string{"terrarun.dev"}, Resources: []string{"terraformruns/approve"}}}})
	as := func(name string) context.Context {
		return genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: name})
	}
	review := func(ctx context.Context, ns string) (*authorizationv1.SelfSubjectRulesReview, error) {
		obj, err := r.Create(ctx, &authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns}}, nil, &metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		return obj.(*authorizationv1.SelfSubjectRulesReview), nil
	}
	got, err := review(as("bob"), "default")
	if err != nil || len(got.Status.ResourceRules) != 1 || got.Status.ResourceRules[0].Resources[0] != "terraformruns/approve" || len(got.Status.NonResourceRules) != 1 {
		t.Errorf("bob: %+v, %v", got, err)
	}
	if got, err := review(as("eve"), "default"); err != nil || len(got.Status.ResourceRules) != 0 {
		t.Errorf("eve: %+v, %v", got, err)
	}
	if _, err := review(as("eve"), ""); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.namespace") {
		t.Errorf("no namespace: %v", err)
	}
}
