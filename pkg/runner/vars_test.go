package runner

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/terrarun/terrarun/pkg/stage"
)

func TestHCLQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `""`},
		{"plain", `"plain"`},
		{`a"b`, `"a\"b"`},
		{`a\b`, `"a\\b"`},
		{"a\nb\r\tc", `"a\nb\r\tc"`},
		{"${var.x}", `"$${var.x}"`},
		{"%{if x}", `"%%{if x}"`},
		{"$${x}", `"$$${x}"`},
		{"$ % {}", `"$ % {}"`},
		{"\x00\x1b", `"\u0000\u001B"`},
		{"ünï €", `"ünï €"`},
		{"bad\xffutf8", `"bad\uFFFDutf8"`},
	}
	for _, tt := range tests {
		if got := hclQuote(tt.in); got != tt.want {
			t.Errorf("hclQuote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestTfvars(t *testing.T) {
	got := string(tfvars([]resolvedVar{
		{Variable: stage.Variable{Name: "s"}, value: "v\"1"},
		{Variable: stage.Variable{Name: "l", HCL: true}, value: "[1, 2]\n"},
		{Variable: stage.Variable{Name: "empty", HCL: true}, value: ""},
	}))
	want := "s = \"v\\\"1\"\nl = [1, 2]\nempty = null\n"
	if got != want {
		t.Errorf("tfvars =\n%s\nwant\n%s", got, want)
	}
}

func TestReadVariables(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "v")
	if err := os.WriteFile(f, []byte("from-file"), 0o600); err != nil {
		t.Fatal(err)
	}
	vars, err := readVariables([]stage.Variable{{Name: "a", Value: "lit"}, {Name: "b", File: f, Secret: true}})
	if err != nil {
		t.Fatal(err)
	}
	if vars[0].value != "lit" || vars[1].value != "from-file" || !vars[1].Secret {
		t.Errorf("vars = %+v", vars)
	}
	for _, bad := range [][]stage.Variable{
		{{Name: "a b"}},
		{{Name: "1a"}},
		{{Name: "a"}, {Name: "a"}},
		{{Name: "a", File: filepath.Join(dir, "missing")}},
	} {
		if _, err := readVariables(bad); err == nil {
			t.Errorf("readVariables(%+v) succeeded", bad)
		} else if strings.Contains(err.Error(), "from-file") {
			t.Errorf("error holds a value: %v", err)
		}
	}
}

func TestHCLStringLiterals(t *testing.T) {
	got := hclStringLiterals(`{ user = "admin", pass = "p\"w\\d", tpl = "$${raw}", list = ["a", "b\nc"], n = 3, empty = "" }`)
	want := []string{"admin", `p"w\d`, "${raw}", "a", "b\nc"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := hclStringLiterals(`"unterminated`); len(got) != 1 || got[0] != "unterminated" {
		t.Errorf("got %q", got)
	}
}

func TestBackendConfigSecrets(t *testing.T) {
	if got, err := backendConfigSecrets(""); err != nil || got != nil {
		t.Errorf("no file: %q %v", got, err)
	}
	file := filepath.Join(t.TempDir(), "backend.hcl")
	if err := os.WriteFile(file, []byte("access_key = \"AKIAEXAMPLE\"\nsecret_key = \"wJalr\\\"XUtn\"\nencrypt = true\nregion = \"eu\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := backendConfigSecrets(file)
	if err != nil || strings.Join(got, "|") != `AKIAEXAMPLE|wJalr"XUtn` {
		t.Errorf("values = %q, %v; want the string values of at least 4 bytes", got, err)
	}
	if _, err := backendConfigSecrets(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "reading the backend configuration") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestJSONToHCL: another run's output reaches terraform as the same value,
// with no template sequence in a string interpolated.
func TestJSONToHCL(t *testing.T) {
	for in, want := range map[string]string{
		`"plain"`:                        `"plain"`,
		`"${path.module}"`:               `"$${path.module}"`,
		`["a", 1, true, null, 1.5e300]`:  `["a", 1, true, null, 1.5e300]`,
		`{"b": {"x": "%{if}"}, "a": []}`: `{"a" = [], "b" = {"x" = "%%{if}"}}`,
		`12345678901234567890123456789`:  `12345678901234567890123456789`,
		`not json`:                       `"not json"`,
	} {
		if got := jsonToHCL(in); got != want {
			t.Errorf("jsonToHCL(%s) = %s, want %s", in, got, want)
		}
	}
	got := string(tfvars([]resolvedVar{{Variable: stage.Variable{Name: "o", JSON: true}, value: `{"k": "v"}`}}))
	if got != "o = {\"k\" = \"v\"}\n" {
		t.Errorf("tfvars of a JSON variable = %q", got)
	}
}

// TestJSONStrings: the parts of a JSON value that are redacted.
func TestJSONStrings(t *testing.T) {
	got := jsonStrings(`{"password": "S3cretValue", "zones": ["a", "b"], "port": 5432, "pin": 12345678, "nested": {"k": ["Another1"]}}`)
	slices.Sort(got)
	if want := []string{"12345678", "Another1", "S3cretValue"}; !slices.Equal(got, want) {
		t.Errorf("jsonStrings = %q, want %q", got, want)
	}
	if got := jsonStrings("not json"); got != nil {
		t.Errorf("jsonStrings of a non-JSON value = %q", got)
	}
}
