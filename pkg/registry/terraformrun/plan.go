package terraformrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/stage"
)

// streamBase is shared by the plan, logs and outputs subresources: they are
// rest.Connecters, like pods/exec, because they stream bytes rather than
// objects. GET is authorized as verb get and POST as verb create on the
// subresource, so RBAC sees each one separately.
type streamBase struct {
	status     statusWriter
	artifacts  *artifacts.Store
	identities executor.IdentityResolver
	serializer runtime.NegotiatedSerializer
}

func (b *streamBase) ref(run *terrarun.TerraformRun) artifacts.RunRef {
	return artifacts.RunRef{Namespace: run.Namespace, Name: run.Name, UID: string(run.UID)}
}

// executorFor returns the executor identity of the request, and an error
// unless it is the identity of the run's current attempt of stageName.
func (b *streamBase) executorFor(ctx context.Context, run *terrarun.TerraformRun, stageName string, attempt int32, what string) error {
	forbidden := func(format string, args ...interface{}) error {
		return apierrors.NewForbidden(terrarun.Resource("terraformruns/"+what), run.Name, fmt.Errorf(format, args...))
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok || b.identities == nil {
		return forbidden("only the executor of this run's current stage may write its %s", what)
	}
	id, isExecutor, err := b.identities.ExecutorIdentity(ctx, u)
	if err != nil {
		return forbidden("cannot verify the executor identity: %v", err)
	}
	if !isExecutor {
		return forbidden("only the executor of this run's current stage may write its %s; %s is not an executor", what, u.GetName())
	}
	if id.Namespace != run.Namespace || id.Name != run.Name || id.UID != string(run.UID) {
		return forbidden("this executor was started for run %s/%s, not for %s/%s", id.Namespace, id.Name, run.Namespace, run.Name)
	}
	current := currentStage(run, stageName)
	if string(id.Stage) != stageName || current == nil || id.Attempt != current.Attempt || current.CompletionTime != nil {
		return forbidden("this executor runs stage %s attempt %d, which is not the run's current %s stage", id.Stage, id.Attempt, stageName)
	}
	if attempt != 0 && attempt != id.Attempt {
		return forbidden("this executor runs attempt %d, not attempt %d", id.Attempt, attempt)
	}
	return nil
}

// currentStage is the latest execution of stageName, or nil.
func currentStage(run *terrarun.TerraformRun, stageName string) *terrarun.StageStatus {
	for i := len(run.Status.Stages) - 1; i >= 0; i-- {
		if string(run.Status.Stages[i].Name) == stageName {
			return &run.Status.Stages[i]
		}
	}
	return nil
}

func badRequest(kind string, errs field.ErrorList) error {
	return apierrors.NewBadRequest(fmt.Sprintf("invalid %s options: %s", kind, errs.ToAggregate().Error()))
}

func parseBool(q url.Values, key string, path *field.Path, errs *field.ErrorList) bool {
	v := q.Get(key)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		*errs = append(*errs, field.Invalid(path.Child(key), v, "must be true or false"))
	}
	return b
}

func parseInt(q url.Values, key string, path *field.Path, errs *field.ErrorList) *int64 {
	v := q.Get(key)
	if v == "" {
		return nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		*errs = append(*errs, field.Invalid(path.Child(key), v, "must be a non-negative integer"))
		return nil
	}
	return &n
}

// New returns an empty run: the subresource has no object of its own.
func (b *streamBase) New() runtime.Object { return &terrarun.TerraformRun{} }

// Destroy does nothing.
func (b *streamBase) Destroy() {}

// ConnectMethods are GET (read) and POST (the executor's writes).
func (b *streamBase) ConnectMethods() []string { return []string{http.MethodGet, http.MethodPost} }

// NewConnectOptions returns nil: options are read from the query.
func (b *streamBase) NewConnectOptions() (runtime.Object, bool, string) { return nil, false, "" }

// handler serves GET with serve and POST with write, which answers 204 when
// it succeeds; errors are written as Status objects.
func (b *streamBase) handler(ctx context.Context, name string,
	serve func(context.Context, string, http.ResponseWriter, *http.Request) error,
	write func(context.Context, string, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var err error
		if req.Method == http.MethodPost {
			if err = write(ctx, name, req); err == nil {
				w.WriteHeader(http.StatusNoContent)
			}
		} else {
			err = serve(ctx, name, w, req)
		}
		if err != nil {
			b.writeError(w, req, err)
		}
	})
}

