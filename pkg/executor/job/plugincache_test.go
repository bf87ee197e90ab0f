package job

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
)

func cachedOptions() JobOptions {
	o := testOptions()
	o.PluginCache = PluginCacheOptions{StorageClassName: "shared-rwx"}
	return o
}

func runBy(user string) *v1alpha1.TerraformRun {
	run := testRun()
	run.Spec.Creator = &v1alpha1.Creator{Username: user}
	return run
}

// TestPluginCacheMounted: both stages of a run mount its creator's cache,
// writable, and the stage uses it; other creators get other caches, and a
// run without a creator, or an executor without caches, gets none.
func TestPluginCacheMounted(t *testing.T) {
	claimOf := func(run *v1alpha1.TerraformRun, st v1alpha1.StageName, opts JobOptions) string {
		job, _, spec := build(t, run, st, opts)
		pod := &job.Spec.Template.Spec
		m := mountAt(&pod.Containers[0], pluginCacheDir)
		if m == nil {
			if spec.PluginCacheDir != "" {
				t.Errorf("%s stage: pluginCacheDir %q without a mount", st, spec.PluginCacheDir)
			}
			return ""
		}
		if m.ReadOnly {
			t.Errorf("%s stage: the plugin cache is mounted read-only: init cannot install into it", st)
		}
		if spec.PluginCacheDir != pluginCacheDir {
			t.Errorf("%s stage: pluginCacheDir = %q, want %q", st, spec.PluginCacheDir, pluginCacheDir)
		}
		v := volumeAt(t, pod, pluginCacheDir)
		if v.PersistentVolumeClaim == nil {
			t.Fatalf("%s stage: the plugin cache is %+v, want a PersistentVolumeClaim", st, v.VolumeSource)
		}
		return v.PersistentVolumeClaim.ClaimName
	}
	alice := runBy("alice")
	plan, apply := claimOf(alice, v1alpha1.StagePlan, cachedOptions()), claimOf(alice, v1alpha1.StageApply, cachedOptions())
	if want := "terrarun-plugin-cache-" + executor.PluginCacheKey(alice); plan != want || apply != want {
		t.Errorf("the stages mount %q and %q, want %q", plan, apply, want)
	}
	if bob := claimOf(runBy("bob"), v1alpha1.StagePlan, cachedOptions()); bob == plan || bob == "" {
		t.Errorf("bob's run mounts %q, alice's %q: each creator needs a cache of its own", bob, plan)
	}
	if got := claimOf(testRun(), v1alpha1.StagePlan, cachedOptions()); got != "" {
		t.Errorf("a run without a creator mounts cache %q", got)
	}
	if got := claimOf(alice, v1alpha1.StagePlan, testOptions()); got != "" {
		t.Errorf("without PluginCache, the run mounts cache %q", got)
	}
}

// TestStartCreatesPluginCache: Start creates the creator's cache claim
// before the Job, once, and adopts it afterwards.
func TestStartCreatesPluginCache(t *testing.T) {
	client := fake.NewClientset()
	opts := cachedOptions()
	opts.PluginCache.Size = resource.MustParse("2Gi")
	e := NewExecutor(client, opts)
	ctx := context.Background()
	run := runBy("alice")
	for _, st := range []v1alpha1.StageName{v1alpha1.StagePlan, v1alpha1.StageApply} {
		if _, err := e.Start(ctx, executor.Execution{Run: run, Stage: st, Attempt: 1, PlanDigest: "sha256:abc"}); err != nil {
			t.Fatalf("Start %s: %v", st, err)
		}
	}
	claims, err := client.CoreV1().PersistentVolumeClaims("team-a").List(ctx, metav1.ListOptions{})
	if err != nil || len(claims.Items) != 1 {
		t.Fatalf("claims: %v, %d; want 1", err, len(claims.Items))
	}
	c := claims.Items[0]
	if c.Name != "terrarun-plugin-cache-"+executor.PluginCacheKey(run) || c.Labels[labelPluginCache] != executor.PluginCacheKey(run) {
		t.Errorf("claim %s, labels %v", c.Name, c.Labels)
	}
	if ptr.Deref(c.Spec.StorageClassName, "") != "shared-rwx" || len(c.Spec.AccessModes) != 1 || c.Spec.AccessModes[0] != corev1.ReadWriteMany {
		t.Errorf("claim spec: class %v, modes %v; want shared-rwx, ReadWriteMany", c.Spec.StorageClassName, c.Spec.AccessModes)
	}
	if got := c.Spec.Resources.Requests[corev1.ResourceStorage]; got.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("claim requests %s, want 2Gi", got.String())
	}
	if len(c.OwnerReferences) != 0 {
		t.Errorf("the cache is owned by %v: it must outlive the run", c.OwnerReferences)
	}
	var creates []string
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" {
			creates = append(creates, a.GetResource().Resource)
		}
	}
	if len(creates) < 2 || creates[0] != "persistentvolumeclaims" || strings.Count(strings.Join(creates, ","), "persistentvolumeclaims") != 1 {
		t.Errorf("creates = %v, want the claim first, once", creates)
	}
}

