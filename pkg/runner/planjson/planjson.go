// Package planjson redacts and summarizes the JSON plan representation that
// `terraform show -json PLANFILE` prints (the same for OpenTofu).
//
// The redacted JSON is what users read through the run's plan subresource
// with ?format=json, so every value Terraform knows to be sensitive is
// replaced with the string "(sensitive value)", and, as a defence in depth,
// so is every string or number that contains one of the secret values the
// executor knows about.
package planjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/terrarun/terrarun/pkg/stage"
)

// Sensitive replaces every redacted value.
const Sensitive = "(sensitive value)"

// Options says what to redact beyond what the plan itself marks sensitive.
type Options struct {
	// Secrets are values that must not appear anywhere: any string equal to
	// or containing one of them is replaced. Empty strings are ignored.
	Secrets []string
	// SecretVariables are names of input variables whose values are secret
	// (they came from a Secret) even when the configuration does not declare
	// them sensitive: their values in "variables" are replaced, and so is any
	// string equal to or containing a string found in those values.
	SecretVariables []string
}

// Redact returns the plan JSON raw with every sensitive value replaced by
// "(sensitive value)", and every string equal to or containing one of
// opts.Secrets, or of the values of opts.SecretVariables, replaced too.
func Redact(raw []byte, opts Options) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("decoding plan JSON: %w", err)
	}
	if doc == nil {
		return nil, fmt.Errorf("decoding plan JSON: not an object")
	}

	secrets := append([]string(nil), opts.Secrets...)

	// Variables: those declared sensitive in the root module, and those the
	// caller says are secret.
	sensitiveVars := map[string]bool{}
	if root := path(doc, "configuration", "root_module"); root != nil {
		if vars, ok := path(root, "variables").(map[string]any); ok {
			for name, v := range vars {
				if vm, ok := v.(map[string]any); ok && vm["sensitive"] == true {
					sensitiveVars[name] = true
				}
			}
		}
	}
	for _, name := range opts.SecretVariables {
		sensitiveVars[name] = true
		if v, ok := path(doc, "variables", name).(map[string]any); ok {
			secrets = append(secrets, leafStrings(v["value"])...)
		}
	}
	if vars, ok := doc["variables"].(map[string]any); ok {
		for name, v := range vars {
			if vm, ok := v.(map[string]any); ok && sensitiveVars[name] {
				if _, has := vm["value"]; has {
					vm["value"] = Sensitive
				}
			}
		}
	}

	// Resource changes, drift and deferred changes carry before/after with
	// masks.
	for _, key := range []string{"resource_changes", "resource_drift"} {
		if list, ok := doc[key].([]any); ok {
			for _, rc := range list {
				if m, ok := rc.(map[string]any); ok {
					redactChange(m["change"])
				}
			}
		}
	}
	if list, ok := doc["deferred_changes"].([]any); ok {
		for _, dc := range list {
			if m, ok := dc.(map[string]any); ok {
				if rc, ok := m["resource_change"].(map[string]any); ok {
					redactChange(rc["change"])
				}
			}
		}
	}
	if ocs, ok := doc["output_changes"].(map[string]any); ok {
		for _, oc := range ocs {
			redactChange(oc)
		}
	}

	// planned_values and prior_state.values are state-shaped.
	redactValues(doc["planned_values"])
	if ps, ok := doc["prior_state"].(map[string]any); ok {
		redactValues(ps["values"])
	}

	// Configuration: constant values written in the configuration, and the
	// defaults of sensitive variables.
	redactConfiguration(doc["configuration"])

	// Defence in depth: every string containing a secret.
	secrets = cleanSecrets(secrets)
	var out any = doc
	if len(secrets) > 0 {
		out = scrub(doc, secrets, false)
	}

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("encoding plan JSON: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// VariableStrings returns every string found in the values of the named
// variables of plan p: callers treat them as secrets.
func VariableStrings(p *tfjson.Plan, names []string) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, name := range names {
		if v, ok := p.Variables[name]; ok && v != nil {
			out = append(out, leafStrings(v.Value)...)
		}
	}
	return cleanSecrets(out)
}

