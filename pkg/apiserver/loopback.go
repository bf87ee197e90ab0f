package apiserver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
	informers "github.com/terrarun/terrarun/pkg/generated/informers/externalversions"
	listers "github.com/terrarun/terrarun/pkg/generated/listers/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/planpolicy"
	"github.com/terrarun/terrarun/pkg/registry/terraformrun"
	"github.com/terrarun/terrarun/pkg/runrules"
)

// loopbackInformers are the informers that the server's own request
// handlers read, over its loopback client, on every replica: runs indexed
// by their state (the approve subresource), policies and workspaces (the
// policy check when a plan is recorded). They start after the server does.
type loopbackInformers struct {
	runs       cache.SharedIndexInformer
	policies   cache.SharedIndexInformer
	workspaces cache.SharedIndexInformer
}

func newLoopbackInformers(generic *genericapiserver.GenericAPIServer, loopback *restclient.Config) (*loopbackInformers, error) {
	client, err := versioned.NewForConfig(ProtobufClientConfig(loopback))
	if err != nil {
		return nil, err
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	own := &loopbackInformers{
		runs:       factory.Terrarun().V1alpha1().TerraformRuns().Informer(),
		policies:   factory.Terrarun().V1alpha1().TerraformPolicies().Informer(),
		workspaces: factory.Terrarun().V1alpha1().TerraformWorkspaces().Informer(),
	}
	if err := own.runs.AddIndexers(runrules.StateIndexers); err != nil {
		return nil, err
	}
	if err := generic.AddPostStartHook("terrarun-loopback-informers", func(hook genericapiserver.PostStartHookContext) error {
		factory.Start(hook.Done())
		return nil
	}); err != nil {
		return nil, err
	}
	return own, nil
}

// runsOnState lists the other runs on run's state, once the informer has
// read them.
func (o *loopbackInformers) runsOnState(ctx context.Context, run *v1alpha1.TerraformRun) ([]*v1alpha1.TerraformRun, error) {
	if !cache.WaitForCacheSync(ctx.Done(), o.runs.HasSynced) {
		return nil, apierrors.NewServiceUnavailable("the server has not read the runs on this run's state yet; try again")
	}
	return runrules.SameState(o.runs.GetIndexer(), run), nil
}

// policyCheck checks plans against the policies the informer holds. The
// run's namespace object comes from the host cluster (kube), or, in
// standalone mode (kube nil), has only its name; its workspace, for a run a
// workspace made, from the informer.
func (o *loopbackInformers) policyCheck(kube kubernetes.Interface) terraformrun.PolicyCheck {
	policies := listers.NewTerraformPolicyLister(o.policies.GetIndexer())
	workspaces := listers.NewTerraformWorkspaceLister(o.workspaces.GetIndexer())
	checker := &planpolicy.Checker{Policies: func() ([]*v1alpha1.TerraformPolicy, error) {
		if !o.policies.HasSynced() {
			return nil, fmt.Errorf("the server has not read the TerraformPolicies yet")
		}
		return policies.List(labels.Everything())
	}}
	return func(ctx context.Context, run *v1alpha1.TerraformRun, planJSON []byte, planErr error, digest string) (*v1alpha1.PolicyStatus, error) {
		if !cache.WaitForCacheSync(ctx.Done(), o.policies.HasSynced, o.workspaces.HasSynced) {
			return nil, fmt.Errorf("the server has not read the TerraformPolicies and workspaces yet")
		}
		var ns runtime.Object = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: run.Namespace}}
		if kube != nil {
			got, err := kube.CoreV1().Namespaces().Get(ctx, run.Namespace, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("reading namespace %s from the cluster: %w", run.Namespace, err)
			}
			ns = got
		}
		var ws *v1alpha1.TerraformWorkspace
		if name := run.Labels[v1alpha1.LabelWorkspace]; name != "" && planpolicy.TriggerOf(run) != v1alpha1.TriggerDirect {
			got, err := workspaces.TerraformWorkspaces(run.Namespace).Get(name)
			if err != nil && !apierrors.IsNotFound(err) {
				return nil, err
			}
			ws = got
		}
		in, err := planpolicy.NewInput(run, planJSON, planErr, ns, ws)
		if err != nil {
			return nil, err
		}
		return checker.Check(ctx, in, digest)
	}
}
