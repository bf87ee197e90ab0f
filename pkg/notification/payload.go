package notification

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/planpolicy"
	"github.com/terrarun/terrarun/pkg/runrules"
)

// Payload is the JSON document a webhook receives, and the data of a
// CloudEvent. Its fields are names, phases, counts, digests and times,
// never a variable, an output or a plan's content.
type Payload struct {
	// ID is the event's ID (also the webhook-id header and the CloudEvent's
	// id).
	ID string `json:"id"`
	// Trigger is what happened: NeedsApproval, Failed, Drifted and so on.
	Trigger v1alpha1.NotificationTrigger `json:"trigger"`
	// Time is when it happened, RFC 3339.
	Time string `json:"time"`
	// Notification is the namespace/name of the TerraformNotification
	// that delivered it.
	Notification string `json:"notification"`
	// Message says what happened, in a sentence.
	Message string `json:"message"`
	// URL links to the run (or the workspace) in the web view, when one is
	// configured.
	URL string `json:"url,omitempty"`
	// Run is the run the event is of; absent for Drifted.
	Run *RunInfo `json:"run,omitempty"`
	// Workspace is the workspace the event is of, or the run's.
	Workspace *WorkspaceInfo `json:"workspace,omitempty"`
}

// RunInfo is what a payload says of a run.
type RunInfo struct {
	Namespace  string    `json:"namespace"`
	Name       string    `json:"name"`
	UID        string    `json:"uid"`
	Phase      string    `json:"phase"`
	Operation  string    `json:"operation"`
	Trigger    string    `json:"trigger"`
	Creator    string    `json:"creator,omitempty"`
	Plan       *PlanInfo `json:"plan,omitempty"`
	ApprovedBy []string  `json:"approvedBy,omitempty"`
	Missing    []string  `json:"missingApprovals,omitempty"`
	Policy     string    `json:"policy,omitempty"`
	Path       string    `json:"apiPath"`
	Completed  string    `json:"completionTime,omitempty"`
	Started    string    `json:"startTime,omitempty"`
}

// PlanInfo is what a payload says of a plan: its counts and digest.
type PlanInfo struct {
	Digest  string `json:"digest"`
	Add     int32  `json:"add"`
	Change  int32  `json:"change"`
	Destroy int32  `json:"destroy"`
}

// WorkspaceInfo is what a payload says of a workspace.
type WorkspaceInfo struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Path      string `json:"apiPath"`
}

// maxMessage bounds the sentence a payload carries.
const maxMessage = 1024

// NewPayload is the payload of ev, delivered by the notification
// namespace/name; webView is the base URL of the web view, or "".
func NewPayload(ev Event, notification, webView string) Payload {
	p := Payload{ID: ev.ID, Trigger: ev.Trigger, Time: ev.Time.UTC().Format(time.RFC3339), Notification: notification}
	if ws := ev.Workspace; ws != nil {
		p.Workspace = &WorkspaceInfo{Namespace: ws.Namespace, Name: ws.Name, Path: apiPath(ws.Namespace, "terraformworkspaces", ws.Name)}
	}
	if run := ev.Run; run != nil {
		p.Run = runInfo(run)
		p.URL = link(webView, run.Namespace, "terraformruns", run.Name)
	} else if ws := ev.Workspace; ws != nil {
		p.URL = link(webView, ws.Namespace, "terraformworkspaces", ws.Name)
	}
	p.Message = truncate(message(ev, p.Run))
	return p
}

