package terraformworkspace

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/controller/reconcile"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
	informers "github.com/terrarun/terrarun/pkg/generated/informers/externalversions/terrarun/v1alpha1"
	listers "github.com/terrarun/terrarun/pkg/generated/listers/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runrules"
)

const (
	// destroyFinalizer mirrors the registry's: the workspace waits for its
	// Destroy run.
	destroyFinalizer = "terrarun.dev/destroy"
	// defaultHistoryLimit is how many succeeded, and how many other
	// finished, runs a workspace keeps unless spec.historyLimits says.
	defaultHistoryLimit = 5
	// destroyBackoff is the wait before the first retry of a failed Destroy
	// run; it doubles with each failure, up to maxDestroyBackoff.
	destroyBackoff    = 30 * time.Second
	maxDestroyBackoff = 10 * time.Minute
)

// Reasons of the workspace's conditions.
const (
	ReasonApplied        = "Applied"
	ReasonRunning        = "RunInProgress"
	ReasonWaiting        = "WaitingForRun"
	ReasonRunFailed      = "RunFailed"
	ReasonSuspended      = "Suspended"
	ReasonNoChanges      = "NoChanges"
	ReasonChangesFound   = "ChangesFound"
	ReasonSuperseded     = "Superseded"
	ReasonDestroyRunning = "DestroyInProgress"
	ReasonDestroyFailed  = "DestroyFailed"
	// ReasonDeleting: Ready is False while a deleted workspace destroys
	// what it manages (see the Destroying condition).
	ReasonDeleting        = "Deleting"
	ReasonRunCreateFailed = "RunCreateFailed"
	// ReasonRunNameTaken: the workspace's next run name is another's run.
	ReasonRunNameTaken = "RunNameTaken"
	// ReasonNamespaceTerminating: the workspace's namespace is being
	// deleted, and it went without destroying its resources.
	ReasonNamespaceTerminating = "NamespaceTerminating"
	ReasonDependencyNotReady   = "DependencyNotReady"
	ReasonConfigMapUnreadable  = "ConfigMapUnreadable"
)

// Options tune the controller.
type Options struct {
	// Recorder records Events on workspaces; nil discards them.
	Recorder record.EventRecorder
	// Clock is the controller's clock; nil means the real one.
	Clock clock.Clock
	// PublishOutputs writes the outputs of run, the workspace's last
	// successful apply, to the Secret spec.outputsSecret names (cluster
	// mode); nil where there is no cluster.
	PublishOutputs func(ctx context.Context, ws *v1alpha1.TerraformWorkspace, run *v1alpha1.TerraformRun) error
	// ConfigMapData reads the data of a ConfigMap that a workspace's runs
	// read, whose content is part of the hash; nil ignores their content.
	ConfigMapData func(ctx context.Context, namespace, name string) (map[string]string, error)
	// ConfigMaps, when set, is an informer of the ConfigMaps' metadata
	// (ConfigMapResource): the ConfigMaps are watched rather than read
	// again every minute (configmaps.go).
	ConfigMaps cache.SharedIndexInformer
	// Sources, when set, reads the Flux sources that workspaces name
	// (cluster mode): a workspace follows its source's revision
	// (sources.go).
	Sources Sources
}

// configMapRecheck is how often the ConfigMaps a workspace reads are read
// again when they are not watched, or could not be read, and its interval
// is not shorter.
const configMapRecheck = time.Minute

// Controller reconciles TerraformWorkspaces.
type Controller struct {
	client     versioned.Interface
	workspaces listers.TerraformWorkspaceLister
	// dependents indexes workspaces by the workspaces they depend on.
	dependents cache.Indexer
	runs       listers.TerraformRunLister
	// configMaps holds the content of watched ConfigMaps; nil when they are
	// not watched.
	configMaps *configMapCache
	synced     []cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[string]
	opts       Options
}

// New returns a controller fed by the workspace and run informers.
func New(client versioned.Interface, workspaces informers.TerraformWorkspaceInformer, runs informers.TerraformRunInformer, opts Options) (*Controller, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Recorder == nil {
		opts.Recorder = &record.FakeRecorder{}
	}
	c := &Controller{
		client:     client,
		workspaces: workspaces.Lister(),
		dependents: workspaces.Informer().GetIndexer(),
		runs:       runs.Lister(),
		synced:     []cache.InformerSynced{workspaces.Informer().HasSynced, runs.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "terraformworkspaces"}),
		opts: opts,
	}
	if err := workspaces.Informer().AddIndexers(cache.Indexers{dependsOnIndex: dependsOn, configMapIndex: configMapsOf, sourceIndex: sourceOf}); err != nil {
		return nil, err
	}
	if opts.Sources != nil {
		c.watchSources(opts.Sources)
	}
	if opts.ConfigMaps != nil && opts.ConfigMapData != nil {
		if err := c.watchConfigMaps(opts.ConfigMaps); err != nil {
			return nil, err
		}
	}
	// A workspace's change is also its dependents'.
	if _, err := workspaces.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueWithDependents,
		UpdateFunc: func(_, obj any) { c.enqueueWithDependents(obj) },
		DeleteFunc: c.enqueueWithDependents,
	}); err != nil {
		return nil, err
	}
	// A run's change is its workspace's, when it is one the workspace acts
	// on.
	if _, err := runs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueWorkspaceOf,
		UpdateFunc: func(old, obj any) {
			if o, n, ok := runPair(old, obj); !ok || mattersToWorkspace(o, n) {
				c.enqueueWorkspaceOf(obj)
			}
		},
		DeleteFunc: c.enqueueWorkspaceOfDeleted,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) enqueueWithDependents(obj any) {
	c.enqueue(obj)
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	ws, ok := obj.(*v1alpha1.TerraformWorkspace)
	if !ok {
		return
	}
	dependents, err := c.dependents.ByIndex(dependsOnIndex, ws.Namespace+"/"+ws.Name)
	if err != nil {
		return // the index is added in New
	}
	for _, d := range dependents {
		c.enqueue(d)
	}
}

