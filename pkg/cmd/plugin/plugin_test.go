package plugin

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestWait checks every exit code of wait, on a run that has ended and on
// one that ends while wait watches it.
func TestWait(t *testing.T) {
	planning := newRun("web-1", v1alpha1.RunPhasePlanning, "Planning.", nil)
	ended := func(phase v1alpha1.RunPhase, message string) *v1alpha1.TerraformRun {
		return newRun("web-1", phase, message, nil)
	}
	for _, c := range []struct {
		name   string
		args   []string
		routes map[string]http.HandlerFunc
		code   int
		stdout string
		stderr []string
		gets   int // GETs of the run; 0: not checked
	}{
		{
			name:   "succeeded",
			routes: map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(ended(v1alpha1.RunPhaseSucceeded, "Applied."))},
			code:   ExitSucceeded,
			stdout: "team-a/web-1 Succeeded: Applied.\n",
			stderr: []string{"team-a/web-1: Succeeded - Applied.\n"},
		},
		{
			// The message comes from the run: its control characters are
			// escaped in the progress line and the error alike.
			name:   "failed",
			routes: map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(ended(v1alpha1.RunPhaseFailed, "The apply failed: \x1b[31mError\x1b[0m."))},
			code:   ExitFailed,
			stderr: []string{"team-a/web-1: Failed - The apply failed: \\x1b[31mError\\x1b[0m.\n", "error: team-a/web-1 Failed: The apply failed: \\x1b[31mError\\x1b[0m.\n"},
		},
		{
			name:   "canceled",
			routes: map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(ended(v1alpha1.RunPhaseCanceled, "Canceled by bob."))},
			code:   ExitCanceled,
			stderr: []string{"error: team-a/web-1 Canceled: Canceled by bob.\n"},
		},
		{
			name:   "discarded",
			routes: map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(ended(v1alpha1.RunPhaseDiscarded, "Discarded by bob."))},
			code:   ExitDiscarded,
			stderr: []string{"error: team-a/web-1 Discarded: Discarded by bob.\n"},
		},
		{
			name: "ends while watched",
			routes: map[string]http.HandlerFunc{
				"GET /terraformruns/web-1": object(planning),
				// wait watches again from each version it sees.
				"WATCH /terraformruns": sequence(
					watchEvents(true, watchEvent{"MODIFIED", newRun("web-1", v1alpha1.RunPhaseAwaitingApproval, "Waiting for approval.", nil)}),
					watchEvents(true, watchEvent{"MODIFIED", ended(v1alpha1.RunPhaseSucceeded, "Applied.")})),
			},
			code:   ExitSucceeded,
			stdout: "team-a/web-1 Succeeded: Applied.\n",
			stderr: []string{"team-a/web-1: Planning - Planning.\n", "team-a/web-1: AwaitingApproval - Waiting for approval.\n", "team-a/web-1: Succeeded - Applied.\n"},
			gets:   1,
		},
		{
			name: "the watch ends",
			routes: map[string]http.HandlerFunc{
				"GET /terraformruns/web-1": sequence(object(planning), object(ended(v1alpha1.RunPhaseCanceled, "Canceled by bob."))),
				"WATCH /terraformruns":     watchEvents(false),
			},
			code:   ExitCanceled,
			stderr: []string{"error: team-a/web-1 Canceled: Canceled by bob.\n"},
			gets:   2,
		},
		{
			name: "deleted while watched",
			routes: map[string]http.HandlerFunc{
				"GET /terraformruns/web-1": sequence(object(planning), status(http.StatusNotFound, metav1.StatusReasonNotFound, `terraformruns.terrarun.dev "web-1" not found`)),
				"WATCH /terraformruns":     watchEvents(true, watchEvent{"DELETED", planning}),
			},
			code:   ExitFailed,
			stderr: []string{"error: run web-1 was deleted before it ended; who deleted it is in the audit log, and what it did in its namespace's Events\n"},
			gets:   1,
		},
		{
			name: "timeout",
			args: []string{"--timeout", "200ms"},
			routes: map[string]http.HandlerFunc{
				"GET /terraformruns/web-1": object(planning),
				"WATCH /terraformruns":     watchEvents(true),
			},
			code:   ExitTimeout,
			stderr: []string{"team-a/web-1: Planning - Planning.\n", "error: run team-a/web-1 did not end within --timeout; it goes on: wait again with kubectl terrarun wait web-1 -n team-a\n"},
		},
		{
			name:   "no such run",
			routes: map[string]http.HandlerFunc{"GET /terraformruns/web-1": status(http.StatusNotFound, metav1.StatusReasonNotFound, `terraformruns.terrarun.dev "web-1" not found`)},
			code:   ExitFailed,
			stderr: []string{`error: terraformruns.terrarun.dev "web-1" not found` + "\n"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newFakeServer(t, c.routes)
			srv.run(t, "", append([]string{"wait", "web-1"}, c.args...)...).expect(t, c.code, c.stdout, c.stderr...)
			if gets := len(srv.received("GET", "/terraformruns/web-1")); c.gets != 0 && gets != c.gets {
				t.Errorf("%d GETs of the run, want %d", gets, c.gets)
			}
			for _, w := range srv.received("WATCH", "/terraformruns") {
				if got := w.query["fieldSelector"]; len(got) != 1 || got[0] != "metadata.name=web-1" {
					t.Errorf("watched runs %q, want metadata.name=web-1", got)
				}
				if got := w.query["resourceVersion"]; len(got) != 1 || got[0] != "7" {
					t.Errorf("watched from resourceVersion %q, want the run's, 7", got)
				}
			}
		})
	}

	t.Run("no run named", func(t *testing.T) {
		srv := newFakeServer(t, nil)
		srv.run(t, "", "wait").expect(t, ExitFailed, "", "error: accepts 1 arg(s), received 0\n")
	})
}

