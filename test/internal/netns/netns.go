// Package netns runs a test binary inside a network namespace of its own,
// for the suites that start a real kube-apiserver: its aggregator refuses to
// route to loopback endpoints (127.0.0.0/8), so the servers behind it need a
// 10.x address, which a private namespace gives without touching the host.
//
// Reexec creates the namespace with the addresses on its loopback device,
// re-executes the test binary inside it with envVar set to the namespace's
// name, and deletes the namespace and everything still running in it
// afterwards, whatever happened. It needs root.
package netns

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
)

// Inside says whether this process runs in the namespace that Reexec made:
// envVar is set.
func Inside(envVar string) bool { return os.Getenv(envVar) != "" }

// Reexec creates a network namespace named <prefix><random>, puts each of
// addrs (CIDR notation, e.g. 10.213.0.1/24) on its loopback device, runs this
// binary inside it with the same arguments and envVar set to the namespace's
// name, and returns its exit code. It forwards SIGINT and SIGTERM, and
// deletes the namespace, killing whatever is left in it, before it returns.
// who names the caller in the error a non-root user gets.
func Reexec(who, envVar, prefix string, addrs []string) int {
	if os.Geteuid() != 0 {
		fmt.Fprintf(os.Stderr, "%s needs root: it creates a network namespace (ip netns add); run it as root (sudo make ...)\n", who)
		return 1
	}
	buf := make([]byte, 4)
	_, _ = rand.Read(buf)
	ns := prefix + hex.EncodeToString(buf)
	if err := sh("ip", "netns", "add", ns); err != nil {
		fmt.Fprintf(os.Stderr, "creating network namespace %s: %v\n", ns, err)
		return 1
	}
	defer deleteNetns(ns)
	setup := [][]string{{"ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"}}
	for _, a := range addrs {
		setup = append(setup, []string{"ip", "netns", "exec", ns, "ip", "addr", "add", a, "dev", "lo"})
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
	cmd.Env = append(os.Environ(), envVar+"="+ns)
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
