package runner

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/terrarun/terrarun/pkg/stage"
)

// identRE matches a Terraform identifier: variable names, backend types.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// resolvedVar is a variable with its value read.
type resolvedVar struct {
	stage.Variable
	value string
}

// readVariables reads the values of variables from their files.
func readVariables(vars []stage.Variable) ([]resolvedVar, error) {
	out := make([]resolvedVar, 0, len(vars))
	seen := map[string]bool{}
	for _, v := range vars {
		if !identRE.MatchString(v.Name) {
			return nil, fmt.Errorf("variable name %q is not a valid identifier", v.Name)
		}
		if seen[v.Name] {
			return nil, fmt.Errorf("variable %q is set more than once", v.Name)
		}
		seen[v.Name] = true
		rv := resolvedVar{Variable: v, value: v.Value}
		if v.File != "" {
			b, err := os.ReadFile(v.File)
			if err != nil {
				// The path is not secret, the content is; os errors name only the path.
				return nil, fmt.Errorf("reading the value of variable %q: %w", v.Name, err)
			}
			rv.value = string(b)
		}
		out = append(out, rv)
	}
	return out, nil
}

// tfvars renders variables as a .tfvars (HCL) file: strings quoted, HCL
// values verbatim.
func tfvars(vars []resolvedVar) []byte {
	var b strings.Builder
	for _, v := range vars {
		b.WriteString(v.Name)
		b.WriteString(" = ")
		if v.JSON {
			b.WriteString(jsonToHCL(v.value))
		} else if v.HCL {
			expr := strings.TrimSpace(v.value)
			if expr == "" {
				expr = "null"
			}
			b.WriteString(expr)
		} else {
			b.WriteString(hclQuote(v.value))
		}
		b.WriteString("\n")
	}
	return []byte(b.String())
}

// hclQuote returns s as an HCL quoted string literal that evaluates to
// exactly s: backslashes, quotes and control characters are escaped, and so
// are the template sequences "${" and "%{".
func hclQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\uFFFD`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '"':
			b.WriteString(`\"`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '$' && strings.HasPrefix(s[i+1:], "{"):
			b.WriteString("$$")
		case r == '%' && strings.HasPrefix(s[i+1:], "{"):
			b.WriteString("%%")
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
	return b.String()
}

// minBackendSecret is the shortest value of a backend configSecret that is
// redacted: shorter ones ("1", "true") would mask ordinary words.
const minBackendSecret = 4

// backendConfigSecrets returns the string values of the backend's
// configSecret file (file may be empty): the Secret is secret as a whole, so
// every value in it is redacted.
func backendConfigSecrets(file string) ([]string, error) {
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the backend configuration: %w", err)
	}
	var out []string
	for _, v := range hclStringLiterals(string(b)) {
		if len(strings.TrimSpace(v)) >= minBackendSecret {
			out = append(out, v)
		}
	}
	return out, nil
}

// hclStringLiterals returns the values of the quoted string literals in an
// HCL expression, so that the parts of a secret list or map are redacted
// too. It understands the usual escapes; it does not evaluate templates.
func hclStringLiterals(expr string) []string {
	var out []string
	for i := 0; i < len(expr); i++ {
		if expr[i] != '"' {
			continue
		}
		var b strings.Builder
		j := i + 1
		for ; j < len(expr) && expr[j] != '"'; j++ {
			c := expr[j]
			switch {
			case c == '\\' && j+1 < len(expr):
				j++
				switch expr[j] {
				case 'n':
					b.WriteByte('\n')
				case 'r':
					b.WriteByte('\r')
				case 't':
					b.WriteByte('\t')
				default:
					b.WriteByte(expr[j])
				}
			case (c == '$' || c == '%') && strings.HasPrefix(expr[j+1:], string(c)+"{"):
				b.WriteByte(c) // $${ is a literal ${
				j++
			default:
				b.WriteByte(c)
			}
		}
		if s := b.String(); s != "" {
			out = append(out, s)
		}
		i = j
	}
	return out
}

// jsonToHCL renders a JSON value as the HCL expression of the same value:
// strings quoted by hclQuote (so that no "${" is interpolated), objects and
// arrays element by element. A value that is not JSON is taken as a string.
func jsonToHCL(value string) string {
	v, err := decodeJSON(value)
	if err != nil {
		return hclQuote(value)
	}
	var b strings.Builder
	var render func(v any)
	render = func(v any) {
		switch x := v.(type) {
		case nil:
			b.WriteString("null")
		case bool:
			fmt.Fprint(&b, x)
		case json.Number:
			b.WriteString(x.String())
		case string:
			b.WriteString(hclQuote(x))
		case []any:
			b.WriteString("[")
			for i, e := range x {
				if i > 0 {
					b.WriteString(", ")
				}
				render(e)
			}
			b.WriteString("]")
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			b.WriteString("{")
			for i, k := range keys {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(hclQuote(k))
				b.WriteString(" = ")
				render(x[k])
			}
			b.WriteString("}")
		}
	}
	render(v)
	return b.String()
}

// decodeJSON decodes a JSON value, numbers as json.Number.
func decodeJSON(value string) (any, error) {
	var v any
	d := json.NewDecoder(strings.NewReader(value))
	d.UseNumber()
	err := d.Decode(&v)
	return v, err
}

// jsonStrings returns the strings and numbers a JSON value holds (object
// keys are names, not values), as terraform prints them: the values to
// redact beside the JSON text itself. Like the lines of a multi-line secret,
// parts shorter than minLineLen are left out: redacting "a" or "1" would
// mask every one in the log.
func jsonStrings(value string) []string {
	v, err := decodeJSON(value)
	if err != nil {
		return nil
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case json.Number:
			out = append(out, x.String())
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return slices.DeleteFunc(out, func(s string) bool { return len(s) < minLineLen })
}
