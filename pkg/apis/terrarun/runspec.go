package terrarun

import apiequality "k8s.io/apimachinery/pkg/api/equality"

// SameRunSpec says whether two run specs are the same but for
// ttlSecondsAfterFinished, the one field of a run's spec that may change.
func SameRunSpec(a, b *TerraformRunSpec) bool {
	x, y := *a, *b
	x.TTLSecondsAfterFinished, y.TTLSecondsAfterFinished = nil, nil
	return apiequality.Semantic.DeepEqual(x, y)
}
