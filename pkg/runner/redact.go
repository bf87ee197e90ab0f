package runner

import (
	"bytes"
	"encoding/json"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Redacted replaces every secret value in logs, plan text and errors.
const Redacted = "(redacted)"

// secretSet is the set of values that must never be written out. It is safe
// for concurrent use; values can be added while the stage runs.
type secretSet struct {
	mu     sync.RWMutex
	values [][]byte // longest first
	maxLen int
}

func newSecretSet(values ...string) *secretSet {
	s := &secretSet{}
	s.add(values...)
	return s
}

// add adds values and the forms in which they commonly appear in output:
// without surrounding whitespace, and escaped as in a JSON or Go/HCL quoted
// string.
func (s *secretSet) add(values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for _, v := range s.values {
		seen[string(v)] = true
	}
	for _, v := range values {
		for _, form := range secretForms(v) {
			if form == "" || seen[form] {
				continue
			}
			seen[form] = true
			s.values = append(s.values, []byte(form))
		}
	}
	sort.SliceStable(s.values, func(i, j int) bool { return len(s.values[i]) > len(s.values[j]) })
	if len(s.values) > 0 {
		s.maxLen = len(s.values[0])
	}
}

// minLineLen is the shortest line of a multi-line secret that is redacted
// on its own (terraform prints such a value line by line, with prefixes).
const minLineLen = 6

func secretForms(v string) []string {
	// A secret's surrounding whitespace (the newline at the end of a file) is
	// not secret, and redacting it would join lines.
	if t := strings.TrimSpace(v); t != "" {
		v = t
	}
	forms := []string{v}
	if strings.Contains(v, "\n") {
		for _, line := range strings.Split(v, "\n") {
			if line = strings.TrimSpace(line); len(line) >= minLineLen {
				forms = append(forms, line)
			}
		}
	}
	for _, f := range append([]string(nil), forms...) {
		if b, err := json.Marshal(f); err == nil {
			forms = append(forms, string(b[1:len(b)-1]))
		}
		q := strconv.Quote(f)
		forms = append(forms, q[1:len(q)-1])
		// Terraform's own renderer escapes template sequences.
		forms = append(forms, strings.NewReplacer("${", "$${", "%{", "%%{").Replace(f))
	}
	return forms
}

// list returns a copy of the values, longest first.
func (s *secretSet) list() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, len(s.values))
	for i, v := range s.values {
		out[i] = string(v)
	}
	return out
}

// redactString replaces every secret in str.
func (s *secretSet) redactString(str string) string {
	return string(s.redactBytes([]byte(str)))
}

func (s *secretSet) redactBytes(b []byte) []byte {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out, _ := s.scan(b, true, 0)
	return out
}

// scan redacts b, which follows the byte prev (0 at the start). Unless
// final, it stops at the first position from which the rest of b could
// still turn out to be a secret (a proper prefix of one, or a short one
// whose end is not yet known) and returns how many bytes of b it consumed;
// the caller keeps the rest for the next write. s.mu must be held.
func (s *secretSet) scan(b []byte, final bool, prev byte) ([]byte, int) {
	if len(s.values) == 0 {
		return append([]byte(nil), b...), len(b)
	}
	out := make([]byte, 0, len(b))
	i := 0
outer:
	for i < len(b) {
		before := prev
		if i > 0 {
			before = b[i-1]
		}
		for _, v := range s.values {
			if !bytes.HasPrefix(b[i:], v) {
				continue
			}
			if len(v) < minSubstringLen {
				end := i + len(v)
				if isWordByte(before) {
					continue
				}
				if end == len(b) && !final {
					break outer // the next byte decides
				}
				if end < len(b) && isWordByte(b[end]) {
					continue
				}
			}
			out = append(out, Redacted...)
			i += len(v)
			continue outer
		}
		if !final && len(b)-i < s.maxLen {
			rest := b[i:]
			for _, v := range s.values {
				if len(v) > len(rest) && bytes.HasPrefix(v, rest) {
					break outer
				}
			}
		}
		out = append(out, b[i])
		i++
	}
	return out, i
}

// minSubstringLen is the shortest secret redacted wherever it appears. A
// shorter one ("a", "42", "dev") is redacted only where it stands alone, not
// inside a longer word or number: redacting every "a" would make logs
// unreadable, while a value printed on its own (`password = "ab"`) is still
// hidden.
const minSubstringLen = 6

// isWordByte says whether c continues a word or a number.
func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// redactWriter writes to w with every secret replaced. A secret split over
// several writes is still found: bytes that could start a secret are held
// back (at most the longest secret's length minus one) until the next write
// or Flush. It is safe for concurrent use; terraform's stdout and stderr
// share one.
type redactWriter struct {
	mu      sync.Mutex
	secrets *secretSet
	w       io.Writer
	pending []byte
	// prev is the last byte consumed, which the next bytes follow.
	prev byte
}

func newRedactWriter(secrets *secretSet, w io.Writer) *redactWriter {
	return &redactWriter{secrets: secrets, w: w}
}

func (r *redactWriter) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = append(r.pending, p...)
	r.secrets.mu.RLock()
	out, n := r.secrets.scan(r.pending, false, r.prev)
	r.secrets.mu.RUnlock()
	if n > 0 {
		r.prev = r.pending[n-1]
	}
	r.pending = append(r.pending[:0], r.pending[n:]...)
	if len(out) > 0 {
		if _, err := r.w.Write(out); err != nil {
			return len(p), err
		}
	}
	return len(p), nil
}

// Flush writes what is held back.
func (r *redactWriter) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) == 0 {
		return nil
	}
	r.secrets.mu.RLock()
	out, _ := r.secrets.scan(r.pending, true, r.prev)
	r.secrets.mu.RUnlock()
	r.prev = r.pending[len(r.pending)-1]
	r.pending = r.pending[:0]
	_, err := r.w.Write(out)
	return err
}
