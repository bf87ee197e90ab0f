package terraformworkspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"k8s.io/apimachinery/pkg/api/equality"
	"maps"
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// Hash is the hash of what a run with spec makes terraform do: the spec
// after defaulting, whatever its operation, creator and requesters, for a git or OCI source
// the revision its ref resolved to (revision may be empty before any run has
// resolved it), and the digest of the ConfigMaps it reads (configMaps). A
// workspace's desired hash is Hash of its runs' spec, the newest revision
// its runs saw and its ConfigMaps' content now; a run's is Hash of its
// spec, its revision and the digest it was created with. Metadata and
// status never change it.
func Hash(spec v1alpha1.TerraformRunSpec, revision, configMaps string) string {
	spec = withoutServerFields(spec)
	spec.Operation = v1alpha1.OperationApply
	spec.Creator, spec.RequestedBy = nil, nil
	if !movingSource(&spec.Source) {
		revision = "" // an inline or ConfigMap source is in the spec
	}
	b, err := json.Marshal(struct {
		Spec       v1alpha1.TerraformRunSpec `json:"spec"`
		Revision   string                    `json:"revision,omitempty"`
		ConfigMaps string                    `json:"configMaps,omitempty"`
	}{spec, revision, configMaps})
	if err != nil {
		// A spec the API server stored always encodes.
		panic(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:32]
}

// withoutServerFields is a copy of spec without what the server's admission
// adds to each run a workspace makes, which the workspace did not ask for:
// the image digest its verification pinned, and the cluster policy's
// trusted keys in an OCI source.
func withoutServerFields(spec v1alpha1.TerraformRunSpec) v1alpha1.TerraformRunSpec {
	spec = *spec.DeepCopy()
	spec.Engine.ImageDigest = ""
	if o := spec.Source.OCI; o != nil && o.Verify != nil {
		o.Verify.TrustedKeys = ""
		if equality.Semantic.DeepEqual(*o.Verify, v1alpha1.OCIVerification{}) {
			o.Verify = nil
		}
	}
	return spec
}

// runHash is the hash of what run did, or does.
func runHash(run *v1alpha1.TerraformRun) string {
	return Hash(run.Spec, revisionOf(run), run.Annotations[v1alpha1.AnnotationConfigMapDigest])
}

// configMapNames lists the ConfigMaps a run with spec reads.
func configMapNames(spec *v1alpha1.TerraformRunSpec) []string {
	var names []string
	if c := spec.Source.ConfigMap; c != nil {
		names = append(names, c.Name)
	}
	for _, v := range spec.Variables {
		if v.ValueFrom != nil && v.ValueFrom.ConfigMapKeyRef != nil {
			names = append(names, v.ValueFrom.ConfigMapKeyRef.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// configMapDigest is the digest of the content of the ConfigMaps a run
// with spec reads, as read reads them; "" when it reads none.
func configMapDigest(ctx context.Context, spec *v1alpha1.TerraformRunSpec, namespace string, read func(ctx context.Context, namespace, name string) (map[string]string, error)) (string, error) {
	names := configMapNames(spec)
	if len(names) == 0 || read == nil {
		return "", nil
	}
	h := sha256.New()
	for _, name := range names {
		data, err := read(ctx, namespace, name)
		if err != nil {
			return "", fmt.Errorf("reading ConfigMap %s/%s: %w", namespace, name, err)
		}
		keys := slices.Sorted(maps.Keys(data))
		fmt.Fprintf(h, "%q:%d\n", name, len(keys))
		for _, k := range keys {
			fmt.Fprintf(h, "%q=%q\n", k, data[k])
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// movingSource reports whether what src names may change without the spec
// changing: a git ref's commit, an OCI tag's or semver range's digest, a
// Flux source's artifact. A run records what it resolved in
// status.source.revision.
func movingSource(src *v1alpha1.Source) bool {
	return src.Git != nil || src.OCI != nil || src.SourceRef != nil
}

func revisionOf(run *v1alpha1.TerraformRun) string {
	if run.Status.Source == nil {
		return ""
	}
	return run.Status.Source.Revision
}

// sameSource reports whether a run read the source that spec names.
func sameSource(run *v1alpha1.TerraformRun, spec *v1alpha1.TerraformRunSpec) bool {
	return apiequality.Semantic.DeepEqual(withoutServerFields(run.Spec).Source, spec.Source)
}

// runSpec is the spec of a run of ws with operation op
// (terrarun.RunSpecOf, through the internal types).
func runSpec(ws *v1alpha1.TerraformWorkspace, op v1alpha1.Operation, lastApplied func(workspace string) string) v1alpha1.TerraformRunSpec {
	var in terrarun.TerraformWorkspaceSpec
	var out v1alpha1.TerraformRunSpec
	if err := v1alpha1.Convert_v1alpha1_TerraformWorkspaceSpec_To_terrarun_TerraformWorkspaceSpec(&ws.Spec, &in, nil); err != nil {
		panic("converting a workspace's spec: " + err.Error()) // generated, for types it knows
	}
	spec := terrarun.RunSpecOf(&in, terrarun.Operation(op), lastApplied)
	if err := v1alpha1.Convert_terrarun_TerraformRunSpec_To_v1alpha1_TerraformRunSpec(&spec, &out, nil); err != nil {
		panic("converting a run's spec: " + err.Error())
	}
	return out
}
