package apiserver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"go.yaml.in/yaml/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
)

// YAML bodies are bounded before they are expanded. A YAML document can
// name one large value with an anchor (&a) and repeat it through aliases
// (*a) a thousand times: 1 MB on the wire becomes a gigabyte once converted
// to JSON, which every YAML decoder of the API server does before anything
// is checked. The aliases' expansion is measured on the parsed document,
// which keeps each value once, and a body that would grow past what the
// server accepts is refused.
const (
	// yamlExpansionFactor is how many times its own size a YAML body may
	// grow through its aliases.
	yamlExpansionFactor = 8
	// yamlExpansionFloor is what any YAML body may expand to, however
	// small: a hand-written document that repeats a block a few times.
	yamlExpansionFloor = 64 << 10
)

// WithBoundedYAML refuses with 413 a request whose body is YAML that expands
// through its aliases to more than yamlExpansionFactor times its size (at
// least yamlExpansionFloor) or to more than maxBody, the largest body the
// server reads. Bodies the server decodes as YAML are checked: those sent
// as YAML (application/yaml, application/apply-patch+yaml) and those sent
// as JSON that are not a JSON object, which the group's JSON decoder
// converts from YAML (yamlTolerantJSON). It belongs after authentication:
// only a user's request is read ahead.
func WithBoundedYAML(h http.Handler, maxBody int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		kind := decodedAs(req.Header.Get("Content-Type"))
		if req.Body == nil || req.Body == http.NoBody || kind == notYAML {
			h.ServeHTTP(w, req)
			return
		}
		limit := maxBody
		if limit <= 0 {
			limit = 3 << 20
		}
		body, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
		if err != nil {
			responsewriters.ErrorNegotiated(apierrors.NewBadRequest("reading the request body: "+err.Error()), Codecs, metav1.SchemeGroupVersion, w, req)
			return
		}
		// What is beyond the limit is left for the handler, which refuses it.
		req.Body = readCloser{io.MultiReader(bytes.NewReader(body), req.Body), req.Body}
		if int64(len(body)) <= limit && (kind == yamlBody || !startsJSONObject(body)) {
			bound := min(max(yamlExpansionFactor*int64(len(body)), yamlExpansionFloor), limit)
			if err := checkYAMLExpansion(body, bound); err != nil {
				responsewriters.ErrorNegotiated(err, Codecs, metav1.SchemeGroupVersion, w, req)
				return
			}
		}
		h.ServeHTTP(w, req)
	})
}

type readCloser struct {
	io.Reader
	io.Closer
}

type bodyKind int

const (
	notYAML bodyKind = iota
	// jsonBody is a body sent as JSON, which is read as YAML when it is not
	// a JSON object.
	jsonBody
	yamlBody
)

// decodedAs says how the server decodes a body of contentType.
func decodedAs(contentType string) bodyKind {
	media, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		media = strings.ToLower(strings.TrimSpace(contentType))
	}
	switch {
	case strings.HasSuffix(media, "yaml"):
		return yamlBody
	case media == "", strings.HasSuffix(media, "json"):
		return jsonBody
	}
	return notYAML
}

func startsJSONObject(body []byte) bool {
	trimmed := bytes.TrimSpace(body)
	return len(trimmed) > 0 && trimmed[0] == '{'
}

// checkYAMLExpansion returns a 413 error when the YAML documents in body,
// with every alias replaced by what it names, hold more than bound bytes of
// values, and a 400 error when a body with aliases does not parse: what
// cannot be measured is not expanded. A body without aliases is not parsed.
func checkYAMLExpansion(body []byte, bound int64) error {
	if !bytes.ContainsRune(body, '*') {
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(body))
	total := int64(0)
	sizes := map[*yaml.Node]int64{}
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("the body is YAML with aliases (*name) that does not parse: %v; fix it, or send JSON", err))
		}
		total += expandedSize(&doc, sizes, bound)
		if total > bound {
			return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
				"the YAML body (%d bytes) expands through its aliases (*name) to more than %d bytes, the most it may: %d times its size, at least %d bytes, at most the server's request limit; "+
					"repeat the values instead of aliasing them, or send JSON", len(body), bound, yamlExpansionFactor, yamlExpansionFloor))
		}
	}
}

// expandedSize is the number of bytes of values in n with its aliases
// expanded, saturated above bound. sizes memoizes it for each node, so that
// a chain of aliases of aliases costs one visit of each node.
func expandedSize(n *yaml.Node, sizes map[*yaml.Node]int64, bound int64) int64 {
	if n == nil {
		return 0
	}
	if s, ok := sizes[n]; ok {
		return s
	}
	// A node being measured counts as over the bound if it is reached
	// again: an alias inside its own anchor.
	sizes[n] = bound + 1
	size := int64(len(n.Value)) + 2
	if n.Kind == yaml.AliasNode {
		size = expandedSize(n.Alias, sizes, bound)
	}
	for _, c := range n.Content {
		size += expandedSize(c, sizes, bound)
		if size > bound {
			break
		}
	}
	size = min(size, bound+1)
	sizes[n] = size
	return size
}
