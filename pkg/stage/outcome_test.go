package stage

import (
	"errors"
	"testing"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

func TestFailureIn(t *testing.T) {
	fail := EndLine(v1alpha1.StagePlan, 2, errors.New("git clone: fatal: could not resolve host (exit status 128)"))
	for output, want := range map[string]string{
		"terrarun: running git clone\n" + fail:                           "git clone: fatal: could not resolve host (exit status 128)",
		"line\n" + EndLine(v1alpha1.StageApply, 1, nil):                  "",
		"Error: terrarun: stage plan attempt 1 failed: in a quote\nlast": "",
		"": "",
	} {
		if got := FailureIn(output); got != want {
			t.Errorf("FailureIn(%q) = %q, want %q", output, got, want)
		}
	}
}
