package validation

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

func TestValidateTerraformNotification(t *testing.T) {
	valid := func() *terrarun.TerraformNotification {
		return &terrarun.TerraformNotification{
			ObjectMeta: metav1.ObjectMeta{Name: "approvals", Namespace: "dev"},
			Spec: terrarun.TerraformNotificationSpec{
				Triggers: []terrarun.NotificationTrigger{terrarun.TriggerNeedsApproval, terrarun.TriggerFailed},
				Webhook:  &terrarun.WebhookDestination{URL: "https://hooks.example.com/terrarun", HMACKey: &terrarun.KeySelector{Name: "hook", Key: "key"}},
			},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*terrarun.TerraformNotification)
		want   string // "" for valid
	}{
		{name: "valid", change: func(*terrarun.TerraformNotification) {}},
		{name: "slack", change: func(n *terrarun.TerraformNotification) {
			n.Spec.Webhook, n.Spec.Slack = nil, &terrarun.SlackDestination{URLFrom: terrarun.KeySelector{Name: "slack", Key: "url"}}
		}},
		{name: "http cloudEvents", change: func(n *terrarun.TerraformNotification) {
			n.Spec.Webhook, n.Spec.CloudEvents = nil, &terrarun.WebhookDestination{URL: "http://broker.default.svc/"}
		}},
		{name: "no trigger", change: func(n *terrarun.TerraformNotification) { n.Spec.Triggers = nil }, want: "spec.triggers: Required value"},
		{name: "unknown trigger", change: func(n *terrarun.TerraformNotification) {
			n.Spec.Triggers = []terrarun.NotificationTrigger{"Exploded"}
		}, want: `spec.triggers[0]: Unsupported value: "Exploded"`},
		{name: "repeated trigger", change: func(n *terrarun.TerraformNotification) {
			n.Spec.Triggers = []terrarun.NotificationTrigger{terrarun.TriggerFailed, terrarun.TriggerFailed}
		}, want: "spec.triggers[1]: Duplicate value"},
		{name: "no destination", change: func(n *terrarun.TerraformNotification) { n.Spec.Webhook = nil }, want: "spec: Required value: set one of webhook, slack and cloudEvents"},
		{name: "two destinations", change: func(n *terrarun.TerraformNotification) {
			n.Spec.Slack = &terrarun.SlackDestination{URLFrom: terrarun.KeySelector{Name: "slack", Key: "url"}}
		}, want: "spec: Forbidden: set only one of webhook, slack and cloudEvents"},
		{name: "ftp", change: func(n *terrarun.TerraformNotification) { n.Spec.Webhook.URL = "ftp://hooks.example.com" }, want: "spec.webhook.url: Invalid value"},
		{name: "credentials in the URL", change: func(n *terrarun.TerraformNotification) {
			n.Spec.Webhook.URL = "https://user:pass@hooks.example.com"
		}, want: "spec.webhook.url: Invalid value: \"https://user:pass@hooks.example.com\": must not hold credentials"},
		{name: "no url", change: func(n *terrarun.TerraformNotification) { n.Spec.Webhook.URL = "" }, want: "spec.webhook.url: Required value"},
		{name: "key without a key", change: func(n *terrarun.TerraformNotification) { n.Spec.Webhook.HMACKey.Key = "" }, want: "spec.webhook.hmacKey.key: Required value"},
		{name: "bad CA", change: func(n *terrarun.TerraformNotification) { n.Spec.Webhook.CABundle = []byte("nope") }, want: "spec.webhook.caBundle: Invalid value"},
		{name: "slack without a Secret", change: func(n *terrarun.TerraformNotification) {
			n.Spec.Webhook, n.Spec.Slack = nil, &terrarun.SlackDestination{}
		}, want: "spec.slack.urlFrom.name: Required value"},
		{name: "bad workspace", change: func(n *terrarun.TerraformNotification) { n.Spec.Workspaces = []string{"App_1"} }, want: "spec.workspaces[0]: Invalid value"},
		{name: "bad selector", change: func(n *terrarun.TerraformNotification) {
			n.Spec.RunSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"a b": "c"}}
		}, want: "spec.runSelector.matchLabels: Invalid value"},
		{name: "bad web view", change: func(n *terrarun.TerraformNotification) { n.Spec.WebViewURL = "runs.example.com" }, want: "spec.webViewURL: Invalid value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := valid()
			tc.change(n)
			errs := ValidateTerraformNotification(n)
			if tc.want == "" {
				if len(errs) > 0 {
					t.Errorf("refused: %v", errs.ToAggregate())
				}
				return
			}
			if errs.ToAggregate() == nil || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Errorf("errors %v, want %q", errs.ToAggregate(), tc.want)
			}
		})
	}
}
