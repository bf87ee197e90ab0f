package plugin

import (
	"bytes"
	"strings"
	"testing"
)

func TestTerminalWriter(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain\ttext\nline 2\n", "plain\ttext\nline 2\n"},
		{"héllo ✓ 日本", "héllo ✓ 日本"},
		{"\x1b]0;pwned\x07title", `\x1b]0;pwned\x07title`},
		{"\x1b]52;c;ZXZpbA==\x07", `\x1b]52;c;ZXZpbA==\x07`},
		{"\x1b[2J\x1b[H\rover", `\x1b[2J\x1b[H\x0dover`},
		{"c1 \u009b31m csi", `c1 \u009b31m csi`},
		{"raw \x9b byte and del \x7f", `raw \x9b byte and del \x7f`},
	} {
		var out bytes.Buffer
		w := newTerminalWriter(&out)
		// One byte at a time: runes and sequences cut between writes.
		for i := range len(c.in) {
			if _, err := w.Write([]byte{c.in[i]}); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if out.String() != c.want {
			t.Errorf("%q written byte by byte: %q, want %q", c.in, out.String(), c.want)
		}
		if got := terminalSafe(c.in); got != c.want {
			t.Errorf("terminalSafe(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	// A rune cut at the very end is escaped on Flush.
	var out bytes.Buffer
	w := newTerminalWriter(&out)
	w.Write([]byte("ok \xe6\x97"))
	w.Flush()
	if out.String() != `ok \xe6\x97` {
		t.Errorf("a cut rune at the end: %q", out.String())
	}
	if strings.ContainsRune(out.String(), 0x1b) {
		t.Error("an escape reached the output")
	}
}
