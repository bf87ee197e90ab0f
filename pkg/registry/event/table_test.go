package event

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestTable checks `kubectl get events`: kube-apiserver's columns, with
// when an Event was last and first seen from the fields its recorder set.
func TestTable(t *testing.T) {
	// Ages of whole quarters of an hour or more print the same a minute
	// later: what the test takes does not change them.
	now := time.Now()
	ago := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }
	micro := func(d time.Duration) metav1.MicroTime { return metav1.NewMicroTime(now.Add(-d)) }
	event := func(name string, change func(*corev1.Event)) corev1.Event {
		e := newEvent(name, change)
		e.CreationTimestamp = ago(48 * time.Hour)
		return *e
	}
	list := &corev1.EventList{
		ListMeta: metav1.ListMeta{ResourceVersion: "42", Continue: "next-page"},
		Items: []corev1.Event{
			// A core/v1 recorder's Event: first and last timestamps, a count.
			event("legacy", func(e *corev1.Event) {
				e.FirstTimestamp, e.LastTimestamp, e.Count = ago(5*time.Hour), ago(30*time.Minute), 3
				e.Message = "  Plan: 1 to add.\n"
			}),
			// An events.k8s.io recorder's: an event time, a series, a
			// reporting controller and no count.
			event("series", func(e *corev1.Event) {
				e.EventTime = micro(2 * time.Hour)
				e.Series = &corev1.EventSeries{Count: 4, LastObservedTime: micro(15 * time.Minute)}
				e.Source, e.ReportingController = corev1.EventSource{}, "terrarun.dev/run-controller"
				e.InvolvedObject.Kind, e.InvolvedObject.Name = "TerraformWorkspace", "web"
				e.Type, e.Reason = corev1.EventTypeWarning, "DependencyPending"
			}),
			// Nothing but its creation.
			event("bare", nil),
		},
	}
	table, err := tableConvertor{}.ConvertToTable(context.Background(), list, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			names = append(names, c.Name)
		} else {
			names = append(names, c.Name+" (wide)")
		}
	}
	if want := []string{"Last Seen", "Type", "Reason", "Object", "Message", "Source (wide)", "First Seen (wide)", "Count (wide)", "Name (wide)"}; !reflect.DeepEqual(names, want) {
		t.Errorf("columns %q, want %q", names, want)
	}
	want := [][]any{
		{"30m", "Normal", "Planned", "terraformrun/web-1", "Plan: 1 to add.", "terrarun-controller", "5h", int64(3), "legacy"},
		{"15m", "Warning", "DependencyPending", "terraformworkspace/web", "Plan: 1 to add.", "terrarun.dev/run-controller", "120m", int64(1), "series"},
		{"2d", "Normal", "Planned", "terraformrun/web-1", "Plan: 1 to add.", "terrarun-controller", "2d", int64(1), "bare"},
	}
	if len(table.Rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(table.Rows), len(want))
	}
	for i, row := range table.Rows {
		if !reflect.DeepEqual(row.Cells, want[i]) {
			t.Errorf("row %d: %v, want %v", i, row.Cells, want[i])
		}
		if e, ok := row.Object.Object.(*corev1.Event); !ok || e.Name != list.Items[i].Name {
			t.Errorf("row %d is of %v, want Event %s", i, row.Object.Object, list.Items[i].Name)
		}
	}
	if table.ResourceVersion != "42" || table.Continue != "next-page" {
		t.Errorf("table resourceVersion %q, continue %q; want the list's", table.ResourceVersion, table.Continue)
	}

	t.Run("one event", func(t *testing.T) {
		e := event("one", nil)
		table, err := tableConvertor{}.ConvertToTable(context.Background(), &e, nil)
		if err != nil || len(table.Rows) != 1 || table.Rows[0].Cells[8] != "one" {
			t.Errorf("one Event: %v, %+v", err, table)
		}
	})
	t.Run("not an event", func(t *testing.T) {
		_, err := tableConvertor{}.ConvertToTable(context.Background(), &corev1.Pod{}, nil)
		if err == nil || err.Error() != "cannot print *v1.Pod as a table of events" {
			t.Errorf("error %v, want cannot print *v1.Pod as a table of events", err)
		}
	})
}
