package integration

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// TestStageSandbox attacks the host from a run's own terraform code, as a
// tenant who may only create runs would: while another run's apply is in
// flight, it reads the server's CA key, etcd's data, the admin kubeconfig,
// another namespace's state, the other run's secret variable and its own
// stage token, through file() and through local-exec, asks every listening
// loopback port for etcd's keys, and leaves a setsid daemon behind. Every read fails, none of those bytes reaches an artifact,
// and the daemon dies with the stage.
func TestStageSandbox(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed: the attack probes etcd's port with it")
	}
	e := newRunEnv(t)
	data := e.DataDir

	// Another namespace's state, with a marker in it.
	marker := fmt.Sprintf("team-a-state-marker-%d", time.Now().UnixNano())
	teamA := "apiVersion: terrarun.dev/v1alpha1\nkind: TerraformRun\nmetadata:\n  name: owner\n  namespace: team-a\nspec:\n" +
		inline(map[string]string{"main.tf": `resource "terraform_data" "x" { input = "` + marker + `" }`},
			"  workspace: default\n  approval:\n    mode: Auto\n")
	e.create(t, teamA)
	if run, err := harness.WaitForPhase(ctxT(t), e.client, "team-a", "owner", 3*time.Minute,
		v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed); err != nil || run.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Fatalf("team-a's run: %v %+v", err, run)
	}
	teamAState := filepath.Join(data, "state", "team-a", "default", "terraform.tfstate")
	if b, err := os.ReadFile(teamAState); err != nil || !strings.Contains(string(b), marker) {
		t.Fatalf("team-a's state at %s: %v\n%s", teamAState, err, b)
	}

	// Another run, in the same namespace, holding a secret while it applies.
	victimSecret := fmt.Sprintf("victim-secret-%d", time.Now().UnixNano())
	e.secret(t, "default", "victim", "password", victimSecret)
	e.create(t, runManifest("victim", inline(map[string]string{"main.tf": `variable "password" {
  type      = string
  sensitive = true
}
resource "terraform_data" "slow" {
  input = length(var.password)
  provisioner "local-exec" {
    command = "sleep 60"
  }
}`}, "  approval:\n    mode: Auto\n  variables:\n  - name: password\n    valueFrom:\n      secretKeyRef:\n        name: victim\n        key: password\n")))
	victim := e.waitPhase(t, "victim", 3*time.Minute, v1alpha1.RunPhaseApplying)
	victimVar := filepath.Join(data, "work", "default", "victim", string(victim.UID), "plan-1", "variables", "password") // an Auto run applies in its plan execution
	if err := harness.Poll(ctxT(t), 50*time.Millisecond, time.Minute, victimVar, func(context.Context) bool {
		_, err := os.Stat(victimVar)
		return err == nil
	}); err != nil {
		t.Fatal(err)
	}

	caKey := filepath.Join(data, "pki", "ca.key")
	etcdDB := filepath.Join(data, "etcd", "member", "snap", "db")
	admin := filepath.Join(data, "admin.kubeconfig")
	ownState := filepath.Join(data, "state", "default", "thief") // its workspace's
	heartbeat := filepath.Join(ownState, "daemon-heartbeat")
	procDump := filepath.Join(ownState, "proc-dump")
	targets := map[string]string{"ca-key": caKey, "etcd-db": etcdDB, "admin-kubeconfig": admin, "team-a-state": teamAState,
		"victim-variable": victimVar, "own-token": "$HOME/token"}
	// The markers are split in the script, which local-exec echoes.
	var probes strings.Builder
	for name, path := range targets {
		fmt.Fprintf(&probes, "if [ -s \"%s\" ] && cat \"%s\" >/dev/null 2>&1; then echo \"READ\"\"-OK %s\"; else echo \"DEN\"\"IED %s\"; fi\n", path, path, name, name)
	}
	script := probes.String() + `
find ` + data + ` -type f | sed 's/^/VIS''IBLE /'
for f in /proc/[0-9]*/fd/* /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do [ -f "$f" ] && cat "$f" 2>/dev/null; done > ` + procDump + `
ports=$(while read -r sl local rem st rest; do [ "$st" = 0A ] && printf '%d\n' "0x$${local#*:}"; done < /proc/net/tcp | sort -u)
n=0
for port in $ports; do
  n=$((n+1))
  for scheme in http https; do
    if curl -sk -m 3 -X POST "$scheme://127.0.0.1:$port/v3/kv/range" -d '{"key":"AA==","range_end":"AA=="}' 2>/dev/null | grep -q '"kvs"'; then
      echo "ETCD""-OPEN $scheme://127.0.0.1:$port"
    fi
  done
done
echo "PROBED""-PORTS $n"
setsid sh -c 'while :; do date +%s%N > ` + heartbeat + `; sleep 0.2; done' </dev/null >/dev/null 2>&1 &
sleep 5
`
	attack := `output "ca_key" {
  value = try(file("` + caKey + `"), "denied")
}
output "team_a_state" {
  value = try(file("` + teamAState + `"), "denied")
}
resource "terraform_data" "probe" {
  provisioner "local-exec" {
    command = <<-EOT
` + indent(script, "      ") + `    EOT
  }
}
`
	e.create(t, runManifest("thief", inline(map[string]string{"main.tf": attack}, "  workspace: thief\n  approval:\n    mode: Auto\n")))
	thief := e.waitPhase(t, "thief", 3*time.Minute, v1alpha1.RunPhaseApplying, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if thief.Status.Phase != v1alpha1.RunPhaseApplying {
		t.Fatalf("the attacking run is %s, not applying: %s", thief.Status.Phase, thief.Status.Message)
	}
	token := readToken(t, data, thief, "plan-1") // an Auto run applies in its plan execution
	thief = e.waitPhase(t, "thief", 3*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if thief.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Fatalf("the attacking run ended %s: %s", thief.Status.Phase, thief.Status.Message)
	}

	applyLog := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("thief", "logs?stage=apply"))
	for name := range targets {
		if strings.Contains(applyLog, "READ-OK "+name) || !strings.Contains(applyLog, "DENIED "+name) {
			t.Errorf("the stage could read %s:\n%s", name, applyLog)
		}
	}
	// etcd listens on loopback, which the stage shares: it answers only
	// clients with a certificate of its own CA. An etcd of another process
	// on this host (another test's) is not the server's to guard.
	if !regexp.MustCompile(`PROBED-PORTS [1-9]`).MatchString(applyLog) {
		t.Errorf("the stage probed no port:\n%s", applyLog)
	}
	// The check sees the server's sockets: its API port is one.
	if u, err := url.Parse(e.Config.Host); err != nil {
		t.Fatal(err)
	} else if apiPort, _ := strconv.Atoi(u.Port()); !listensOn(t, e.Cmd.Process.Pid, apiPort) {
		t.Fatalf("the server (pid %d) does not seem to listen on its API port %d: the etcd check would see nothing", e.Cmd.Process.Pid, apiPort)
	}
	for _, m := range regexp.MustCompile(`ETCD-OPEN https?://127\.0\.0\.1:(\d+)`).FindAllStringSubmatch(applyLog, -1) {
		port, _ := strconv.Atoi(m[1])
		if listensOn(t, e.Cmd.Process.Pid, port) {
			t.Errorf("the stage reached the server's etcd on port %d over the network:\n%s", port, applyLog)
		} else {
			t.Logf("an etcd of another process on this host answered the stage on port %d; the server's did not", port)
		}
	}
	caCert := filepath.Join(data, "pki", "ca.crt") // public, and what the executor verifies the server with
	for _, line := range strings.Split(applyLog, "\n") {
		if _, path, ok := strings.Cut(line, "VISIBLE "); ok && path != caCert &&
			!strings.HasPrefix(path, filepath.Join(data, "work", "default", "thief")+"/") && !strings.HasPrefix(path, ownState+"/") {
			t.Errorf("the stage sees a file of the data directory that is not its own: %s", path)
		}
	}
	outputs := map[string]string{}
	for _, o := range thief.Status.Outputs {
		outputs[o.Name] = outputValue(o)
	}
	if outputs["ca_key"] != `"denied"` || outputs["team_a_state"] != `"denied"` {
		t.Errorf("file() read what it may not: %v", outputs)
	}
	dump, err := os.ReadFile(procDump)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(dump), token) {
		t.Error("the stage's own processes read its token through /proc")
	}

	key, err := os.ReadFile(caKey)
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{"CA key": keyBody(string(key)), "team-a's state": marker, "the victim's secret": victimSecret, "the stage token": token}
	artifacts := map[string]string{
		"plan logs":  mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("thief", "logs?stage=plan")),
		"apply logs": applyLog,
		"plan text":  mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("thief", "plan")),
		"plan json":  mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("thief", "plan?format=json")),
		"outputs":    mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("thief", "outputs")),
		"status":     mustKubectl(t, e.Kubeconfig, "get", "tfr", "thief", "-o", "json"),
	}
	for what, secret := range secrets {
		for where, content := range artifacts {
			if strings.Contains(content, secret) {
				t.Errorf("%s appears in the %s", what, where)
			}
		}
	}

	// The daemon ran, and died with its stage.
	first, err := os.ReadFile(heartbeat)
	if err != nil {
		t.Fatalf("the daemon never ran: %v", err)
	}
	time.Sleep(2 * time.Second)
	if last, _ := os.ReadFile(heartbeat); string(last) != string(first) {
		t.Errorf("a daemon started with setsid outlived its stage: heartbeat %q became %q", first, last)
	}
}

