package validation

import (
	"net/url"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// notificationTriggers are the triggers a notification may name.
var notificationTriggers = []terrarun.NotificationTrigger{
	terrarun.TriggerNeedsApproval, terrarun.TriggerNeedsOverride, terrarun.TriggerApplying,
	terrarun.TriggerSucceeded, terrarun.TriggerFailed, terrarun.TriggerDrifted, terrarun.TriggerPolicyFailed,
}

// maxNotificationWorkspaces bounds spec.workspaces.
const maxNotificationWorkspaces = 64

// ValidateTerraformNotification validates a TerraformNotification on create
// and update.
func ValidateTerraformNotification(n *terrarun.TerraformNotification) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&n.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	spec, specPath := &n.Spec, field.NewPath("spec")
	if len(spec.Triggers) == 0 {
		allErrs = append(allErrs, field.Required(specPath.Child("triggers"), "name at least one of NeedsApproval, NeedsOverride, Applying, Succeeded, Failed, Drifted, PolicyFailed"))
	}
	allErrs = append(allErrs, validateSet(spec.Triggers, notificationTriggers, specPath.Child("triggers"))...)
	if len(spec.Workspaces) > maxNotificationWorkspaces {
		allErrs = append(allErrs, field.TooMany(specPath.Child("workspaces"), len(spec.Workspaces), maxNotificationWorkspaces))
	}
	seen := map[string]bool{}
	for i, ws := range spec.Workspaces {
		p := specPath.Child("workspaces").Index(i)
		for _, msg := range apimachineryvalidation.NameIsDNSLabel(ws, false) {
			allErrs = append(allErrs, field.Invalid(p, ws, msg))
		}
		if seen[ws] {
			allErrs = append(allErrs, field.Duplicate(p, ws))
		}
		seen[ws] = true
	}
	if spec.RunSelector != nil {
		allErrs = append(allErrs, metav1validation.ValidateLabelSelector(spec.RunSelector, metav1validation.LabelSelectorValidationOptions{}, specPath.Child("runSelector"))...)
	}
	destinations := 0
	if d := spec.Webhook; d != nil {
		destinations++
		allErrs = append(allErrs, validateWebhookDestination(d, specPath.Child("webhook"))...)
	}
	if d := spec.CloudEvents; d != nil {
		destinations++
		allErrs = append(allErrs, validateWebhookDestination(d, specPath.Child("cloudEvents"))...)
	}
	if d := spec.Slack; d != nil {
		destinations++
		allErrs = append(allErrs, validateKeySelector(&d.URLFrom, "secret", specPath.Child("slack", "urlFrom"))...)
	}
	switch destinations {
	case 0:
		allErrs = append(allErrs, field.Required(specPath, "set one of webhook, slack and cloudEvents: where the events go"))
	case 1:
	default:
		allErrs = append(allErrs, field.Forbidden(specPath, "set only one of webhook, slack and cloudEvents; make one notification per destination"))
	}
	if spec.WebViewURL != "" {
		allErrs = append(allErrs, validateHTTPURL(spec.WebViewURL, specPath.Child("webViewURL"), "https://terrarun.example.com")...)
	}
	return allErrs
}

// validateWebhookDestination validates a webhook or CloudEvents receiver.
func validateWebhookDestination(d *terrarun.WebhookDestination, path *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if d.URL == "" {
		allErrs = append(allErrs, field.Required(path.Child("url"), "the http or https URL each event is POSTed to"))
	} else {
		allErrs = append(allErrs, validateHTTPURL(d.URL, path.Child("url"), "https://hooks.example.com/terrarun")...)
	}
	if d.HMACKey != nil {
		allErrs = append(allErrs, validateKeySelector(d.HMACKey, "secret", path.Child("hmacKey"))...)
	}
	return append(allErrs, validateCABundle(d.CABundle, path.Child("caBundle"))...)
}

// validateHTTPURL accepts an absolute http or https URL without
// credentials or a fragment, such as example.
func validateHTTPURL(raw string, path *field.Path, example string) field.ErrorList {
	if len(raw) > maxRunTaskURLLength {
		return field.ErrorList{field.TooLong(path, "", maxRunTaskURLLength)}
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "" || u.Opaque != "" || u.Scheme != "http" && u.Scheme != "https":
		return field.ErrorList{field.Invalid(path, raw, "must be an absolute http or https URL such as "+example)}
	case u.User != nil:
		return field.ErrorList{field.Invalid(path, raw, "must not hold credentials: sign deliveries with hmacKey, or put a URL that is a credential in a Secret (slack.urlFrom)")}
	case u.Fragment != "":
		return field.ErrorList{field.Invalid(path, raw, "must not have a fragment")}
	}
	return nil
}
