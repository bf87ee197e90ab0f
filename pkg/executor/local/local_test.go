package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/sandbox"
	"github.com/terrarun/terrarun/pkg/stage"
	"github.com/terrarun/terrarun/pkg/stagelimits"
	"github.com/terrarun/terrarun/pkg/standalone"
)

var (
	fakeBin    string
	etcdClient *clientv3.Client
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "terrarun-local-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)

	fakeBin = filepath.Join(tmp, "terrarun-executor")
	build := exec.Command("go", "build", "-o", fakeBin, "./testdata/fakeexecutor")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the fake executor:", err)
		return 1
	}

	etcd, err := standalone.StartEtcd(context.Background(), filepath.Join(tmp, "etcd"), standalone.WithoutFsync())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer etcd.Close()
	etcdClient, err = clientv3.New(clientv3.Config{Endpoints: []string{etcd.ClientURL()}, DialTimeout: 10 * time.Second,
		Logger: zap.NewNop()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer etcdClient.Close()
	return m.Run()
}

// testEnv is one data directory and etcd prefix, shared by the executor
// instances ("replicas", "restarts") of one test.
type testEnv struct {
	t        *testing.T
	root     string
	reports  string
	prefix   string
	notified chan string
	// env is more environment for the stages.
	env []string
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	root := t.TempDir()
	v := &testEnv{
		t:        t,
		root:     root,
		reports:  filepath.Join(root, "reports"),
		prefix:   "/test/" + strings.ReplaceAll(t.Name(), "/", "_") + "/",
		notified: make(chan string, 16),
	}
	if err := os.Mkdir(v.reports, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "ca.crt"), []byte("test CA\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Sandboxed stages run as stageUID, and write their reports here.
	if err := os.Chown(v.reports, stageUID, stageUID); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = etcdClient.Delete(context.Background(), v.prefix, clientv3.WithPrefix())
	})
	return v
}

func (v *testEnv) opts() Options {
	return Options{
		ExecutorBinary: fakeBin,
		WorkRoot:       filepath.Join(v.root, "work"),
		StateRoot:      filepath.Join(v.root, "state"),
		ValuesRoot:     filepath.Join(v.root, "values"),
		ServerURL:      "https://127.0.0.1:1",
		CAFile:         filepath.Join(v.root, "ca.crt"),
		Etcd:           etcdClient,
		EtcdPrefix:     v.prefix,
		Env:            append([]string{"FAKE_REPORT_DIR=" + v.reports}, v.env...),
		Sandbox: SandboxOptions{
			UID: uint32(stageUID), GID: uint32(stageUID),
			Mounts: []sandbox.Mount{{Source: v.reports, Writable: true}},
		},
	}
}

// stageUID is the user of sandboxed stages: the test's own without root.
var stageUID = func() int {
	if os.Getuid() == 0 {
		return 65532
	}
	return os.Getuid()
}()

// executor returns a new instance: another replica, or the server after a restart.
func (v *testEnv) executor() *Executor {
	v.t.Helper()
	e, err := New(v.opts())
	if err != nil {
		v.t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	go func() {
		_ = e.Run(runCtx, func(ns, name string) {
			select {
			case v.notified <- ns + "/" + name:
			default:
			}
		})
	}()
	for e.notify.Load() == nil {
		time.Sleep(time.Millisecond)
	}
	v.t.Cleanup(func() {
		stopRun()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx, executor.ShutdownOptions{})
	})
	return e
}

func (v *testEnv) writeSecret(ns, name, key, value string) {
	v.t.Helper()
	p := FileValues{Root: filepath.Join(v.root, "values")}.SecretPath(ns, name, key)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		v.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(value), 0o600); err != nil {
		v.t.Fatal(err)
	}
}

func (v *testEnv) writeConfigMap(ns, name, key, value string) {
	v.t.Helper()
	p := FileValues{Root: filepath.Join(v.root, "values")}.ConfigMapPath(ns, name, key)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		v.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(value), 0o600); err != nil {
		v.t.Fatal(err)
	}
}

type fakeReport struct {
	Args      []string            `json:"args"`
	Env       []string            `json:"env"`
	Cwd       string              `json:"cwd"`
	StageJSON string              `json:"stageJSON"`
	Spec      stage.Spec          `json:"spec"`
	Token     string              `json:"token"`
	TokenFile string              `json:"tokenFile"`
	Files     map[string]fileInfo `json:"files"`
	PID       int                 `json:"pid"`
	PGID      int                 `json:"pgid"`
	UID       int                 `json:"uid"`
}

type fileInfo struct {
	Mode    string `json:"mode"`
	Content string `json:"content"`
}

