package server

import (
	"fmt"
	"runtime/debug"

	apimachineryversion "k8s.io/apimachinery/pkg/version"
	basecompatibility "k8s.io/component-base/compatibility"
)

// serverVersion is the server's effective version with a /version that
// kubectl can parse: Kubernetes' own builds set gitVersion and gitCommit
// with -ldflags, and without them gitVersion is "v0.0.0-master+$Format:%H$",
// which `kubectl version` refuses. It reports the Kubernetes API level the
// server serves, with terrarun's build (the commit Go recorded, when built
// from a git checkout) as semver build metadata.
type serverVersion struct {
	basecompatibility.EffectiveVersion
}

// Info implements basecompatibility.EffectiveVersion.
func (v serverVersion) Info() *apimachineryversion.Info {
	info := v.EffectiveVersion.Info()
	if info == nil {
		return nil
	}
	build, commit, tree := "dev", "", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				tree = map[string]string{"true": "dirty", "false": "clean"}[s.Value]
			}
		}
	}
	if len(commit) >= 12 {
		build = commit[:12]
	}
	info.GitVersion = fmt.Sprintf("v%s.%s.0+terrarun.%s", info.Major, info.Minor, build)
	info.GitCommit, info.GitTreeState = commit, tree
	return info
}
