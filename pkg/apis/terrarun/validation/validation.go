// Package validation validates the internal terrarun.dev API types: a
// TerraformRun on create, on update of the main resource and on update of the
// status subresource, the bodies of the approve, discard and cancel
// subresources, and the query options of the plan, logs and outputs
// subresources.
//
// Every function returns a field.ErrorList whose paths name the offending field
// exactly (for example spec.variables[2].valueFrom or
// spec.source.inline[main.tf]), and whose messages say what to do instead.
// Values that may be secret (variable values, backend config values, URLs with
// credentials or query strings) are never copied into an error.
package validation

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/Masterminds/semver/v3"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

const (
	// MaxInlineBytes caps the total size of spec.source.inline: the sum of the
	// lengths of every file name and every file content.
	MaxInlineBytes = 256 * 1024
	// MaxStageTimeout is the largest accepted spec.timeouts.plan and spec.timeouts.apply.
	MaxStageTimeout = 24 * time.Hour
	// MaxApprovalTimeout is the largest accepted spec.approval.timeout.
	MaxApprovalTimeout = 720 * time.Hour
	// MaxRequiredApprovals is the largest accepted spec.approval.requiredApprovals.
	MaxRequiredApprovals = 10
	// MaxParallelism is the largest accepted spec.parallelism.
	MaxParallelism = 256
	// MaxSpecBytes caps the spec's size encoded as JSON: with metadata
	// (annotations are capped at 256 KiB) and status, a run stays well
	// under etcd's default request limit of 1.5 MiB.
	MaxSpecBytes = 512 * 1024
	// MaxOutputValueBytes is the largest output value kept in
	// status.outputs; larger values are served by the outputs subresource
	// only.
	MaxOutputValueBytes = 4 * 1024
	// MaxOutputValuesBytes caps the output values in status.outputs
	// together.
	MaxOutputValuesBytes = 64 * 1024
)

const (
	// maxImageLength caps spec.engine.image.
	maxImageLength = 512
	// maxAddressLength caps each entry of spec.targets and spec.replace.
	maxAddressLength = 1024
	// maxCommentLength caps the comment of an approval, in bytes.
	maxCommentLength = 1024
	// maxInlineFileNameLength caps an inline file name, so that it is also a valid
	// ConfigMap or Secret key.
	maxInlineFileNameLength = utilvalidation.DNS1123SubdomainMaxLength
	// redacted replaces a value that must not appear in an error.
	redacted = "<redacted>"
)

var (
	inlineFileNameRegexp     = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*\.(tf|tf\.json|tfvars)$`)
	identifierRegexp         = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)
	backendTypeRegexp        = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	backendConfigKeyRegexp   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	workspaceRegexp          = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,89}$`)
	lockIDRegexp             = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/+=-]{0,127}$`)
	planDigestRegexp         = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	scpLikeWithoutPassRegexp = regexp.MustCompile(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^:@?#]*$`)
)

var (
	supportedOperations = []terrarun.Operation{terrarun.OperationApply, terrarun.OperationDestroy, terrarun.OperationPlan}
	supportedApproval   = []terrarun.ApprovalMode{terrarun.ApprovalModeManual, terrarun.ApprovalModeAuto}
	supportedBinaries   = []terrarun.EngineBinary{terrarun.EngineTerraform, terrarun.EngineTofu}
	supportedPhases     = []terrarun.RunPhase{
		terrarun.RunPhasePending, terrarun.RunPhaseQueued, terrarun.RunPhasePlanning, terrarun.RunPhaseAwaitingApproval,
		terrarun.RunPhaseApplying, terrarun.RunPhaseSucceeded, terrarun.RunPhaseFailed,
		terrarun.RunPhaseCanceled, terrarun.RunPhaseDiscarded,
	}
	supportedStages              = []terrarun.StageName{terrarun.StagePlan, terrarun.StageApply}
	supportedTolerationOperators = []corev1.TolerationOperator{corev1.TolerationOpEqual, corev1.TolerationOpExists}
	supportedTaintEffects        = []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}
)

// credentialKeyMarkers are substrings (matched case-insensitively) of backend
// config keys that hold credentials. Such settings belong in configSecret.
var credentialKeyMarkers = []string{
	"password", "secret", "token", "access_key", "secret_key", "private_key",
	"client_secret", "sas_token", "credentials", "client_key", "api_key", "encryption_key",
	"conn_str", "connection_string", "http_auth",
}

// nonSecretCredentialKeys are well-known backend config keys that match a
// credential marker but hold no secret.
var nonSecretCredentialKeys = map[string]bool{
	"secret_suffix":               true, // kubernetes: suffix of the state Secret's name
	"skip_credentials_validation": true, // s3: a boolean
	"kms_encryption_key":          true, // gcs: the name of a Cloud KMS key
}

// ValidateTerraformRun validates a TerraformRun on create: its object metadata
// (namespaced, with a DNS subdomain name) and its spec.
func ValidateTerraformRun(run *terrarun.TerraformRun) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&run.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateTerraformRunSpec(&run.Spec, field.NewPath("spec"))...)
	return allErrs
}

// ValidateTerraformRunUpdate validates an update of the main resource. Metadata
// may change under the usual rules; the spec is immutable after creation. The new
// spec is validated as well, so a run that is invalid stays invalid.
func ValidateTerraformRunUpdate(newRun, oldRun *terrarun.TerraformRun) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newRun.ObjectMeta, &oldRun.ObjectMeta, field.NewPath("metadata"))
	specErrs := validateSpecUnchanged(&newRun.Spec, &oldRun.Spec)
	if len(specErrs) == 0 {
		// An unchanged spec is not validated again: a rule tightened after the run
		// was created must not block metadata updates such as removing a finalizer.
		// Its one mutable field is, when it changes.
		if ttl := newRun.Spec.TTLSecondsAfterFinished; ttl != nil {
			allErrs = append(allErrs, apimachineryvalidation.ValidateNonnegativeField(int64(*ttl), field.NewPath("spec", "ttlSecondsAfterFinished"))...)
		}
		return allErrs
	}
	allErrs = append(allErrs, specErrs...)
	allErrs = append(allErrs, ValidateTerraformRunSpec(&newRun.Spec, field.NewPath("spec"))...)
	return allErrs
}

