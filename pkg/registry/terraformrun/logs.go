package terraformrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/pkg/runrules"
)

const (
	// logReadSize is how much of the executor's stream is read at once, and
	// about the most that is appended at once.
	logReadSize = 64 << 10
	// logBatchDelay is how long the stream is collected after a batch's first
	// byte before it is appended while the log has a follower: followers see
	// a line at most this much later.
	logBatchDelay = 10 * time.Millisecond
	// logWriteTimeout bounds a batch's append once the stream's request has
	// ended: what the executor sent is kept even when it went away.
	logWriteTimeout = 30 * time.Second
)

// logQuietBatchDelay is logBatchDelay while nobody follows the log: a read
// sees a line at most this much later, and a stage's log costs a transaction a
// second rather than one per burst of output. A follower's arrival sends what
// is collected at once. A variable for tests.
var logQuietBatchDelay = time.Second

// LogsREST serves terraformruns/logs as text/plain, streamed and flushed, with
// the query options of a TerraformRunLogOptions: stage (plan or apply;
// default the latest), attempt (default the latest), follow, tailLines and
// limitBytes. A follow ends when the stage attempt's log is closed, or when
// the run ends or is deleted (404 when the log never appeared).
// POST ?stage=S&attempt=N is the executor's log stream: the body is appended
// as it arrives.
type LogsREST struct {
	connectBase
}

var _ rest.Connecter = &LogsREST{}

// NewConnectOptions returns the options of a request: a TerraformRunLogOptions.
func (r *LogsREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &terrarun.TerraformRunLogOptions{}, false, ""
}

// Connect validates the options, loads the run, checks the executor of a log
// stream, and returns the handler that serves the request.
func (r *LogsREST) Connect(ctx context.Context, name string, options runtime.Object, responder rest.Responder) (http.Handler, error) {
	opts, upload, run, err := prepare(ctx, &r.connectBase, name, options, "TerraformRunLogOptions", validation.ValidateTerraformRunLogOptions)
	if err != nil {
		return nil, err
	}
	if upload {
		if err := checkExecutor(ctx, run, opts.Stage, *opts.Attempt, "logs"); err != nil {
			return nil, err
		}
		return uploadHandler(responder, func(req *http.Request) error {
			return r.append(ctx, run, opts.Stage, *opts.Attempt, opts.End, req.Body)
		}), nil
	}

	stageName := opts.Stage
	if stageName == "" {
		stageName = terrarun.StagePlan
		if n := len(run.Status.Stages); n > 0 {
			stageName = run.Status.Stages[n-1].Name
		}
	}
	attempt := int32(1)
	if opts.Attempt != nil {
		attempt = *opts.Attempt
	} else if cur := runrules.CurrentStage(runrules.FromInternal(run), v1alpha1.StageName(stageName)); cur != nil {
		attempt = cur.Attempt
	}
	streamOpts := artifacts.LogOptions{Follow: opts.Follow, TailLines: opts.TailLines, LimitBytes: opts.LimitBytes}
	if finished(run) {
		// Nothing more will be written; do not wait for a log that never comes.
		streamOpts.Follow = false
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fw := &flushWriter{w: w}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		streamCtx := ctx
		if streamOpts.Follow {
			waitCtx, done, err := r.waiters.start(ctx)
			if err != nil {
				responder.Error(err)
				return
			}
			defer done()
			streamCtx = waitCtx
		}
		streamCtx, cancel := context.WithCancelCause(streamCtx)
		defer cancel(nil)
		if streamOpts.Follow {
			go r.endWithRun(streamCtx, cancel, run)
		}
		err := r.artifacts.StreamLog(streamCtx, runRef(run), string(stageName), attempt, streamOpts, fw)
		var ended runEnded
		switch {
		case fw.wrote:
			// The status is sent; an error can only end the body early.
		case errors.As(context.Cause(streamCtx), &ended):
			responder.Error(notFound(name, "logs", fmt.Sprintf("%s with no %s log for attempt %d", ended, stageName, attempt)))
		case errors.Is(context.Cause(streamCtx), errShuttingDown):
			responder.Error(apierrors.NewServiceUnavailable(fmt.Sprintf("the server is shutting down before the %s log of attempt %d began; follow again", stageName, attempt)))
		case err != nil && ctx.Err() == nil && finished(run):
			responder.Error(artifactError(err, name, "logs", fmt.Sprintf(
				"run %q ended %s with no %s log for attempt %d", name, run.Status.Phase, stageName, attempt)))
		case err != nil && ctx.Err() == nil:
			hint := "; add ?follow=true to wait for it"
			if streamOpts.Follow {
				hint = ""
			}
			responder.Error(artifactError(err, name, "logs", fmt.Sprintf(
				"run %q has no %s log for attempt %d yet (it is %s)%s", name, stageName, attempt, phase(run), hint)))
		default:
			w.WriteHeader(http.StatusOK)
		}
	}), nil
}

