// Package engineversion records what an engine binary (terraform or tofu)
// answers to `version -json`, once per binary, so that a stage need not
// start the engine just to ask it: terraform-exec asks every new handle,
// before its first command, and a stage's runner makes a new handle each
// time it starts.
//
// The local executor asks each engine binary when it first starts a stage
// with it, and hands the record to the stage in its stage.Spec. The executor
// image holds the records of its engines, made when the image was built, in
// the engines' directory (InstalledFile). A record describes a file only
// while the file has the size and modification time it had when it was
// recorded; otherwise the runner asks the engine, as it would without one.
package engineversion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"
	tfjson "github.com/hashicorp/terraform-json"
)

// InstalledFile is the file, in a directory of engines, that holds the
// records of those engines made when they were installed (as the executor
// image is built): a JSON object from each engine's file name to its
// Record.
const InstalledFile = ".terrarun-engines.json"

// Record is the version of one engine binary, and the size and modification
// time that identify the binary it was asked of.
type Record struct {
	// Version is the engine's version, as `version -json` printed it.
	Version string `json:"version"`
	// Size is the binary's size in bytes.
	Size int64 `json:"size"`
	// ModTime is the binary's modification time.
	ModTime time.Time `json:"modTime"`
}

// versionRE is what a recorded version may hold: a semantic version, which
// also makes it safe to embed in JSON and in a shell word.
var versionRE = regexp.MustCompile(`^v?[0-9]+(\.[0-9]+){1,2}([-+][0-9A-Za-z.+-]+)?$`)

// Ask runs the binary at path with `version -json`, through terraform-exec,
// in an empty directory (the engine reports the providers of the
// configuration in its working directory), and records its answer.
func Ask(ctx context.Context, path string) (Record, error) {
	before, err := os.Stat(path)
	if err != nil {
		return Record{}, err
	}
	dir, err := os.MkdirTemp("", "terrarun-engine-version-")
	if err != nil {
		return Record{}, err
	}
	defer os.RemoveAll(dir)
	tf, err := tfexec.NewTerraform(dir, path)
	if err != nil {
		return Record{}, err
	}
	env := map[string]string{"CHECKPOINT_DISABLE": "1", "HOME": dir}
	if p, ok := os.LookupEnv("PATH"); ok {
		env["PATH"] = p
	}
	if err := tf.SetEnv(env); err != nil {
		return Record{}, err
	}
	v, _, err := tf.Version(ctx, true)
	if err != nil {
		return Record{}, fmt.Errorf("%s version -json: %w", path, err)
	}
	after, err := os.Stat(path)
	if err != nil {
		return Record{}, err
	}
	rec := Record{Version: v.Original(), Size: before.Size(), ModTime: before.ModTime()}
	if !rec.Matches(after) {
		return Record{}, fmt.Errorf("%s changed while its version was asked", path)
	}
	if err := rec.Validate(); err != nil {
		return Record{}, fmt.Errorf("%s: %w", path, err)
	}
	return rec, nil
}

// Validate refuses a record whose version is not a semantic version.
func (r Record) Validate() error {
	if !versionRE.MatchString(r.Version) {
		return fmt.Errorf("recorded engine version %q is not a version", r.Version)
	}
	return nil
}

// Matches reports whether r describes a file with the status fi, that is
// whether the file has the recorded size and modification time.
func (r Record) Matches(fi os.FileInfo) bool {
	return fi.Mode().IsRegular() && fi.Size() == r.Size && fi.ModTime().Equal(r.ModTime)
}

// JSON returns the answer of `version -json` that r records, as
// terraform-exec reads it: no providers, as in an empty directory.
func (r Record) JSON() []byte {
	js, _ := json.Marshal(tfjson.VersionOutput{Version: r.Version, ProviderSelections: map[string]string{}})
	return js
}

// Installed returns the record of the engine binary at path that was
// installed with it in its directory (InstalledFile), or nil when there is
// none, or none that describes the binary as it is now. The file is taken
// only from the binary's owner, and only when no one else may write it: it
// is then as trustworthy as the binary.
func Installed(path string) (*Record, error) {
	file := filepath.Join(filepath.Dir(path), InstalledFile)
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil
	}
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ffi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if owner(ffi) != owner(fi) || ffi.Mode().Perm()&0o022 != 0 || !ffi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not taken: it must be a file of %s's owner that only its owner may write", file, filepath.Base(path))
	}
	var records map[string]Record
	if err := json.NewDecoder(f).Decode(&records); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	rec, ok := records[filepath.Base(path)]
	if !ok {
		return nil, nil
	}
	if err := rec.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if !rec.Matches(fi) {
		return nil, nil
	}
	return &rec, nil
}

// owner is the user that owns a file, or -1 where that is not known.
func owner(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Uid)
	}
	return -1
}