// dependsOnIndex indexes workspaces by the namespace/name of each workspace
// they depend on.
const dependsOnIndex = "dependsOn"

func dependsOn(obj any) ([]string, error) {
	ws, ok := obj.(*v1alpha1.TerraformWorkspace)
	if !ok {
		return nil, nil
	}
	keys := make([]string, 0, len(ws.Spec.DependsOn))
	for _, d := range ws.Spec.DependsOn {
		keys = append(keys, ws.Namespace+"/"+d.Name)
	}
	return keys, nil
}

// runPair returns the runs of an update event.
func runPair(old, obj any) (*v1alpha1.TerraformRun, *v1alpha1.TerraformRun, bool) {
	o, ok1 := old.(*v1alpha1.TerraformRun)
	n, ok2 := obj.(*v1alpha1.TerraformRun)
	return o, n, ok1 && ok2
}

// mattersToWorkspace says whether a change of a run, from o to n, is one its
// workspace acts on: its phase (which ends it, and with it records its plan,
// outputs and applied hash), the revision it resolved, its labels and
// annotations (whose workspace's it is, and why), or its deletion. Stage
// records, log progress and conditions within a phase are not.
func mattersToWorkspace(o, n *v1alpha1.TerraformRun) bool {
	return runrules.Phase(o) != runrules.Phase(n) ||
		revisionOf(o) != revisionOf(n) ||
		(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) ||
		!maps.Equal(o.Labels, n.Labels) || !maps.Equal(o.Annotations, n.Annotations)
}

func (c *Controller) enqueueWorkspaceOf(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	run, ok := obj.(*v1alpha1.TerraformRun)
	if !ok {
		return
	}
	if ws := run.Labels[v1alpha1.LabelWorkspace]; ws != "" {
		c.queue.Add(run.Namespace + "/" + ws)
	}
}

// enqueueWorkspaceOfDeleted enqueues the workspace of a deleted run and, for
// a run that was no workspace's but was named like one's run,
// <workspace>-<n>, that workspace: the run held it up (nameTaken).
func (c *Controller) enqueueWorkspaceOfDeleted(obj any) {
	c.enqueueWorkspaceOf(obj)
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	run, ok := obj.(*v1alpha1.TerraformRun)
	if !ok || run.Labels[v1alpha1.LabelWorkspace] != "" {
		return
	}
	if i := strings.LastIndexByte(run.Name, '-'); i > 0 && seq(run.Name[:i], run.Name) > 0 {
		if _, err := c.workspaces.TerraformWorkspaces(run.Namespace).Get(run.Name[:i]); err == nil {
			c.queue.Add(run.Namespace + "/" + run.Name[:i])
		}
	}
}

// Run runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting the workspace controller")
	if !cache.WaitForNamedCacheSync("terraformworkspaces", ctx.Done(), c.synced...) {
		return fmt.Errorf("the terraformworkspaces and terraformruns caches did not sync")
	}
	reconcile.Start(ctx, c.queue, workers, c.sync, "Reconciling workspace", "workspace")
	<-ctx.Done()
	logger.Info("Stopping the workspace controller")
	return nil
}

// history is a workspace's runs, oldest first.
type history []*v1alpha1.TerraformRun

// active is the run under way, if any.
func (h history) active() *v1alpha1.TerraformRun {
	for i := len(h) - 1; i >= 0; i-- {
		if !runrules.Finished(h[i]) {
			return h[i]
		}
	}
	return nil
}

// newest is the newest run matching ok, if any.
func (h history) newest(ok func(*v1alpha1.TerraformRun) bool) *v1alpha1.TerraformRun {
	for i := len(h) - 1; i >= 0; i-- {
		if ok(h[i]) {
			return h[i]
		}
	}
	return nil
}

func trigger(run *v1alpha1.TerraformRun) v1alpha1.Trigger {
	return v1alpha1.Trigger(run.Annotations[v1alpha1.AnnotationTrigger])
}

// seq is the number in a workspace run's name, <workspace>-<seq>.
func seq(wsName, runName string) int64 {
	n, err := strconv.ParseInt(strings.TrimPrefix(runName, wsName+"-"), 10, 64)
	if err != nil || !strings.HasPrefix(runName, wsName+"-") {
		return 0
	}
	return n
}

