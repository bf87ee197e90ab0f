package terraformrun

import (
	"net/http"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

func TestStatusREST(t *testing.T) {
	env := newTestEnv(t)
	env.createRun(t, "web", nil)
	ctx := requestContext(alice, "update", "status")

	obj, err := env.storage.Status.Get(ctx, "web", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run := obj.(*terrarun.TerraformRun).DeepCopy()
	run.Status.Phase = terrarun.RunPhasePlanning
	run.Spec.Workspace = "changed"
	obj, _, err = env.storage.Status.Update(ctx, "web", rest.DefaultUpdatedObjectInfo(run), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := obj.(*terrarun.TerraformRun); got.Status.Phase != terrarun.RunPhasePlanning || got.Spec.Workspace != "default" {
		t.Errorf("status update wrote phase %q and workspace %q; want the status only", got.Status.Phase, got.Spec.Workspace)
	}

	// A status write never creates a run, even when asked to.
	missing := run.DeepCopy()
	missing.Name, missing.ResourceVersion = "missing", ""
	_, _, err = env.storage.Status.Update(ctx, "missing", rest.DefaultUpdatedObjectInfo(missing), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, true, &metav1.UpdateOptions{})
	expectAPIError(t, err, http.StatusNotFound)

	if fields := env.storage.Status.GetResetFields(); fields["terrarun.dev/v1alpha1"] == nil {
		t.Errorf("reset fields = %v, want spec reset for v1alpha1", fields)
	}
	table, err := env.storage.Status.ConvertToTable(ctx, obj, nil)
	if err != nil || len(table.Rows) != 1 {
		t.Errorf("table = %+v, %v", table, err)
	}
}

func TestStatusWriter(t *testing.T) {
	env := newTestEnv(t)
	before := env.createRun(t, "web", nil)
	w := env.storage.Plan.status

	_, err := w.update(requestContext(alice, "update", "status"), "web", func(run *terrarun.TerraformRun) error {
		run.Status.Message = "not stored"
		return conflict(run.Name, "the run is %s", phase(run))
	})
	expectAPIError(t, err, http.StatusConflict, "the run is Pending")
	if after := env.getRun(t, "web"); after.ResourceVersion != before.ResourceVersion {
		t.Errorf("an aborted update was stored: %q", after.Status.Message)
	}

	// Status validation applies.
	_, err = w.update(requestContext(alice, "update", "status"), "web", func(run *terrarun.TerraformRun) error {
		run.Status.Phase = "Sleeping"
		return nil
	})
	expectAPIError(t, err, http.StatusUnprocessableEntity, "status.phase")

	_, err = w.get(requestContext(alice, "get", ""), "missing")
	expectAPIError(t, err, http.StatusNotFound)
}

// TestStatusKeepsRecords attacks the records of the server's handlers
// through the status subresource: approval, plan, source revision and
// outputs are kept, an Approved condition without an approval is dropped,
// and only Auto mode's own approval of the recorded plan passes.
func TestStatusKeepsRecords(t *testing.T) {
	env := newTestEnv(t)
	update := func(name string, change func(*terrarun.TerraformRun)) *terrarun.TerraformRun {
		t.Helper()
		run := env.getRun(t, name)
		change(run)
		obj, _, err := env.storage.Status.Update(requestContext(alice, "update", "status"), name,
			rest.DefaultUpdatedObjectInfo(run), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("status update: %v", err)
		}
		return obj.(*terrarun.TerraformRun)
	}

	env.createRun(t, "manual", awaitingApproval)
	got := update("manual", func(run *terrarun.TerraformRun) {
		run.Status.Approval = &terrarun.ApprovalStatus{ApprovedBy: "mallory", PlanDigest: testDigest}
		run.Status.Plan = &terrarun.PlanSummary{Digest: "sha256:forged", Add: 9}
		run.Status.Source = &terrarun.SourceStatus{Revision: "forged"}
		run.Status.Outputs = []terrarun.OutputStatus{{Name: "forged", Value: rawJSON(`"x"`)}}
		meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: terrarun.ConditionApproved, Status: metav1.ConditionTrue, Reason: terrarun.ReasonApproved, Message: "forged"})
		run.Status.Message = "the controller's message"
	})
	if got.Status.Approval != nil || got.Status.Plan.Digest != testDigest || got.Status.Plan.Add != 1 || got.Status.Source != nil || len(got.Status.Outputs) != 0 {
		t.Errorf("a status write changed the handlers' records: approval %+v plan %+v source %+v outputs %+v",
			got.Status.Approval, got.Status.Plan, got.Status.Source, got.Status.Outputs)
	}
	if meta.IsStatusConditionTrue(got.Status.Conditions, terrarun.ConditionApproved) {
		t.Errorf("a status write set Approved without an approval")
	}
	if got.Status.Message != "the controller's message" {
		t.Errorf("the rest of status was not written: %q", got.Status.Message)
	}

	// Auto mode: the controller's approval of the recorded plan, and nothing else.
	auto := &terrarun.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "auto", Namespace: testNamespace},
		Spec: terrarun.TerraformRunSpec{
			Source:   terrarun.Source{Inline: map[string]string{"main.tf": `output "x" { value = 1 }`}},
			Approval: terrarun.Approval{Mode: terrarun.ApprovalModeAuto},
		},
	}
	if _, err := env.storage.Run.Create(requestContext(alice, "create", ""), auto, rest.ValidateAllObjectFunc, &metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.setStatus(t, "auto", awaitingApproval)
	got = update("auto", func(run *terrarun.TerraformRun) {
		run.Status.Approval = &terrarun.ApprovalStatus{ApprovedBy: "mallory", PlanDigest: testDigest}
	})
	if got.Status.Approval != nil {
		t.Errorf("Auto mode let another approver through: %+v", got.Status.Approval)
	}
	got = update("auto", func(run *terrarun.TerraformRun) {
		// Well-formed, so that only the comparison with the recorded plan
		// refuses it.
		run.Status.Approval = &terrarun.ApprovalStatus{ApprovedBy: terrarun.AutoApprover, PlanDigest: "sha256:" + strings.Repeat("ab", 32)}
	})
	if got.Status.Approval != nil {
		t.Errorf("Auto mode approved another digest: %+v", got.Status.Approval)
	}
	got = update("auto", func(run *terrarun.TerraformRun) {
		run.Status.Approval = &terrarun.ApprovalStatus{ApprovedBy: terrarun.AutoApprover, PlanDigest: testDigest}
	})
	if got.Status.Approval == nil || got.Status.Approval.ApprovedBy != terrarun.AutoApprover {
		t.Errorf("Auto mode's approval of the recorded plan was dropped")
	}
	// The controller's Auto approval of a Manual run is no approval either.
	got = update("manual", func(run *terrarun.TerraformRun) {
		run.Status.Approval = &terrarun.ApprovalStatus{ApprovedBy: terrarun.AutoApprover, PlanDigest: testDigest}
	})
	if got.Status.Approval != nil {
		t.Errorf("a Manual run took an Auto approval: %+v", got.Status.Approval)
	}
}

