package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"
)

// TestCitedTestsExist checks every test a document cites: the function
// exists in the file (or directory) the document names, and the subtests it
// quotes are string literals of that file. See the package comment for the
// rule that ties a test name to its file.
func TestCitedTestsExist(t *testing.T) {
	r := loadRepo(t)
	cited := 0
	for _, d := range r.docs {
		for _, b := range d.blocks {
			cited += r.checkCitations(d, b, t.Errorf)
		}
	}
	if cited < 100 {
		t.Errorf("only %d citations found in README.md and docs/*.md: the parser lost them", cited)
	}
}

// TestQuotedMessagesArePrinted checks that every message the documents quote
// as terrarun's (see the package comment for how one is quoted) is printed by
// a string literal of the code.
func TestQuotedMessagesArePrinted(t *testing.T) {
	r := loadRepo(t)
	quoted := 0
	for _, d := range r.docs {
		for _, m := range d.messages {
			quoted++
			r.checkMessage(t, d, m)
		}
	}
	if quoted < 10 {
		t.Errorf("only %d quoted messages found in README.md and docs/*.md: the parser lost them", quoted)
	}
}

// TestLinksResolve checks that every relative link of the documents names a
// file or directory of the repository and, with a #fragment, a heading of
// that file.
func TestLinksResolve(t *testing.T) {
	r := loadRepo(t)
	for _, d := range r.docs {
		for _, l := range d.links {
			r.checkLink(t, d, l)
		}
	}
}

// TestPrinted checks the matcher of quoted messages against literals: what it
// takes as printed, and what it refuses.
func TestPrinted(t *testing.T) {
	lits := []literal{
		newLiteral("host %q is not allowed by the cluster policy; allowed hosts: %s", "a.go"),
		newLiteral("name a branch, tag or commit, such as main or v1.2.0", "b.go"),
		newLiteral("%s exceeds the cluster policy maximum of %s (%s); use at most %s", "c.go"),
		newLiteral("%s: %s", "d.go"),
		newLiteral("%s is required", "e.go"),
	}
	for _, tc := range []struct {
		quote string
		want  bool
	}{
		{`spec.source.git.url: host "evil.example" is not allowed by the cluster policy; allowed hosts: github.com, *.corp.example.com`, true},
		{`* spec.source.git.ref: Required value: name a branch, tag or commit, such as main or v1.2.0`, true},
		{`spec.timeouts.plan: 3h exceeds the cluster policy maximum of 2h (maxTimeouts.plan); use at most 2h`, true},
		{`spec.source.git.url: host "evil.example" is not allowed by the cluster policy; ...`, true},
		{`Error from server (Forbidden): error when creating "run.yaml": terraformruns.terrarun.dev "x" is forbidden: spec.source.git.url: host "x" is not allowed by the cluster policy; allowed hosts: y`, true},
		// A message the code no longer prints: the words of two literals,
		// or a verb standing for most of it, do not make it.
		{`* spec.source.git.ref: Required value: a branch, tag or commit is required`, false},
		{`spec.source.git.url: host "evil.example" is refused by the cluster policy`, false},
		{`spec.creator: is chosen by the server`, false},
	} {
		if got, why := printed(ownWords(tc.quote), lits); got != tc.want {
			t.Errorf("printed(%q) = %v, want %v (%s)", tc.quote, got, tc.want, why)
		}
	}
}

