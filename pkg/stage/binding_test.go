package stage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestVerifyBinding(t *testing.T) {
	dir := t.TempDir()
	main := filepath.Join(dir, "main.tf")
	ca := filepath.Join(dir, "ca.crt")
	for path, content := range map[string]string{main: `resource "terraform_data" "x" {}`, ca: "CA"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	spec := Spec{Namespace: "team-a", Bound: []string{ca, main}}
	stageFile := []byte(`{"namespace":"team-a"}`)
	want := BindingDigest(stageFile, map[string][]byte{main: []byte(`resource "terraform_data" "x" {}`), ca: []byte("CA")})

	if err := VerifyBinding(want, stageFile, spec); err != nil {
		t.Fatalf("the files terrarun wrote: %v", err)
	}
	if err := VerifyBinding("", []byte("anything"), spec); err != nil {
		t.Errorf("no binding (the local executor): %v", err)
	}
	if err := VerifyBinding(want, []byte(`{"namespace":"team-b"}`), spec); err == nil || !strings.Contains(err.Error(), "not the one terrarun built") {
		t.Errorf("another stage file: %v", err)
	}
	if err := os.WriteFile(main, []byte(`resource "terraform_data" "attacker" {}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := VerifyBinding(want, stageFile, spec); err == nil || !strings.Contains(err.Error(), "team-a") {
		t.Errorf("a source file replaced: %v", err)
	}
	if err := os.Remove(main); err != nil {
		t.Fatal(err)
	}
	if err := VerifyBinding(want, stageFile, spec); err == nil {
		t.Error("a bound file missing passed")
	}
	// Paths and contents cannot be traded between files.
	a := BindingDigest(nil, map[string][]byte{"a": []byte("bc")})
	b := BindingDigest(nil, map[string][]byte{"ab": []byte("c")})
	if a == b {
		t.Error("two sets of files have one digest")
	}
}
