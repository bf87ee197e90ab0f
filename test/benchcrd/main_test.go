// Package benchcrd holds `make bench-crd`: terrarun side by side with the
// same objects stored as a CustomResourceDefinition in a real
// kube-apiserver, the comparison of issue 11.
//
// One kube-apiserver (from hack/e2e-tools.sh, as the e2e suite's) serves the
// CRD terraformruns.crd.terrarun.dev, whose structural schema is generated
// from terrarun's OpenAPI definitions (crd_test.go), with the status
// subresource and printer columns after terrarun's table. terrarun-apiserver
// runs as a plain process behind it, registered with an APIService, a
// Service and its endpoints, with delegated authentication and authorization
// and --run-controller=false: the API only. Each has its own etcd, on the
// same disk, with fsync on. One client, with the admin's client certificate
// and no client-side rate limit, creates the same TerraformRun body through
// both and reads it back, in interleaved batches; LIST is also measured
// through the aggregator.
//
// The benchmark needs root: as the e2e suite, it re-executes its test binary
// in a network namespace of its own with a 10.x address (the aggregator does
// not route to loopback endpoints), and deletes it afterwards. It needs
// $TERRARUN_E2E_TOOLS (the directory hack/e2e-tools.sh prints) and takes
// terrarun-apiserver from $TERRARUN_APISERVER (bin/, which `make bench-crd`
// sets), else builds it. Without -bench, as in `go test ./...`, it starts
// nothing and runs nothing.
//
// Figures are reported with b.ReportMetric per side (crd-, terrarun-) and as
// terrarun/CRD ratios, with the 1-minute load average at the start and end of
// each (load1-start, load1-end); percentiles are nearest-rank over fixed
// sample counts (see the constants in bench_test.go).
package benchcrd

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/terrarun/terrarun/test/internal/netns"
)

// netnsEnv names the network namespace the test binary runs in.
const netnsEnv = "TERRARUN_BENCH_CRD_NETNS"

// profilesEnv names a directory for the servers' heap profiles (see state).
const profilesEnv = "TERRARUN_BENCH_CRD_PROFILES"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		return m.Run() // no benchmark asked for: nothing to start
	}
	if !netns.Inside(netnsEnv) {
		if os.Getenv(toolsEnv) == "" {
			fmt.Fprintf(os.Stderr, "bench-crd: %s is not set: set %s=$(hack/e2e-tools.sh), or run make bench-crd\n", toolsEnv, toolsEnv)
			return 1
		}
		return netns.Reexec("bench-crd", netnsEnv, "terrarun-bench-crd-", []string{hostIP + "/24"})
	}
	code := m.Run()
	if envir != nil {
		if code != 0 {
			envir.dumpLogs(os.Stderr)
		}
		envir.stop()
	}
	return code
}
