//go:build tools

// Package tools records the versitygw command as a dependency of this
// module, so that go.sum covers everything `go build
// github.com/versity/versitygw/cmd/versitygw` needs. hack/objectstore.sh
// builds it; this file is never compiled.
package tools

import (
	_ "github.com/versity/versitygw/cmd/versitygw"
)
