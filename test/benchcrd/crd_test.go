package benchcrd

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/openapi"
)

// crdGroup is the CRD's group: terrarun's kind, in a group of its own, so
// that kube-apiserver serves both.
const crdGroup = "crd.terrarun.dev"

// crdGV is the CRD's group and version.
var crdGV = schema.GroupVersion{Group: crdGroup, Version: v1alpha1.SchemeGroupVersion.Version}

// scheme knows TerraformRun and TerraformRunList under terrarun.dev and
// crd.terrarun.dev alike: the client decodes both sides into the same Go
// types.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, gv := range []schema.GroupVersion{v1alpha1.SchemeGroupVersion, crdGV} {
		s.AddKnownTypes(gv, &v1alpha1.TerraformRun{}, &v1alpha1.TerraformRunList{})
		metav1.AddToGroupVersion(s, gv)
	}
	return s
}()

// printerPaths are the CRD's printer columns for the columns of terrarun's
// table (pkg/registry/terraformrun/table.go), by name. Plan and Source are
// computed by terrarun ("+1 ~0 -0", "git URL@ref"); a CRD column is a JSONPath,
// so it prints the object they are computed from. Name is the CRD's own.
var printerPaths = map[string]struct{ path, typ string }{
	"Phase":       {".status.phase", ""},
	"Plan":        {".status.plan", ""},
	"Approved-By": {".status.approval.approvedBy", ""},
	"Age":         {".metadata.creationTimestamp", "date"},
	"Operation":   {".spec.operation", ""},
	"Source":      {".spec.source", ""},
	"Engine":      {".spec.engine.binary", ""},
}

// createCRD creates terraformruns.crd.terrarun.dev: TerraformRun's schema
// from terrarun's OpenAPI definitions, the status subresource, and printer
// columns after the table terrarun serves, and waits until it is
// Established.
func (e *environment) createCRD(ctx context.Context) error {
	openAPISchema, err := crdSchema()
	if err != nil {
		return fmt.Errorf("the CRD's schema from pkg/generated/openapi: %w", err)
	}
	columns, err := e.printerColumns(ctx)
	if err != nil {
		return err
	}
	name := "terraformruns." + crdGroup
	crd := map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"group": crdGroup, "scope": "Namespaced",
			"names": map[string]any{"plural": "terraformruns", "singular": "terraformrun", "kind": "TerraformRun", "listKind": "TerraformRunList"},
			"versions": []any{map[string]any{
				"name": crdGV.Version, "served": true, "storage": true,
				"schema":                   map[string]any{"openAPIV3Schema": openAPISchema},
				"subresources":             map[string]any{"status": map[string]any{}},
				"additionalPrinterColumns": columns,
			}},
		},
	}
	if err := e.post(ctx, e.kubeURL+"/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd); err != nil {
		return fmt.Errorf("creating the CRD: %w", err)
	}
	return e.waitCondition(ctx, e.kubeURL+"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+name, "Established")
}

// printerColumns asks terrarun for its table of runs and maps each column
// but Name to a CRD printer column with the same name, description and
// priority.
func (e *environment) printerColumns(ctx context.Context) ([]any, error) {
	body, err := e.get(ctx, e.trURL+"/apis/terrarun.dev/v1alpha1/namespaces/"+namespace+"/terraformruns",
		"application/json;as=Table;v=v1;g=meta.k8s.io")
	if err != nil {
		return nil, fmt.Errorf("terrarun's table of runs: %w", err)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		return nil, fmt.Errorf("terrarun's table of runs: %w", err)
	}
	var columns []any
	for _, c := range table.ColumnDefinitions {
		if c.Name == "Name" {
			continue
		}
		p, ok := printerPaths[c.Name]
		if !ok {
			return nil, fmt.Errorf("terrarun's table has a column %s that the CRD does not have: add its JSONPath to printerPaths", c.Name)
		}
		typ := c.Type
		if p.typ != "" {
			typ = p.typ
		}
		columns = append(columns, map[string]any{"name": c.Name, "type": typ, "jsonPath": p.path, "description": c.Description, "priority": c.Priority})
	}
	return columns, nil
}

