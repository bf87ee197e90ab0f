package terraformrun

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

func newRun() *terrarun.TerraformRun {
	return &terrarun.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default", ResourceVersion: "1"},
		Spec: terrarun.TerraformRunSpec{
			Source: terrarun.Source{Inline: map[string]string{"main.tf": `resource "terraform_data" "x" {}`}},
		},
	}
}

func userCtx(name string, groups ...string) context.Context {
	ctx := genericapirequest.WithNamespace(context.Background(), "default")
	return genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: name, UID: "uid-" + name, Groups: groups})
}

func TestPrepareForCreateDefaultsAndRecordsCreator(t *testing.T) {
	s := NewStrategy(nil, jobDefaults)
	run := newRun()
	run.Spec.Creator = &terrarun.Creator{Username: "mallory"}
	run.Status.Phase = terrarun.RunPhaseSucceeded
	s.PrepareForCreate(userCtx("alice", "dev"), run)

	if run.Spec.Creator == nil || run.Spec.Creator.Username != "alice" || run.Spec.Creator.UID != "uid-alice" || len(run.Spec.Creator.Groups) != 1 {
		t.Fatalf("creator = %+v, want alice from the request, not the body", run.Spec.Creator)
	}
	if run.Status.Phase != terrarun.RunPhasePending {
		t.Errorf("phase = %q, want Pending", run.Status.Phase)
	}
	want := terrarun.TerraformRunSpec{
		Operation: terrarun.OperationApply,
		Workspace: "default",
		Approval:  terrarun.Approval{Mode: terrarun.ApprovalModeManual, Timeout: &metav1.Duration{Duration: 24 * time.Hour}, RequiredApprovals: 1},
		Engine:    terrarun.Engine{Binary: terrarun.EngineTerraform, Image: terrarun.DefaultExecutorImage},
		Timeouts:  terrarun.Timeouts{Plan: &metav1.Duration{Duration: time.Hour}, Apply: &metav1.Duration{Duration: time.Hour}},
	}
	got := run.Spec
	got.Source, got.Creator = terrarun.Source{}, nil
	if !equalSpec(got, want) {
		t.Errorf("defaulted spec = %+v\nwant %+v", got, want)
	}
	if errs := s.Validate(context.Background(), run); len(errs) != 0 {
		t.Errorf("defaulted run is invalid: %v", errs)
	}
}

func TestBuiltinDefaultsKeepUserValues(t *testing.T) {
	run := newRun()
	run.Spec.Operation = terrarun.OperationPlan
	run.Spec.Approval.Mode = terrarun.ApprovalModeAuto
	run.Spec.Engine.Binary = terrarun.EngineTofu
	run.Spec.Timeouts.Plan = &metav1.Duration{Duration: 5 * time.Minute}
	NewStrategy(nil, jobDefaults).PrepareForCreate(userCtx("alice"), run)
	if run.Spec.Operation != terrarun.OperationPlan || run.Spec.Approval.Mode != terrarun.ApprovalModeAuto ||
		run.Spec.Engine.Binary != terrarun.EngineTofu || run.Spec.Timeouts.Plan.Duration != 5*time.Minute {
		t.Errorf("user values were overwritten: %+v", run.Spec)
	}
}

func created(t *testing.T) *terrarun.TerraformRun {
	t.Helper()
	run := newRun()
	NewStrategy(nil, jobDefaults).PrepareForCreate(userCtx("alice"), run)
	return run
}