// Summarize counts the plan's resource changes. It leaves SourceRevision
// empty.
func Summarize(p *tfjson.Plan) stage.Result {
	var r stage.Result
	if p == nil {
		return r
	}
	for _, rc := range p.ResourceChanges {
		if rc == nil || rc.Change == nil {
			continue
		}
		a := rc.Change.Actions
		if rc.Change.Importing != nil {
			r.Import++
			r.HasChanges = true
		}
		if !a.NoOp() && !a.Read() && len(a) > 0 {
			r.HasChanges = true
		}
		if rc.Mode == tfjson.DataResourceMode {
			continue
		}
		switch {
		case a.Replace():
			r.Add++
			r.Destroy++
		case a.Create():
			r.Add++
		case a.Update():
			r.Change++
		case a.Delete():
			r.Destroy++
		}
	}
	for _, oc := range p.OutputChanges {
		if oc != nil && len(oc.Actions) > 0 && !oc.Actions.NoOp() {
			r.HasChanges = true
		}
	}
	return r
}

// redactChange applies before_sensitive and after_sensitive to before and
// after of a change object (a resource change or an output change).
func redactChange(c any) {
	m, ok := c.(map[string]any)
	if !ok {
		return
	}
	for _, k := range []string{"before", "after"} {
		mask, hasMask := m[k+"_sensitive"]
		if !hasMask {
			continue
		}
		if v, has := m[k]; has {
			m[k] = applyMask(v, mask)
		}
	}
}

// applyMask returns v with every part that mask marks true replaced. A mask
// is true, false, or an object or array of masks mirroring the value.
func applyMask(v, mask any) any {
	switch mk := mask.(type) {
	case bool:
		if mk {
			return Sensitive
		}
		return v
	case map[string]any:
		vm, ok := v.(map[string]any)
		if !ok {
			if v != nil && maskHasTrue(mk) {
				return Sensitive
			}
			return v
		}
		for k, sub := range mk {
			if val, has := vm[k]; has {
				vm[k] = applyMask(val, sub)
			}
		}
		return vm
	case []any:
		vl, ok := v.([]any)
		if !ok {
			if v != nil && maskHasTrue(mk) {
				return Sensitive
			}
			return v
		}
		for i := range vl {
			if i < len(mk) {
				vl[i] = applyMask(vl[i], mk[i])
			}
		}
		return vl
	default:
		return v
	}
}

func maskHasTrue(mask any) bool {
	switch mk := mask.(type) {
	case bool:
		return mk
	case map[string]any:
		for _, sub := range mk {
			if maskHasTrue(sub) {
				return true
			}
		}
	case []any:
		for _, sub := range mk {
			if maskHasTrue(sub) {
				return true
			}
		}
	}
	return false
}

// redactValues redacts a state-shaped values object: {"outputs": {...},
// "root_module": {"resources": [...], "child_modules": [...]}}.
func redactValues(v any) {
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	if outs, ok := m["outputs"].(map[string]any); ok {
		for _, o := range outs {
			om, ok := o.(map[string]any)
			if !ok {
				continue
			}
			if om["sensitive"] == true {
				if _, has := om["value"]; has {
					om["value"] = Sensitive
				}
			}
		}
	}
	redactModule(m["root_module"])
}

func redactModule(v any) {
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	if rs, ok := m["resources"].([]any); ok {
		for _, r := range rs {
			rm, ok := r.(map[string]any)
			if !ok {
				continue
			}
			if mask, has := rm["sensitive_values"]; has {
				if vals, has := rm["values"]; has {
					rm["values"] = applyMask(vals, mask)
				}
			}
		}
	}
	if cms, ok := m["child_modules"].([]any); ok {
		for _, cm := range cms {
			redactModule(cm)
		}
	}
}