// TestCitationRules checks how a citation is tied to its file, on prose
// written for the purpose against this repository's tests.
func TestCitationRules(t *testing.T) {
	r := loadRepo(t)
	for _, tc := range []struct {
		prose string
		bad   int // problems expected
	}{
		{"`pkg/executor/local/sandbox_test.go: TestHandOver`, `TestHandOverWholeTree`", 0},
		// A name after another file's citation is that file's.
		{"`test/e2e/options_test.go: TestOptionsChangedWhileRunning`, `TestStartForgedPluginCache`", 1},
		// A ";" or a sentence's end ends the clause: the name is looked up
		// anywhere.
		{"`test/e2e/options_test.go: TestOptionsChangedWhileRunning`; `TestStartForgedPluginCache`", 0},
		{"`test/e2e/options_test.go: TestOptionsChangedWhileRunning`. `TestStartForgedPluginCache`", 0},
		// But not one inside parentheses.
		{"`test/e2e/options_test.go: TestOptionsChangedWhileRunning` (a; b), `TestStartForgedPluginCache`", 1},
		// A directory is a subject too.
		{"`pkg/sandbox`'s `TestSandbox`", 0},
		{"`pkg/sandbox`'s `TestHandOver`", 1},
		// Subtests are string literals of the test's file.
		{"`pkg/registry/terraformrun/approve_test.go: TestApprove` (\"stale digest\", \"wrong phase\")", 0},
		{"`pkg/registry/terraformrun/approve_test.go: TestApprove` (\"stale\ndigest\")", 0},
		{"`pkg/registry/terraformrun/approve_test.go: TestApprove` (\"a subtest nobody wrote\")", 1},
		// Files and functions that do not exist.
		{"`pkg/nowhere/gone_test.go: TestGone`", 1},
		{"`pkg/runner/runner.go: noSuchFunc`", 1},
		{"`TestNoSuchTestAnywhere`", 1},
	} {
		var problems []string
		d := parseDoc("prose.md", tc.prose+"\n")
		for _, b := range d.blocks {
			r.checkCitations(d, b, func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) })
		}
		if len(problems) != tc.bad {
			t.Errorf("%s: %d problems, want %d: %q", tc.prose, len(problems), tc.bad, problems)
		}
	}
}

// ---------------------------------------------------------------------------
// The repository

// repo is what the checks read: the documents, the Go sources' functions and
// the string literals of the code.
type repo struct {
	root string
	docs []*doc
	// tests maps a test, fuzz, benchmark or example function to the
	// _test.go files (relative paths) that define it.
	tests map[string][]string
	// literals are the string literals of the non-test Go files under pkg/
	// and cmd/ (generated code aside), split into text and format verbs.
	literals []literal

	mu      sync.Mutex
	sources map[string]string // relative path -> content, read on demand
}

var (
	repoOnce sync.Once
	theRepo  *repo
	repoErr  error
)

func loadRepo(t *testing.T) *repo {
	t.Helper()
	repoOnce.Do(func() { theRepo, repoErr = newRepo() })
	if repoErr != nil {
		t.Fatal(repoErr)
	}
	return theRepo
}

