//go:build tools

// Package tools records the Helm command as a dependency of this module, so
// that go.sum covers everything `go build helm.sh/helm/v4/cmd/helm` needs.
// hack/helm.sh builds it; this file is never compiled.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
