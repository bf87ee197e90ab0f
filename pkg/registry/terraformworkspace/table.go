package terraformworkspace

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/clock"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/registry/table"
)

// TableConvertor prints workspaces for `kubectl get`: NAME, READY, LAST-RUN,
// REVISION, DRIFT and AGE, plus REASON with `-o wide`.
type TableConvertor struct {
	// Clock measures AGE; nil means the real clock.
	Clock clock.PassiveClock
}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the workspace."},
	{Name: "Ready", Type: "string", Description: "Whether the current spec is applied: the Ready condition's status."},
	{Name: "Last-Run", Type: "string", Description: "The run the workspace created last."},
	{Name: "Revision", Type: "string", Description: "The source revision of the last successful apply."},
	{Name: "Drift", Type: "string", Description: "Whether the last drift check found changes: the Drifted condition's status, or - when never checked."},
	{Name: "Age", Type: "string", Description: "Time since the workspace was created."},
	{Name: "Reason", Type: "string", Priority: 1, Description: "The Ready condition's reason."},
}

// ConvertToTable converts one workspace or a list of them into a table.
func (c TableConvertor) ConvertToTable(ctx context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	clk := c.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return table.Convert(obj, tableOptions, columns, func(obj runtime.Object) ([]metav1.TableRow, error) {
		switch o := obj.(type) {
		case *terrarun.TerraformWorkspace:
			return []metav1.TableRow{row(o, clk)}, nil
		case *terrarun.TerraformWorkspaceList:
			rows := make([]metav1.TableRow, 0, len(o.Items))
			for i := range o.Items {
				rows = append(rows, row(&o.Items[i], clk))
			}
			return rows, nil
		default:
			return nil, fmt.Errorf("cannot print %T as a TerraformWorkspace table", obj)
		}
	})
}

func row(ws *terrarun.TerraformWorkspace, clk clock.PassiveClock) metav1.TableRow {
	ready, reason := "Unknown", ""
	if c := meta.FindStatusCondition(ws.Status.Conditions, terrarun.WorkspaceConditionReady); c != nil {
		ready, reason = string(c.Status), c.Reason
	}
	drift := "-"
	if c := meta.FindStatusCondition(ws.Status.Conditions, terrarun.WorkspaceConditionDrifted); c != nil {
		drift = string(c.Status)
	}
	revision := ws.Status.LastAppliedRevision
	if _, digest, ok := strings.Cut(revision, ":"); ok {
		revision = digest // sha256:<hex> of an inline source
	}
	if len(revision) > 12 {
		revision = revision[:12]
	}
	age := "<unknown>"
	if !ws.CreationTimestamp.IsZero() {
		age = duration.HumanDuration(clk.Since(ws.CreationTimestamp.Time))
	}
	return metav1.TableRow{
		Object: runtime.RawExtension{Object: ws},
		Cells:  []interface{}{ws.Name, ready, orNone(ws.Status.LastRun), orNone(revision), drift, age, orNone(reason)},
	}
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
