package validation

import (
	"crypto/x509"
	"net/url"
	"time"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// Bounds of a TerraformRunTask.
const (
	maxRunTaskURLLength = 2048
	// maxCABundleLength bounds a task's CA bundle, as a webhook's.
	maxCABundleLength = 64 << 10
	maxRunTaskTimeout = time.Hour
)

// ValidateTerraformRunTask validates a TerraformRunTask on create and
// update.
func ValidateTerraformRunTask(t *terrarun.TerraformRunTask) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&t.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	spec, specPath := &t.Spec, field.NewPath("spec")
	allErrs = append(allErrs, validateRunTaskURL(spec.URL, specPath.Child("url"))...)
	allErrs = append(allErrs, validateCABundle(spec.CABundle, specPath.Child("caBundle"))...)
	if spec.HMACKey != nil {
		allErrs = append(allErrs, validateKeySelector(spec.HMACKey, "secret", specPath.Child("hmacKey"))...)
	}
	if len(spec.Stages) == 0 {
		allErrs = append(allErrs, field.Required(specPath.Child("stages"), "name at least one of PrePlan, PostPlan, PreApply, PostApply"))
	}
	allErrs = append(allErrs, validateSet(spec.Stages, []terrarun.RunTaskStage{terrarun.RunTaskPrePlan, terrarun.RunTaskPostPlan,
		terrarun.RunTaskPreApply, terrarun.RunTaskPostApply}, specPath.Child("stages"))...)
	switch spec.Enforcement {
	case "", terrarun.RunTaskMandatory, terrarun.RunTaskAdvisory:
	default:
		allErrs = append(allErrs, field.NotSupported(specPath.Child("enforcement"), spec.Enforcement,
			[]terrarun.RunTaskEnforcement{terrarun.RunTaskMandatory, terrarun.RunTaskAdvisory}))
	}
	if d := spec.Timeout; d != nil && (d.Duration <= 0 || d.Duration > maxRunTaskTimeout) {
		allErrs = append(allErrs, field.Invalid(specPath.Child("timeout"), d.Duration.String(), "must be more than 0s and at most 1h"))
	}
	if spec.RunSelector != nil {
		allErrs = append(allErrs, metav1validation.ValidateLabelSelector(spec.RunSelector, metav1validation.LabelSelectorValidationOptions{}, specPath.Child("runSelector"))...)
	}
	return allErrs
}

// validateRunTaskURL accepts an https URL: a task's payload carries a token
// that reads the run's plan, so it goes only to a server that proves who it
// is (a plain http listener on loopback is one any local stage can take
// over while the task's own server is down). Credentials never go in the
// URL: the HMAC key is a Secret.
func validateRunTaskURL(raw string, path *field.Path) field.ErrorList {
	if raw == "" {
		return field.ErrorList{field.Required(path, "the https URL terrarun POSTs the task's payload to")}
	}
	if len(raw) > maxRunTaskURLLength {
		return field.ErrorList{field.TooLong(path, "", maxRunTaskURLLength)}
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "" || u.Opaque != "":
		return field.ErrorList{field.Invalid(path, raw, "must be an absolute URL such as https://scanner.example.com/terrarun")}
	case u.User != nil:
		return field.ErrorList{field.Invalid(path, raw, "must not hold credentials; the task authenticates terrarun by the payload's signature (spec.hmacKey)")}
	case u.Fragment != "":
		return field.ErrorList{field.Invalid(path, raw, "must not have a fragment")}
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http":
		return field.ErrorList{field.Invalid(path, raw, "must be https, also on loopback: the payload carries a token that reads the run's plan, and only TLS proves that the task's own server, not a stage listening in its place, receives it (a private CA goes in spec.caBundle)")}
	}
	return field.ErrorList{field.Invalid(path, raw, "must be an https URL")}
}

// validateCABundle accepts PEM that holds at least one certificate, and
// nothing else.
func validateCABundle(bundle []byte, path *field.Path) field.ErrorList {
	if len(bundle) == 0 {
		return nil
	}
	if len(bundle) > maxCABundleLength {
		return field.ErrorList{field.TooLong(path, "", maxCABundleLength)}
	}
	if !x509.NewCertPool().AppendCertsFromPEM(bundle) {
		return field.ErrorList{field.Invalid(path, "<PEM>", "must hold PEM-encoded CA certificates (-----BEGIN CERTIFICATE-----)")}
	}
	return nil
}
