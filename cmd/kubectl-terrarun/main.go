// Command kubectl-terrarun is the kubectl plugin for TerraformRuns: put it on
// PATH (make build writes it to bin/, or go install
// github.com/terrarun/terrarun/cmd/kubectl-terrarun@latest) and run
// `kubectl terrarun --help`. Named kubectl_complete-terrarun (make build
// links it so in bin/), it answers kubectl's shell completion of `kubectl
// terrarun`: commands, flags, and run and workspace names.
package main

import (
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/terrarun/terrarun/pkg/cmd/plugin"
)

func main() {
	if filepath.Base(os.Args[0]) == "kubectl_complete-terrarun" {
		os.Args = append([]string{os.Args[0], cobra.ShellCompRequestCmd}, os.Args[1:]...)
	}
	os.Exit(plugin.Run(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}))
}
