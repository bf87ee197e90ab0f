package validation

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

const (
	// MaxWorkspaceNameLength leaves room in a run's name for the workspace's
	// run number ("-" and up to 9 digits).
	MaxWorkspaceNameLength = 52
	// MinDriftInterval is the shortest spec.interval.
	MinDriftInterval = 10 * time.Second
	// MaxDriftInterval is the longest spec.interval.
	MaxDriftInterval = 30 * 24 * time.Hour
	// MaxHistoryLimit bounds spec.historyLimits.
	MaxHistoryLimit = 100
)

var supportedDriftPolicies = []terrarun.DriftPolicy{terrarun.DriftPolicyReport, terrarun.DriftPolicyApply}

// ValidateTerraformWorkspace validates a TerraformWorkspace on create: its
// metadata and its spec.
func ValidateTerraformWorkspace(ws *terrarun.TerraformWorkspace) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&ws.ObjectMeta, true, apimachineryvalidation.NameIsDNSLabel, field.NewPath("metadata"))
	if len(ws.Name) > MaxWorkspaceNameLength {
		allErrs = append(allErrs, field.TooLong(field.NewPath("metadata", "name"), "", MaxWorkspaceNameLength))
	}
	return append(allErrs, ValidateTerraformWorkspaceSpec(ws.Name, &ws.Spec, field.NewPath("spec"))...)
}

// ValidateTerraformWorkspaceUpdate validates an update of the main resource:
// unlike a run's, the spec may change. An unchanged spec is not validated
// again: a rule tightened after the workspace was created must not block
// metadata updates such as removing its finalizer.
func ValidateTerraformWorkspaceUpdate(newWS, oldWS *terrarun.TerraformWorkspace) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newWS.ObjectMeta, &oldWS.ObjectMeta, field.NewPath("metadata"))
	if equality.Semantic.DeepEqual(newWS.Spec, oldWS.Spec) {
		return allErrs
	}
	return append(allErrs, ValidateTerraformWorkspaceSpec(newWS.Name, &newWS.Spec, field.NewPath("spec"))...)
}

// ValidateTerraformWorkspaceStatusUpdate validates a write of status.
func ValidateTerraformWorkspaceStatusUpdate(newWS, oldWS *terrarun.TerraformWorkspace) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newWS.ObjectMeta, &oldWS.ObjectMeta, field.NewPath("metadata"))
	st, fldPath := &newWS.Status, field.NewPath("status")
	if st.ObservedRerunRequests > st.RerunRequests {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("observedRerunRequests"), st.ObservedRerunRequests, "must not exceed status.rerunRequests"))
	}
	if st.RerunRequests < oldWS.Status.RerunRequests {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("rerunRequests"), st.RerunRequests, "never decreases"))
	}
	return allErrs
}

