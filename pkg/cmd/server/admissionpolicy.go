package server

import (
	"bytes"
	"fmt"
	"io"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/admission"
	genericinitializer "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/admission/plugin/policy/manifest/loader"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// admissionPolicyPlugins are Kubernetes' admission policy plugins, compiled
// in: in cluster mode they evaluate the host cluster's
// ValidatingAdmissionPolicies and MutatingAdmissionPolicies (and their
// bindings) that match terrarun.dev resources, natively, as kube-apiserver
// evaluates them for its own; in standalone mode, those of
// --admission-policy-dir.
var admissionPolicyPlugins = []string{mutating.PluginName, validating.PluginName}

// registerAdmissionPolicies registers the admission policy plugins.
func registerAdmissionPolicies(plugins *admission.Plugins) {
	validating.Register(plugins)
	mutating.Register(plugins)
}

// policyDirConfig gives the admission policy plugins the directory of
// their policies and bindings (--admission-policy-dir), unless the
// --admission-control-config-file configures them itself.
type policyDirConfig struct {
	admission.ConfigProvider
	dir string
}

// ConfigFor returns the configuration of plugin name.
func (c policyDirConfig) ConfigFor(name string) (io.Reader, error) {
	r, err := c.ConfigProvider.ConfigFor(name)
	if err != nil || r != nil || c.dir == "" {
		return r, err
	}
	kind := map[string]string{validating.PluginName: "ValidatingAdmissionPolicyConfiguration", mutating.PluginName: "MutatingAdmissionPolicyConfiguration"}[name]
	if kind == "" {
		return nil, nil
	}
	return bytes.NewReader(fmt.Appendf(nil, "apiVersion: apiserver.config.k8s.io/v1\nkind: %s\nstaticManifestsDir: %q\n", kind, c.dir)), nil
}

// noClusterInitializer gives the admission policy plugins of standalone
// mode what they need of a cluster, which standalone mode has not: a
// client that holds no policies or bindings (theirs come from
// --admission-policy-dir) and no parameter objects, and whose namespaces,
// which standalone mode does not keep, are names without labels, as the
// TerraformRunPolicy plugin sees them there. The authorizer is standalone
// mode's own.
func noClusterInitializer(c *genericapiserver.RecommendedConfig) admission.PluginInitializers {
	kube := kubefake.NewClientset()
	kube.PrependReactor("get", "namespaces", func(action clienttesting.Action) (bool, runtime.Object, error) {
		name := action.(clienttesting.GetAction).GetName()
		return true, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil
	})
	factory := informers.NewSharedInformerFactory(kube, 0)
	// The plugins ask the factory for their informers in their
	// initialization; they start with the server.
	c.AddPostStartHookOrDie("terrarun-admission-policy-informers", func(hook genericapiserver.PostStartHookContext) error {
		factory.Start(hook.Done())
		return nil
	})
	// The kinds a policy's match rules and paramKind name.
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{v1alpha1.SchemeGroupVersion})
	mapper.Add(v1alpha1.SchemeGroupVersion.WithKind("TerraformRun"), meta.RESTScopeNamespace)
	mapper.Add(v1alpha1.SchemeGroupVersion.WithKind("TerraformWorkspace"), meta.RESTScopeNamespace)
	mapper.Add(v1alpha1.SchemeGroupVersion.WithKind("TerraformPolicy"), meta.RESTScopeRoot)
	var dyn dynamic.Interface = dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	// Discovery, for the OpenAPI schemas that apply configurations of
	// MutatingAdmissionPolicies merge with, is the server's own.
	var kc kubernetes.Interface = noCluster{Clientset: kube, discovery: discovery.NewDiscoveryClientForConfigOrDie(c.LoopbackClientConfig)}
	return admission.PluginInitializers{
		genericinitializer.New(kc, dyn, factory, c.Authorization.Authorizer, utilfeature.DefaultFeatureGate,
			c.EffectiveVersion, c.DrainedNotify(), mapper),
		manifestLoaders{},
	}
}

// noCluster is standalone mode's client of the cluster it has not: it
// holds nothing, but discovers the server's own resources.
type noCluster struct {
	*kubefake.Clientset
	discovery discovery.DiscoveryInterfaces
}

