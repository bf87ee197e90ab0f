package stage

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// PlanDigest is a plan's digest, status.plan.digest: "sha256:" followed by
// the hex sha256 of a manifest of its parts' digests (each "sha256:<hex>"),
// so that approving it approves the plan file, the planned configuration,
// and the text and JSON the approver read.
func PlanDigest(file, source, text, json string) string {
	h := sha256.New()
	fmt.Fprintf(h, "terrarun.dev/plan-digest/v1\nfile %s\nsource %s\ntext %s\njson %s\n", file, source, text, json)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
