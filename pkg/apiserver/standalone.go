package apiserver

import (
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/terrarun/terrarun/pkg/registry/event"
	"github.com/terrarun/terrarun/pkg/registry/selfsubject"
)

// The small part of Kubernetes' own API that standalone mode serves, so that
// kubectl works there as against a cluster: core/v1 Events (`kubectl get
// events`, `kubectl describe`), SelfSubjectAccessReview (`kubectl auth
// can-i`) and SelfSubjectReview (`kubectl auth whoami`). Behind a cluster,
// kube-apiserver serves them and this server does not.

// standaloneTypes are the Kubernetes types standalone mode serves. Each is
// its own internal version: the server stores and serves them as they are.
var standaloneTypes = map[schema.GroupVersion][]runtime.Object{
	corev1.SchemeGroupVersion:           {&corev1.Event{}, &corev1.EventList{}},
	authorizationv1.SchemeGroupVersion:  {&authorizationv1.SelfSubjectAccessReview{}, &authorizationv1.SelfSubjectRulesReview{}},
	authenticationv1.SchemeGroupVersion: {&authenticationv1.SelfSubjectReview{}},
}

func addStandaloneTypes(scheme *runtime.Scheme) error {
	for gv, types := range standaloneTypes {
		scheme.AddKnownTypes(gv, types...)
		scheme.AddKnownTypes(schema.GroupVersion{Group: gv.Group, Version: runtime.APIVersionInternal}, types...)
		if gv.Group != "" {
			metav1.AddToGroupVersion(scheme, gv)
		}
		if err := scheme.SetVersionPriority(gv); err != nil {
			return err
		}
	}
	return event.AddFieldLabelConversions(scheme)
}

// installStandaloneAPIs installs the standalone types' storage, stored as
// mediaType; authz answers access reviews, and rules rules reviews.
func installStandaloneAPIs(s *genericapiserver.GenericAPIServer, optsGetter generic.RESTOptionsGetter, mediaType string, authz authorizer.Authorizer, rules authorizer.RuleResolver) error {
	codec, err := StorageCodec(mediaType, corev1.SchemeGroupVersion)
	if err != nil {
		return err
	}
	events, err := event.NewREST(Scheme, versionedStorage{optsGetter, corev1.SchemeGroupVersion, codec})
	if err != nil {
		return err
	}
	core := genericapiserver.NewDefaultAPIGroupInfo(corev1.GroupName, Scheme, runtime.NewParameterCodec(Scheme), Codecs)
	core.VersionedResourcesStorageMap["v1"] = map[string]rest.Storage{"events": events}
	if err := s.InstallLegacyAPIGroup(genericapiserver.DefaultLegacyAPIPrefix, &core); err != nil {
		return fmt.Errorf("installing core/v1 events: %w", err)
	}
	authzGroup := genericapiserver.NewDefaultAPIGroupInfo(authorizationv1.GroupName, Scheme, runtime.NewParameterCodec(Scheme), Codecs)
	authzGroup.VersionedResourcesStorageMap["v1"] = map[string]rest.Storage{
		"selfsubjectaccessreviews": selfsubject.NewAccessReviewREST(authz),
		"selfsubjectrulesreviews":  selfsubject.NewRulesReviewREST(rules),
	}
	authnGroup := genericapiserver.NewDefaultAPIGroupInfo(authenticationv1.GroupName, Scheme, runtime.NewParameterCodec(Scheme), Codecs)
	authnGroup.VersionedResourcesStorageMap["v1"] = map[string]rest.Storage{"selfsubjectreviews": selfsubject.ReviewREST{}}
	if err := s.InstallAPIGroups(&authzGroup, &authnGroup); err != nil {
		return fmt.Errorf("installing the self-subject reviews: %w", err)
	}
	return nil
}

// versionedStorage stores a group's objects in version gv with codec: the
// server's storage codec encodes terrarun.dev's types only.
type versionedStorage struct {
	generic.RESTOptionsGetter
	gv    schema.GroupVersion
	codec runtime.Codec
}

// GetRESTOptions implements generic.RESTOptionsGetter.
func (v versionedStorage) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := v.RESTOptionsGetter.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	cfg := *opts.StorageConfig
	cfg.Codec = v.codec
	cfg.EncodeVersioner = v.gv
	opts.StorageConfig = &cfg
	return opts, nil
}
