package terraformrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/artifacts"
)

func TestLogsWriteAndRead(t *testing.T) {
	env := newTestEnv(t)
	run := env.createRun(t, "web", nil)
	env.runningStage(t, run, planStage, terrarun.StagePlan, 1)

	for _, chunk := range []string{"Initializing...\n", "line 2\nline 3\n"} {
		w := connect(t, env.storage.Logs, planStage, http.MethodPost, "web", "stage=plan&attempt=1", strings.NewReader(chunk))
		expectStatus(t, w, http.StatusNoContent)
	}
	// A second attempt of the plan stage, and an apply.
	if err := env.artifacts.CloseLog(t.Context(), runRef(run), "plan", 1); err != nil {
		t.Fatal(err)
	}
	run = env.runningStage(t, run, planStage, terrarun.StagePlan, 2)
	expectStatus(t, connect(t, env.storage.Logs, planStage, http.MethodPost, "web", "stage=plan&attempt=2", strings.NewReader("retry\n")), http.StatusNoContent)

	for _, tc := range []struct{ query, want string }{
		{"", "retry\n"}, // the latest attempt of the latest stage
		{"stage=plan", "retry\n"},
		{"stage=plan&attempt=1", "Initializing...\nline 2\nline 3\n"},
		{"attempt=1", "Initializing...\nline 2\nline 3\n"},
		{"attempt=1&tailLines=2", "line 2\nline 3\n"},
		{"attempt=1&tailLines=0", ""},
		{"attempt=1&limitBytes=4", "Init"},
		{"attempt=1&tailLines=1&limitBytes=4", "line"},
		{"attempt=1&follow=true", "Initializing...\nline 2\nline 3\n"}, // closed: the follow ends
	} {
		w := connect(t, env.storage.Logs, alice, http.MethodGet, "web", tc.query, nil)
		expectStatus(t, w, http.StatusOK)
		if w.Body.String() != tc.want {
			t.Errorf("GET ?%s = %q, want %q", tc.query, w.Body.String(), tc.want)
		}
		if w.Header().Get("Content-Type") != "text/plain; charset=utf-8" || w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET ?%s headers = %v", tc.query, w.Header())
		}
	}

	w := connect(t, env.storage.Logs, alice, http.MethodGet, "web", "stage=apply", nil)
	expectStatus(t, w, http.StatusNotFound, `run "web" has no apply log for attempt 1 yet (it is Planning); add ?follow=true to wait for it`)

	// The executor of a closed log must stop.
	if err := env.artifacts.CloseLog(t.Context(), runRef(run), "plan", 2); err != nil {
		t.Fatal(err)
	}
	w = connect(t, env.storage.Logs, planStage, http.MethodPost, "web", "stage=plan&attempt=2", strings.NewReader("late\n"))
	expectStatus(t, w, http.StatusConflict, "the plan log of attempt 2 is closed: the stage has ended")
}

// TestLogsAreBatched: an executor stream of 20,000 short lines, each its
// own write, is stored in full in a small number of etcd transactions (each
// transaction raises etcd's revision by one), not one per line.
func TestLogsAreBatched(t *testing.T) {
	env := newTestEnv(t)
	run := env.createRun(t, "web", nil)
	env.runningStage(t, run, planStage, terrarun.StagePlan, 1)

	const lines = 20000
	var want strings.Builder
	for i := range lines {
		fmt.Fprintf(&want, "line %05d of the plan\n", i)
	}
	before := env.revision(t)
	pr, pw := io.Pipe()
	go func() {
		for line := range strings.Lines(want.String()) {
			if _, err := pw.Write([]byte(line)); err != nil {
				return
			}
		}
		pw.Close()
	}()
	expectStatus(t, connect(t, env.storage.Logs, planStage, http.MethodPost, "web", "stage=plan&attempt=1", pr), http.StatusNoContent)
	txns := env.revision(t) - before
	t.Logf("%d lines (%d bytes) stored in %d transactions", lines, want.Len(), txns)
	if txns > lines/100 {
		t.Errorf("%d lines cost %d etcd transactions, want at most %d", lines, txns, lines/100)
	}
	w := connect(t, env.storage.Logs, alice, http.MethodGet, "web", "stage=plan&attempt=1", nil)
	expectStatus(t, w, http.StatusOK)
	if w.Body.String() != want.String() {
		t.Errorf("served %d bytes, want the %d written", w.Body.Len(), want.Len())
	}
}

