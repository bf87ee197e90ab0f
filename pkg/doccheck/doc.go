// Package doccheck holds no code that terrarun runs. Its tests keep the
// repository's documentation (README.md and docs/*.md) true to the code, so
// that a renamed test or a reworded error message fails `make unit` instead
// of leaving the docs behind. The rules they enforce:
//
//   - Test citations. A code span `path/to/file.go: Name` (or several names,
//     comma-separated) names functions of that file, which must exist. A
//     code span that is a test name alone (`TestX`, `FuzzX`, `BenchmarkX`,
//     `ExampleX`) belongs to the file or directory cited last in the same
//     clause (a table cell, list item or paragraph, up to a ";" or the end
//     of a sentence outside parentheses), and must be defined there; a
//     directory (`pkg/sandbox`) may be cited as well as a file. A test name
//     with no file before it in its clause must exist in some _test.go file
//     of the repository. A parenthesis right after a cited test that opens
//     with a quoted string lists subtests ("stale digest", "wrong phase"):
//     each must be a string literal of the test's file. A code span that
//     names a .go file by a path with a slash names a file that exists.
//   - Quoted messages. A message that terrarun prints is quoted in one of
//     three ways: a code span in the "message" column of a table (but not
//     one that is a field path alone, as in "likewise `spec.backend.type`");
//     a line of a fenced code block without an info string that starts with
//     "Error from server", "error: " or `The <Kind> "<name>" is invalid`,
//     with the "* " lines that follow it; or a code span of the form
//     `<field path>: <field error type>: <detail>`, as apimachinery prints a
//     field error (`spec: Forbidden: ...`). Without kubectl's framing, the
//     field path and apimachinery's words, what remains must be printed by
//     one Go string literal under pkg/ or cmd/ (generated code aside): a
//     format verb of the literal stands for a value, "..." in the quote for
//     text left out, and at least half of the quote, and no less than 15
//     characters, must be the literal's own text.
//   - Links. A relative link resolves to a file or directory of the
//     repository, and its #fragment to a heading of the file it names.
package doccheck
