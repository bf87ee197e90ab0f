package terraformworkspace

import (
	"context"
	"maps"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// ConfigMaps whose content is part of a workspace's hash. With
// Options.ConfigMaps (an informer of ConfigMaps' metadata: cluster mode),
// they are watched: a change of one re-syncs the workspaces that read it
// (configMapIndex), and its content is read again only when its
// resourceVersion changed (configMapCache). Without it (standalone, where
// the values are files), their content is read again every minute.

// configMapIndex indexes workspaces by the namespace/name of each ConfigMap
// their runs read.
const configMapIndex = "configMap"

func configMapsOf(obj any) ([]string, error) {
	ws, ok := obj.(*v1alpha1.TerraformWorkspace)
	if !ok {
		return nil, nil
	}
	names := configMapNames(&ws.Spec.Template)
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = ws.Namespace + "/" + n
	}
	return keys, nil
}

// watchConfigMaps re-syncs the workspaces that read a ConfigMap when it is
// added, changed or deleted, and forgets the content of a deleted one.
func (c *Controller) watchConfigMaps(informer cache.SharedIndexInformer) error {
	c.configMaps = &configMapCache{informer: informer, read: c.opts.ConfigMapData, data: map[string]cachedConfigMap{}}
	c.synced = append(c.synced, informer.HasSynced)
	changed := func(obj any) {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			utilruntime.HandleError(err)
			return
		}
		readers, err := c.dependents.ByIndex(configMapIndex, key)
		if err != nil {
			return // the index is added in New
		}
		for _, ws := range readers {
			c.enqueue(ws)
		}
	}
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: changed,
		UpdateFunc: func(old, obj any) {
			if o, err := meta.Accessor(old); err == nil {
				if n, err := meta.Accessor(obj); err == nil && o.GetResourceVersion() == n.GetResourceVersion() {
					return // a resync, not a change
				}
			}
			changed(obj)
		},
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				c.configMaps.forget(key)
			}
			changed(obj)
		},
	})
	return err
}

// ConfigMapResource is the resource of the informer Options.ConfigMaps
// watches.
var ConfigMapResource = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// configMapCache keeps the content of the ConfigMaps workspaces read, with
// the resourceVersion it was read at, as the informer of their metadata
// shows it.
type configMapCache struct {
	informer cache.SharedIndexInformer
	read     func(ctx context.Context, namespace, name string) (map[string]string, error)

	mu   sync.Mutex
	data map[string]cachedConfigMap
}

type cachedConfigMap struct {
	resourceVersion string
	data            map[string]string
}

// get returns the data of ConfigMap namespace/name: what was read at its
// current resourceVersion, or read now. One the informer does not know is
// not found; its creation re-syncs the workspaces that read it.
func (m *configMapCache) get(ctx context.Context, namespace, name string) (map[string]string, error) {
	key := namespace + "/" + name
	obj, exists, err := m.informer.GetStore().GetByKey(key)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
	}
	o, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	rv := o.GetResourceVersion()
	m.mu.Lock()
	cached, ok := m.data[key]
	m.mu.Unlock()
	if ok && cached.resourceVersion == rv {
		return maps.Clone(cached.data), nil
	}
	data, err := m.read(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	// Read at rv or later: a later change comes with its own event, which
	// reads it again.
	m.mu.Lock()
	m.data[key] = cachedConfigMap{resourceVersion: rv, data: maps.Clone(data)}
	m.mu.Unlock()
	return data, nil
}

func (m *configMapCache) forget(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.data, key)
}
