package terraformrun

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"k8s.io/apimachinery/pkg/api/meta"
	"maps"
	"net/http"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
	"github.com/terrarun/terrarun/pkg/artifacts"
)

// maxOutputsBytes bounds the outputs document accepted from an executor.
const maxOutputsBytes = 4 << 20

// OutputsREST serves terraformruns/outputs: every output, sensitive values
// included, as `terraform output -json` prints them. It is authorized apart
// from get on the run. POST ?attempt=N, with the query options of a
// TerraformRunOutputsOptions, is the apply stage's upload, which also records
// the outputs, without sensitive values, in status.outputs.
type OutputsREST struct {
	connectBase
}

var _ rest.Connecter = &OutputsREST{}

// NewConnectOptions returns the options of a request: a TerraformRunOutputsOptions.
func (r *OutputsREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &terrarun.TerraformRunOutputsOptions{}, false, ""
}

// Connect validates the options, loads the run, checks the executor of an
// upload, and returns the handler that serves the request.
func (r *OutputsREST) Connect(ctx context.Context, name string, options runtime.Object, responder rest.Responder) (http.Handler, error) {
	opts, upload, run, err := prepare(ctx, &r.connectBase, name, options, "TerraformRunOutputsOptions", validation.ValidateTerraformRunOutputsOptions)
	if err != nil {
		return nil, err
	}
	if upload {
		if err := checkExecutor(ctx, run, terrarun.StageApply, *opts.Attempt, "outputs"); err != nil {
			return nil, err
		}
		return uploadHandler(responder, func(req *http.Request) error {
			return r.upload(ctx, run, *opts.Attempt, req.Body)
		}), nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		rc, _, err := r.artifacts.Get(ctx, runRef(run), artifacts.Outputs)
		if err != nil {
			responder.Error(artifactError(err, name, "outputs", fmt.Sprintf(
				"run %q has no outputs yet (it is %s); outputs exist once the apply has succeeded", name, phase(run))))
			return
		}
		defer rc.Close()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		_, _ = io.Copy(w, rc)
	}), nil
}

// outputValue is one entry of `terraform output -json`.
type outputValue struct {
	Sensitive bool            `json:"sensitive"`
	Type      json.RawMessage `json:"type"`
	Value     json.RawMessage `json:"value"`
}

// upload stores the outputs document of the apply stage's attempt and
// records the outputs, without sensitive values, in status.outputs.
func (r *OutputsREST) upload(ctx context.Context, run *terrarun.TerraformRun, attempt int32, body io.Reader) error {
	data, err := io.ReadAll(io.LimitReader(body, maxOutputsBytes+1))
	if err != nil {
		return apierrors.NewBadRequest("reading the outputs: " + err.Error())
	}
	if len(data) > maxOutputsBytes {
		return apierrors.NewRequestEntityTooLargeError("the outputs are larger than 4 MiB")
	}
	var outputs map[string]outputValue
	if err := json.Unmarshal(data, &outputs); err != nil {
		return apierrors.NewBadRequest("the outputs are not `terraform output -json`: " + err.Error())
	}
	if _, err := r.artifacts.Put(ctx, runRef(run), artifacts.Outputs, bytes.NewReader(data)); err != nil {
		r.waitsForStore(ctx, run, "outputs", err)
		return artifactError(err, run.Name, "outputs", "")
	}
	statuses := outputStatuses(outputs)
	_, err = r.status.update(ctx, run.Name, func(run *terrarun.TerraformRun) error {
		if err := checkExecutor(ctx, run, terrarun.StageApply, attempt, "outputs"); err != nil {
			return err
		}
		run.Status.Outputs = statuses
		meta.RemoveStatusCondition(&run.Status.Conditions, terrarun.ConditionArtifactsStored)
		return nil
	})
	return err
}

// outputStatuses summarizes outputs for status.outputs, sorted by name: a
// value is kept only when the output is not sensitive, is at most
// validation.MaxOutputValueBytes, and fits in the
// validation.MaxOutputValuesBytes that all values may take together, so that
// a run never fails for the size of its outputs.
func outputStatuses(outputs map[string]outputValue) []terrarun.OutputStatus {
	statuses := make([]terrarun.OutputStatus, 0, len(outputs))
	total := 0
	for _, n := range slices.Sorted(maps.Keys(outputs)) {
		o := outputs[n]
		s := terrarun.OutputStatus{Name: n, Sensitive: o.Sensitive}
		if len(o.Type) > 0 {
			s.Type = &terrarun.JSON{Raw: o.Type}
		}
		switch v := o.Value; {
		case o.Sensitive:
			s.ValueOmitted = terrarun.OutputSensitive
		case len(v) > validation.MaxOutputValueBytes || total+len(v) > validation.MaxOutputValuesBytes:
			s.ValueOmitted = terrarun.OutputTooLarge
		default:
			s.Value = &terrarun.JSON{Raw: v}
			total += len(v)
		}
		statuses = append(statuses, s)
	}
	return statuses
}