func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	cached, err := c.workspaces.TerraformWorkspaces(namespace).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return 0, err
	}
	all, err := c.runs.TerraformRuns(namespace).List(labels.SelectorFromSet(labels.Set{v1alpha1.LabelWorkspace: name}))
	if err != nil {
		return 0, err
	}
	var h history
	var uid string
	if cached != nil {
		uid = string(cached.UID)
	}
	for _, run := range all {
		owner := metav1.GetControllerOf(run)
		if owner == nil || owner.Kind != "TerraformWorkspace" || owner.Name != name {
			continue // labeled by someone else: not ours to act on
		}
		if string(owner.UID) != uid {
			// A run of a deleted workspace of the same name.
			if err := c.deleteRun(ctx, run); err != nil {
				return 0, err
			}
			continue
		}
		h = append(h, run)
	}
	if cached == nil {
		return 0, nil
	}
	if behind, err := c.runsCacheBehind(ctx, cached, h); err != nil || behind {
		return runsCacheRecheck, err
	}
	slices.SortFunc(h, func(a, b *v1alpha1.TerraformRun) int { return int(seq(name, a.Name) - seq(name, b.Name)) })
	ws := cached.DeepCopy()
	r := &reconciler{c: c, ws: ws, h: h, now: c.opts.Clock.Now()}
	after, err := r.reconcile(ctx)
	// What was observed is written even when acting on it failed.
	if !apiequality.Semantic.DeepEqual(ws.Status, cached.Status) && !r.gone {
		if _, uerr := c.client.TerrarunV1alpha1().TerraformWorkspaces(namespace).UpdateStatus(ctx, ws, metav1.UpdateOptions{}); uerr != nil && err == nil {
			err = uerr
		}
	}
	return after, err
}

// runsCacheRecheck is when a workspace whose runs cache is behind is looked
// at again, should the run's own event not bring it back first.
const runsCacheRecheck = 500 * time.Millisecond

// runsCacheBehind reports whether the runs h, from the cache, lack the last
// run that the workspace's status names: an earlier sync created it, and its
// status write came back through the workspaces' watch before the run came
// through the runs'. Acting on that history would create a second run and
// take the status back. A last run that no longer exists (deleted) is not
// waited for.
func (c *Controller) runsCacheBehind(ctx context.Context, ws *v1alpha1.TerraformWorkspace, h history) (bool, error) {
	last := ws.Status.LastRun
	if last == "" || slices.ContainsFunc(h, func(run *v1alpha1.TerraformRun) bool { return run.Name == last }) {
		return false, nil
	}
	run, err := c.client.TerrarunV1alpha1().TerraformRuns(ws.Namespace).Get(ctx, last, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	// Only a run the runs cache will show: labelled and controlled as ours.
	return run.Labels[v1alpha1.LabelWorkspace] == ws.Name && metav1.IsControlledBy(run, ws), nil
}

func (c *Controller) deleteRun(ctx context.Context, run *v1alpha1.TerraformRun) error {
	err := c.client.TerrarunV1alpha1().TerraformRuns(run.Namespace).Delete(ctx, run.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &run.UID},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// reconciler is one sync of one workspace.
type reconciler struct {
	c   *Controller
	ws  *v1alpha1.TerraformWorkspace
	h   history
	now time.Time
	// gone is set when the workspace's finalizer was removed: it is deleted.
	gone bool
	// configMaps is the digest of the ConfigMaps the runs read.
	configMaps string
}

func (r *reconciler) setCondition(typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&r.ws.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: r.ws.Generation,
	})
}

