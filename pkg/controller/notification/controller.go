// Package notification delivers what TerraformNotifications select: on
// every change of a run or a workspace it works out the events of its
// namespace's runs and workspaces (pkg/notification), and sends each
// notification those of its triggers that it has not delivered yet,
// retrying failures with backoff. What was delivered is recorded in the
// notification's status, so that a new leader sends nothing twice but
// what it cannot know was received (the event's ID, the same in every
// attempt, lets a receiver drop it).
package notification

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/controller/reconcile"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
	informers "github.com/terrarun/terrarun/pkg/generated/informers/externalversions/terrarun/v1alpha1"
	listers "github.com/terrarun/terrarun/pkg/generated/listers/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/notification"
)

// Options configure the controller.
type Options struct {
	// SecretValue reads the value of a key of a Secret of a namespace: the
	// HMAC keys and Slack URLs.
	SecretValue func(ctx context.Context, namespace, name, key string) ([]byte, error)
	// WebViewURL is the web view's base URL for the notifications that set
	// none; no link when empty.
	WebViewURL string
	// Clock tells the time; the real clock when nil.
	Clock clock.Clock
	// Send delivers a payload; notification.Send when nil.
	Send func(ctx context.Context, d notification.Destination, p notification.Payload, now time.Time) error
}

// Retries: the first retry after retryBase, each later one after twice the
// wait before, at most maxRetryWait, and no attempt after maxAttempts.
const (
	retryBase    = 5 * time.Second
	maxRetryWait = 5 * time.Minute
	maxAttempts  = 8
	// maxPerSync bounds the deliveries one sync sends; the rest wait for
	// the next, at once.
	maxPerSync = 20
)

// Controller delivers notifications.
type Controller struct {
	client        versioned.Interface
	notifications listers.TerraformNotificationLister
	runs          listers.TerraformRunLister
	workspaces    listers.TerraformWorkspaceLister
	synced        []cache.InformerSynced
	queue         workqueue.TypedRateLimitingInterface[string]
	opts          Options
}

// New returns a controller of the notifications, runs and workspaces its
// informers see.
func New(client versioned.Interface, notifications informers.TerraformNotificationInformer, runs informers.TerraformRunInformer,
	workspaces informers.TerraformWorkspaceInformer, opts Options) (*Controller, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Send == nil {
		opts.Send = notification.Send
	}
	c := &Controller{
		client:        client,
		notifications: notifications.Lister(),
		runs:          runs.Lister(),
		workspaces:    workspaces.Lister(),
		synced:        []cache.InformerSynced{notifications.Informer().HasSynced, runs.Informer().HasSynced, workspaces.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "terraformnotifications"}),
		opts: opts,
	}
	if _, err := notifications.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(old, obj interface{}) { c.enqueueSpecChange(old, obj) },
	}); err != nil {
		return nil, err
	}
	namespaceChanged := cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueNamespace,
		UpdateFunc: func(_, obj interface{}) { c.enqueueNamespace(obj) },
	}
	if _, err := runs.Informer().AddEventHandler(namespaceChanged); err != nil {
		return nil, err
	}
	if _, err := workspaces.Informer().AddEventHandler(namespaceChanged); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Controller) enqueue(obj interface{}) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// enqueueSpecChange queues a notification whose spec changed; its own
// status writes do not queue it again.
func (c *Controller) enqueueSpecChange(old, obj interface{}) {
	o, n := old.(*v1alpha1.TerraformNotification), obj.(*v1alpha1.TerraformNotification)
	if o.Generation != n.Generation {
		c.enqueue(obj)
	}
}

// enqueueNamespace queues every notification of the namespace of obj, a
// run or a workspace that changed.
func (c *Controller) enqueueNamespace(obj interface{}) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	all, err := c.notifications.TerraformNotifications(m.GetNamespace()).List(labels.Everything())
	if err != nil {
		return
	}
	for _, n := range all {
		c.enqueue(n)
	}
}

// Run processes the queue with workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting the notification controller")
	defer logger.Info("Stopping the notification controller")
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return errors.New("the notifications', runs' and workspaces' caches did not sync")
	}
	reconcile.Start(ctx, c.queue, workers, c.sync, "Delivering notifications", "notification")
	<-ctx.Done()
	return nil
}