func TestLogsFollow(t *testing.T) {
	env := newTestEnv(t)
	run := env.createRun(t, "web", nil)
	env.runningStage(t, run, applyStage, terrarun.StageApply, 1)

	// A follower that starts before the log exists waits for it, and ends
	// when the log is closed.
	done := make(chan *httptest.ResponseRecorder)
	go func() {
		done <- connect(t, env.storage.Logs, alice, http.MethodGet, "web", "stage=apply&follow=true", nil)
	}()
	time.Sleep(200 * time.Millisecond)
	for _, chunk := range []string{"Applying...\n", "Apply complete!\n"} {
		expectStatus(t, connect(t, env.storage.Logs, applyStage, http.MethodPost, "web", "stage=apply&attempt=1", strings.NewReader(chunk)), http.StatusNoContent)
	}
	select {
	case w := <-done:
		t.Fatalf("the follow ended before the log was closed: %d %q", w.Code, w.Body.String())
	case <-time.After(200 * time.Millisecond):
	}
	if err := env.artifacts.CloseLog(t.Context(), runRef(run), "apply", 1); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-done:
		expectStatus(t, w, http.StatusOK)
		if w.Body.String() != "Applying...\nApply complete!\n" {
			t.Errorf("followed %q", w.Body.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the follow did not end when the log was closed")
	}

	// A follower that leaves ends its request.
	ctx, cancel := context.WithCancel(t.Context())
	env.runningStage(t, run, applyStage, terrarun.StageApply, 2)
	go func() {
		done <- connectContext(t, ctx, env.storage.Logs, alice, http.MethodGet, "web", "stage=apply&attempt=2&follow=true", nil)
	}()
	time.Sleep(200 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the follow did not end with its request")
	}

	// Nothing more is written to the log of a run that ended: no follow.
	env.setStatus(t, "web", func(st *terrarun.TerraformRunStatus) { st.Phase = terrarun.RunPhaseFailed })
	w := connect(t, env.storage.Logs, alice, http.MethodGet, "web", "stage=apply&attempt=3&follow=true", nil)
	expectStatus(t, w, http.StatusNotFound, `run "web" ended Failed with no apply log for attempt 3`)
}

// TestFollowsEnd: a follow of a log that will never be written ends when its
// run does, or when the run is deleted; one that got lines ends with them.
func TestFollowsEnd(t *testing.T) {
	env := newTestEnv(t)
	follow := func(name, query string) chan *httptest.ResponseRecorder {
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() { done <- connect(t, env.storage.Logs, alice, http.MethodGet, name, query, nil) }()
		time.Sleep(200 * time.Millisecond)
		select {
		case w := <-done:
			t.Fatalf("the follow of %s?%s ended at once: %d %q", name, query, w.Code, w.Body.String())
		default:
		}
		return done
	}
	wait := func(done chan *httptest.ResponseRecorder, what string) *httptest.ResponseRecorder {
		t.Helper()
		select {
		case w := <-done:
			return w
		case <-time.After(30 * time.Second):
			t.Fatalf("the follow %s did not end", what)
			return nil
		}
	}

	// The apply stage of a run that is discarded instead.
	run := env.createRun(t, "discarded", nil)
	env.runningStage(t, run, planStage, terrarun.StagePlan, 1)
	apply := follow("discarded", "stage=apply&follow=true")
	attempt := follow("discarded", "stage=plan&attempt=999&follow=true")
	env.setStatus(t, "discarded", func(st *terrarun.TerraformRunStatus) { st.Phase = terrarun.RunPhaseDiscarded })
	expectStatus(t, wait(apply, "of a stage never reached"), http.StatusNotFound, `run "discarded" ended Discarded with no apply log for attempt 1`)
	expectStatus(t, wait(attempt, "of an attempt that never happens"), http.StatusNotFound, `run "discarded" ended Discarded with no plan log for attempt 999`)

	// A run deleted under its follower.
	env.createRun(t, "deleted", nil)
	gone := follow("deleted", "stage=plan&follow=true")
	if _, _, err := env.storage.Run.Delete(requestContext(alice, "delete", ""), "deleted", rest.ValidateAllObjectFunc, &metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, wait(gone, "of a deleted run"), http.StatusNotFound, `run "deleted" was deleted with no plan log for attempt 1`)

	// Lines already sent: the body ends with them.
	run = env.createRun(t, "partial", nil)
	env.runningStage(t, run, planStage, terrarun.StagePlan, 1)
	expectStatus(t, connect(t, env.storage.Logs, planStage, http.MethodPost, "partial", "stage=plan&attempt=1", strings.NewReader("Planning...\n")), http.StatusNoContent)
	partial := follow("partial", "stage=plan&follow=true")
	env.setStatus(t, "partial", func(st *terrarun.TerraformRunStatus) { st.Phase = terrarun.RunPhaseFailed })
	w := wait(partial, "of an unclosed log of a run that ended")
	if w.Code != http.StatusOK || w.Body.String() != "Planning...\n" {
		t.Errorf("followed %d %q", w.Code, w.Body.String())
	}
}

func TestLogsOptionsAndWriteErrors(t *testing.T) {
	env := newTestEnv(t)
	run := env.createRun(t, "web", nil)
	env.runningStage(t, run, planStage, terrarun.StagePlan, 1)

	cases := []struct {
		name   string
		u      user.Info
		method string
		query  string
		code   int
		fields []string
		msg    []string
	}{
		{name: "negative tailLines", method: http.MethodGet, query: "tailLines=-1", code: http.StatusUnprocessableEntity, fields: []string{"tailLines"}, msg: []string{`TerraformRunLogOptions.terrarun.dev "web" is invalid`}},
		{name: "negative limitBytes", method: http.MethodGet, query: "limitBytes=-1", code: http.StatusUnprocessableEntity, fields: []string{"limitBytes"}},
		{name: "unknown stage", method: http.MethodGet, query: "stage=destroy", code: http.StatusUnprocessableEntity, fields: []string{"stage"}},
		{name: "attempt 0", method: http.MethodGet, query: "attempt=0", code: http.StatusUnprocessableEntity, fields: []string{"attempt"}},
		{name: "follow that is no boolean", method: http.MethodGet, query: "follow=maybe", code: http.StatusBadRequest, msg: []string{`invalid follow="maybe": must be true or false`}},
		{name: "tailLines that is no number", method: http.MethodGet, query: "tailLines=all", code: http.StatusBadRequest, msg: []string{`invalid tailLines="all"`}},
		{name: "attempt past 32 bits", method: http.MethodGet, query: "attempt=4294967297", code: http.StatusBadRequest, msg: []string{`invalid attempt="4294967297"`}},
		{name: "write without stage and attempt", method: http.MethodPost, code: http.StatusUnprocessableEntity, fields: []string{"stage", "attempt"}},
		{name: "write by a user", u: alice, method: http.MethodPost, query: "stage=plan&attempt=1", code: http.StatusForbidden, msg: []string{"only the executor of this run's current stage may write its logs; alice is not an executor"}},
		{name: "write to another stage", method: http.MethodPost, query: "stage=apply&attempt=1", code: http.StatusForbidden, msg: []string{"which is not the run's current apply stage"}},
		{name: "write to another attempt", method: http.MethodPost, query: "stage=plan&attempt=2", code: http.StatusForbidden, msg: []string{"this executor runs attempt 1, not attempt 2"}},
		{name: "missing run", method: http.MethodGet, query: "", code: http.StatusNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := tc.u
			if u == nil {
				u = planStage
			}
			name := "web"
			if tc.name == "missing run" {
				name = "missing"
			}
			w := connect(t, env.storage.Logs, u, tc.method, name, tc.query, strings.NewReader("x\n"))
			st := expectStatus(t, w, tc.code, tc.msg...)
			if tc.fields != nil {
				expectCauses(t, st, tc.fields...)
			}
		})
	}
}