// Discovery discovers the server's own resources.
func (c noCluster) Discovery() discovery.DiscoveryInterfaces { return c.discovery }

// manifestLoaders gives the admission policy plugins the functions that
// read their static manifests: admissionregistration.k8s.io/v1 policies and
// bindings, with the defaults kube-apiserver gives the same objects.
type manifestLoaders struct{}

// Initialize hands a plugin that wants them the manifest loaders.
func (manifestLoaders) Initialize(plugin admission.Interface) {
	wants, ok := plugin.(genericinitializer.WantsManifestLoaders)
	if !ok {
		return
	}
	wants.SetManifestLoaders(&genericinitializer.ManifestLoaders{
		LoadValidatingPolicyManifests: func(dir string) ([]*admissionregistrationv1.ValidatingAdmissionPolicy, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding, string, error) {
			return loader.LoadPolicyManifests(dir, policyDecoder,
				acceptOne(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
					p.Spec.MatchConstraints = defaultMatch(p.Spec.MatchConstraints)
					if p.Spec.FailurePolicy == nil {
						p.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
					}
				}),
				acceptOne(func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
					b.Spec.MatchResources = defaultMatch(b.Spec.MatchResources)
				}),
				func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) string { return b.Spec.PolicyName })
		},
		LoadMutatingPolicyManifests: func(dir string) ([]*admissionregistrationv1.MutatingAdmissionPolicy, []*admissionregistrationv1.MutatingAdmissionPolicyBinding, string, error) {
			return loader.LoadPolicyManifests(dir, policyDecoder,
				acceptOne(func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
					p.Spec.MatchConstraints = defaultMatch(p.Spec.MatchConstraints)
					if p.Spec.FailurePolicy == nil {
						p.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
					}
					if p.Spec.ReinvocationPolicy == "" {
						p.Spec.ReinvocationPolicy = admissionregistrationv1.NeverReinvocationPolicy
					}
				}),
				acceptOne(func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
					b.Spec.MatchResources = defaultMatch(b.Spec.MatchResources)
				}),
				func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) string { return b.Spec.PolicyName })
		},
	})
}

// ValidateInitialization has nothing to check.
func (manifestLoaders) ValidateInitialization() error { return nil }

// policyDecoder decodes admissionregistration.k8s.io/v1 objects, and lists.
var policyDecoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	utilruntime.Must(admissionregistrationv1.AddToScheme(s))
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}()

// acceptOne accepts the objects of type T, defaulted. One directory holds
// both plugins' manifests: each skips the other's.
func acceptOne[T metav1.Object](setDefaults func(T)) loader.AcceptObjectFunc[T] {
	return func(obj runtime.Object) ([]T, error) {
		t, ok := obj.(T)
		if !ok {
			var zero T
			switch obj.(type) {
			case *admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding,
				*admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding:
				if isPolicyKind(obj) == isPolicyKind(any(zero).(runtime.Object)) {
					return nil, nil // the other plugin's policy (or binding)
				}
			}
			return nil, loader.ErrUnrecognizedType
		}
		setDefaults(t)
		return []T{t}, nil
	}
}

// isPolicyKind says whether obj is a policy, not a binding.
func isPolicyKind(obj runtime.Object) bool {
	switch obj.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicy:
		return true
	}
	return false
}

// defaultMatch gives match resources kube-apiserver's defaults: every
// namespace and object, equivalent versions, any scope.
func defaultMatch(m *admissionregistrationv1.MatchResources) *admissionregistrationv1.MatchResources {
	if m == nil {
		m = &admissionregistrationv1.MatchResources{}
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	if m.MatchPolicy == nil {
		m.MatchPolicy = ptr.To(admissionregistrationv1.Equivalent)
	}
	for _, rules := range [][]admissionregistrationv1.NamedRuleWithOperations{m.ResourceRules, m.ExcludeResourceRules} {
		for i := range rules {
			if rules[i].Scope == nil {
				rules[i].Scope = ptr.To(admissionregistrationv1.AllScopes)
			}
		}
	}
	return m
}
