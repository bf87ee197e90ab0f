package planjson

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/terrarun/terrarun/pkg/stage"
)

// decode returns raw as generic JSON.
func decode(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("invalid JSON %s: %v", raw, err)
	}
	return m
}

func get(v any, keys ...any) any {
	for _, k := range keys {
		switch kk := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[kk]
		case int:
			l, ok := v.([]any)
			if !ok || kk >= len(l) {
				return nil
			}
			v = l[kk]
		}
	}
	return v
}

func TestRedact(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		secrets []string
		opts    *Options
		// want maps a path (keys and indexes) to the expected value after
		// redaction.
		want []struct {
			path []any
			val  any
		}
		absent []string // strings that must not appear in the output
	}{
		{
			name: "resource change with nested object, list and set masks",
			in: `{"format_version":"1.2","resource_changes":[{"address":"x.y","change":{"actions":["update"],
				"before":{"a":"old-secret","b":{"c":"keep","d":"nested-secret"},"l":["p","list-secret"],"m":[{"k":"deep-secret"}]},
				"after":{"a":"new-secret","b":{"c":"keep","d":"nested-secret2"},"l":["p","list-secret2"],"m":[{"k":"deep-secret2"}]},
				"before_sensitive":{"a":true,"b":{"d":true},"l":[false,true],"m":[{"k":true}]},
				"after_sensitive":{"a":true,"b":{"d":true},"l":[false,true],"m":[{"k":true}]}}}]}`,
			want: []struct {
				path []any
				val  any
			}{
				{[]any{"resource_changes", 0, "change", "before", "a"}, Sensitive},
				{[]any{"resource_changes", 0, "change", "before", "b", "c"}, "keep"},
				{[]any{"resource_changes", 0, "change", "before", "b", "d"}, Sensitive},
				{[]any{"resource_changes", 0, "change", "after", "l", 0}, "p"},
				{[]any{"resource_changes", 0, "change", "after", "l", 1}, Sensitive},
				{[]any{"resource_changes", 0, "change", "after", "m", 0, "k"}, Sensitive},
			},
			absent: []string{"secret"},
		},
		{
			name: "whole value sensitive, and a mask that does not match the value's shape",
			in: `{"resource_changes":[{"change":{"actions":["create"],"before":null,"after":{"a":"x"},"before_sensitive":false,"after_sensitive":true}},
				{"change":{"actions":["create"],"before":null,"after":"flat-secret","after_sensitive":{"a":true}}}]}`,
			want: []struct {
				path []any
				val  any
			}{
				{[]any{"resource_changes", 0, "change", "after"}, Sensitive},
				{[]any{"resource_changes", 0, "change", "before"}, nil},
				{[]any{"resource_changes", 1, "change", "after"}, Sensitive},
			},
		},
		{
			name: "resource drift and deferred changes",
			in: `{"resource_drift":[{"change":{"before":{"p":"drift-secret"},"after":{"p":"drift-secret"},"before_sensitive":{"p":true},"after_sensitive":{"p":true}}}],
				"deferred_changes":[{"reason":"x","resource_change":{"change":{"after":{"p":"deferred-secret"},"after_sensitive":{"p":true}}}}]}`,
			absent: []string{"drift-secret", "deferred-secret"},
		},
		{
			name: "outputs: changes, planned values, prior state",
			in: `{"output_changes":{"pw":{"actions":["update"],"before":"old-pw","after":"new-pw","before_sensitive":true,"after_sensitive":true},
				"obj":{"actions":["create"],"before":null,"after":{"u":"user","p":"obj-pw"},"before_sensitive":false,"after_sensitive":{"p":true}},
				"name":{"actions":["no-op"],"before":"n","after":"n","before_sensitive":false,"after_sensitive":false}},
				"planned_values":{"outputs":{"pw":{"sensitive":true,"value":"new-pw"},"name":{"sensitive":false,"value":"n"}}},
				"prior_state":{"values":{"outputs":{"pw":{"sensitive":true,"value":"old-pw","type":"string"}}}}}`,
			want: []struct {
				path []any
				val  any
			}{
				{[]any{"output_changes", "obj", "after", "u"}, "user"},
				{[]any{"output_changes", "obj", "after", "p"}, Sensitive},
				{[]any{"output_changes", "name", "after"}, "n"},
				{[]any{"planned_values", "outputs", "name", "value"}, "n"},
				{[]any{"prior_state", "values", "outputs", "pw", "type"}, "string"},
			},
			absent: []string{"old-pw", "new-pw", "obj-pw"},
		},
		{
			name: "planned values and prior state resources, child modules",
			in: `{"planned_values":{"root_module":{"resources":[{"values":{"a":"keep","b":"pv-secret"},"sensitive_values":{"b":true}}],
				"child_modules":[{"resources":[{"values":{"l":["x","child-secret"]},"sensitive_values":{"l":[false,true]}}],
				"child_modules":[{"resources":[{"values":{"s":"grandchild-secret"},"sensitive_values":{"s":true}}]}]}]}},
				"prior_state":{"values":{"root_module":{"resources":[{"values":{"b":"prior-secret"},"sensitive_values":{"b":true}}]}}}}`,
			want: []struct {
				path []any
				val  any
			}{
				{[]any{"planned_values", "root_module", "resources", 0, "values", "a"}, "keep"},
				{[]any{"planned_values", "root_module", "child_modules", 0, "resources", 0, "values", "l", 0}, "x"},
			},
			absent: []string{"pv-secret", "child-secret", "grandchild-secret", "prior-secret"},
		},
		{
			name: "variables declared sensitive, defaults and constant values",
			in: `{"variables":{"pw":{"value":"var-secret"},"name":{"value":"visible"}},
				"configuration":{"root_module":{"variables":{"pw":{"sensitive":true,"default":"default-secret"},"name":{"default":"visible-default"}},
				"module_calls":{"m":{"expressions":{"x":{"constant_value":"literal-secret"}},"module":{"variables":{"s":{"sensitive":true,"default":"module-default-secret"}}}}},
				"resources":[{"expressions":{"a":{"constant_value":{"nested":"constant-secret"}}}}]}}}`,
			want: []struct {
				path []any
				val  any
			}{
				{[]any{"variables", "name", "value"}, "visible"},
				{[]any{"variables", "pw", "value"}, Sensitive},
				{[]any{"configuration", "root_module", "variables", "name", "default"}, "visible-default"},
			},
			absent: []string{"var-secret", "default-secret", "literal-secret", "constant-secret", "module-default-secret"},
		},
		{
			name:    "secrets anywhere: values, substrings, map keys below values, never structure",
			in:      `{"format_version":"1.2","resource_changes":[{"address":"x","change":{"after":{"note":"prefix-TOPSECRET-suffix","m":{"TOPSECRET":"v"}},"after_sensitive":{}}}],"relevant_attributes":[{"resource":"TOPSECRET"}]}`,
			secrets: []string{"TOPSECRET", ""},
			want: []struct {
				path []any
				val  any
			}{
				{[]any{"format_version"}, "1.2"},
				{[]any{"resource_changes", 0, "change", "after", "note"}, Sensitive},
				{[]any{"resource_changes", 0, "change", "after", "m", "(sensitive key 1)"}, "v"},
				{[]any{"relevant_attributes", 0, "resource"}, Sensitive},
			},
			absent: []string{"TOPSECRET"},
		},
		{
			name: "secret variables not declared sensitive, HCL values",
			in: `{"variables":{"token":{"value":["tok-one","tok-two"]},"plain":{"value":"p"}},
				"resource_changes":[{"change":{"after":{"a":"tok-two"},"after_sensitive":{}}}]}`,
			opts: &Options{SecretVariables: []string{"token"}},
			want: []struct {
				path []any
				val  any
			}{
				{[]any{"variables", "token", "value"}, Sensitive},
				{[]any{"variables", "plain", "value"}, "p"},
				{[]any{"resource_changes", 0, "change", "after", "a"}, Sensitive},
			},
			absent: []string{"tok-one", "tok-two"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{Secrets: tt.secrets}
			if tt.opts != nil {
				opts = *tt.opts
			}
			out, err := Redact([]byte(tt.in), opts)
			if err != nil {
				t.Fatal(err)
			}
			doc := decode(t, out)
			for _, w := range tt.want {
				if got := get(doc, w.path...); !reflect.DeepEqual(got, w.val) {
					t.Errorf("%v = %#v, want %#v", w.path, got, w.val)
				}
			}
			for _, a := range tt.absent {
				if strings.Contains(string(out), a) {
					t.Errorf("output holds %q:\n%s", a, out)
				}
			}
		})
	}
}