func TestSpecIsImmutable(t *testing.T) {
	s := NewStrategy(nil, jobDefaults)
	mutations := map[string]func(*terrarun.TerraformRun){
		"operation":  func(r *terrarun.TerraformRun) { r.Spec.Operation = terrarun.OperationDestroy },
		"source":     func(r *terrarun.TerraformRun) { r.Spec.Source.Inline["main.tf"] = "# changed" },
		"approval":   func(r *terrarun.TerraformRun) { r.Spec.Approval.Mode = terrarun.ApprovalModeAuto },
		"creator":    func(r *terrarun.TerraformRun) { r.Spec.Creator = &terrarun.Creator{Username: "mallory"} },
		"variables":  func(r *terrarun.TerraformRun) { r.Spec.Variables = []terrarun.Variable{{Name: "x", Value: "1"}} },
		"workspace":  func(r *terrarun.TerraformRun) { r.Spec.Workspace = "prod" },
		"engine":     func(r *terrarun.TerraformRun) { r.Spec.Engine.Binary = terrarun.EngineTofu },
		"targets":    func(r *terrarun.TerraformRun) { r.Spec.Targets = []string{"terraform_data.x"} },
		"parallel":   func(r *terrarun.TerraformRun) { p := int32(3); r.Spec.Parallelism = &p },
		"timeouts":   func(r *terrarun.TerraformRun) { r.Spec.Timeouts.Apply = &metav1.Duration{Duration: time.Minute} },
		"outputsSec": func(r *terrarun.TerraformRun) { r.Spec.OutputsSecret = "out" },
	}
	for name, mutate := range mutations {
		t.Run(name, func(t *testing.T) {
			old := created(t)
			updated := old.DeepCopy()
			mutate(updated)
			s.PrepareForUpdate(userCtx("bob"), updated, old)
			errs := s.ValidateUpdate(context.Background(), updated, old)
			if !hasError(errs, "spec", field.ErrorTypeForbidden) {
				t.Fatalf("changing %s: errors = %v, want Forbidden at spec", name, errs)
			}
		})
	}

	t.Run("metadata change with the original manifest is allowed", func(t *testing.T) {
		old := created(t)
		// What `kubectl replace` sends: the user's manifest, without the
		// server-recorded creator and the built-in defaults.
		updated := newRun()
		updated.Labels = map[string]string{"team": "infra"}
		s.PrepareForUpdate(userCtx("bob"), updated, old)
		if errs := s.ValidateUpdate(context.Background(), updated, old); len(errs) != 0 {
			t.Fatalf("unexpected errors: %v", errs)
		}
		if updated.Spec.Creator.Username != "alice" {
			t.Errorf("creator = %q, want alice kept", updated.Spec.Creator.Username)
		}
		if updated.Generation != old.Generation {
			t.Errorf("generation changed from %d to %d on a metadata update", old.Generation, updated.Generation)
		}
	})
}

func TestMainResourceIgnoresStatus(t *testing.T) {
	s := NewStrategy(nil, jobDefaults)
	old := created(t)
	updated := old.DeepCopy()
	updated.Status.Phase = terrarun.RunPhaseSucceeded
	updated.Status.Approval = &terrarun.ApprovalStatus{ApprovedBy: "mallory"}
	s.PrepareForUpdate(userCtx("mallory"), updated, old)
	if updated.Status.Phase != terrarun.RunPhasePending || updated.Status.Approval != nil {
		t.Fatalf("status changed through the main resource: %+v", updated.Status)
	}
}

func TestStatusSubresourceIgnoresSpec(t *testing.T) {
	s := NewStatusStrategy(NewStrategy(nil, jobDefaults))
	old := created(t)
	updated := old.DeepCopy()
	updated.Spec.Operation = terrarun.OperationDestroy
	updated.Status.Phase = terrarun.RunPhasePlanning
	s.PrepareForUpdate(userCtx("controller"), updated, old)
	if updated.Spec.Operation != terrarun.OperationApply {
		t.Fatalf("spec changed through /status: operation %q", updated.Spec.Operation)
	}
	if updated.Status.Phase != terrarun.RunPhasePlanning {
		t.Fatalf("status not written through /status: %q", updated.Status.Phase)
	}
	if errs := s.ValidateUpdate(context.Background(), updated, old); len(errs) != 0 {
		t.Fatalf("unexpected errors: %v", errs)
	}
	updated.Status.Phase = "Exploded"
	if errs := s.ValidateUpdate(context.Background(), updated, old); !hasError(errs, "status.phase", field.ErrorTypeNotSupported) {
		t.Fatalf("errors = %v, want NotSupported at status.phase", errs)
	}
}

func TestSelectableFields(t *testing.T) {
	run := created(t)
	_, fields, err := GetAttrs(run)
	if err != nil {
		t.Fatal(err)
	}
	if fields.Get("status.phase") != "Pending" || fields.Get("metadata.name") != "hello" || fields.Get("metadata.namespace") != "default" {
		t.Fatalf("fields = %v", fields)
	}
}

func hasError(errs field.ErrorList, path string, typ field.ErrorType) bool {
	for _, e := range errs {
		if e.Field == path && e.Type == typ {
			return true
		}
	}
	return false
}

