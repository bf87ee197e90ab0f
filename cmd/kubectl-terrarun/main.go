// Command kubectl-terrarun is the kubectl plugin for TerraformRuns: put it on
// PATH (make build writes it to bin/, or go install
// github.com/terrarun/terrarun/cmd/kubectl-terrarun@latest) and run
// `kubectl terrarun --help`.
package main

import (
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/terrarun/terrarun/pkg/cmd/plugin"
)

func main() {
	cmd := plugin.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(plugin.ExitCode(err))
	}
}