// TestRerun checks that rerun prints the run the server answers, waits for
// it with --wait and exits as wait does, and prints the server's refusal.
func TestRerun(t *testing.T) {
	started := object(newRun("web-3", v1alpha1.RunPhasePending, "", nil))
	for _, c := range []struct {
		name   string
		args   []string
		routes map[string]http.HandlerFunc
		code   int
		stdout string
		stderr []string
	}{
		{
			name:   "started",
			routes: map[string]http.HandlerFunc{"POST /terraformworkspaces/web/rerun": started},
			code:   ExitSucceeded,
			stdout: "Workspace team-a/web started run web-3\n",
		},
		{
			name: "waits",
			args: []string{"--wait"},
			routes: map[string]http.HandlerFunc{
				"POST /terraformworkspaces/web/rerun": started,
				"GET /terraformruns/web-3":            object(newRun("web-3", v1alpha1.RunPhaseDiscarded, "Discarded by bob.", nil)),
			},
			code:   ExitDiscarded,
			stdout: "Workspace team-a/web started run web-3\n",
			stderr: []string{"error: team-a/web-3 Discarded: Discarded by bob.\n"},
		},
		{
			name: "refused",
			routes: map[string]http.HandlerFunc{"POST /terraformworkspaces/web/rerun": status(http.StatusConflict, metav1.StatusReasonConflict,
				`Operation cannot be fulfilled on terraformworkspaces.terrarun.dev "web": the workspace is suspended; set spec.suspend to false first`)},
			code:   ExitFailed,
			stderr: []string{`error: Operation cannot be fulfilled on terraformworkspaces.terrarun.dev "web": the workspace is suspended; set spec.suspend to false first` + "\n"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newFakeServer(t, c.routes)
			srv.run(t, "", append([]string{"rerun", "web", "--reason", "flaky provider"}, c.args...)...).expect(t, c.code, c.stdout, c.stderr...)
			posts := srv.received("POST", "/terraformworkspaces/web/rerun")
			if len(posts) != 1 {
				t.Fatalf("%d reruns posted, want 1", len(posts))
			}
			var body v1alpha1.TerraformWorkspaceRerun
			if err := json.Unmarshal(posts[0].body, &body); err != nil || body.Reason != "flaky provider" || body.Kind != "TerraformWorkspaceRerun" {
				t.Errorf("posted %s (%v), want a TerraformWorkspaceRerun with the reason", posts[0].body, err)
			}
		})
	}
}