// jobDefaults are the server's defaults where stages run in Jobs.
var jobDefaults = terrarun.ServerDefaults{Image: terrarun.DefaultExecutorImage}

func TestServerDefaultEngine(t *testing.T) {
	run := newRun()
	NewStrategy(nil, terrarun.ServerDefaults{Engine: terrarun.EngineTofu, Image: terrarun.DefaultExecutorImage}).PrepareForCreate(userCtx("alice"), run)
	if run.Spec.Engine.Binary != terrarun.EngineTofu {
		t.Errorf("engine = %q, want the server default tofu", run.Spec.Engine.Binary)
	}
}

// TestLocalExecutorNoImage: with the local executor, which runs no image, a
// run shows none, and is valid so; an image the user names stays.
func TestLocalExecutorNoImage(t *testing.T) {
	s := NewStrategy(nil, terrarun.ServerDefaults{})
	run := newRun()
	s.PrepareForCreate(userCtx("alice"), run)
	if run.Spec.Engine.Image != "" {
		t.Errorf("image = %q, want none", run.Spec.Engine.Image)
	}
	if errs := s.Validate(context.Background(), run); len(errs) != 0 {
		t.Errorf("a run without an image is invalid: %v", errs)
	}
	named := newRun()
	named.Spec.Engine.Image = "registry.example.com/exec:v1"
	s.PrepareForCreate(userCtx("alice"), named)
	if named.Spec.Engine.Image != "registry.example.com/exec:v1" {
		t.Errorf("image = %q, want the user's", named.Spec.Engine.Image)
	}
}

// TestOutputsSecretNeedsAHostCluster: without a cluster, spec.outputsSecret
// would be ignored; it is refused instead, naming the field.
func TestOutputsSecretNeedsAHostCluster(t *testing.T) {
	run := created(t)
	run.Spec.OutputsSecret = "infra-outputs"
	if errs := NewStrategy(nil, jobDefaults).Validate(context.Background(), run); len(errs) != 0 {
		t.Errorf("with a host cluster: %v", errs)
	}
	s := NewStrategy(nil, jobDefaults)
	s.noHostCluster = true
	errs := s.Validate(context.Background(), run)
	if !hasError(errs, "spec.outputsSecret", field.ErrorTypeForbidden) || !strings.Contains(errs.ToAggregate().Error(), "read them from the outputs subresource") {
		t.Errorf("without a host cluster: %v, want Forbidden at spec.outputsSecret", errs)
	}
	run.Spec.OutputsSecret = ""
	if errs := s.Validate(context.Background(), run); len(errs) != 0 {
		t.Errorf("without a host cluster and without outputsSecret: %v", errs)
	}
}

// TestLabelsAtCreationAreTheServers: a run's labels as created are recorded
// by the server (a client's value is replaced), kept across an update that
// does not send them, and cannot be changed.
func TestLabelsAtCreationAreTheServers(t *testing.T) {
	s := NewStrategy(nil, jobDefaults)
	ctx := userCtx("alice")
	run := newRun()
	run.Labels = map[string]string{"team": "payments"}
	run.Annotations = map[string]string{terrarun.AnnotationLabelsAtCreation: `{"team":"web"}`}
	s.PrepareForCreate(ctx, run)
	if got := run.Annotations[terrarun.AnnotationLabelsAtCreation]; got != `{"team":"payments"}` {
		t.Fatalf("labels at creation = %q", got)
	}
	if errs := s.Validate(ctx, run); len(errs) != 0 {
		t.Fatalf("a labelled run is refused: %v", errs)
	}
	replaced := run.DeepCopy()
	replaced.Labels, replaced.Annotations = nil, nil
	s.PrepareForUpdate(ctx, replaced, run)
	if errs := s.ValidateUpdate(ctx, replaced, run); len(errs) != 0 || replaced.Annotations[terrarun.AnnotationLabelsAtCreation] != `{"team":"payments"}` {
		t.Errorf("an update without the labels: %v, annotations %v", errs, replaced.Annotations)
	}
	forged := run.DeepCopy()
	forged.Annotations[terrarun.AnnotationLabelsAtCreation] = `{}`
	if errs := checkWorkspaceMarks(ctx, forged, run); len(errs) != 1 {
		t.Errorf("a changed record of the labels: %v", errs)
	}
}
