package planjson

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// FuzzRedact redacts any input with any secret: nothing panics, only what is
// not a JSON object is refused, the result is JSON, and no string or number
// in it holds the secret, whatever its type or place (only the names of the
// plan's own structure may, and the redactor's markers by chance), checked
// for every input Redact accepts.
func FuzzRedact(f *testing.F) {
	real, err := os.ReadFile("testdata/real_plan.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(real, "hunter2-secret")
	for _, seed := range []string{
		`{"variables":{"pin":{"value":73915824}},"resource_changes":[{"change":{"after":{"a":73915824,"b":"x73915824"}}}]}`,
		`{"planned_values":{"outputs":{"o":{"sensitive":false,"value":{"k":["s3cr3t!"]}}}}}`,
		`{"configuration":{"root_module":{"variables":{"v":{"default":"s3cr3t!","sensitive":true}}}}}`,
		`{"resource_changes":[{"change":{"after":{"s3cr3t!":1},"after_sensitive":{"x":true}}}]}`,
		`{"prior_state":{"values":{"root_module":{"resources":[{"values":{"a":[1,2,"s3cr3t!"]},"sensitive_values":{"a":[false,true]}}]}}}}`,
	} {
		f.Add([]byte(seed), "s3cr3t!")
		f.Add([]byte(seed), "73915824")
	}
	// The markers the redactor writes in place of what it hides, which may
	// hold the secret's characters by chance.
	marker := regexp.MustCompile(regexp.QuoteMeta(Sensitive) + `|\(sensitive key \d+\)`)
	f.Fuzz(func(t *testing.T, raw []byte, secret string) {
		out, err := Redact(raw, Options{Secrets: []string{secret}})
		if err != nil {
			// Refused: only what does not start with a JSON object.
			var obj map[string]any
			if json.NewDecoder(bytes.NewReader(raw)).Decode(&obj) == nil && obj != nil {
				t.Fatalf("Redact refused a JSON object: %v", err)
			}
			return
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber()
		var doc any
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("Redact returned invalid JSON %q: %v", out, err)
		}
		if secret == "" {
			return // every string holds it
		}
		holds := func(s string) bool { return strings.Contains(marker.ReplaceAllString(s, ""), secret) }
		var walk func(v any, inValue bool)
		walk = func(v any, inValue bool) {
			switch x := v.(type) {
			case string:
				if holds(x) {
					t.Errorf("the string %q holds the secret %q", x, secret)
				}
			case json.Number:
				if strings.Contains(string(x), secret) {
					t.Errorf("the number %s holds the secret %q", x, secret)
				}
			case map[string]any:
				for k, sub := range x {
					if inValue && holds(k) {
						t.Errorf("the key %q of a value holds the secret %q", k, secret)
					}
					walk(sub, inValue || valueKeys[k])
				}
			case []any:
				for _, sub := range x {
					walk(sub, inValue)
				}
			}
		}
		walk(doc, false)
	})
}
