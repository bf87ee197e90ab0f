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
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/controller/leaderelection"
	runcontroller "github.com/terrarun/terrarun/pkg/controller/terraformrun"
	workspacecontroller "github.com/terrarun/terrarun/pkg/controller/terraformworkspace"
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

// startController runs the run and workspace controllers, through the
// loopback client, while this replica is the elected leader. It returns at
// once.
func (c *ExtraConfig) startController(hook genericapiserver.PostStartHookContext) error {
	clientset, err := versioned.NewForConfig(ProtobufClientConfig(hook.LoopbackClientConfig))
	if err != nil {
		return err
	}
	// In cluster mode, Events go to the host cluster (kubectl describe shows
	// them) and outputs can be published to a Secret there; in standalone
	// mode, Events go to this server's own core/v1 events.
	opts := runcontroller.Options{
		CancelGrace:                     c.Controller.CancelGrace,
		MaxConcurrentStages:             c.Controller.MaxStages,
		MaxConcurrentStagesPerNamespace: c.Controller.MaxStagesPerNamespace,
	}
	events := c.Controller.Kube
	if events == nil {
		if events, err = kubernetes.NewForConfig(ProtobufClientConfig(hook.LoopbackClientConfig)); err != nil {
			return err
		}
	}
	broadcaster := record.NewBroadcaster(record.WithContext(hook))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: events.CoreV1().Events("")})
	opts.Recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "terrarun-controller"})
	if kube := c.Controller.Kube; kube != nil {
		opts.OnApplied = runcontroller.OutputsSecretPublisher(kube, c.Artifacts)
	}
	host, _ := os.Hostname()
	id := fmt.Sprintf("%s_%s", host, uuid.NewString())
	ctx := klog.NewContext(hook, klog.Background().WithName("run-controller"))
	go leaderelection.RunWhileLeader(ctx, c.Controller.Etcd, leaderElectionKey, id, leaseTTL, func(ctx context.Context) {
		factory := informers.NewSharedInformerFactory(clientset, 0)
		runInformer := factory.Terrarun().V1alpha1().TerraformRuns()
		var arts runcontroller.Artifacts // a nil store is no Artifacts
		if c.Artifacts != nil {
			arts = c.Artifacts
		}
		ctrl, err := runcontroller.New(clientset, runInformer, c.Executor, arts, opts)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Building the run controller")
			return
		}
		wsOpts := workspacecontroller.Options{Recorder: opts.Recorder, ConfigMapData: c.Controller.ConfigMapData}
		if kube := c.Controller.Kube; kube != nil {
			wsOpts.PublishOutputs = func(ctx context.Context, ws *v1alpha1.TerraformWorkspace, run *v1alpha1.TerraformRun) error {
				return runcontroller.PublishOutputs(ctx, kube, c.Artifacts, run, ws.Spec.OutputsSecret, metav1.OwnerReference{
					APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "TerraformWorkspace", Name: ws.Name, UID: ws.UID,
				})
			}
		}
		wsCtrl, err := workspacecontroller.New(clientset, factory.Terrarun().V1alpha1().TerraformWorkspaces(), runInformer, wsOpts)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Building the workspace controller")
			return
		}
		// Kept once the controller stops (a shutdown stops it first): its
		// cache is what the executor's shutdown goes by.
		applying := ctrl.Applying
		c.applying.fn.Store(&applying)
		factory.Start(ctx.Done())
		// The leader reports the runs it sees; the others report none.
		metrics.Watch(runInformer.Lister())
		defer metrics.Watch(nil)
		var wg sync.WaitGroup
		wg.Go(func() {
			wsCtx := klog.NewContext(ctx, klog.Background().WithName("workspace-controller"))
			if err := wsCtrl.Run(wsCtx, c.Controller.Workers); err != nil {
				klog.FromContext(ctx).Error(err, "Workspace controller")
			}
		})
		if err := ctrl.Run(ctx, c.Controller.Workers); err != nil {
			klog.FromContext(ctx).Error(err, "Run controller")
		}
		wg.Wait()
		factory.Shutdown()
	})
	return nil
}