func (b *streamBase) writeError(w http.ResponseWriter, req *http.Request, err error) {
	responsewriters.ErrorNegotiated(err, b.serializer, terrarun.SchemeGroupVersion, w, req)
}

func notFound(name, what, message string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusNotFound,
		Reason:  metav1.StatusReasonNotFound,
		Message: message,
		Details: &metav1.StatusDetails{Name: name, Group: terrarun.GroupName, Kind: "terraformruns/" + what},
	}}
}

// PlanREST serves terraformruns/plan.
//
// GET returns the plan as text (default), or ?format=json with every
// sensitive value redacted; ?wait=true blocks until the plan exists or the plan
// stage fails. The binary plan file (?format=file) and the planned
// configuration (?format=source) hold secrets and are served only to the
// executor of the run's apply stage. POST is the plan stage's upload.
type PlanREST struct {
	streamBase
	// WaitTimeout bounds ?wait=true.
	WaitTimeout time.Duration
}

var _ rest.Connecter = &PlanREST{}

// Connect returns the handler of one request.
func (r *PlanREST) Connect(ctx context.Context, name string, _ runtime.Object, _ rest.Responder) (http.Handler, error) {
	return r.handler(ctx, name, r.serve, r.upload), nil
}

func (r *PlanREST) serve(ctx context.Context, name string, w http.ResponseWriter, req *http.Request) error {
	q := req.URL.Query()
	path := field.NewPath("query")
	var errs field.ErrorList
	wait := parseBool(q, "wait", path, &errs)
	format := q.Get("format")
	kind, contentType := artifacts.PlanText, "text/plain; charset=utf-8"
	switch format {
	case "", "text":
	case "json":
		kind, contentType = artifacts.PlanJSON, "application/json"
	case "file":
		kind, contentType = artifacts.PlanFile, "application/octet-stream"
	case "source":
		kind, contentType = artifacts.PlanSource, "application/gzip"
	default:
		errs = append(errs, field.NotSupported(path.Child("format"), format, []string{"text", "json"}))
	}
	if len(errs) > 0 {
		return badRequest("plan", errs)
	}
	run, err := r.status.get(ctx, name)
	if err != nil {
		return err
	}
	if kind == artifacts.PlanFile || kind == artifacts.PlanSource {
		if err := r.executorFor(ctx, run, stage.Apply, 0, "plan"); err != nil {
			return err
		}
	}
	if run.Status.Plan == nil || run.Status.Plan.Digest == "" {
		if !wait {
			return notFound(name, "plan", fmt.Sprintf("run %q has no plan yet (it is %s); add ?wait=true to wait for it", name, phaseOrPending(run)))
		}
		if run, err = r.waitForPlan(ctx, run); err != nil {
			return err
		}
	}
	rc, meta, err := r.artifacts.Get(ctx, r.ref(run), kind)
	if errors.Is(err, artifacts.ErrNotFound) {
		return apierrors.NewNotFound(terrarun.Resource("terraformruns/plan"), name)
	}
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	defer rc.Close()
	if kind == artifacts.PlanJSON && meta.Truncated {
		// Truncated JSON is not JSON: say so instead of serving it.
		return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
			"the redacted plan JSON of run %q exceeded the server's --max-plan-bytes and was truncated; read the text plan, or ask the administrator to raise the limit", name))
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Terrarun-Plan-Digest", run.Status.Plan.Digest)
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, rc)
	return nil
}

// waitForPlan watches the run until it has a plan, the plan stage has ended
// without one, or the wait times out.
func (r *PlanREST) waitForPlan(ctx context.Context, run *terrarun.TerraformRun) (*terrarun.TerraformRun, error) {
	timeout := r.WaitTimeout
	if timeout <= 0 {
		timeout = 30 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if run.Status.Plan != nil && run.Status.Plan.Digest != "" {
			return run, nil
		}
		if c := meta.FindStatusCondition(run.Status.Conditions, terrarun.ConditionPlanned); c != nil && c.Status == metav1.ConditionFalse && c.Reason != terrarun.ReasonPlanning && c.Reason != terrarun.ReasonPending {
			return nil, conflict(run.Name, "the run has no plan: %s", c.Message)
		}
		if isFinal(run.Status.Phase) {
			return nil, notFound(run.Name, "plan", fmt.Sprintf("run %q ended %s without a plan: %s", run.Name, run.Status.Phase, run.Status.Message))
		}
		w, err := r.status.store.Watch(ctx, &metainternalversion.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", run.Name),
			ResourceVersion: run.ResourceVersion,
		})
		if err != nil {
			return nil, err
		}
		next, err := nextRunEvent(ctx, w)
		w.Stop()
		if err != nil {
			if ctx.Err() != nil {
				return nil, apierrors.NewTimeoutError(fmt.Sprintf("run %q has no plan after waiting %s; try again", run.Name, timeout), 5)
			}
			return nil, err
		}
		run = next
	}
}