// crdSchema is TerraformRun's OpenAPI v3 definition as a structural schema:
// references inlined, metadata left to kube-apiserver, int-or-string types
// (IntOrString, Quantity) and untyped values (terrarun's JSON) marked, the
// x-kubernetes list and map markers kept. Defaults are left out: terrarun
// defaults in Go, and the same body is sent to both.
func crdSchema() (map[string]any, error) {
	defs := openapi.GetOpenAPIDefinitions(func(name string) spec.Ref {
		return spec.MustCreateRef("#/definitions/" + name)
	})
	c := converter{defs: defs}
	root := v1alpha1.TerraformRun{}.OpenAPIModelName()
	out, err := c.convert(defs[root].Schema, []string{root})
	if err != nil {
		return nil, err
	}
	props, ok := out["properties"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s has no properties", root)
	}
	props["metadata"] = map[string]any{"type": "object"}
	return out, nil
}

// converter turns OpenAPI definitions into CRD schemas.
type converter struct {
	defs map[string]common.OpenAPIDefinition
}

// crdFormats are the formats a CRD schema validates; others are dropped.
var crdFormats = []string{"int32", "int64", "float", "double", "byte", "date", "date-time", "duration", "uuid", "hostname", "ipv4", "ipv6", "cidr", "mac", "uri", "email", "password"}

// kept are the vendor extensions a CRD schema accepts.
var kept = []string{"x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
	"x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string", "x-kubernetes-validations"}

// convert converts s; path holds the definitions being inlined, to refuse
// a recursive type, which a CRD schema cannot express.
func (c converter) convert(s spec.Schema, path []string) (map[string]any, error) {
	if ref := s.Ref.String(); ref != "" {
		name := strings.TrimPrefix(ref, "#/definitions/")
		def, ok := c.defs[name]
		if !ok {
			return nil, fmt.Errorf("no OpenAPI definition of %s", name)
		}
		if slices.Contains(path, name) {
			return nil, fmt.Errorf("%s is recursive: a CRD schema cannot inline it", name)
		}
		out, err := c.convert(def.Schema, append(path, name))
		if err != nil {
			return nil, err
		}
		if s.Description != "" {
			out["description"] = s.Description
		}
		return out, nil
	}
	out := map[string]any{}
	if s.Description != "" {
		out["description"] = s.Description
	}
	for k, v := range s.Extensions {
		if slices.Contains(kept, k) {
			out[k] = v
		}
	}
	if len(s.AllOf) > 0 || len(s.AnyOf) > 0 || s.Not != nil {
		return nil, fmt.Errorf("%s: allOf, anyOf and not are not mapped", strings.Join(path, " > "))
	}
	if len(s.OneOf) > 0 {
		// IntOrString and Quantity: a string or a number.
		for _, alt := range s.OneOf {
			if len(alt.Type) != 1 || !slices.Contains([]string{"string", "integer", "number"}, alt.Type[0]) {
				return nil, fmt.Errorf("%s: a oneOf other than a string or a number", strings.Join(path, " > "))
			}
		}
		out["x-kubernetes-int-or-string"] = true
		return out, nil
	}
	if s.Format == "int-or-string" {
		out["x-kubernetes-int-or-string"] = true
		return out, nil
	}
	switch len(s.Type) {
	case 0:
		if len(s.Properties) == 0 {
			out["x-kubernetes-preserve-unknown-fields"] = true // any JSON value
			return out, nil
		}
		out["type"] = "object"
	case 1:
		out["type"] = s.Type[0]
	default:
		return nil, fmt.Errorf("%s: several types %v", strings.Join(path, " > "), s.Type)
	}
	if slices.Contains(crdFormats, s.Format) {
		out["format"] = s.Format
	}
	if len(s.Enum) > 0 {
		out["enum"] = s.Enum
	}
	for k, v := range map[string]any{"maximum": s.Maximum, "minimum": s.Minimum, "maxLength": s.MaxLength, "minLength": s.MinLength, "maxItems": s.MaxItems, "minItems": s.MinItems} {
		switch p := v.(type) {
		case *float64:
			if p != nil {
				out[k] = *p
			}
		case *int64:
			if p != nil {
				out[k] = *p
			}
		}
	}
	if s.Pattern != "" {
		out["pattern"] = s.Pattern
	}
	if len(s.Properties) > 0 {
		props := map[string]any{}
		for name, p := range s.Properties {
			converted, err := c.convert(p, append(path, name))
			if err != nil {
				return nil, err
			}
			props[name] = converted
		}
		out["properties"] = props
		if len(s.Required) > 0 {
			out["required"] = s.Required
		}
	}
	if s.AdditionalProperties != nil {
		if s.AdditionalProperties.Schema == nil {
			out["x-kubernetes-preserve-unknown-fields"] = true
		} else {
			converted, err := c.convert(*s.AdditionalProperties.Schema, append(path, "*"))
			if err != nil {
				return nil, err
			}
			out["additionalProperties"] = converted
		}
	}
	if s.Items != nil && s.Items.Schema != nil {
		converted, err := c.convert(*s.Items.Schema, append(path, "[]"))
		if err != nil {
			return nil, err
		}
		out["items"] = converted
	}
	if out["type"] == "object" && out["properties"] == nil && out["additionalProperties"] == nil {
		out["x-kubernetes-preserve-unknown-fields"] = true // RawExtension and the like
	}
	return out, nil
}