// TestApprove checks that approve shows the plan, approves exactly the
// digest it showed only when told yes, and refuses a run with no plan to
// approve.
func TestApprove(t *testing.T) {
	awaiting := newRun("web-1", v1alpha1.RunPhaseAwaitingApproval, "Waiting for approval.", func(run *v1alpha1.TerraformRun) {
		run.Spec.Creator = &v1alpha1.Creator{Username: "alice"}
		run.Status.Plan = &v1alpha1.PlanSummary{Digest: testDigest, Add: 1, Change: 2, Destroy: 3, HasChanges: true}
		run.Status.Source = &v1alpha1.SourceStatus{Revision: "0a1b2c3"}
	})
	fromFlux := awaiting.DeepCopy()
	fromFlux.Spec.Source = v1alpha1.Source{SourceRef: &v1alpha1.SourceReference{Kind: v1alpha1.SourceKindGitRepository, Name: "infra"}}
	fromFlux.Status.Source = &v1alpha1.SourceStatus{Revision: "main@sha1:0a1b2c3", Artifact: &v1alpha1.SourceArtifact{URL: "http://sc/x.tar.gz", Digest: testDigest}}
	pinned := awaiting.DeepCopy()
	pinned.Spec.Engine = v1alpha1.Engine{Binary: v1alpha1.EngineTofu, Image: "registry.example.com/executor:v1", ImageDigest: testDigest}
	approved := newRun("web-1", v1alpha1.RunPhaseAwaitingApproval, "", func(run *v1alpha1.TerraformRun) {
		run.Spec.Approval.RequiredApprovals = 2
		run.Status.Plan = awaiting.Status.Plan
		run.Status.Approvals = []v1alpha1.ApprovalStatus{{ApprovedBy: "carol", PlanDigest: testDigest}, {ApprovedBy: "bob", PlanDigest: testDigest}}
		run.Status.Approval = &run.Status.Approvals[1]
	})
	// The first of two approvals.
	first := newRun("web-1", v1alpha1.RunPhaseAwaitingApproval, "", func(run *v1alpha1.TerraformRun) {
		run.Spec.Creator = &v1alpha1.Creator{Username: "alice"}
		run.Spec.Approval.RequiredApprovals = 2
		run.Status.Plan = awaiting.Status.Plan
		run.Status.Approvals = []v1alpha1.ApprovalStatus{{ApprovedBy: "bob", PlanDigest: testDigest}}
	})
	shown := "Run team-a/web-1, created by alice\n" +
		"Plan: 1 to add, 2 to change, 3 to destroy, 0 to import.\n" +
		"Source revision: 0a1b2c3\n" +
		"Plan digest: " + testDigest + "\n" +
		"Review it with: kubectl terrarun plan web-1 -n team-a\n"
	const question = "Approve this plan? Type 'yes' or 'y' to approve: "
	done := "Approved plan " + testDigest + " of run team-a/web-1 as bob; follow it with: kubectl terrarun wait web-1 -n team-a\n"
	for _, c := range []struct {
		name     string
		args     []string
		stdin    string
		routes   map[string]http.HandlerFunc
		code     int
		stdout   string
		stderr   []string
		approves bool
	}{
		{
			name:     "yes",
			stdin:    "yes\n",
			routes:   map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(awaiting), "POST /terraformruns/web-1/approve": object(approved)},
			code:     ExitSucceeded,
			stdout:   shown + question + "\n" + done,
			approves: true,
		},
		{
			name:     "y",
			stdin:    "y\n",
			routes:   map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(awaiting), "POST /terraformruns/web-1/approve": object(approved)},
			code:     ExitSucceeded,
			stdout:   shown + question + "\n" + done,
			approves: true,
		},
		{
			name:     "the first of two approvals",
			args:     []string{"--yes"},
			routes:   map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(awaiting), "POST /terraformruns/web-1/approve": object(first)},
			code:     ExitSucceeded,
			stdout:   shown + "Approval of plan " + testDigest + " of run team-a/web-1 recorded as bob: 1 of 2 approvals recorded; it still needs 1 more approval(s) from other users (1 of 2)\n",
			approves: true,
		},
		{
			name:     "--yes does not ask",
			args:     []string{"--yes"},
			routes:   map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(awaiting), "POST /terraformruns/web-1/approve": object(approved)},
			code:     ExitSucceeded,
			stdout:   shown + done,
			approves: true,
		},
		{
			name:     "a Flux source names the source and the pinned artifact",
			args:     []string{"--yes"},
			routes:   map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(fromFlux), "POST /terraformruns/web-1/approve": object(approved)},
			code:     ExitSucceeded,
			stdout:   strings.Replace(shown, "Source revision: 0a1b2c3\n", "Source revision: main@sha1:0a1b2c3 (GitRepository infra, artifact "+testDigest+")\n", 1) + done,
			approves: true,
		},
		{
			name:     "a verified executor image names its digest",
			args:     []string{"--yes"},
			routes:   map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(pinned), "POST /terraformruns/web-1/approve": object(approved)},
			code:     ExitSucceeded,
			stdout:   strings.Replace(shown, "Source revision: 0a1b2c3\n", "Source revision: 0a1b2c3\nExecutor image: registry.example.com/executor:v1 (verified, runs as "+testDigest+")\n", 1) + done,
			approves: true,
		},
		{
			name:   "anything but yes",
			stdin:  "ok\n",
			routes: map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(awaiting), "POST /terraformruns/web-1/approve": object(approved)},
			code:   ExitFailed,
			stdout: shown + question + "\n",
			stderr: []string{"error: not approved: only the answer 'yes' or 'y' approves; the plan still waits: approve it again, or review it with kubectl terrarun plan web-1 -n team-a\n"},
		},
		{
			name:   "no answer",
			routes: map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(awaiting), "POST /terraformruns/web-1/approve": object(approved)},
			code:   ExitFailed,
			stdout: shown + question + "\n",
			stderr: []string{"error: not approved: only the answer 'yes' or 'y' approves; the plan still waits: approve it again, or review it with kubectl terrarun plan web-1 -n team-a\n"},
		},
		{
			name:  "refused before asking",
			stdin: "yes\n",
			routes: map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(awaiting), "POST /terraformruns/web-1/approve": status(http.StatusForbidden, metav1.StatusReasonForbidden,
				`terraformruns.terrarun.dev "web-1" is forbidden: User "alice" cannot create resource "terraformruns/approve" in API group "terrarun.dev" in the namespace "team-a"`)},
			code:   ExitFailed,
			stdout: shown,
			stderr: []string{`error: terraformruns.terrarun.dev "web-1" is forbidden: User "alice" cannot create resource "terraformruns/approve" in API group "terrarun.dev" in the namespace "team-a"` + "\n"},
		},
		{
			name:   "no plan yet",
			routes: map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(newRun("web-1", v1alpha1.RunPhasePlanning, "Planning.", nil))},
			code:   ExitFailed,
			stderr: []string{"error: run team-a/web-1 is Planning, not AwaitingApproval: there is no plan to approve (Planning.)\n"},
		},
		{
			name: "plan already applied",
			routes: map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(newRun("web-1", v1alpha1.RunPhaseSucceeded, "Applied.", func(run *v1alpha1.TerraformRun) {
				run.Status.Plan = awaiting.Status.Plan
			}))},
			code:   ExitFailed,
			stderr: []string{"error: run team-a/web-1 is Succeeded, not AwaitingApproval: there is no plan to approve (Applied.)\n"},
		},
		{
			name: "refused by the server",
			args: []string{"--yes"},
			routes: map[string]http.HandlerFunc{"GET /terraformruns/web-1": object(awaiting), "POST /terraformruns/web-1/approve": status(http.StatusForbidden, metav1.StatusReasonForbidden,
				`terraformruns.terrarun.dev "web-1" is forbidden: alice created this run and may not approve it (separation of duties); ask another approver`)},
			code:   ExitFailed,
			stdout: shown,
			stderr: []string{`error: terraformruns.terrarun.dev "web-1" is forbidden: alice created this run and may not approve it (separation of duties); ask another approver` + "\n"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newFakeServer(t, c.routes)
			srv.run(t, c.stdin, append([]string{"approve", "web-1", "--comment", "lgtm"}, c.args...)...).expect(t, c.code, c.stdout, c.stderr...)
			posts, dryRuns := srv.received("POST", "/terraformruns/web-1/approve"), srv.received("DRYRUN", "/terraformruns/web-1/approve")
			if asked := strings.Contains(c.stdout, question) || slices.Contains(c.args, "--yes"); asked && len(dryRuns) != 1 {
				t.Errorf("%d dry runs before asking, want 1", len(dryRuns))
			}
			if !c.approves {
				if len(posts) != 0 {
					t.Errorf("approved: %s", posts[0].body)
				}
				return
			}
			if len(posts) != 1 {
				t.Fatalf("%d approvals posted, want 1", len(posts))
			}
			var body v1alpha1.TerraformRunApproval
			if err := json.Unmarshal(posts[0].body, &body); err != nil || body.PlanDigest != testDigest || body.Comment != "lgtm" {
				t.Errorf("posted %s (%v), want the digest shown and the comment", posts[0].body, err)
			}
		})
	}
}

