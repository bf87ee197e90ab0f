//go:build tools

// Package tools records the OpenTofu command as a dependency of this module,
// so that go.sum covers everything `go build github.com/opentofu/opentofu/cmd/tofu`
// needs. hack/engine.sh builds it; this file is never compiled.
package tools

import (
	_ "github.com/opentofu/opentofu/cmd/tofu"
)
