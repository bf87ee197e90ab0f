package terraformruntask

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage/names"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

func task() *terrarun.TerraformRunTask {
	return &terrarun.TerraformRunTask{ObjectMeta: metav1.ObjectMeta{Name: "scanner", Namespace: "dev"}, Spec: terrarun.TerraformRunTaskSpec{
		URL: "https://scanner.example", Stages: []terrarun.RunTaskStage{terrarun.RunTaskPostPlan, terrarun.RunTaskPreApply},
		Enforcement: terrarun.RunTaskMandatory, Timeout: &metav1.Duration{Duration: 5 * time.Minute},
	}}
}

// TestStrategy: a task is validated when written; an edit of its spec
// raises the generation; tasks are namespaced.
func TestStrategy(t *testing.T) {
	s := strategy{ObjectTyper: runtime.NewScheme(), NameGenerator: names.SimpleNameGenerator}
	ctx := context.Background()
	if !s.NamespaceScoped() {
		t.Error("run tasks are namespaced, not cluster-scoped")
	}
	if errs := s.Validate(ctx, task()); len(errs) > 0 {
		t.Errorf("a valid task: %v", errs)
	}
	bad := task()
	bad.Spec.URL = "http://scanner.example"
	if errs := s.Validate(ctx, bad); len(errs) != 1 || errs[0].Field != "spec.url" {
		t.Errorf("an http task: %v", errs)
	}
	old := task()
	s.PrepareForCreate(ctx, old)
	same := old.DeepCopy()
	s.PrepareForUpdate(ctx, same, old)
	edited := old.DeepCopy()
	edited.Spec.Enforcement = terrarun.RunTaskAdvisory
	s.PrepareForUpdate(ctx, edited, old)
	if old.Generation != 1 || same.Generation != 1 || edited.Generation != 2 {
		t.Errorf("generations: created %d, unchanged %d, edited %d; want 1, 1, 2", old.Generation, same.Generation, edited.Generation)
	}
}

func TestTable(t *testing.T) {
	table, err := tableConvertor{}.ConvertToTable(context.Background(), &terrarun.TerraformRunTaskList{Items: []terrarun.TerraformRunTask{*task()}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(table.ColumnDefinitions) != 6 || len(table.Rows) != 1 {
		t.Fatalf("table: %d columns, %d rows", len(table.ColumnDefinitions), len(table.Rows))
	}
	want := []interface{}{"scanner", "https://scanner.example", "PostPlan,PreApply", "Mandatory", "5m0s", "<unknown>"}
	for i, cell := range table.Rows[0].Cells {
		if cell != want[i] {
			t.Errorf("cell %d (%s) = %v, want %v", i, table.ColumnDefinitions[i].Name, cell, want[i])
		}
	}
}
