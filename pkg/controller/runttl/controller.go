// Package runttl deletes the finished runs whose
// spec.ttlSecondsAfterFinished has passed, with their plans, logs and
// outputs, as Kubernetes' ttlafterfinished controller deletes Jobs: each
// run is queued for the moment its time is up, and checked again against
// the API, so that a TTL raised in the meantime keeps it.
package runttl

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/controller/reconcile"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
	informers "github.com/terrarun/terrarun/pkg/generated/informers/externalversions/terrarun/v1alpha1"
	listers "github.com/terrarun/terrarun/pkg/generated/listers/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runrules"
)

// Controller deletes the runs whose time after finishing is up.
type Controller struct {
	client versioned.Interface
	lister listers.TerraformRunLister
	synced cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]
	clock  clock.WithTicker
}

// New returns a controller of the runs informer sees; clk tells the time.
func New(client versioned.Interface, informer informers.TerraformRunInformer, clk clock.WithTicker) (*Controller, error) {
	c := &Controller{
		client: client,
		lister: informer.Lister(),
		synced: informer.Informer().HasSynced,
		clock:  clk,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "terraformruns-ttl", Clock: clk}),
	}
	_, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj interface{}) { c.enqueue(obj) },
	})
	return c, err
}

func (c *Controller) enqueue(obj interface{}) {
	if run, ok := obj.(*v1alpha1.TerraformRun); ok && expires(run) {
		if key, err := cache.MetaNamespaceKeyFunc(run); err == nil {
			c.queue.Add(key)
		}
	}
}

// expires says whether run is to be deleted once its TTL after finishing
// has passed: it has one, has finished, and no workspace created it (a
// workspace keeps its runs by its history limits).
func expires(run *v1alpha1.TerraformRun) bool {
	return run.Spec.TTLSecondsAfterFinished != nil && run.DeletionTimestamp == nil &&
		runrules.Finished(run) && run.Status.CompletionTime != nil && run.Labels[v1alpha1.LabelWorkspace] == ""
}

// timeLeft is how long run has before it is deleted; 0 or less: none.
func (c *Controller) timeLeft(run *v1alpha1.TerraformRun) time.Duration {
	expiry := run.Status.CompletionTime.Add(time.Duration(*run.Spec.TTLSecondsAfterFinished) * time.Second)
	return expiry.Sub(c.clock.Now())
}

// Run processes the queue with workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting the run TTL controller")
	defer logger.Info("Stopping the run TTL controller")
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced) {
		return fmt.Errorf("the runs' cache did not sync")
	}
	reconcile.Start(ctx, c.queue, workers, c.sync, "Deleting a run whose time after finishing is up", "run")
	<-ctx.Done()
	return nil
}

// sync deletes the run of key once its time is up, or asks for it again then.
func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	run, err := c.lister.TerraformRuns(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if !expires(run) {
		return 0, nil
	}
	if left := c.timeLeft(run); left > 0 {
		return left, nil
	}
	// The cache may be behind a raised TTL: the API says.
	fresh, err := c.client.TerrarunV1alpha1().TerraformRuns(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if !expires(fresh) {
		return 0, nil
	}
	if left := c.timeLeft(fresh); left > 0 {
		return left, nil
	}
	policy := metav1.DeletePropagationBackground
	err = c.client.TerrarunV1alpha1().TerraformRuns(namespace).Delete(ctx, name, metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &fresh.UID, ResourceVersion: &fresh.ResourceVersion},
		PropagationPolicy: &policy,
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Gone, or changed since: a change comes back through the informer.
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	klog.FromContext(ctx).Info("Deleted a run whose time after finishing was up", "run", klog.KObj(fresh), "ttlSecondsAfterFinished", *fresh.Spec.TTLSecondsAfterFinished)
	return 0, nil
}
