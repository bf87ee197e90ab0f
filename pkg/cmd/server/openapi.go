package server

import (
	"strings"

	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// terrarunModels is the prefix of the OpenAPI model names of terrarun.dev's
// types.
const terrarunModels = "dev.terrarun."

// withoutRepeatedDescriptions serves defs with no description on the
// terrarun.dev types that fields refer to, but for the kinds: kubectl
// explain prints a field's description and then its type's, and the two
// say the same thing ("source is where…", "Source is where…"). The field's
// stays, which says what the value is for where it is used.
func withoutRepeatedDescriptions(defs common.GetOpenAPIDefinitions) common.GetOpenAPIDefinitions {
	return func(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
		// Which models a described field refers to.
		referred := map[string]bool{}
		for _, d := range defs(func(name string) spec.Ref { return spec.MustCreateRef(name) }) {
			for _, p := range d.Schema.Properties {
				if p.Description == "" {
					continue
				}
				for _, s := range []*spec.Schema{&p, items(p), additional(p)} {
					if s != nil && s.Ref.String() != "" {
						referred[s.Ref.String()] = true
					}
				}
			}
		}
		all := defs(ref)
		for name, d := range all {
			_, kind := d.Schema.Properties["kind"]
			if strings.HasPrefix(name, terrarunModels) && referred[name] && !kind {
				d.Schema.Description = ""
				all[name] = d
			}
		}
		return all
	}
}

// additional is the schema of p's map values, or nil.
func additional(p spec.Schema) *spec.Schema {
	if p.AdditionalProperties == nil {
		return nil
	}
	return p.AdditionalProperties.Schema
}

// items is the schema of p's list items, or nil.
func items(p spec.Schema) *spec.Schema {
	if p.Items == nil {
		return nil
	}
	return p.Items.Schema
}