// sync delivers what the notification of key has not delivered yet, and
// asks for it again when a retry is due.
func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	n, err := c.notifications.TerraformNotifications(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if n.DeletionTimestamp != nil {
		return 0, nil
	}
	events, err := c.events(n)
	if err != nil {
		return 0, err
	}
	now := c.opts.Clock.Now()
	if due, gone := plan(n, &n.Status, events, now); len(due) > 0 || len(gone) > 0 {
		// The cache may not have seen the last deliveries recorded yet:
		// what to send is decided on the status as it is stored.
		fresh, err := c.client.TerrarunV1alpha1().TerraformNotifications(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		n = fresh
	}
	st := n.Status.DeepCopy()
	changed := st.ObservedGeneration != n.Generation
	st.ObservedGeneration = n.Generation
	due, gone := plan(n, st, events, now)
	for _, id := range gone {
		d := find(st, id)
		d.State, d.NextAttemptTime = v1alpha1.DeliveryFailed, nil
		d.Message += "; not tried again: the run or workspace no longer is where the event left it"
		changed = true
	}
	if len(due) > maxPerSync {
		defer c.queue.Add(key)
		due = due[:maxPerSync]
	}
	if len(due) > 0 {
		dest, destErr := c.destination(ctx, n)
		webView := cmp.Or(n.Spec.WebViewURL, c.opts.WebViewURL)
		for _, ev := range due {
			var sendErr error = destErr
			if sendErr == nil {
				sendErr = c.opts.Send(ctx, dest, notification.NewPayload(ev, namespace+"/"+name, webView), now)
			}
			record(st, ev, sendErr, now)
			if sendErr != nil {
				klog.FromContext(ctx).V(2).Info("A delivery failed", "notification", klog.KObj(n), "event", ev.ID, "trigger", ev.Trigger, "err", sendErr)
			}
		}
		changed = true
	}
	if !changed {
		return nextRetry(st, now), nil
	}
	trim(st)
	setReady(st, n.Generation)
	if err := c.writeStatus(ctx, n, st); err != nil {
		return 0, err
	}
	return nextRetry(st, now), nil
}

// events are the events of the runs and workspaces of n's namespace that n
// selects, oldest first.
func (c *Controller) events(n *v1alpha1.TerraformNotification) ([]notification.Event, error) {
	runSelector := labels.Everything()
	if n.Spec.RunSelector != nil {
		s, err := metav1.LabelSelectorAsSelector(n.Spec.RunSelector)
		if err != nil {
			return nil, nil // validation refuses it; nothing is selected
		}
		runSelector = s
	}
	inWorkspaces := func(ws string) bool { return len(n.Spec.Workspaces) == 0 || slices.Contains(n.Spec.Workspaces, ws) }
	var events []notification.Event
	runs, err := c.runs.TerraformRuns(n.Namespace).List(runSelector)
	if err != nil {
		return nil, err
	}
	for _, run := range runs {
		ws := c.owner(run)
		if len(n.Spec.Workspaces) > 0 && (ws == nil || !inWorkspaces(ws.Name)) {
			continue
		}
		events = append(events, notification.RunEvents(run, ws)...)
	}
	if slices.Contains(n.Spec.Triggers, v1alpha1.TriggerDrifted) {
		workspaces, err := c.workspaces.TerraformWorkspaces(n.Namespace).List(labels.Everything())
		if err != nil {
			return nil, err
		}
		for _, ws := range workspaces {
			if inWorkspaces(ws.Name) {
				events = append(events, notification.WorkspaceEvents(ws)...)
			}
		}
	}
	slices.SortFunc(events, func(a, b notification.Event) int {
		return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.ID, b.ID))
	})
	return events, nil
}

// owner is the workspace that owns run: the one its label names, when that
// workspace controls it (a label alone does not make a run a workspace's).
func (c *Controller) owner(run *v1alpha1.TerraformRun) *v1alpha1.TerraformWorkspace {
	name := run.Labels[v1alpha1.LabelWorkspace]
	if name == "" {
		return nil
	}
	ws, err := c.workspaces.TerraformWorkspaces(run.Namespace).Get(name)
	if err != nil || !metav1.IsControlledBy(run, ws) {
		return nil
	}
	return ws
}

