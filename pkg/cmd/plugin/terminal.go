package plugin

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"golang.org/x/term"
)

// terminalWriter writes to a terminal what came from a run (its logs, plan,
// messages and outputs) with every control character escaped but newline
// and tab: a run's code must not retitle the reader's terminal, write its
// clipboard (OSC 52), clear the screen or move the cursor to forge what the
// reader sees. C0 controls, DEL and C1 controls (U+0080 to U+009F) are
// written as Go escapes (\x1b, \u009b), as is every byte that is not UTF-8.
// A rune cut between two writes is held until the next one, or Flush.
type terminalWriter struct {
	w       io.Writer
	pending []byte
}

func newTerminalWriter(w io.Writer) *terminalWriter { return &terminalWriter{w: w} }

// Write implements io.Writer.
func (t *terminalWriter) Write(p []byte) (int, error) {
	data := append(t.pending, p...)
	keep := incompleteRune(data)
	t.pending = append([]byte(nil), data[len(data)-keep:]...)
	if _, err := io.WriteString(t.w, terminalSafe(data[:len(data)-keep])); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what Write held of a rune cut at the end: escaped, since no
// write completes it.
func (t *terminalWriter) Flush() error {
	if len(t.pending) == 0 {
		return nil
	}
	p := t.pending
	t.pending = nil
	_, err := io.WriteString(t.w, terminalSafe(p))
	return err
}

// incompleteRune is the length of the start of a UTF-8 sequence at the end
// of p that more bytes may complete.
func incompleteRune(p []byte) int {
	for i := 1; i <= min(utf8.UTFMax-1, len(p)); i++ {
		if utf8.RuneStart(p[len(p)-i]) {
			if !utf8.FullRune(p[len(p)-i:]) {
				return i
			}
			return 0
		}
	}
	return 0
}

// terminalSafe is p with control characters but newline and tab escaped.
func terminalSafe[T string | []byte](p T) string {
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRuneInString(string(p[i:min(i+utf8.UTFMax, len(p))]))
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, p[i])
			size = 1
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(string(p[i : i+size]))
		}
		i += size
	}
	return b.String()
}

// isTerminal says whether r is a terminal, which echoes what is typed.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
