package server

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"

	apimachineryversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/apiserver/pkg/util/compatibility"
	basecompatibility "k8s.io/component-base/compatibility"
)

// buildVersion is the build's version, set by the Makefile from
// `git describe` with -ldflags "-X …/pkg/cmd/server.buildVersion=…". A build
// without it (go install, go run) falls back to the commit Go recorded.
var buildVersion = ""

// version returns the build's version and commit: buildVersion when the
// Makefile set it, else the VCS revision Go stamped into the binary ("dev"
// when there is none), with "-dirty" for a modified tree.
func version() (v, commit, tree string) {
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
	switch {
	case buildVersion != "":
		v = buildVersion
	case len(commit) >= 12:
		v = commit[:12]
		if tree == "dirty" {
			v += "-dirty"
		}
	default:
		v = "dev"
	}
	return v, commit, tree
}

// versionLine is what --version prints.
func versionLine() string {
	v, _, _ := version()
	return fmt.Sprintf("terrarun-apiserver %s (Kubernetes API v%s, %s %s/%s)",
		v, compatibility.DefaultBuildEffectiveVersion().BinaryVersion().String(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// notSemverBuild matches what semver does not allow in build metadata.
var notSemverBuild = regexp.MustCompile(`[^0-9A-Za-z.-]`)

// serverVersion is the server's effective version with a /version that
// kubectl can parse: Kubernetes' own builds set gitVersion and gitCommit
// with -ldflags, and without them gitVersion is "v0.0.0-master+$Format:%H$",
// which `kubectl version` refuses. It reports the Kubernetes API level the
// server serves, with terrarun's build version as semver build metadata.
type serverVersion struct {
	basecompatibility.EffectiveVersion
}

// Info implements basecompatibility.EffectiveVersion.
func (v serverVersion) Info() *apimachineryversion.Info {
	info := v.EffectiveVersion.Info()
	if info == nil {
		return nil
	}
	build, commit, tree := version()
	info.GitVersion = fmt.Sprintf("v%s.%s.0+terrarun.%s", info.Major, info.Minor, notSemverBuild.ReplaceAllString(build, "-"))
	info.GitCommit, info.GitTreeState = commit, tree
	return info
}
