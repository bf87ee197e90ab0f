package terraformrun

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/klog/v2"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/pkg/runrules"
	"github.com/terrarun/terrarun/pkg/stage"
)

// planWaitTimeout bounds a GET with ?wait=true.
const planWaitTimeout = 30 * time.Minute

// maxResultBytes bounds the plan stage's result document.
const maxResultBytes = 64 << 10

// PlanREST serves terraformruns/plan, with the query options of a
// TerraformRunPlanOptions.
//
// GET returns the plan as text (default), or ?format=json with every
// sensitive value redacted; ?wait=true blocks until the plan exists or the plan
// stage fails. The binary plan file (?format=file) and the planned
// configuration (?format=source) hold secrets and are served only to the
// executor of the run's apply stage; a plan stage that is to carry the apply
// asks for the file with ?wait=true and is answered once it has the apply
// stage. POST ?attempt=N&part=P is the plan
// stage's upload of one part; part=result comes last and records the plan in
// status.plan; part=all uploads several parts, the result last if among
// them, in one multipart/form-data body, and stores them together.
type PlanREST struct {
	connectBase
	// checkPolicy checks a plan with changes when it is recorded; nil
	// checks none.
	checkPolicy PolicyCheck
}

var _ rest.Connecter = &PlanREST{}

// NewConnectOptions returns the options of a request: a TerraformRunPlanOptions.
func (r *PlanREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &terrarun.TerraformRunPlanOptions{}, false, ""
}

// Connect validates the options, loads the run, checks the executor of a
// plan upload or of a plan file download, and returns the handler that
// serves the request.
func (r *PlanREST) Connect(ctx context.Context, name string, options runtime.Object, responder rest.Responder) (http.Handler, error) {
	opts, upload, run, err := prepare(ctx, &r.connectBase, name, options, "TerraformRunPlanOptions", validation.ValidateTerraformRunPlanOptions)
	if err != nil {
		return nil, err
	}
	if upload {
		if err := checkExecutor(ctx, run, terrarun.StagePlan, *opts.Attempt, "plan"); err != nil {
			return nil, err
		}
		if err := planNotRecorded(run); err != nil {
			return nil, err
		}
		return uploadHandler(responder, func(req *http.Request) error {
			switch opts.Part {
			case terrarun.PlanPartResult:
				return r.record(ctx, run, *opts.Attempt, req.Body)
			case terrarun.PlanPartAll:
				return r.putAll(ctx, run, *opts.Attempt, req)
			}
			body, err := declaredDigest(textproto.MIMEHeader(req.Header), req.Body)
			if err != nil {
				return err
			}
			if _, err := r.artifacts.Put(ctx, runRef(run), planParts[opts.Part], body); err != nil {
				r.waitsForStore(ctx, run, "plan", err)
				return artifactError(err, name, "plan", "")
			}
			return nil
		}), nil
	}

	format := planFormats[opts.Format]
	if format.kind == artifacts.PlanFile || format.kind == artifacts.PlanSource {
		if err := checkExecutor(ctx, run, terrarun.StageApply, 0, "plan"); err != nil {
			if !opts.Wait || format.kind != artifacts.PlanFile || !awaitsApply(ctx, run) {
				return nil, err
			}
			// The plan stage of an automatically approved run asks for
			// the apply stage it is to carry: wait until the controller
			// grants it.
			return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				granted, err := r.waitForApply(ctx, run)
				if err == nil {
					err = r.serve(ctx, granted, format, w, req)
				}
				if err != nil {
					responder.Error(err)
				}
			}), nil
		}
	}
	if !hasPlan(run) && !opts.Wait {
		return nil, notFound(name, "plan", fmt.Sprintf("run %q has no plan yet (it is %s); add ?wait=true to wait for it", name, phase(run)))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if err := r.serve(ctx, run, format, w, req); err != nil {
			responder.Error(err)
		}
	}), nil
}

// planFormat is how a format of the plan is stored and served.
type planFormat struct {
	kind        artifacts.Kind
	contentType string
}

var planFormats = map[string]planFormat{
	"":                        {artifacts.PlanText, "text/plain; charset=utf-8"},
	terrarun.PlanFormatText:   {artifacts.PlanText, "text/plain; charset=utf-8"},
	terrarun.PlanFormatJSON:   {artifacts.PlanJSON, "application/json"},
	terrarun.PlanFormatFile:   {artifacts.PlanFile, "application/octet-stream"},
	terrarun.PlanFormatSource: {artifacts.PlanSource, "application/gzip"},
}