// TestStartRefusesForeignPluginCache is the attack: whoever may create
// PersistentVolumeClaims in the namespace creates, before alice's first run,
// the claim where her cache belongs, on a volume filled with a provider of
// their choice. Start must not mount it (the provider would run with her
// run's credentials), and must say what to do.
func TestStartRefusesForeignPluginCache(t *testing.T) {
	run := runBy("alice")
	own := pluginCacheClaim(run, cachedOptions().PluginCache)
	for name, forge := range map[string]func(*corev1.PersistentVolumeClaim){
		"no label": func(c *corev1.PersistentVolumeClaim) { c.Labels = nil },
		"other label": func(c *corev1.PersistentVolumeClaim) {
			c.Labels[labelPluginCache] = executor.PluginCacheKey(runBy("mallory"))
		},
		"data source": func(c *corev1.PersistentVolumeClaim) {
			c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "providers-of-mallory"}
		},
		"data source ref": func(c *corev1.PersistentVolumeClaim) {
			c.Spec.DataSourceRef = &corev1.TypedObjectReference{Kind: "VolumeSnapshot", Name: "providers-of-mallory", APIGroup: ptr.To("snapshot.storage.k8s.io")}
		},
		"selector": func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"filled-by": "mallory"}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			forged := own.DeepCopy()
			forge(forged)
			client := fake.NewClientset(forged)
			e := NewExecutor(client, cachedOptions())
			_, err := e.Start(context.Background(), executor.Execution{Run: run, Stage: v1alpha1.StagePlan, Attempt: 1})
			if err == nil || !strings.Contains(err.Error(), "is not the one terrarun creates") || !strings.Contains(err.Error(), "Delete it") {
				t.Fatalf("Start = %v, want a refusal that says to delete the claim", err)
			}
			for _, a := range client.Actions() {
				if a.GetVerb() == "create" {
					t.Errorf("Start created %s after finding a forged cache", a.GetResource().Resource)
				}
			}
		})
	}

	// Its storage class and size may have changed since terrarun made it.
	resized := own.DeepCopy()
	resized.Spec.StorageClassName = ptr.To("old-class")
	resized.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("50Gi")
	e := NewExecutor(fake.NewClientset(resized), cachedOptions())
	if _, err := e.Start(context.Background(), executor.Execution{Run: run, Stage: v1alpha1.StagePlan, Attempt: 1}); err != nil {
		t.Errorf("Start with terrarun's cache of another class and size: %v", err)
	}

	// One being deleted is waited for.
	deleting := own.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}
	deleting.Finalizers = []string{"kubernetes.io/pvc-protection"}
	e = NewExecutor(fake.NewClientset(deleting), cachedOptions())
	if _, err := e.Start(context.Background(), executor.Execution{Run: run, Stage: v1alpha1.StagePlan, Attempt: 1}); err == nil || !strings.Contains(err.Error(), "is being deleted") {
		t.Errorf("Start with the cache being deleted = %v, want an error that says so", err)
	}
}

// TestStatusAcrossOptionChanges: an operator changes the executor's options
// while stages run (turns the plugin cache on or off, spreads executor pods,
// changes the grace period or the token's lifetime). A Job built before is
// still terrarun's: its stage is running, not forged.
func TestStatusAcrossOptionChanges(t *testing.T) {
	ctx := context.Background()
	ex := executor.Execution{Run: runBy("alice"), Stage: v1alpha1.StagePlan, Attempt: 1}
	changed := cachedOptions()
	changed.SpreadTopologyKey = "topology.kubernetes.io/zone"
	changed.GracePeriod = 90 * time.Second
	changed.TokenExpiration = 3 * time.Hour
	for name, opts := range map[string][2]JobOptions{
		"options changed": {testOptions(), changed},
		"changed back":    {changed, testOptions()},
	} {
		t.Run(name, func(t *testing.T) {
			before, _, err := BuildJob(ex, opts[0])
			if err != nil {
				t.Fatal(err)
			}
			before.Status = batchv1.JobStatus{Active: 1}
			// As the API server stores it: with the defaults it fills in.
			for _, v := range before.Spec.Template.Spec.Volumes {
				if v.Projected != nil && v.Projected.DefaultMode == nil {
					v.Projected.DefaultMode = ptr.To[int32](0o644)
				}
			}
			st, err := NewExecutor(fake.NewClientset(before), opts[1]).Status(ctx, ex)
			if err != nil || st.State != executor.StateRunning {
				t.Errorf("Status of the stage's Job after its options changed = %+v, %v; want Running", st, err)
			}
		})
	}
}