// nextRunEvent returns the run of the next Added or Modified event.
func nextRunEvent(ctx context.Context, w watch.Interface) (*terrarun.TerraformRun, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, fmt.Errorf("watch closed")
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if run, ok := ev.Object.(*terrarun.TerraformRun); ok {
					return run, nil
				}
			case watch.Deleted:
				return nil, apierrors.NewGone("the run was deleted while waiting for its plan")
			case watch.Error:
				return nil, apierrors.FromObject(ev.Object)
			}
		}
	}
}

func isFinal(p terrarun.RunPhase) bool {
	switch p {
	case terrarun.RunPhaseSucceeded, terrarun.RunPhaseFailed, terrarun.RunPhaseCanceled, terrarun.RunPhaseDiscarded:
		return true
	}
	return false
}

// maxResultBytes bounds the plan stage's result document.
const maxResultBytes = 64 << 10

func (r *PlanREST) upload(ctx context.Context, name string, req *http.Request) error {
	q := req.URL.Query()
	path := field.NewPath("query")
	var errs field.ErrorList
	attempt := parseInt(q, "attempt", path, &errs)
	part := q.Get("part")
	var kind artifacts.Kind
	switch part {
	case stage.PartFile:
		kind = artifacts.PlanFile
	case stage.PartText:
		kind = artifacts.PlanText
	case stage.PartJSON:
		kind = artifacts.PlanJSON
	case stage.PartSource:
		kind = artifacts.PlanSource
	case stage.PartResult:
	default:
		errs = append(errs, field.NotSupported(path.Child("part"), part, []string{stage.PartFile, stage.PartText, stage.PartJSON, stage.PartSource, stage.PartResult}))
	}
	if attempt == nil {
		errs = append(errs, field.Required(path.Child("attempt"), "the plan stage attempt that uploads"))
	}
	if len(errs) > 0 {
		return badRequest("plan upload", errs)
	}
	run, err := r.status.get(ctx, name)
	if err != nil {
		return err
	}
	if err := r.executorFor(ctx, run, stage.Plan, int32(*attempt), "plan"); err != nil {
		return err
	}
	if part != stage.PartResult {
		if _, err := r.artifacts.Put(ctx, r.ref(run), kind, req.Body); err != nil {
			return apierrors.NewRequestEntityTooLargeError(err.Error())
		}
		return nil
	}

	var result stage.Result
	body, err := io.ReadAll(io.LimitReader(req.Body, maxResultBytes+1))
	if err != nil {
		return apierrors.NewBadRequest("reading the plan result: " + err.Error())
	}
	if len(body) > maxResultBytes {
		return apierrors.NewRequestEntityTooLargeError("the plan result is larger than 64 KiB")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&result); err != nil {
		return apierrors.NewBadRequest("decoding the plan result: " + err.Error())
	}
	file, err := r.artifacts.Stat(ctx, r.ref(run), artifacts.PlanFile)
	if err != nil {
		return apierrors.NewBadRequest("upload the plan file (part=file) before the result: " + err.Error())
	}
	for _, k := range []artifacts.Kind{artifacts.PlanText, artifacts.PlanJSON, artifacts.PlanSource} {
		if _, err := r.artifacts.Stat(ctx, r.ref(run), k); err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("upload %s before the result: %v", k, err))
		}
	}
	_, err = r.status.update(ctx, name, func(run *terrarun.TerraformRun) error {
		if err := r.executorFor(ctx, run, stage.Plan, int32(*attempt), "plan"); err != nil {
			return err
		}
		now := metav1.Now()
		run.Status.Plan = &terrarun.PlanSummary{
			Digest:      file.SHA256,
			Add:         result.Add,
			Change:      result.Change,
			Destroy:     result.Destroy,
			Import:      result.Import,
			HasChanges:  result.HasChanges,
			CompletedAt: &now,
		}
		if result.SourceRevision != "" {
			run.Status.Source = &terrarun.SourceStatus{Revision: result.SourceRevision}
		}
		return nil
	})
	return err
}