func newRepo() (*repo, error) {
	root, err := findRoot()
	if err != nil {
		return nil, err
	}
	r := &repo{root: root, tests: map[string][]string{}, sources: map[string]string{}}
	names := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	for _, m := range more {
		names = append(names, filepath.ToSlash(strings.TrimPrefix(m, root+string(filepath.Separator))))
	}
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			return nil, err
		}
		r.docs = append(r.docs, parseDoc(name, string(data)))
	}
	testFunc := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark|Example)\w*)\(`)
	for _, top := range []string{"pkg", "cmd", "test", "hack", "charts"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			rel := filepath.ToSlash(strings.TrimPrefix(path, root+string(filepath.Separator)))
			if strings.HasSuffix(path, "_test.go") {
				src, err := r.source(rel)
				if err != nil {
					return err
				}
				for _, m := range testFunc.FindAllStringSubmatch(src, -1) {
					r.tests[m[1]] = append(r.tests[m[1]], rel)
				}
				return nil
			}
			if top != "pkg" && top != "cmd" || strings.HasPrefix(rel, "pkg/generated/") {
				return nil
			}
			lits, err := stringLiterals(path)
			if err != nil {
				return err
			}
			for _, l := range lits {
				r.literals = append(r.literals, newLiteral(l, rel))
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
	}
	return r, nil
}

// findRoot returns the nearest directory at or above the working directory
// that holds go.mod.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// source returns the content of the file at rel, a path relative to the
// repository's root.
func (r *repo) source(rel string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.sources[rel]; ok {
		return s, nil
	}
	data, err := os.ReadFile(filepath.Join(r.root, rel))
	if err != nil {
		return "", err
	}
	r.sources[rel] = string(data)
	return string(data), nil
}

// stat reports whether rel (relative to the root) exists and is a directory.
func (r *repo) stat(rel string) (exists, dir bool) {
	fi, err := os.Stat(filepath.Join(r.root, filepath.FromSlash(rel)))
	if err != nil {
		return false, false
	}
	return true, fi.IsDir()
}

// stringLiterals returns the string literals of a Go file, unquoted.
func stringLiterals(path string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				out = append(out, s)
			}
		}
		return true
	})
	return out, nil
}

// ---------------------------------------------------------------------------
// Markdown, as far as the checks need it

// doc is one Markdown file cut into the pieces the checks read.
type doc struct {
	name     string
	blocks   []block   // prose: paragraphs, list items, table cells, headings
	messages []message // quoted messages of terrarun
	links    []link
	headings map[string]bool // GitHub's anchors of its headings
}

// block is a stretch of prose within which a cited file stays the subject.
type block struct {
	text  string
	lines []int // the line number of each byte of text
}

// message is a quoted message and where it was quoted.
type message struct {
	text string
	line int
}

// link is a relative link's target and its line.
type link struct {
	target string
	line   int
}

var (
	fence     = regexp.MustCompile("^\\s*(```+|~~~+)\\s*(\\S*)")
	listItem  = regexp.MustCompile(`^\s*(?:[-*+]|\d+\.)\s`)
	tableSep  = regexp.MustCompile(`^\s*\|?\s*:?-{3,}`)
	heading   = regexp.MustCompile(`^#{1,6}\s+(.*)$`)
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	outputMsg = regexp.MustCompile(`^(?:Error from server|error: |The [A-Za-z]+ "[^"]*" is invalid)`)
	onlyPath  = regexp.MustCompile(`^` + fieldPath + `$`)
	fieldMsg  = regexp.MustCompile(`^` + fieldPath + `: (?:Invalid value|Required value|Forbidden|Unsupported value|Duplicate value|Not found|Too long|Too many|Internal error)(?::|$)`)
)

// fieldPath is a field path as apimachinery prints it: spec.a.b[0].c.
const fieldPath = `[A-Za-z_][\w-]*(?:\[[^\]]*\])*(?:\.[A-Za-z_][\w-]*(?:\[[^\]]*\])*)*`

