package terraformnotification

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

func notification() *terrarun.TerraformNotification {
	return &terrarun.TerraformNotification{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "dev"},
		Spec: terrarun.TerraformNotificationSpec{Triggers: []terrarun.NotificationTrigger{terrarun.TriggerFailed},
			Webhook: &terrarun.WebhookDestination{URL: "http://hooks.example.com/secret-path"}},
	}
}

// TestStatusIsTheServers: writes of the resource keep status, writes of
// status keep spec, and a spec change raises the generation.
func TestStatusIsTheServers(t *testing.T) {
	s := strategy{}
	n := notification()
	n.Status.Deliveries = []terrarun.NotificationDelivery{{ID: "forged", State: terrarun.DeliveryDelivered}}
	s.PrepareForCreate(context.Background(), n)
	if len(n.Status.Deliveries) != 0 || n.Generation != 1 {
		t.Errorf("create kept status %+v, generation %d", n.Status, n.Generation)
	}
	old := n.DeepCopy()
	old.Status.Deliveries = []terrarun.NotificationDelivery{{ID: "real"}}
	update := old.DeepCopy()
	update.Status.Deliveries = nil
	update.Spec.Triggers = append(update.Spec.Triggers, terrarun.TriggerSucceeded)
	s.PrepareForUpdate(context.Background(), update, old)
	if len(update.Status.Deliveries) != 1 || update.Generation != 2 {
		t.Errorf("update: status %+v, generation %d", update.Status, update.Generation)
	}
	status := old.DeepCopy()
	status.Spec.Webhook.URL = "http://elsewhere.example.com"
	statusStrategy{s}.PrepareForUpdate(context.Background(), status, old)
	if status.Spec.Webhook.URL != old.Spec.Webhook.URL {
		t.Error("a status write changed the spec")
	}
	if w := s.WarningsOnCreate(context.Background(), n); len(w) != 1 {
		t.Errorf("warnings %q, want one about http", w)
	}
}

// TestTable: the destination column names the receiver's host, never a
// path or a Slack URL.
func TestTable(t *testing.T) {
	n := notification()
	if got := row(n).Cells[1]; got != "webhook hooks.example.com" {
		t.Errorf("destination %q", got)
	}
	n.Spec.Webhook, n.Spec.Slack = nil, &terrarun.SlackDestination{URLFrom: terrarun.KeySelector{Name: "slack", Key: "url"}}
	if got := row(n).Cells[1]; got != "slack" {
		t.Errorf("destination %q", got)
	}
}
