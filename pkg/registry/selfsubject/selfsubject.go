// Package selfsubject serves, in standalone mode, the reviews kubectl asks
// about its own user: SelfSubjectAccessReview (`kubectl auth can-i`),
// answered by the server's own authorizer, SelfSubjectRulesReview (`kubectl
// auth can-i --list`), from its rules, and SelfSubjectReview (`kubectl auth
// whoami`). Behind a cluster, kube-apiserver serves them.
package selfsubject

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
)

// AccessReviewREST serves selfsubjectaccessreviews.
type AccessReviewREST struct {
	authorizer authorizer.Authorizer
}

var (
	_ rest.Creater              = &AccessReviewREST{}
	_ rest.Scoper               = &AccessReviewREST{}
	_ rest.SingularNameProvider = &AccessReviewREST{}
)

// NewAccessReviewREST answers access reviews with authz, the authorizer
// every request to the server goes through.
func NewAccessReviewREST(authz authorizer.Authorizer) *AccessReviewREST {
	return &AccessReviewREST{authorizer: authz}
}

// New returns an empty review.
func (r *AccessReviewREST) New() runtime.Object { return &authorizationv1.SelfSubjectAccessReview{} }

// Destroy does nothing.
func (r *AccessReviewREST) Destroy() {}

// NamespaceScoped is false.
func (r *AccessReviewREST) NamespaceScoped() bool { return false }

// GetSingularName is the resource's singular name.
func (r *AccessReviewREST) GetSingularName() string { return "selfsubjectaccessreview" }

// Create answers whether the requesting user may do what the review's spec
// describes.
func (r *AccessReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authorizationv1.SelfSubjectAccessReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a SelfSubjectAccessReview, got %T", obj))
	}
	spec := field.NewPath("spec")
	ra, nra := review.Spec.ResourceAttributes, review.Spec.NonResourceAttributes
	switch {
	case ra == nil && nra == nil:
		return nil, apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectAccessReview").GroupKind(), "",
			field.ErrorList{field.Required(spec.Child("resourceAttributes"), "exactly one of resourceAttributes or nonResourceAttributes is required")})
	case ra != nil && nra != nil:
		return nil, apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectAccessReview").GroupKind(), "",
			field.ErrorList{field.Invalid(spec.Child("nonResourceAttributes"), nra, "exactly one of resourceAttributes or nonResourceAttributes may be set")})
	}
	u, err := requester(ctx, review, createValidation)
	if err != nil {
		return nil, err
	}
	attrs := authorizer.AttributesRecord{User: u}
	if ra != nil {
		attrs.ResourceRequest = true
		attrs.Verb, attrs.Namespace, attrs.Name = ra.Verb, ra.Namespace, ra.Name
		attrs.APIGroup, attrs.APIVersion, attrs.Resource, attrs.Subresource = ra.Group, ra.Version, ra.Resource, ra.Subresource
	} else {
		attrs.Verb, attrs.Path = nra.Verb, nra.Path
	}
	decision, reason, err := r.authorizer.Authorize(ctx, attrs)
	review.Status = authorizationv1.SubjectAccessReviewStatus{
		Allowed: decision == authorizer.DecisionAllow,
		Denied:  decision == authorizer.DecisionDeny,
		Reason:  reason,
	}
	if err != nil {
		review.Status.EvaluationError = err.Error()
	}
	return review, nil
}

// RulesReviewREST serves selfsubjectrulesreviews.
type RulesReviewREST struct {
	rules authorizer.RuleResolver
}

var (
	_ rest.Creater              = &RulesReviewREST{}
	_ rest.Scoper               = &RulesReviewREST{}
	_ rest.SingularNameProvider = &RulesReviewREST{}
)

// NewRulesReviewREST answers rules reviews with rules, the rules of the
// authorizer every request to the server goes through.
func NewRulesReviewREST(rules authorizer.RuleResolver) *RulesReviewREST {
	return &RulesReviewREST{rules: rules}
}

// New returns an empty review.
func (r *RulesReviewREST) New() runtime.Object { return &authorizationv1.SelfSubjectRulesReview{} }

// Destroy does nothing.
func (r *RulesReviewREST) Destroy() {}

// NamespaceScoped is false.
func (r *RulesReviewREST) NamespaceScoped() bool { return false }

// GetSingularName is the resource's singular name.
func (r *RulesReviewREST) GetSingularName() string { return "selfsubjectrulesreview" }

// Create lists what the requesting user may do in the review's namespace,
// as kube-apiserver's selfsubjectrulesreviews does.
func (r *RulesReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authorizationv1.SelfSubjectRulesReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a SelfSubjectRulesReview, got %T", obj))
	}
	if review.Spec.Namespace == "" {
		return nil, apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectRulesReview").GroupKind(), "",
			field.ErrorList{field.Required(field.NewPath("spec", "namespace"), "name the namespace to list your rules in")})
	}
	u, err := requester(ctx, review, createValidation)
	if err != nil {
		return nil, err
	}
	resource, nonResource, incomplete, err := r.rules.RulesFor(ctx, u, review.Spec.Namespace)
	review.Status = authorizationv1.SubjectRulesReviewStatus{Incomplete: incomplete}
	for _, rule := range resource {
		review.Status.ResourceRules = append(review.Status.ResourceRules, authorizationv1.ResourceRule{
			Verbs: rule.GetVerbs(), APIGroups: rule.GetAPIGroups(), Resources: rule.GetResources(), ResourceNames: rule.GetResourceNames(),
		})
	}
	for _, rule := range nonResource {
		review.Status.NonResourceRules = append(review.Status.NonResourceRules, authorizationv1.NonResourceRule{
			Verbs: rule.GetVerbs(), NonResourceURLs: rule.GetNonResourceURLs(),
		})
	}
	if err != nil {
		review.Status.EvaluationError = err.Error()
	}
	return review, nil
}

// ReviewREST serves selfsubjectreviews.
type ReviewREST struct{}

var (
	_ rest.Creater              = &ReviewREST{}
	_ rest.Scoper               = &ReviewREST{}
	_ rest.SingularNameProvider = &ReviewREST{}
)

// New returns an empty review.
func (ReviewREST) New() runtime.Object { return &authenticationv1.SelfSubjectReview{} }

// Destroy does nothing.
func (ReviewREST) Destroy() {}

// NamespaceScoped is false.
func (ReviewREST) NamespaceScoped() bool { return false }

// GetSingularName is the resource's singular name.
func (ReviewREST) GetSingularName() string { return "selfsubjectreview" }

// Create answers who the requesting user is.
func (ReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authenticationv1.SelfSubjectReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a SelfSubjectReview, got %T", obj))
	}
	u, err := requester(ctx, review, createValidation)
	if err != nil {
		return nil, err
	}
	review.Status.UserInfo = userInfo(u)
	return review, nil
}

// requester returns the user who asks for review, once admission
// (createValidation) has let the review through.
func requester(ctx context.Context, review runtime.Object, createValidation rest.ValidateObjectFunc) (user.Info, error) {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, apierrors.NewBadRequest("no user in the request")
	}
	if createValidation != nil {
		if err := createValidation(ctx, review); err != nil {
			return nil, err
		}
	}
	return u, nil
}

func userInfo(u user.Info) authenticationv1.UserInfo {
	info := authenticationv1.UserInfo{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}
	if extra := u.GetExtra(); len(extra) > 0 {
		info.Extra = make(map[string]authenticationv1.ExtraValue, len(extra))
		for k, v := range extra {
			info.Extra[k] = v
		}
	}
	return info
}