// LogsREST serves terraformruns/logs as text/plain, streamed and flushed.
// Options: stage (plan or apply; default the latest), attempt (default the
// latest), follow, tailLines and limitBytes. A follow ends when the stage ends.
// POST is the executor's log stream: the body is appended as it arrives.
type LogsREST struct {
	streamBase
}

var _ rest.Connecter = &LogsREST{}

// Connect returns the handler of one request.
func (r *LogsREST) Connect(ctx context.Context, name string, _ runtime.Object, _ rest.Responder) (http.Handler, error) {
	return r.handler(ctx, name, r.serve, r.append), nil
}

func parseStage(q url.Values, path *field.Path, errs *field.ErrorList) string {
	s := q.Get("stage")
	if s != "" && s != stage.Plan && s != stage.Apply {
		*errs = append(*errs, field.NotSupported(path.Child("stage"), s, []string{stage.Plan, stage.Apply}))
	}
	return s
}

func (r *LogsREST) serve(ctx context.Context, name string, w http.ResponseWriter, req *http.Request) error {
	q := req.URL.Query()
	path := field.NewPath("query")
	var errs field.ErrorList
	stageName := parseStage(q, path, &errs)
	attempt := parseInt(q, "attempt", path, &errs)
	opts := artifacts.LogOptions{
		Follow:     parseBool(q, "follow", path, &errs),
		TailLines:  parseInt(q, "tailLines", path, &errs),
		LimitBytes: parseInt(q, "limitBytes", path, &errs),
	}
	if len(errs) > 0 {
		return badRequest("logs", errs)
	}
	run, err := r.status.get(ctx, name)
	if err != nil {
		return err
	}
	if stageName == "" {
		stageName = stage.Plan
		if n := len(run.Status.Stages); n > 0 {
			stageName = string(run.Status.Stages[n-1].Name)
		}
	}
	n := int32(1)
	if attempt != nil {
		n = int32(*attempt)
	} else if cur := currentStage(run, stageName); cur != nil {
		n = cur.Attempt
	}
	if isFinal(run.Status.Phase) {
		// Nothing more will be written; do not wait for a log that never comes.
		opts.Follow = false
	}
	fw := &flushWriter{w: w}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	err = r.artifacts.StreamLog(ctx, r.ref(run), stageName, n, opts, fw)
	if errors.Is(err, artifacts.ErrNotFound) && !fw.wrote {
		return notFound(name, "logs", fmt.Sprintf("run %q has no %s log for attempt %d yet (it is %s); add ?follow=true to wait for it", name, stageName, n, phaseOrPending(run)))
	}
	if err != nil && !fw.wrote && ctx.Err() == nil {
		return apierrors.NewInternalError(err)
	}
	if !fw.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return nil
}

// flushWriter writes the header on first use and flushes every write, so a
// follower sees each chunk as soon as it is stored.
type flushWriter struct {
	w     http.ResponseWriter
	wrote bool
}

func (f *flushWriter) Write(p []byte) (int, error) {
	if !f.wrote {
		f.wrote = true
		f.w.WriteHeader(http.StatusOK)
	}
	return f.w.Write(p)
}

// Flush flushes the response.
func (f *flushWriter) Flush() {
	if !f.wrote {
		f.wrote = true
		f.w.WriteHeader(http.StatusOK)
	}
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
}

// logReadSize is how much of the executor's stream is appended at once at most.
const logReadSize = 64 << 10

