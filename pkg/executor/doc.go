// Package executor will run the stages of a TerraformRun: the run controller,
// the local executor (child processes) and the kubernetes executor (Jobs).
// The terrarun.dev API serves runs without it until then.
package executor