// partDigest is the digest recorded in plan for the part stored as kind.
func partDigest(plan *terrarun.PlanSummary, kind artifacts.Kind) string {
	if plan.Parts == nil {
		return ""
	}
	return map[artifacts.Kind]string{
		artifacts.PlanFile:   plan.Parts.File,
		artifacts.PlanSource: plan.Parts.Source,
		artifacts.PlanText:   plan.Parts.Text,
		artifacts.PlanJSON:   plan.Parts.JSON,
	}[kind]
}

func orNone(digest string) string {
	if digest == "" {
		return "(none)"
	}
	return digest
}

// planParts are the artifacts that the parts of a plan upload are stored as.
var planParts = map[string]artifacts.Kind{
	terrarun.PlanPartFile:   artifacts.PlanFile,
	terrarun.PlanPartText:   artifacts.PlanText,
	terrarun.PlanPartJSON:   artifacts.PlanJSON,
	terrarun.PlanPartSource: artifacts.PlanSource,
}

func hasPlan(run *terrarun.TerraformRun) bool {
	return run.Status.Plan != nil && run.Status.Plan.Digest != ""
}

// serve writes the plan of run in format, after waiting for it if the run has
// none yet; it returns an error only before it writes anything. The part's
// recorded digest is its entity tag: a request whose If-None-Match names it
// is answered 304, without the part (as an Auto run's plan stage, which
// holds the plan file it made, asks for the approved one).
func (r *PlanREST) serve(ctx context.Context, run *terrarun.TerraformRun, format planFormat, w http.ResponseWriter, req *http.Request) error {
	if !hasPlan(run) {
		var err error
		if run, err = r.waitForPlan(ctx, run); err != nil {
			return err
		}
	}
	want := partDigest(run.Status.Plan, format.kind)
	etag := strconv.Quote(want)
	if want != "" && etagMatches(req.Header.Get("If-None-Match"), etag) {
		w.Header().Set("ETag", etag)
		w.Header().Set("X-Terrarun-Plan-Digest", run.Status.Plan.Digest)
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	rc, meta, err := r.artifacts.Get(ctx, runRef(run), format.kind)
	if err != nil {
		return artifactError(err, run.Name, "plan", fmt.Sprintf(
			"run %q has plan %s, but its %s is no longer stored: the server keeps artifacts only for its retention period; create a new run to plan again",
			run.Name, shortDigest(run.Status.Plan.Digest), format.kind))
	}
	defer rc.Close()
	if meta.SHA256 != want {
		// Only a part replaced since the plan was recorded gets here: what
		// approvers read must be what they approve.
		return conflict(run.Name, "the stored %s is %s, not the %s recorded with plan %s: refusing to serve it; create a new run to plan again",
			format.kind, meta.SHA256, orNone(want), run.Status.Plan.Digest)
	}
	if format.kind == artifacts.PlanJSON && meta.Truncated {
		// Truncated JSON is not JSON: say so instead of serving it.
		return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
			"the redacted plan JSON of run %q exceeded the server's --max-plan-bytes and was truncated; read the text plan, or ask the administrator to raise the limit", run.Name))
	}
	// The first bytes are read before the answer starts, so that a part
	// that fails its check there (an object changed in the bucket fails
	// on its first segment) is an error, not an empty plan.
	body := bufio.NewReaderSize(rc, 64<<10)
	if _, err := body.Peek(1); err != nil && err != io.EOF {
		return apierrors.NewInternalError(fmt.Errorf("refusing to serve the %s of run %q: %w", format.kind, run.Name, err))
	}
	w.Header().Set("Content-Type", format.contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Terrarun-Plan-Digest", run.Status.Plan.Digest)
	if want != "" {
		w.Header().Set("ETag", etag)
	}
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, body); err != nil && req.Context().Err() == nil {
		// A part that fails its check after its first bytes (its digest
		// is checked at its end): the answer is cut off, never completed,
		// so that no client takes part of a plan for the plan.
		klog.FromContext(ctx).Error(err, "Aborting the answer of a plan part that failed its check", "run", klog.KObj(run), "part", format.kind)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// etagMatches says whether the If-None-Match header value header names the
// strong entity tag etag, or any ("*"). Weak tags (W/"…") never match: a
// plan part is the same only byte for byte.
func etagMatches(header, etag string) bool {
	for tag := range strings.SplitSeq(header, ",") {
		if tag = strings.TrimSpace(tag); tag == "*" || tag == etag {
			return true
		}
	}
	return false
}

// waitFor watches the run until done holds for it, within planWaitTimeout,
// and returns it then; what says what the wait is for, in its errors ("get
// a plan").
func (r *PlanREST) waitFor(ctx context.Context, run *terrarun.TerraformRun, what string, done func(*terrarun.TerraformRun) bool) (*terrarun.TerraformRun, error) {
	waitCtx, finish, err := r.waiters.start(ctx)
	if err != nil {
		return nil, err
	}
	defer finish()
	ctx, cancel := context.WithTimeout(waitCtx, planWaitTimeout)
	defer cancel()
	name := run.Name
	run, err = r.status.watchUntil(ctx, run, done)
	switch {
	case err != nil && errors.Is(context.Cause(waitCtx), errShuttingDown):
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("the server is shutting down before run %q could %s; wait again", name, what))
	case err != nil && ctx.Err() != nil:
		return nil, apierrors.NewTimeoutError(fmt.Sprintf("run %q did not %s within %s; try again", name, what, planWaitTimeout), 5)
	}
	return run, err
}

