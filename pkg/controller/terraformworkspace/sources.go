package terraformworkspace

import (
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/fluxsource"
)

// Flux sources (spec.template.source.sourceRef). With Options.Sources
// (cluster mode), a workspace follows its source's revision as
// source-controller reports it: a change of the source re-syncs the
// workspaces that name it (sourceIndex), and a new revision of it is a
// NewRevision run.

// Sources is what the controller reads of Flux sources (fluxsource.Reader).
type Sources interface {
	// Cached returns a source's artifact from a watch of its kind, which
	// starts on first use.
	Cached(namespace, kind, name string) (fluxsource.Artifact, error)
	// OnChange calls handler with each source of a watched kind that
	// changes.
	OnChange(handler func(namespace, kind, name string))
}

// sourceIndex indexes workspaces by the Flux source they name, as
// namespace/kind/name.
const sourceIndex = "fluxSource"

func sourceKey(namespace, kind, name string) string { return namespace + "/" + kind + "/" + name }

func sourceOf(obj any) ([]string, error) {
	ws, ok := obj.(*v1alpha1.TerraformWorkspace)
	if !ok || ws.Spec.Template.Source.SourceRef == nil {
		return nil, nil
	}
	ref := ws.Spec.Template.Source.SourceRef
	return []string{sourceKey(ws.Namespace, ref.Kind, ref.Name)}, nil
}

// watchSources re-syncs the workspaces that name a source when it changes.
func (c *Controller) watchSources(sources Sources) {
	sources.OnChange(func(namespace, kind, name string) {
		followers, err := c.dependents.ByIndex(sourceIndex, sourceKey(namespace, kind, name))
		if err != nil {
			return // the index is added in New
		}
		for _, ws := range followers {
			c.enqueue(ws)
		}
	})
}

// sourceRevision is the revision of the Flux source that spec names, as
// source-controller reports it now; "" when spec names none, or the source
// has no Ready artifact (the revision the runs saw stands then).
func (c *Controller) sourceRevision(namespace string, spec *v1alpha1.TerraformRunSpec) string {
	ref := spec.Source.SourceRef
	if ref == nil || c.opts.Sources == nil {
		return ""
	}
	art, err := c.opts.Sources.Cached(namespace, ref.Kind, ref.Name)
	if err != nil {
		return ""
	}
	return art.Revision
}
