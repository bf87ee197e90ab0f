// Command kubectl-terrarun is the kubectl plugin for TerraformRuns: put it on
// PATH (make build writes it to bin/, or go install
// github.com/terrarun/terrarun/cmd/kubectl-terrarun@latest) and run
// `kubectl terrarun --help`.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/terrarun/terrarun/pkg/cmd/plugin"
)

func main() {
	os.Exit(plugin.Run(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}))
}
