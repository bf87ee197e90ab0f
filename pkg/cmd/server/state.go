package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/terrarun/terrarun/pkg/registry/terraformrun"
	"github.com/terrarun/terrarun/pkg/statestore"
)

// stateSweepInterval is how often the states of deleted namespaces are
// removed.
const stateSweepInterval = 10 * time.Minute

// newStateBackend is the state terrarun serves to the Job stages of runs
// that name no backend: kept in the server's etcd, keyed by the namespace's
// UID, imported once from the kubernetes backend's Secret where an older
// terrarun kept it, and removed some minutes after its namespace is.
func (o *ExecutorOptions) newStateBackend(ctx context.Context, config *genericapiserver.RecommendedConfig, etcd *genericoptions.EtcdOptions,
	client *clientv3.Client, kube kubernetes.Interface) (*terraformrun.StateBackend, error) {
	t, err := artifactTransformer(ctx, etcd)
	if err != nil {
		return nil, err
	}
	store := statestore.New(client, t, statestore.Limits{State: o.MaxStateBytes, Namespace: o.MaxNamespaceStateBytes, Versions: o.StateVersions})
	namespaces := config.SharedInformerFactory.Core().V1().Namespaces()
	lister := namespaces.Lister()
	_ = namespaces.Informer() // started with the factory
	uidOf := func(ctx context.Context, name string) (string, error) {
		if ns, err := lister.Get(name); err == nil {
			return string(ns.UID), nil
		}
		ns, err := kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return string(ns.UID), nil
	}
	exists := func(ctx context.Context, name, uid string) (bool, error) {
		ns, err := kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return string(ns.UID) == uid, nil
	}
	if err := config.AddPostStartHook("terrarun-state-sweeper", func(hook genericapiserver.PostStartHookContext) error {
		go wait.UntilWithContext(hook, func(ctx context.Context) {
			removed, err := store.Sweep(ctx, exists)
			if err != nil {
				klog.FromContext(ctx).Error(err, "Removing the states of deleted namespaces; trying again later")
			}
			for _, ns := range removed {
				klog.FromContext(ctx).Info("Removed the states of a deleted namespace", "namespace", ns)
			}
		}, stateSweepInterval)
		return nil
	}); err != nil {
		return nil, err
	}
	return &terraformrun.StateBackend{
		Store:        store,
		NamespaceUID: uidOf,
		Legacy: func(ctx context.Context, namespace, workspace string) ([]byte, string, error) {
			since, err := store.ServedSince(ctx)
			if err != nil {
				return nil, "", err
			}
			return legacyState(ctx, kube, namespace, workspace, since, store.Limits().State)
		},
	}, nil
}

// legacyState reads the state that the kubernetes backend kept for
// workspace, where terrarun's default backend put it before it served
// state: Secret tfstate-<workspace>-<workspace>, labeled by the backend,
// its "tfstate" key gzip-compressed, and created before since, when
// terrarun began to serve state. nil when there is none: a Secret made
// since then is no state terrarun's runs wrote, whoever made it.
func legacyState(ctx context.Context, kube kubernetes.Interface, namespace, workspace string, since time.Time, limit int64) ([]byte, string, error) {
	name := "tfstate-" + workspace + "-" + workspace
	secret, err := kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading Secret %s/%s, where the kubernetes backend kept the state before: %w", namespace, name, err)
	}
	if secret.Labels["app.kubernetes.io/managed-by"] != "terraform" || secret.Labels["tfstate"] != "true" {
		return nil, "", nil
	}
	if !secret.CreationTimestamp.Time.Before(since.Truncate(time.Second)) {
		klog.FromContext(ctx).Info("Not importing a state Secret made after terrarun began to serve state", "secret", klog.KObj(secret), "servedSince", since)
		return nil, "", nil
	}
	source := "Secret " + namespace + "/" + name
	zr, err := gzip.NewReader(bytes.NewReader(secret.Data["tfstate"]))
	if err != nil {
		return nil, "", fmt.Errorf("%s holds no gzip-compressed state: %w", source, err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, limit+1))
	if err != nil {
		return nil, "", fmt.Errorf("%s: decompressing the state: %w", source, err)
	}
	if int64(len(data)) > limit {
		return nil, "", fmt.Errorf("%s holds a state over the %d bytes a state may take (--max-state-bytes)", source, limit)
	}
	return data, source, nil
}
