// Package notification is what TerraformNotifications deliver: the events
// a run or a workspace has had (Events, WorkspaceEvents), the payload each
// destination receives (a JSON document, a Slack message, a CloudEvent),
// and the delivery itself (Send), which tells a receiver's refusal, tried
// again later, from one that is final. No payload carries a variable, an
// output, a plan's content or a Secret: only names, phases, the plan's
// counts and digest, who approved, and a link.
package notification
