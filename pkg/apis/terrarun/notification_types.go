package terrarun

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformNotification tells someone outside the cluster when a run needs
// them or has ended: it delivers the namespace's run and workspace events
// it selects to a generic webhook (JSON signed as Standard Webhooks sign
// it), a Slack-compatible incoming webhook, or a CloudEvents receiver over
// HTTP. A payload carries names, phases, the plan's counts and digest and a
// link, never a variable, an output or a plan's content. Deliveries are
// retried with backoff, and recorded in status.
type TerraformNotification struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what is delivered, and where.
	Spec TerraformNotificationSpec `json:"spec"`
	// status is what was delivered: the latest deliveries, and whether the
	// last one reached its receiver.
	// +optional
	Status TerraformNotificationStatus `json:"status,omitempty"`
}

// TerraformNotificationSpec is what a notification delivers, and where.
// Exactly one of webhook, slack and cloudEvents is set.
type TerraformNotificationSpec struct {
	// triggers are the events delivered: NeedsApproval, NeedsOverride,
	// Applying, Succeeded, Failed, Drifted, PolicyFailed.
	// +listType=set
	Triggers []NotificationTrigger `json:"triggers"`
	// workspaces limits the events to those of the runs of these
	// TerraformWorkspaces, and to their drift; every run and workspace of
	// the namespace when empty.
	// +optional
	// +listType=set
	Workspaces []string `json:"workspaces,omitempty"`
	// runSelector limits the run events to the runs whose labels it
	// selects; it does not apply to Drifted, an event of a workspace.
	// +optional
	RunSelector *metav1.LabelSelector `json:"runSelector,omitempty"`
	// webhook delivers each event as a JSON POST, signed as Standard
	// Webhooks sign (webhook-id, webhook-timestamp and webhook-signature
	// headers) when hmacKey is set.
	// +optional
	Webhook *WebhookDestination `json:"webhook,omitempty"`
	// slack delivers each event as a message to a Slack-compatible incoming
	// webhook (Slack, Mattermost, Rocket.Chat, Discord's /slack endpoint).
	// +optional
	Slack *SlackDestination `json:"slack,omitempty"`
	// cloudEvents delivers each event as a CloudEvent (version 1.0, binary
	// content mode) over HTTP, signed as webhook is when hmacKey is set.
	// +optional
	CloudEvents *WebhookDestination `json:"cloudEvents,omitempty"`
	// webViewURL is the base URL of a web view of runs: each payload links
	// to webViewURL/namespaces/NAMESPACE/terraformruns/NAME (or
	// .../terraformworkspaces/NAME). The server's --web-view-url when
	// unset; no link when neither is set.
	// +optional
	WebViewURL string `json:"webViewURL,omitempty"`
}