// plan says which of events n delivers now: those of its triggers that
// happened once it existed and after its horizon, never delivered, or
// failed and due for a retry. gone are the IDs of the deliveries waiting
// for a retry whose event is no more (the run was approved meanwhile, or
// deleted).
func plan(n *v1alpha1.TerraformNotification, st *v1alpha1.TerraformNotificationStatus, events []notification.Event, now time.Time) (due []notification.Event, gone []string) {
	current := map[string]bool{}
	for _, ev := range events {
		current[ev.ID] = true
		if !slices.Contains(n.Spec.Triggers, ev.Trigger) || ev.Time.Before(n.CreationTimestamp.Time) ||
			st.Horizon != nil && !ev.Time.After(st.Horizon.Time) {
			continue
		}
		d := find(st, ev.ID)
		if d == nil || d.State == v1alpha1.DeliveryRetrying && d.NextAttemptTime != nil && !now.Before(d.NextAttemptTime.Time) {
			due = append(due, ev)
		}
	}
	for _, d := range st.Deliveries {
		if d.State == v1alpha1.DeliveryRetrying && !current[d.ID] {
			gone = append(gone, d.ID)
		}
	}
	return due, gone
}

func find(st *v1alpha1.TerraformNotificationStatus, id string) *v1alpha1.NotificationDelivery {
	for i := range st.Deliveries {
		if st.Deliveries[i].ID == id {
			return &st.Deliveries[i]
		}
	}
	return nil
}

// record records the attempt to deliver ev at now, which ended with err.
func record(st *v1alpha1.TerraformNotificationStatus, ev notification.Event, err error, now time.Time) {
	d := find(st, ev.ID)
	if d == nil {
		st.Deliveries = append(st.Deliveries, v1alpha1.NotificationDelivery{ID: ev.ID, Trigger: ev.Trigger, EventTime: &metav1.Time{Time: ev.Time}})
		d = &st.Deliveries[len(st.Deliveries)-1]
		if ev.Run != nil {
			d.Run = ev.Run.Name
		}
		if ev.Workspace != nil {
			d.Workspace = ev.Workspace.Name
		}
	}
	at := metav1.NewTime(now)
	d.Attempts++
	d.LastAttemptTime, d.NextAttemptTime = &at, nil
	if err == nil {
		d.State, d.Message = v1alpha1.DeliveryDelivered, ""
		return
	}
	d.Message = err.Error()
	var e *notification.Error
	if !errors.As(err, &e) || !e.Retry || d.Attempts >= maxAttempts {
		d.State = v1alpha1.DeliveryFailed
		if d.Attempts >= maxAttempts {
			d.Message += fmt.Sprintf(" (attempt %d of %d; not tried again)", d.Attempts, maxAttempts)
		}
		return
	}
	wait := min(retryBase<<(d.Attempts-1), maxRetryWait)
	next := metav1.NewTime(now.Add(wait))
	d.State, d.NextAttemptTime = v1alpha1.DeliveryRetrying, &next
}

// trim keeps the newest deliveries, by event time, and moves the horizon
// past those it drops; a delivery waiting for a retry is never dropped.
func trim(st *v1alpha1.TerraformNotificationStatus) {
	slices.SortStableFunc(st.Deliveries, func(a, b v1alpha1.NotificationDelivery) int {
		return cmp.Or(eventTime(a).Compare(eventTime(b)), cmp.Compare(a.ID, b.ID))
	})
	for len(st.Deliveries) > v1alpha1.MaxNotificationDeliveries {
		i := slices.IndexFunc(st.Deliveries, func(d v1alpha1.NotificationDelivery) bool { return d.State != v1alpha1.DeliveryRetrying })
		if i < 0 {
			return
		}
		if t := eventTime(st.Deliveries[i]); st.Horizon == nil || t.After(st.Horizon.Time) {
			st.Horizon = &metav1.Time{Time: t}
		}
		st.Deliveries = slices.Delete(st.Deliveries, i, i+1)
	}
}

func eventTime(d v1alpha1.NotificationDelivery) time.Time {
	if d.EventTime == nil {
		return time.Time{}
	}
	return d.EventTime.Time
}

