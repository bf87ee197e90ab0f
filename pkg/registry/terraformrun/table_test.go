package terraformrun

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

func equalSpec(a, b terrarun.TerraformRunSpec) bool { return equality.Semantic.DeepEqual(a, b) }

func TestConvertToTable(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	convertor := TableConvertor{Clock: clocktesting.NewFakePassiveClock(now)}
	created := metav1.NewTime(now.Add(-90 * time.Second))
	completed := metav1.NewTime(now)

	pending := terrarun.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "pending", CreationTimestamp: created},
		Spec: terrarun.TerraformRunSpec{
			Operation: terrarun.OperationApply,
			Source:    terrarun.Source{Inline: map[string]string{"main.tf": "", "vars.tfvars": ""}},
			Engine:    terrarun.Engine{Binary: terrarun.EngineTerraform},
		},
		Status: terrarun.TerraformRunStatus{Phase: terrarun.RunPhasePending},
	}
	applied := terrarun.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "applied", CreationTimestamp: created},
		Spec: terrarun.TerraformRunSpec{
			Operation: terrarun.OperationDestroy,
			Source:    terrarun.Source{Git: &terrarun.GitSource{URL: "https://git.example.com/infra.git", Ref: "main", Path: "envs/prod"}},
			Engine:    terrarun.Engine{Binary: terrarun.EngineTofu},
		},
		Status: terrarun.TerraformRunStatus{
			Phase:    terrarun.RunPhaseSucceeded,
			Plan:     &terrarun.PlanSummary{Digest: "sha256:00", Add: 1, Change: 2, Destroy: 3, CompletedAt: &completed},
			Approval: &terrarun.ApprovalStatus{ApprovedBy: "bob"},
			Policy: &terrarun.PolicyStatus{PlanDigest: "sha256:00", Policies: []terrarun.CheckedPolicy{{Name: "p", ResourceVersion: "1"}},
				Results: []terrarun.PolicyResult{{Policy: "p", Validation: "tags", Enforcement: terrarun.EnforcementAdvisory, Outcome: terrarun.PolicyFailed}}},
		},
	}
	held := terrarun.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "held", CreationTimestamp: created},
		Spec:       terrarun.TerraformRunSpec{Source: terrarun.Source{ConfigMap: &terrarun.ConfigMapSource{Name: "tf"}}},
		Status: terrarun.TerraformRunStatus{
			Phase: terrarun.RunPhaseAwaitingApproval,
			Plan:  &terrarun.PlanSummary{Digest: "sha256:01", CompletedAt: &completed},
			Policy: &terrarun.PolicyStatus{PlanDigest: "sha256:01", Policies: []terrarun.CheckedPolicy{{Name: "p", ResourceVersion: "1"}},
				Results: []terrarun.PolicyResult{{Policy: "p", Validation: "few", Enforcement: terrarun.EnforcementSoftMandatory, Outcome: terrarun.PolicyFailed}}},
		},
	}
	fromConfigMap := terrarun.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "cm", CreationTimestamp: created},
		Spec:       terrarun.TerraformRunSpec{Source: terrarun.Source{ConfigMap: &terrarun.ConfigMapSource{Name: "tf"}}},
	}
	list := &terrarun.TerraformRunList{
		ListMeta: metav1.ListMeta{ResourceVersion: "42", Continue: "next"},
		Items:    []terrarun.TerraformRun{pending, applied, held, fromConfigMap},
	}

	table, err := convertor.ConvertToTable(context.Background(), list, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	wide := 0
	for _, c := range table.ColumnDefinitions {
		names = append(names, c.Name)
		if c.Priority > 0 {
			wide++
		}
	}
	if want := []string{"Name", "Phase", "Plan", "Policy", "Approved-By", "Age", "Operation", "Source", "Engine"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("columns = %v, want %v", names, want)
	}
	if wide != 3 {
		t.Errorf("%d wide-only columns, want 3 (Operation, Source, Engine)", wide)
	}
	wantRows := [][]interface{}{
		{"pending", "Pending", "-", "-", "<none>", "90s", "Apply", "inline:2 files", "terraform"},
		{"applied", "Succeeded", "+1 ~2 -3", "Advisory", "bob", "90s", "Destroy", "git:git.example.com/infra.git//envs/prod@main", "tofu"},
		{"held", "AwaitingApproval", "+0 ~0 -0", "Held", "<none>", "90s", "", "configmap:tf", ""},
		{"cm", "", "-", "-", "<none>", "90s", "", "configmap:tf", ""},
	}
	if len(table.Rows) != len(wantRows) {
		t.Fatalf("%d rows, want %d", len(table.Rows), len(wantRows))
	}
	for i, r := range table.Rows {
		if !reflect.DeepEqual(r.Cells, wantRows[i]) {
			t.Errorf("row %d = %v, want %v", i, r.Cells, wantRows[i])
		}
		if r.Object.Object == nil {
			t.Errorf("row %d carries no object; kubectl needs it for -o name and labels", i)
		}
	}
	if table.ResourceVersion != "42" || table.Continue != "next" {
		t.Errorf("list metadata not carried: rv=%q continue=%q", table.ResourceVersion, table.Continue)
	}

	one, err := convertor.ConvertToTable(context.Background(), &applied, &metav1.TableOptions{NoHeaders: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(one.ColumnDefinitions) != 0 || len(one.Rows) != 1 || one.Rows[0].Cells[0] != "applied" {
		t.Errorf("single object without headers: %+v", one)
	}

	if _, err := convertor.ConvertToTable(context.Background(), &metav1.Status{}, nil); err == nil {
		t.Error("converting a foreign object succeeded, want an error")
	}
}

func TestSourceSummaryHidesCredentials(t *testing.T) {
	s := sourceSummary(&terrarun.Source{Git: &terrarun.GitSource{URL: "https://user:hunter2@git.example.com/x.git", Ref: "main"}})
	if s != "git:git.example.com/x.git@main" {
		t.Errorf("summary = %q", s)
	}
}

func TestSourceSummaryOfOCI(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		src  terrarun.OCISource
		want string
	}{
		{terrarun.OCISource{URL: "oci://ghcr.io/org/infra"}, "oci:ghcr.io/org/infra:latest"},
		{terrarun.OCISource{URL: "oci://ghcr.io/org/infra", Path: "envs/prod", Ref: &terrarun.OCIReference{Tag: "v1"}}, "oci:ghcr.io/org/infra//envs/prod:v1"},
		{terrarun.OCISource{URL: "oci://ghcr.io/org/infra", Ref: &terrarun.OCIReference{Semver: "~1.2"}}, "oci:ghcr.io/org/infra:~1.2"},
		{terrarun.OCISource{URL: "oci://ghcr.io/org/infra", Ref: &terrarun.OCIReference{Digest: digest}}, "oci:ghcr.io/org/infra@sha256:abababababab"},
	} {
		if got := sourceSummary(&terrarun.Source{OCI: &tc.src}); got != tc.want {
			t.Errorf("summary of %+v = %q, want %q", tc.src, got, tc.want)
		}
	}
}