// WebhookDestination is an HTTP receiver of events.
type WebhookDestination struct {
	// url is where each event is POSTed: http or https. A redirect is not
	// followed, and what the receiver answers is not kept beyond its status.
	URL string `json:"url"`
	// hmacKey names the key of a Secret of the namespace whose value signs
	// each delivery. Whoever writes the notification must be allowed to get
	// that Secret. Unsigned when unset.
	// +optional
	HMACKey *KeySelector `json:"hmacKey,omitempty"`
	// caBundle is PEM-encoded CA certificates that verify an https
	// receiver; the system's trusted roots when unset.
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`
}

// SlackDestination is a Slack-compatible incoming webhook.
type SlackDestination struct {
	// urlFrom names the key of a Secret of the namespace that holds the
	// incoming webhook's URL: the URL is its credential. Whoever writes the
	// notification must be allowed to get that Secret.
	URLFrom KeySelector `json:"urlFrom"`
}

// NotificationTrigger is an event a notification can deliver.
// +enum
type NotificationTrigger string

const (
	// TriggerNeedsApproval: a run's plan waits for an approval (policy
	// cleared it).
	TriggerNeedsApproval NotificationTrigger = "NeedsApproval"
	// TriggerNeedsOverride: a soft-mandatory policy failure holds a run's
	// plan until someone overrides it.
	TriggerNeedsOverride NotificationTrigger = "NeedsOverride"
	// TriggerApplying: a run's apply started.
	TriggerApplying NotificationTrigger = "Applying"
	// TriggerSucceeded: a run Succeeded.
	TriggerSucceeded NotificationTrigger = "Succeeded"
	// TriggerFailed: a run Failed.
	TriggerFailed NotificationTrigger = "Failed"
	// TriggerDrifted: a workspace's drift check found changes.
	TriggerDrifted NotificationTrigger = "Drifted"
	// TriggerPolicyFailed: a hard-mandatory policy denied a run's plan.
	TriggerPolicyFailed NotificationTrigger = "PolicyFailed"
)

// TerraformNotificationStatus is what a notification delivered.
type TerraformNotificationStatus struct {
	// observedGeneration is the generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready is True when the last delivery reached its
	// receiver, False (DeliveryFailing, DeliveryFailed) when it did not.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// deliveries are the latest deliveries, oldest event first, at most
	// 100.
	// +optional
	// +listType=atomic
	Deliveries []NotificationDelivery `json:"deliveries,omitempty"`
	// horizon is the time of the newest event whose delivery record was
	// dropped to keep deliveries at 100: no event at or before it is
	// delivered again.
	// +optional
	Horizon *metav1.Time `json:"horizon,omitempty"`
}

// DeliveryState is how a delivery stands.
// +enum
type DeliveryState string

const (
	// DeliveryDelivered: the receiver accepted it (a 2xx answer).
	DeliveryDelivered DeliveryState = "Delivered"
	// DeliveryRetrying: it failed and is tried again at nextAttemptTime.
	DeliveryRetrying DeliveryState = "Retrying"
	// DeliveryFailed: it failed for good: the receiver refused it (a 4xx
	// answer other than 408 and 429), or every attempt failed.
	DeliveryFailed DeliveryState = "Failed"
)

// NotificationDelivery is the delivery of one event.
type NotificationDelivery struct {
	// id identifies the event, the same in every attempt: the webhook-id
	// header and the CloudEvent's id, by which receivers drop repeats.
	ID string `json:"id"`
	// trigger is the event's trigger.
	Trigger NotificationTrigger `json:"trigger"`
	// run is the run the event is of.
	// +optional
	Run string `json:"run,omitempty"`
	// workspace is the workspace the event is of, or the run's workspace.
	// +optional
	Workspace string `json:"workspace,omitempty"`
	// eventTime is when the event happened.
	// +optional
	EventTime *metav1.Time `json:"eventTime,omitempty"`
	// state is Delivered, Retrying or Failed.
	State DeliveryState `json:"state"`
	// attempts is how many times it was sent.
	Attempts int32 `json:"attempts"`
	// lastAttemptTime is when it was last sent.
	// +optional
	LastAttemptTime *metav1.Time `json:"lastAttemptTime,omitempty"`
	// nextAttemptTime is when a Retrying delivery is sent again.
	// +optional
	NextAttemptTime *metav1.Time `json:"nextAttemptTime,omitempty"`
	// message is how the last attempt went: the receiver's HTTP status, or
	// why it could not be reached. What a receiver answers beyond its status
	// is not kept.
	// +optional
	Message string `json:"message,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TerraformNotificationList is a list of TerraformNotifications.
type TerraformNotificationList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// items are the notifications.
	Items []TerraformNotification `json:"items"`
}

// The condition of a notification, and its reasons.
const (
	// ConditionNotificationReady is True when the last delivery reached
	// its receiver.
	ConditionNotificationReady = "Ready"
	// ReasonDelivered: the last delivery reached its receiver.
	ReasonDelivered = "Delivered"
	// ReasonDeliveryFailing: the last delivery failed and is retried.
	ReasonDeliveryFailing = "DeliveryFailing"
	// ReasonDeliveryFailed: the last delivery failed for good.
	ReasonDeliveryFailed = "DeliveryFailed"
	// ReasonNoDeliveries: nothing was delivered yet.
	ReasonNoDeliveries = "NoDeliveries"
)

// MaxNotificationDeliveries is how many deliveries a notification's status
// keeps.
const MaxNotificationDeliveries = 100
