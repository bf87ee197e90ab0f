// Command terrarun-apiserver serves the terrarun.dev API: TerraformRun objects
// stored in their own etcd, as an aggregated API server behind a Kubernetes
// cluster or, with --standalone, on its own.
package main

import (
	"os"

	"k8s.io/component-base/cli"

	"github.com/terrarun/terrarun/pkg/cmd/server"
)

func main() {
	os.Exit(cli.Run(server.NewCommand(os.Stdout)))
}