// indent prefixes every line of s with prefix.
func indent(s, prefix string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + line + "\n")
	}
	return b.String()
}

// keyBody is the longest line of a PEM key: bytes that appear only where the
// key does.
func keyBody(pem string) string {
	longest := ""
	for _, line := range strings.Split(pem, "\n") {
		if !strings.HasPrefix(line, "-----") && len(line) > len(longest) {
			longest = line
		}
	}
	return longest
}

// TestStagePlantsInItsDirectory attacks the server through the files of a
// stage's own work directory, which the stage may rewrite: a failing stage
// replaces executor.log, where the server once read the tail of its output,
// by a link to the server's CA key and to another namespace's secret value
// file, and another by a FIFO. Neither key nor value appears in the run's
// status or Events; the FIFO's run ends as a failure instead of holding its
// slot forever, and with one slot on the server, a run started after it
// succeeds.
func TestStagePlantsInItsDirectory(t *testing.T) {
	e := newRunEnv(t, "--max-concurrent-stages=1")
	caKey := filepath.Join(e.DataDir, "pki", "ca.key")
	secretValue := fmt.Sprintf("team-b-secret-%d", time.Now().UnixNano())
	e.secret(t, "team-b", "db", "password", secretValue)
	secretFile := filepath.Join(e.DataDir, "values", "team-b", "secrets", "db", "password")

	// $HOME is the stage's work directory. The script ends the stage with a
	// failure, so that the server reports why.
	plant := func(name, how string) {
		e.create(t, runManifest(name, inline(map[string]string{"main.tf": `resource "terraform_data" "x" {
  provisioner "local-exec" {
    command = "rm -f $HOME/executor.log && ` + how + `; exit 1"
  }
}`}, "  approval:\n    mode: Auto\n")))
	}
	plant("link-key", "ln -s "+caKey+" $HOME/executor.log")
	plant("link-secret", "ln -s "+secretFile+" $HOME/executor.log")
	plant("fifo", "mkfifo $HOME/executor.log")
	e.create(t, runManifest("after", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {}`}, "  approval:\n    mode: Auto\n")))

	key, err := os.ReadFile(caKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"link-key", "link-secret", "fifo"} {
		run := e.waitPhase(t, name, 3*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded)
		if run.Status.Phase != v1alpha1.RunPhaseFailed || !strings.Contains(run.Status.Message, "exit status 1") {
			t.Errorf("run %s: %s: %q, want Failed with local-exec's exit status", name, run.Status.Phase, run.Status.Message)
		}
	}
	if after := e.waitPhase(t, "after", 3*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded); after.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Errorf("the run after the attacks: %s: %s", after.Status.Phase, after.Status.Message)
	}
	status := mustKubectl(t, e.Kubeconfig, "get", "tfr", "-o", "json")
	events := mustKubectl(t, e.Kubeconfig, "get", "events", "-o", "json")
	for what, secret := range map[string]string{"the CA key": keyBody(string(key)), "team-b's secret": secretValue} {
		for where, content := range map[string]string{"the runs' status": status, "the Events": events} {
			if strings.Contains(content, secret) {
				t.Errorf("%s appears in %s", what, where)
			}
		}
	}
}

// TestStagePlantsWhereverTheServerLooks attacks the server through every
// tree a stage writes that the server, as root, later walks, hands over or
// removes: the stage's work directory ($HOME, the executor's work/, the
// engine's working directory and its .terraform), its TMPDIR, its
// workspace's state directory and its creator's plugin cache. In each, a
// stage's local-exec plants links to the server's CA key, to another
// namespace's secret value file and to the CA's directory, and a FIFO,
// under generic names and under the names the server, the executor or the
// engine use there (executor.log, stage.json, terraform.tfstate and its
// backup and lock info, .terraform.lock.hcl, terraform.tfstate.d, a
// provider in the cache, the cache's lock). The stage sleeps while the
// server measures its trees (every 2 s), removes the state files the
// engine itself reads back, and fails. The run ends by its own exit code;
// with one stage slot on the server, the next run of the same workspace
// and namespace (whose start hands over and walks the planted state
// directory) and a run of another namespace succeed while the plants are
// still there; the key's bytes and the secret appear in no status, Event,
// log, plan or outputs; and the key, the secret file and the CA's
// directory are untouched.
func TestStagePlantsWhereverTheServerLooks(t *testing.T) {
	e := newRunEnv(t, "--max-concurrent-stages=1")
	pki := filepath.Join(e.DataDir, "pki")
	caKey := filepath.Join(pki, "ca.key")
	secretValue := fmt.Sprintf("team-b-secret-%d", time.Now().UnixNano())
	e.secret(t, "team-b", "db", "password", secretValue)
	secretFile := filepath.Join(e.DataDir, "values", "team-b", "secrets", "db", "password")
	stateDir := filepath.Join(e.DataDir, "state", "default", "planted")
	untouched := map[string]os.FileInfo{}
	for _, f := range []string{caKey, secretFile, pki} {
		fi, err := os.Lstat(f)
		if err != nil {
			t.Fatal(err)
		}
		untouched[f] = fi
	}

	// The markers are split in the script, which local-exec echoes.
	script := `set -e
[ -n "$TF_PLUGIN_CACHE_DIR" ] || { echo "NO""-PLUGIN-CACHE"; exit 3; }
state=` + stateDir + `
cache=$TF_PLUGIN_CACHE_DIR
link() { rm -rf "$2"; mkdir -p "$(dirname "$2")"; ln -s "$1" "$2"; echo "PLAN""TED link $2"; }
fifo() { rm -rf "$1"; mkdir -p "$(dirname "$1")"; mkfifo "$1"; echo "PLAN""TED fifo $1"; }
for d in "$HOME" "$HOME/work" "$PWD" "$PWD/.terraform" "$TMPDIR" "$state" "$cache"; do
  link ` + caKey + ` "$d/planted-key"
  link ` + secretFile + ` "$d/planted-secret"
  link ` + pki + ` "$d/planted-dir"
  fifo "$d/planted-fifo"
done
fifo "$HOME/executor.log"
link ` + caKey + ` "$HOME/stage.json"
link ` + secretFile + ` "$HOME/backend.hcl"
link ` + caKey + ` "$PWD/terraform.tfstate"
fifo "$PWD/crash.log"
fifo "$state/terraform.tfstate"
link ` + caKey + ` "$state/terraform.tfstate.backup"
link ` + secretFile + ` "$state/.terraform.tfstate.lock.info"
link ` + caKey + ` "$state/.terraform.lock.hcl"
link ` + pki + ` "$state/terraform.tfstate.d"
link ` + caKey + ` "$cache/registry.terraform.io/hashicorp/null/3.2.3/linux_amd64/terraform-provider-null_v3.2.3_x5"
fifo "$cache/.terrarun.lock"
sleep 5
# What the engine reads back of its workspace's state, at this stage's end
# and at the next's, goes: left there, it breaks only the tenant's own
# workspace.
rm -f "$state/terraform.tfstate" "$state/terraform.tfstate.backup" "$state/.terraform.tfstate.lock.info"
echo "PLANTS""-DONE"
exit 1
`
	const planted = 7*4 + 3 + 2 + 5 + 2
	e.create(t, runManifest("planter", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {
  provisioner "local-exec" {
    command = <<-EOT
` + indent(script, "      ") + `    EOT
  }
}`}, "  workspace: planted\n  approval:\n    mode: Auto\n  timeouts:\n    plan: 40s\n    apply: 20s\n")))
	// Its stage's timeout is 60 s, and 30 s more to kill it: a stage that
	// the engine blocks on a plant ends within the wait (2 min at most),
	// a stage whose end the server blocks on never does.
	planter := e.waitPhase(t, "planter", 2*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded)
	applyLog := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("planter", "logs?stage=apply"))
	// Each line as the stage printed it (the engine's error repeats them).
	if n := strings.Count(applyLog, "(local-exec): PLANTED "); n != planted || !strings.Contains(applyLog, "(local-exec): PLANTS-DONE") {
		t.Fatalf("the stage planted %d of %d links and FIFOs, or did not finish:\n%s", n, planted, applyLog)
	}
	// Its message is cut: the exit status is local-exec's in the log.
	if planter.Status.Phase != v1alpha1.RunPhaseFailed || !strings.Contains(planter.Status.Message, "(exit code 1)") || !strings.Contains(applyLog, "': exit status 1.") {
		t.Errorf("the planting run: %s: %q, want Failed with local-exec's exit status", planter.Status.Phase, planter.Status.Message)
	}

	// The plants in the shared trees stay there for the next runs.
	caches, _ := filepath.Glob(filepath.Join(e.DataDir, "plugin-cache", "default", "*"))
	if len(caches) != 1 {
		t.Fatalf("plugin caches of the namespace: %v, want the creator's", caches)
	}
	stillPlanted := func() {
		t.Helper()
		for _, dir := range []string{stateDir, caches[0]} {
			for name, mode := range map[string]os.FileMode{"planted-key": os.ModeSymlink, "planted-secret": os.ModeSymlink, "planted-dir": os.ModeSymlink, "planted-fifo": os.ModeNamedPipe} {
				if fi, err := os.Lstat(filepath.Join(dir, name)); err != nil || fi.Mode().Type() != mode {
					t.Fatalf("%s/%s is no longer what the stage planted: %v %v", dir, name, fi, err)
				}
			}
		}
	}
	stillPlanted()

	e.create(t, runManifest("next", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {}`}, "  workspace: planted\n  approval:\n    mode: Auto\n")))
	e.create(t, strings.Replace(runManifest("other", inline(map[string]string{"main.tf": `resource "terraform_data" "x" {}`}, "  approval:\n    mode: Auto\n")),
		"metadata:\n", "metadata:\n  namespace: team-c\n", 1))
	if next := e.waitPhase(t, "next", 3*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded); next.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Errorf("the next run of the planted workspace: %s: %s", next.Status.Phase, next.Status.Message)
	}
	if other, err := harness.WaitForPhase(ctxT(t), e.client, "team-c", "other", 3*time.Minute, v1alpha1.RunPhaseFailed, v1alpha1.RunPhaseSucceeded); err != nil || other.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Errorf("another namespace's run: %v %+v", err, other)
	}
	stillPlanted()

	key, err := os.ReadFile(caKey)
	if err != nil || keyBody(string(key)) == "" {
		t.Fatalf("the CA key: %v", err)
	}
	artifacts := map[string]string{
		"the runs' status": mustKubectl(t, e.Kubeconfig, "get", "tfr", "-A", "-o", "json"),
		"the Events":       mustKubectl(t, e.Kubeconfig, "get", "events", "-A", "-o", "json"),
	}
	for _, run := range []string{"planter", "next"} {
		for what, sub := range map[string]string{"plan logs": "logs?stage=plan", "apply logs": "logs?stage=apply", "plan text": "plan", "plan json": "plan?format=json", "outputs": "outputs"} {
			// What a run has not (a failed run's outputs) is an error,
			// which is searched too.
			out, _ := kubectl(t, e.Kubeconfig, "get", "--raw", raw(run, sub))
			artifacts[run+"'s "+what] = out
		}
	}
	for what, secret := range map[string]string{"the CA key": keyBody(string(key)), "team-b's secret": secretValue} {
		for where, content := range artifacts {
			if strings.Contains(content, secret) {
				t.Errorf("%s appears in %s", what, where)
			}
		}
	}
	for f, before := range untouched {
		fi, err := os.Lstat(f)
		if err != nil {
			t.Fatal(err)
		}
		b, a := before.Sys().(*syscall.Stat_t), fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != before.Mode() || a.Uid != b.Uid || a.Gid != b.Gid || !fi.ModTime().Equal(before.ModTime()) {
			t.Errorf("%s was changed: mode %v, owner %d:%d, modified %s; before: %v, %d:%d, %s", f,
				fi.Mode(), a.Uid, a.Gid, fi.ModTime(), before.Mode(), b.Uid, b.Gid, before.ModTime())
		}
	}
}

// listensOn says whether process pid holds a listening TCP socket on port:
// the sockets of /proc/net/tcp{,6} in state LISTEN on that port, among the
// process's file descriptors.
func listensOn(t *testing.T, pid, port int) bool {
	t.Helper()
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" {
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); err == nil && int(p) == port {
				inodes["socket:["+f[9]+"]"] = true
			}
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("reading the server's file descriptors: %v", err)
	}
	for _, fd := range fds {
		if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && inodes[target] {
			return true
		}
	}
	return false
}