func runInfo(run *v1alpha1.TerraformRun) *RunInfo {
	r := &RunInfo{
		Namespace: run.Namespace,
		Name:      run.Name,
		UID:       string(run.UID),
		Phase:     string(runrules.Phase(run)),
		Operation: string(run.Spec.Operation),
		Trigger:   string(planpolicy.TriggerOf(run)),
		Path:      apiPath(run.Namespace, "terraformruns", run.Name),
	}
	if v := runrules.PolicyVerdict(run); v != "-" {
		r.Policy = v
	}
	if c := run.Spec.Creator; c != nil {
		r.Creator = c.Username
	}
	if p := run.Status.Plan; p != nil {
		r.Plan = &PlanInfo{Digest: p.Digest, Add: p.Add, Change: p.Change, Destroy: p.Destroy}
		r.ApprovedBy = runrules.Approvers(run, p.Digest)
		if runrules.Phase(run) == v1alpha1.RunPhaseAwaitingApproval {
			r.Missing = runrules.MissingApprovals(run, p.Digest)
		}
	}
	if t := run.Status.StartTime; t != nil {
		r.Started = t.UTC().Format(time.RFC3339)
	}
	if t := run.Status.CompletionTime; t != nil {
		r.Completed = t.UTC().Format(time.RFC3339)
	}
	return r
}

// message says what happened to the run or workspace of ev.
func message(ev Event, r *RunInfo) string {
	if r == nil {
		msg := fmt.Sprintf("Workspace %s/%s drifted", ev.Workspace.Namespace, ev.Workspace.Name)
		if c := driftCondition(ev.Workspace); c != "" {
			msg += ": " + c
		}
		return msg
	}
	subject := fmt.Sprintf("Run %s/%s", r.Namespace, r.Name)
	if ws := ev.Workspace; ws != nil {
		subject += fmt.Sprintf(" (workspace %s, %s)", ws.Name, r.Trigger)
	}
	counts := ""
	if p := r.Plan; p != nil {
		counts = fmt.Sprintf(" +%d ~%d -%d, plan %s", p.Add, p.Change, p.Destroy, p.Digest)
	}
	switch ev.Trigger {
	case v1alpha1.TriggerNeedsApproval:
		msg := subject + " waits for an approval:" + counts
		if len(r.Missing) > 0 {
			msg += "; it needs " + strings.Join(r.Missing, " and ")
		}
		return msg + "."
	case v1alpha1.TriggerNeedsOverride:
		return subject + " is held by a soft-mandatory policy until someone overrides it:" + counts + "."
	case v1alpha1.TriggerPolicyFailed:
		return subject + " was denied by a hard-mandatory policy:" + counts + "."
	case v1alpha1.TriggerApplying:
		return subject + " started applying:" + counts + "."
	case v1alpha1.TriggerSucceeded:
		return subject + " succeeded."
	case v1alpha1.TriggerFailed:
		msg := subject + " failed."
		if m := ev.Run.Status.Message; m != "" {
			msg += " " + m
		}
		return msg
	}
	return subject + ": " + string(ev.Trigger) + "."
}

func driftCondition(ws *v1alpha1.TerraformWorkspace) string {
	for _, c := range ws.Status.Conditions {
		if c.Type == v1alpha1.WorkspaceConditionDrifted {
			return c.Message
		}
	}
	return ""
}

// truncate bounds s to maxMessage bytes, at a rune boundary.
func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	cut := maxMessage - len("…")
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// apiPath is the API path of a namespaced terrarun.dev object.
func apiPath(namespace, resource, name string) string {
	return fmt.Sprintf("/apis/%s/namespaces/%s/%s/%s", v1alpha1.SchemeGroupVersion, namespace, resource, name)
}

// link is the web view's page of an object: base/namespaces/NS/RESOURCE/NAME,
// or "" without a base.
func link(base, namespace, resource, name string) string {
	if base == "" {
		return ""
	}
	return strings.TrimSuffix(base, "/") + "/namespaces/" + url.PathEscape(namespace) + "/" + resource + "/" + url.PathEscape(name)
}

// SlackText is ev's payload as a Slack message (mrkdwn): what happened, and
// the link. Text that a run or a workspace carries is escaped, so that it
// cannot make a link or mention anybody.
func SlackText(p Payload) string {
	text := slackEscape(p.Message)
	if p.URL != "" {
		text += " <" + slackEscape(p.URL) + "|Open in terrarun>"
	}
	return text
}

// slackEscape escapes the three characters Slack's mrkdwn gives a meaning
// to in links and mentions.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