// ValidateTerraformWorkspaceSpec validates the spec of workspace name. It expects the
// defaults to have been applied (see the workspace strategy): the template is
// validated as the spec of the runs it makes, with spec.approval as their
// approval.
func ValidateTerraformWorkspaceSpec(name string, spec *terrarun.TerraformWorkspaceSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	tPath := fldPath.Child("template")
	t := spec.Template
	if t.Operation != "" && t.Operation != terrarun.OperationApply {
		allErrs = append(allErrs, field.Invalid(tPath.Child("operation"), t.Operation,
			"the workspace chooses each run's operation (Apply, Plan for a drift check, Destroy on delete); omit it"))
	}
	if t.Approval != (terrarun.Approval{}) {
		allErrs = append(allErrs, field.Forbidden(tPath.Child("approval"), "set the approval of the workspace's runs in spec.approval"))
	}
	if t.ForceUnlock != "" {
		allErrs = append(allErrs, field.Forbidden(tPath.Child("forceUnlock"),
			"a workspace's runs never release a state lock: create one TerraformRun with spec.forceUnlock, the same spec.workspace and backend"))
	}
	if t.Engine.ImageDigest != "" {
		allErrs = append(allErrs, field.Forbidden(tPath.Child("engine", "imageDigest"),
			"set by the server's image verification on each run; name a digest in spec.template.engine.image (image@sha256:...) instead"))
	}
	if o := t.Source.OCI; o != nil && o.Verify != nil && o.Verify.TrustedKeys != "" {
		allErrs = append(allErrs, field.Forbidden(tPath.Child("source", "oci", "verify", "trustedKeys"),
			"copied by the server from the cluster policy into each run; name your own keys in verify.keysSecret instead"))
	}
	if t.OutputsSecret != "" {
		allErrs = append(allErrs, field.Forbidden(tPath.Child("outputsSecret"), "set it in spec.outputsSecret: the workspace, not each run, keeps the outputs of its last apply"))
	}
	allErrs = append(allErrs, validateObjectName(spec.OutputsSecret, false, fldPath.Child("outputsSecret"))...)
	t.Operation = terrarun.OperationApply
	t.Approval = spec.Approval
	// A workspace output is read as a run output by each run.
	t.Variables = slices.Clone(t.Variables)
	deps := map[string]bool{}
	for i, d := range spec.DependsOn {
		p := fldPath.Child("dependsOn").Index(i).Child("name")
		allErrs = append(allErrs, validateObjectName(d.Name, true, p)...)
		switch {
		case deps[d.Name]:
			allErrs = append(allErrs, field.Duplicate(p, d.Name))
		case d.Name != "" && d.Name == name:
			allErrs = append(allErrs, field.Invalid(p, d.Name, "a workspace cannot depend on itself"))
		}
		deps[d.Name] = true
	}
	for i, v := range t.Variables {
		if v.ValueFrom == nil || v.ValueFrom.WorkspaceOutput == nil {
			continue
		}
		sel, p := v.ValueFrom.WorkspaceOutput, tPath.Child("variables").Index(i).Child("valueFrom", "workspaceOutput")
		if sel.Name != "" && !deps[sel.Name] {
			allErrs = append(allErrs, field.Invalid(p.Child("name"), sel.Name, "list the workspace in spec.dependsOn too, so that runs wait for it"))
		}
		vf := *v.ValueFrom
		vf.RunOutput, vf.WorkspaceOutput = sel, nil
		t.Variables[i].ValueFrom = &vf
	}
	for _, e := range ValidateTerraformRunSpec(&t, tPath) {
		if strings.Contains(e.Field, ".valueFrom.runOutput") {
			// Reported under the name the user wrote.
			e.Field = strings.Replace(e.Field, ".valueFrom.runOutput", ".valueFrom.workspaceOutput", 1)
		}
		// The runs' approval is the workspace's.
		if rest, ok := strings.CutPrefix(e.Field, tPath.Child("approval").String()); ok {
			e.Field = fldPath.Child("approval").String() + rest
		}
		allErrs = append(allErrs, e)
	}
	for _, iv := range []struct {
		name string
		d    *metav1.Duration
	}{{"interval", spec.Interval}, {"sourceInterval", spec.SourceInterval}} {
		if d := iv.d; d != nil && (d.Duration < MinDriftInterval || d.Duration > MaxDriftInterval) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child(iv.name), d.Duration.String(),
				fmt.Sprintf("must be between %s and %s, such as 10m or 1h; omit it to check never", formatDuration(MinDriftInterval), formatDuration(MaxDriftInterval))))
		}
	}
	if spec.SourceInterval != nil && spec.Template.Source.SourceRef != nil {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("sourceInterval"), "a workspace follows a Flux source's revision as source-controller reports it; set the source's own spec.interval, and omit this"))
	} else if o := spec.Template.Source.OCI; spec.SourceInterval != nil && o != nil && o.Ref != nil && o.Ref.Digest != "" {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("sourceInterval"), "an OCI digest never resolves to anything else; track a tag or a semver range, or omit it"))
	} else if spec.SourceInterval != nil && spec.Template.Source.Git == nil && o == nil {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("sourceInterval"), "only a git or OCI source has a ref to resolve again; omit it"))
	}
	if spec.DriftPolicy != "" && !slices.Contains(supportedDriftPolicies, spec.DriftPolicy) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("driftPolicy"), spec.DriftPolicy, supportedDriftPolicies))
	}
	for _, l := range []struct {
		name string
		n    *int32
	}{{"succeeded", spec.HistoryLimits.Succeeded}, {"failed", spec.HistoryLimits.Failed}} {
		if name, n := l.name, l.n; n != nil && (*n < 1 || *n > MaxHistoryLimit) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("historyLimits", name), *n, fmt.Sprintf("must be between 1 and %d", MaxHistoryLimit)))
		}
	}
	return allErrs
}

// ValidateTerraformWorkspaceRerun validates the body of a POST to rerun.
func ValidateTerraformWorkspaceRerun(r *terrarun.TerraformWorkspaceRerun) field.ErrorList {
	if len(r.Reason) > maxCommentLength {
		return field.ErrorList{withHint(field.TooLong(field.NewPath("reason"), "", maxCommentLength), "shorten the reason")}
	}
	return nil
}
