// Package e2e runs terrarun the way users deploy it: installed by its Helm
// chart (charts/terrarun) from its images (make images), behind a real
// kube-apiserver through an APIService, with delegated authentication and
// authorization, RBAC on subresources, and OpenTofu running in executor Jobs
// that the real Job controller manages. Every step is driven by kubectl.
//
// The harness needs root: it creates a network namespace with a 10.x address
// on its loopback device (the aggregator refuses to route to 127.0.0.0/8),
// re-executes the test binary inside it, and deletes it afterwards, whatever
// happened. Inside, it starts the cluster's etcd and a three-member etcd
// cluster for terrarun, kube-apiserver, kube-controller-manager and
// kube-scheduler (built by hack/e2e-tools.sh), three test-only node agents,
// each a Node with its own address, that run pods as local processes, and a
// proxy that routes terrarun's Service to its ready endpoints as kube-proxy
// would. The chart's Deployment runs two replicas of the terrarun-apiserver
// image's binary, spread over the nodes; executor Jobs run the
// terrarun-executor image's, with its tofu.
package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/terrarun/terrarun/test/internal/netns"
)

const (
	// netnsEnv names the network namespace the test binary runs in.
	netnsEnv = "TERRARUN_E2E_NETNS"
	// nodeIP is the address of everything inside the namespace.
	nodeIP = "10.213.0.1"
)

var cl *cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if !netns.Inside(netnsEnv) {
		addrs := []string{nodeIP + "/24"}
		for _, n := range nodes {
			addrs = append(addrs, n.ip+"/24")
		}
		return netns.Reexec("the e2e tests", netnsEnv, "terrarun-e2e-", addrs)
	}
	c, err := startCluster()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the e2e cluster: %v\n", err)
		if c != nil {
			c.dumpLogs(os.Stderr)
			c.stop()
		}
		return 1
	}
	cl = c
	code := m.Run()
	if code != 0 {
		c.dumpLogs(os.Stderr)
	}
	c.stop()
	return code
}