func (r *LogsREST) append(ctx context.Context, name string, req *http.Request) error {
	q := req.URL.Query()
	path := field.NewPath("query")
	var errs field.ErrorList
	stageName := parseStage(q, path, &errs)
	attempt := parseInt(q, "attempt", path, &errs)
	if stageName == "" {
		errs = append(errs, field.Required(path.Child("stage"), "the stage that writes"))
	}
	if attempt == nil {
		errs = append(errs, field.Required(path.Child("attempt"), "the attempt that writes"))
	}
	if len(errs) > 0 {
		return badRequest("log stream", errs)
	}
	run, err := r.status.get(ctx, name)
	if err != nil {
		return err
	}
	if err := r.executorFor(ctx, run, stageName, int32(*attempt), "logs"); err != nil {
		return err
	}
	ref := r.ref(run)
	buf := make([]byte, logReadSize)
	for {
		n, rerr := req.Body.Read(buf)
		if n > 0 {
			if err := r.artifacts.AppendLog(ctx, ref, stageName, int32(*attempt), append([]byte(nil), buf[:n]...)); err != nil {
				if errors.Is(err, artifacts.ErrLogClosed) {
					return conflict(name, "the %s log of attempt %d is closed: the stage has ended", stageName, *attempt)
				}
				return apierrors.NewInternalError(err)
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return apierrors.NewBadRequest("reading the log stream: " + rerr.Error())
		}
	}
}

// OutputsREST serves terraformruns/outputs: every output, sensitive values
// included, as `terraform output -json` prints them. It is authorized apart
// from get on the run. POST is the apply stage's upload, which also records
// the outputs, without sensitive values, in status.outputs.
type OutputsREST struct {
	streamBase
}

var _ rest.Connecter = &OutputsREST{}

// Connect returns the handler of one request.
func (r *OutputsREST) Connect(ctx context.Context, name string, _ runtime.Object, _ rest.Responder) (http.Handler, error) {
	return r.handler(ctx, name, r.serve, r.upload), nil
}

func (r *OutputsREST) serve(ctx context.Context, name string, w http.ResponseWriter, _ *http.Request) error {
	run, err := r.status.get(ctx, name)
	if err != nil {
		return err
	}
	rc, _, err := r.artifacts.Get(ctx, r.ref(run), artifacts.Outputs)
	if errors.Is(err, artifacts.ErrNotFound) {
		return notFound(name, "outputs", fmt.Sprintf("run %q has no outputs yet (it is %s); outputs exist once the apply has succeeded", name, phaseOrPending(run)))
	}
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, rc)
	return nil
}

// outputValue is one entry of `terraform output -json`.
type outputValue struct {
	Sensitive bool            `json:"sensitive"`
	Type      json.RawMessage `json:"type"`
	Value     json.RawMessage `json:"value"`
}

// maxOutputsBytes bounds the outputs document accepted from an executor.
const maxOutputsBytes = 4 << 20

func (r *OutputsREST) upload(ctx context.Context, name string, req *http.Request) error {
	q := req.URL.Query()
	path := field.NewPath("query")
	var errs field.ErrorList
	attempt := parseInt(q, "attempt", path, &errs)
	if attempt == nil {
		errs = append(errs, field.Required(path.Child("attempt"), "the apply stage attempt that uploads"))
	}
	if len(errs) > 0 {
		return badRequest("outputs upload", errs)
	}
	run, err := r.status.get(ctx, name)
	if err != nil {
		return err
	}
	if err := r.executorFor(ctx, run, stage.Apply, int32(*attempt), "outputs"); err != nil {
		return err
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxOutputsBytes+1))
	if err != nil {
		return apierrors.NewBadRequest("reading the outputs: " + err.Error())
	}
	if len(body) > maxOutputsBytes {
		return apierrors.NewRequestEntityTooLargeError("the outputs are larger than 4 MiB")
	}
	var outputs map[string]outputValue
	if err := json.Unmarshal(body, &outputs); err != nil {
		return apierrors.NewBadRequest("the outputs are not `terraform output -json`: " + err.Error())
	}
	if _, err := r.artifacts.Put(ctx, r.ref(run), artifacts.Outputs, bytes.NewReader(body)); err != nil {
		return apierrors.NewInternalError(err)
	}
	statuses := make([]terrarun.OutputStatus, 0, len(outputs))
	for _, n := range sortedKeys(outputs) {
		o := outputs[n]
		s := terrarun.OutputStatus{Name: n, Type: string(o.Type), Sensitive: o.Sensitive}
		if !o.Sensitive {
			s.Value = string(o.Value)
		}
		statuses = append(statuses, s)
	}
	_, err = r.status.update(ctx, name, func(run *terrarun.TerraformRun) error {
		if err := r.executorFor(ctx, run, stage.Apply, int32(*attempt), "outputs"); err != nil {
			return err
		}
		run.Status.Outputs = statuses
		return nil
	})
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
