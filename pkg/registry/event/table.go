package event

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// tableConvertor prints Events with kube-apiserver's columns, so that
// `kubectl get events` reads as it does against a cluster.
type tableConvertor struct{}

var columns = []metav1.TableColumnDefinition{
	{Name: "Last Seen", Type: "string", Description: "When the event last occurred."},
	{Name: "Type", Type: "string", Description: "Normal or Warning."},
	{Name: "Reason", Type: "string", Description: "Why the event was recorded, in CamelCase."},
	{Name: "Object", Type: "string", Description: "The object the event is about."},
	{Name: "Message", Type: "string", Description: "What happened."},
	{Name: "Source", Type: "string", Priority: 1, Description: "The component that recorded the event."},
	{Name: "First Seen", Type: "string", Priority: 1, Description: "When the event first occurred."},
	{Name: "Count", Type: "integer", Priority: 1, Description: "How many times it occurred."},
	{Name: "Name", Type: "string", Priority: 1, Description: "The event's name."},
}

// ConvertToTable implements rest.TableConvertor.
func (tableConvertor) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{ColumnDefinitions: columns}
	if m, err := meta.ListAccessor(obj); err == nil {
		table.ResourceVersion, table.Continue, table.RemainingItemCount = m.GetResourceVersion(), m.GetContinue(), m.GetRemainingItemCount()
	}
	var events []corev1.Event
	switch o := obj.(type) {
	case *corev1.Event:
		events = []corev1.Event{*o}
	case *corev1.EventList:
		events = o.Items
	default:
		return nil, fmt.Errorf("cannot print %T as a table of events", obj)
	}
	now := time.Now()
	for i := range events {
		e := &events[i]
		object := strings.ToLower(e.InvolvedObject.Kind) + "/" + e.InvolvedObject.Name
		count := e.Count
		if count == 0 {
			count = 1
		}
		source := e.Source.Component
		if source == "" {
			source = e.ReportingController
		}
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells:  []interface{}{age(now, lastSeen(e)), e.Type, e.Reason, object, strings.TrimSpace(e.Message), source, age(now, firstSeen(e)), int64(count), e.Name},
			Object: runtime.RawExtension{Object: e},
		})
	}
	return table, nil
}

func lastSeen(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil:
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func firstSeen(e *corev1.Event) time.Time {
	switch {
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func age(now, t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}
