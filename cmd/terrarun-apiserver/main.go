// Command terrarun-apiserver serves the terrarun.dev API: TerraformRun objects
// stored in their own etcd, as an aggregated API server behind a Kubernetes
// cluster or, with --standalone, on its own.
package main

import (
	"os"
	"runtime/debug"

	"k8s.io/component-base/cli"

	"github.com/terrarun/terrarun/pkg/cmd/server"
)

// defaultGCPercent is the garbage collector's target when GOGC is not set:
// a new cycle when the heap has grown by half of what was live after the
// last one, not by all of it (Go's default of 100). The server's heap is
// mostly its watch cache, live for as long as the objects are stored, so
// the collector's headroom over it is most of the memory a stored run costs
// beyond the run itself (docs/benchmarks.md, "Memory per stored run").
const defaultGCPercent = 50

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	os.Exit(cli.Run(server.NewCommand(os.Stdout)))
}
