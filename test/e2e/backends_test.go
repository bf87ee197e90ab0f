package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/terrarun/terrarun/test/internal/harness"
)

// The trivial run that every executor must end the same way: one
// terraform_data resource and two outputs, one of them sensitive, planned
// and applied by one Auto executor with tofu (the executor image's engine),
// its state in the local backend of its work directory. (Without a
// backend, a cluster's runs keep their state in the state terrarun serves,
// and a standalone server's in its data directory: a difference of the
// server's mode, which the log and the plan say, not of the executor.)
const (
	sameRunName = "same"
	sameRunSpec = "  backend:\n    type: local\n  engine:\n    binary: tofu\n  approval:\n    mode: Auto\n"
)

// runOutcome is what a run ended with, in the parts that do not depend on
// where its stage ran.
type runOutcome struct {
	// Status: the phase, the stages (name, attempt, reason), the plan's
	// counts, the message and the outputs (the sensitive one's value
	// omitted).
	Status string
	// Log is the log of the plan and of the apply, with what differs by
	// nature between two runs of one configuration anywhere replaced
	// (logVariables).
	Log string
	// PlanText and PlanSource are the digests of the plan's text and of
	// the planned configuration, as the run's status.plan.parts records
	// them. The plan file and the plan JSON record when they were made, so
	// their digests (and the plan's digest, which covers them) differ
	// between any two runs: PlanJSON is the digest of the plan JSON that the
	// plan subresource serves, without its timestamp.
	PlanText, PlanSource, PlanJSON string
}