// redactConfiguration replaces every constant_value in the configuration
// (expressions written in the source may be secrets passed to modules) and
// the default of every variable declared sensitive, in every module.
func redactConfiguration(v any) {
	var walk func(v any)
	walk = func(v any) {
		switch t := v.(type) {
		case map[string]any:
			for k, sub := range t {
				if k == "constant_value" {
					t[k] = Sensitive
					continue
				}
				walk(sub)
			}
		case []any:
			for _, sub := range t {
				walk(sub)
			}
		}
	}
	var modules func(mod any)
	modules = func(mod any) {
		m, ok := mod.(map[string]any)
		if !ok {
			return
		}
		if vars, ok := m["variables"].(map[string]any); ok {
			for _, vv := range vars {
				if vm, ok := vv.(map[string]any); ok && vm["sensitive"] == true {
					if _, has := vm["default"]; has {
						vm["default"] = Sensitive
					}
				}
			}
		}
		if calls, ok := m["module_calls"].(map[string]any); ok {
			for _, c := range calls {
				if cm, ok := c.(map[string]any); ok {
					modules(cm["module"])
				}
			}
		}
	}
	if cfg, ok := v.(map[string]any); ok {
		modules(cfg["root_module"])
	}
	walk(v)
}

// valueKeys are the keys under which plan JSON holds values (rather than
// structure): object keys below them are data and may be secret too.
var valueKeys = map[string]bool{
	"before": true, "after": true, "after_unknown": true,
	"before_sensitive": true, "after_sensitive": true,
	"values": true, "sensitive_values": true, "value": true,
	"constant_value": true, "default": true,
	"before_identity": true, "after_identity": true,
}

// scrub replaces every string containing a secret. Object keys are scrubbed
// too below the keys that hold values (a map keyed by a secret), never in the
// plan's own structure.
func scrub(v any, secrets []string, inValue bool) any {
	switch t := v.(type) {
	case string:
		if containsAny(t, secrets) {
			return Sensitive
		}
		return t
	case map[string]any:
		var renamed []string
		for k, sub := range t {
			t[k] = scrub(sub, secrets, inValue || valueKeys[k])
			if inValue && containsAny(k, secrets) {
				renamed = append(renamed, k)
			}
		}
		sort.Strings(renamed)
		for i, k := range renamed {
			nk := fmt.Sprintf("(sensitive key %d)", i+1)
			t[nk] = t[k]
			delete(t, k)
		}
		return t
	case []any:
		for i := range t {
			t[i] = scrub(t[i], secrets, inValue)
		}
		return t
	case json.Number:
		// A number variable from a Secret is as secret as a string one.
		if containsAny(string(t), secrets) {
			return Sensitive
		}
		return t
	default:
		return v
	}
}

func containsAny(s string, secrets []string) bool {
	for _, sec := range secrets {
		if strings.Contains(s, sec) {
			return true
		}
	}
	return false
}

// minSecretNumber is the fewest digits of a number inside a secret value
// that is redacted on its own: shorter ones (a count of "1") would
// mask every such number in the plan.
const minSecretNumber = 4

// leafStrings returns every string inside v, and every number of at least
// minSecretNumber characters as it is written in JSON.
func leafStrings(v any) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch t := v.(type) {
		case string:
			out = append(out, t)
		case json.Number:
			if len(t) >= minSecretNumber {
				out = append(out, string(t))
			}
		case float64:
			if n := strconv.FormatFloat(t, 'f', -1, 64); len(n) >= minSecretNumber {
				out = append(out, n)
			}
		case map[string]any:
			for _, sub := range t {
				walk(sub)
			}
		case []any:
			for _, sub := range t {
				walk(sub)
			}
		}
	}
	walk(v)
	return out
}

func cleanSecrets(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if s == "" || seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// path walks nested objects.
func path(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
