package apiserver

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/controller/leaderelection"
	notificationcontroller "github.com/terrarun/terrarun/pkg/controller/notification"
	"github.com/terrarun/terrarun/pkg/controller/runttl"
	runcontroller "github.com/terrarun/terrarun/pkg/controller/terraformrun"
	workspacecontroller "github.com/terrarun/terrarun/pkg/controller/terraformworkspace"
	"github.com/terrarun/terrarun/pkg/fluxsource"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned/scheme"
	informers "github.com/terrarun/terrarun/pkg/generated/informers/externalversions"
	"github.com/terrarun/terrarun/pkg/metrics"
)

const (
	// leaderElectionKey is the etcd key prefix of the controllers' election.
	leaderElectionKey = "/terrarun/leader/run-controller"
	// leaseTTL is how long a dead leader keeps its leadership.
	leaseTTL = 15 * time.Second
)

// controllerContext is what the controllers of one leadership term share:
// the loopback clientset, one informer factory, the Event recorder, and
// what the configuration gives them.
type controllerContext struct {
	config    *ExtraConfig
	clientset versioned.Interface
	factory   informers.SharedInformerFactory
	// metadata watches the host cluster's objects' metadata; nil in
	// standalone mode.
	metadata metadatainformer.SharedInformerFactory
	// sources reads the host cluster's Flux sources; nil in standalone
	// mode.
	sources  *fluxsource.Reader
	recorder record.EventRecorder
}

// controllerInit builds one controller from the shared context and returns
// the function that runs it until its context ends.
type controllerInit func(*controllerContext) (run func(context.Context) error, err error)

// controllers are the controllers a leader runs, by name, started from one
// place (runControllers), as kube-controller-manager starts its own.
var controllers = []struct {
	name string
	init controllerInit
}{
	{"run-controller", newRunController},
	{"workspace-controller", newWorkspaceController},
	{"ttl-controller", newTTLController},
	{"notification-controller", newNotificationController},
}

// startControllers runs the controllers, through the loopback client, while
// this replica is the elected leader. It returns at once.
func (c *ExtraConfig) startControllers(hook genericapiserver.PostStartHookContext) error {
	clientset, err := versioned.NewForConfig(ProtobufClientConfig(hook.LoopbackClientConfig))
	if err != nil {
		return err
	}
	// In cluster mode, Events go to the host cluster (kubectl describe shows
	// them); in standalone mode, to this server's own core/v1 events.
	events := c.Controllers.Kube
	if events == nil {
		if events, err = kubernetes.NewForConfig(ProtobufClientConfig(hook.LoopbackClientConfig)); err != nil {
			return err
		}
	}
	broadcaster := record.NewBroadcaster(record.WithContext(hook))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: events.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "terrarun-controller"})
	host, _ := os.Hostname()
	id := fmt.Sprintf("%s_%s", host, uuid.NewString())
	ctx := klog.NewContext(hook, klog.Background().WithName("controllers"))
	go leaderelection.RunWhileLeader(ctx, c.Controllers.Etcd, leaderElectionKey, id, leaseTTL, func(ctx context.Context) {
		cc := &controllerContext{
			config:    c,
			clientset: clientset,
			factory:   informers.NewSharedInformerFactory(clientset, 0),
			recorder:  recorder,
		}
		if c.Controllers.Metadata != nil {
			cc.metadata = metadatainformer.NewSharedInformerFactory(c.Controllers.Metadata, 0)
		}
		if c.Controllers.Dynamic != nil {
			cc.sources = fluxsource.NewReader(c.Controllers.Dynamic, c.Controllers.FluxArtifactHost)
		}
		runControllers(ctx, cc)
	})
	return nil
}

// runControllers builds every controller, starts their informers, and runs
// them until ctx ends (the term of leadership, or the server's life). A
// controller that cannot be built keeps the others from starting: a leader
// runs all of them or none.
func runControllers(ctx context.Context, cc *controllerContext) {
	logger := klog.FromContext(ctx)
	runs := make([]func(context.Context) error, 0, len(controllers))
	for _, ctrl := range controllers {
		run, err := ctrl.init(cc)
		if err != nil {
			logger.Error(err, "Building a controller; none runs in this term", "controller", ctrl.name)
			return
		}
		runs = append(runs, run)
	}
	cc.factory.Start(ctx.Done())
	defer cc.factory.Shutdown()
	if cc.metadata != nil {
		cc.metadata.Start(ctx.Done())
		defer cc.metadata.Shutdown()
	}
	if cc.sources != nil {
		// Its informers start when a workspace first follows a source.
		cc.sources.Start(ctx)
	}
	// The leader reports the runs it sees; the others report none.
	metrics.Watch(cc.factory.Terrarun().V1alpha1().TerraformRuns().Lister())
	defer metrics.Watch(nil)
	var wg sync.WaitGroup
	for i, run := range runs {
		name := controllers[i].name
		wg.Go(func() {
			if err := run(klog.NewContext(ctx, klog.Background().WithName(name))); err != nil {
				logger.Error(err, "Controller ended", "controller", name)
			}
		})
	}
	wg.Wait()
}