func (r *reconciler) reconcile(ctx context.Context) (time.Duration, error) {
	ws, st := r.ws, &r.ws.Status
	spec := runSpec(ws, v1alpha1.OperationApply, r.lastApplied)
	read := r.c.opts.ConfigMapData
	if r.c.configMaps != nil {
		read = r.c.configMaps.get
	}
	digest, err := configMapDigest(ctx, &spec, ws.Namespace, read)
	if err != nil && ws.DeletionTimestamp == nil {
		r.setCondition(v1alpha1.WorkspaceConditionStalled, metav1.ConditionTrue, ReasonConfigMapUnreadable, err.Error()+"; create it, or fix the reference")
		return configMapRecheck, nil
	}
	r.configMaps = digest
	hash := Hash(spec, r.observedRevision(&spec), digest)
	st.DesiredHash = hash
	st.ObservedGeneration = ws.Generation
	r.observeResults()

	if ws.DeletionTimestamp != nil {
		return r.reconcileDeletion(ctx)
	}
	if err := r.publishOutputs(ctx); err != nil {
		return 0, err
	}

	active := r.h.active()
	if active != nil {
		st.CurrentRun = active.Name
		if active.Status.Phase == v1alpha1.RunPhaseAwaitingApproval && runHash(active) != hash &&
			trigger(active) != v1alpha1.TriggerDriftCheck {
			// A newer spec supersedes a plan nobody approved yet.
			if err := r.discard(ctx, active, fmt.Sprintf("Superseded: workspace %s changed since this plan was made; a run of its current spec follows.", ws.Name)); err != nil {
				return 0, err
			}
			r.c.opts.Recorder.Eventf(ws, "Normal", ReasonSuperseded, "Discarded run %s, superseded by the workspace's current spec", active.Name)
		}
		r.setCondition(v1alpha1.WorkspaceConditionReconciling, metav1.ConditionTrue, ReasonRunning, fmt.Sprintf("Run %s is %s.", active.Name, runrules.Phase(active)))
		r.setReady(hash)
		return 0, r.prune(ctx)
	}
	st.CurrentRun = ""
	r.setCondition(v1alpha1.WorkspaceConditionReconciling, metav1.ConditionFalse, ReasonWaiting, "No run is under way.")

	if ws.Spec.Suspend {
		r.setCondition(v1alpha1.WorkspaceConditionReconciling, metav1.ConditionFalse, ReasonSuspended, "The workspace is suspended: it starts no run.")
		r.setReady(hash)
		return 0, r.prune(ctx)
	}

	newest := r.h.newest(func(*v1alpha1.TerraformRun) bool { return true })
	lastDrift := r.h.newest(func(run *v1alpha1.TerraformRun) bool { return trigger(run) == v1alpha1.TriggerDriftCheck })
	interval := checkInterval(&ws.Spec)
	var op v1alpha1.Operation
	var why v1alpha1.Trigger
	switch {
	case st.RerunRequests > st.ObservedRerunRequests:
		op, why = v1alpha1.OperationApply, v1alpha1.TriggerRerun
	case hash != st.LastAppliedHash:
		if newest != nil && runHash(newest) == hash && newest.Status.Phase != v1alpha1.RunPhaseSucceeded &&
			(interval == 0 || r.now.Before(completion(newest).Add(interval))) {
			// The current spec's run did not succeed: wait for a change, a
			// rerun, or the next interval, rather than fail in a loop.
			msg := fmt.Sprintf("Run %s of the current spec ended %s: %s Change the spec or rerun the workspace to try again.", newest.Name, newest.Status.Phase, newest.Status.Message)
			r.setCondition(v1alpha1.WorkspaceConditionStalled, metav1.ConditionTrue, ReasonRunFailed, msg)
			r.setReady(hash)
			if interval > 0 {
				return completion(newest).Add(interval).Sub(r.now), r.prune(ctx)
			}
			return 0, r.prune(ctx)
		}
		op, why = v1alpha1.OperationApply, v1alpha1.TriggerSpecChange
		if st.LastAppliedHash != "" && Hash(spec, st.LastAppliedRevision, digest) == st.LastAppliedHash {
			// The same spec at another revision: the git ref or the
			// OCI tag moved.
			why = v1alpha1.TriggerNewRevision
		} else if r.upstreamChangedOnly(digest) {
			why = v1alpha1.TriggerUpstreamChanged
		}
	case ws.Spec.DriftPolicy == v1alpha1.DriftPolicyApply && lastDrift != nil && lastDrift == newest && hasChanges(lastDrift):
		op, why = v1alpha1.OperationApply, v1alpha1.TriggerDriftRepair
	case interval > 0 && st.NextDriftCheck != nil && !r.now.Before(st.NextDriftCheck.Time):
		op, why = v1alpha1.OperationPlan, v1alpha1.TriggerDriftCheck
	}
	if why != "" {
		if msg := r.dependenciesPending(); msg != "" {
			r.setCondition(v1alpha1.WorkspaceConditionReconciling, metav1.ConditionFalse, ReasonDependencyNotReady, msg)
			r.setReady(hash)
			return 0, r.prune(ctx)
		}
		run, err := r.createRun(ctx, op, why)
		if err != nil {
			// Ready says what holds the current spec up, not what an older
			// generation did.
			r.setReady(hash)
			return 0, err
		}
		st.CurrentRun = run.Name
		r.setCondition(v1alpha1.WorkspaceConditionReconciling, metav1.ConditionTrue, ReasonRunning, fmt.Sprintf("Run %s started (%s).", run.Name, why))
	}
	r.setReady(hash)
	if err := r.prune(ctx); err != nil {
		return 0, err
	}
	var after time.Duration
	if why == "" && st.NextDriftCheck != nil {
		after = max(st.NextDriftCheck.Sub(r.now), time.Second)
	}
	if len(configMapNames(&spec)) > 0 && r.c.configMaps == nil {
		// ConfigMaps are not watched: their content is read again every
		// minute, or every interval when that is shorter.
		recheck := configMapRecheck
		if interval > 0 {
			recheck = min(recheck, interval)
		}
		if after == 0 || after > recheck {
			after = recheck
		}
	}
	return after, nil
}

