package local

import (
	"strings"
	"sync"
	"unicode/utf8"
)

// outputTail keeps the last bytes a stage wrote to its stdout and stderr,
// which reach the server through a pipe it made: the server never reads
// what it needs of a stage from a path in the stage's work directory, which
// the stage may replace by a link to the server's keys or by a FIFO.
type outputTail struct {
	mu  sync.Mutex
	buf []byte
	max int
	cut bool
}

// newOutputTail keeps the last limit bytes, and room for the longest of
// secrets, so that a secret cut at the start is still masked.
func newOutputTail(limit int, secrets []string) *outputTail {
	extra := 0
	for _, s := range secrets {
		extra = max(extra, len(s))
	}
	return &outputTail{max: limit + extra}
}

// Write implements io.Writer; it never fails.
func (t *outputTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.max {
		t.cut = t.cut || len(t.buf) > 0 || len(p) > t.max
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.cut = true
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String returns about the last limit bytes written, from a line start when
// the output was cut, as valid UTF-8, with the given secret values masked.
func (t *outputTail) String(limit int, secrets []string) string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	s, cut := string(t.buf), t.cut
	t.mu.Unlock()
	for _, sec := range secrets {
		s = strings.ReplaceAll(s, sec, "***")
	}
	if len(s) > limit {
		s = s[len(s)-limit:]
		cut = true
	}
	if cut {
		if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
			s = s[i+1:]
		}
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
	}
	return strings.TrimRight(strings.ToValidUTF8(s, "\uFFFD"), "\n")
}