// followEndGrace is how long a follow goes on after its run ended: the
// stage's log is closed before the run's final status is written, and the
// stream gets this long to see the close and send the last lines itself.
var followEndGrace = 2 * time.Second

// runEnded is why a follow ended that its log did not end: the run did.
type runEnded string

func (e runEnded) Error() string { return string(e) }

// endWithRun cancels a follow of run with a runEnded cause once the run is
// final or deleted (and followEndGrace has passed), so that a follow of a log
// that will never be written or closed (a stage the run never reaches, an
// attempt that never happens) ends too.
func (r *LogsREST) endWithRun(ctx context.Context, cancel context.CancelCauseFunc, run *terrarun.TerraformRun) {
	final, err := r.status.watchUntil(ctx, run, func(run *terrarun.TerraformRun) bool { return finished(run) })
	var why runEnded
	switch {
	case ctx.Err() != nil:
		return // the follow ended first
	case err == nil:
		why = runEnded(fmt.Sprintf("run %q ended %s", run.Name, final.Status.Phase))
	case apierrors.IsGone(err):
		why = runEnded(fmt.Sprintf("run %q was deleted", run.Name))
	default:
		// The watch failed: the follow ends as it would have without it.
		return
	}
	select {
	case <-time.After(followEndGrace):
		cancel(why)
	case <-ctx.Done():
	}
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

// append appends the executor's stream to the log of the stage attempt as it
// arrives, in batches: what arrives within logBatchDelay of a batch's first
// byte, up to logReadSize, is one append, so that a log of many short lines
// costs a transaction per batch rather than per line. With end, a stream
// that ends cleanly ends the log.
func (r *LogsREST) append(ctx context.Context, run *terrarun.TerraformRun, stageName terrarun.StageName, attempt int32, end bool, body io.Reader) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pieces := make(chan []byte, 16)
	readErr := make(chan error, 1)
	go func() {
		defer close(pieces)
		for {
			buf := make([]byte, logReadSize)
			n, err := body.Read(buf)
			if n > 0 {
				select {
				case pieces <- buf[:n]:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					readErr <- err
				}
				return
			}
		}
	}()
	ref := runRef(run)
	closedErr := func(err error) error {
		return artifactError(err, run.Name, "logs", fmt.Sprintf("the %s log of attempt %d is closed: the stage has ended", stageName, attempt))
	}
	// With end, a stream that ends cleanly is the stage's whole log: its
	// last batch closes the log in the same transaction (EndLog). One that
	// breaks leaves the log open, and the controller closes it when the
	// stage ends.
	followers, err := r.artifacts.WatchLogFollowers(ctx, ref, string(stageName), attempt)
	if err != nil {
		return err
	}
	ended := false
	for piece := range pieces {
		batch := piece
		delay := logQuietBatchDelay
		if followers.Followed() {
			delay = logBatchDelay
		}
		timer := time.NewTimer(delay)
	collect:
		for len(batch) < logReadSize {
			select {
			case more, ok := <-pieces:
				if !ok {
					ended = true
					break collect
				}
				batch = append(batch, more...)
			case <-timer.C:
				break collect
			case <-followers.Arrived():
				break collect
			}
		}
		timer.Stop()
		write := r.artifacts.AppendLog
		if end && ended && len(readErr) == 0 && ctx.Err() == nil {
			write = r.artifacts.EndLog
		}
		wctx, cancelWrite := context.WithTimeout(context.WithoutCancel(ctx), logWriteTimeout)
		err := write(wctx, ref, string(stageName), attempt, batch)
		cancelWrite()
		if err != nil {
			return closedErr(err)
		}
	}
	select {
	case err := <-readErr:
		return apierrors.NewBadRequest("reading the log stream: " + err.Error())
	default:
	}
	if end && !ended && ctx.Err() == nil {
		if err := r.artifacts.CloseLog(ctx, ref, string(stageName), attempt); err != nil {
			return closedErr(err)
		}
	}
	return nil
}
