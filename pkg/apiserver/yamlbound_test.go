package apiserver

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// aliasBomb is the review's body: one large string named by an anchor and
// repeated through aliases, as an action body.
func aliasBomb(valueBytes, aliases int) string {
	var b strings.Builder
	b.WriteString("apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRunApproval\nplanDigest: sha256:00\ncomment: &c " + strings.Repeat("x", valueBytes) + "\nextra:\n")
	for range aliases {
		b.WriteString("- *c\n")
	}
	return b.String()
}

func TestWithBoundedYAML(t *testing.T) {
	const maxBody = 3 << 20
	bomb := aliasBomb(1<<20, 1000)
	flow := "{a: &x " + strings.Repeat("y", 100<<10) + ", b: [" + strings.Repeat("*x, ", 40) + "*x]}"
	fewAliases := "base: &b {engine: tofu}\nfirst: *b\nsecond: *b\n"
	jsonWithStars := `{"comment":"*important* " }`
	big := strings.Repeat("z", maxBody+10)
	for _, c := range []struct {
		name, contentType, body string
		want                    int
	}{
		{"alias bomb as YAML", "application/yaml", bomb, http.StatusRequestEntityTooLarge},
		{"alias bomb sent as JSON", "application/json", bomb, http.StatusRequestEntityTooLarge},
		{"alias bomb with no content type", "", bomb, http.StatusRequestEntityTooLarge},
		{"alias bomb as a server-side apply patch", "application/apply-patch+yaml", bomb, http.StatusRequestEntityTooLarge},
		{"flow-style bomb as YAML", "application/yaml; charset=utf-8", flow, http.StatusRequestEntityTooLarge},
		{"YAML with aliases that does not parse", "application/yaml", "a: &x [1\nb: *x\n", http.StatusBadRequest},
		{"a few aliases", "application/yaml", fewAliases, http.StatusOK},
		{"a JSON object with stars", "application/json", jsonWithStars, http.StatusOK},
		{"a JSON object that holds the bomb as a string", "application/json", `{"comment":` + `"` + strings.ReplaceAll(bomb, "\n", `\n`) + `"}`, http.StatusOK},
		{"a plan file", "application/octet-stream", bomb, http.StatusOK},
		{"a body over the limit, left to the handler", "application/yaml", big, http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got string
			h := WithBoundedYAML(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got = string(b)
			}), maxBody)
			req := httptest.NewRequest(http.MethodPost, "/apis/terrarun.dev/v1alpha1/namespaces/default/terraformruns/r/approve", strings.NewReader(c.body))
			if c.contentType != "" {
				req.Header.Set("Content-Type", c.contentType)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != c.want {
				t.Fatalf("status %d, want %d: %.300s", w.Code, c.want, w.Body.String())
			}
			switch {
			case c.want == http.StatusOK && got != c.body:
				t.Errorf("the handler got %d bytes of the %d sent", len(got), len(c.body))
			case c.want != http.StatusOK && got != "":
				t.Error("the handler was called with a refused body")
			case c.want == http.StatusRequestEntityTooLarge && !strings.Contains(w.Body.String(), "expands through its aliases"):
				t.Errorf("the refusal does not say why: %s", w.Body.String())
			}
		})
	}
}

// TestCheckYAMLExpansion checks the measure itself: nested aliases multiply, and
// each node is visited once.
func TestCheckYAMLExpansion(t *testing.T) {
	// Ten levels of ten aliases each: 10^10 copies of "lol", in 300 bytes.
	var b strings.Builder
	b.WriteString("l0: &l0 lol\n")
	for i := 1; i <= 10; i++ {
		b.WriteString("l" + strconv.Itoa(i) + ": &l" + strconv.Itoa(i) + " [")
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*l" + strconv.Itoa(i-1))
		}
		b.WriteString("]\n")
	}
	if err := checkYAMLExpansion([]byte(b.String()), 1<<20); err == nil {
		t.Error("billion laughs passed")
	}
	if err := checkYAMLExpansion([]byte("a: &a [1, 2]\nb: [*a, *a]\n"), 1<<10); err != nil {
		t.Errorf("a small document: %v", err)
	}
}
