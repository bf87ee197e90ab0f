package job

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
)

// Provider plugin caches. With PluginCacheOptions.StorageClassName set, the
// stages of a run mount the plugin cache of its creator in its namespace: a
// ReadWriteMany PersistentVolumeClaim named after executor.PluginCacheKey,
// which the first stage that needs it creates and which outlives the runs.
// Init installs providers into it once; every later stage of that creator
// there, in any Job on any node, links them from it (an approved apply in a
// later Job downloads nothing). The runner serializes the inits that may
// write to it with a lock file in it (flock, which the volume must support).
//
// Never shared across creators (see executor.PluginCacheKey), and a claim of
// the cache's name is used only when it is terrarun's: labelled with the
// creator's key, with no data source and no selector, so that a claim made
// in its place cannot bring a volume filled with providers of someone
// else's choosing (see checkPluginCacheClaim).

// pluginCacheDir is where executor containers mount their plugin cache.
const pluginCacheDir = "/var/cache/terrarun/plugins"

// labelPluginCache marks a plugin cache's PersistentVolumeClaim with the
// key of the creator it caches for.
const labelPluginCache = "terrarun.dev/plugin-cache"

// DefaultPluginCacheSize is the storage each plugin cache requests.
var DefaultPluginCacheSize = resource.MustParse("5Gi")

// PluginCacheOptions configure the plugin caches of executor Jobs.
type PluginCacheOptions struct {
	// StorageClassName of the caches' claims, whose volumes must be
	// ReadWriteMany (a creator's stages run on any node at once), writable
	// by the executor's group 65532 (fsGroup, where the volume type honours
	// it) and support flock. Empty: no caches; every stage installs its
	// providers again.
	StorageClassName string
	// Size each cache requests. Default DefaultPluginCacheSize.
	Size resource.Quantity
}

// pluginCacheClaim is the claim of run's creator's plugin cache, as Start
// creates it, or nil when run's stages have none (no caches, or no creator).
func pluginCacheClaim(run *v1alpha1.TerraformRun, opts PluginCacheOptions) *corev1.PersistentVolumeClaim {
	key := executor.PluginCacheKey(run)
	if opts.StorageClassName == "" || key == "" {
		return nil
	}
	size := opts.Size
	if size.IsZero() {
		size = DefaultPluginCacheSize
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:      pluginCacheClaimName(key),
			Namespace: run.Namespace,
			Labels:    map[string]string{labelPluginCache: key, "app.kubernetes.io/managed-by": "terrarun"},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: ptr.To(opts.StorageClassName),
			VolumeMode:       ptr.To(corev1.PersistentVolumeFilesystem),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
}

// pluginCacheClaimName is the name of the claim of the plugin cache of the
// creator with executor.PluginCacheKey key.
func pluginCacheClaimName(key string) string { return "terrarun-plugin-cache-" + key }

// pluginCacheVolume is the volume of a stage's plugin cache.
func pluginCacheVolume(claimName string) corev1.VolumeSource {
	return corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName}}
}

// ensurePluginCache creates the claim of run's plugin cache, unless it
// exists and is terrarun's.
func (e *Executor) ensurePluginCache(ctx context.Context, run *v1alpha1.TerraformRun) error {
	want := pluginCacheClaim(run, e.opts.PluginCache)
	if want == nil {
		return nil
	}
	claims := e.client.CoreV1().PersistentVolumeClaims(want.Namespace)
	got, err := claims.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if _, err = claims.Create(ctx, want, metav1.CreateOptions{}); err == nil {
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the plugin cache PersistentVolumeClaim %s/%s: %w", want.Namespace, want.Name, err)
		}
		got, err = claims.Get(ctx, want.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("getting the plugin cache PersistentVolumeClaim %s/%s: %w", want.Namespace, want.Name, err)
	}
	return checkPluginCacheClaim(got, want)
}

// checkPluginCacheClaim refuses a claim of the cache's name that is not
// terrarun's: one without the creator's label, or one whose volume may hold
// what someone put there before terrarun's stages ever ran (a data source,
// which clones or populates it, or a selector, which picks an existing
// volume). Its storage class and size may differ: they may have changed
// since terrarun created it.
func checkPluginCacheClaim(got, want *corev1.PersistentVolumeClaim) error {
	var why string
	switch {
	case got.Labels[labelPluginCache] != want.Labels[labelPluginCache]:
		why = fmt.Sprintf("its label %s is %q, not %q", labelPluginCache, got.Labels[labelPluginCache], want.Labels[labelPluginCache])
	case got.Spec.DataSource != nil || got.Spec.DataSourceRef != nil:
		why = "it has a spec.dataSource, which fills the volume before terrarun uses it"
	case got.Spec.Selector != nil:
		why = "it has a spec.selector, which binds it to an existing volume"
	case got.DeletionTimestamp != nil:
		return fmt.Errorf("the plugin cache PersistentVolumeClaim %s/%s is being deleted (pods still use it); the stage starts once it is gone and terrarun has created it again", got.Namespace, got.Name)
	default:
		return nil
	}
	return fmt.Errorf("the PersistentVolumeClaim %s/%s, where this run's plugin cache belongs, is not the one terrarun creates (%s): providers in it could run with this run's credentials. "+
		"Delete it (terrarun creates it again), and check who may create PersistentVolumeClaims in namespace %s", got.Namespace, got.Name, why, got.Namespace)
}
