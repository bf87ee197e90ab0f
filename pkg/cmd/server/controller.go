package server

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/pkg/controller/leaderelection"
	runcontroller "github.com/terrarun/terrarun/pkg/controller/terraformrun"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned/scheme"
	informers "github.com/terrarun/terrarun/pkg/generated/informers/externalversions"
)

// leaderElectionKey is the etcd key prefix of the run controller's election.
const leaderElectionKey = "/terrarun/leader/run-controller"

// lazyRunGetter reads runs from the registry store once the server has built it.
type lazyRunGetter struct {
	store atomic.Pointer[genericregistry.Store]
}

// GetRun implements initializer.RunGetter.
func (g *lazyRunGetter) GetRun(ctx context.Context, namespace, name string) (*terrarun.TerraformRun, error) {
	s := g.store.Load()
	if s == nil {
		return nil, fmt.Errorf("the run store is not ready yet; retry")
	}
	obj, err := s.Get(genericapirequest.WithNamespace(ctx, namespace), name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return obj.(*terrarun.TerraformRun), nil
}

// controllerHandle lets the executor notify the controller, which is built
// later, once this replica leads.
type controllerHandle struct {
	c atomic.Pointer[runcontroller.Controller]
}

func (h *controllerHandle) notify(namespace, name string) {
	if c := h.c.Load(); c != nil {
		c.Notify(namespace, name)
	}
}

// startController runs the run controller while this replica is the leader.
func (o *Options) startController(hook genericapiserver.PostStartHookContext, config *genericapiserver.RecommendedConfig,
	client *clientv3.Client, exec executor.Executor, store *artifacts.Store, handle *controllerHandle) error {
	clientset, err := versioned.NewForConfig(hook.LoopbackClientConfig)
	if err != nil {
		return err
	}
	// In cluster mode, Events go to the host cluster (kubectl describe shows
	// them) and outputs can be published to a Secret there.
	var (
		recorder  record.EventRecorder
		onApplied func(context.Context, *v1alpha1.TerraformRun) error
	)
	if config.ClientConfig != nil {
		kube, err := kubernetes.NewForConfig(config.ClientConfig)
		if err != nil {
			return err
		}
		broadcaster := record.NewBroadcaster(record.WithContext(hook))
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
		recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "terrarun-controller"})
		onApplied = runcontroller.OutputsSecretPublisher(kube, store)
	}
	id, _ := os.Hostname()
	id = fmt.Sprintf("%s_%s", id, uuid.NewString())
	ctx := klog.NewContext(hook, klog.Background().WithName("run-controller"))
	if jobs, ok := exec.(interface {
		Run(context.Context, executor.Notifier) error
	}); ok {
		go func() {
			if err := jobs.Run(ctx, handle.notify); err != nil {
				klog.FromContext(ctx).Error(err, "Watching executor Jobs")
			}
		}()
	}
	go leaderelection.RunWhileLeader(ctx, client, leaderElectionKey, id, 15*time.Second, func(ctx context.Context) {
		factory := informers.NewSharedInformerFactory(clientset, 0)
		c, err := runcontroller.New(clientset, factory.Terrarun().V1alpha1().TerraformRuns(), exec, store, runcontroller.Options{
			CancelGrace: o.Executor.CancelGrace,
			Recorder:    recorder,
			OnApplied:   onApplied,
		})
		if err != nil {
			klog.FromContext(ctx).Error(err, "Building the run controller")
			return
		}
		handle.c.Store(c)
		factory.Start(ctx.Done())
		if err := c.Run(ctx, o.Executor.Workers); err != nil {
			klog.FromContext(ctx).Error(err, "Run controller")
		}
		handle.c.Store(nil)
		factory.Shutdown()
	})
	return nil
}