// ValidateTerraformRunStatusUpdate validates a write through the status
// subresource: the metadata update, an unchanged spec, and the new status.
func ValidateTerraformRunStatusUpdate(newRun, oldRun *terrarun.TerraformRun) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newRun.ObjectMeta, &oldRun.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateSpecUnchanged(&newRun.Spec, &oldRun.Spec)...)
	allErrs = append(allErrs, validateStatus(&newRun.Status, field.NewPath("status"))...)
	allErrs = append(allErrs, validatePinnedArtifact(&newRun.Status, &oldRun.Status)...)
	return allErrs
}

// validatePinnedArtifact keeps the Flux artifact a run pinned: its plan
// was made, and is approved, from exactly that artifact.
func validatePinnedArtifact(newStatus, oldStatus *terrarun.TerraformRunStatus) field.ErrorList {
	if oldStatus.Source == nil || oldStatus.Source.Artifact == nil {
		return nil
	}
	if newStatus.Source == nil || !reflect.DeepEqual(newStatus.Source, oldStatus.Source) {
		return field.ErrorList{field.Forbidden(field.NewPath("status", "source"),
			"the run's Flux artifact is pinned once its plan started; a new revision needs a new run")}
	}
	return nil
}

// ValidateTerraformRunApproval validates the body of a POST to the approve
// subresource: the digest of the plan being approved and an optional comment.
func ValidateTerraformRunApproval(a *terrarun.TerraformRunApproval) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, validatePlanDigest(a.PlanDigest, true, field.NewPath("planDigest"))...)
	if len(a.Comment) > maxCommentLength {
		allErrs = append(allErrs, withHint(field.TooLong(field.NewPath("comment"), "", maxCommentLength), "shorten the comment"))
	}
	return allErrs
}

// ValidateDuration validates an optional duration: when set it must be greater
// than zero and at most max.
func ValidateDuration(d *metav1.Duration, max time.Duration, fldPath *field.Path) field.ErrorList {
	if d == nil {
		return nil
	}
	var allErrs field.ErrorList
	switch {
	case d.Duration <= 0:
		allErrs = append(allErrs, field.Invalid(fldPath, d.Duration.String(), "must be greater than zero, such as 30m or 1h"))
	case d.Duration > max:
		allErrs = append(allErrs, field.Invalid(fldPath, d.Duration.String(), fmt.Sprintf("must be at most %s", formatDuration(max))))
	}
	return allErrs
}

// ValidateTerraformRunSpec validates a TerraformRunSpec. It expects the defaults
// (operation, approval mode, engine) to have been applied already.
func ValidateTerraformRunSpec(spec *terrarun.TerraformRunSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList

	switch {
	case spec.Operation == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("operation"), "set one of Apply, Destroy or Plan"))
	case !slices.Contains(supportedOperations, spec.Operation):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("operation"), spec.Operation, supportedOperations))
	}

	allErrs = append(allErrs, validateSource(&spec.Source, fldPath.Child("source"))...)
	allErrs = append(allErrs, validateVariables(spec.Variables, fldPath.Child("variables"))...)
	if ttl := spec.TTLSecondsAfterFinished; ttl != nil {
		allErrs = append(allErrs, apimachineryvalidation.ValidateNonnegativeField(int64(*ttl), fldPath.Child("ttlSecondsAfterFinished"))...)
	}
	if spec.Backend != nil {
		allErrs = append(allErrs, validateBackend(spec.Backend, fldPath.Child("backend"))...)
	}
	if spec.ForceUnlock != "" && !lockIDRegexp.MatchString(spec.ForceUnlock) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("forceUnlock"), spec.ForceUnlock,
			"must be a state lock's ID as the failed plan printed it (Lock Info: ID), such as 5c1b2a5e-0d3c-4b0e-9a57-1f0e9d2c7b11: at most 128 letters, digits and '.', '_', ':', '/', '+', '=' or '-'"))
	}
	if spec.Workspace != "" && !workspaceRegexp.MatchString(spec.Workspace) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("workspace"), spec.Workspace,
			"must be at most 90 characters: a letter or digit followed by letters, digits, '_', '.' or '-' (for example default or staging)"))
	}
	allErrs = append(allErrs, validateApproval(&spec.Approval, fldPath.Child("approval"))...)
	allErrs = append(allErrs, validateEngine(&spec.Engine, fldPath.Child("engine"))...)
	allErrs = append(allErrs, ValidateDuration(spec.Timeouts.Plan, MaxStageTimeout, fldPath.Child("timeouts", "plan"))...)
	allErrs = append(allErrs, ValidateDuration(spec.Timeouts.Apply, MaxStageTimeout, fldPath.Child("timeouts", "apply"))...)
	if spec.Executor != nil {
		allErrs = append(allErrs, validateExecutor(spec.Executor, fldPath.Child("executor"))...)
	}
	allErrs = append(allErrs, validateObjectName(spec.OutputsSecret, false, fldPath.Child("outputsSecret"))...)
	allErrs = append(allErrs, validateAddresses(spec.Targets, fldPath.Child("targets"))...)
	allErrs = append(allErrs, validateAddresses(spec.Replace, fldPath.Child("replace"))...)
	if spec.Parallelism != nil && (*spec.Parallelism < 1 || *spec.Parallelism > MaxParallelism) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("parallelism"), *spec.Parallelism,
			fmt.Sprintf("must be between 1 and %d; leave it unset for Terraform's default of 10", MaxParallelism)))
	}
	if spec.Creator != nil && spec.Creator.Username == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("creator", "username"), "the creator must name a user"))
	}
	allErrs = append(allErrs, validateSpecSize(spec, fldPath)...)
	return allErrs
}