// waitForPlan waits until the run has a plan, or its plan stage has ended
// without one.
func (r *PlanREST) waitForPlan(ctx context.Context, run *terrarun.TerraformRun) (*terrarun.TerraformRun, error) {
	run, err := r.waitFor(ctx, run, "get a plan", func(run *terrarun.TerraformRun) bool {
		return hasPlan(run) || planFailed(run) != nil || finished(run)
	})
	switch {
	case err != nil:
		return nil, err
	case hasPlan(run):
		return run, nil
	}
	if c := planFailed(run); c != nil {
		return nil, conflict(run.Name, "the run has no plan: %s", c.Message)
	}
	return nil, notFound(run.Name, "plan", fmt.Sprintf("run %q ended %s without a plan: %s", run.Name, run.Status.Phase, run.Status.Message))
}

// awaitsApply says whether the request is from the executor of the current
// plan stage of a run whose plan stage goes on to apply
// (runrules.CarriesApply). The run read for the request may not show the
// plan just recorded yet: the wait sees it.
func awaitsApply(ctx context.Context, run *terrarun.TerraformRun) bool {
	return runrules.CarriesApply(runrules.FromInternal(run)) && checkExecutor(ctx, run, terrarun.StagePlan, 0, "plan") == nil
}

// waitForApply waits until the controller grants the requesting plan
// executor the run's apply stage, and returns the run then; or an error once
// the plan stage has ended without it (the run was canceled or deleted).
func (r *PlanREST) waitForApply(ctx context.Context, run *terrarun.TerraformRun) (*terrarun.TerraformRun, error) {
	granted := func(run *terrarun.TerraformRun) bool {
		return checkExecutor(ctx, run, terrarun.StageApply, 0, "plan") == nil
	}
	run, err := r.waitFor(ctx, run, "start its apply", func(run *terrarun.TerraformRun) bool {
		return granted(run) || checkExecutor(ctx, run, terrarun.StagePlan, 0, "plan") != nil
	})
	switch {
	case err != nil:
		return nil, err
	case granted(run):
		return run, nil
	}
	return nil, conflict(run.Name, "the plan stage ended without the apply stage (the run is %s: %s); this executor does not apply", phase(run), run.Status.Message)
}

// planFailed is the Planned condition of a run whose plan stage ended
// without a plan, or nil.
func planFailed(run *terrarun.TerraformRun) *metav1.Condition {
	c := meta.FindStatusCondition(run.Status.Conditions, terrarun.ConditionPlanned)
	if c != nil && c.Status == metav1.ConditionFalse && c.Reason != terrarun.ReasonPlanning && c.Reason != terrarun.ReasonPending && c.Reason != terrarun.ReasonQueued && c.Reason != terrarun.ReasonWaitingForState {
		return c
	}
	return nil
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
			obj := ev.Object
			if c, ok := obj.(runtime.CacheableObject); ok {
				// The watch cache wraps what it sends to several watchers.
				obj = c.GetObject()
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				run, ok := obj.(*terrarun.TerraformRun)
				if !ok {
					return nil, fmt.Errorf("the run's watch sent a %T", obj)
				}
				return run, nil
			case watch.Deleted:
				return nil, apierrors.NewGone("the run was deleted")
			case watch.Error:
				return nil, apierrors.FromObject(ev.Object)
			}
		}
	}
}