// observeResults derives, from the finished runs, what was applied last,
// the last drift check and its finding, and when the next is due.
func (r *reconciler) observeResults() {
	st := &r.ws.Status
	applied := r.h.newest(func(run *v1alpha1.TerraformRun) bool {
		// An apply that a PostApply run task then failed was applied.
		return run.Spec.Operation == v1alpha1.OperationApply && (run.Status.Phase == v1alpha1.RunPhaseSucceeded || runrules.Finished(run) && runrules.Applied(run))
	})
	if applied != nil && applied.Name != st.LastAppliedRun {
		st.LastAppliedRun = applied.Name
		st.LastAppliedHash = runHash(applied)
		st.LastAppliedRevision = ""
		if applied.Status.Source != nil {
			st.LastAppliedRevision = applied.Status.Source.Revision
		}
		if len(applied.Status.Outputs) > 0 || hasChanges(applied) {
			// A run that found nothing to change applies nothing, and
			// reports no outputs: the last ones stand.
			st.Outputs = nil
			for _, o := range applied.Status.Outputs {
				if !o.Sensitive {
					st.Outputs = append(st.Outputs, *o.DeepCopy())
				}
			}
		}
	}
	if newest := r.h.newest(func(*v1alpha1.TerraformRun) bool { return true }); newest != nil {
		st.LastRun = newest.Name
		if n, _ := strconv.ParseInt(newest.Annotations[v1alpha1.AnnotationRerunRequest], 10, 64); n > st.ObservedRerunRequests {
			st.ObservedRerunRequests = min(n, st.RerunRequests)
		}
	}

	check := r.h.newest(func(run *v1alpha1.TerraformRun) bool {
		return trigger(run) == v1alpha1.TriggerDriftCheck && run.Status.Phase == v1alpha1.RunPhaseSucceeded
	})
	var last time.Time
	if check != nil {
		t := completion(check)
		st.LastDriftCheck = &metav1.Time{Time: t}
		last = t
		// A check that resolved the git ref to a new commit (or the OCI
		// tag to a new digest) found new code, not drift: the NewRevision
		// run applies it.
		newCode := movingSource(&check.Spec.Source) && revisionOf(check) != st.LastAppliedRevision
		if (applied == nil || completion(applied).Before(t)) && !newCode {
			if hasChanges(check) {
				p := check.Status.Plan
				r.setCondition(v1alpha1.WorkspaceConditionDrifted, metav1.ConditionTrue, ReasonChangesFound,
					fmt.Sprintf("Drift check %s found changes: +%d ~%d -%d; see kubectl get --raw /apis/terrarun.dev/v1alpha1/namespaces/%s/terraformruns/%s/plan",
						check.Name, p.Add, p.Change, p.Destroy, check.Namespace, check.Name))
			} else {
				r.setCondition(v1alpha1.WorkspaceConditionDrifted, metav1.ConditionFalse, ReasonNoChanges, fmt.Sprintf("Drift check %s found no changes.", check.Name))
			}
		}
	}
	if applied != nil {
		if t := completion(applied); t.After(last) {
			last = t
			if meta.IsStatusConditionTrue(st.Conditions, v1alpha1.WorkspaceConditionDrifted) {
				r.setCondition(v1alpha1.WorkspaceConditionDrifted, metav1.ConditionFalse, ReasonApplied, fmt.Sprintf("Run %s applied after the last drift check.", applied.Name))
			}
		}
	}
	// A check that did not succeed (failed, canceled) found nothing, but
	// the next is due an interval after it too, not at once: a check that
	// cannot run (an unreachable repository, expired credentials) would
	// start again as soon as it ended, without end.
	if ended := r.h.newest(func(run *v1alpha1.TerraformRun) bool {
		return trigger(run) == v1alpha1.TriggerDriftCheck && runrules.Finished(run)
	}); ended != nil && completion(ended).After(last) {
		last = completion(ended)
	}
	st.NextDriftCheck = nil
	if iv := checkInterval(&r.ws.Spec); iv > 0 && !last.IsZero() {
		st.NextDriftCheck = &metav1.Time{Time: last.Add(iv)}
	}
}

// publishOutputs writes the outputs of the last applied run to
// spec.outputsSecret.
func (r *reconciler) publishOutputs(ctx context.Context) error {
	ws := r.ws
	if ws.Spec.OutputsSecret == "" || ws.Status.LastAppliedRun == "" || r.c.opts.PublishOutputs == nil {
		return nil
	}
	applied := r.h.newest(func(run *v1alpha1.TerraformRun) bool { return run.Name == ws.Status.LastAppliedRun })
	if applied == nil {
		return nil
	}
	if err := r.c.opts.PublishOutputs(ctx, ws, applied); err != nil {
		r.c.opts.Recorder.Eventf(ws, "Warning", "OutputsNotPublished", "Could not write the outputs of run %s to Secret %s: %v", applied.Name, ws.Spec.OutputsSecret, err)
		return err
	}
	return nil
}

// lastApplied names the last applied run of workspace name in the
// workspace's namespace, or "" when there is none.
func (r *reconciler) lastApplied(name string) string {
	dep, err := r.c.workspaces.TerraformWorkspaces(r.ws.Namespace).Get(name)
	if err != nil {
		return ""
	}
	return dep.Status.LastAppliedRun
}

// upstreamChangedOnly says whether the workspace's spec is the one its last
// applied run applied but for the runs of spec.dependsOn it reads outputs
// of: those workspaces applied again since.
func (r *reconciler) upstreamChangedOnly(configMaps string) bool {
	ws, st := r.ws, &r.ws.Status
	prev := r.h.newest(func(run *v1alpha1.TerraformRun) bool { return run.Name == st.LastAppliedRun })
	if prev == nil {
		return false
	}
	// The upstream run the last applied run read for each workspace.
	read := map[string]string{}
	for i, v := range ws.Spec.Template.Variables {
		if v.ValueFrom == nil || v.ValueFrom.WorkspaceOutput == nil || i >= len(prev.Spec.Variables) {
			continue
		}
		if p := prev.Spec.Variables[i]; p.Name == v.Name && p.ValueFrom != nil && p.ValueFrom.RunOutput != nil {
			read[v.ValueFrom.WorkspaceOutput.Name] = p.ValueFrom.RunOutput.Name
		}
	}
	if len(read) == 0 {
		return false
	}
	spec := runSpec(ws, v1alpha1.OperationApply, func(name string) string { return read[name] })
	return Hash(spec, r.observedRevision(&spec), configMaps) == st.LastAppliedHash
}