// TestDiscardAndCancel checks the request each sends and what it prints.
func TestDiscardAndCancel(t *testing.T) {
	for _, verb := range []string{"discard", "cancel"} {
		t.Run(verb, func(t *testing.T) {
			srv := newFakeServer(t, map[string]http.HandlerFunc{"POST /terraformruns/web-1/" + verb: object(newRun("web-1", v1alpha1.RunPhasePlanning, "", nil))})
			srv.run(t, "", verb, "web-1", "--comment", "wrong branch").expect(t, ExitSucceeded, "Asked to "+verb+" run team-a/web-1; the controller ends it in a moment.\n")
			posts := srv.received("POST", "/terraformruns/web-1/"+verb)
			var body struct{ Kind, Comment string }
			if len(posts) != 1 || json.Unmarshal(posts[0].body, &body) != nil || body.Comment != "wrong branch" || !strings.EqualFold(body.Kind, "TerraformRun"+verb) {
				t.Errorf("posted %v, want one TerraformRun%s with the comment", posts, verb)
			}
		})
	}
	t.Run("refused", func(t *testing.T) {
		srv := newFakeServer(t, map[string]http.HandlerFunc{"POST /terraformruns/web-1/discard": status(http.StatusConflict, metav1.StatusReasonConflict,
			`Operation cannot be fulfilled on terraformruns.terrarun.dev "web-1": the run is Applying; only a plan that waits for approval can be discarded: cancel the run instead`)})
		srv.run(t, "", "discard", "web-1").expect(t, ExitFailed, "",
			`error: Operation cannot be fulfilled on terraformruns.terrarun.dev "web-1": the run is Applying; only a plan that waits for approval can be discarded: cancel the run instead`+"\n")
	})
}