// putAll stores the parts of a multipart/form-data upload (part=all)
// together, then records the plan if the result is its last part.
func (r *PlanREST) putAll(ctx context.Context, run *terrarun.TerraformRun, attempt int32, req *http.Request) error {
	mediaType, params, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if err != nil || mediaType != "multipart/form-data" || params["boundary"] == "" {
		return &apierrors.StatusError{ErrStatus: metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusUnsupportedMediaType,
			Reason:  metav1.StatusReasonUnsupportedMediaType,
			Message: "part=all takes a multipart/form-data body with a boundary, one form part per plan part (file, text, json, source, then result)",
		}}
	}
	mr := multipart.NewReader(req.Body, params["boundary"])
	// The result is read whole (record refuses one that is too large), and
	// the body must end after it, before the other parts are committed.
	var result []byte
	seen := map[string]bool{}
	_, err = r.artifacts.PutAll(ctx, runRef(run), func() (artifacts.Kind, io.Reader, error) {
		p, err := mr.NextPart()
		if err == io.EOF {
			return "", nil, io.EOF
		}
		if err != nil {
			return "", nil, apierrors.NewBadRequest("reading the multipart body: " + err.Error())
		}
		name := p.FormName()
		if seen[name] {
			return "", nil, apierrors.NewBadRequest(fmt.Sprintf("plan part %q is given twice in the upload: send each part once", name))
		}
		seen[name] = true
		if name == terrarun.PlanPartResult {
			if result, err = io.ReadAll(io.LimitReader(p, maxResultBytes+1)); err != nil {
				return "", nil, apierrors.NewBadRequest("reading the plan result: " + err.Error())
			}
			if _, err := mr.NextPart(); err != io.EOF {
				return "", nil, apierrors.NewBadRequest("the result must be the last part of the upload")
			}
			return "", nil, io.EOF
		}
		kind, ok := planParts[name]
		if !ok {
			return "", nil, apierrors.NewBadRequest(fmt.Sprintf("unknown plan part %q in the upload: name each form part file, text, json, source or result", name))
		}
		body, err := declaredDigest(textproto.MIMEHeader(p.Header), p)
		return kind, body, err
	})
	if err != nil {
		if _, ok := err.(apierrors.APIStatus); ok {
			return err
		}
		r.waitsForStore(ctx, run, "plan", err)
		return artifactError(err, run.Name, "plan", "")
	}
	if result == nil {
		return nil
	}
	return r.record(ctx, run, attempt, bytes.NewReader(result))
}

// record reads the plan stage's result document, the last part of its
// upload, and records the plan in status.plan once every other part is
// stored.
func (r *PlanREST) record(ctx context.Context, run *terrarun.TerraformRun, attempt int32, body io.Reader) error {
	var result stage.Result
	data, err := io.ReadAll(io.LimitReader(body, maxResultBytes+1))
	if err != nil {
		return apierrors.NewBadRequest("reading the plan result: " + err.Error())
	}
	if len(data) > maxResultBytes {
		return apierrors.NewRequestEntityTooLargeError("the plan result is larger than 64 KiB")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&result); err != nil {
		return apierrors.NewBadRequest("decoding the plan result: " + err.Error())
	}
	// The parts' metas are read at once: four reads, one round trip.
	names := []string{terrarun.PlanPartFile, terrarun.PlanPartText, terrarun.PlanPartJSON, terrarun.PlanPartSource}
	metas, errs := make([]artifacts.Meta, len(names)), make([]error, len(names))
	var wg sync.WaitGroup
	for i, part := range names {
		wg.Go(func() { metas[i], errs[i] = r.artifacts.Stat(ctx, runRef(run), planParts[part]) })
	}
	wg.Wait()
	digests := map[string]string{}
	for i, part := range names {
		m, err := metas[i], errs[i]
		switch {
		case errors.Is(err, artifacts.ErrNotFound) && part == terrarun.PlanPartFile:
			return apierrors.NewBadRequest("upload the plan file (part=file) before the result: " + err.Error())
		case errors.Is(err, artifacts.ErrNotFound):
			return apierrors.NewBadRequest(fmt.Sprintf("upload %s before the result: %v", planParts[part], err))
		case err != nil:
			return artifactError(err, run.Name, "plan", "")
		}
		digests[part] = m.SHA256
	}
	parts := &terrarun.PlanPartDigests{
		File:   digests[terrarun.PlanPartFile],
		Source: digests[terrarun.PlanPartSource],
		Text:   digests[terrarun.PlanPartText],
		JSON:   digests[terrarun.PlanPartJSON],
	}
	digest := stage.PlanDigest(parts.File, parts.Source, parts.Text, parts.JSON)
	var policy *terrarun.PolicyStatus
	if result.HasChanges && r.checkPolicy != nil {
		if err := checkExecutor(ctx, run, terrarun.StagePlan, attempt, "plan"); err != nil {
			return err
		}
		if policy, err = r.policyOf(ctx, run, parts.JSON, digest); err != nil {
			return err
		}
	}
	_, err = r.status.update(ctx, run.Name, func(run *terrarun.TerraformRun) error {
		if err := checkExecutor(ctx, run, terrarun.StagePlan, attempt, "plan"); err != nil {
			return err
		}
		if err := planNotRecorded(run); err != nil {
			return err
		}
		now := metav1.Now()
		// The policies' results are recorded with the plan, in the same
		// write: no plan is ever approvable before it was checked.
		run.Status.Policy = policy
		meta.RemoveStatusCondition(&run.Status.Conditions, terrarun.ConditionArtifactsStored)
		run.Status.Plan = &terrarun.PlanSummary{
			Digest:      digest,
			Parts:       parts,
			Add:         result.Add,
			Change:      result.Change,
			Destroy:     result.Destroy,
			Import:      result.Import,
			HasChanges:  result.HasChanges,
			CompletedAt: &now,
		}
		if result.SourceRevision != "" && (run.Status.Source == nil || run.Status.Source.Artifact == nil) {
			// A pinned Flux artifact's revision is the server's, not
			// what the stage says of it.
			run.Status.Source = &terrarun.SourceStatus{Revision: result.SourceRevision}
		}
		return nil
	})
	return err
}