// setReady sets the Ready condition from the latest attempt.
func setReady(st *v1alpha1.TerraformNotificationStatus, generation int64) {
	var last *v1alpha1.NotificationDelivery
	for i := range st.Deliveries {
		d := &st.Deliveries[i]
		if d.LastAttemptTime != nil && (last == nil || !d.LastAttemptTime.Before(last.LastAttemptTime)) {
			last = d
		}
	}
	c := metav1.Condition{Type: v1alpha1.ConditionNotificationReady, ObservedGeneration: generation}
	switch {
	case last == nil:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonNoDeliveries, "Nothing was delivered yet."
	case last.State == v1alpha1.DeliveryDelivered:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonDelivered, fmt.Sprintf("Delivered %s of run %s.", last.Trigger, cmp.Or(last.Run, "-"))
	case last.State == v1alpha1.DeliveryRetrying:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonDeliveryFailing, fmt.Sprintf("Delivering %s failed: %s; tried again at %s.", last.Trigger, last.Message, last.NextAttemptTime.UTC().Format(time.RFC3339))
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonDeliveryFailed, fmt.Sprintf("Delivering %s failed: %s.", last.Trigger, last.Message)
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// nextRetry is how long until the first delivery waiting for a retry is
// due; 0 when none waits.
func nextRetry(st *v1alpha1.TerraformNotificationStatus, now time.Time) time.Duration {
	var next time.Duration
	for _, d := range st.Deliveries {
		if d.State == v1alpha1.DeliveryRetrying && d.NextAttemptTime != nil {
			wait := max(d.NextAttemptTime.Sub(now), time.Millisecond)
			if next == 0 || wait < next {
				next = wait
			}
		}
	}
	return next
}

// destination reads the Secret values n's destination names.
func (c *Controller) destination(ctx context.Context, n *v1alpha1.TerraformNotification) (notification.Destination, error) {
	secret := func(field string, k *v1alpha1.KeySelector) ([]byte, error) {
		if c.opts.SecretValue == nil {
			return nil, &notification.Error{Message: "this server reads no Secrets"}
		}
		v, err := c.opts.SecretValue(ctx, n.Namespace, k.Name, k.Key)
		if err != nil {
			return nil, &notification.Error{Retry: true, Message: fmt.Sprintf("reading %s (Secret %q, key %q): %v", field, k.Name, k.Key, err)}
		}
		return v, nil
	}
	spec := n.Spec
	var d notification.Destination
	var hook *v1alpha1.WebhookDestination
	switch {
	case spec.Webhook != nil:
		d.Kind, hook = notification.KindWebhook, spec.Webhook
	case spec.CloudEvents != nil:
		d.Kind, hook = notification.KindCloudEvents, spec.CloudEvents
	case spec.Slack != nil:
		u, err := secret("spec.slack.urlFrom", &spec.Slack.URLFrom)
		d.Kind, d.URL = notification.KindSlack, string(u)
		return d, err
	default:
		return d, &notification.Error{Message: "the notification names no destination"}
	}
	d.URL, d.CABundle = hook.URL, hook.CABundle
	if hook.HMACKey != nil {
		key, err := secret("the HMAC key", hook.HMACKey)
		d.Key = key
		return d, err
	}
	return d, nil
}

// writeStatus writes st as n's status; on a conflict it merges the
// deliveries just recorded into the latest status and writes again.
func (c *Controller) writeStatus(ctx context.Context, n *v1alpha1.TerraformNotification, st *v1alpha1.TerraformNotificationStatus) error {
	client := c.client.TerrarunV1alpha1().TerraformNotifications(n.Namespace)
	latest := n.DeepCopy()
	latest.Status = *st
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		_, err := client.UpdateStatus(ctx, latest, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
		fresh, getErr := client.Get(ctx, n.Name, metav1.GetOptions{})
		if getErr != nil {
			return getErr
		}
		merged := fresh.Status.DeepCopy()
		for _, d := range st.Deliveries {
			if old := find(merged, d.ID); old != nil {
				*old = d
			} else {
				merged.Deliveries = append(merged.Deliveries, d)
			}
		}
		merged.ObservedGeneration = max(merged.ObservedGeneration, st.ObservedGeneration)
		trim(merged)
		setReady(merged, fresh.Generation)
		fresh.Status = *merged
		latest = fresh
		return err
	})
}
