//go:build tools

// Package tools pins the build-time tools used by hack/ scripts in go.mod.
package tools

import _ "k8s.io/code-generator"