func TestRedactKeepsNumbersAndHTML(t *testing.T) {
	in := `{"variables":{"n":{"value":12345678901234567890},"h":{"value":"<a&b>"}}}`
	out, err := Redact([]byte(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "12345678901234567890") || !strings.Contains(string(out), "<a&b>") {
		t.Errorf("output changed values: %s", out)
	}
}

// TestRedactSecretNumbers: a number variable from a Secret (hcl: true) is
// redacted wherever it appears, as a number or inside a string, and so are
// the long numbers inside a secret object; short ones are not, or every
// count would be.
func TestRedactSecretNumbers(t *testing.T) {
	in := `{"variables":{"pin":{"value":73915824},"obj":{"value":{"port":5432,"n":1}}},
"resource_changes":[{"change":{"after":{"a":73915824,"b":"x73915824","c":[5432],"d":1,"e":7391}}}],
"planned_values":{"outputs":{"o":{"value":73915824}}}}`
	out, err := Redact([]byte(in), Options{Secrets: []string{"73915824"}, SecretVariables: []string{"obj"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"73915824", "5432"} {
		if strings.Contains(string(out), s) {
			t.Errorf("%s is in the redacted plan: %s", s, out)
		}
	}
	m := decode(t, out)
	if d := get(m, "resource_changes", 0, "change", "after", "d"); d != float64(1) {
		t.Errorf("the short number 1 was redacted: %s", out)
	}
	if e := get(m, "resource_changes", 0, "change", "after", "e"); e != float64(7391) {
		t.Errorf("7391 was redacted though no secret holds it: %s", out)
	}
	p := &tfjson.Plan{Variables: map[string]*tfjson.PlanVariable{"obj": {Value: map[string]any{"port": float64(5432), "n": float64(1), "s": "str"}}}}
	if got := VariableStrings(p, []string{"obj"}); !reflect.DeepEqual(got, []string{"5432", "str"}) {
		t.Errorf("VariableStrings = %q, want the long number and the string", got)
	}
}

func TestRedactInvalid(t *testing.T) {
	for _, in := range []string{``, `not json`, `[1,2]`, `null`} {
		if _, err := Redact([]byte(in), Options{}); err == nil {
			t.Errorf("Redact(%q) succeeded", in)
		}
	}
}

// TestRedactRealPlan uses the output of `terraform show -json` for the
// configuration in testdata/real_plan_config (terraform 1.11, variables from
// t.tfvars).
func TestRedactRealPlan(t *testing.T) {
	raw, err := os.ReadFile("testdata/real_plan.json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "hunter2-very-secret") {
		t.Fatal("fixture should hold the secret before redaction")
	}

	out, err := Redact(raw, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Everything terraform marks sensitive is gone; what it does not mark
	// (a map of tags containing the secret) stays without the secrets list.
	for _, s := range []string{`"hunter2-very-secret"`, "default-pw-123"} {
		if strings.Contains(string(out), s) {
			t.Errorf("redacted plan holds %s", s)
		}
	}
	doc := decode(t, out)
	if got := get(doc, "configuration", "root_module", "module_calls", "inner", "expressions", "note", "constant_value"); got != Sensitive {
		t.Errorf("constant value = %v", got)
	}
	if got := get(doc, "planned_values", "root_module", "child_modules", 0, "resources", 0, "values", "input"); !reflect.DeepEqual(got, []any{"literal-note", Sensitive}) {
		t.Errorf("module resource input = %v", got)
	}
	if !strings.Contains(string(out), "team-hunter2-very-secret") {
		t.Errorf("unmarked value was redacted without a secrets list")
	}
	if !strings.Contains(string(out), `"visible"`) {
		t.Errorf("non-sensitive value was redacted")
	}

	out, err = Redact(raw, Options{Secrets: []string{"hunter2-very-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "hunter2") {
		t.Errorf("redacted plan holds the secret:\n%s", out)
	}

	// The result is still a plan tfjson understands, with the same summary.
	var p, orig tfjson.Plan
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &orig); err != nil {
		t.Fatal(err)
	}
	want := stage.Result{Add: 3, HasChanges: true}
	if got := Summarize(&p); got != want {
		t.Errorf("Summarize(redacted) = %+v, want %+v", got, want)
	}
	if got := Summarize(&orig); got != want {
		t.Errorf("Summarize(original) = %+v, want %+v", got, want)
	}
	if got := VariableStrings(&orig, []string{"tags", "missing"}); !reflect.DeepEqual(got, []string{"prod", "team-hunter2-very-secret"}) {
		t.Errorf("VariableStrings = %q", got)
	}
}

func TestSummarize(t *testing.T) {
	rc := func(mode tfjson.ResourceMode, importing bool, actions ...tfjson.Action) *tfjson.ResourceChange {
		c := &tfjson.ResourceChange{Mode: mode, Change: &tfjson.Change{Actions: actions}}
		if importing {
			c.Change.Importing = &tfjson.Importing{ID: "i-1"}
		}
		return c
	}
	m := tfjson.ManagedResourceMode
	tests := []struct {
		name string
		plan *tfjson.Plan
		want stage.Result
	}{
		{"nil", nil, stage.Result{}},
		{"empty", &tfjson.Plan{}, stage.Result{}},
		{"no-op and reads", &tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{
			rc(m, false, tfjson.ActionNoop), rc(tfjson.DataResourceMode, false, tfjson.ActionRead),
		}}, stage.Result{}},
		{"each action", &tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{
			rc(m, false, tfjson.ActionCreate),
			rc(m, false, tfjson.ActionCreate),
			rc(m, false, tfjson.ActionUpdate),
			rc(m, false, tfjson.ActionDelete),
			rc(m, false, tfjson.ActionDelete, tfjson.ActionCreate),
			rc(m, false, tfjson.ActionCreate, tfjson.ActionDelete),
		}}, stage.Result{Add: 4, Change: 1, Destroy: 3, HasChanges: true}},
		{"import without change", &tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{
			rc(m, true, tfjson.ActionNoop),
		}}, stage.Result{Import: 1, HasChanges: true}},
		{"import with update", &tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{
			rc(m, true, tfjson.ActionUpdate),
		}}, stage.Result{Import: 1, Change: 1, HasChanges: true}},
		{"output change only", &tfjson.Plan{
			ResourceChanges: []*tfjson.ResourceChange{rc(m, false, tfjson.ActionNoop)},
			OutputChanges:   map[string]*tfjson.Change{"o": {Actions: tfjson.Actions{tfjson.ActionCreate}}},
		}, stage.Result{HasChanges: true}},
		{"output no-op", &tfjson.Plan{
			OutputChanges: map[string]*tfjson.Change{"o": {Actions: tfjson.Actions{tfjson.ActionNoop}}},
		}, stage.Result{}},
		{"forget", &tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{
			rc(m, false, tfjson.ActionForget),
		}}, stage.Result{HasChanges: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Summarize(tt.plan); got != tt.want {
				t.Errorf("Summarize = %+v, want %+v", got, tt.want)
			}
		})
	}
}