// TestStartAcrossOptionChanges: a Start of an execution whose Job and stage
// Secret were made before the options changed (the replica that made them
// was replaced by one with the new options before it recorded the stage)
// adopts them; the Job, once gone, is reported lost, not forged.
func TestStartAcrossOptionChanges(t *testing.T) {
	ctx := context.Background()
	ex := executor.Execution{Run: runBy("alice"), Stage: v1alpha1.StagePlan, Attempt: 1}
	changed := cachedOptions()
	changed.SpreadTopologyKey = "kubernetes.io/hostname"
	for name, opts := range map[string][2]JobOptions{
		"cache turned on":  {testOptions(), changed},
		"cache turned off": {changed, testOptions()},
	} {
		t.Run(name, func(t *testing.T) {
			job, secret, err := BuildJob(ex, opts[0])
			if err != nil {
				t.Fatal(err)
			}
			client := fake.NewClientset(job, secret)
			e := NewExecutor(client, opts[1])
			if _, err := e.Start(ctx, ex); err != nil {
				t.Fatalf("Start after the options changed: %v", err)
			}
			if err := client.BatchV1().Jobs(job.Namespace).Delete(ctx, job.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if st, err := e.Status(ctx, ex); err != nil || st.Reason != executor.ReasonExecutorLost {
				t.Errorf("Status with the Job gone = %+v, %v; want ExecutorLost", st, err)
			}
		})
	}
	// But not a stage Secret whose plugin cache is elsewhere.
	_, secret, err := BuildJob(ex, changed)
	if err != nil {
		t.Fatal(err)
	}
	secret.Data[StageKey] = []byte(strings.Replace(string(secret.Data[StageKey]), pluginCacheDir, "/usr/local/bin", 1))
	if _, err := NewExecutor(fake.NewClientset(secret), changed).Start(ctx, ex); err == nil || !strings.Contains(err.Error(), "data differs") {
		t.Errorf("Start with a stage Secret that puts the plugin cache over the executor: %v, want refused", err)
	}
}

// TestStartForgedPluginCache: a Job that mounts a plugin cache is terrarun's
// only when the cache is its creator's, where terrarun mounts it.
func TestStartForgedPluginCache(t *testing.T) {
	ctx := context.Background()
	ex := executor.Execution{Run: runBy("alice"), Stage: v1alpha1.StagePlan, Attempt: 1}
	built, _, err := BuildJob(ex, cachedOptions())
	if err != nil {
		t.Fatal(err)
	}
	cache := func(j *batchv1.Job) (*corev1.Volume, *corev1.VolumeMount) {
		spec := &j.Spec.Template.Spec
		for i := range spec.Volumes {
			if spec.Volumes[i].Name == volumePluginCache {
				for k := range spec.Containers[0].VolumeMounts {
					if spec.Containers[0].VolumeMounts[k].Name == volumePluginCache {
						return &spec.Volumes[i], &spec.Containers[0].VolumeMounts[k]
					}
				}
			}
		}
		t.Fatal("the Job mounts no plugin cache")
		return nil, nil
	}
	for name, forge := range map[string]func(j *batchv1.Job){
		"bob's cache": func(j *batchv1.Job) {
			v, _ := cache(j)
			v.PersistentVolumeClaim.ClaimName = "terrarun-plugin-cache-" + executor.PluginCacheKey(runBy("bob"))
		},
		"the cache over the executor": func(j *batchv1.Job) {
			_, m := cache(j)
			m.MountPath = "/usr/local/bin"
		},
		"the cache read-only": func(j *batchv1.Job) {
			v, _ := cache(j)
			v.PersistentVolumeClaim.ReadOnly = true
		},
	} {
		t.Run(name, func(t *testing.T) {
			forged := built.DeepCopy()
			forge(forged)
			// With the cache on, and with it off since.
			for _, opts := range []JobOptions{cachedOptions(), testOptions()} {
				st, err := NewExecutor(fake.NewClientset(forged), opts).Status(ctx, ex)
				if err != nil || st.Reason != executor.ReasonForged {
					t.Errorf("Status of a Job with %s (cache %q) = %+v, %v; want Forged", name, opts.PluginCache.StorageClassName, st, err)
				}
			}
		})
	}
}
