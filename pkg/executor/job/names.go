package job

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// Labels and annotations on every Job, pod template and Secret of a stage.
const (
	// LabelRun is the run's name, or runLabelValue of it when the name is not
	// a valid label value. Its presence marks the objects of this executor.
	LabelRun = "terrarun.dev/run"
	// LabelRunUID is the run's UID. Adoption and identity checks compare it.
	LabelRunUID = "terrarun.dev/run-uid"
	// LabelStage is the stage: plan or apply.
	LabelStage = "terrarun.dev/stage"
	// LabelAttempt is the stage attempt, in decimal.
	LabelAttempt = "terrarun.dev/attempt"
	// AnnotationRunName is the run's full name (LabelRun may be shortened).
	AnnotationRunName = "terrarun.dev/run-name"
)

// hashLength is the number of hex digits of the sha256 of a run name appended
// to names shortened to fit.
const hashLength = 10

// JobName returns the deterministic name of the Job of one attempt of one
// stage of a run: <run>-<stage>-<attempt>. It is a valid DNS label (RFC 1123,
// at most 63 characters). When the run name does not fit, or is not itself a
// DNS label (run names are DNS subdomains and may hold dots), it is cut short,
// dots become dashes, and a hash of the full name keeps names of different
// runs apart: <run-prefix>-<hash>-<stage>-<attempt>.
func JobName(runName string, stage v1alpha1.StageName, attempt int32) string {
	suffix := "-" + string(stage) + "-" + strconv.FormatInt(int64(attempt), 10)
	return fit(runName, validation.DNS1123LabelMaxLength-len(suffix)) + suffix
}

// runLabelValue returns the value of the LabelRun label for a run: the name
// itself when it is at most 63 characters (the limit of a label value), else a
// prefix and a hash of the full name. The full name is always in the
// AnnotationRunName annotation.
func runLabelValue(runName string) string {
	if len(runName) <= validation.LabelValueMaxLength {
		return runName
	}
	return fit(runName, validation.LabelValueMaxLength)
}

// fit returns name when it is a DNS label of at most max characters, else a
// DNS label of at most max characters made of a prefix of name, with dots
// replaced by dashes, and a hash of name.
func fit(name string, max int) string {
	if len(name) <= max && len(validation.IsDNS1123Label(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	hash := hex.EncodeToString(sum[:])[:hashLength]
	n := max - len(hash) - 1
	if n > len(name) {
		n = len(name)
	}
	if n < 0 {
		n = 0
	}
	prefix := strings.TrimRight(strings.ReplaceAll(name[:n], ".", "-"), "-")
	if prefix == "" {
		return hash
	}
	return prefix + "-" + hash
}