// dependenciesPending says which dependency keeps the workspace from
// starting a run: one that does not exist, is not Ready at its current spec,
// or has a run under way; "" when there is none.
func (r *reconciler) dependenciesPending() string {
	for _, d := range r.ws.Spec.DependsOn {
		dep, err := r.c.workspaces.TerraformWorkspaces(r.ws.Namespace).Get(d.Name)
		switch {
		case err != nil:
			return fmt.Sprintf("Waiting for workspace %s (spec.dependsOn), which does not exist.", d.Name)
		case dep.Status.ObservedGeneration != dep.Generation || dep.Status.CurrentRun != "" ||
			!meta.IsStatusConditionTrue(dep.Status.Conditions, v1alpha1.WorkspaceConditionReady):
			return fmt.Sprintf("Waiting for workspace %s (spec.dependsOn) to be Ready at its current spec.", d.Name)
		}
	}
	return ""
}

// observedRevision is the revision of the Flux source spec names as
// source-controller reports it, or else the newest revision that a run of
// the workspace resolved the source spec names to (finished or not): the
// git ref's commit or the OCI artifact's digest, which drift checks
// resolve again every interval.
func (r *reconciler) observedRevision(spec *v1alpha1.TerraformRunSpec) string {
	if !movingSource(&spec.Source) {
		return ""
	}
	if rev := r.c.sourceRevision(r.ws.Namespace, spec); rev != "" {
		return rev
	}
	for i := len(r.h) - 1; i >= 0; i-- {
		if rev := revisionOf(r.h[i]); rev != "" && sameSource(r.h[i], spec) {
			return rev
		}
	}
	return r.ws.Status.LastAppliedRevision
}

// setReady sets Ready, and clears Stalled once the current spec is applied.
func (r *reconciler) setReady(hash string) {
	st := &r.ws.Status
	switch {
	case st.LastAppliedHash == hash:
		msg := fmt.Sprintf("Run %s applied the current spec", st.LastAppliedRun)
		if st.LastAppliedRevision != "" {
			msg += " at revision " + st.LastAppliedRevision
		}
		r.setCondition(v1alpha1.WorkspaceConditionReady, metav1.ConditionTrue, ReasonApplied, msg+".")
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.WorkspaceConditionStalled)
	case r.ws.Spec.Suspend:
		r.setCondition(v1alpha1.WorkspaceConditionReady, metav1.ConditionFalse, ReasonSuspended, "The current spec is not applied, and the workspace is suspended.")
	case meta.IsStatusConditionTrue(st.Conditions, v1alpha1.WorkspaceConditionStalled) && st.CurrentRun == "":
		c := meta.FindStatusCondition(st.Conditions, v1alpha1.WorkspaceConditionStalled)
		r.setCondition(v1alpha1.WorkspaceConditionReady, metav1.ConditionFalse, c.Reason, c.Message)
	case st.CurrentRun == "" && conditionReason(st.Conditions, v1alpha1.WorkspaceConditionReconciling) == ReasonDependencyNotReady:
		// What holds the current spec up is a dependency, not a run.
		c := meta.FindStatusCondition(st.Conditions, v1alpha1.WorkspaceConditionReconciling)
		r.setCondition(v1alpha1.WorkspaceConditionReady, metav1.ConditionFalse, ReasonDependencyNotReady, c.Message)
	default:
		msg := "The current spec is not applied yet."
		if st.CurrentRun != "" {
			msg = fmt.Sprintf("Run %s is applying the current spec.", st.CurrentRun)
			meta.RemoveStatusCondition(&st.Conditions, v1alpha1.WorkspaceConditionStalled)
		}
		r.setCondition(v1alpha1.WorkspaceConditionReady, metav1.ConditionFalse, ReasonRunning, msg)
	}
}

