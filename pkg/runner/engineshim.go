package runner

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/terrarun/terrarun/pkg/engineversion"
)

// shell runs the engine shim.
const shell = "/bin/sh"

// engineRecord returns the recorded version of the engine binary, from the
// stage's spec or else from the records installed with the engine (as in the
// executor image), or nil when neither describes the binary as it is now.
func (r *runner) engineRecord() *engineversion.Record {
	if rec := r.spec.EngineVersion; rec != nil {
		fi, err := os.Stat(r.binary)
		if rec.Validate() == nil && err == nil && rec.Matches(fi) {
			return rec
		}
		return nil
	}
	rec, err := engineversion.Installed(r.binary)
	if err != nil {
		r.logf("terrarun: warning: the record of %s's version: %v", r.engine, err)
		return nil
	}
	return rec
}

// writeEngineShim writes the program the runner gives terraform-exec as the
// engine when the engine's version is on record, and returns its path. It
// answers `version -json`, which terraform-exec asks of every new handle
// before its first command, from the record, and execs the engine for every
// other command, so that the engine keeps the shim's process and gets its
// signals. It costs a shell's start where asking would cost an engine's,
// until retireEngineShim replaces it. It returns "" when there is no shell
// to run it.
func (r *runner) writeEngineShim(rec *engineversion.Record) (string, error) {
	if _, err := os.Stat(shell); err != nil {
		return "", nil
	}
	script := fmt.Sprintf(`#!%s
# Written by terrarun: %s's version as recorded, the engine for anything else.
if [ "$#" -eq 2 ] && [ "$1" = version ] && [ "$2" = -json ]; then
	printf '%%s\n' %s
	exit 0
fi
exec %s "$@"
`, shell, r.engine, shellQuote(string(rec.JSON())), shellQuote(r.binary))
	// Named as the engine: its processes show as the engine's (argv[0]),
	// once the script gives way to a link (retireEngineShim).
	dir := filepath.Join(r.privateDir, "engine")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("writing the engine shim: %w", err)
	}
	p := filepath.Join(dir, filepath.Base(r.binary))
	if err := os.WriteFile(p, []byte(script), 0o700); err != nil {
		return "", fmt.Errorf("writing the engine shim: %w", err)
	}
	return p, nil
}

// retireEngineShim puts a symbolic link to the engine in the shim's place
// once the stage's engine handle has its version: the commands that follow
// start the engine without a shell first. The runner's later handles (the
// plan text's) run no command that terraform-exec asks a version for, and one
// that did would only get the engine's own answer. A shim that cannot be
// replaced stays, and answers as before.
func (r *runner) retireEngineShim() {
	if !r.recorded {
		return
	}
	link := r.execPath + ".link"
	_ = os.Remove(link)
	if err := os.Symlink(r.binary, link); err != nil {
		return
	}
	if err := os.Rename(link, r.execPath); err != nil {
		_ = os.Remove(link)
	}
}