// TestStatusPinsFluxArtifact: only the server itself (the run controller,
// through the loopback) pins the artifact of a run's Flux source, once,
// before any stage; a user who may write status cannot choose what the
// plan downloads.
func TestStatusPinsFluxArtifact(t *testing.T) {
	env := newTestEnv(t)
	server := &user.DefaultInfo{Name: user.APIServerUser, Groups: []string{user.SystemPrivilegedGroup}}
	pin := func(u user.Info, url string) *terrarun.TerraformRun {
		t.Helper()
		run := env.getRun(t, "flux")
		run.Status.Source = &terrarun.SourceStatus{Revision: "main@sha1:abc", Artifact: &terrarun.SourceArtifact{URL: url, Digest: testDigest}}
		obj, _, err := env.storage.Status.Update(requestContext(u, "update", "status"), "flux",
			rest.DefaultUpdatedObjectInfo(run), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("status update: %v", err)
		}
		return obj.(*terrarun.TerraformRun)
	}
	env.createRunWith(t, "flux", func(s *terrarun.TerraformRunSpec) {
		s.Source = terrarun.Source{SourceRef: &terrarun.SourceReference{Kind: terrarun.SourceKindGitRepository, Name: "infra"}}
	}, nil)
	if got := pin(alice, "http://attacker.example.com/gitrepository/default/infra/x.tar.gz"); got.Status.Source != nil {
		t.Fatalf("alice's status write pinned %+v", got.Status.Source)
	}
	good := "http://source-controller.flux-system.svc.cluster.local./gitrepository/default/infra/abc.tar.gz"
	if got := pin(server, good); got.Status.Source == nil || got.Status.Source.Artifact == nil || got.Status.Source.Artifact.URL != good {
		t.Fatalf("the controller's pin was not written: %+v", got.Status.Source)
	}
}
