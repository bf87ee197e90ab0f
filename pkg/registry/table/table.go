// Package table builds the server-side tables that `kubectl get` prints.
package table

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Convert returns the table of obj, one object or a list, with columns
// (left out when the client asks for no headers), the rows that rows makes
// of it, and the list's or the object's resource version.
func Convert(obj, tableOptions runtime.Object, columns []metav1.TableColumnDefinition, rows func(runtime.Object) ([]metav1.TableRow, error)) (*metav1.Table, error) {
	table := &metav1.Table{}
	if opts, ok := tableOptions.(*metav1.TableOptions); !ok || !opts.NoHeaders {
		table.ColumnDefinitions = columns
	}
	var err error
	if table.Rows, err = rows(obj); err != nil {
		return nil, err
	}
	if l, err := meta.ListAccessor(obj); err == nil {
		table.ResourceVersion = l.GetResourceVersion()
		table.Continue = l.GetContinue()
		table.RemainingItemCount = l.GetRemainingItemCount()
	} else if m, err := meta.CommonAccessor(obj); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
	}
	return table, nil
}