// validateSpecSize caps the spec's encoded size at MaxSpecBytes, well under
// etcd's request limit, so that a run never fails later when its status
// grows; the error names the spec's largest field.
func validateSpecSize(spec *terrarun.TerraformRunSpec, fldPath *field.Path) field.ErrorList {
	b, err := json.Marshal(spec)
	if err != nil || len(b) <= MaxSpecBytes {
		return nil
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(b, &fields)
	largest, size := "", 0
	for name, raw := range fields {
		if len(raw) > size || (len(raw) == size && name < largest) {
			largest, size = name, len(raw)
		}
	}
	return field.ErrorList{withHint(field.TooLong(fldPath, "", MaxSpecBytes),
		fmt.Sprintf("the spec is %d bytes, its largest field %s %d bytes; put large configurations in a git repository or a ConfigMap, and large values in Secrets or ConfigMaps",
			len(b), fldPath.Child(largest), size))}
}

// validateSpecUnchanged refuses any change of an immutable spec.
func validateSpecUnchanged(newSpec, oldSpec *terrarun.TerraformRunSpec) field.ErrorList {
	if terrarun.SameRunSpec(newSpec, oldSpec) {
		return nil
	}
	return field.ErrorList{field.Forbidden(field.NewPath("spec"), "spec is immutable after creation but for ttlSecondsAfterFinished; to run again, create a new TerraformRun")}
}

// validateSource checks that exactly one source is set and validates it.
func validateSource(src *terrarun.Source, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	var set []string
	if len(src.Inline) > 0 {
		set = append(set, "inline")
		allErrs = append(allErrs, validateInline(src.Inline, fldPath.Child("inline"))...)
	}
	if src.ConfigMap != nil {
		set = append(set, "configMap")
		allErrs = append(allErrs, validateObjectName(src.ConfigMap.Name, true, fldPath.Child("configMap", "name"))...)
	}
	if src.Git != nil {
		set = append(set, "git")
		allErrs = append(allErrs, validateGit(src.Git, fldPath.Child("git"))...)
	}
	if src.OCI != nil {
		set = append(set, "oci")
		allErrs = append(allErrs, validateOCI(src.OCI, fldPath.Child("oci"))...)
	}
	if src.SourceRef != nil {
		set = append(set, "sourceRef")
		allErrs = append(allErrs, validateSourceRef(src.SourceRef, fldPath.Child("sourceRef"))...)
	}

	switch {
	case len(set) == 0 && src.Inline != nil:
		// inline: {} was sent: the user meant inline but gave no file.
		allErrs = append(allErrs, field.Required(fldPath.Child("inline"), "add at least one *.tf or *.tf.json file, or set configMap, git, oci or sourceRef instead"))
	case len(set) == 0:
		allErrs = append(allErrs, field.Required(fldPath, "set exactly one of inline, configMap, git, oci or sourceRef"))
	default:
		for _, extra := range set[1:] {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child(extra),
				fmt.Sprintf("only one source may be set; %s is already set", set[0])))
		}
	}
	return allErrs
}

// validateInline validates inline files: their names, their total size, and the
// presence of at least one configuration file.
func validateInline(files map[string]string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	total := 0
	hasConfig := false
	for _, name := range slices.Sorted(maps.Keys(files)) {
		total += len(name) + len(files[name])
		keyPath := fldPath.Key(name)
		switch {
		case len(name) > maxInlineFileNameLength:
			allErrs = append(allErrs, withHint(field.TooLong(keyPath, "", maxInlineFileNameLength), "use a shorter file name"))
		case name == terrarun.LockFileName:
		case !inlineFileNameRegexp.MatchString(name):
			allErrs = append(allErrs, field.Invalid(keyPath, name,
				"must be a plain file name (no directories, not starting with '.') ending in .tf, .tf.json or .tfvars, such as main.tf, or the dependency lock file "+terrarun.LockFileName+"; use a configMap or git source for other layouts"))
		}
		if strings.HasSuffix(name, ".tf") || strings.HasSuffix(name, ".tf.json") {
			hasConfig = true
		}
	}
	if total > MaxInlineBytes {
		allErrs = append(allErrs, withHint(field.TooLong(fldPath, "", MaxInlineBytes),
			"the file names and contents together are too large; use a configMap or git source for larger configurations"))
	}
	if !hasConfig {
		allErrs = append(allErrs, field.Required(fldPath, "add at least one *.tf or *.tf.json file; *.tfvars files alone are not a configuration"))
	}
	return allErrs
}

// validateGit validates a git source. The URL is never echoed when it may hold
// a secret.
func validateGit(g *terrarun.GitSource, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateGitURL(g.URL, fldPath.Child("url"))...)

	refPath := fldPath.Child("ref")
	switch {
	case g.Ref == "":
		allErrs = append(allErrs, field.Required(refPath, "name a branch, tag or commit, such as main or v1.2.0"))
	case hasSpaceOrControl(g.Ref):
		allErrs = append(allErrs, field.Invalid(refPath, g.Ref, "must not contain whitespace or control characters; name a branch, tag or commit"))
	case strings.HasPrefix(g.Ref, "-"):
		allErrs = append(allErrs, field.Invalid(refPath, g.Ref, "must not start with '-'; name a branch, tag or commit"))
	}

	allErrs = append(allErrs, validateSourcePath(g.Path, "repository", fldPath.Child("path"))...)
	allErrs = append(allErrs, validateObjectName(g.CredentialsSecret, false, fldPath.Child("credentialsSecret"))...)
	return allErrs
}

// sourceKinds are the kinds spec.source.sourceRef may name.
var sourceKinds = []string{terrarun.SourceKindGitRepository, terrarun.SourceKindOCIRepository, terrarun.SourceKindBucket}

// validateSourceRef validates a reference to a Flux source.
func validateSourceRef(r *terrarun.SourceReference, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch {
	case r.Kind == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("kind"), "name the kind of the Flux source: "+strings.Join(sourceKinds, ", ")))
	case !slices.Contains(sourceKinds, r.Kind):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("kind"), r.Kind, sourceKinds))
	}
	allErrs = append(allErrs, validateObjectName(r.Name, true, fldPath.Child("name"))...)
	allErrs = append(allErrs, validateSourcePath(r.Path, "artifact", fldPath.Child("path"))...)
	return allErrs
}

