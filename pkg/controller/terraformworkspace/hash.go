package terraformworkspace

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// Hash is the hash of what the workspace's runs make terraform do: the
// template after defaulting, with the workspace's approval, without its
// creator. Metadata and status never change it.
func Hash(ws *v1alpha1.TerraformWorkspace) string {
	spec := runSpec(ws, v1alpha1.OperationApply)
	spec.Creator = nil
	b, err := json.Marshal(spec)
	if err != nil {
		// A spec the API server stored always encodes.
		panic(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:32]
}

// runSpec is the spec of a run of ws with operation op.
func runSpec(ws *v1alpha1.TerraformWorkspace, op v1alpha1.Operation) v1alpha1.TerraformRunSpec {
	spec := *ws.Spec.Template.DeepCopy()
	spec.Operation = op
	spec.Approval = *ws.Spec.Approval.DeepCopy()
	return spec
}
