package validation

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

func TestValidateTerraformRunLogOptions(t *testing.T) {
	cases := []struct {
		name   string
		opts   terrarun.TerraformRunLogOptions
		upload bool
		want   []string
		detail string
	}{
		{name: "read defaults", opts: terrarun.TerraformRunLogOptions{}},
		{name: "read everything", opts: terrarun.TerraformRunLogOptions{Stage: terrarun.StageApply, Attempt: ptr.To[int32](2), Follow: true, TailLines: ptr.To[int64](0), LimitBytes: ptr.To[int64](0)}},
		{name: "unknown stage", opts: terrarun.TerraformRunLogOptions{Stage: "destroy"}, want: []string{notSupported("stage")}, detail: `"plan", "apply"`},
		{name: "attempt zero", opts: terrarun.TerraformRunLogOptions{Attempt: ptr.To[int32](0)}, want: []string{invalid("attempt")}, detail: "counted from 1"},
		{name: "negative tailLines and limitBytes", opts: terrarun.TerraformRunLogOptions{TailLines: ptr.To[int64](-1), LimitBytes: ptr.To[int64](-5)}, want: []string{invalid("tailLines"), invalid("limitBytes")}},
		{name: "read that ends the log", opts: terrarun.TerraformRunLogOptions{End: true}, want: []string{forbidden("end")}, detail: "only the stage's executor ends its log"},
		{name: "upload", upload: true, opts: terrarun.TerraformRunLogOptions{Stage: terrarun.StagePlan, Attempt: ptr.To[int32](1)}},
		{name: "upload that ends the log", upload: true, opts: terrarun.TerraformRunLogOptions{Stage: terrarun.StagePlan, Attempt: ptr.To[int32](1), End: true}},
		{name: "upload ignores read options", upload: true, opts: terrarun.TerraformRunLogOptions{Stage: terrarun.StagePlan, Attempt: ptr.To[int32](1), TailLines: ptr.To[int64](-1)}},
		{name: "upload without stage and attempt", upload: true, want: []string{required("stage"), required("attempt")}, detail: "the attempt that writes"},
		{name: "upload with a bad stage", upload: true, opts: terrarun.TerraformRunLogOptions{Stage: "x", Attempt: ptr.To[int32](-1)}, want: []string{notSupported("stage"), invalid("attempt")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, ValidateTerraformRunLogOptions(&tc.opts, tc.upload), tc.want, tc.detail)
		})
	}
}

func TestValidateTerraformRunPlanOptions(t *testing.T) {
	cases := []struct {
		name   string
		opts   terrarun.TerraformRunPlanOptions
		upload bool
		want   []string
		detail string
	}{
		{name: "read defaults", opts: terrarun.TerraformRunPlanOptions{}},
		{name: "read json and wait", opts: terrarun.TerraformRunPlanOptions{Format: "json", Wait: true}},
		{name: "read file", opts: terrarun.TerraformRunPlanOptions{Format: "file"}},
		{name: "read source", opts: terrarun.TerraformRunPlanOptions{Format: "source"}},
		{name: "read ignores upload options", opts: terrarun.TerraformRunPlanOptions{Attempt: ptr.To[int32](-1), Part: "x"}},
		// file and source are not advertised: they are for the apply stage only.
		{name: "unknown format", opts: terrarun.TerraformRunPlanOptions{Format: "yaml"}, want: []string{notSupported("format")}, detail: `supported values: "text", "json"`},
		{name: "upload", upload: true, opts: terrarun.TerraformRunPlanOptions{Attempt: ptr.To[int32](3), Part: "result"}},
		{name: "upload without attempt and part", upload: true, want: []string{required("attempt"), required("part")}, detail: "plan stage attempt"},
		{name: "upload of an unknown part", upload: true, opts: terrarun.TerraformRunPlanOptions{Attempt: ptr.To[int32](0), Part: "state"}, want: []string{invalid("attempt"), notSupported("part")}, detail: `"result"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, ValidateTerraformRunPlanOptions(&tc.opts, tc.upload), tc.want, tc.detail)
		})
	}
}

func TestValidateTerraformRunOutputsOptions(t *testing.T) {
	checkErrors(t, ValidateTerraformRunOutputsOptions(&terrarun.TerraformRunOutputsOptions{}, false), nil, "")
	checkErrors(t, ValidateTerraformRunOutputsOptions(&terrarun.TerraformRunOutputsOptions{Attempt: ptr.To[int32](1)}, true), nil, "")
	checkErrors(t, ValidateTerraformRunOutputsOptions(&terrarun.TerraformRunOutputsOptions{}, true), []string{required("attempt")}, "apply stage attempt")
	checkErrors(t, ValidateTerraformRunOutputsOptions(&terrarun.TerraformRunOutputsOptions{Attempt: ptr.To[int32](0)}, true), []string{invalid("attempt")}, "")
}

func TestValidateDiscardAndCancel(t *testing.T) {
	long := strings.Repeat("x", 1025)
	checkErrors(t, ValidateTerraformRunDiscard(&terrarun.TerraformRunDiscard{Comment: "no"}), nil, "")
	checkErrors(t, ValidateTerraformRunDiscard(&terrarun.TerraformRunDiscard{Comment: long}), []string{tooLong("comment")}, "")
	checkErrors(t, ValidateTerraformRunCancel(&terrarun.TerraformRunCancel{Comment: strings.Repeat("x", 1024)}), nil, "")
	checkErrors(t, ValidateTerraformRunCancel(&terrarun.TerraformRunCancel{Comment: long}), []string{tooLong("comment")}, "")
}