// TestRuns checks the list of runs: newest first, with phase, plan,
// approver and duration, and the workspace's runs only with --workspace.
func TestRuns(t *testing.T) {
	// Ages a minute long: what the test takes does not change them.
	now := time.Now()
	at := func(ago time.Duration) metav1.Time { return metav1.NewTime(now.Add(-ago)) }
	list := &v1alpha1.TerraformRunList{
		TypeMeta: metav1.TypeMeta{Kind: "TerraformRunList", APIVersion: v1alpha1.SchemeGroupVersion.String()},
		Items: []v1alpha1.TerraformRun{
			*newRun("web-1", v1alpha1.RunPhaseSucceeded, "", func(run *v1alpha1.TerraformRun) {
				run.CreationTimestamp = at(5 * time.Hour)
				start := at(5 * time.Hour)
				end := metav1.NewTime(start.Add(90 * time.Second))
				run.Status.StartTime, run.Status.CompletionTime = &start, &end
				run.Status.Plan = &v1alpha1.PlanSummary{Digest: testDigest, Add: 2}
				run.Status.Approval = &v1alpha1.ApprovalStatus{ApprovedBy: "bob"}
			}),
			*newRun("web-3", "", "", func(run *v1alpha1.TerraformRun) { run.CreationTimestamp = at(30 * time.Minute) }),
			*newRun("web-2", v1alpha1.RunPhaseAwaitingApproval, "", func(run *v1alpha1.TerraformRun) {
				run.CreationTimestamp = at(2 * time.Hour)
				run.Spec.Operation = v1alpha1.OperationPlan
				run.Annotations = map[string]string{v1alpha1.AnnotationTrigger: string(v1alpha1.TriggerDriftCheck)}
				run.Status.Plan = &v1alpha1.PlanSummary{Digest: testDigest, Change: 1, Destroy: 4}
			}),
		},
	}
	srv := newFakeServer(t, map[string]http.HandlerFunc{"GET /terraformruns": object(list)})
	r := srv.run(t, "", "runs", "--workspace", "web")
	if r.code != ExitSucceeded {
		t.Fatalf("exit code %d; stderr: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	var got [][]string
	for _, l := range lines {
		got = append(got, strings.Fields(l))
	}
	want := [][]string{
		{"NAME", "OPERATION", "TRIGGER", "PHASE", "PLAN", "POLICY", "APPROVED-BY", "DURATION", "AGE"},
		{"web-3", "Apply", "Direct", "Pending", "-", "-", "-", "-", "30m"},
		{"web-2", "Plan", "DriftCheck", "AwaitingApproval", "+0", "~1", "-4", "-", "-", "-", "120m"},
		{"web-1", "Apply", "Direct", "Succeeded", "+2", "~0", "-0", "-", "bob", "90s", "5h"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("runs printed:\n%s\nwant the columns %q", r.stdout, want)
	}
	if gets := srv.received("GET", "/terraformruns"); len(gets) != 1 || !reflect.DeepEqual(gets[0].query["labelSelector"], []string{"terrarun.dev/workspace=web"}) {
		t.Errorf("listed with %v, want labelSelector terrarun.dev/workspace=web", gets)
	}

	t.Run("all namespaces, wide", func(t *testing.T) {
		srv := newFakeServer(t, map[string]http.HandlerFunc{"GET /apis/terrarun.dev/v1alpha1/terraformruns": object(list)})
		r := srv.run(t, "", "runs", "-A", "-o", "wide")
		header := strings.Fields(strings.SplitN(r.stdout, "\n", 2)[0])
		if r.code != ExitSucceeded || header[0] != "NAMESPACE" || header[len(header)-1] != "PLAN-DIGEST" || !strings.Contains(r.stdout, testNamespace+" ") || !strings.Contains(r.stdout, testDigest) {
			t.Errorf("runs -A -o wide: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("name", func(t *testing.T) {
		srv := newFakeServer(t, map[string]http.HandlerFunc{"GET /terraformruns": object(list)})
		srv.run(t, "", "runs", "-o", "name").expect(t, ExitSucceeded,
			"terraformrun.terrarun.dev/web-3\nterraformrun.terrarun.dev/web-2\nterraformrun.terrarun.dev/web-1\n")
	})
	t.Run("json", func(t *testing.T) {
		srv := newFakeServer(t, map[string]http.HandlerFunc{"GET /terraformruns": object(list)})
		r := srv.run(t, "", "runs", "-o", "json")
		var got struct {
			Kind  string
			Items []v1alpha1.TerraformRun
		}
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Kind != "List" || len(got.Items) != 3 || got.Items[0].Name != "web-3" || got.Items[0].Kind != "TerraformRun" {
			t.Errorf("runs -o json: %v\n%s", err, r.stdout)
		}
	})
	t.Run("watch", func(t *testing.T) {
		changed := newRun("web-3", v1alpha1.RunPhasePlanning, "", nil)
		srv := newFakeServer(t, map[string]http.HandlerFunc{"GET /terraformruns": object(list), "WATCH /terraformruns": watchEvents(false, watchEvent{"MODIFIED", changed})})
		r := srv.run(t, "", "runs", "-w")
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if r.code != ExitSucceeded || len(lines) != 5 || !strings.HasPrefix(lines[4], "web-3") || !strings.Contains(lines[4], "Planning") {
			t.Errorf("runs -w: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if watches := srv.received("WATCH", "/terraformruns"); len(watches) != 1 {
			t.Errorf("%d watches, want 1", len(watches))
		}
	})
	t.Run("an unknown format", func(t *testing.T) {
		srv := newFakeServer(t, nil)
		srv.run(t, "", "runs", "-o", "table").expect(t, ExitFailed, "", `error: unknown output format "table" for -o: use one of wide, json, yaml, name`+"\n")
	})
	t.Run("none", func(t *testing.T) {
		srv := newFakeServer(t, map[string]http.HandlerFunc{"GET /terraformruns": object(&v1alpha1.TerraformRunList{TypeMeta: list.TypeMeta})})
		srv.run(t, "", "runs").expect(t, ExitSucceeded, "", "No runs in namespace team-a.\n")
		if gets := srv.received("GET", "/terraformruns"); len(gets) != 1 || gets[0].query["labelSelector"] != nil {
			t.Errorf("listed with %v, want no selector", gets)
		}
	})
	t.Run("forbidden", func(t *testing.T) {
		srv := newFakeServer(t, map[string]http.HandlerFunc{"GET /terraformruns": status(http.StatusForbidden, metav1.StatusReasonForbidden,
			`terraformruns.terrarun.dev is forbidden: User "alice" cannot list resource "terraformruns" in API group "terrarun.dev" in the namespace "team-a"`)})
		srv.run(t, "", "runs").expect(t, ExitFailed, "", `error: terraformruns.terrarun.dev is forbidden: User "alice" cannot list resource "terraformruns"`)
	})
}

// TestStreams checks plan, logs and outputs: the subresource and parameters
// each requests, and what it prints of the answer, escaped for a terminal
// unless --raw. The run read after a plan has no policy results: plan
// prints nothing more (TestPlanPolicy checks what it prints of them).
func TestStreams(t *testing.T) {
	noPolicy := newRun("web-1", v1alpha1.RunPhaseAwaitingApproval, "", func(run *v1alpha1.TerraformRun) {
		run.Status.Plan = &v1alpha1.PlanSummary{Digest: testDigest, Add: 1}
		run.Status.Policy = &v1alpha1.PolicyStatus{PlanDigest: testDigest} // no policy matched
	})
	const hostile = "Plan: 1 to add.\n\x1b]0;pwned\x07\x1b[2J\tdone\n"
	const escaped = "Plan: 1 to add.\n\\x1b]0;pwned\\x07\\x1b[2J\tdone\n"
	for _, c := range []struct {
		name   string
		args   []string
		route  string
		answer http.HandlerFunc
		query  map[string][]string
		code   int
		stdout string
		stderr []string
		gets   int // GETs of the run
	}{
		{
			name: "plan", args: []string{"plan", "web-1"},
			route: "GET /terraformruns/web-1/plan", answer: text(hostile),
			query: map[string][]string{"wait": {"true"}}, stdout: escaped, gets: 1,
		},
		{
			name: "plan --json", args: []string{"plan", "web-1", "--json"},
			route: "GET /terraformruns/web-1/plan", answer: text(`{"format_version":"1.2"}`),
			query: map[string][]string{"wait": {"true"}, "format": {"json"}}, stdout: `{"format_version":"1.2"}`,
		},
		{
			name: "plan of a discarded run", args: []string{"plan", "web-1"},
			route: "GET /terraformruns/web-1/plan", answer: status(http.StatusConflict, metav1.StatusReasonConflict, "the run was Discarded before it had a plan"),
			query: map[string][]string{"wait": {"true"}}, code: ExitFailed, stderr: []string{"error: the run was Discarded before it had a plan\n"},
		},
		{
			name: "logs", args: []string{"logs", "web-1"},
			route: "GET /terraformruns/web-1/logs", answer: text(hostile),
			query: map[string][]string{}, stdout: escaped,
		},
		{
			name: "logs -f --stage --attempt --raw", args: []string{"logs", "web-1", "-f", "--stage", "apply", "--attempt", "2", "--raw"},
			route: "GET /terraformruns/web-1/logs", answer: text(hostile),
			query: map[string][]string{"follow": {"true"}, "stage": {"apply"}, "attempt": {"2"}}, stdout: hostile,
		},
		{
			name: "outputs", args: []string{"outputs", "web-1"},
			route: "GET /terraformruns/web-1/outputs", answer: text(`{"url":{"value":"https://x\u001b]0;t\u0007","sensitive":false}}`),
			query:  map[string][]string{},
			stdout: "{\n  \"url\": {\n    \"sensitive\": false,\n    \"value\": \"https://x\\u001b]0;t\\u0007\"\n  }\n}\n",
		},
		{
			name: "outputs not JSON", args: []string{"outputs", "web-1"},
			route: "GET /terraformruns/web-1/outputs", answer: text("<html>proxy error</html>"),
			query: map[string][]string{}, code: ExitFailed,
			stderr: []string{"error: the server's outputs are not JSON: invalid character '<' looking for beginning of value\n"},
		},
		{
			name: "outputs forbidden", args: []string{"outputs", "web-1"},
			route: "GET /terraformruns/web-1/outputs", answer: status(http.StatusForbidden, metav1.StatusReasonForbidden,
				`terraformruns.terrarun.dev "web-1" is forbidden: User "alice" cannot get resource "terraformruns/outputs" in API group "terrarun.dev" in the namespace "team-a"`),
			query: map[string][]string{}, code: ExitFailed,
			stderr: []string{`error: terraformruns.terrarun.dev "web-1" is forbidden: User "alice" cannot get resource "terraformruns/outputs"`},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newFakeServer(t, map[string]http.HandlerFunc{c.route: c.answer, "GET /terraformruns/web-1": object(noPolicy)})
			srv.run(t, "", c.args...).expect(t, c.code, c.stdout, c.stderr...)
			if gets := len(srv.received("GET", "/terraformruns/web-1")); gets != c.gets {
				t.Errorf("%d GETs of the run, want %d", gets, c.gets)
			}
			method, path, _ := strings.Cut(c.route, " ")
			reqs := srv.received(method, path)
			if len(reqs) != 1 {
				t.Fatalf("%d requests of %s, want 1", len(reqs), c.route)
			}
			if !reflect.DeepEqual(reqs[0].query, c.query) {
				t.Errorf("query %v, want %v", reqs[0].query, c.query)
			}
		})
	}
}
