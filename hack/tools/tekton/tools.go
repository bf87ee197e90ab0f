//go:build tools

// Package tools records the Tekton Pipelines programs the e2e tests run as
// dependencies of this module, so that go.sum covers everything building
// them needs. hack/tekton.sh builds them; this file is never compiled.
package tools

import (
	_ "github.com/tektoncd/pipeline/cmd/controller"
	_ "github.com/tektoncd/pipeline/cmd/entrypoint"
	_ "github.com/tektoncd/pipeline/cmd/nop"
	_ "github.com/tektoncd/pipeline/cmd/workingdirinit"
)