// createRun creates the workspace's next run.
func (r *reconciler) createRun(ctx context.Context, op v1alpha1.Operation, why v1alpha1.Trigger) (*v1alpha1.TerraformRun, error) {
	ws := r.ws
	next := seq(ws.Name, ws.Status.LastRun) + 1
	for _, run := range r.h {
		next = max(next, seq(ws.Name, run.Name)+1)
	}
	annotations := map[string]string{v1alpha1.AnnotationTrigger: string(why)}
	if r.configMaps != "" {
		annotations[v1alpha1.AnnotationConfigMapDigest] = r.configMaps
	}
	if why == v1alpha1.TriggerRerun {
		annotations[v1alpha1.AnnotationRerunRequest] = strconv.FormatInt(ws.Status.RerunRequests, 10)
	}
	run := &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{
			Name:        fmt.Sprintf("%s-%d", ws.Name, next),
			Namespace:   ws.Namespace,
			Labels:      map[string]string{v1alpha1.LabelWorkspace: ws.Name},
			Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "TerraformWorkspace",
				Name: ws.Name, UID: ws.UID, Controller: ptr.To(true),
			}},
		},
		Spec: runSpec(ws, op, r.lastApplied),
	}
	// Who asked for it, besides the spec's editor (its creator): they may
	// not approve it either.
	var requester string
	switch {
	case why == v1alpha1.TriggerRerun:
		requester = ws.Status.RerunRequestedBy
	case op == v1alpha1.OperationDestroy:
		requester = ws.Status.DeletionRequestedBy
	}
	if requester != "" && (run.Spec.Creator == nil || run.Spec.Creator.Username != requester) {
		run.Spec.RequestedBy = []string{requester}
	}
	created, err := r.c.client.TerrarunV1alpha1().TerraformRuns(ws.Namespace).Create(ctx, run, metav1.CreateOptions{})
	if err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, r.nameTaken(ctx, run.Name, why, err)
		}
		// Refused (by admission, say): said in status, which sync writes
		// with the error, and retried with backoff, as rights may change.
		msg := fmt.Sprintf("Could not create a run (%s): %v", why, err)
		r.setCondition(v1alpha1.WorkspaceConditionStalled, metav1.ConditionTrue, ReasonRunCreateFailed, msg)
		r.c.opts.Recorder.Event(ws, "Warning", ReasonRunCreateFailed, msg)
		return nil, err
	}
	if why == v1alpha1.TriggerRerun {
		ws.Status.ObservedRerunRequests = ws.Status.RerunRequests
	}
	ws.Status.LastRun = created.Name
	r.h = append(r.h, created)
	r.c.opts.Recorder.Eventf(ws, "Normal", "RunCreated", "Created run %s (%s, %s)", created.Name, op, why)
	return created, nil
}

// nameTaken explains why the workspace's next run, name, already exists:
// an earlier sync created it and the cache does not show it yet (err is
// returned, and the sync retried), or someone else took the name. Then the
// workspace is Stalled with a reason that names the run, until it is
// deleted.
func (r *reconciler) nameTaken(ctx context.Context, name string, why v1alpha1.Trigger, err error) error {
	existing, getErr := r.c.client.TerrarunV1alpha1().TerraformRuns(r.ws.Namespace).Get(ctx, name, metav1.GetOptions{})
	if getErr != nil || metav1.IsControlledBy(existing, r.ws) {
		return err
	}
	creator := "someone else"
	if c := existing.Spec.Creator; c != nil && c.Username != "" {
		creator = c.Username
	}
	msg := fmt.Sprintf("Could not create run %s (%s): a run of that name, created by %s, exists and is not this workspace's; delete it (kubectl delete tfr %s -n %s), and the workspace creates its run",
		name, why, creator, name, r.ws.Namespace)
	r.setCondition(v1alpha1.WorkspaceConditionStalled, metav1.ConditionTrue, ReasonRunNameTaken, msg)
	r.c.opts.Recorder.Event(r.ws, "Warning", ReasonRunNameTaken, msg)
	return fmt.Errorf("%s: %w", msg, err)
}

// discard discards a plan that waits for approval.
func (r *reconciler) discard(ctx context.Context, run *v1alpha1.TerraformRun, comment string) error {
	_, err := r.c.client.TerrarunV1alpha1().TerraformRuns(run.Namespace).Discard(ctx, run.Name,
		&v1alpha1.TerraformRunDiscard{Comment: comment, Reason: ReasonSuperseded}, metav1.CreateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // approved or ended meanwhile; the next sync sees it
	}
	return err
}

// prune deletes finished runs beyond the history limits, oldest first, never
// the run of the last successful apply.
func (r *reconciler) prune(ctx context.Context) error {
	limit := func(n *int32) int {
		if n == nil {
			return defaultHistoryLimit
		}
		return int(*n)
	}
	keepSucceeded, keepOther := limit(r.ws.Spec.HistoryLimits.Succeeded), limit(r.ws.Spec.HistoryLimits.Failed)
	for i := len(r.h) - 1; i >= 0; i-- {
		run := r.h[i]
		if !runrules.Finished(run) {
			continue
		}
		keep := &keepOther
		if run.Status.Phase == v1alpha1.RunPhaseSucceeded {
			keep = &keepSucceeded
		}
		if *keep > 0 || run.Name == r.ws.Status.LastAppliedRun {
			*keep--
			continue
		}
		if err := r.c.deleteRun(ctx, run); err != nil {
			return err
		}
	}
	return nil
}

