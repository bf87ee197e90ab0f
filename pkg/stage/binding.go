package stage

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
)

// BindingEnv is the environment variable of an executor pod that binds it to
// what terrarun decided: the BindingDigest of its stage file and of every
// file terrarun wrote for it into Secrets (Spec.Bound). A pod template
// cannot change once its Job is created, but a Secret can be deleted and
// created again under its name, with other content, before the kubelet
// mounts it: the executor checks the digest before it uses anything, and a
// mismatch ends the stage with ExitForged. Only the Job executor sets it.
const BindingEnv = "TERRARUN_STAGE_DIGEST"

// StageKeyHeader carries the stage's key (Spec.StageKeyFile) on every
// request of a Job's executor. The key is in the stage's Secret, which only
// its pod mounts: a token minted for the pod (create serviceaccounts/token)
// without it is not the stage's credential.
const StageKeyHeader = "X-Terrarun-Stage-Key"

// ExitForged is terrarun-executor's exit code when what it was handed is not
// what terrarun wrote (BindingEnv): nothing of the stage ran.
const ExitForged = 86

// BindingDigest is "sha256:" followed by the hex sha256 of the stage file's
// bytes and of the files that files maps from path to content, in the order
// of their paths, each with its path and its length, so that no two sets of
// files have one digest.
func BindingDigest(stageFile []byte, files map[string][]byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "terrarun.dev/stage-binding/v1\nstage %d\n", len(stageFile))
	h.Write(stageFile)
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		fmt.Fprintf(h, "\nfile %s %d\n", strconv.Quote(p), len(files[p]))
		h.Write(files[p])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// VerifyBinding checks, when want is set, that the stage file's bytes and
// the files spec.Bound names hash to want. Files are read once each, and
// the stage must use what was read here or read again nothing it checked.
func VerifyBinding(want string, stageFile []byte, spec Spec) error {
	if want == "" {
		return nil
	}
	files := make(map[string][]byte, len(spec.Bound))
	for _, p := range spec.Bound {
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("the stage is not the one terrarun built: reading %s, which terrarun wrote for it: %w", p, err)
		}
		files[p] = b
	}
	if got := BindingDigest(stageFile, files); subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return fmt.Errorf("the stage is not the one terrarun built: its stage file and the %d files terrarun wrote for it hash to %s, not to %s as its pod says; "+
			"someone replaced a Secret of the stage after terrarun created it: check who may delete and create Secrets in namespace %s", len(files), got, want, spec.Namespace)
	}
	return nil
}