// report waits for the fake's report of the named process.
func (v *testEnv) report(name string) fakeReport {
	v.t.Helper()
	path := filepath.Join(v.reports, name+".json")
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			var r fakeReport
			if err := json.Unmarshal(b, &r); err != nil {
				v.t.Fatal(err)
			}
			return r
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("no report from %s", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (v *testEnv) starts() int {
	b, err := os.ReadFile(filepath.Join(v.reports, "starts"))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		v.t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func (v *testEnv) signals(name string) string {
	b, _ := os.ReadFile(filepath.Join(v.reports, name+".signals"))
	return string(b)
}

func (v *testEnv) waitNotify(want string) {
	v.t.Helper()
	select {
	case got := <-v.notified:
		if got != want {
			v.t.Fatalf("notified %q, want %q", got, want)
		}
	case <-time.After(30 * time.Second):
		v.t.Fatalf("no notification for %s", want)
	}
}

var uidCounter struct {
	sync.Mutex
	n int
}

func newRun(ns, name string, vars ...v1alpha1.Variable) *v1alpha1.TerraformRun {
	uidCounter.Lock()
	uidCounter.n++
	n := uidCounter.n
	uidCounter.Unlock()
	return &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", n))},
		Spec: v1alpha1.TerraformRunSpec{
			Source:    v1alpha1.Source{Inline: map[string]string{"main.tf": `output "x" { value = 1 }`}},
			Variables: vars,
			// As the registry strategy defaults every stored run.
			Operation: v1alpha1.OperationApply,
			Workspace: "default",
			Engine:    v1alpha1.Engine{Binary: v1alpha1.EngineTerraform},
		},
	}
}

func lit(name, value string) v1alpha1.Variable { return v1alpha1.Variable{Name: name, Value: value} }

func plan(run *v1alpha1.TerraformRun) executor.Execution {
	return executor.Execution{Run: run, Stage: v1alpha1.StagePlan, Attempt: 1}
}

// waitFinal polls Status until the execution is no longer running.
func waitFinal(t *testing.T, e *Executor, ex executor.Execution) executor.Status {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := e.Status(context.Background(), ex)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != executor.StateRunning {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still running", st.Name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *Executor) workDirOf(ex executor.Execution) string {
	id, _ := identityOf(ex)
	return e.workDir(id)
}

func envValue(env []string, key string) (string, bool) {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// TestStartWritesTheLockFile: an inline configuration may carry its
// dependency lock file (validation accepts it), and the stage finds it
// beside the configuration; other names that begin with a dot are refused.
func TestStartWritesTheLockFile(t *testing.T) {
	v := newTestEnv(t)
	e := v.executor()
	ctx := context.Background()
	const lock = "# This file is maintained automatically by \"terraform init\".\n"
	run := newRun("team-a", "locked")
	run.Spec.Source.Inline[".terraform.lock.hcl"] = lock
	ex := plan(run)
	name, err := e.Start(ctx, ex)
	if err != nil {
		t.Fatalf("starting a run whose inline source has a lock file: %v", err)
	}
	v.waitNotify("team-a/locked")
	if got := v.report(name).Files[filepath.Join(e.workDirOf(ex), "source", ".terraform.lock.hcl")]; got.Content != lock || got.Mode != "600" {
		t.Errorf("the stage's lock file: %+v, want mode 600 with %q", got, lock)
	}

	hidden := newRun("team-a", "hidden")
	hidden.Spec.Source.Inline[".hidden.tf"] = "# not allowed"
	if _, err := e.Start(ctx, plan(hidden)); err == nil || !strings.Contains(err.Error(), `invalid file name ".hidden.tf"`) {
		t.Errorf("starting a run with the inline file .hidden.tf: %v, want it refused", err)
	}
}

func TestStartSucceeds(t *testing.T) {
	v := newTestEnv(t)
	e := v.executor()
	ctx := context.Background()
	run := newRun("team-a", "web")
	run.Spec.Workspace = "staging"
	ex := plan(run)

	name, err := e.Start(ctx, ex)
	if err != nil {
		t.Fatal(err)
	}
	if name != "team-a.web.plan.1" {
		t.Fatalf("name = %q", name)
	}
	v.waitNotify("team-a/web")
	st, err := e.Status(ctx, ex)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != executor.StateSucceeded || st.ExitCode == nil || *st.ExitCode != 0 || st.Reason != executor.ReasonCompleted ||
		st.Name != name || st.StartTime == nil || st.CompletionTime == nil || st.Message != "" {
		t.Fatalf("status = %+v", st)
	}

	r := v.report(name)
	dir := e.workDirOf(ex)
	wantDir := filepath.Join(v.root, "work", "team-a", "web", string(run.UID), "plan-1")
	if dir != wantDir || r.Cwd != dir {
		t.Errorf("work dir %q, cwd %q, want %q", dir, r.Cwd, wantDir)
	}
	// The token comes on a descriptor; the token file is hidden from the stage.
	if r.Token == "" || r.Spec.TokenFile != "" || r.Spec.TokenFD != 3 {
		t.Errorf("token %q, token file %q, descriptor %d", r.Token, r.Spec.TokenFile, r.Spec.TokenFD)
	}
	if r.TokenFile != "" {
		t.Errorf("the stage read the token file: %q", r.TokenFile)
	}
	if r.Files[filepath.Join(dir, "stage.json")].Mode != "600" {
		t.Errorf("stage.json mode %q", r.Files[filepath.Join(dir, "stage.json")].Mode)
	}
	if got := r.Files[filepath.Join(dir, "source", "main.tf")].Content; got != run.Spec.Source.Inline["main.tf"] {
		t.Errorf("source main.tf = %q", got)
	}
	s := r.Spec
	// The engine on the stages' PATH, with its version, when there is one.
	wantBin := "terraform"
	if p, _ := lookPath("terraform", os.Getenv("PATH")); p != "" {
		wantBin = p
		if s.EngineVersion == nil {
			t.Errorf("no version recorded for %s", p)
		}
	}
	if s.Server != "https://127.0.0.1:1" || s.CAFile != filepath.Join(v.root, "ca.crt") || s.Namespace != "team-a" ||
		s.Name != "web" || s.UID != string(run.UID) || s.Stage != "plan" || s.Attempt != 1 ||
		s.Binary != wantBin || s.Operation != "Apply" || s.Workspace != "staging" ||
		s.Source.Dir != filepath.Join(dir, "source") || s.Source.Git != nil || s.WorkDir != filepath.Join(dir, "work") {
		t.Errorf("spec = %+v", s)
	}
	stateNS := filepath.Join(v.root, "state", "team-a")
	if s.Backend.Type != "local" || s.Backend.Config["path"] != filepath.Join(stateNS, "default", "terraform.tfstate") ||
		s.Backend.Config["workspace_dir"] != stateNS {
		t.Errorf("backend = %+v", s.Backend)
	}
	if fi, err := os.Stat(filepath.Join(stateNS, "staging")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state dir: %v %v", fi, err)
	}
	if home, _ := envValue(r.Env, "HOME"); home != dir {
		t.Errorf("HOME = %q", home)
	}
	if tmp, _ := envValue(r.Env, "TMPDIR"); tmp != sandboxTmp {
		t.Errorf("TMPDIR = %q, want the short %s", tmp, sandboxTmp)
	}
	if p, _ := envValue(r.Env, "PATH"); p != os.Getenv("PATH") {
		t.Errorf("PATH = %q", p)
	}
	if len(r.Env) != 4 {
		t.Errorf("env = %q, want PATH, FAKE_REPORT_DIR, HOME and TMPDIR only", r.Env)
	}
	// The stage runs under the sandbox's init (PID 1 of its PID namespace),
	// in init's process group, which is a group of its own on the host.
	if r.PGID != 1 || r.PID == 1 {
		t.Errorf("the stage is not in its sandbox's PID namespace under init: pid %d, pgid %d", r.PID, r.PGID)
	}
	if r.UID != stageUID {
		t.Errorf("the stage runs as uid %d, want %d", r.UID, stageUID)
	}
	if want := []string{fakeBin, "--stage-file", filepath.Join(dir, "stage.json")}; strings.Join(r.Args, " ") != strings.Join(want, " ") {
		t.Errorf("args = %q", r.Args)
	}

	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("work dir not removed: %v", err)
	}
	resp, err := etcdClient.Get(ctx, v.prefix+"team-a/web/"+string(run.UID)+"/plan/1")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("record: %v %v", resp, err)
	}
	var rec record
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.State != executor.StateSucceeded || rec.Name != name || rec.ExitCode == nil || *rec.ExitCode != 0 || rec.Holder != e.holder {
		t.Errorf("record = %+v", rec)
	}
	// Another instance reads the recorded final state.
	st2, err := v.executor().Status(ctx, ex)
	if err != nil || st2.State != executor.StateSucceeded || *st2.ExitCode != 0 {
		t.Errorf("status from another instance = %+v, %v", st2, err)
	}
	if n := v.starts(); n != 1 {
		t.Errorf("%d starts", n)
	}
	// The token died with the process.
	if _, ok, _ := e.Tokens().AuthenticateToken(ctx, r.Token); ok {
		t.Error("the stage token is still valid after the process ended")
	}
}

func TestStartFails(t *testing.T) {
	v := newTestEnv(t)
	e := v.executor()
	ctx := context.Background()
	ex := plan(newRun("ns", "bad", lit("fake_exit", "3"), lit("fake_output", "Error: boom in main.tf")))
	if _, err := e.Start(ctx, ex); err != nil {
		t.Fatal(err)
	}
	v.waitNotify("ns/bad")
	st := waitFinal(t, e, ex)
	if st.State != executor.StateFailed || st.ExitCode == nil || *st.ExitCode != 3 || st.Reason != executor.ReasonError {
		t.Fatalf("status = %+v", st)
	}
	if !strings.Contains(st.Message, "exited with code 3") || !strings.Contains(st.Message, "Error: boom in main.tf") {
		t.Errorf("message = %q", st.Message)
	}
	// Recorded too, for other instances.
	st2, err := v.executor().Status(ctx, ex)
	if err != nil || st2.State != executor.StateFailed || *st2.ExitCode != 3 || st2.Message != st.Message {
		t.Errorf("recorded status = %+v, %v", st2, err)
	}
}

func TestStartTwiceNeverRunsTwo(t *testing.T) {
	v := newTestEnv(t)
	e1 := v.executor()
	e2 := v.executor() // another replica on the same etcd
	ctx := context.Background()
	ex := plan(newRun("ns", "twice", lit("fake_sleep", "1s")))

	var wg sync.WaitGroup
	names := make(chan string, 20)
	for i := range 20 {
		wg.Go(func() {
			e := e1
			if i%2 == 1 {
				e = e2
			}
			name, err := e.Start(ctx, ex)
			if err != nil {
				t.Error(err)
			}
			names <- name
		})
	}
	wg.Wait()
	close(names)
	for n := range names {
		if n != "ns.twice.plan.1" {
			t.Errorf("name %q", n)
		}
	}
	// Whichever instance won runs it; it ends once.
	v.waitNotify("ns/twice")
	for _, e := range []*Executor{e1, e2} {
		if _, err := e.Start(ctx, ex); err != nil {
			t.Fatal(err)
		}
		if st := waitFinal(t, e, ex); st.State != executor.StateSucceeded {
			t.Errorf("status = %+v", st)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if n := v.starts(); n != 1 {
		t.Fatalf("%d processes started, want 1", n)
	}
}

func TestRestartReportsExecutorLost(t *testing.T) {
	v := newTestEnv(t)
	e1 := v.executor()
	ctx := context.Background()
	ex := plan(newRun("ns", "lost", lit("fake_sleep", "60s")))
	name, err := e1.Start(ctx, ex)
	if err != nil {
		t.Fatal(err)
	}
	v.report(name)

	// The "restarted" server: a new instance on the same etcd.
	e2 := v.executor()
	st, err := e2.Status(ctx, ex)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != executor.StateUnknown || st.Reason != executor.ReasonExecutorLost || st.Name != name || st.StartTime == nil ||
		!strings.Contains(st.Message, "previous terrarun-apiserver") {
		t.Fatalf("status = %+v", st)
	}
	// It never starts a second process for the record.
	if got, err := e2.Start(ctx, ex); err != nil || got != name {
		t.Fatalf("Start = %q, %v", got, err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := v.starts(); n != 1 {
		t.Fatalf("%d processes started, want 1", n)
	}
	// The first instance still owns it.
	if st, _ := e1.Status(ctx, ex); st.State != executor.StateRunning {
		t.Fatalf("owner status = %+v", st)
	}
	if err := e1.Stop(ctx, ex, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	v.waitNotify("ns/lost")
	if st := waitFinal(t, e2, ex); st.State != executor.StateFailed || st.Reason != executor.ReasonCanceled {
		t.Fatalf("status after stop = %+v", st)
	}
}

func TestShutdownLeavesExecutionsLost(t *testing.T) {
	v := newTestEnv(t)
	e1 := v.executor()
	ctx := context.Background()
	ex := plan(newRun("ns", "shutdown", lit("fake_sleep", "60s")))
	name, err := e1.Start(ctx, ex)
	if err != nil {
		t.Fatal(err)
	}
	v.report(name)
	if err := e1.Shutdown(ctx, executor.ShutdownOptions{Grace: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(v.signals(name), "terminated") {
		t.Errorf("signals = %q", v.signals(name))
	}
	if _, err := e1.Start(ctx, plan(newRun("ns", "after"))); err == nil {
		t.Error("Start after Shutdown succeeded")
	}
	st, err := v.executor().Status(ctx, ex)
	if err != nil || st.State != executor.StateUnknown || st.Reason != executor.ReasonExecutorLost {
		t.Fatalf("status = %+v, %v", st, err)
	}
}

func TestStopSendsSIGTERM(t *testing.T) {
	v := newTestEnv(t)
	e := v.executor()
	ctx := context.Background()
	ex := plan(newRun("ns", "stop", lit("fake_sleep", "60s")))
	name, err := e.Start(ctx, ex)
	if err != nil {
		t.Fatal(err)
	}
	r := v.report(name)
	if st, _ := e.Status(ctx, ex); st.State != executor.StateRunning || st.Name != name {
		t.Fatalf("status = %+v", st)
	}
	// The token file stays the server's, though the rest of the work
	// directory is handed to the stage's user.
	for file, uid := range map[string]int{"token": os.Getuid(), "stage.json": stageUID} {
		fi, err := os.Stat(filepath.Join(e.workDirOf(ex), file))
		if err != nil {
			t.Fatal(err)
		}
		if owner := int(fi.Sys().(*syscall.Stat_t).Uid); owner != uid {
			t.Errorf("%s belongs to uid %d, want %d", file, owner, uid)
		}
	}
	// The live token authenticates as the stage's identity.
	tok := r.Token
	resp, ok, err := e.Tokens().AuthenticateToken(ctx, tok)
	if err != nil || !ok {
		t.Fatalf("token: %v %v", ok, err)
	}
	id, ok, err := e.Tokens().ExecutorIdentity(ctx, resp.User)
	if want := (executor.Identity{Namespace: "ns", Name: "stop", UID: string(ex.Run.UID), Stage: "plan", Attempt: 1}); err != nil || !ok || id != want {
		t.Fatalf("identity = %+v %v %v", id, ok, err)
	}

	begin := time.Now()
	if err := e.Stop(ctx, ex, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("Stop took %v", d)
	}
	if sig := v.signals(name); !strings.Contains(sig, "terminated") {
		t.Errorf("the executor saw signals %q, want SIGTERM", sig)
	}
	st, err := e.Status(ctx, ex)
	if err != nil || st.State != executor.StateFailed || st.Reason != executor.ReasonCanceled || st.ExitCode == nil || *st.ExitCode != 143 {
		t.Fatalf("status = %+v, %v", st, err)
	}
	// Idempotent.
	if err := e.Stop(ctx, ex, time.Second); err != nil {
		t.Fatal(err)
	}
	v.waitNotify("ns/stop")
	if _, ok, _ := e.Tokens().AuthenticateToken(ctx, tok); ok {
		t.Error("token still valid after stop")
	}
	if _, err := os.Stat(e.workDirOf(ex)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("work dir not removed: %v", err)
	}
	// Stopping what never ran is a no-op.
	if err := e.Stop(ctx, plan(newRun("ns", "never")), time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestStopKillsAfterGrace(t *testing.T) {
	v := newTestEnv(t)
	e := v.executor()
	ctx := context.Background()
	ex := plan(newRun("ns", "stubborn", lit("fake_sleep", "60s"), lit("fake_ignore_sigterm", "true")))
	name, err := e.Start(ctx, ex)
	if err != nil {
		t.Fatal(err)
	}
	v.report(name)
	begin := time.Now()
	if err := e.Stop(ctx, ex, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d < 500*time.Millisecond || d > 10*time.Second {
		t.Errorf("Stop took %v", d)
	}
	if sig := v.signals(name); !strings.Contains(sig, "terminated") {
		t.Errorf("signals = %q", sig)
	}
	st, err := e.Status(ctx, ex)
	if err != nil || st.State != executor.StateFailed || st.Reason != executor.ReasonKilled || st.ExitCode == nil || *st.ExitCode != 137 {
		t.Fatalf("status = %+v, %v", st, err)
	}
	v.waitNotify("ns/stubborn")
}

func TestStopWithContextEnding(t *testing.T) {
	v := newTestEnv(t)
	e := v.executor()
	ex := plan(newRun("ns", "slow", lit("fake_sleep", "60s"), lit("fake_ignore_sigterm", "true")))
	name, err := e.Start(context.Background(), ex)
	if err != nil {
		t.Fatal(err)
	}
	v.report(name)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := e.Stop(ctx, ex, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v", err)
	}
	// A second Stop with a shorter grace brings the kill forward.
	if err := e.Stop(context.Background(), ex, 0); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.Status(context.Background(), ex); st.Reason != executor.ReasonKilled {
		t.Fatalf("status = %+v", st)
	}
}

func TestDeadline(t *testing.T) {
	v := newTestEnv(t)
	e := v.executor()
	run := newRun("ns", "deadline", lit("fake_sleep", "60s"))
	run.Spec.Timeouts.Plan = &metav1.Duration{Duration: 500 * time.Millisecond}
	ex := plan(run)
	name, err := e.Start(context.Background(), ex)
	if err != nil {
		t.Fatal(err)
	}
	v.waitNotify("ns/deadline")
	st := waitFinal(t, e, ex)
	if st.State != executor.StateFailed || st.Reason != executor.ReasonDeadlineExceeded {
		t.Fatalf("status = %+v", st)
	}
	if !strings.Contains(v.signals(name), "terminated") {
		t.Errorf("signals = %q", v.signals(name))
	}
}

func TestSecretsOnlyInPrivateFiles(t *testing.T) {
	v := newTestEnv(t)
	e := v.executor()
	ctx := context.Background()
	const secret = "s3cr3t-Pa55w0rd"
	v.writeSecret("ns", "db", "password", secret)
	v.writeConfigMap("ns", "settings", "region", "eu-west-1")
	run := newRun("ns", "secret",
		v1alpha1.Variable{Name: "password", ValueFrom: &v1alpha1.VariableSource{SecretKeyRef: &v1alpha1.KeySelector{Name: "db", Key: "password"}}},
		v1alpha1.Variable{Name: "region", ValueFrom: &v1alpha1.VariableSource{ConfigMapKeyRef: &v1alpha1.KeySelector{Name: "settings", Key: "region"}}},
		v1alpha1.Variable{Name: "tags", Value: `{a = 1}`, HCL: true},
		lit("fake_print_secrets", "true"), lit("fake_exit", "1"),
	)
	ex := plan(run)
	name, err := e.Start(ctx, ex)
	if err != nil {
		t.Fatal(err)
	}
	r := v.report(name)
	vars := map[string]stage.Variable{}
	for _, sv := range r.Spec.Variables {
		vars[sv.Name] = sv
	}
	pw := vars["password"]
	if !pw.Secret || pw.Value != "" || pw.File == "" {
		t.Errorf("password variable = %+v", pw)
	}
	if f := r.Files[pw.File]; f.Mode != "600" || f.Content != secret {
		t.Errorf("password file = %+v", f)
	}
	if rg := vars["region"]; rg.Secret || rg.File == "" || r.Files[rg.File].Content != "eu-west-1" {
		t.Errorf("region variable = %+v (%+v)", rg, r.Files[rg.File])
	}
	if tg := vars["tags"]; tg.Value != `{a = 1}` || !tg.HCL || tg.File != "" {
		t.Errorf("tags variable = %+v", tg)
	}
	for _, s := range append(append([]string{r.StageJSON}, r.Env...), r.Args...) {
		if strings.Contains(s, secret) {
			t.Errorf("secret in the child's env, args or stage file: %q", s)
		}
	}
	v.waitNotify("ns/secret")
	st := waitFinal(t, e, ex)
	if st.State != executor.StateFailed || !strings.Contains(st.Message, "secret password is ***") || strings.Contains(st.Message, secret) {
		t.Errorf("status = %+v", st)
	}
	if _, err := os.Stat(e.workDirOf(ex)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("work dir not removed: %v", err)
	}
}

func TestGitSourceAndBackendSecret(t *testing.T) {
	v := newTestEnv(t)
	e := v.executor()
	ctx := context.Background()
	v.writeSecret("ns", "git-creds", "username", "bot")
	v.writeSecret("ns", "git-creds", "password", "ghp_token_value")
	v.writeSecret("ns", "s3", "backend.hcl", `access_key = "AKIA"`)
	run := newRun("ns", "git")
	run.Spec.Source = v1alpha1.Source{Git: &v1alpha1.GitSource{URL: "https://git.example.com/infra.git", Ref: "main", Path: "envs/prod", CredentialsSecret: "git-creds"}}
	run.Spec.Backend = &v1alpha1.Backend{Type: "s3", Config: map[string]string{"bucket": "tf"}, ConfigSecret: "s3"}
	run.Spec.Engine.Binary = v1alpha1.EngineTofu
	run.Spec.Operation = v1alpha1.OperationDestroy
	run.Spec.Targets = []string{"aws_s3_bucket.a"}
	par := int32(3)
	run.Spec.Parallelism = &par
	ex := plan(run)
	name, err := e.Start(ctx, ex)
	if err != nil {
		t.Fatal(err)
	}
	r := v.report(name)
	g := r.Spec.Source.Git
	if g == nil || g.URL != "https://git.example.com/infra.git" || g.Ref != "main" || g.Path != "envs/prod" || r.Spec.Source.Dir != "" {
		t.Fatalf("source = %+v", r.Spec.Source)
	}
	creds := map[string]fileInfo{}
	for p, f := range r.Files {
		if filepath.Dir(p) == g.CredentialsDir {
			creds[filepath.Base(p)] = f
		}
	}
	if len(creds) != 2 || creds["username"].Content != "bot" || creds["password"].Content != "ghp_token_value" ||
		creds["password"].Mode != "600" {
		t.Errorf("credentials = %+v", creds)
	}
	b := r.Spec.Backend
	if b.Type != "s3" || b.Config["bucket"] != "tf" || len(b.Config) != 1 || r.Files[b.ConfigFile].Content != `access_key = "AKIA"` ||
		r.Files[b.ConfigFile].Mode != "600" {
		t.Errorf("backend = %+v (%+v)", b, r.Files[b.ConfigFile])
	}
	if filepath.Base(r.Spec.Binary) != "tofu" || r.Spec.Operation != "Destroy" || len(r.Spec.Targets) != 1 || *r.Spec.Parallelism != 3 {
		t.Errorf("spec = %+v", r.Spec)
	}
	v.waitNotify("ns/git")

	// The apply stage gets no source, but the approved digest.
	apply := executor.Execution{Run: run, Stage: v1alpha1.StageApply, Attempt: 2, PlanDigest: "sha256:abc"}
	name, err = e.Start(ctx, apply)
	if err != nil {
		t.Fatal(err)
	}
	if name != "ns.git.apply.2" {
		t.Fatalf("name = %q", name)
	}
	r = v.report(name)
	if r.Spec.Source.Git != nil || r.Spec.Source.Dir != "" || r.Spec.PlanDigest != "sha256:abc" || r.Spec.Stage != "apply" || r.Spec.Attempt != 2 {
		t.Errorf("apply spec = %+v", r.Spec)
	}
	v.waitNotify("ns/git")
}

func TestLocalBackendGetsStateDefaults(t *testing.T) {
	v := newTestEnv(t)
	e := v.executor()
	run := newRun("ns", "localbe")
	run.Spec.Backend = &v1alpha1.Backend{Type: "local", Config: map[string]string{"workspace_dir": "/elsewhere"}}
	name, err := e.Start(context.Background(), plan(run))
	if err != nil {
		t.Fatal(err)
	}
	b := v.report(name).Spec.Backend
	if b.Config["workspace_dir"] != "/elsewhere" || b.Config["path"] != filepath.Join(v.root, "state", "ns", "default", "terraform.tfstate") {
		t.Errorf("backend = %+v", b)
	}
	v.waitNotify("ns/localbe")
}

func TestReferenceError(t *testing.T) {
	for _, tc := range []struct {
		err     error
		invalid bool
	}{
		{&NotFoundError{Kind: "secret", Name: "db"}, true},
		{fmt.Errorf("configmap %q is larger than %d bytes", "big", maxValueBytes), true},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.EIO}, false},
		{apierrors.NewServiceUnavailable("etcd is busy"), false},
		{apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, "db"), true},
		{&NotFoundError{Kind: "secret", Name: "db", Hint: "wrapped"}, true},
		{context.DeadlineExceeded, false},
	} {
		if got := errors.Is(referenceError(tc.err), executor.ErrInvalidReference); got != tc.invalid {
			t.Errorf("referenceError(%v) invalid = %v, want %v", tc.err, got, tc.invalid)
		}
	}
}

func TestMissingSecretIsHelpful(t *testing.T) {
	v := newTestEnv(t)
	e := v.executor()
	ctx := context.Background()
	run := newRun("ns", "nosecret",
		v1alpha1.Variable{Name: "password", ValueFrom: &v1alpha1.VariableSource{SecretKeyRef: &v1alpha1.KeySelector{Name: "db", Key: "password"}}})
	ex := plan(run)
	_, err := e.Start(ctx, ex)
	want := `secret "db" key "password" not found: in standalone mode create the file ` +
		filepath.Join(v.root, "values", "ns", "secrets", "db", "password")
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("Start error = %v, want it to contain %q", err, want)
	}
	// Starting again cannot help: the controller fails the run with it.
	if !errors.Is(err, executor.ErrInvalidReference) {
		t.Errorf("Start error %v is not an executor.ErrInvalidReference", err)
	}
	// Nothing ran and nothing is recorded: a later Start may succeed.
	st, err := e.Status(ctx, ex)
	if err != nil || st.State != executor.StateUnknown || st.Reason != executor.ReasonNotStarted {
		t.Fatalf("status = %+v, %v", st, err)
	}
	if _, err := os.Stat(e.workDirOf(ex)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("work dir left behind: %v", err)
	}
	if v.starts() != 0 {
		t.Fatal("a process was started")
	}
	v.writeSecret("ns", "db", "password", "hunter22")
	if _, err := e.Start(ctx, ex); err != nil {
		t.Fatal(err)
	}
	if st := waitFinal(t, e, ex); st.State != executor.StateSucceeded {
		t.Fatalf("status = %+v", st)
	}
}

func TestConfigMapSource(t *testing.T) {
	v := newTestEnv(t)
	e := v.executor()
	ctx := context.Background()
	run := newRun("ns", "cm")
	run.Spec.Source = v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Name: "infra"}}
	_, err := e.Start(ctx, plan(run))
	if err == nil || !strings.Contains(err.Error(), "in standalone mode create the directory "+filepath.Join(v.root, "values", "ns", "configmaps", "infra")) {
		t.Fatalf("Start error = %v", err)
	}
	v.writeConfigMap("ns", "infra", "main.tf", "# main")
	v.writeConfigMap("ns", "infra", "vars.tfvars", "a = 1")
	name, err := e.Start(ctx, plan(run))
	if err != nil {
		t.Fatal(err)
	}
	r := v.report(name)
	if r.Files[filepath.Join(r.Spec.Source.Dir, "main.tf")].Content != "# main" || r.Files[filepath.Join(r.Spec.Source.Dir, "vars.tfvars")].Content != "a = 1" {
		t.Errorf("files = %+v", r.Files)
	}
	v.waitNotify("ns/cm")
}

func TestForget(t *testing.T) {
	v := newTestEnv(t)
	e := v.executor()
	ctx := context.Background()
	run := newRun("ns", "gone", lit("fake_sleep", "60s"))
	done := plan(newRun("ns", "gone"))
	done.Run.UID = run.UID
	done.Attempt = 2
	if _, err := e.Start(ctx, done); err != nil {
		t.Fatal(err)
	}
	v.waitNotify("ns/gone")
	ex := plan(run)
	name, err := e.Start(ctx, ex)
	if err != nil {
		t.Fatal(err)
	}
	v.report(name)
	if err := e.Forget(ctx, "ns", "gone", string(run.UID)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(v.signals(name), "terminated") {
		t.Errorf("signals = %q", v.signals(name))
	}
	for _, x := range []executor.Execution{ex, done} {
		if st, err := e.Status(ctx, x); err != nil || st.Reason != executor.ReasonNotStarted {
			t.Errorf("status = %+v, %v", st, err)
		}
	}
	resp, err := etcdClient.Get(ctx, v.prefix+"ns/gone/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("records left: %v %v", resp.Count, err)
	}
	if _, err := os.Stat(filepath.Join(v.root, "work", "ns", "gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("work dirs left: %v", err)
	}
	// Give a late final-state write a chance to (wrongly) recreate the record.
	time.Sleep(200 * time.Millisecond)
	if resp, _ := etcdClient.Get(ctx, v.prefix+"ns/gone/", clientv3.WithPrefix(), clientv3.WithCountOnly()); resp.Count != 0 {
		t.Error("a record reappeared after Forget")
	}
}

func TestInvalidExecution(t *testing.T) {
	v := newTestEnv(t)
	e := v.executor()
	ctx := context.Background()
	for _, ex := range []executor.Execution{
		{Stage: v1alpha1.StagePlan, Attempt: 1},
		{Run: newRun("ns", "x"), Stage: "destroy", Attempt: 1},
		{Run: newRun("ns", "x"), Stage: v1alpha1.StagePlan, Attempt: 0},
		{Run: newRun("ns", "../x"), Stage: v1alpha1.StagePlan, Attempt: 1},
	} {
		if _, err := e.Start(ctx, ex); err == nil {
			t.Errorf("Start(%+v) succeeded", ex)
		}
	}
}

func TestNewValidates(t *testing.T) {
	v := newTestEnv(t)
	asRoot := os.Getuid() == 0
	for name, tc := range map[string]struct {
		mutate func(*testing.T, *Options)
		want   string
		// acceptedWithoutRoot: a server without root runs its stages as its
		// own user in a user namespace, so Sandbox.UID and GID are unused
		// and its own terrarun-executor is always readable: New accepts it.
		acceptedWithoutRoot bool
	}{
		"no etcd":    {mutate: func(_ *testing.T, o *Options) { o.Etcd = nil }},
		"no binary":  {mutate: func(_ *testing.T, o *Options) { o.ExecutorBinary = filepath.Join(v.root, "missing") }},
		"no server":  {mutate: func(_ *testing.T, o *Options) { o.ServerURL = "" }},
		"no work":    {mutate: func(_ *testing.T, o *Options) { o.WorkRoot = "" }},
		"no values":  {mutate: func(_ *testing.T, o *Options) { o.ValuesRoot = "" }},
		"bad env":    {mutate: func(_ *testing.T, o *Options) { o.Env = []string{"NOVALUE"} }},
		"no state":   {mutate: func(_ *testing.T, o *Options) { o.StateRoot = "" }},
		"empty bin":  {mutate: func(_ *testing.T, o *Options) { o.ExecutorBinary = "" }},
		"bad etcdpf": {mutate: func(_ *testing.T, o *Options) { o.Etcd = nil; o.EtcdPrefix = "x" }},
		"shared work root": {want: "is writable by other users", mutate: func(t *testing.T, o *Options) {
			o.WorkRoot = filepath.Join(v.root, "shared")
			if err := os.Mkdir(o.WorkRoot, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(o.WorkRoot, 0o1777); err != nil {
				t.Fatal(err)
			}
		}},
		"foreign state root": {want: "belongs to uid", mutate: func(t *testing.T, o *Options) {
			if !asRoot {
				o.StateRoot = "/" // root's, not this test's user's
				return
			}
			o.StateRoot = filepath.Join(v.root, "foreign")
			if err := os.Mkdir(o.StateRoot, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(o.StateRoot, 12345, 12345); err != nil {
				t.Fatal(err)
			}
		}},
		"root stages": {want: "sandboxed stages may not run as root or in group root", acceptedWithoutRoot: true, mutate: func(t *testing.T, o *Options) {
			o.Sandbox.UID = 0
		}},
		"root group stages": {want: "sandboxed stages may not run as root or in group root", acceptedWithoutRoot: true, mutate: func(t *testing.T, o *Options) {
			o.Sandbox.GID = 0
		}},
		"no shim in sandbox": {want: "cannot sandbox stages as uid 65532", acceptedWithoutRoot: true, mutate: func(t *testing.T, o *Options) {
			// A binary its stages' user may not read.
			bin := filepath.Join(v.root, "private", "terrarun-executor")
			if err := os.MkdirAll(filepath.Dir(bin), 0o700); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(fakeBin)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(bin, b, 0o700); err != nil {
				t.Fatal(err)
			}
			o.ExecutorBinary = bin
		}},
	} {
		t.Run(name, func(t *testing.T) {
			o := v.opts()
			tc.mutate(t, &o)
			e, err := New(o)
			if tc.acceptedWithoutRoot && !asRoot {
				if err != nil {
					t.Fatalf("without root this is unused, but New failed: %v", err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = e.Shutdown(ctx, executor.ShutdownOptions{})
				return
			}
			switch {
			case err == nil:
				t.Errorf("New succeeded")
			case !strings.Contains(err.Error(), tc.want):
				t.Errorf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	e := v.executor()
	if fi, err := os.Stat(filepath.Join(v.root, "work")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("work root: %v %v", fi, err)
	}
	if e.prefix != v.prefix {
		t.Errorf("prefix %q", e.prefix)
	}
}

func TestOutputTail(t *testing.T) {
	secrets := []string{"topsecret"}
	tail := newOutputTail(100, secrets)
	for i := range 200 {
		// Written in pieces that cut lines and secrets.
		line := "line " + strconv.Itoa(i) + " password=topsecret\n"
		tail.Write([]byte(line[:7]))
		tail.Write([]byte(line[7:]))
	}
	got := tail.String(100, secrets)
	if len(got) > 100 || !strings.HasPrefix(got, "line ") || !strings.HasSuffix(got, "line 199 password=***") || strings.Contains(got, "topsecret") {
		t.Errorf("tail = %q", got)
	}
	if len(tail.buf) > 100+len("topsecret") {
		t.Errorf("the tail keeps %d bytes, more than its limit and the longest secret", len(tail.buf))
	}
	whole := newOutputTail(100, nil)
	whole.Write([]byte("first\nsecond\n"))
	if got := whole.String(100, nil); got != "first\nsecond" {
		t.Errorf("an output shorter than the limit is kept whole: %q", got)
	}
	big := newOutputTail(10, nil)
	big.Write([]byte(strings.Repeat("x", 50) + "\nlast"))
	if got := big.String(10, nil); got != "last" {
		t.Errorf("one write longer than the limit: %q", got)
	}
	var none *outputTail
	if none.String(100, nil) != "" {
		t.Error("tail of a stage that never started")
	}
}

func TestFileValues(t *testing.T) {
	root := t.TempDir()
	fv := FileValues{Root: root}
	ctx := context.Background()
	_, err := fv.SecretValue(ctx, "ns", "db", "password")
	if err == nil || err.Error() != `secret "db" key "password" not found: in standalone mode create the file `+filepath.Join(root, "ns", "secrets", "db", "password") {
		t.Errorf("err = %v", err)
	}
	_, err = fv.ConfigMapValue(ctx, "ns", "cfg", "k")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), filepath.Join(root, "ns", "configmaps", "cfg", "k")) {
		t.Errorf("err = %v", err)
	}
	for _, bad := range [][3]string{{"ns", "db", "../x"}, {"ns", "../db", "k"}, {"../ns", "db", "k"}, {"ns", "db", ""}} {
		if _, err := fv.SecretValue(ctx, bad[0], bad[1], bad[2]); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("%v: err = %v", bad, err)
		}
	}
	dir := filepath.Join(root, "ns", "configmaps", "cfg")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for k, val := range map[string]string{"main.tf": "a", ".hidden": "b"} {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(val), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	data, err := fv.ConfigMapData(ctx, "ns", "cfg")
	if err != nil || len(data) != 1 || data["main.tf"] != "a" {
		t.Errorf("data = %v, %v", data, err)
	}
	if v, err := fv.ConfigMapValue(ctx, "ns", "cfg", "main.tf"); err != nil || string(v) != "a" {
		t.Errorf("value = %q, %v", v, err)
	}
}

func TestStaleOwnRecordIsTakenOver(t *testing.T) {
	v := newTestEnv(t)
	e := v.executor()
	ctx := context.Background()
	ex := plan(newRun("ns", "stale"))
	key := v.prefix + "ns/stale/" + string(ex.Run.UID) + "/plan/1"
	put := func(holder string) {
		now := time.Now()
		b, _ := json.Marshal(record{Name: "ns.stale.plan.1", State: executor.StateRunning, Holder: holder, StartTime: &now})
		if _, err := etcdClient.Put(ctx, key, string(b)); err != nil {
			t.Fatal(err)
		}
	}

	// Another instance's record: lost, and never started again.
	put("another-instance")
	if st, _ := e.Status(ctx, ex); st.Reason != executor.ReasonExecutorLost {
		t.Fatalf("status = %+v", st)
	}
	if _, err := e.Start(ctx, ex); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if v.starts() != 0 {
		t.Fatal("started a process for another instance's record")
	}

	// This instance's own record, written by a Start whose process never
	// started (say the client saw an error for a transaction that committed).
	put(e.holder)
	if st, _ := e.Status(ctx, ex); st.State != executor.StateUnknown || st.Reason != executor.ReasonNotStarted {
		t.Fatalf("status = %+v", st)
	}
	if _, err := e.Start(ctx, ex); err != nil {
		t.Fatal(err)
	}
	if st := waitFinal(t, e, ex); st.State != executor.StateSucceeded {
		t.Fatalf("status = %+v", st)
	}
	if v.starts() != 1 {
		t.Fatalf("%d starts", v.starts())
	}
}

// TestSweepStale: the work directories a killed server left (with the
// secret files and token in them) are removed by the next one, with their
// empty parents; those of its own are kept.
func TestSweepStale(t *testing.T) {
	v := newTestEnv(t)
	work := filepath.Join(v.root, "work")
	stale := filepath.Join(work, "team-a", "web", "uid-1", "apply-1")
	for _, d := range []string{stale, stale + ".root"} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(stale, "token"), []byte("stage token"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for _, d := range []string{stale, stale + ".root"} {
		if err := os.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
	}
	e := v.executor()
	own := filepath.Join(work, "team-b", "db", "uid-2", "plan-1")
	if err := os.MkdirAll(own, 0o700); err != nil {
		t.Fatal(err)
	}

	e.sweepStale(t.Context(), 0)

	for _, d := range []string{stale, stale + ".root", filepath.Join(work, "team-a")} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s is still there (%v)", d, err)
		}
	}
	if _, err := os.Stat(own); err != nil {
		t.Errorf("this instance's own directory was removed: %v", err)
	}
}

// TestPluginCachePerCreator: runs share a plugin cache only with the runs of
// the same creator in the same namespace, and a run without a recorded
// creator gets none.
func TestPluginCachePerCreator(t *testing.T) {
	e := &Executor{opts: Options{PluginCacheRoot: "/cache"}}
	run := func(ns, user string) *v1alpha1.TerraformRun {
		r := &v1alpha1.TerraformRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r"}}
		if user != "" {
			r.Spec.Creator = &v1alpha1.Creator{Username: user}
		}
		return r
	}
	alice := e.pluginCache(run("team", "alice"))
	if !strings.HasPrefix(alice, "/cache/team/") || strings.Contains(alice, "alice") {
		t.Errorf("alice's cache is %q, want a digest of her name under /cache/team/", alice)
	}
	if again := e.pluginCache(run("team", "alice")); again != alice {
		t.Errorf("alice's runs have two caches: %q, %q", alice, again)
	}
	for _, other := range []*v1alpha1.TerraformRun{run("team", "bob"), run("other", "alice"), run("team", "../alice")} {
		if got := e.pluginCache(other); got == alice || filepath.Dir(got) != "/cache/"+other.Namespace {
			t.Errorf("%s/%s: cache %q (alice's in team: %q)", other.Namespace, other.Spec.Creator.Username, got, alice)
		}
	}
	if got := e.pluginCache(run("team", "")); got != "" {
		t.Errorf("a run without a creator has the cache %q", got)
	}
}

// TestEngineVersionAskedOncePerBinary: the executor asks each engine binary
// its version once, hands it to every stage with the binary's path, and asks
// again when the binary changes; an engine that cannot answer is not asked
// for every stage either.
func TestEngineVersionAskedOncePerBinary(t *testing.T) {
	v := newTestEnv(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(v.reports, "calls")
	engine := func(name, answer string) string {
		p := filepath.Join(dir, name)
		script := fmt.Sprintf("#!/bin/sh\necho %s \"$*\" >> %s\necho '%s'\n", name, calls, answer)
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	terraform := engine("terraform", `{"terraform_version":"1.2.3","provider_selections":{}}`)
	tofu := engine("tofu", "no version here")
	v.env = []string{"PATH=" + dir + ":" + os.Getenv("PATH")}
	e := v.executor()
	ctx := context.Background()
	asked := func() []string {
		data, _ := os.ReadFile(calls)
		_ = os.Remove(calls)
		return strings.Split(strings.TrimSpace(string(data)), "\n")
	}
	stage := func(name string, binary v1alpha1.EngineBinary) stage.Spec {
		t.Helper()
		run := newRun("team-a", name)
		run.Spec.Engine.Binary = binary
		ex := plan(run)
		if _, err := e.Start(ctx, ex); err != nil {
			t.Fatal(err)
		}
		waitFinal(t, e, ex)
		return v.report(ex.Run.Namespace + "." + name + ".plan.1").Spec
	}

	for i, name := range []string{"one", "two"} {
		s := stage(name, "terraform")
		if s.Binary != terraform || s.EngineVersion == nil || s.EngineVersion.Version != "1.2.3" {
			t.Errorf("stage %d: binary %q, version %+v", i+1, s.Binary, s.EngineVersion)
		}
	}
	if got := asked(); strings.Join(got, ";") != "terraform version -json" {
		t.Errorf("the engine was asked %q, want once", got)
	}
	// A new binary is asked again.
	time.Sleep(10 * time.Millisecond)
	engine("terraform", `{"terraform_version":"1.2.4","provider_selections":{}}`)
	if s := stage("three", "terraform"); s.EngineVersion == nil || s.EngineVersion.Version != "1.2.4" {
		t.Errorf("after the binary changed: version %+v", s.EngineVersion)
	}
	if got := asked(); strings.Join(got, ";") != "terraform version -json" {
		t.Errorf("the changed engine was asked %q, want once", got)
	}
	// No answer: the stages ask themselves, and the executor asks only once.
	for _, name := range []string{"four", "five"} {
		if s := stage(name, "tofu"); s.Binary != tofu || s.EngineVersion != nil {
			t.Errorf("binary %q, version %+v from an engine that printed no version", s.Binary, s.EngineVersion)
		}
	}
	// (Once: terraform-exec tries `version` when `version -json` printed no JSON.)
	if got := asked(); strings.Join(got, ";") != "tofu version -json;tofu version" {
		t.Errorf("the engine that cannot answer was asked %q, want once", got)
	}
}

// TestEngineVersionNotAskedOfPlantedBinary is the attack of a stage that
// plants an engine in a directory on the stages' PATH that it may write: the
// server, which runs as another user and outside the sandbox, must not run
// it to ask its version. Only stages, in their sandbox, run it.
func TestEngineVersionNotAskedOfPlantedBinary(t *testing.T) {
	v := newTestEnv(t)
	ran := filepath.Join(t.TempDir(), "ran")
	plant := func(dir string, dirMode, fileMode os.FileMode) {
		t.Helper()
		if err := os.Chmod(dir, dirMode); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "terraform")
		script := fmt.Sprintf("#!/bin/sh\necho \"$(id -u)\" >> %s\necho '{\"terraform_version\":\"1.2.3\"}'\n", ran)
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, fileMode); err != nil {
			t.Fatal(err)
		}
	}
	writableDir := t.TempDir()
	plant(writableDir, 0o777|os.ModeSticky, 0o755)
	writableFile := t.TempDir()
	plant(writableFile, 0o755, 0o777)
	for _, c := range []struct{ name, dir, run string }{
		{"a directory anyone may write", writableDir, "dir"},
		{"a file anyone may write", writableFile, "file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v.env = []string{"PATH=" + c.dir + ":" + os.Getenv("PATH")}
			e := v.executor()
			ex := plan(newRun("team-a", c.run))
			if _, err := e.Start(context.Background(), ex); err != nil {
				t.Fatal(err)
			}
			waitFinal(t, e, ex)
			if data, _ := os.ReadFile(ran); len(data) > 0 {
				t.Errorf("the server ran the planted engine (as uid %s)", strings.TrimSpace(string(data)))
			}
			s := v.report(e.Name(ex)).Spec
			if s.EngineVersion != nil {
				t.Errorf("the stage got the version %+v of a planted engine", s.EngineVersion)
			}
		})
	}
}

// TestForgetSparesTheNextRunOfTheName: a run deleted and made again under
// the same name (a workspace takes back a name someone squatted) is another
// run, and the end of the deleted one's stage must not reach the new one's,
// though both are <namespace>/<name>, plan, attempt 1. Their cgroups were
// once named by exactly that, so the old stage's cgroup removal killed the
// new stage (exit code 137) in the same group.
func TestForgetSparesTheNextRunOfTheName(t *testing.T) {
	v := newTestEnv(t)
	opts := v.opts()
	opts.Limits = stagelimits.Limits{Processes: 256}
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if enforced := e.limits.Enforcement(); !strings.Contains(enforced, "in a cgroup of its own") {
		t.Fatalf("this test needs stage cgroups, as CI's host gives them: %s", enforced)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx, executor.ShutdownOptions{})
	})
	ctx := context.Background()
	old, next := plan(newRun("ns", "same", lit("fake_sleep", "60s"))), plan(newRun("ns", "same", lit("fake_sleep", "60s")))
	for i, ex := range []executor.Execution{old, next} {
		if _, err := e.Start(ctx, ex); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); v.starts() < i+1; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("stage %d never started", i+1)
			}
		}
	}
	if err := e.Forget(ctx, "ns", "same", string(old.Run.UID)); err != nil {
		t.Fatal(err)
	}
	// The old stage's end, cgroup removal included, is over when Forget
	// returns; give a late kill a moment to land anyway.
	time.Sleep(500 * time.Millisecond)
	if st, err := e.Status(ctx, next); err != nil || st.State != executor.StateRunning {
		t.Fatalf("the new run's stage after the old one was forgotten: %+v, %v; want it running", st, err)
	}
}

// TestGitCredentialsSecretMissing: a git credentials Secret that does not
// exist is "not found", with where to create it; one without any of the
// keys says which keys.
func TestGitCredentialsSecretMissing(t *testing.T) {
	v := newTestEnv(t)
	e := v.executor()
	v.writeSecret("ns", "unrelated", "token", "x")
	for _, tc := range []struct{ secret, want string }{
		{"absent", `git credentials (spec.source.git.credentialsSecret): secret "absent" not found: in standalone mode create the directory`},
		{"unrelated", `git credentials: secret "unrelated" has none of the keys host, username, password`},
	} {
		run := newRun("ns", "git-"+tc.secret)
		run.Spec.Source = v1alpha1.Source{Git: &v1alpha1.GitSource{URL: "https://git.example.com/infra.git", CredentialsSecret: tc.secret}}
		_, err := e.Start(context.Background(), plan(run))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("secret %s: %v, want %q", tc.secret, err, tc.want)
		}
	}
}
