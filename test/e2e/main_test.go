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
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
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
	if os.Getenv(netnsEnv) == "" {
		return reexecInNetns()
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

// reexecInNetns creates a network namespace, runs this test binary inside it,
// and deletes the namespace and everything left in it afterwards.
func reexecInNetns() int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "the e2e tests need root: they create a network namespace (ip netns add)")
		return 1
	}
	buf := make([]byte, 4)
	_, _ = rand.Read(buf)
	ns := "terrarun-e2e-" + hex.EncodeToString(buf)
	if err := sh("ip", "netns", "add", ns); err != nil {
		fmt.Fprintf(os.Stderr, "creating network namespace %s: %v\n", ns, err)
		return 1
	}
	defer deleteNetns(ns)
	setup := [][]string{
		{"ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"},
		{"ip", "netns", "exec", ns, "ip", "addr", "add", nodeIP + "/24", "dev", "lo"},
	}
	for _, n := range nodes {
		setup = append(setup, []string{"ip", "netns", "exec", ns, "ip", "addr", "add", n.ip + "/24", "dev", "lo"})
	}
	for _, args := range setup {
		if err := sh(args...); err != nil {
			fmt.Fprintf(os.Stderr, "configuring network namespace %s: %v\n", ns, err)
			return 1
		}
	}

	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, self}, os.Args[1:]...)...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = os.Stdout, os.Stderr, os.Stdin
	cmd.Env = append(os.Environ(), netnsEnv+"="+ns)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		for s := range signals {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		if exit.ExitCode() < 0 {
			return 1
		}
		return exit.ExitCode()
	default:
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
}

// deleteNetns kills whatever still runs in the namespace, then deletes it.
func deleteNetns(ns string) {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, pid := range strings.Fields(string(out)) {
		_ = exec.Command("kill", "-9", pid).Run()
	}
	if err := sh("ip", "netns", "del", ns); err != nil {
		fmt.Fprintf(os.Stderr, "deleting network namespace %s: %v\n", ns, err)
	}
}

func sh(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
