package terraformworkspace

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned/fake"
	"github.com/terrarun/terrarun/pkg/generated/informers/externalversions"
)

// configMapMeta is the metadata of ConfigMap default/name at resourceVersion rv.
func configMapMeta(name, rv string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, ResourceVersion: rv},
	}
}

// TestWatchedConfigMaps: with their metadata watched, a ConfigMap's content
// is read once per resourceVersion, a ConfigMap the informer does not know
// is not found, and a change of one re-syncs exactly the workspaces whose
// runs read it.
func TestWatchedConfigMaps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reader := func(name string) *v1alpha1.TerraformWorkspace {
		return &v1alpha1.TerraformWorkspace{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: v1alpha1.TerraformWorkspaceSpec{Template: v1alpha1.TerraformRunSpec{
				Source: v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Name: "code"}},
				Variables: []v1alpha1.Variable{{Name: "size", ValueFrom: &v1alpha1.VariableSource{
					ConfigMapKeyRef: &v1alpha1.KeySelector{Name: "settings", Key: "size"},
				}}},
			}},
		}
	}
	other := &v1alpha1.TerraformWorkspace{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "other"}}

	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	meta := metadatafake.NewSimpleMetadataClient(scheme, configMapMeta("settings", "1"))
	configMaps := metadatainformer.NewSharedInformerFactory(meta, 0).ForResource(ConfigMapResource).Informer()
	reads := map[string]int{}
	client := fake.NewSimpleClientset()
	factory := externalversions.NewSharedInformerFactory(client, 0)
	workspaces := factory.Terrarun().V1alpha1().TerraformWorkspaces()
	ctrl, err := New(client, workspaces, factory.Terrarun().V1alpha1().TerraformRuns(), Options{
		ConfigMaps: configMaps,
		ConfigMapData: func(_ context.Context, namespace, name string) (map[string]string, error) {
			reads[name]++
			return map[string]string{"size": "2"}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ws := range []*v1alpha1.TerraformWorkspace{reader("a"), reader("b"), other} {
		if err := workspaces.Informer().GetIndexer().Add(ws); err != nil {
			t.Fatal(err)
		}
	}
	go configMaps.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), configMaps.HasSynced) {
		t.Fatal("the ConfigMaps' informer did not sync")
	}
	// The informer's add of "settings" re-synced a and b.
	drain := func() map[string]bool {
		t.Helper()
		got := map[string]bool{}
		for ctrl.queue.Len() > 0 {
			key, _ := ctrl.queue.Get()
			got[key] = true
			ctrl.queue.Done(key)
			ctrl.queue.Forget(key)
		}
		return got
	}
	waitQueued := func(want ...string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for ctrl.queue.Len() < len(want) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		got := drain()
		for _, k := range want {
			if !got[k] {
				t.Errorf("workspace %s was not re-synced (queued %v)", k, got)
			}
		}
		if got["default/other"] || len(got) != len(want) {
			t.Errorf("queued %v, want exactly %v", got, want)
		}
	}
	waitQueued("default/a", "default/b")

	for range 3 {
		data, err := ctrl.configMaps.get(ctx, "default", "settings")
		if err != nil || data["size"] != "2" {
			t.Fatalf("get = %v, %v", data, err)
		}
	}
	if reads["settings"] != 1 {
		t.Errorf("the content of one resourceVersion was read %d times, want once", reads["settings"])
	}
	if _, err := ctrl.configMaps.get(ctx, "default", "code"); !apierrors.IsNotFound(err) {
		t.Errorf("a ConfigMap the informer does not know: %v, want NotFound", err)
	}

	// A change: the readers re-sync, and its content is read again.
	if _, err := meta.Resource(ConfigMapResource).Namespace("default").(metadatafake.MetadataClient).UpdateFake(configMapMeta("settings", "2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitQueued("default/a", "default/b")
	if _, err := ctrl.configMaps.get(ctx, "default", "settings"); err != nil {
		t.Fatal(err)
	}
	if reads["settings"] != 2 {
		t.Errorf("after a change the content was read %d times in all, want twice", reads["settings"])
	}
}
