package initializer_test

import (
	"context"
	"testing"

	"k8s.io/apiserver/pkg/admission"

	"github.com/terrarun/terrarun/pkg/admission/initializer"
)

type staticLabeler map[string]string

func (s staticLabeler) NamespaceLabels(context.Context, string) (map[string]string, error) {
	return s, nil
}

type wantsLabeler struct {
	labeler initializer.NamespaceLabeler
	calls   int
}

func (w *wantsLabeler) SetNamespaceLabeler(l initializer.NamespaceLabeler) { w.labeler = l; w.calls++ }
func (w *wantsLabeler) ValidateInitialization() error                      { return nil }
func (w *wantsLabeler) Handles(admission.Operation) bool                   { return true }

type plain struct{}

func (plain) Handles(admission.Operation) bool { return true }

var _ initializer.WantsNamespaceLabeler = &wantsLabeler{}

func TestInitializer(t *testing.T) {
	l := staticLabeler{"env": "prod"}
	w := &wantsLabeler{}
	initializer.NewInitializer(l, nil).Initialize(w)
	if w.calls != 1 || w.labeler == nil {
		t.Fatalf("labeler not set: %+v", w)
	}
	got, _ := w.labeler.NamespaceLabels(context.Background(), "x")
	if got["env"] != "prod" {
		t.Errorf("wrong labeler set")
	}

	w = &wantsLabeler{}
	initializer.NewInitializer(nil, nil).Initialize(w)
	if w.calls != 0 {
		t.Errorf("a nil labeler must not be set")
	}

	// Plugins that do not want a labeler are left alone.
	initializer.NewInitializer(l, nil).Initialize(plain{})
}
