//go:build tools

// Package tools records the registry command as a dependency of this
// module, so that go.sum covers everything `go build
// github.com/distribution/distribution/v3/cmd/registry` needs.
// hack/registry.sh builds it; this file is never compiled.
package tools

import (
	_ "github.com/distribution/distribution/v3/cmd/registry"
)