// logVariables are what differs between two runs of one configuration by
// nature, whatever runs them: the ids terraform_data draws, the time
// things took, and the names of the run's namespace and host.
var logVariables = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`), "<id>"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), "<time>"},
	{regexp.MustCompile(`\b\d+(\.\d+)?(ms|s|m)\b`), "<duration>"},
}

// kubectlFunc runs kubectl against one server, as its admin, with stdin.
type kubectlFunc func(stdin string, args ...string) (string, error)

// outcomeOf creates the trivial run in namespace ns, waits for it to end,
// and reads its outcome; ns and names (the host names of its stages) are
// taken out of its log.
func outcomeOf(t *testing.T, kubectl kubectlFunc, ns string, names ...string) runOutcome {
	t.Helper()
	manifest := fmt.Sprintf("apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  source:\n    inline:\n      main.tf: |\n",
		sameRunName, ns)
	for _, line := range strings.Split(strings.TrimRight(helloTF, "\n"), "\n") {
		manifest += "        " + line + "\n"
	}
	manifest += sameRunSpec
	if out, err := kubectl(manifest, "create", "-f", "-"); err != nil {
		t.Fatalf("creating the run in %s: %v %s", ns, err, out)
	}
	get := func(args ...string) string {
		t.Helper()
		out, err := kubectl("", args...)
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return out
	}
	deadline := time.Now().Add(4 * time.Minute)
	for {
		p := get("get", "tfr", sameRunName, "-n", ns, "-o", "jsonpath={.status.phase}")
		if p == "Succeeded" || p == "Failed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run in %s is still %q after 4m", ns, p)
		}
		time.Sleep(time.Second)
	}
	var o runOutcome
	o.Status = get("get", "tfr", sameRunName, "-n", ns, "-o",
		`jsonpath=phase={.status.phase} stages={range .status.stages[*]}{.name}-{.attempt}-{.reason},{end} plan=+{.status.plan.add}~{.status.plan.change}-{.status.plan.destroy} message={.status.message} outputs={range .status.outputs[*]}{.name}={.value}{.valueOmitted},{end}`)
	o.PlanText = get("get", "tfr", sameRunName, "-n", ns, "-o", "jsonpath={.status.plan.parts.text}")
	o.PlanSource = get("get", "tfr", sameRunName, "-n", ns, "-o", "jsonpath={.status.plan.parts.source}")
	path := fmt.Sprintf("/apis/terrarun.dev/v1alpha1/namespaces/%s/terraformruns/%s/", ns, sameRunName)
	var plan map[string]any
	if err := json.Unmarshal([]byte(get("get", "--raw", path+"plan?format=json")), &plan); err != nil {
		t.Fatalf("the plan JSON: %v", err)
	}
	delete(plan, "timestamp")
	canonical, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(canonical)
	o.PlanJSON = "sha256:" + hex.EncodeToString(sum[:])
	o.Log = get("get", "--raw", path+"logs?stage=plan") + "\n----- apply -----\n" + get("get", "--raw", path+"logs?stage=apply")
	// The plan file's digest, and the plan's, which covers it, differ by
	// the time the plan file records.
	for _, digest := range strings.Fields(get("get", "tfr", sameRunName, "-n", ns, "-o", "jsonpath={.status.plan.digest} {.status.plan.parts.file}")) {
		o.Log = strings.ReplaceAll(o.Log, digest, "<plan file digest>")
	}
	for _, v := range logVariables {
		o.Log = v.re.ReplaceAllString(o.Log, v.with)
	}
	for _, name := range append([]string{ns}, names...) {
		if name != "" {
			o.Log = strings.ReplaceAll(o.Log, name, "<name>")
		}
	}
	return o
}

// sameOutcomes fails t unless every executor's outcome is the first's.
func sameOutcomes(t *testing.T, executors []string, outcomes []runOutcome) {
	t.Helper()
	want := outcomes[0]
	if !strings.HasPrefix(want.Status, "phase=Succeeded stages=plan-1-Completed,apply-1-Completed, plan=+1~0-0 ") || !strings.Contains(want.Status, "greeting=hello,token=Sensitive,") || !strings.Contains(want.Log, "Apply complete!") {
		t.Errorf("%s: the trivial run did not end as it should:\n%+v", executors[0], want)
	}
	for i, got := range outcomes[1:] {
		for _, c := range []struct{ what, got, want string }{
			{"status", got.Status, want.Status},
			{"plan text digest", got.PlanText, want.PlanText},
			{"planned configuration digest", got.PlanSource, want.PlanSource},
			{"plan JSON digest (without its timestamp)", got.PlanJSON, want.PlanJSON},
			{"log", got.Log, want.Log},
		} {
			if c.got != c.want || c.got == "" {
				t.Errorf("the trivial run's %s on %s differs from %s's:\n%s\n----- %s -----\n%s", c.what, executors[i+1], executors[0], c.got, executors[0], c.want)
			}
		}
	}
}

// startStandalone starts terrarun-apiserver --standalone with its local
// executor, from the images make images built (the server's binary, and
// the executor image's terrarun-executor and tofu), and returns a
// kubectlFunc for its admin.
func startStandalone(t *testing.T) kubectlFunc {
	t.Helper()
	server := filepath.Join(cl.imageDir, "terrarun-apiserver", "usr", "local", "bin", "terrarun-apiserver")
	bin := filepath.Join(cl.imageDir, "terrarun-executor", "usr", "local", "bin")
	port, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(t.TempDir(), "standalone")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, server, "--standalone", "--data-dir", dataDir, "--secure-port", fmt.Sprint(port),
		"--executor-binary", filepath.Join(bin, "terrarun-executor"), "--default-engine", "tofu")
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cancel()
		<-exited
		if t.Failed() {
			t.Logf("the standalone server's output:\n%s", out.String())
		}
	})
	kubeconfig := filepath.Join(dataDir, "admin.kubeconfig")
	if _, err := harness.WaitReady(kubeconfig, exited); err != nil {
		t.Fatalf("the standalone server: %v\n%s", err, out.String())
	}
	return func(stdin string, args ...string) (string, error) {
		return cl.kubectlWith(kubeconfig, "standalone", stdin, args...)
	}
}

// clusterKubectl is cl's kubectl as its admin.
func clusterKubectl(stdin string, args ...string) (string, error) {
	return cl.kubectlStdin("admin", stdin, args...)
}
