package engineversion

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	tfjson "github.com/hashicorp/terraform-json"
)

// fakeEngine writes an engine that answers `version -json` with answer.
func fakeEngine(t *testing.T, dir, name, answer string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho '"+answer+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAsk(t *testing.T) {
	dir := t.TempDir()
	p := fakeEngine(t, dir, "tofu", `{"terraform_version":"1.10.7","platform":"linux_amd64","provider_selections":{}}`)
	rec, err := Ask(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(p)
	if rec.Version != "1.10.7" || !rec.Matches(fi) {
		t.Errorf("record %+v does not describe %s (%d bytes, %s)", rec, p, fi.Size(), fi.ModTime())
	}
	// What the record answers for the engine, terraform-exec reads.
	var out tfjson.VersionOutput
	if err := json.Unmarshal(rec.JSON(), &out); err != nil || out.Version != "1.10.7" {
		t.Errorf("JSON() = %s: %v", rec.JSON(), err)
	}
	// Another binary, or this one changed, is not described.
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); rec.Matches(fi) {
		t.Error("the record describes the binary after its modification time changed")
	}
	if fi, _ := os.Stat(fakeEngine(t, dir, "other", `{"terraform_version":"1.10.70"}`)); rec.Matches(fi) {
		t.Error("the record describes a binary of another size")
	}

	for _, answer := range []string{`{"terraform_version":"1.0.0'; rm -rf /; '"}`, "no version", `{"terraform_version":""}`} {
		if rec, err := Ask(context.Background(), fakeEngine(t, dir, "bad", answer)); err == nil {
			t.Errorf("answer %q: recorded %+v, want an error", answer, rec)
		}
	}
}

func TestInstalled(t *testing.T) {
	dir := t.TempDir()
	tofu := fakeEngine(t, dir, "tofu", "")
	stamp := time.Unix(1700000000, 0)
	if err := os.Chtimes(tofu, stamp, stamp); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(tofu)
	file := filepath.Join(dir, InstalledFile)
	write := func(records map[string]Record) {
		t.Helper()
		js, _ := json.Marshal(records)
		if err := os.WriteFile(file, js, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	if rec, err := Installed(tofu); rec != nil || err != nil {
		t.Errorf("without records: %+v, %v", rec, err)
	}
	write(map[string]Record{"tofu": {Version: "1.10.7", Size: fi.Size(), ModTime: stamp}})
	if rec, err := Installed(tofu); err != nil || rec == nil || rec.Version != "1.10.7" {
		t.Errorf("the record installed with tofu: %+v, %v", rec, err)
	}
	// Only for the engine it names, as it was recorded.
	if rec, err := Installed(fakeEngine(t, dir, "terraform", "")); rec != nil || err != nil {
		t.Errorf("an engine without a record: %+v, %v", rec, err)
	}
	write(map[string]Record{"tofu": {Version: "1.10.7", Size: fi.Size(), ModTime: stamp.Add(time.Second)}})
	if rec, err := Installed(tofu); rec != nil || err != nil {
		t.Errorf("a record of another modification time: %+v, %v", rec, err)
	}
	// Not a record that anyone else may have written, or that is not one.
	write(map[string]Record{"tofu": {Version: "1.10.7", Size: fi.Size(), ModTime: stamp}})
	if err := os.Chmod(file, 0o666); err != nil {
		t.Fatal(err)
	}
	if rec, err := Installed(tofu); rec != nil || err == nil {
		t.Errorf("a records file that others may write: %+v, %v", rec, err)
	}
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() == 0 {
		if err := os.Lchown(file, 65532, 65532); err != nil {
			t.Fatal(err)
		}
		if rec, err := Installed(tofu); rec != nil || err == nil {
			t.Errorf("a records file of another owner than the engine's: %+v, %v", rec, err)
		}
		if err := os.Lchown(file, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	write(map[string]Record{"tofu": {Version: "$(id)", Size: fi.Size(), ModTime: stamp}})
	if rec, err := Installed(tofu); rec != nil || err == nil {
		t.Errorf("a record whose version is not a version: %+v, %v", rec, err)
	}
	if err := os.WriteFile(file, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if rec, err := Installed(tofu); rec != nil || err == nil {
		t.Errorf("a records file that is not JSON: %+v, %v", rec, err)
	}
}