// policyOf checks run's plan, digest, against the policies (nil when none
// matches the run): with its
// redacted JSON as stored, when that is the part recorded (jsonDigest) and
// whole; otherwise the policies see that the plan could not be read, and
// their mandatory validations fail closed.
func (r *PlanREST) policyOf(ctx context.Context, run *terrarun.TerraformRun, jsonDigest, digest string) (*terrarun.PolicyStatus, error) {
	var planJSON []byte
	rc, meta, err := r.artifacts.Get(ctx, runRef(run), artifacts.PlanJSON)
	var planErr error
	switch {
	case errors.Is(err, artifacts.ErrNotFound):
		planErr = errors.New("the redacted plan JSON is not stored")
	case err != nil:
		return nil, artifactError(err, run.Name, "plan", "")
	default:
		planJSON, err = io.ReadAll(rc)
		rc.Close()
		switch {
		case err != nil:
			return nil, artifactError(err, run.Name, "plan", "")
		case meta.SHA256 != jsonDigest:
			planErr = fmt.Errorf("the stored redacted plan JSON is %s, not the part uploaded (%s)", meta.SHA256, jsonDigest)
		case meta.Truncated:
			planErr = errors.New("the redacted plan JSON exceeded the server's --max-plan-bytes and was truncated")
		}
	}
	if planErr != nil {
		planJSON = nil
	}
	checked, err := r.checkPolicy(ctx, runrules.FromInternal(run), planJSON, planErr, digest)
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("checking plan %s against the TerraformPolicies: %v", shortDigest(digest), err))
	}
	if len(checked.Policies) == 0 {
		return nil, nil // no policy matched: nothing to record
	}
	out := &terrarun.PolicyStatus{}
	if err := v1alpha1.Convert_v1alpha1_PolicyStatus_To_terrarun_PolicyStatus(checked, out, nil); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return out, nil
}

// planNotRecorded refuses, with 409, every part of a plan whose result is
// recorded: what approvers read and approve does not change afterwards.
func planNotRecorded(run *terrarun.TerraformRun) error {
	if p := run.Status.Plan; p != nil && p.Digest != "" {
		return conflict(run.Name, "the plan is recorded (%s) and its parts cannot change; create a new run to plan again", shortDigest(p.Digest))
	}
	return nil
}

// declaredDigest returns body, declared with the SHA-256 its sender gives in
// its Content-Digest header (RFC 9530, sha-256=:<base64>:), if any: the
// artifact store stores it under that address and refuses it when its bytes
// hash otherwise.
func declaredDigest(h textproto.MIMEHeader, body io.Reader) (io.Reader, error) {
	v := h.Get("Content-Digest")
	if v == "" {
		return body, nil
	}
	for _, item := range strings.Split(v, ",") {
		alg, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || !strings.EqualFold(alg, "sha-256") {
			continue
		}
		sum, err := base64.StdEncoding.DecodeString(strings.Trim(val, ":"))
		if err != nil || len(sum) != sha256.Size || !strings.HasPrefix(val, ":") || !strings.HasSuffix(val, ":") {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("Content-Digest %q: a sha-256 digest is sha-256=:<base64 of 32 bytes>:", v))
		}
		return artifacts.WithDigest(body, "sha256:"+hex.EncodeToString(sum)), nil
	}
	return body, nil
}