// reconcileDeletion destroys what a deleted workspace with destroyOnDelete
// manages, and then lets it go.
func (r *reconciler) reconcileDeletion(ctx context.Context) (time.Duration, error) {
	ws := r.ws
	if !slices.Contains(ws.Finalizers, destroyFinalizer) {
		return 0, nil
	}
	if ws.Annotations[v1alpha1.AnnotationAbandonResources] == "true" {
		r.c.opts.Recorder.Eventf(ws, "Warning", "Abandoned", "Deleted without destroying its resources (%s)", v1alpha1.AnnotationAbandonResources)
		return 0, r.removeFinalizer(ctx)
	}
	r.setCondition(v1alpha1.WorkspaceConditionReady, metav1.ConditionFalse, ReasonDeleting,
		"The workspace is being deleted: it destroys what it manages (see the Destroying condition), then goes.")
	if active := r.h.active(); active != nil && trigger(active) != v1alpha1.TriggerDestroy {
		ws.Status.CurrentRun = active.Name
		if active.Status.Phase == v1alpha1.RunPhaseAwaitingApproval {
			if err := r.discard(ctx, active, fmt.Sprintf("Superseded: workspace %s is being deleted and destroys its resources.", ws.Name)); err != nil {
				return 0, err
			}
		}
		r.setCondition(v1alpha1.WorkspaceConditionDestroying, metav1.ConditionTrue, ReasonRunning,
			fmt.Sprintf("Waiting for run %s to end before destroying.", active.Name))
		return 0, nil
	}
	destroys := 0
	var last *v1alpha1.TerraformRun
	for _, run := range r.h {
		if trigger(run) == v1alpha1.TriggerDestroy {
			destroys++
			last = run
		}
	}
	switch {
	case last != nil && !runrules.Finished(last):
		ws.Status.CurrentRun = last.Name
		r.setCondition(v1alpha1.WorkspaceConditionDestroying, metav1.ConditionTrue, ReasonDestroyRunning, fmt.Sprintf("Destroy run %s is %s.", last.Name, runrules.Phase(last)))
		return 0, nil
	case last != nil && last.Status.Phase == v1alpha1.RunPhaseSucceeded:
		r.c.opts.Recorder.Eventf(ws, "Normal", "Destroyed", "Destroy run %s succeeded", last.Name)
		return 0, r.removeFinalizer(ctx)
	case last != nil:
		backoff := min(destroyBackoff<<min(destroys-1, 10), maxDestroyBackoff)
		retry := completion(last).Add(backoff)
		msg := fmt.Sprintf("Destroy run %s ended %s: %s The workspace keeps its finalizer and retries at %s; to delete it without destroying, annotate it %s=true.",
			last.Name, last.Status.Phase, last.Status.Message, retry.UTC().Format(time.RFC3339), v1alpha1.AnnotationAbandonResources)
		r.setCondition(v1alpha1.WorkspaceConditionDestroying, metav1.ConditionTrue, ReasonDestroyFailed, msg)
		ws.Status.CurrentRun = ""
		if r.now.Before(retry) {
			return retry.Sub(r.now), nil
		}
	}
	run, err := r.createRun(ctx, v1alpha1.OperationDestroy, v1alpha1.TriggerDestroy)
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		// The namespace is being deleted: it takes no new run, nor the
		// Jobs and Secrets a stage needs. Waiting would keep the namespace
		// Terminating until an admin abandons the workspace: it is
		// abandoned now, and says so where it can (its Event may go with
		// the namespace; the server's log stays).
		msg := fmt.Sprintf("Namespace %s is being deleted and takes no Destroy run: the workspace goes without destroying its resources (last applied by run %s); destroy them with a run in another namespace on the same state, or by hand",
			ws.Namespace, ws.Status.LastAppliedRun)
		r.setCondition(v1alpha1.WorkspaceConditionDestroying, metav1.ConditionFalse, ReasonNamespaceTerminating, msg)
		r.c.opts.Recorder.Event(ws, "Warning", ReasonNamespaceTerminating, msg)
		klog.FromContext(ctx).Info("Abandoned a workspace's resources: "+msg, "workspace", klog.KObj(ws))
		return 0, r.removeFinalizer(ctx)
	}
	if err != nil {
		return 0, err
	}
	ws.Status.CurrentRun = run.Name
	r.setCondition(v1alpha1.WorkspaceConditionDestroying, metav1.ConditionTrue, ReasonDestroyRunning, fmt.Sprintf("Destroy run %s started.", run.Name))
	return 0, nil
}

func (r *reconciler) removeFinalizer(ctx context.Context) error {
	ws := r.ws.DeepCopy()
	ws.Finalizers = slices.DeleteFunc(ws.Finalizers, func(f string) bool { return f == destroyFinalizer })
	ws.Status = r.ws.Status
	_, err := r.c.client.TerrarunV1alpha1().TerraformWorkspaces(ws.Namespace).Update(ctx, ws, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		err = nil
	}
	if err == nil {
		r.gone = true
	}
	return err
}

func hasChanges(run *v1alpha1.TerraformRun) bool {
	return run.Status.Plan != nil && run.Status.Plan.HasChanges
}

func completion(run *v1alpha1.TerraformRun) time.Time {
	if t := run.Status.CompletionTime; t != nil {
		return t.Time
	}
	return run.CreationTimestamp.Time
}

// checkInterval is how often a plan-only run checks for drift and resolves a
// git ref again: the shorter of interval and sourceInterval, 0 for never.
func checkInterval(spec *v1alpha1.TerraformWorkspaceSpec) time.Duration {
	var d time.Duration
	for _, iv := range []*metav1.Duration{spec.Interval, spec.SourceInterval} {
		if iv != nil && (d == 0 || iv.Duration < d) {
			d = iv.Duration
		}
	}
	return d
}

// conditionReason is the reason of the condition of type typ, "" when there
// is none.
func conditionReason(conditions []metav1.Condition, typ string) string {
	if c := meta.FindStatusCondition(conditions, typ); c != nil {
		return c.Reason
	}
	return ""
}
