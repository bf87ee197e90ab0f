package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned/scheme"
	"github.com/terrarun/terrarun/pkg/stage"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// newNamespace creates a namespace for one scenario, with alice as editor,
// bob as approver (and viewer) and carol as viewer, as the README says.
func newNamespace(t testing.TB) string {
	t.Helper()
	buf := make([]byte, 3)
	_, _ = rand.Read(buf)
	return newNamespaceNamed(t, "e2e-"+hex.EncodeToString(buf))
}

// newNamespaceNamed is newNamespace with the namespace's name.
func newNamespaceNamed(t testing.TB, ns string) string {
	t.Helper()
	mustAs(t, "admin", "create", "namespace", ns)
	t.Cleanup(func() { _, _ = cl.kubectlAs("admin", "delete", "namespace", ns, "--wait=false") })
	mustAs(t, "admin", "create", "rolebinding", "alice-edit", "-n", ns, "--clusterrole=terrarun-edit", "--user=alice")
	mustAs(t, "admin", "create", "rolebinding", "bob-approve", "-n", ns, "--clusterrole=terrarun-approve", "--user=bob")
	mustAs(t, "admin", "create", "rolebinding", "bob-view", "-n", ns, "--clusterrole=terrarun-view", "--user=bob")
	mustAs(t, "admin", "create", "rolebinding", "carol-view", "-n", ns, "--clusterrole=terrarun-view", "--user=carol")
	// The pods run as the namespace's default service account.
	waitFor(t, time.Minute, "the default service account of "+ns, func() bool {
		_, err := cl.kubectlAs("admin", "get", "serviceaccount", "default", "-n", ns)
		return err == nil
	})
	return ns
}