// newRunController builds the run controller.
func newRunController(cc *controllerContext) (func(context.Context) error, error) {
	c := cc.config
	opts := runcontroller.Options{
		CancelGrace:                     c.Controllers.CancelGrace,
		MaxConcurrentStages:             c.Controllers.MaxStages,
		MaxConcurrentStagesPerNamespace: c.Controllers.MaxStagesPerNamespace,
		Recorder:                        cc.recorder,
		Sources:                         sources(cc),
		Tasks: &runcontroller.Tasks{
			Informer:    cc.factory.Terrarun().V1alpha1().TerraformRunTasks(),
			SecretValue: c.Controllers.SecretValue,
			CallbackURL: c.Controllers.RunTaskURL,
		},
	}
	var arts runcontroller.Artifacts // a nil store is no Artifacts
	if c.Storage.Artifacts != nil {
		arts = c.Storage.Artifacts
	}
	// In cluster mode outputs can be published to a Secret there.
	if kube := c.Controllers.Kube; kube != nil {
		opts.OnApplied = runcontroller.OutputsSecretPublisher(kube, c.Storage.Artifacts)
	}
	ctrl, err := runcontroller.New(cc.clientset, cc.factory.Terrarun().V1alpha1().TerraformRuns(), c.Executor.Executor, arts, opts)
	if err != nil {
		return nil, err
	}
	// Kept once the controller stops (a shutdown stops it first): its
	// cache is what the executor's shutdown goes by.
	applying := ctrl.Applying
	c.applying.fn.Store(&applying)
	return func(ctx context.Context) error { return ctrl.Run(ctx, c.Controllers.Workers) }, nil
}

// sources is cc's reader of Flux sources, or no Sources at all (a nil
// interface, not a nil *fluxsource.Reader) in standalone mode.
func sources(cc *controllerContext) runcontroller.Sources {
	if cc.sources == nil {
		return nil
	}
	return cc.sources
}

// newWorkspaceController builds the workspace controller.
func newWorkspaceController(cc *controllerContext) (func(context.Context) error, error) {
	c := cc.config
	opts := workspacecontroller.Options{Recorder: cc.recorder, ConfigMapData: c.Controllers.ConfigMapData}
	if cc.sources != nil {
		opts.Sources = cc.sources
	}
	if cc.metadata != nil {
		opts.ConfigMaps = cc.metadata.ForResource(workspacecontroller.ConfigMapResource).Informer()
	}
	if kube := c.Controllers.Kube; kube != nil {
		opts.PublishOutputs = func(ctx context.Context, ws *v1alpha1.TerraformWorkspace, run *v1alpha1.TerraformRun) error {
			return runcontroller.PublishOutputs(ctx, kube, c.Storage.Artifacts, run, ws.Spec.OutputsSecret, metav1.OwnerReference{
				APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "TerraformWorkspace", Name: ws.Name, UID: ws.UID,
			})
		}
	}
	v1 := cc.factory.Terrarun().V1alpha1()
	ctrl, err := workspacecontroller.New(cc.clientset, v1.TerraformWorkspaces(), v1.TerraformRuns(), opts)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return ctrl.Run(ctx, c.Controllers.Workers) }, nil
}

// newTTLController builds the controller that deletes finished runs whose
// spec.ttlSecondsAfterFinished has passed.
func newTTLController(cc *controllerContext) (func(context.Context) error, error) {
	ctrl, err := runttl.New(cc.clientset, cc.factory.Terrarun().V1alpha1().TerraformRuns(), clock.RealClock{})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return ctrl.Run(ctx, 1) }, nil
}

// newNotificationController builds the controller that delivers the
// TerraformNotifications' events.
func newNotificationController(cc *controllerContext) (func(context.Context) error, error) {
	c := cc.config
	v1 := cc.factory.Terrarun().V1alpha1()
	ctrl, err := notificationcontroller.New(cc.clientset, v1.TerraformNotifications(), v1.TerraformRuns(), v1.TerraformWorkspaces(), notificationcontroller.Options{
		SecretValue: c.Controllers.SecretValue,
		WebViewURL:  c.Controllers.WebViewURL,
	})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return ctrl.Run(ctx, 2) }, nil
}
