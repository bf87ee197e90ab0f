package e2e

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/terrarun/terrarun/test/internal/harness"
)

// TestStageSecretSwapped is the review's attack on the stage Secret: carol,
// who may only get, create and delete Secrets in the namespace, waits for
// the stage Secret of another user's run, deletes it and creates it again
// with the same labels and owner and her own configuration, before the
// kubelet mounts it (here made certain: the run's pods wait for a node
// label that the test sets once she is done). The executor finds that what
// it was handed is not what its pod's binding names, and runs nothing: the
// plan stage attempt ends ExecutorForged, and neither the plan an approver
// sees nor what an Auto run applies is hers.
func TestStageSecretSwapped(t *testing.T) {
	ns := newNamespace(t)
	mustAs(t, "admin", "create", "role", "secret-swapper", "-n", ns, "--verb=get,create,delete", "--resource=secrets")
	mustAs(t, "admin", "create", "rolebinding", "carol-secrets", "-n", ns, "--role=secret-swapper", "--user=carol")
	hold := "terrarun-e2e/hold-" + ns
	node := nodes[0].name
	t.Cleanup(func() { _, _ = cl.kubectlAs("admin", "label", "node", node, hold+"-") })
	attacker := `output "greeting" {
  value = "carol-was-here"
}
`
	for _, mode := range []string{"Manual", "Auto"} {
		name := "swap-" + strings.ToLower(mode)
		createRun(t, "alice", ns, name, helloTF, fmt.Sprintf("  approval:\n    mode: %s\n  executor:\n    nodeSelector:\n      %s: \"true\"\n", mode, hold))
		secret := name + "-plan-1-stage"
		var js string
		waitFor(t, 2*time.Minute, "the stage Secret "+secret, func() bool {
			out, err := cl.kubectlAs("carol", "get", "secret", secret, "-n", ns, "-o", "json")
			js = out
			return err == nil
		})
		var s map[string]any
		if err := json.Unmarshal([]byte(js), &s); err != nil {
			t.Fatal(err)
		}
		meta := s["metadata"].(map[string]any)
		for _, k := range []string{"resourceVersion", "uid", "creationTimestamp", "managedFields"} {
			delete(meta, k)
		}
		data := s["data"].(map[string]any)
		if _, ok := data["src-main.tf"]; !ok {
			t.Fatalf("the stage Secret has no src-main.tf: %v", data)
		}
		data["src-main.tf"] = b64(attacker)
		forged, _ := json.Marshal(s)
		mustAs(t, "carol", "delete", "secret", secret, "-n", ns)
		if _, err := cl.kubectlStdin("carol", string(forged), "create", "-f", "-"); err != nil {
			t.Fatal(err)
		}
	}
	mustAs(t, "admin", "label", "node", node, hold+"=true")

	for _, run := range []struct{ name, phase string }{{"swap-manual", "AwaitingApproval"}, {"swap-auto", "Succeeded"}} {
		got := waitPhase(t, ns, run.name, 5*time.Minute, run.phase, "Failed")
		if got != run.phase {
			t.Errorf("run %s is %s, want %s: %s", run.name, got, run.phase, mustAs(t, "admin", "get", "tfr", run.name, "-n", ns, "-o", "jsonpath={.status.message}"))
		}
		stages := mustAs(t, "admin", "get", "tfr", run.name, "-n", ns, "-o", `jsonpath={range .status.stages[*]}{.name}-{.attempt}={.reason}{"\n"}{end}`)
		if !strings.Contains(stages, "plan-1=ExecutorForged") {
			t.Errorf("run %s (%s): stages %q, want plan attempt 1 ended ExecutorForged", run.name, got, stages)
		}
		for _, part := range []string{"plan", "plan?format=json"} {
			if out := mustAs(t, "admin", "get", "--raw", raw(ns, run.name, part)); strings.Contains(out, "carol-was-here") {
				t.Errorf("run %s: carol's configuration is in its %s:\n%s", run.name, part, out)
			}
		}
		if events := mustAs(t, "admin", "get", "events", "-n", ns, "--field-selector", "involvedObject.name="+run.name); !strings.Contains(events, "ExecutorForged") {
			t.Errorf("run %s: no ExecutorForged Event:\n%s", run.name, events)
		}
	}
	if out := mustAs(t, "admin", "get", "tfr", "swap-auto", "-n", ns, "-o", "jsonpath={.status.outputs}"); strings.Contains(out, "carol-was-here") || !strings.Contains(out, "hello") {
		t.Errorf("the Auto run applied carol's configuration: outputs %s", out)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestNamespaceDeletedWithDestroyOnDeleteWorkspace deletes a namespace that
// holds a destroyOnDelete workspace. A namespace being deleted takes no new
// run, nor the Jobs and Secrets a stage needs, so the workspace cannot
// destroy: it goes without destroying, says so in the leader's log (its
// Event goes with the namespace), and the namespace is gone within minutes
// instead of staying Terminating until an admin abandons the workspace.
func TestNamespaceDeletedWithDestroyOnDeleteWorkspace(t *testing.T) {
	ns := newNamespace(t)
	ws := fmt.Sprintf(`apiVersion: terrarun.dev/v1alpha1
kind: TerraformWorkspace
metadata:
  name: doomed
  namespace: %s
spec:
  destroyOnDelete: true
  approval:
    mode: Auto
  template:
    workspace: doomed
    source:
      inline:
        main.tf: |
          resource "terraform_data" "x" {}
`, ns)
	if _, err := cl.kubectlStdin("alice", ws, "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "doomed-1", 5*time.Minute, "Succeeded")
	waitFor(t, time.Minute, "the workspace's destroy finalizer", func() bool {
		out, _ := cl.kubectlAs("admin", "get", "tfws", "doomed", "-n", ns, "-o", "jsonpath={.metadata.finalizers}")
		return strings.Contains(out, "terrarun.dev/destroy")
	})
	mustAs(t, "admin", "delete", "namespace", ns, "--wait=false")
	waitFor(t, 5*time.Minute, "namespace "+ns+" to be gone", func() bool {
		_, err := cl.kubectlAs("admin", "get", "namespace", ns)
		return err != nil
	})
	logs := mustAs(t, "admin", "logs", "-n", "terrarun-system", leaderPod(t))
	if !strings.Contains(logs, "Abandoned a workspace's resources") || !strings.Contains(logs, "Namespace "+ns+" is being deleted") {
		t.Errorf("the leader's log does not record the abandonment of workspace %s/doomed", ns)
	}
}

// TestLeakMatrixInCluster is the leak matrix of the standalone suite
// (test/integration/leak_test.go) where cluster mode puts things: a secret
// variable, used raw, declassified into a failing local-exec's output and
// its error, and transformed (upper case, base64 in a sensitive output),
// reaches no Event, pod status (termination messages), pod log, Job or
// Secret of the host cluster but its own, no status, log, plan text or
// plan JSON of terrarun, and no object of the bucket that terrarun, deployed
// by its chart with artifactStore values, keeps every artifact of the runs
// in. (A value declassified after a transformation,
// nonsensitive(base64encode(...)), is printed: the redactor knows only the
// values, a known limit of docs/security.md.)
func TestLeakMatrixInCluster(t *testing.T) {
	bucket := useObjectStore(t)
	ns := newNamespace(t)
	buf := make([]byte, 8)
	_, _ = rand.Read(buf)
	password := "leak-" + hex.EncodeToString(buf)
	mustAs(t, "admin", "create", "secret", "generic", "db", "-n", ns, "--from-literal=password="+password)
	mustAs(t, "admin", "create", "role", "db-reader", "-n", ns, "--verb=get", "--resource=secrets", "--resource-name=db")
	mustAs(t, "admin", "create", "rolebinding", "alice-db", "-n", ns, "--role=db-reader", "--user=alice")
	secretVar := "  variables:\n  - name: password\n    valueFrom:\n      secretKeyRef:\n        name: db\n        key: password\n  approval:\n    mode: Auto\n"
	declared := `variable "password" {
  type      = string
  sensitive = true
}
`
	runs := map[string]string{
		"leak-ok": declared + `resource "terraform_data" "x" {
  input = upper(var.password)
}
output "length" {
  value = nonsensitive(length(var.password))
}
output "encoded" {
  value     = base64encode(var.password)
  sensitive = true
}
`,
		"leak-fails": declared + `resource "terraform_data" "y" {
  provisioner "local-exec" {
    command = "echo got ${nonsensitive(var.password)}; exit 3"
  }
}
`,
	}
	for name, tf := range runs {
		waitFor(t, time.Minute, "alice's run "+name, func() bool {
			_, err := cl.kubectlStdin("alice", fmt.Sprintf("apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  workspace: %s\n  source:\n    inline:\n      main.tf: %q\n%s", name, ns, name, tf, secretVar), "create", "-f", "-")
			return err == nil
		})
	}
	waitPhase(t, ns, "leak-ok", 5*time.Minute, "Succeeded")
	waitPhase(t, ns, "leak-fails", 5*time.Minute, "Failed")

	places := map[string]string{
		"Events":          mustAs(t, "admin", "get", "events", "-n", ns, "-o", "json"),
		"pods":            mustAs(t, "admin", "get", "pods", "-n", ns, "-o", "json"),
		"Jobs":            mustAs(t, "admin", "get", "jobs", "-n", ns, "-o", "json"),
		"runs":            mustAs(t, "admin", "get", "tfr", "-n", ns, "-o", "json"),
		"runs, described": mustAs(t, "admin", "describe", "tfr", "-n", ns),
	}
	// Secrets' data decoded: base64 hides a value at another alignment.
	var secretList struct {
		Items []struct {
			Metadata struct{ Name string }
			Data     map[string]string
		}
	}
	if err := json.Unmarshal([]byte(mustAs(t, "admin", "get", "secrets", "-n", ns, "-o", "json")), &secretList); err != nil {
		t.Fatal(err)
	}
	for _, sec := range secretList.Items {
		if sec.Metadata.Name == "db" {
			continue
		}
		var decoded strings.Builder
		for key, value := range sec.Data {
			raw, err := base64.StdEncoding.DecodeString(value)
			if err != nil {
				t.Fatalf("Secret %s key %s: %v", sec.Metadata.Name, key, err)
			}
			decoded.WriteString(key + "=" + string(raw) + "\n")
		}
		places["Secret "+sec.Metadata.Name] = decoded.String()
	}
	for _, pod := range strings.Fields(mustAs(t, "admin", "get", "pods", "-n", ns, "-o", "jsonpath={.items[*].metadata.name}")) {
		places["log of pod "+pod] = mustAs(t, "admin", "logs", "-n", ns, pod)
	}
	for name := range runs {
		for _, sub := range []string{"logs?stage=plan", "logs?stage=apply", "plan", "plan?format=json"} {
			out, err := cl.kubectlAs("admin", "get", "--raw", raw(ns, name, sub))
			if err != nil {
				out += err.Error()
			}
			places[name+" "+sub] = out
		}
	}
	// With the chart's artifactStore values, every artifact of the runs is
	// in the bucket (the logs once they have ended), and the bucket is one
	// more place.
	for name := range runs {
		uid := mustAs(t, "admin", "get", "tfr", name, "-n", ns, "-o", "jsonpath={.metadata.uid}")
		want := []string{"plan-file", "plan-text", "plan-json", "plan-source", "log/plan/0000000001", "log/apply/0000000001"}
		if name == "leak-ok" {
			want = append(want, "outputs")
		}
		waitFor(t, 2*time.Minute, "run "+name+"'s artifacts in the bucket", func() bool {
			got := bucket.srv.RunObjects(ns, name, uid)
			for _, w := range want {
				if _, ok := got[w]; !ok {
					return false
				}
			}
			return true
		})
	}
	places["the bucket"] = bucket.content(t)
	if !strings.Contains(places["leak-fails logs?stage=apply"], "local-exec provisioner error") {
		t.Fatalf("the failing run's apply log does not show its failure; the matrix would prove nothing:\n%s\nthe run: %s", places["leak-fails logs?stage=apply"], places["runs"])
	}
	forms := map[string]string{"the password": password, "its upper case": strings.ToUpper(password), "its base64": b64(password)}
	for where, content := range places {
		for what, value := range forms {
			if strings.Contains(content, value) {
				t.Errorf("%s appears in %s", what, where)
			}
		}
	}
}

// TestMintedTokenIsNoStage is the review's attack with a minted token: carol,
// who may only create service-account tokens and get pods in the namespace,
// mints a token bound to the Pending pod of another user's plan stage, with
// terrarun's audience, and writes into its log. The token alone is not the
// stage's credential: without the stage's key, which only the stage's
// Secret holds, every write is refused; the stage itself, once it runs,
// plans as ever.
func TestMintedTokenIsNoStage(t *testing.T) {
	ns := newNamespace(t)
	mustAs(t, "admin", "create", "role", "token-minter", "-n", ns, "--verb=create", "--resource=serviceaccounts/token")
	mustAs(t, "admin", "create", "role", "pod-reader", "-n", ns, "--verb=get,list", "--resource=pods")
	mustAs(t, "admin", "create", "rolebinding", "carol-minter", "-n", ns, "--role=token-minter", "--user=carol")
	mustAs(t, "admin", "create", "rolebinding", "carol-pods", "-n", ns, "--role=pod-reader", "--user=carol")
	hold := "terrarun-e2e/hold-" + ns
	node := nodes[1].name
	t.Cleanup(func() { _, _ = cl.kubectlAs("admin", "label", "node", node, hold+"-") })
	createRun(t, "alice", ns, "victim", helloTF, fmt.Sprintf("  executor:\n    nodeSelector:\n      %s: \"true\"\n", hold))

	var pod, uid string
	waitFor(t, 2*time.Minute, "the victim's Pending plan pod", func() bool {
		out, err := cl.kubectlAs("carol", "get", "pods", "-n", ns, "-l", "job-name=victim-plan-1", "-o", `jsonpath={.items[0].metadata.name} {.items[0].metadata.uid}`)
		if err != nil {
			return false
		}
		pod, uid, _ = strings.Cut(strings.TrimSpace(out), " ")
		return pod != "" && uid != ""
	})
	token := strings.TrimSpace(mustAs(t, "carol", "create", "token", "default", "-n", ns, "--audience", "terrarun.dev",
		"--bound-object-kind", "Pod", "--bound-object-name", pod, "--bound-object-uid", uid))
	for _, path := range []string{raw(ns, "victim", "logs?stage=plan&attempt=1"), raw(ns, "victim", "plan?attempt=1&part=text")} {
		code, body := postAs(t, podCredential{token: token}, path)
		if code != http.StatusForbidden || !strings.Contains(body, "stage key") {
			t.Errorf("POST %s with a token carol minted for the stage's pod: %d %s; want 403 for want of the stage key", path, code, body)
		}
	}

	mustAs(t, "admin", "label", "node", node, hold+"=true")
	waitPhase(t, ns, "victim", 5*time.Minute, "AwaitingApproval")
	if logs := mustAs(t, "admin", "get", "--raw", raw(ns, "victim", "logs?stage=plan")); strings.Contains(logs, "forged") {
		t.Errorf("carol's line is in the victim's plan log:\n%s", logs)
	}
}

// stateRun creates an Auto run of workspace as user, with main.tf and
// extra spec lines, and waits for it to end; it returns its phase.
func stateRun(t *testing.T, user, ns, name, workspace, mainTF, extra string) string {
	t.Helper()
	manifest := fmt.Sprintf("apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n"+
		"  workspace: %s\n  approval:\n    mode: Auto\n  source:\n    inline:\n      main.tf: %q\n%s", name, ns, workspace, mainTF, extra)
	if _, err := cl.kubectlStdin(user, manifest, "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	got := waitPhase(t, ns, name, 5*time.Minute, "Succeeded", "Failed")
	if got == "Failed" {
		for _, st := range []string{"plan", "apply"} {
			log, _ := cl.kubectlAs("admin", "get", "--raw", raw(ns, name, "logs?stage="+st))
			t.Logf("run %s/%s failed; its %s log:\n%s", ns, name, st, log)
		}
	}
	return got
}

// planAdds is the number of resources the run's plan adds.
func planAdds(t *testing.T, ns, name string) string {
	return mustAs(t, "admin", "get", "tfr", name, "-n", ns, "-o", "jsonpath={.status.plan.add}")
}

// TestDefaultBackendHoldsNoKubernetesToken is finding 9 of the third review:
// a run without spec.backend got the kubernetes backend with
// in_cluster_config, so its pod held a token of the namespace's default
// ServiceAccount, which the documented executor role let read and replace
// every Secret of the namespace; an editor printed it through an output and
// read a Secret she may not. Now terrarun serves the state: no Kubernetes
// token reaches the pod, the state still goes from one run to the next of a
// workspace, no other namespace and no user reaches it, and its lock is
// visible to viewers.
func TestDefaultBackendHoldsNoKubernetesToken(t *testing.T) {
	ns := newNamespace(t)
	mustAs(t, "admin", "create", "secret", "generic", "db", "-n", ns, "--from-literal=password=hunter2")
	const tokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	mainTF := `resource "terraform_data" "x" {
  input = "v1"
}
output "token" {
  value = fileexists("` + tokenFile + `") ? file("` + tokenFile + `") : "no token"
}
`
	if got := stateRun(t, "alice", ns, "first", "shared", mainTF, ""); got != "Succeeded" {
		t.Fatalf("the first run is %s: %s", got, mustAs(t, "admin", "get", "tfr", "first", "-n", ns, "-o", "jsonpath={.status.message}"))
	}
	token := strings.Trim(mustAs(t, "admin", "get", "tfr", "first", "-n", ns, "-o", `jsonpath={.status.outputs[?(@.name=="token")].value}`), `"`)
	if token != "no token" {
		// The review's attack: the token reads the Secret alice may not.
		if err := cl.writeKubeconfig("stolen-"+ns, token); err != nil {
			t.Fatal(err)
		}
		out, err := cl.kubectlAs("stolen-"+ns, "get", "secret", "db", "-n", ns, "-o", "jsonpath={.data.password}")
		t.Fatalf("the run's code read a Kubernetes token (%d bytes); with it, get secret db: %q, %v", len(token), out, err)
	}
	if _, err := cl.kubectlAs("alice", "get", "secret", "db", "-n", ns); err == nil {
		t.Fatal("alice may get secret db: the test proves nothing")
	}

	// The state went to terrarun: the next run of the workspace has
	// nothing to add, a run of another workspace and one of the same
	// workspace in another namespace have.
	if got := stateRun(t, "alice", ns, "second", "shared", mainTF, ""); got != "Succeeded" || planAdds(t, ns, "second") != "0" {
		t.Errorf("the second run of the workspace is %s and adds %s resources, want Succeeded adding 0", got, planAdds(t, ns, "second"))
	}
	other := newNamespace(t)
	for _, r := range []struct{ ns, name, workspace string }{{ns, "elsewhere", "other"}, {other, "first", "shared"}} {
		if got := stateRun(t, "alice", r.ns, r.name, r.workspace, mainTF, ""); got != "Succeeded" || planAdds(t, r.ns, r.name) != "1" {
			t.Errorf("run %s/%s of workspace %s is %s and adds %s resources, want Succeeded adding 1: it saw another state",
				r.ns, r.name, r.workspace, got, planAdds(t, r.ns, r.name))
		}
	}
	if out := mustAs(t, "admin", "get", "secrets", "-n", ns, "-o", "name"); strings.Contains(out, "tfstate") {
		t.Errorf("a state Secret was written in %s: %s", ns, out)
	}

	// Only a stage reaches the state: not its editor, not an admin.
	for _, user := range []string{"alice", "admin"} {
		if out, err := cl.kubectlAs(user, "get", "--raw", raw(ns, "second", "state")); err == nil || !strings.Contains(err.Error(), "Forbidden") {
			t.Errorf("%s read the state: %v %.200s", user, err, out)
		}
	}
	// A viewer sees whether the state is locked.
	if _, err := cl.kubectlAs("carol", "get", "--raw", raw(ns, "second", "statelock")); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("carol's read of the unlocked state's lock: %v, want NotFound", err)
	}

	// A plan that holds the lock (it reads a FIFO): a viewer sees who holds
	// it. (spec.forceUnlock never takes a running stage's lock:
	// pkg/registry/terraformrun/state_test.go; here runs on one state take
	// turns before they get that far.)
	gate := newGate(t, sharedDir(t))
	holder := fmt.Sprintf("apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: holder\n  namespace: %s\nspec:\n"+
		"  workspace: locked\n  operation: Plan\n  source:\n    inline:\n      main.tf: %q\n", ns,
		harness.TestProviderRequirement+fmt.Sprintf("data \"testing_file\" \"gate\" {\n  path = %q\n}\n", gate))
	if _, err := cl.kubectlStdin("alice", holder, "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	var view struct {
		ID     string `json:"id"`
		Holder struct{ Run, Stage string }
	}
	waitFor(t, 3*time.Minute, "the holder's plan to lock the state", func() bool {
		out, err := cl.kubectlAs("carol", "get", "--raw", raw(ns, "holder", "statelock"))
		return err == nil && json.Unmarshal([]byte(out), &view) == nil && view.ID != ""
	})
	if view.Holder.Run != "holder" || view.Holder.Stage != "plan" {
		t.Errorf("the lock's holder is %+v, want run holder's plan stage", view.Holder)
	}
	stop := openGate(gate)
	defer stop()
	if got := waitPhase(t, ns, "holder", 3*time.Minute, "Succeeded", "Failed"); got != "Succeeded" {
		t.Errorf("the lock's holder is %s", got)
	}
}

// TestStateMigratesFromTheKubernetesBackend: a workspace whose state an older
// terrarun kept with the kubernetes backend (Secret tfstate-<ws>-<ws>) goes
// on from that state once terrarun serves it, and says so in the log; the
// kubernetes backend stays available to a run that names the
// ServiceAccount whose token its pods get, and to no other.
func TestStateMigratesFromTheKubernetesBackend(t *testing.T) {
	ns := newNamespace(t)
	mainTF := "resource \"terraform_data\" \"x\" {\n  input = \"v1\"\n}\n"
	kubeBackend := "  backend:\n    type: kubernetes\n    config:\n      secret_suffix: default\n      in_cluster_config: \"true\"\n      namespace: " + ns + "\n"
	manifest := fmt.Sprintf("apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: no-sa\n  namespace: %s\nspec:\n  source:\n    inline:\n      main.tf: %q\n%s", ns, mainTF, kubeBackend)
	if out, err := cl.kubectlStdin("admin", manifest, "create", "-f", "-"); err == nil || !strings.Contains(err.Error(), "spec.backend.config[in_cluster_config]") {
		t.Fatalf("a kubernetes backend with in_cluster_config and no ServiceAccount: %v %s, want refused naming the field", err, out)
	}

	mustAs(t, "admin", "create", "serviceaccount", "deployer", "-n", ns)
	mustAs(t, "admin", "create", "role", "tfstate", "-n", ns, "--verb=get,list,create,update,delete", "--resource=secrets,leases")
	mustAs(t, "admin", "create", "rolebinding", "deployer-tfstate", "-n", ns, "--role=tfstate", "--serviceaccount="+ns+":deployer")
	if got := stateRun(t, "admin", ns, "legacy", "default", mainTF, kubeBackend+"  executor:\n    serviceAccountName: deployer\n"); got != "Succeeded" || planAdds(t, ns, "legacy") != "1" {
		t.Fatalf("the kubernetes backend's run is %s adding %s: %s", got, planAdds(t, ns, "legacy"), mustAs(t, "admin", "get", "tfr", "legacy", "-n", ns, "-o", "jsonpath={.status.message}"))
	}
	mustAs(t, "admin", "get", "secret", "tfstate-default-default", "-n", ns)

	// A state Secret made after terrarun began to serve state is no state
	// its runs wrote: never imported, whoever made it.
	var planted bytes.Buffer
	zw := gzip.NewWriter(&planted)
	_, _ = zw.Write([]byte(`{"version":4,"terraform_version":"1.8.0","serial":7,"lineage":"planted","outputs":{"planted":{"value":"yes","type":"string"}},"resources":[]}`))
	_ = zw.Close()
	plantedSecret := fmt.Sprintf(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"tfstate-planted-planted","namespace":%q,"labels":{"app.kubernetes.io/managed-by":"terraform","tfstate":"true"}},"data":{"tfstate":%q}}`,
		ns, base64.StdEncoding.EncodeToString(planted.Bytes()))
	if _, err := cl.kubectlStdin("admin", plantedSecret, "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if got := stateRun(t, "alice", ns, "planted", "planted", "output \"planted\" {\n  value = \"no\"\n}\n", ""); got != "Succeeded" {
		t.Fatalf("the run of the planted workspace is %s", got)
	}
	if log := mustAs(t, "admin", "get", "--raw", raw(ns, "planted", "logs?stage=plan")); strings.Contains(log, "imported the state") {
		t.Errorf("a state Secret made after terrarun began to serve state was imported:\n%s", log)
	}

	// An upgrade: terrarun begins to serve state after the kubernetes
	// backend's Secret was made.
	etcdPut(t, "/terrarun/states/served-since", time.Now().Add(2*time.Second).UTC().Format(time.RFC3339Nano))
	if got := stateRun(t, "alice", ns, "served", "default", mainTF, ""); got != "Succeeded" || planAdds(t, ns, "served") != "0" {
		t.Fatalf("the first run with the served state is %s adding %s resources, want Succeeded adding 0 (imported)", got, planAdds(t, ns, "served"))
	}
	want := "imported the state kept by the kubernetes backend in Secret " + ns + "/tfstate-default-default"
	if log := mustAs(t, "admin", "get", "--raw", raw(ns, "served", "logs?stage=plan")); !strings.Contains(log, want) {
		t.Errorf("the plan's log does not say %q:\n%s", want, log)
	}
	// Imported once: the Secret is not read again.
	mustAs(t, "admin", "delete", "secret", "tfstate-default-default", "-n", ns)
	if got := stateRun(t, "alice", ns, "next", "default", mainTF, ""); got != "Succeeded" || planAdds(t, ns, "next") != "0" {
		t.Errorf("the next run is %s adding %s resources, want Succeeded adding 0", got, planAdds(t, ns, "next"))
	}
}