// validateSourcePath validates the directory of a git repository or an
// OCI artifact (what) that holds the configuration.
func validateSourcePath(p, what string, fldPath *field.Path) field.ErrorList {
	switch {
	case p == "":
		return nil
	case strings.IndexFunc(p, unicode.IsControl) >= 0:
		return field.ErrorList{field.Invalid(fldPath, p, "must not contain control characters")}
	case strings.Contains(p, `\`):
		return field.ErrorList{field.Invalid(fldPath, p, "must use '/' as separator, not '\\'")}
	case strings.HasPrefix(p, "/"):
		return field.ErrorList{field.Invalid(fldPath, p, "must be relative to the "+what+" root, such as infra/prod; remove the leading '/'")}
	case hasDotDotElement(p):
		return field.ErrorList{field.Invalid(fldPath, p, "must not contain '..'; the path must stay inside the "+what)}
	}
	return nil
}

// ociDigestRegexp matches a sha256 manifest digest.
var ociDigestRegexp = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// ociTagRegexp is the OCI distribution spec's tag grammar.
var ociTagRegexp = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)

// validateOCI validates an OCI source.
func validateOCI(o *terrarun.OCISource, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateOCIURL(o.URL, fldPath.Child("url"))...)
	if r := o.Ref; r != nil {
		refPath := fldPath.Child("ref")
		var set []string
		if r.Tag != "" {
			set = append(set, "tag")
			if !ociTagRegexp.MatchString(r.Tag) {
				allErrs = append(allErrs, field.Invalid(refPath.Child("tag"), r.Tag, "must be an OCI tag: letters, digits, '_', '.' and '-', at most 128, not starting with '.' or '-', such as v1.2.0"))
			}
		}
		if r.Semver != "" {
			set = append(set, "semver")
			if _, err := semver.NewConstraint(r.Semver); err != nil {
				allErrs = append(allErrs, field.Invalid(refPath.Child("semver"), r.Semver, "must be a semver range, such as \">=1.0.0 <2.0.0\" or \"~1.2\": "+err.Error()))
			}
		}
		if r.Digest != "" {
			set = append(set, "digest")
			if !ociDigestRegexp.MatchString(r.Digest) {
				allErrs = append(allErrs, field.Invalid(refPath.Child("digest"), r.Digest, "must be sha256: and 64 lowercase hex digits, as `crane digest` or `oras resolve` prints it"))
			}
		}
		for _, extra := range set[min(1, len(set)):] {
			allErrs = append(allErrs, field.Forbidden(refPath.Child(extra), fmt.Sprintf("set one of tag, semver and digest; %s is already set", set[0])))
		}
	}
	allErrs = append(allErrs, validateSourcePath(o.Path, "artifact", fldPath.Child("path"))...)
	allErrs = append(allErrs, validateObjectName(o.CredentialsSecret, false, fldPath.Child("credentialsSecret"))...)
	allErrs = append(allErrs, validateObjectName(o.CertSecret, false, fldPath.Child("certSecret"))...)
	if o.Insecure && o.CredentialsSecret != "" {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("insecure"), "credentials are never sent over plain HTTP: serve the registry over TLS (with certSecret for a private CA), or drop credentialsSecret"))
	}
	if o.Insecure && o.CertSecret != "" {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("insecure"), "certSecret verifies TLS, which insecure turns off: set one of them"))
	}
	if v := o.Verify; v != nil {
		vPath := fldPath.Child("verify")
		if v.Provider != "" && v.Provider != terrarun.OCIVerificationProviderCosign {
			allErrs = append(allErrs, field.NotSupported(vPath.Child("provider"), v.Provider, []string{terrarun.OCIVerificationProviderCosign}))
		}
		if keyless := len(v.MatchOIDCIdentity) > 0 || v.TrustedRootSecret != ""; keyless {
			if v.KeysSecret != "" {
				allErrs = append(allErrs, field.Forbidden(vPath.Child("keysSecret"), "set keysSecret (signatures made with a key) or matchOIDCIdentity with trustedRootSecret (keyless signatures), not both"))
			}
			allErrs = append(allErrs, validateObjectName(v.TrustedRootSecret, true, vPath.Child("trustedRootSecret"))...)
			allErrs = append(allErrs, validateOIDCIdentities(v.MatchOIDCIdentity, vPath.Child("matchOIDCIdentity"))...)
		} else {
			allErrs = append(allErrs, validateObjectName(v.KeysSecret, v.TrustedKeys == "", vPath.Child("keysSecret"))...)
		}
		if len(v.TrustedKeys) > maxTrustedKeysLength {
			allErrs = append(allErrs, field.TooLong(vPath.Child("trustedKeys"), "", maxTrustedKeysLength))
		}
	}
	return allErrs
}

// validateOIDCIdentities requires at least one identity, each with an
// issuer and a subject that are regular expressions.
func validateOIDCIdentities(ids []terrarun.OIDCIdentityMatch, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(ids) == 0 {
		return field.ErrorList{field.Required(fldPath, "list who may sign, such as {issuer: https://token\\.actions\\.githubusercontent\\.com, subject: https://github\\.com/org/infra/.*}; keyless verification needs at least one identity")}
	}
	if len(ids) > maxOIDCIdentities {
		allErrs = append(allErrs, field.TooMany(fldPath, len(ids), maxOIDCIdentities))
	}
	for i, id := range ids {
		for _, f := range []struct{ name, expr string }{{"issuer", id.Issuer}, {"subject", id.Subject}} {
			name, expr := f.name, f.expr
			p := fldPath.Index(i).Child(name)
			switch _, err := regexp.Compile(expr); {
			case expr == "":
				allErrs = append(allErrs, field.Required(p, "a regular expression that the certificate's "+name+" must match whole"))
			case len(expr) > maxOIDCIdentityLength:
				allErrs = append(allErrs, field.TooLong(p, "", maxOIDCIdentityLength))
			case err != nil:
				allErrs = append(allErrs, field.Invalid(p, expr, "must be a regular expression (RE2): "+err.Error()))
			}
		}
	}
	return allErrs
}

// maxOIDCIdentities and maxOIDCIdentityLength cap
// spec.source.oci.verify.matchOIDCIdentity.
const (
	maxOIDCIdentities     = 16
	maxOIDCIdentityLength = 1024
)

// maxTrustedKeysLength caps spec.source.oci.verify.trustedKeys, which the
// server copies from the cluster policy.
const maxTrustedKeysLength = 16 << 10

// validateOCIURL accepts oci://host[:port]/path without a tag, a digest or
// credentials.
func validateOCIURL(raw string, fldPath *field.Path) field.ErrorList {
	const example = "such as oci://ghcr.io/org/infra"
	rest, ok := strings.CutPrefix(raw, "oci://")
	switch {
	case raw == "":
		return field.ErrorList{field.Required(fldPath, "set the repository, "+example)}
	case !ok:
		return field.ErrorList{field.Invalid(fldPath, redactUnparsedURL(raw), "must start with oci://, "+example)}
	case strings.Contains(rest, "@"):
		return field.ErrorList{field.Invalid(fldPath, redactUnparsedURL(raw), "must carry neither credentials nor a digest: set credentialsSecret, or spec.source.oci.ref.digest")}
	}
	host, repo, _ := strings.Cut(rest, "/")
	if i := strings.LastIndex(repo, ":"); i >= 0 {
		return field.ErrorList{field.Invalid(fldPath, raw, "must not carry a tag: set spec.source.oci.ref.tag to "+repo[i+1:])}
	}
	// A host has a dot or a port (or is localhost), as docker's rule says;
	// "library/x" would be read as a Docker Hub name, which is never meant.
	if _, err := name.NewRepository(rest, name.StrictValidation); err != nil || !strings.ContainsAny(host, ".:") && host != "localhost" || repo == "" {
		return field.ErrorList{field.Invalid(fldPath, raw, "must name a registry host and a repository in lowercase, "+example)}
	}
	return nil
}

// validateGitURL accepts https:// and ssh:// URLs without embedded passwords,
// tokens or query strings.
func validateGitURL(raw string, fldPath *field.Path) field.ErrorList {
	const supported = "only https:// and ssh:// URLs are supported, such as https://github.com/org/repo.git or ssh://git@github.com/org/repo.git"
	if raw == "" {
		return field.ErrorList{field.Required(fldPath, "set the repository URL, such as https://github.com/org/repo.git")}
	}
	if !strings.Contains(raw, "://") {
		detail := supported
		if scpLikeWithoutPassRegexp.MatchString(raw) {
			detail += "; write git@host:org/repo.git as ssh://git@host/org/repo.git"
		}
		return field.ErrorList{field.Invalid(fldPath, redactUnparsedURL(raw), detail)}
	}
	u, err := url.Parse(raw)
	if err != nil {
		// err repeats the URL, which may carry a password: never return it.
		return field.ErrorList{field.Invalid(fldPath, redactUnparsedURL(raw), "is not a valid URL; "+supported)}
	}

	var allErrs field.ErrorList
	shown := redactURL(u)
	if u.Scheme != "https" && u.Scheme != "ssh" {
		allErrs = append(allErrs, field.Invalid(fldPath, shown, supported))
		return allErrs
	}
	if u.Host == "" || u.Hostname() == "" {
		allErrs = append(allErrs, field.Invalid(fldPath, shown, "must include a host, such as https://github.com/org/repo.git"))
	} else if strings.HasPrefix(u.Hostname(), "-") {
		allErrs = append(allErrs, field.Invalid(fldPath, shown, "the host must not start with '-'"))
	}
	if u.User != nil {
		_, hasPassword := u.User.Password()
		switch {
		case u.Scheme == "https" || hasPassword:
			allErrs = append(allErrs, field.Forbidden(fldPath, "credentials must not be embedded in the URL; use credentialsSecret"))
		case strings.HasPrefix(u.User.Username(), "-"):
			allErrs = append(allErrs, field.Invalid(fldPath, shown, "the user name must not start with '-'"))
		}
	}
	if u.RawQuery != "" || u.ForceQuery {
		allErrs = append(allErrs, field.Forbidden(fldPath, "must not contain a query string; put tokens and credentials in credentialsSecret"))
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		allErrs = append(allErrs, field.Forbidden(fldPath, "must not contain a fragment ('#...'); select the branch, tag or commit with ref"))
	}
	return allErrs
}

// redactURL renders u for an error message without credentials, query or fragment.
func redactURL(u *url.URL) string {
	c := *u
	if c.User != nil {
		_, hasPassword := c.User.Password()
		if c.Scheme != "ssh" || hasPassword {
			c.User = url.User("redacted")
		}
	}
	if c.RawQuery != "" || c.ForceQuery {
		c.RawQuery = "redacted"
		c.ForceQuery = false
	}
	if c.Fragment != "" || c.RawFragment != "" {
		c.Fragment, c.RawFragment = "redacted", ""
	}
	return c.String()
}

// redactUnparsedURL returns raw if it cannot hold a secret, and a placeholder otherwise.
func redactUnparsedURL(raw string) string {
	if scpLikeWithoutPassRegexp.MatchString(raw) || !strings.ContainsAny(raw, "@?#:") {
		return raw
	}
	return redacted
}

// validateVariables validates input variables. Values are never echoed.
func validateVariables(vars []terrarun.Variable, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	seen := make(map[string]bool, len(vars))
	for i := range vars {
		v := &vars[i]
		idxPath := fldPath.Index(i)
		namePath := idxPath.Child("name")
		switch {
		case v.Name == "":
			allErrs = append(allErrs, field.Required(namePath, "name the Terraform input variable"))
		case !identifierRegexp.MatchString(v.Name):
			allErrs = append(allErrs, field.Invalid(namePath, v.Name,
				"must be a Terraform identifier: a letter or '_' followed by letters, digits, '_' or '-', such as region or instance_count"))
		case seen[v.Name]:
			allErrs = append(allErrs, field.Duplicate(namePath, v.Name))
		}
		seen[v.Name] = true

		switch {
		case v.Value != "" && v.ValueFrom != nil:
			allErrs = append(allErrs, field.Forbidden(idxPath, "value and valueFrom are mutually exclusive; set only one of them"))
		case v.Value == "" && v.ValueFrom == nil:
			allErrs = append(allErrs, field.Required(idxPath.Child("value"),
				`set value or valueFrom (for an empty string, set value: '""' with hcl: true)`))
		}
		if v.ValueFrom != nil {
			allErrs = append(allErrs, validateVariableSource(v.ValueFrom, idxPath.Child("valueFrom"))...)
		}
	}
	return allErrs
}

// validateVariableSource checks that exactly one key selector is set and valid.
func validateVariableSource(src *terrarun.VariableSource, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	var set []string
	for name, ok := range map[string]bool{
		"secretKeyRef": src.SecretKeyRef != nil, "configMapKeyRef": src.ConfigMapKeyRef != nil,
		"runOutput": src.RunOutput != nil, "workspaceOutput": src.WorkspaceOutput != nil,
	} {
		if ok {
			set = append(set, name)
		}
	}
	slices.Sort(set)
	switch {
	case len(set) == 0:
		allErrs = append(allErrs, field.Required(fldPath, "set exactly one of secretKeyRef, configMapKeyRef or runOutput"))
	case len(set) > 1:
		allErrs = append(allErrs, field.Forbidden(fldPath, fmt.Sprintf("%s are mutually exclusive; set only one of them", strings.Join(set, " and "))))
	}
	if src.SecretKeyRef != nil {
		allErrs = append(allErrs, validateKeySelector(src.SecretKeyRef, "Secret", fldPath.Child("secretKeyRef"))...)
	}
	if src.ConfigMapKeyRef != nil {
		allErrs = append(allErrs, validateKeySelector(src.ConfigMapKeyRef, "ConfigMap", fldPath.Child("configMapKeyRef"))...)
	}
	if src.RunOutput != nil {
		allErrs = append(allErrs, validateOutputSelector(src.RunOutput, fldPath.Child("runOutput"))...)
	}
	if src.WorkspaceOutput != nil {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("workspaceOutput"),
			"only a TerraformWorkspace's spec.template reads a workspace's output; a run reads another run's output with runOutput"))
	}
	return allErrs
}

// validateOutputSelector validates the run or workspace and the output an
// OutputSelector names.
func validateOutputSelector(sel *terrarun.OutputSelector, fldPath *field.Path) field.ErrorList {
	allErrs := validateObjectName(sel.Name, true, fldPath.Child("name"))
	if !identifierRegexp.MatchString(sel.Output) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("output"), sel.Output, "must be the name of a Terraform output: a letter or '_', then letters, digits, '_' or '-'"))
	}
	return allErrs
}

// validateKeySelector validates the name and key of a Secret or ConfigMap key selector.
func validateKeySelector(sel *terrarun.KeySelector, kind string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if sel.Name == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("name"), fmt.Sprintf("name a %s in the run's namespace", kind)))
	} else {
		allErrs = append(allErrs, validateObjectName(sel.Name, true, fldPath.Child("name"))...)
	}
	if sel.Key == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("key"), fmt.Sprintf("name a key of the %s", kind)))
	} else {
		for _, msg := range utilvalidation.IsConfigMapKey(sel.Key) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("key"), sel.Key, msg))
		}
	}
	return allErrs
}

// validateBackend validates the backend. Config values are never echoed, and
// config keys that look like credentials are refused.
func validateBackend(b *terrarun.Backend, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	typePath := fldPath.Child("type")
	switch {
	case b.Type == "":
		allErrs = append(allErrs, field.Required(typePath, "name the backend type, such as kubernetes, s3 or local"))
	case !backendTypeRegexp.MatchString(b.Type):
		allErrs = append(allErrs, field.Invalid(typePath, b.Type,
			"must be a backend type: lowercase letters, digits and '_', starting with a letter, such as kubernetes, s3 or local"))
	}

	configPath := fldPath.Child("config")
	for _, key := range slices.Sorted(maps.Keys(b.Config)) {
		keyPath := configPath.Key(key)
		switch {
		case !backendConfigKeyRegexp.MatchString(key):
			allErrs = append(allErrs, field.Invalid(keyPath, key,
				"must be a backend setting name: letters, digits and '_', not starting with a digit, such as bucket or region"))
		case looksLikeCredential(key):
			allErrs = append(allErrs, field.Forbidden(keyPath, "looks like a credential; put it in the Secret named by configSecret"))
		case urlHoldsCredential(b.Config[key]):
			allErrs = append(allErrs, field.Forbidden(keyPath, "is a URL with a password or a credential in it; put the setting in the Secret named by configSecret"))
		case b.Type == "local" && localBackendLocationKeys[key]:
			allErrs = append(allErrs, field.Forbidden(keyPath,
				"the local backend keeps one state per namespace and workspace where the server decides; omit it, or choose the workspace with spec.workspace"))
		}
	}
	if b.Type == "local" && b.ConfigSecret != "" {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("configSecret"),
			"the local backend takes no settings from a Secret (they could move its state); omit it"))
	}

	allErrs = append(allErrs, validateObjectName(b.ConfigSecret, false, fldPath.Child("configSecret"))...)
	return allErrs
}

// localBackendLocationKeys are the settings of the local backend that say
// where its state is: the server chooses that, so that a run reaches only its
// own namespace's state.
var localBackendLocationKeys = map[string]bool{"path": true, "workspace_dir": true}

// urlHoldsCredential reports whether value is a URL with a password, or with
// a query parameter that names a credential, such as
// postgres://user:pw@db/state or https://consul:8500?token=... .
func urlHoldsCredential(value string) bool {
	if !strings.Contains(value, "://") {
		return false
	}
	u, err := url.Parse(strings.TrimSpace(value))
	if err != nil {
		// An unparsable URL with an '@' after the scheme may still carry one.
		_, rest, _ := strings.Cut(value, "://")
		return strings.Contains(rest, "@")
	}
	if _, ok := u.User.Password(); ok {
		return true
	}
	for k := range u.Query() {
		if looksLikeCredential(k) {
			return true
		}
	}
	return false
}

// looksLikeCredential reports whether a backend config key names a credential.
func looksLikeCredential(key string) bool {
	lower := strings.ToLower(key)
	if nonSecretCredentialKeys[lower] {
		return false
	}
	for _, marker := range credentialKeyMarkers {
		if strings.Contains(lower, marker) {
			return true
		}
	}
	return false
}

// validateApprovalRecord validates one record of status.approval or
// status.approvals.
func validateApprovalRecord(a *terrarun.ApprovalStatus, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if a.ApprovedBy == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("approvedBy"), "record the approving user, or auto in Auto mode"))
	}
	allErrs = append(allErrs, validatePlanDigest(a.PlanDigest, true, fldPath.Child("planDigest"))...)
	if len(a.Comment) > maxCommentLength {
		allErrs = append(allErrs, field.TooLong(fldPath.Child("comment"), "", maxCommentLength))
	}
	return allErrs
}

// validateApproval validates the approval gate.
func validateApproval(a *terrarun.Approval, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch {
	case a.Mode == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("mode"), "set Manual or Auto"))
	case !slices.Contains(supportedApproval, a.Mode):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("mode"), a.Mode, supportedApproval))
	}
	allErrs = append(allErrs, ValidateDuration(a.Timeout, MaxApprovalTimeout, fldPath.Child("timeout"))...)
	n, nPath := a.RequiredApprovals, fldPath.Child("requiredApprovals")
	switch {
	case n < 0 || n > MaxRequiredApprovals:
		allErrs = append(allErrs, field.Invalid(nPath, n, fmt.Sprintf("must be between 1 and %d", MaxRequiredApprovals)))
	case a.Mode == terrarun.ApprovalModeAuto && n > 1:
		allErrs = append(allErrs, field.Forbidden(nPath, "Auto mode applies without approvals; use mode Manual to require approvals"))
	}
	return allErrs
}

// validateEngine validates the binary and the executor image.
func validateEngine(e *terrarun.Engine, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch {
	case e.Binary == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("binary"), "set terraform or tofu"))
	case !slices.Contains(supportedBinaries, e.Binary):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("binary"), e.Binary, supportedBinaries))
	}

	// An empty image is the local executor's: it runs none (the server
	// defaults it where stages run in Jobs).
	imagePath := fldPath.Child("image")
	switch {
	case len(e.Image) > maxImageLength:
		allErrs = append(allErrs, withHint(field.TooLong(imagePath, "", maxImageLength), "use a shorter image reference"))
	case hasSpaceOrControl(e.Image):
		allErrs = append(allErrs, field.Invalid(imagePath, e.Image, "must be an image reference without whitespace, such as ghcr.io/terrarun/terrarun-executor:v0.1.0"))
	}
	if d := e.ImageDigest; d != "" {
		_, inImage, hasDigest := strings.Cut(e.Image, "@")
		switch {
		case !imageDigestPattern.MatchString(d):
			allErrs = append(allErrs, field.Invalid(fldPath.Child("imageDigest"), d, "must be sha256: and 64 lowercase hex digits"))
		case hasDigest && inImage != d:
			allErrs = append(allErrs, field.Invalid(fldPath.Child("imageDigest"), d, "differs from the digest in spec.engine.image ("+inImage+")"))
		}
	}
	return allErrs
}

// imageDigestPattern is the form of spec.engine.imageDigest.
var imageDigestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// validateExecutor validates the executor pod settings.
func validateExecutor(ex *terrarun.ExecutorSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateObjectName(ex.ServiceAccountName, false, fldPath.Child("serviceAccountName"))...)
	allErrs = append(allErrs, validateResources(&ex.Resources, fldPath.Child("resources"))...)
	allErrs = append(allErrs, metav1validation.ValidateLabels(ex.NodeSelector, fldPath.Child("nodeSelector"))...)
	allErrs = append(allErrs, validateTolerations(ex.Tolerations, fldPath.Child("tolerations"))...)
	return allErrs
}

// validateResources validates resource names and quantities, and that no request
// exceeds its limit.
func validateResources(r *corev1.ResourceRequirements, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	limitsPath := fldPath.Child("limits")
	requestsPath := fldPath.Child("requests")
	allErrs = append(allErrs, validateResourceList(r.Limits, limitsPath)...)
	allErrs = append(allErrs, validateResourceList(r.Requests, requestsPath)...)
	for _, name := range slices.Sorted(maps.Keys(r.Requests)) {
		request := r.Requests[name]
		limit, ok := r.Limits[name]
		if ok && request.Cmp(limit) > 0 {
			allErrs = append(allErrs, field.Invalid(requestsPath.Key(string(name)), request.String(),
				fmt.Sprintf("must be less than or equal to the limit (%s)", limit.String())))
		}
	}
	if len(r.Claims) > 0 {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("claims"), "claims are not supported; remove them"))
	}
	return allErrs
}

// validateResourceList validates the names and quantities of one resource list.
func validateResourceList(list corev1.ResourceList, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, name := range slices.Sorted(maps.Keys(list)) {
		keyPath := fldPath.Key(string(name))
		for _, msg := range content.IsQualifiedName(string(name)) {
			allErrs = append(allErrs, field.Invalid(keyPath, string(name), msg))
		}
		q := list[name]
		if q.Sign() < 0 {
			allErrs = append(allErrs, field.Invalid(keyPath, q.String(), "must be greater than or equal to 0"))
		}
	}
	return allErrs
}

// validateTolerations validates pod tolerations the way the core API does.
func validateTolerations(tolerations []corev1.Toleration, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, t := range tolerations {
		idxPath := fldPath.Index(i)
		if t.Key != "" {
			allErrs = append(allErrs, metav1validation.ValidateLabelName(t.Key, idxPath.Child("key"))...)
		}
		switch t.Operator {
		case corev1.TolerationOpExists:
			if t.Value != "" {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("value"), t.Value, "must be empty when operator is Exists; remove value or use operator Equal"))
			}
		case corev1.TolerationOpEqual, "":
			if t.Key == "" {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("operator"), t.Operator,
					"must be Exists when key is empty (which matches every taint); set key or use operator Exists"))
			}
			for _, msg := range content.IsLabelValue(t.Value) {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("value"), t.Value, msg))
			}
		default:
			allErrs = append(allErrs, field.NotSupported(idxPath.Child("operator"), t.Operator, supportedTolerationOperators))
		}
		if t.Effect != "" && !slices.Contains(supportedTaintEffects, t.Effect) {
			allErrs = append(allErrs, field.NotSupported(idxPath.Child("effect"), t.Effect, supportedTaintEffects))
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			allErrs = append(allErrs, field.Invalid(idxPath.Child("tolerationSeconds"), *t.TolerationSeconds,
				"may only be set when effect is NoExecute; remove it or set effect to NoExecute"))
		}
	}
	return allErrs
}

// validateAddresses validates resource addresses for -target and -replace.
func validateAddresses(addrs []string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, a := range addrs {
		idxPath := fldPath.Index(i)
		switch {
		case a == "":
			allErrs = append(allErrs, field.Required(idxPath, "set a resource address, such as aws_instance.web or module.network"))
		case len(a) > maxAddressLength:
			allErrs = append(allErrs, withHint(field.TooLong(idxPath, "", maxAddressLength), "use a shorter resource address"))
		case hasSpaceOrControl(a):
			allErrs = append(allErrs, field.Invalid(idxPath, a, "must be a resource address without whitespace or control characters, such as aws_instance.web"))
		case strings.HasPrefix(a, "-"):
			allErrs = append(allErrs, field.Invalid(idxPath, a, "must be a resource address, not a flag"))
		}
	}
	return allErrs
}

// validateStatus validates a run's status as written by the controller.
func validateStatus(st *terrarun.TerraformRunStatus, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if st.Phase != "" && !slices.Contains(supportedPhases, st.Phase) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("phase"), st.Phase, supportedPhases))
	}
	allErrs = append(allErrs, metav1validation.ValidateConditions(st.Conditions, fldPath.Child("conditions"))...)
	allErrs = append(allErrs, apimachineryvalidation.ValidateNonnegativeField(st.ObservedGeneration, fldPath.Child("observedGeneration"))...)

	if p := st.Plan; p != nil {
		planPath := fldPath.Child("plan")
		allErrs = append(allErrs, validatePlanDigest(p.Digest, false, planPath.Child("digest"))...)
		for _, c := range []struct {
			name  string
			value int32
		}{{"add", p.Add}, {"change", p.Change}, {"destroy", p.Destroy}, {"import", p.Import}} {
			if c.value < 0 {
				allErrs = append(allErrs, field.Invalid(planPath.Child(c.name), c.value, "must be greater than or equal to 0"))
			}
		}
	}

	if src := st.Source; src != nil && src.Artifact != nil {
		aPath := fldPath.Child("source", "artifact")
		if u, err := url.Parse(src.Artifact.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			allErrs = append(allErrs, field.Invalid(aPath.Child("url"), src.Artifact.URL, "must be an http:// or https:// URL of source-controller's artifact server"))
		}
		if !ociDigestRegexp.MatchString(src.Artifact.Digest) {
			allErrs = append(allErrs, field.Invalid(aPath.Child("digest"), src.Artifact.Digest, "must be sha256:<64 hex digits>"))
		}
	}

	if a := st.Approval; a != nil {
		allErrs = append(allErrs, validateApprovalRecord(a, fldPath.Child("approval"))...)
	}
	for i := range st.Approvals {
		allErrs = append(allErrs, validateApprovalRecord(&st.Approvals[i], fldPath.Child("approvals").Index(i))...)
	}

	for i, s := range st.Stages {
		idxPath := fldPath.Child("stages").Index(i)
		switch {
		case s.Name == "":
			allErrs = append(allErrs, field.Required(idxPath.Child("name"), "set plan or apply"))
		case !slices.Contains(supportedStages, s.Name):
			allErrs = append(allErrs, field.NotSupported(idxPath.Child("name"), s.Name, supportedStages))
		}
		if s.Attempt < 1 {
			allErrs = append(allErrs, field.Invalid(idxPath.Child("attempt"), s.Attempt, "must be at least 1; attempts are counted from 1"))
		}
		switch {
		case s.CarrierAttempt < 0:
			allErrs = append(allErrs, field.Invalid(idxPath.Child("carrierAttempt"), s.CarrierAttempt, "must be a plan stage's attempt, or 0 for an apply in an execution of its own"))
		case s.CarrierAttempt > 0 && s.Name != terrarun.StageApply:
			allErrs = append(allErrs, field.Invalid(idxPath.Child("carrierAttempt"), s.CarrierAttempt, "only an apply stage is carried by a plan stage's execution"))
		}
	}

	seen := make(map[string]bool, len(st.Outputs))
	for i, o := range st.Outputs {
		idxPath := fldPath.Child("outputs").Index(i)
		namePath := idxPath.Child("name")
		switch {
		case o.Name == "":
			allErrs = append(allErrs, field.Required(namePath, "name the Terraform output"))
		case !identifierRegexp.MatchString(o.Name):
			allErrs = append(allErrs, field.Invalid(namePath, o.Name,
				"must be a Terraform identifier: a letter or '_' followed by letters, digits, '_' or '-'"))
		case seen[o.Name]:
			allErrs = append(allErrs, field.Duplicate(namePath, o.Name))
		}
		seen[o.Name] = true
		if o.Sensitive && o.Value != nil {
			allErrs = append(allErrs, field.Forbidden(idxPath.Child("value"),
				"must be empty for a sensitive output; sensitive values are served only by the outputs subresource"))
		}
		switch o.ValueOmitted {
		case "":
		case terrarun.OutputSensitive, terrarun.OutputTooLarge:
			if o.Value != nil {
				allErrs = append(allErrs, field.Forbidden(idxPath.Child("value"),
					"must be empty when valueOmitted is set; the value is served only by the outputs subresource"))
			}
		default:
			allErrs = append(allErrs, field.NotSupported(idxPath.Child("valueOmitted"), o.ValueOmitted,
				[]terrarun.OutputValueOmitted{terrarun.OutputSensitive, terrarun.OutputTooLarge}))
		}
		if o.Value != nil && len(o.Value.Raw) > MaxOutputValueBytes {
			allErrs = append(allErrs, field.TooLong(idxPath.Child("value"), "", MaxOutputValueBytes))
		}
	}
	return allErrs
}

// validatePlanDigest validates a "sha256:<64 hex>" plan digest.
func validatePlanDigest(digest string, required bool, fldPath *field.Path) field.ErrorList {
	switch {
	case digest == "" && required:
		return field.ErrorList{field.Required(fldPath, "copy it from status.plan.digest of the run")}
	case digest != "" && !planDigestRegexp.MatchString(digest):
		return field.ErrorList{field.Invalid(fldPath, digest,
			"must be sha256: followed by 64 lowercase hexadecimal digits; copy it from status.plan.digest of the run")}
	}
	return nil
}

// validateObjectName validates the name of an object in the run's namespace,
// such as a Secret, ConfigMap or ServiceAccount. An empty name is accepted
// unless required.
func validateObjectName(name string, required bool, fldPath *field.Path) field.ErrorList {
	if name == "" {
		if required {
			return field.ErrorList{field.Required(fldPath, "name an object in the run's namespace")}
		}
		return nil
	}
	var allErrs field.ErrorList
	for _, msg := range utilvalidation.IsDNS1123Subdomain(name) {
		allErrs = append(allErrs, field.Invalid(fldPath, name, msg))
	}
	return allErrs
}

// withHint appends advice to the detail of e.
func withHint(e *field.Error, hint string) *field.Error {
	e.Detail += "; " + hint
	return e
}

// formatDuration renders whole hours as "24h" rather than "24h0m0s".
func formatDuration(d time.Duration) string {
	if d%time.Hour == 0 {
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return d.String()
}

// hasDotDotElement reports whether a slash-separated path has a ".." element.
func hasDotDotElement(p string) bool {
	for _, elem := range strings.Split(p, "/") {
		if elem == ".." {
			return true
		}
	}
	return false
}

// hasSpaceOrControl reports whether s contains whitespace or control characters.
func hasSpaceOrControl(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0
}
