package runner

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

func TestRedactWriter(t *testing.T) {
	tests := []struct {
		name    string
		secrets []string
		writes  []string
		want    string
	}{
		{"no secrets", nil, []string{"a", "b\n"}, "ab\n"},
		{"whole", []string{"hunter2"}, []string{"pw=hunter2\n"}, "pw=(redacted)\n"},
		{"split over writes", []string{"hunter2"}, []string{"pw=hun", "ter2 ok\n"}, "pw=(redacted) ok\n"},
		{"split in every byte", []string{"hunter2"}, strings.Split("x hunter2 y hunter2\n", ""), "x (redacted) y (redacted)\n"},
		{"prefix that is not a secret", []string{"hunter2"}, []string{"hunt", "ing\n"}, "hunting\n"},
		{"prefix at the end, then flush", []string{"hunter2"}, []string{"a hunte"}, "a hunte"},
		{"overlapping secrets, longest wins", []string{"abc", "abcdef"}, []string{"xabcdefx abc.\n"}, "x(redacted)x (redacted).\n"},
		{"repeated prefix", []string{"aaaab!"}, []string{"aaaaa", "ab!\n"}, "aa(redacted)\n"},
		{"a short secret alone", []string{"ab"}, []string{`pw = "ab"`, "\nab\n"}, `pw = "(redacted)"` + "\n(redacted)\n"},
		{"a short secret inside words stays", []string{"ab"}, []string{"abacus cab ab_1 9ab\n"}, "abacus cab ab_1 9ab\n"},
		{"a short secret split over writes", []string{"42"}, []string{"n = 4", "2\n", "n = 4", "21\n"}, "n = (redacted)\nn = 421\n"},
		{"a short secret at the end", []string{"42"}, []string{"n = 4", "2"}, "n = (redacted)"},
		{"a short secret after a word in the last write", []string{"42"}, []string{"x", "42"}, "x42"},
		{"multi-line secret", []string{"line1\nline2"}, []string{"key: line1\n", "line2\n"}, "key: (redacted)\n"},
		{"surrounding whitespace trimmed", []string{"tok\n"}, []string{"tok is tok\n"}, "(redacted) is (redacted)\n"},
		{"lines of a multi-line secret", []string{"-----KEY-----\nAAAABBBBCCCC\nDDDDEEEE\n"}, []string{"out: AAAABBBBCCCC\n", "out: DDDDEEEE\n"}, "out: (redacted)\nout: (redacted)\n"},
		{"JSON escaped form", []string{`a"b`}, []string{`{"v":"a\"b"}` + "\n"}, `{"v":"(redacted)"}` + "\n"},
		{"empty secret ignored", []string{""}, []string{"abc\n"}, "abc\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			w := newRedactWriter(newSecretSet(tt.secrets...), &out)
			for _, s := range tt.writes {
				n, err := w.Write([]byte(s))
				if err != nil || n != len(s) {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if out.String() != tt.want {
				t.Errorf("got %q, want %q", out.String(), tt.want)
			}
		})
	}
}

// TestRedactWriterHoldsLittle checks that only a possible secret prefix is
// held back: a line is written as soon as it ends.
func TestRedactWriterHoldsLittle(t *testing.T) {
	var out bytes.Buffer
	w := newRedactWriter(newSecretSet("s3cret"), &out)
	_, _ = w.Write([]byte("first line\n"))
	if out.String() != "first line\n" {
		t.Fatalf("held back %q", out.String())
	}
	_, _ = w.Write([]byte("then s3c"))
	if out.String() != "first line\nthen " {
		t.Fatalf("out = %q", out.String())
	}
}

func TestRedactWriterAddLater(t *testing.T) {
	var out bytes.Buffer
	s := newSecretSet()
	w := newRedactWriter(s, &out)
	_, _ = w.Write([]byte("before late\n"))
	s.add("late")
	_, _ = w.Write([]byte("after late\n"))
	if out.String() != "before late\nafter (redacted)\n" {
		t.Errorf("out = %q", out.String())
	}
}

func TestRedactWriterConcurrent(t *testing.T) {
	var out syncBuffer
	w := newRedactWriter(newSecretSet("topsecret"), &out)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				_, _ = w.Write([]byte("value topsecret here\n"))
			}
		}()
	}
	wg.Wait()
	_ = w.Flush()
	if strings.Contains(out.String(), "topsecret") || strings.Count(out.String(), "(redacted)") != 1600 {
		t.Errorf("concurrent writes leaked or lost")
	}
}

func TestRedactString(t *testing.T) {
	s := newSecretSet("p@ss", "user")
	if got := s.redactString("login user:p@ss failed"); got != "login (redacted):(redacted) failed" {
		t.Errorf("got %q", got)
	}
}

// TestStageLogEndsOnItsOwnLine: the stage's final line starts a line of its
// own even when the output before it did not end one, and the log ends
// with a newline.
func TestStageLogEndsOnItsOwnLine(t *testing.T) {
	for name, output := range map[string]string{"mid-line": "Error: no newline", "whole lines": "done\n", "nothing": ""} {
		t.Run(name, func(t *testing.T) {
			srv := newFakeServer(t)
			client, err := NewHTTPClient(srv.spec(v1alpha1.StagePlan, 1))
			if err != nil {
				t.Fatal(err)
			}
			l := &stageLog{open: func(s v1alpha1.StageName, a int32) *logSink {
				return newLogSink(t.Context(), client, s, a, func(*logSink, error) {})
			}}
			l.start(v1alpha1.StagePlan, 1)
			if _, err := l.Write([]byte(output)); err != nil {
				t.Fatal(err)
			}
			if err := l.end([]byte("terrarun: stage plan attempt 1 succeeded\n"), 10*time.Second); err != nil {
				t.Fatal(err)
			}
			got := srv.log(v1alpha1.StagePlan, 1)
			if !strings.HasSuffix(got, "\nterrarun: stage plan attempt 1 succeeded\n") && got != "terrarun: stage plan attempt 1 succeeded\n" {
				t.Errorf("log %q: the final line is not on a line of its own", got)
			}
			if strings.Contains(got, "\n\n") {
				t.Errorf("log %q has an empty line", got)
			}
		})
	}
}