// checkCRD creates a run through terrarun and stores it, as terrarun serves
// it (with its defaults, creator and status), in the CRD too, the status
// through the status subresource; it fails unless the CRD gives back the
// same spec and status, as it would if its schema lacked or pruned a field
// of the benchmark's object. It uses a namespace of its own.
func (e *environment) checkCRD(ctx context.Context) error {
	const ns, name = "bench-schema", "schema-check"
	tr := side{"terrarun", v1alpha1.SchemeGroupVersion.String(), collectionURL(e.trURL, v1alpha1.SchemeGroupVersion, ns)}
	crd := collectionURL(e.kubeURL, crdGV, ns)
	body, err := tr.body(name)
	if err != nil {
		return err
	}
	if err := e.postRaw(ctx, tr.collection, body); err != nil {
		return err
	}
	var served map[string]any
	if err := e.getJSON(ctx, tr.collection+"/"+name, &served); err != nil {
		return err
	}
	created, err := e.do(ctx, http.MethodPost, crd, mustJSON(map[string]any{
		"apiVersion": crdGV.String(), "kind": "TerraformRun",
		"metadata": map[string]any{"name": name}, "spec": served["spec"],
	}), "application/json", http.StatusCreated)
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := json.Unmarshal(created, &obj); err != nil {
		return err
	}
	obj["status"] = served["status"]
	if _, err := e.do(ctx, http.MethodPut, crd+"/"+name+"/status", mustJSON(obj), "application/json", http.StatusOK); err != nil {
		return err
	}
	var stored map[string]any
	if err := e.getJSON(ctx, crd+"/"+name, &stored); err != nil {
		return err
	}
	for _, part := range []string{"spec", "status"} {
		if !reflect.DeepEqual(served[part], stored[part]) {
			return fmt.Errorf("the CRD does not keep the %s of a run as terrarun serves it: terrarun %s, CRD %s", part, mustJSON(served[part]), mustJSON(stored[part]))
		}
	}
	return nil
}

// getJSON GETs url and decodes its JSON into v.
func (e *environment) getJSON(ctx context.Context, url string, v any) error {
	body, err := e.get(ctx, url, "application/json")
	if err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}

// mustJSON is v in JSON; v is always encodable here (decoded JSON or maps of it).
func mustJSON(v any) []byte {
	data, _ := json.Marshal(v)
	return data
}