func parseDoc(name, content string) *doc {
	d := &doc{name: name, headings: map[string]bool{}}
	var cur block
	flush := func() {
		if cur.text != "" {
			d.blocks = append(d.blocks, cur)
		}
		cur = block{}
	}
	add := func(b *block, s string, line int) {
		if b.text != "" {
			b.text += "\n"
			b.lines = append(b.lines, line)
		}
		b.text += s
		for range len(s) {
			b.lines = append(b.lines, line)
		}
	}
	slugs := map[string]int{}
	lines := strings.Split(content, "\n")
	inFence, fenceMark, fenceInfo := false, "", ""
	messageCol, inTable, afterOutput := -1, false, false
	for i, l := range lines {
		n := i + 1
		if m := fence.FindStringSubmatch(l); m != nil && (!inFence || strings.HasPrefix(strings.TrimSpace(l), fenceMark) && m[2] == "") {
			flush()
			if inFence {
				inFence = false
			} else {
				inFence, fenceMark, fenceInfo, afterOutput = true, m[1], m[2], false
			}
			continue
		}
		if inFence {
			if fenceInfo == "" {
				switch {
				case outputMsg.MatchString(l):
					d.messages = append(d.messages, message{l, n})
					afterOutput = true
				case afterOutput && strings.HasPrefix(l, "* "):
					d.messages = append(d.messages, message{l, n})
				default:
					afterOutput = false
				}
			}
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(withoutCode(l), -1) {
			d.links = append(d.links, link{m[1], n})
		}
		trimmed := strings.TrimSpace(l)
		switch {
		case trimmed == "":
			flush()
			inTable = false
		case strings.HasPrefix(trimmed, "|"):
			flush()
			cells := splitRow(trimmed)
			if !inTable { // the header
				inTable, messageCol = true, -1
				for k, c := range cells {
					if strings.EqualFold(strings.Trim(strings.TrimSpace(c), "`*"), "message") {
						messageCol = k
					}
				}
				continue
			}
			if tableSep.MatchString(trimmed) {
				continue
			}
			for k, c := range cells {
				var b block
				add(&b, c, n)
				d.blocks = append(d.blocks, b)
				if k == messageCol {
					for _, s := range spans(c) {
						if s.code && !onlyPath.MatchString(s.text) {
							d.messages = append(d.messages, message{s.text, n})
						}
					}
				}
			}
		case heading.MatchString(trimmed):
			flush()
			h := heading.FindStringSubmatch(trimmed)[1]
			add(&cur, h, n)
			flush()
			slug := slugify(h)
			if k := slugs[slug]; k > 0 {
				d.headings[fmt.Sprintf("%s-%d", slug, k)] = true
			} else {
				d.headings[slug] = true
			}
			slugs[slug]++
		case listItem.MatchString(l):
			flush()
			add(&cur, l, n)
		default:
			add(&cur, l, n)
		}
	}
	flush()
	// Code spans of prose that quote a field error.
	for _, b := range d.blocks {
		for _, s := range spans(b.text) {
			if s.code && fieldMsg.MatchString(s.text) && !slices.ContainsFunc(d.messages, func(m message) bool { return m.text == s.text }) {
				d.messages = append(d.messages, message{s.text, b.lines[s.at]})
			}
		}
	}
	return d
}

// splitRow splits a table row into its cells at every unescaped "|".
func splitRow(row string) []string {
	row = strings.TrimSuffix(strings.TrimPrefix(row, "|"), "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '\\' && i+1 < len(row) && row[i+1] == '|':
			cur.WriteByte('|')
			i++
		case row[i] == '|':
			cells = append(cells, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(row[i])
		}
	}
	return append(cells, cur.String())
}

// span is a piece of prose: plain text, or the content of a code span.
type span struct {
	text string
	code bool
	at   int // offset of the piece in the text it was cut from
}

// spans cuts text into plain text and code spans (a run of n backticks up to
// the next run of exactly n).
func spans(text string) []span {
	var out []span
	start := 0
	for i := 0; i < len(text); {
		if text[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(text) && text[i+n] == '`' {
			n++
		}
		closeAt := -1
		for j := i + n; j < len(text); {
			if text[j] != '`' {
				j++
				continue
			}
			k := 0
			for j+k < len(text) && text[j+k] == '`' {
				k++
			}
			if k == n {
				closeAt = j
				break
			}
			j += k
		}
		if closeAt < 0 {
			i += n
			continue
		}
		if start < i {
			out = append(out, span{text[start:i], false, start})
		}
		content := text[i+n : closeAt]
		if len(content) > 2 && content[0] == ' ' && content[len(content)-1] == ' ' {
			content = content[1 : len(content)-1]
		}
		out = append(out, span{strings.ReplaceAll(content, "\n", " "), true, i})
		i = closeAt + n
		start = i
	}
	if start < len(text) {
		out = append(out, span{text[start:], false, start})
	}
	return out
}

// withoutCode blanks the code spans of a line, whose brackets are no links.
func withoutCode(line string) string {
	var b strings.Builder
	for _, s := range spans(line) {
		if s.code {
			b.WriteString(strings.Repeat(" ", len(s.text)))
		} else {
			b.WriteString(s.text)
		}
	}
	return b.String()
}

// slugify is GitHub's anchor of a heading: lower case, code marks and
// punctuation but hyphens and underscores dropped, spaces as hyphens.
func slugify(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// ---------------------------------------------------------------------------
// Citations

var (
	// fileCite is `path/to/file.go: Name` or `path/to/file.go: A, B`.
	fileCite = regexp.MustCompile(`^([\w.-]+(?:/[\w.-]+)+\.go): ([A-Za-z_]\w*(?:, ?[A-Za-z_]\w*)*)$`)
	// testCite is `TestName`, or several, comma-separated.
	testCite = regexp.MustCompile(`^(?:Test|Fuzz|Benchmark|Example)\w*(?:, ?(?:Test|Fuzz|Benchmark|Example)\w*)*$`)
	// repoPath is a path of the repository, as a document names one.
	repoPath = regexp.MustCompile(`^[\w.-]+(?:/[\w.-]+)+/?$`)
	// subtests are the quoted strings of a parenthesis that opens with one.
	subtestList = regexp.MustCompile(`^\s*\(\s*"`)
	quoted      = regexp.MustCompile(`"([^"]+)"`)
)

// checkCitations checks the citations of one block, reports what is wrong
// with errorf, and returns how many names it checked.
func (r *repo) checkCitations(d *doc, b block, errorf func(string, ...any)) int {
	checked := 0
	subject := "" // the file or directory the clause cites
	depth := 0
	ss := spans(b.text)
	for k, s := range ss {
		where := fmt.Sprintf("%s:%d", d.name, b.lines[s.at])
		if !s.code {
			for i := 0; i < len(s.text); i++ {
				switch c := s.text[i]; {
				case c == '(':
					depth++
				case c == ')':
					depth = max(depth-1, 0)
				case depth == 0 && c == ';':
					subject = ""
				case depth == 0 && c == '.' && (i+1 == len(s.text) || s.text[i+1] == ' ' || s.text[i+1] == '\n'):
					subject = ""
				}
			}
			continue
		}
		var next string
		if k+1 < len(ss) && !ss[k+1].code {
			next = ss[k+1].text
		}
		switch {
		case fileCite.MatchString(s.text):
			m := fileCite.FindStringSubmatch(s.text)
			file := m[1]
			if ok, dir := r.stat(file); !ok || dir {
				errorf("%s: `%s` cites %s, which does not exist", where, s.text, file)
				subject = ""
				continue
			}
			subject = file
			for _, name := range splitNames(m[2]) {
				checked++
				if !r.defines(file, name) {
					errorf("%s: `%s` cites %s in %s, which has no func %s%s", where, s.text, name, file, name, r.elsewhere(name))
				} else {
					r.checkSubtests(where, name, []string{file}, next, errorf)
				}
			}
		case testCite.MatchString(s.text):
			for _, name := range splitNames(s.text) {
				checked++
				files := r.tests[name]
				if subject != "" {
					files = slices.DeleteFunc(slices.Clone(files), func(f string) bool {
						return f != subject && filepath.ToSlash(filepath.Dir(f)) != strings.TrimSuffix(subject, "/")
					})
				}
				switch {
				case len(files) > 0:
					r.checkSubtests(where, name, files, next, errorf)
				case subject != "":
					errorf("%s: `%s` is cited for %s, which has no func %s%s", where, name, subject, name, r.elsewhere(name))
				default:
					errorf("%s: `%s` is cited, and no _test.go file of the repository has func %s", where, name, name)
				}
			}
		case repoPath.MatchString(s.text):
			ok, dir := r.stat(s.text)
			switch {
			case ok && (dir || strings.HasSuffix(s.text, ".go")):
				subject = s.text
			case !ok && strings.HasSuffix(s.text, ".go"):
				errorf("%s: `%s` names a file that does not exist", where, s.text)
				subject = ""
			default:
				subject = ""
			}
		}
	}
	return checked
}

func splitNames(s string) []string {
	var out []string
	for _, n := range strings.Split(s, ",") {
		out = append(out, strings.TrimSpace(n))
	}
	return out
}

// defines reports whether the Go file file declares a func (or method) name.
func (r *repo) defines(file, name string) bool {
	src, err := r.source(file)
	if err != nil {
		return false
	}
	return regexp.MustCompile(`(?m)^func (?:\([^)]*\) )?` + regexp.QuoteMeta(name) + `[\[(]`).MatchString(src)
}

// elsewhere says where a test is defined, for a citation that names the
// wrong file.
func (r *repo) elsewhere(name string) string {
	if files := r.tests[name]; len(files) > 0 {
		return fmt.Sprintf(" (it is in %s)", strings.Join(files, ", "))
	}
	if testCite.MatchString(name) {
		return " (no _test.go file has it)"
	}
	return ""
}

// checkSubtests checks the subtests that the text after a cited test quotes:
// a parenthesis that opens with a quoted string lists subtest names, each a
// string literal of one of files.
func (r *repo) checkSubtests(where, test string, files []string, after string, errorf func(string, ...any)) {
	if !subtestList.MatchString(after) {
		return
	}
	open := strings.IndexByte(after, '(')
	closing := strings.IndexByte(after[open:], ')')
	if closing < 0 {
		return
	}
	for _, m := range quoted.FindAllStringSubmatch(after[open:open+closing], -1) {
		name := strings.Join(strings.Fields(m[1]), " ") // a quote may wrap
		found := false
		for _, f := range files {
			src, err := r.source(f)
			if err == nil && (strings.Contains(src, strconv.Quote(name)) || strings.Contains(src, "`"+name+"`")) {
				found = true
			}
		}
		if !found {
			errorf("%s: subtest %q of %s is cited, and %s has no such string", where, name, test, strings.Join(files, ", "))
		}
	}
}

// ---------------------------------------------------------------------------
// Quoted messages

// tok is a character of a message or literal, or a wildcard: a format verb
// of a literal, or "..." in a quote.
type tok struct {
	r    rune
	wild bool
}

// literal is a string literal of the code, cut into characters and verbs.
type literal struct {
	text string
	file string
	toks []tok
	runs []string // its text between verbs
}

var verb = regexp.MustCompile(`%[-+# 0]*(?:\[\d+\])?(?:\d+|\*)?(?:\.(?:\d+|\*))?[a-zA-Z]`)

func newLiteral(s, file string) literal {
	l := literal{text: s, file: file}
	addText := func(t string) {
		t = strings.ReplaceAll(t, "%%", "%")
		if t != "" {
			l.runs = append(l.runs, t)
		}
		for _, r := range t {
			l.toks = append(l.toks, tok{r: r})
		}
	}
	last := 0
	for _, m := range verb.FindAllStringIndex(s, -1) {
		addText(s[last:m[0]])
		l.toks = append(l.toks, tok{wild: true})
		last = m[1]
	}
	addText(s[last:])
	return l
}

// framing is what kubectl and apimachinery add around terrarun's own words,
// stripped from a quote in this order (the first two as often as they
// match).
var framing = []*regexp.Regexp{
	regexp.MustCompile(`^(?:Error from server(?: \([A-Za-z]+\))?: |error: |error when [a-z]+ "[^"]*": |[a-z0-9.-]+ "[^"]*" is (?:forbidden|invalid): |The [A-Za-z]+ "[^"]*" is invalid: ?)`),
	regexp.MustCompile(`^\* `),
	regexp.MustCompile(`^` + fieldPath + `: `),
	regexp.MustCompile(`^(?:(?:Invalid value|Unsupported value|Duplicate value|Not found): (?:"(?:[^"\\]|\\.)*"|[^:\s]+): |(?:Required value|Forbidden|Too long|Too many|Internal error): )`),
}

// ownWords strips a quoted message of kubectl's and apimachinery's words.
func ownWords(msg string) string {
	s := strings.TrimSpace(msg)
	for i, re := range framing {
		for {
			loc := re.FindStringIndex(s)
			if loc == nil {
				break
			}
			s = s[loc[1]:]
			if i > 1 {
				break
			}
		}
	}
	return strings.TrimSpace(s)
}

// checkMessage checks that one literal of the code prints the quoted message.
func (r *repo) checkMessage(t *testing.T, d *doc, m message) {
	t.Helper()
	words := ownWords(m.text)
	if words == "" {
		return // kubectl's framing alone, such as `The TerraformRun "x" is invalid:`
	}
	if ok, why := printed(words, r.literals); !ok {
		t.Errorf("%s:%d: the quoted message %q is not what terrarun prints: %s", d.name, m.line, m.text, why)
	}
}

// printed reports whether one of lits prints words: at least half of the
// words' characters, and no less than 15, are the literal's own text. If
// not, it says which literal came closest.
func printed(words string, lits []literal) (bool, string) {
	var quote []tok
	fixed := 0
	chunks := regexp.MustCompile(`\.\.\.|…`).Split(words, -1)
	for i, c := range chunks {
		if i > 0 {
			quote = append(quote, tok{wild: true})
		}
		for _, r := range c {
			quote = append(quote, tok{r: r})
			fixed++
		}
	}
	best, bestLit := 0, ""
	for _, l := range lits {
		if !candidate(l, chunks) {
			continue
		}
		if s := match(quote, l.toks); s > best {
			best, bestLit = s, l.file+": "+strconv.Quote(l.text)
		}
	}
	if best >= 15 && 2*best >= fixed {
		return true, ""
	}
	if bestLit == "" {
		return false, "no string literal under pkg/ or cmd/ comes close"
	}
	return false, fmt.Sprintf("the closest literal, %s, prints %d of its %d characters", bestLit, best, fixed)
}

// candidate reports whether literal l shares enough text with the quote's
// chunks to be worth matching: eight characters in a row.
func candidate(l literal, chunks []string) bool {
	for _, c := range chunks {
		for i := 0; i+8 <= len(c); i += 4 {
			for _, run := range l.runs {
				if strings.Contains(run, c[i:i+8]) {
					return true
				}
			}
		}
	}
	return false
}

// match returns how many characters of the quote a rendering of the literal
// supplies, at best, where the quote is read whole and may begin and end
// anywhere in the literal: a verb of the literal stands for any text of the
// quote, a wildcard of the quote for any part of the literal. It returns -1
// when no rendering of the literal contains the quote.
func match(quote, lit []tok) int {
	n, m := len(quote), len(lit)
	dp := make([][]int, n+1)
	for i := range dp {
		dp[i] = make([]int, m+1)
		for j := range dp[i] {
			dp[i][j] = -1
		}
	}
	for j := range dp[0] {
		dp[0][j] = 0
	}
	set := func(i, j, v int) {
		if v > dp[i][j] {
			dp[i][j] = v
		}
	}
	for i := 0; i <= n; i++ {
		for j := 0; j <= m; j++ {
			v := dp[i][j]
			if v < 0 {
				continue
			}
			if i < n && quote[i].wild {
				set(i+1, j, v) // the quote's "..." ends here
				if j < m {
					set(i, j+1, v) // it stands for this character of the literal
				}
			}
			if j < m && lit[j].wild {
				set(i, j+1, v) // the verb ends here
				if i < n {
					set(i+1, j, v) // it prints this character of the quote
				}
			}
			if i < n && j < m && !quote[i].wild && !lit[j].wild && quote[i].r == lit[j].r {
				set(i+1, j+1, v+1)
			}
		}
	}
	return slices.Max(dp[n])
}

// ---------------------------------------------------------------------------
// Links

// checkLink checks one relative link.
func (r *repo) checkLink(t *testing.T, d *doc, l link) {
	t.Helper()
	target := l.target
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return
	}
	path, fragment, _ := strings.Cut(target, "#")
	file := d.name
	if path != "" {
		file = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(d.name), path)))
		if ok, _ := r.stat(file); !ok {
			t.Errorf("%s:%d: the link %s names %s, which does not exist", d.name, l.line, target, file)
			return
		}
	}
	if fragment == "" {
		return
	}
	var to *doc
	for _, o := range r.docs {
		if o.name == file {
			to = o
		}
	}
	if to == nil {
		return // a file these checks do not read
	}
	if !to.headings[fragment] {
		t.Errorf("%s:%d: the link %s names #%s, and %s has no heading of that anchor", d.name, l.line, target, fragment, file)
	}
}
