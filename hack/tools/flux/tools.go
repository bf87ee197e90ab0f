//go:build tools

// Package tools records Flux's source-controller as a dependency of this
// module, so that go.sum covers everything `go build
// github.com/fluxcd/source-controller` needs. hack/flux.sh builds it; this
// file is never compiled.
package tools

import (
	_ "github.com/fluxcd/source-controller"
)
