package stage

import (
	"fmt"
	"strings"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// ExitVerificationFailed is terrarun-executor's exit code when the
// signature of the run's OCI source did not verify: nothing of the source
// was unpacked, and the run fails with reason VerificationFailed.
const ExitVerificationFailed = 87

// EndLine is the last line the executor writes to a stage's log (and its
// output): the stage succeeded, or failed with err.
func EndLine(stageName v1alpha1.StageName, attempt int32, err error) string {
	if err != nil {
		return fmt.Sprintf("terrarun: stage %s attempt %d failed: %s\n", stageName, attempt, err)
	}
	return fmt.Sprintf("terrarun: stage %s attempt %d succeeded\n", stageName, attempt)
}

// FailureIn returns the error of the last EndLine of a failed stage in
// output, or "" when there is none: what an executor's exit code alone
// does not say.
func FailureIn(output string) string {
	lines := strings.Split(output, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if rest, ok := strings.CutPrefix(lines[i], "terrarun: stage "); ok {
			if _, err, ok := strings.Cut(rest, " failed: "); ok {
				return err
			}
		}
	}
	return ""
}
