package validation

import (
	"regexp"
	"slices"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

var (
	// supportedPlanFormats are the formats a user is told about; file and
	// source are also accepted, but served only to the apply stage's executor.
	supportedPlanFormats = []string{terrarun.PlanFormatText, terrarun.PlanFormatJSON}
	acceptedPlanFormats  = []string{"", terrarun.PlanFormatText, terrarun.PlanFormatJSON, terrarun.PlanFormatFile, terrarun.PlanFormatSource}
	supportedPlanParts   = []string{terrarun.PlanPartFile, terrarun.PlanPartText, terrarun.PlanPartJSON, terrarun.PlanPartSource, terrarun.PlanPartResult, terrarun.PlanPartAll}
)

// ValidateTerraformRunLogOptions validates the query options of the logs
// subresource. upload says the request is the executor's POST, which must
// name its stage and attempt; the read options (follow, tailLines and
// limitBytes) are ignored then.
func ValidateTerraformRunLogOptions(opts *terrarun.TerraformRunLogOptions, upload bool) field.ErrorList {
	var allErrs field.ErrorList
	stagePath := field.NewPath("stage")
	switch {
	case opts.Stage == "" && upload:
		allErrs = append(allErrs, field.Required(stagePath, "name the stage that writes: plan or apply"))
	case opts.Stage != "" && !slices.Contains(supportedStages, opts.Stage):
		allErrs = append(allErrs, field.NotSupported(stagePath, opts.Stage, supportedStages))
	}
	allErrs = append(allErrs, validateAttempt(opts.Attempt, upload, "the attempt that writes")...)
	if upload {
		return allErrs
	}
	if opts.End {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("end"), "only the stage's executor ends its log, with the POST that writes it"))
	}
	if opts.TailLines != nil {
		allErrs = append(allErrs, apimachineryvalidation.ValidateNonnegativeField(*opts.TailLines, field.NewPath("tailLines"))...)
	}
	if opts.LimitBytes != nil {
		allErrs = append(allErrs, apimachineryvalidation.ValidateNonnegativeField(*opts.LimitBytes, field.NewPath("limitBytes"))...)
	}
	return allErrs
}

// ValidateTerraformRunPlanOptions validates the query options of the plan
// subresource. upload says the request is the plan stage's POST, which must
// name its attempt and the part it uploads; otherwise only format is read.
func ValidateTerraformRunPlanOptions(opts *terrarun.TerraformRunPlanOptions, upload bool) field.ErrorList {
	if !upload {
		if !slices.Contains(acceptedPlanFormats, opts.Format) {
			return field.ErrorList{field.NotSupported(field.NewPath("format"), opts.Format, supportedPlanFormats)}
		}
		return nil
	}
	allErrs := validateAttempt(opts.Attempt, true, "the plan stage attempt that uploads")
	partPath := field.NewPath("part")
	switch {
	case opts.Part == "":
		allErrs = append(allErrs, field.Required(partPath, "name the uploaded part: file, text, json, source, result, or all for a multipart/form-data body of several"))
	case !slices.Contains(supportedPlanParts, opts.Part):
		allErrs = append(allErrs, field.NotSupported(partPath, opts.Part, supportedPlanParts))
	}
	return allErrs
}

// ValidateTerraformRunOutputsOptions validates the query options of the
// outputs subresource. upload says the request is the apply stage's POST,
// which must name its attempt; a GET reads no options.
func ValidateTerraformRunOutputsOptions(opts *terrarun.TerraformRunOutputsOptions, upload bool) field.ErrorList {
	if !upload {
		return nil
	}
	return validateAttempt(opts.Attempt, true, "the apply stage attempt that uploads")
}

// validateAttempt validates the attempt option: at least 1 when set, and set
// when required, which hint explains.
func validateAttempt(attempt *int32, required bool, hint string) field.ErrorList {
	fldPath := field.NewPath("attempt")
	switch {
	case attempt == nil && required:
		return field.ErrorList{field.Required(fldPath, hint)}
	case attempt != nil && *attempt < 1:
		return field.ErrorList{field.Invalid(fldPath, *attempt, "must be at least 1; attempts are counted from 1")}
	}
	return nil
}

// ValidateTerraformRunDiscard validates the body of a POST to the discard
// subresource.
func ValidateTerraformRunDiscard(d *terrarun.TerraformRunDiscard) field.ErrorList {
	allErrs := validateComment(d.Comment)
	if d.Reason != "" && !reasonRegexp.MatchString(d.Reason) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("reason"), d.Reason, "must be a CamelCase word of at most 64 letters and digits, such as Superseded"))
	}
	return allErrs
}

var reasonRegexp = regexp.MustCompile(`^[A-Z][A-Za-z0-9]{0,63}$`)

// ValidateTerraformRunCancel validates the body of a POST to the cancel
// subresource.
func ValidateTerraformRunCancel(c *terrarun.TerraformRunCancel) field.ErrorList {
	return validateComment(c.Comment)
}

func validateComment(c string) field.ErrorList {
	if len(c) > maxCommentLength {
		return field.ErrorList{field.TooLong(field.NewPath("comment"), "", maxCommentLength)}
	}
	return nil
}