func mustAs(t testing.TB, user string, args ...string) string {
	t.Helper()
	out, err := cl.kubectlAs(user, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func waitFor(t testing.TB, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	if err := harness.Poll(t.Context(), 200*time.Millisecond, timeout, what, func(context.Context) bool { return ok() }); err != nil {
		t.Fatal(err)
	}
}

// createRun creates a run as user from a manifest with an inline config.
func createRun(t testing.TB, user, ns, name, mainTF, extra string) {
	t.Helper()
	createRunFiles(t, user, ns, name, map[string]string{"main.tf": mainTF}, extra)
}

// createRunFiles creates a run as user from a manifest with inline files.
func createRunFiles(t testing.TB, user, ns, name string, files map[string]string, extra string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n", name, ns)
	fmt.Fprintf(&b, "  workspace: %s\n  source:\n    inline:\n", name)
	for _, file := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(&b, "      %q: |\n", file)
		for _, line := range strings.Split(strings.TrimRight(files[file], "\n"), "\n") {
			b.WriteString("        " + line + "\n")
		}
	}
	b.WriteString(extra)
	if _, err := cl.kubectlStdin(user, b.String(), "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
}

func phase(t testing.TB, ns, name string) string {
	out, err := cl.kubectlAs("admin", "get", "tfr", name, "-n", ns, "-o", "jsonpath={.status.phase}")
	if err != nil {
		return ""
	}
	return out
}

func waitPhase(t testing.TB, ns, name string, timeout time.Duration, phases ...string) string {
	t.Helper()
	var got string
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		got = phase(t, ns, name)
		for _, p := range phases {
			if got == p {
				return got
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	status, _ := cl.kubectlAs("admin", "get", "tfr", name, "-n", ns, "-o", "jsonpath={.status}")
	t.Fatalf("run %s/%s did not reach %v within %s (phase %q); status: %s", ns, name, phases, timeout, got, status)
	return ""
}

func raw(ns, name, sub string) string {
	return fmt.Sprintf("/apis/terrarun.dev/v1alpha1/namespaces/%s/terraformruns/%s/%s", ns, name, sub)
}

const helloTF = `resource "terraform_data" "hello" {
  input = "hello"
}

output "greeting" {
  value = terraform_data.hello.output
}

output "token" {
  value     = "sensitive-${terraform_data.hello.output}"
  sensitive = true
}
`

// approve approves the run's current plan as user.
func approve(t *testing.T, user, ns, name string) (string, error) {
	t.Helper()
	digest := mustAs(t, "admin", "get", "tfr", name, "-n", ns, "-o", "jsonpath={.status.plan.digest}")
	file := filepath.Join(t.TempDir(), "approval.yaml")
	body := fmt.Sprintf(`{"apiVersion":"terrarun.dev/v1alpha1","kind":"TerraformRunApproval","planDigest":%q,"comment":"e2e"}`, digest)
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return cl.kubectlAs(user, "create", "--raw", raw(ns, name, "approve"), "-f", file)
}

// TestLifecycleAndRBAC is scenarios 1 and 2: alice creates and follows a run,
// RBAC on subresources decides who approves, and the apply runs in a second Job.
func TestLifecycleAndRBAC(t *testing.T) {
	ns := newNamespace(t)
	createRun(t, "alice", ns, "hello", helloTF, "")

	out := mustAs(t, "alice", "get", "terraformruns", "-n", ns)
	if !regexp.MustCompile(`NAME\s+PHASE\s+PLAN\s+POLICY\s+APPROVED-BY\s+AGE\n`).MatchString(out) || !strings.Contains(out, "hello") {
		t.Fatalf("get terraformruns through the aggregator:\n%s", out)
	}
	waitFor(t, 2*time.Minute, "the plan Job", func() bool {
		jobs, _ := cl.kubectlAs("admin", "get", "jobs", "-n", ns, "-l", "terrarun.dev/run=hello", "-o", "name")
		return strings.Contains(jobs, "job.batch/hello-plan-1")
	})
	follow := streamRaw(t, "alice", raw(ns, "hello", "logs?follow=true&stage=plan"))
	if got := waitPhase(t, ns, "hello", 5*time.Minute, "AwaitingApproval", "Failed"); got != "AwaitingApproval" {
		t.Fatalf("run ended %s: %s", got, mustAs(t, "admin", "get", "tfr", "hello", "-n", ns, "-o", "jsonpath={.status.message}"))
	}
	l, err := follow.Wait(5 * time.Minute)
	if err != nil {
		t.Fatalf("the log follow did not end with the stage: %v\n%s", err, l)
	}
	if !strings.Contains(l, "Plan: 1 to add, 0 to change, 0 to destroy.") {
		t.Errorf("followed plan log:\n%s", l)
	}
	if plan := mustAs(t, "alice", "get", "--raw", raw(ns, "hello", "plan")); !strings.Contains(plan, "1 to add") {
		t.Errorf("plan:\n%s", plan)
	}
	// The stage took the engine's version from the image's record instead
	// of asking the engine.
	if logs := mustAs(t, "admin", "logs", "-n", ns, "job/hello-plan-1"); !strings.Contains(logs, "terrarun: running tofu plan") || !regexp.MustCompile(`terrarun: tofu \S+ \(version on record\)`).MatchString(logs) {
		t.Errorf("kubectl logs job/hello-plan-1:\n%s", logs)
	}

	// RBAC on subresources. (kubectl reads "terraformruns/approve" as the run
	// named approve; the subresource is --subresource.)
	if out, _ := cl.kubectlAs("alice", "auth", "can-i", "create", "terraformruns", "--subresource=approve", "-n", ns); strings.TrimSpace(out) != "no" {
		t.Errorf("alice can-i create terraformruns --subresource=approve = %q, want no", out)
	}
	if out := mustAs(t, "bob", "auth", "can-i", "create", "terraformruns", "--subresource=approve", "-n", ns); strings.TrimSpace(out) != "yes" {
		t.Errorf("bob can-i create terraformruns --subresource=approve = %q, want yes", out)
	}
	if _, err := approve(t, "alice", ns, "hello"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("alice's approval: %v, want 403", err)
	}
	if _, err := approve(t, "bob", ns, "hello"); err != nil {
		t.Fatalf("bob's approval: %v", err)
	}
	if got := waitPhase(t, ns, "hello", 5*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
		t.Fatalf("run ended %s: %s", got, mustAs(t, "admin", "get", "tfr", "hello", "-n", ns, "-o", "jsonpath={.status.message}"))
	}
	if by := mustAs(t, "alice", "get", "tfr", "hello", "-n", ns, "-o", "jsonpath={.status.approval.approvedBy}"); by != "bob" {
		t.Errorf("approvedBy = %q, want bob", by)
	}
	jobs := mustAs(t, "admin", "get", "jobs", "-n", ns, "-l", "terrarun.dev/run=hello", "-o", "jsonpath={range .items[*]}{.metadata.name}={.status.succeeded} {end}")
	if !strings.Contains(jobs, "hello-plan-1=1") || !strings.Contains(jobs, "hello-apply-1=1") {
		t.Errorf("jobs: %s, want hello-plan-1 and hello-apply-1 succeeded", jobs)
	}

	// carol (terrarun-view) reads plans and logs but not outputs.
	mustAs(t, "carol", "get", "--raw", raw(ns, "hello", "plan"))
	mustAs(t, "carol", "get", "--raw", raw(ns, "hello", "logs?stage=apply"))
	if _, err := cl.kubectlAs("carol", "get", "--raw", raw(ns, "hello", "outputs")); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("carol reading outputs: %v, want 403", err)
	}
	if outputs := mustAs(t, "alice", "get", "--raw", raw(ns, "hello", "outputs")); !strings.Contains(outputs, "sensitive-hello") {
		t.Errorf("alice reading outputs:\n%s", outputs)
	}
}

// streamRaw starts a `kubectl get --raw path` as user.
func streamRaw(t *testing.T, user, path string) *harness.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	s, err := harness.StartStream(ctx, cl.kubectl, cl.kubeconfigs[user], path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestExecutorIsolation is scenario 3: run A's executor token cannot write
// run B's logs or plan.
func TestExecutorIsolation(t *testing.T) {
	ns := newNamespace(t)
	createRun(t, "alice", ns, "run-a", helloTF, "")
	createRun(t, "alice", ns, "run-b", helloTF, "")
	waitPhase(t, ns, "run-a", 5*time.Minute, "AwaitingApproval")
	waitPhase(t, ns, "run-b", 5*time.Minute, "AwaitingApproval")

	// run-a's pod's own credentials, its stage key included: the identity
	// checks, not a missing key, refuse these.
	cred := podCredentials(t, ns, "run-a-plan-1")
	for _, path := range []string{raw(ns, "run-b", "logs?stage=plan&attempt=1"), raw(ns, "run-b", "plan?attempt=1&part=text"), raw(ns, "run-b", "statelock")} {
		code, body := postAs(t, cred, path)
		if code != http.StatusForbidden {
			t.Errorf("POST %s with run-a's executor token: %d %s, want 403", path, code, body)
		}
	}
	// The same token may not even write its own run once its stage ended.
	if code, body := postAs(t, cred, raw(ns, "run-a", "logs?stage=plan&attempt=1")); code != http.StatusForbidden {
		t.Errorf("POST run-a's logs after its plan ended: %d %s, want 403", code, body)
	}
}

// podToken reads the projected terrarun.dev token of a Job's pod from the
// podCredential is what an executor pod presents: its projected token for
// terrarun's audience and its stage's key.
type podCredential struct{ token, key string }

// podCredentials reads the credentials of the pod of job in namespace ns,
// where the node agent mounted them.
func podCredentials(t *testing.T, ns, job string) podCredential {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(cl.agentDir, "*", ns+"_"+job+"-*", "volumes"))
	for _, d := range dirs {
		token, err := os.ReadFile(filepath.Join(d, "terrarun-token", "token"))
		if err != nil || len(token) == 0 {
			continue
		}
		key, err := os.ReadFile(filepath.Join(d, "stage", "stage-key"))
		if err != nil {
			t.Fatalf("the pod of job %s/%s has a token and no stage key: %v", ns, job, err)
		}
		return podCredential{token: strings.TrimSpace(string(token)), key: strings.TrimSpace(string(key))}
	}
	t.Fatalf("no projected terrarun.dev token for job %s/%s under %s", ns, job, cl.agentDir)
	return podCredential{}
}

// postAs POSTs to terrarun directly, as executors do, with cred (its key
// only when it has one).
func postAs(t *testing.T, cred podCredential, path string) (int, string) {
	t.Helper()
	cfg := &rest.Config{Host: cl.serviceURL, TLSClientConfig: rest.TLSClientConfig{CAFile: cl.trCA}, Timeout: 30 * time.Second}
	if cred.key != "" {
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
				req = req.Clone(req.Context())
				req.Header.Set(stage.StageKeyHeader, cred.key)
				return rt.RoundTrip(req)
			})
		}
	}
	code, body, err := harness.RequestAs(t.Context(), cfg, cred.token, http.MethodPost, path, strings.NewReader("forged\n"))
	if err != nil {
		t.Fatal(err)
	}
	return code, body
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestGarbageCollection is scenario 4: deleting a run removes its Jobs
// through ownerReferences and its artifacts from terrarun's etcd.
func TestGarbageCollection(t *testing.T) {
	ns := newNamespace(t)
	createRun(t, "alice", ns, "doomed", helloTF, "")
	waitPhase(t, ns, "doomed", 5*time.Minute, "AwaitingApproval")
	uid := mustAs(t, "admin", "get", "tfr", "doomed", "-n", ns, "-o", "jsonpath={.metadata.uid}")
	prefix := fmt.Sprintf("/terrarun/artifacts/%s/doomed/%s/", ns, uid)
	if n := etcdKeys(t, prefix); n == 0 {
		t.Fatalf("no artifacts under %s before the delete", prefix)
	}
	mustAs(t, "alice", "delete", "tfr", "doomed", "-n", ns)
	waitFor(t, 2*time.Minute, "the run's Jobs to be garbage collected", func() bool {
		jobs, err := cl.kubectlAs("admin", "get", "jobs", "-n", ns, "-l", "terrarun.dev/run=doomed", "-o", "name")
		return err == nil && strings.TrimSpace(jobs) == ""
	})
	waitFor(t, time.Minute, "the run's artifacts to be removed", func() bool { return etcdKeys(t, prefix) == 0 })
}

// etcdKeys counts the keys under prefix in terrarun's etcd.
func etcdKeys(t *testing.T, prefix string) int64 {
	t.Helper()
	return etcdGet(t, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()).Count
}

// withEtcd calls fn with a client of terrarun's etcd and a context that
// bounds its requests.
func withEtcd(t testing.TB, fn func(ctx context.Context, c *clientv3.Client) error) {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: cl.trEtcd, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fn(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// etcdGet reads key from terrarun's etcd.
func etcdGet(t testing.TB, key string, opts ...clientv3.OpOption) (resp *clientv3.GetResponse) {
	t.Helper()
	withEtcd(t, func(ctx context.Context, c *clientv3.Client) (err error) {
		resp, err = c.Get(ctx, key, opts...)
		return err
	})
	return resp
}

// etcdPut writes key in terrarun's etcd.
func etcdPut(t testing.TB, key, value string) {
	t.Helper()
	withEtcd(t, func(ctx context.Context, c *clientv3.Client) error {
		_, err := c.Put(ctx, key, value)
		return err
	})
}

// TestFailure is scenario 5: a failing config ends Failed, its Job fails,
// describe shows why, and nothing is retried.
func TestFailure(t *testing.T) {
	ns := newNamespace(t)
	createRun(t, "alice", ns, "broken", "resource \"terraform_data\" \"x\" {\n  input = \n}\n", "")
	if got := waitPhase(t, ns, "broken", 5*time.Minute, "Failed", "AwaitingApproval"); got != "Failed" {
		t.Fatalf("phase %s, want Failed", got)
	}
	failed := mustAs(t, "admin", "get", "job", "broken-plan-1", "-n", ns, "-o", "jsonpath={.status.failed}")
	if failed != "1" {
		t.Errorf("job broken-plan-1 status.failed = %q, want 1", failed)
	}
	waitFor(t, time.Minute, "an Event explaining the failure", func() bool {
		out, _ := cl.kubectlAs("alice", "describe", "tfr", "broken", "-n", ns)
		return strings.Contains(out, "PlanFailed") && strings.Contains(out, "Error")
	})
	time.Sleep(5 * time.Second) // no retry may appear afterwards
	jobs := mustAs(t, "admin", "get", "jobs", "-n", ns, "-l", "terrarun.dev/run=broken", "-o", "name")
	if strings.TrimSpace(jobs) != "job.batch/broken-plan-1" {
		t.Errorf("jobs of the failed run: %q, want only broken-plan-1", jobs)
	}
}

// TestOutputsSecret is scenario 6.
func TestOutputsSecret(t *testing.T) {
	ns := newNamespace(t)
	// The run creates the Secret on alice's behalf: she must be allowed to.
	mustAs(t, "admin", "create", "role", "secret-writer", "-n", ns, "--verb=create", "--resource=secrets")
	mustAs(t, "admin", "create", "rolebinding", "alice-secret-writer", "-n", ns, "--role=secret-writer", "--user=alice")
	createRun(t, "alice", ns, "publish", helloTF, "  approval:\n    mode: Auto\n  outputsSecret: publish-outputs\n")
	if got := waitPhase(t, ns, "publish", 5*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
		t.Fatalf("phase %s: %s", got, mustAs(t, "admin", "get", "tfr", "publish", "-n", ns, "-o", "jsonpath={.status.message}"))
	}
	var secret struct {
		Metadata struct {
			OwnerReferences []struct{ Kind, Name string } `json:"ownerReferences"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal([]byte(mustAs(t, "admin", "get", "secret", "publish-outputs", "-n", ns, "-o", "json")), &secret); err != nil {
		t.Fatal(err)
	}
	if len(secret.Metadata.OwnerReferences) != 1 || secret.Metadata.OwnerReferences[0].Kind != "TerraformRun" || secret.Metadata.OwnerReferences[0].Name != "publish" {
		t.Errorf("owner of the outputs Secret: %+v", secret.Metadata.OwnerReferences)
	}
	for key, want := range map[string]string{"greeting": "hello", "token": "sensitive-hello"} {
		if got := decode(secret.Data[key]); got != want {
			t.Errorf("secret key %s = %q, want %q", key, got, want)
		}
	}
}

func decode(s string) string {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "<invalid base64>"
	}
	return string(b)
}

// TestCreatorsOwnRights attacks the server's authority as a user with only
// terrarun-edit would: a run that reads a Secret she may not read, runs as a
// ServiceAccount she may not use, or pulls an image the cluster policy does
// not allow is refused at create, naming the field; once she may read the
// Secret, the same run is accepted.
func TestCreatorsOwnRights(t *testing.T) {
	ns := newNamespace(t)
	mustAs(t, "admin", "create", "secret", "generic", "db", "-n", ns, "--from-literal=password=not-alices")
	mustAs(t, "admin", "create", "serviceaccount", "deployer", "-n", ns)
	secretVar := "  variables:\n  - name: password\n    valueFrom:\n      secretKeyRef:\n        name: db\n        key: password\n"
	tf := "variable \"password\" {\n  sensitive = true\n}\nresource \"terraform_data\" \"x\" {}\n"
	for _, tc := range []struct {
		name, tf, extra string
		want            []string
	}{
		{"secret", tf, secretVar, []string{"Forbidden", `spec.variables[0].valueFrom.secretKeyRef.name: user "alice" may not get secrets "db" in namespace "` + ns + `"`}},
		{"serviceaccount", helloTF, "  executor:\n    serviceAccountName: deployer\n",
			[]string{"Forbidden", `spec.executor.serviceAccountName: user "alice" may not create pods in namespace "` + ns + `"`}},
		{"image", helloTF, "  engine:\n    image: evil.example/executor:latest\n",
			[]string{"Forbidden", `spec.engine.image: image "evil.example/executor:latest" is not allowed by the cluster policy`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			manifest := fmt.Sprintf("apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n"+
				"  source:\n    inline:\n      main.tf: %q\n%s", tc.name, ns, tc.tf, tc.extra)
			out, err := cl.kubectlStdin("alice", manifest, "create", "-f", "-")
			if err == nil {
				t.Fatalf("alice created a run that uses what she may not:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error()+out, w) {
					t.Errorf("the refusal lacks %q:\n%v\n%s", w, err, out)
				}
			}
		})
	}

	// With the right to read the Secret, the same run is hers to create.
	mustAs(t, "admin", "create", "role", "db-reader", "-n", ns, "--verb=get", "--resource=secrets", "--resource-name=db")
	mustAs(t, "admin", "create", "rolebinding", "alice-db-reader", "-n", ns, "--role=db-reader", "--user=alice")
	manifest := fmt.Sprintf("apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: granted\n  namespace: %s\nspec:\n"+
		"  source:\n    inline:\n      main.tf: %q\n%s", ns, tf, secretVar)
	// The cluster's authorizer may answer from a cache for a few seconds.
	waitFor(t, time.Minute, "alice's run with the Secret she may now read", func() bool {
		_, err := cl.kubectlStdin("alice", manifest, "create", "-f", "-")
		return err == nil
	})
}

// TestProviderPlugin runs a real provider plugin (test/provider, which the
// executor's image installs from a filesystem mirror) in executor Jobs, in a
// namespace and with a run name of 60 characters each.
func TestProviderPlugin(t *testing.T) {
	buf := make([]byte, 3)
	_, _ = rand.Read(buf)
	ns := "e2e-providers-" + hex.EncodeToString(buf) + "-"
	ns = newNamespaceNamed(t, ns+strings.Repeat("n", 60-len(ns)))
	name := "provider-run-" + strings.Repeat("r", 60-len("provider-run-"))
	createRun(t, "alice", ns, name, harness.TestProviderRequirement+`
resource "testing_file" "f" {
  path    = "${abspath(path.root)}/written-by-the-provider.txt"
  content = "from a plugin"
}

data "testing_file" "back" {
  path = testing_file.f.path
}

output "content" {
  value = data.testing_file.back.content
}
`, "  approval:\n    mode: Auto\n")
	if got := waitPhase(t, ns, name, 4*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
		t.Fatalf("the run ended %s: %s\nplan log:\n%s", got,
			mustAs(t, "admin", "get", "tfr", name, "-n", ns, "-o", "jsonpath={.status.message}"),
			mustAs(t, "admin", "get", "--raw", raw(ns, name, "logs?stage=plan")))
	}
	// An Auto run plans and applies in one Job: its plan stage installed the
	// provider, its apply stage used it.
	if jobs := strings.Fields(mustAs(t, "admin", "get", "tfr", name, "-n", ns, "-o", "jsonpath={.status.stages[*].job}")); len(jobs) != 2 || jobs[0] != jobs[1] || !strings.HasSuffix(jobs[0], "-plan-1") {
		t.Errorf("the stages ran in Jobs %q, want the plan's Job for both", jobs)
	}
	if log := mustAs(t, "admin", "get", "--raw", raw(ns, name, "logs?stage=plan")); !strings.Contains(log, "terrarun/testing") {
		t.Errorf("the plan log does not show the provider installed:\n%s", log)
	}
	if log := mustAs(t, "admin", "get", "--raw", raw(ns, name, "logs?stage=apply")); !strings.Contains(log, "testing_file.f: Creation complete") {
		t.Errorf("the apply log does not show the resource created:\n%s", log)
	}
	if out := mustAs(t, "admin", "get", "tfr", name, "-n", ns, "-o", "jsonpath={.status.outputs[0].value}"); out != "from a plugin" {
		t.Errorf("status.outputs[0].value = %s, want the data source's read of the file", out)
	}
}

// TestContentNegotiationThroughTheAggregator: through kube-apiserver, a
// client that accepts protobuf or JSON gets the runs in protobuf.
func TestContentNegotiationThroughTheAggregator(t *testing.T) {
	ns := newNamespace(t)
	createRun(t, "alice", ns, "negotiated", helloTF, "")
	cfg, err := clientcmd.BuildConfigFromFlags("", cl.kubeconfigs["admin"])
	if err != nil {
		t.Fatal(err)
	}
	code, ctype, body, err := harness.GetWithAccept(t.Context(), cfg, "/apis/terrarun.dev/v1alpha1/namespaces/"+ns+"/terraformruns",
		runtime.ContentTypeProtobuf+", application/json")
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusOK || ctype != runtime.ContentTypeProtobuf {
		t.Fatalf("list with protobuf or JSON accepted: %d %s %.300q", code, ctype, body)
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
	if err != nil {
		t.Fatalf("decoding the protobuf list: %v", err)
	}
	if list, ok := obj.(*v1alpha1.TerraformRunList); !ok || len(list.Items) != 1 || list.Items[0].Name != "negotiated" {
		t.Errorf("the protobuf list decoded to %T %+v, want the run negotiated", obj, obj)
	}
	// Stored in protobuf too: Kubernetes' envelope, magic "k8s\x00".
	found := false
	for _, kv := range etcdGet(t, "/registry/", clientv3.WithPrefix()).Kvs {
		if strings.HasSuffix(string(kv.Key), "/terraformruns/"+ns+"/negotiated") {
			found = true
			if !bytes.HasPrefix(kv.Value, []byte("k8s\x00")) {
				t.Errorf("%s is stored as %.40q, want protobuf", kv.Key, kv.Value)
			}
		}
	}
	if !found {
		t.Errorf("the run negotiated is not in terrarun's etcd under /registry/")
	}
}

// TestForgedApplyJob attacks the approval gate as a tenant who may create
// Jobs in the namespace but not approve: before bob approves, carol creates
// the apply stage's Job herself, with its deterministic name, the run's
// labels and ownerReference (all readable by a viewer) and a pod that does
// nothing and succeeds. Once approved, the run must not report that Job's
// success as its apply: it fails, naming the forged Job.
func TestForgedApplyJob(t *testing.T) {
	ns := newNamespace(t)
	mustAs(t, "admin", "create", "role", "job-writer", "-n", ns, "--verb=create,get", "--resource=jobs")
	mustAs(t, "admin", "create", "rolebinding", "carol-jobs", "-n", ns, "--role=job-writer", "--user=carol")
	createRun(t, "alice", ns, "forged", helloTF, "")
	waitPhase(t, ns, "forged", 5*time.Minute, "AwaitingApproval")

	uid := mustAs(t, "carol", "get", "tfr", "forged", "-n", ns, "-o", "jsonpath={.metadata.uid}")
	job := fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  name: forged-apply-1
  namespace: %[1]s
  labels: {terrarun.dev/run: forged, terrarun.dev/run-uid: %[2]s, terrarun.dev/stage: apply, terrarun.dev/attempt: "1"}
  annotations: {terrarun.dev/run-name: forged}
  ownerReferences:
  - {apiVersion: terrarun.dev/v1alpha1, kind: TerraformRun, name: forged, uid: %[2]s, controller: true}
spec:
  backoffLimit: 0
  template:
    metadata:
      labels: {terrarun.dev/run: forged, terrarun.dev/run-uid: %[2]s, terrarun.dev/stage: apply, terrarun.dev/attempt: "1"}
      annotations: {terrarun.dev/run-name: forged}
    spec:
      restartPolicy: Never
      automountServiceAccountToken: false
      containers:
      - name: executor
        image: ghcr.io/terrarun/terrarun-executor:latest
        command: ["/bin/true"]
`, ns, uid)
	if _, err := cl.kubectlStdin("carol", job, "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "carol's Job to complete", func() bool {
		out, _ := cl.kubectlAs("admin", "get", "job", "forged-apply-1", "-n", ns, "-o", `jsonpath={.status.conditions[?(@.type=="Complete")].status}`)
		return out == "True"
	})

	if out, err := approve(t, "bob", ns, "forged"); err != nil {
		t.Fatalf("bob's approval: %v: %s", err, out)
	}
	got := waitPhase(t, ns, "forged", 3*time.Minute, "Succeeded", "Failed")
	msg := mustAs(t, "admin", "get", "tfr", "forged", "-n", ns, "-o", "jsonpath={.status.message}")
	if got != "Failed" || !strings.Contains(msg, "Job "+ns+"/forged-apply-1 carries this run's labels but is not the one terrarun builds") {
		t.Fatalf("with carol's Job in place of the apply stage's, the run is %s: %q; want Failed, naming her Job", got, msg)
	}
	reason := mustAs(t, "admin", "get", "tfr", "forged", "-n", ns, "-o", `jsonpath={.status.conditions[?(@.type=="Applied")].reason}`)
	if reason != "ExecutorForged" {
		t.Errorf("Applied condition reason %q, want ExecutorForged", reason)
	}
}

// TestWorkspaceInCluster keeps a workspace applied through executor Jobs:
// its outputs go to a Secret it owns (which alice may name only once she may
// create Secrets), a change of the ConfigMap it reads starts a run at once
// (ConfigMaps are watched, not read again every minute), and deleting it
// runs a destroy Job before the finalizer lets it go.
func TestWorkspaceInCluster(t *testing.T) {
	ns := newNamespace(t)
	ws := fmt.Sprintf(`apiVersion: terrarun.dev/v1alpha1
kind: TerraformWorkspace
metadata:
  name: infra
  namespace: %s
spec:
  destroyOnDelete: true
  outputsSecret: infra-outputs
  template:
    workspace: infra
    variables:
      - name: greeting
        valueFrom:
          configMapKeyRef:
            name: infra-settings
            key: greeting
    source:
      inline:
        main.tf: |
          variable "greeting" {}
          resource "terraform_data" "hello" {
            input = var.greeting
          }
          output "greeting" {
            value = terraform_data.hello.output
          }
`, ns)
	mustAs(t, "admin", "create", "configmap", "infra-settings", "-n", ns, "--from-literal=greeting=hello")
	// A run reads only what its creator may read.
	mustAs(t, "admin", "create", "role", "configmap-reader", "-n", ns, "--verb=get", "--resource=configmaps")
	mustAs(t, "admin", "create", "rolebinding", "alice-configmaps", "-n", ns, "--role=configmap-reader", "--user=alice")
	out, err := cl.kubectlStdin("alice", ws, "create", "-f", "-")
	if err == nil || !strings.Contains(out+err.Error(), "spec.outputsSecret") {
		t.Fatalf("alice named an outputs Secret she may not create: %v %s; want it refused naming spec.outputsSecret", err, out)
	}
	mustAs(t, "admin", "create", "role", "secret-writer", "-n", ns, "--verb=create,get", "--resource=secrets")
	mustAs(t, "admin", "create", "rolebinding", "alice-secrets", "-n", ns, "--role=secret-writer", "--user=alice")
	// terrarun caches the denial it was given for a few seconds.
	waitFor(t, time.Minute, "alice's workspace to be accepted", func() bool {
		_, err := cl.kubectlStdin("alice", ws, "create", "-f", "-")
		return err == nil
	})

	waitPhase(t, ns, "infra-1", 5*time.Minute, "AwaitingApproval")
	if out, err := approve(t, "bob", ns, "infra-1"); err != nil {
		t.Fatalf("approving infra-1: %v %s", err, out)
	}
	waitPhase(t, ns, "infra-1", 5*time.Minute, "Succeeded")
	for _, job := range []string{"infra-1-plan-1", "infra-1-apply-1"} {
		mustAs(t, "admin", "get", "job", job, "-n", ns)
	}
	waitFor(t, time.Minute, "the workspace to be Ready", func() bool {
		out, _ := cl.kubectlAs("admin", "get", "tfws", "infra", "-n", ns, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return out == "True"
	})
	waitFor(t, time.Minute, "the outputs Secret", func() bool {
		out, _ := cl.kubectlAs("admin", "get", "secret", "infra-outputs", "-n", ns, "-o", "jsonpath={.data.greeting}")
		return decode(out) == "hello"
	})
	if owner := mustAs(t, "admin", "get", "secret", "infra-outputs", "-n", ns, "-o", "jsonpath={.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}"); owner != "TerraformWorkspace/infra" {
		t.Errorf("the outputs Secret is owned by %q, want the workspace", owner)
	}

	// The ConfigMap changes: its watch starts the run of the new content
	// well before the minute after which an unwatched one is read again.
	mustAs(t, "admin", "patch", "configmap", "infra-settings", "-n", ns, "--type=merge", "-p", `{"data":{"greeting":"hi"}}`)
	waitFor(t, 40*time.Second, "the ConfigMap's change to start run infra-2", func() bool {
		out, _ := cl.kubectlAs("admin", "get", "tfr", "infra-2", "-n", ns, "-o", "jsonpath={.metadata.annotations.terrarun\\.dev/trigger}")
		return out == "SpecChange"
	})
	waitPhase(t, ns, "infra-2", 5*time.Minute, "AwaitingApproval")
	if out, err := approve(t, "bob", ns, "infra-2"); err != nil {
		t.Fatalf("approving infra-2: %v %s", err, out)
	}
	waitPhase(t, ns, "infra-2", 5*time.Minute, "Succeeded")
	waitFor(t, time.Minute, "the outputs Secret of the new content", func() bool {
		out, _ := cl.kubectlAs("admin", "get", "secret", "infra-outputs", "-n", ns, "-o", "jsonpath={.data.greeting}")
		return decode(out) == "hi"
	})

	mustAs(t, "alice", "delete", "tfws", "infra", "-n", ns, "--wait=false")
	waitPhase(t, ns, "infra-3", 5*time.Minute, "AwaitingApproval")
	if op := mustAs(t, "admin", "get", "tfr", "infra-3", "-n", ns, "-o", "jsonpath={.spec.operation}"); op != "Destroy" {
		t.Fatalf("run infra-3 is a %s, want the Destroy run", op)
	}
	if out, err := approve(t, "bob", ns, "infra-3"); err != nil {
		t.Fatalf("approving the destroy: %v %s", err, out)
	}
	// The destroy Job lives until its run goes with the workspace.
	waitFor(t, 5*time.Minute, "the destroy Job", func() bool {
		_, err := cl.kubectlAs("admin", "get", "job", "infra-3-apply-1", "-n", ns)
		return err == nil
	})
	// The leader dies with the workspace mid-destroy: the next one adopts
	// the destroy run, and removes the workspace once it succeeds.
	killed := killLeader(t)
	waitFor(t, time.Minute, "another replica to lead", func() bool { return leaderPod(t) != killed })
	waitFor(t, 5*time.Minute, "the workspace to be gone", func() bool {
		_, err := cl.kubectlAs("admin", "get", "tfws", "infra", "-n", ns)
		return err != nil
	})
}

// TestJobPluginCache: each creator's runs in a namespace share a plugin
// cache, a PersistentVolumeClaim that terrarun creates. Alice's first run
// installs the test provider into hers; its apply stage, approved by bob and
// run in a Job of its own, and her next run link it from there and install
// nothing. A run of another creator in the same namespace gets a cache of
// its own, and installs the provider into it.
func TestJobPluginCache(t *testing.T) {
	ns := newNamespace(t)
	const tf = harness.TestProviderRequirement + `
resource "testing_file" "f" {
  path    = "${abspath(path.root)}/written-by-the-provider.txt"
  content = "cached"
}
`
	installing := regexp.MustCompile(`Installing (registry\.terraform\.io/)?terrarun/testing`)
	cached := regexp.MustCompile(`Using (registry\.terraform\.io/)?terrarun/testing v0\.1\.0 from the shared cache directory`)
	logOf := func(name, stage string) string {
		return mustAs(t, "admin", "get", "--raw", raw(ns, name, "logs?stage="+stage))
	}
	succeeded := func(name string) {
		t.Helper()
		if got := waitPhase(t, ns, name, 4*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
			t.Fatalf("run %s ended %s: %s\nplan log:\n%s", name, got,
				mustAs(t, "admin", "get", "tfr", name, "-n", ns, "-o", "jsonpath={.status.message}"), logOf(name, "plan"))
		}
	}
	claims := func() []string {
		return strings.Fields(mustAs(t, "admin", "get", "pvc", "-n", ns, "-l", "terrarun.dev/plugin-cache", "-o", "jsonpath={.items[*].metadata.name}"))
	}

	createRun(t, "alice", ns, "first", tf, "")
	if got := waitPhase(t, ns, "first", 4*time.Minute, "AwaitingApproval", "Failed"); got != "AwaitingApproval" {
		t.Fatalf("the first run ended %s: %s\nplan log:\n%s", got, mustAs(t, "admin", "get", "tfr", "first", "-n", ns, "-o", "jsonpath={.status.message}"), logOf("first", "plan"))
	}
	if l := logOf("first", "plan"); !installing.MatchString(l) {
		t.Errorf("the first plan did not install the provider:\n%s", l)
	}
	if out, err := approve(t, "bob", ns, "first"); err != nil {
		t.Fatalf("bob approves: %v: %s", err, out)
	}
	succeeded("first")
	if jobs := strings.Fields(mustAs(t, "admin", "get", "tfr", "first", "-n", ns, "-o", "jsonpath={.status.stages[*].job}")); len(jobs) != 2 || !strings.HasSuffix(jobs[1], "-apply-1") {
		t.Errorf("the stages ran in Jobs %q, want the apply in a Job of its own", jobs)
	}
	if l := logOf("first", "apply"); !cached.MatchString(l) || installing.MatchString(l) {
		t.Errorf("the apply Job did not take the provider from the plugin cache:\n%s", l)
	}
	if got := claims(); len(got) != 1 {
		t.Fatalf("plugin caches %v after alice's run, want one", got)
	}
	if phase := mustAs(t, "admin", "get", "pvc", claims()[0], "-n", ns, "-o", "jsonpath={.status.phase}"); phase != "Bound" {
		t.Errorf("alice's cache is %s", phase)
	}

	// A new configuration's init links a cached provider only when the
	// configuration's lock file names its checksum (without one, terraform
	// and tofu install it again): the runs below carry one.
	lock, err := cl.provider.LockFile()
	if err != nil {
		t.Fatal(err)
	}
	locked := map[string]string{"main.tf": tf, ".terraform.lock.hcl": lock}
	createRunFiles(t, "alice", ns, "second", locked, "  approval:\n    mode: Auto\n")
	succeeded("second")
	if l := logOf("second", "plan"); !cached.MatchString(l) || installing.MatchString(l) {
		t.Errorf("alice's second run did not take the provider from her cache:\n%s", l)
	}

	createRunFiles(t, "admin", ns, "other-creator", locked, "  approval:\n    mode: Auto\n")
	succeeded("other-creator")
	if l := logOf("other-creator", "plan"); !installing.MatchString(l) {
		t.Errorf("another creator's run did not install the provider into a cache of its own:\n%s", l)
	}
	if got := claims(); len(got) != 2 {
		t.Errorf("plugin caches %v after runs of two creators, want two", got)
	}
}

// TestForeignPluginCache is the attack on the Job plugin cache: someone who
// may create PersistentVolumeClaims in the namespace makes, before alice's
// first run there, the claim where her cache belongs, bound to a volume of
// their choosing (a selector). Her run must not start on it, and must say
// why and what to do; once the claim is deleted, terrarun makes its own and
// the run goes on.
func TestForeignPluginCache(t *testing.T) {
	ns := newNamespace(t)
	claim := "terrarun-plugin-cache-" + executor.PluginCacheKey(&v1alpha1.TerraformRun{Spec: v1alpha1.TerraformRunSpec{Creator: &v1alpha1.Creator{Username: "alice"}}})
	squatted := fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: %s
  namespace: %s
  labels: {terrarun.dev/plugin-cache: %s}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: %s
  selector: {matchLabels: {filled-by: mallory}}
  resources: {requests: {storage: 1Gi}}
`, claim, ns, strings.TrimPrefix(claim, "terrarun-plugin-cache-"), cacheStorageClass)
	if out, err := cl.kubectlStdin("admin", squatted, "create", "-f", "-"); err != nil {
		t.Fatalf("creating the squatting claim: %v: %s", err, out)
	}
	createRun(t, "alice", ns, "victim", helloTF, "  approval:\n    mode: Auto\n")
	waitFor(t, 2*time.Minute, "the run to say why its plan cannot start", func() bool {
		msg, _ := cl.kubectlAs("admin", "get", "tfr", "victim", "-n", ns, "-o", "jsonpath={.status.message}")
		return strings.Contains(msg, "is not the one terrarun creates") && strings.Contains(msg, "spec.selector") && strings.Contains(msg, "Delete it")
	})
	if jobs := mustAs(t, "admin", "get", "jobs", "-n", ns, "-o", "name"); jobs != "" {
		t.Fatalf("a Job started on the squatted cache: %s", jobs)
	}

	mustAs(t, "admin", "delete", "pvc", claim, "-n", ns)
	if got := waitPhase(t, ns, "victim", 4*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
		t.Fatalf("after the claim's deletion the run ended %s: %s", got, mustAs(t, "admin", "get", "tfr", "victim", "-n", ns, "-o", "jsonpath={.status.message}"))
	}
	if sel := mustAs(t, "admin", "get", "pvc", claim, "-n", ns, "-o", "jsonpath={.spec.selector}"); sel != "" {
		t.Errorf("the run's cache is a claim with selector %s, not terrarun's own", sel)
	}
}