// TestWaitsAreCappedAndEndOnShutdown: one user holds at most
// MaxFollowsPerUser follows and plan waits open on a server, others are
// counted apart, and a server that begins to shut down ends them all at once
// instead of waiting for their runs.
func TestWaitsAreCappedAndEndOnShutdown(t *testing.T) {
	env := newTestEnv(t)
	env.storage.Logs.waiters.max = 2
	run := env.createRun(t, "web", nil)
	env.runningStage(t, run, planStage, terrarun.StagePlan, 1)

	bob := &user.DefaultInfo{Name: "bob"}
	results := make(chan *httptest.ResponseRecorder, 3)
	for _, u := range []user.Info{alice, alice, bob} {
		go func() {
			results <- connect(t, env.storage.Logs, u, http.MethodGet, "web", "stage=apply&follow=true", nil)
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		w := env.storage.Logs.waiters
		w.mu.Lock()
		started := w.byUser["alice"] == 2 && w.byUser["bob"] == 1
		w.mu.Unlock()
		if started {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the three follows did not start within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	expectStatus(t, connect(t, env.storage.Logs, alice, http.MethodGet, "web", "stage=apply&follow=true", nil),
		http.StatusTooManyRequests, `user "alice" already follows 2 logs or plans on this server, its limit`)
	expectStatus(t, connect(t, env.storage.Plan, alice, http.MethodGet, "web", "wait=true", nil),
		http.StatusTooManyRequests, `user "alice" already follows 2 logs or plans on this server`)
	// Reading without follow is not a wait.
	expectStatus(t, connect(t, env.storage.Logs, alice, http.MethodGet, "web", "stage=plan", nil), http.StatusNotFound)

	env.storage.EndWaits()
	for range 3 {
		select {
		case w := <-results:
			expectStatus(t, w, http.StatusServiceUnavailable, "the server is shutting down before the apply log of attempt 1 began; follow again")
		case <-time.After(5 * time.Second):
			t.Fatal("a follow is still open 5s after the server began to shut down")
		}
	}
	expectStatus(t, connect(t, env.storage.Logs, bob, http.MethodGet, "web", "stage=apply&follow=true", nil),
		http.StatusServiceUnavailable, "the server is shutting down; try again")
}

// TestLogsEnd: an executor's stream with end=true ends the log with its last
// lines, in one transaction; followers end; nothing is appended after. A
// stream with end=true that breaks leaves the log open. A read cannot end a
// log.
func TestLogsEnd(t *testing.T) {
	env := newTestEnv(t)
	run := env.createRun(t, "web", nil)
	env.runningStage(t, run, planStage, terrarun.StagePlan, 1)
	expectStatus(t, connect(t, env.storage.Logs, planStage, http.MethodPost, "web", "stage=plan&attempt=1", strings.NewReader("Initializing...\n")), http.StatusNoContent)
	followers, err := env.artifacts.WatchLogFollowers(t.Context(), runRef(run), "plan", 1)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		done <- connect(t, env.storage.Logs, alice, http.MethodGet, "web", "stage=plan&attempt=1&follow=true", nil)
	}()
	<-followers.Arrived() // the follower's own key is written before the end is counted
	before := env.revision(t)
	expectStatus(t, connect(t, env.storage.Logs, planStage, http.MethodPost, "web", "stage=plan&attempt=1&end=true", strings.NewReader("Plan: 1 to add.\n")), http.StatusNoContent)
	if got := env.writesSince(t, before); got != 1 {
		t.Errorf("a last line and the log's end: %d transactions, want 1", got)
	}
	select {
	case w := <-done:
		expectStatus(t, w, http.StatusOK)
		if w.Body.String() != "Initializing...\nPlan: 1 to add.\n" {
			t.Errorf("followed %q", w.Body.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the follow did not end with the log")
	}
	expectStatus(t, connect(t, env.storage.Logs, planStage, http.MethodPost, "web", "stage=plan&attempt=1", strings.NewReader("late\n")), http.StatusConflict, "the plan log of attempt 1 is closed")

	run = env.runningStage(t, run, planStage, terrarun.StagePlan, 2)
	broken := io.MultiReader(strings.NewReader("Initializing...\n"), iotest.ErrReader(errors.New("connection reset")))
	expectStatus(t, connect(t, env.storage.Logs, planStage, http.MethodPost, "web", "stage=plan&attempt=2&end=true", broken), http.StatusBadRequest, "connection reset")
	expectStatus(t, connect(t, env.storage.Logs, planStage, http.MethodPost, "web", "stage=plan&attempt=2", strings.NewReader("resumed\n")), http.StatusNoContent)
	if err := env.artifacts.CloseLog(t.Context(), runRef(run), "plan", 2); err != nil {
		t.Fatal(err)
	}
	w := connect(t, env.storage.Logs, alice, http.MethodGet, "web", "stage=plan&attempt=2", nil)
	expectStatus(t, w, http.StatusOK)
	if w.Body.String() != "Initializing...\nresumed\n" {
		t.Errorf("the log after a broken stream: %q", w.Body.String())
	}

	expectStatus(t, connect(t, env.storage.Logs, alice, http.MethodGet, "web", "stage=plan&attempt=2&end=true", nil), http.StatusUnprocessableEntity, "only the stage's executor ends its log")
}

// TestQuietLogsWaitForFollowers: a stream that nobody follows is kept until it
// ends (here: the quiet delay is an hour), in one transaction; a follower's
// arrival sends what is held at once, and while it follows, every line is
// sent without waiting for the stream to end.
func TestQuietLogsWaitForFollowers(t *testing.T) {
	quiet := logQuietBatchDelay
	logQuietBatchDelay = time.Hour
	t.Cleanup(func() { logQuietBatchDelay = quiet })
	env := newTestEnv(t)
	run := env.createRun(t, "web", nil)
	env.runningStage(t, run, planStage, terrarun.StagePlan, 1)
	stream := func(attempt int32) (*io.PipeWriter, chan *httptest.ResponseRecorder) {
		pr, pw := io.Pipe()
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() {
			done <- connect(t, env.storage.Logs, planStage, http.MethodPost, "web", fmt.Sprintf("stage=plan&attempt=%d", attempt), pr)
		}()
		return pw, done
	}
	write := func(w io.Writer, line string) {
		t.Helper()
		if _, err := io.WriteString(w, line); err != nil {
			t.Fatal(err)
		}
	}

	// Nobody follows: lines 50 ms apart are one transaction, at the end.
	before := env.revision(t)
	pw, done := stream(1)
	var want strings.Builder
	for i := range 10 {
		line := fmt.Sprintf("quiet %d\n", i)
		want.WriteString(line)
		write(pw, line)
		time.Sleep(50 * time.Millisecond)
	}
	pw.Close()
	expectStatus(t, <-done, http.StatusNoContent)
	if got := env.revision(t) - before; got != 1 {
		t.Errorf("10 lines nobody followed: %d transactions, want 1", got)
	}
	w := connect(t, env.storage.Logs, alice, http.MethodGet, "web", "stage=plan&attempt=1", nil)
	expectStatus(t, w, http.StatusOK)
	if w.Body.String() != want.String() {
		t.Errorf("stored %q, want %q", w.Body.String(), want.String())
	}

	// A follower arrives while a line is held: it gets it, and then each
	// line, while the stream is still open.
	env.runningStage(t, run, planStage, terrarun.StagePlan, 2)
	pw, done = stream(2)
	write(pw, "held\n")
	lines := make(chan string, 16)
	fctx, stopFollow := context.WithCancel(t.Context())
	defer stopFollow()
	go func() {
		defer close(lines)
		_ = env.artifacts.StreamLog(fctx, runRef(run), "plan", 2, artifacts.LogOptions{Follow: true}, lineWriter(lines))
	}()
	for _, line := range []string{"held\n", "followed 1\n", "followed 2\n"} {
		if line != "held\n" {
			write(pw, line)
		}
		select {
		case got := <-lines:
			if got != line {
				t.Fatalf("followed %q, want %q", got, line)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the follower did not get %q while the stream was open", line)
		}
	}
	pw.Close()
	expectStatus(t, <-done, http.StatusNoContent)
}

// lineWriter sends every write to a channel.
type lineWriter chan<- string

func (w lineWriter) Write(p []byte) (int, error) {
	w <- string(p)
	return len(p), nil
}
