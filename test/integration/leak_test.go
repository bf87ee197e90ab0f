package integration

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/runner/oci/ocitest"
	"github.com/terrarun/terrarun/test/internal/gitserver"
)

// leakTF is the configuration the leak matrix runs: every Secret-sourced
// variable is used raw and through upper, base64encode and jsonencode, in
// resources and in (sensitive) outputs.
const leakTF = `variable "s_string" {
  type = string
}

variable "s_number" {
  type = number
}

variable "s_object" {
  type = object({ key = string, n = number })
}

resource "terraform_data" "derived" {
  input = {
    raw    = var.s_string
    upper  = upper(var.s_string)
    b64    = base64encode(var.s_string)
    num    = var.s_number
    numb64 = base64encode(tostring(var.s_number))
    json   = jsonencode(var.s_object)
    okey   = upper(var.s_object.key)
    okb64  = base64encode(var.s_object.key)
  }

  provisioner "local-exec" {
    command = "echo provisioned"
  }
}

output "plain" {
  value = "nothing secret"
}

output "string_upper" {
  value     = upper(var.s_string)
  sensitive = true
}

output "string_b64" {
  value     = base64encode(var.s_string)
  sensitive = true
}

output "number" {
  value     = var.s_number
  sensitive = true
}

output "object_json" {
  value     = jsonencode(var.s_object)
  sensitive = true
}

output "object" {
  value     = var.s_object
  sensitive = true
}
`

// secretForm is one way a secret input may appear.
type secretForm struct {
	input, form, value string
}

// TestLeakMatrix runs one run whose every input is secret (string, number
// and object variables from a Secret, a backend configSecret, git
// credentials), and the same from a private OCI registry (its credentials), and whose outputs are sensitive and derived from them, then
// scans every place a user or operator can read: the logs of each stage, the
// plan text and JSON, the run's status, kubectl describe, error responses,
// the server's own log and the files left in the data directory. Each
// secret, in each form (raw, upper, base64encode, jsonencode, and the
// basic-auth header of the git and registry credentials), must appear in none of them:
// only the outputs subresource serves them.
func TestLeakMatrix(t *testing.T) {
	e := newRunEnv(t)
	id := fmt.Sprintf("%08x", rand.Uint32())
	str := "LeakStr" + id
	num := fmt.Sprint(700000000 + rand.IntN(99999999))
	objKey, objNum := "LeakObjKey"+id, fmt.Sprint(80000000+rand.IntN(9999999))
	backendPass := "LeakBackend" + id
	gitUser, gitPass := "leak-user", "LeakGit"+id

	gitURL, gitCA := gitServer(t, gitUser, gitPass, map[string]string{"main.tf": leakTF})
	state := &stateServer{user: "terrarun", pass: backendPass}
	stateSrv := httptest.NewServer(state)
	t.Cleanup(stateSrv.Close)

	e.secret(t, "default", "leak", "string", str)
	e.secret(t, "default", "leak", "number", num)
	e.secret(t, "default", "leak", "object", fmt.Sprintf(`{ key = %q, n = %s }`, objKey, objNum))
	e.secret(t, "default", "backend", "backend.hcl", fmt.Sprintf("username = \"terrarun\"\npassword = %q\n", backendPass))
	gitHost := strings.TrimPrefix(gitURL, "https://")
	gitHost = gitHost[:strings.Index(gitHost, "/")]
	e.secret(t, "default", "gitcreds", "host", gitHost)
	e.secret(t, "default", "gitcreds", "username", gitUser)
	e.secret(t, "default", "gitcreds", "password", gitPass)
	e.secret(t, "default", "gitcreds", "ca.crt", gitCA)

	e.create(t, runManifest("leak", fmt.Sprintf(`  engine:
    binary: %s
  workspace: default
  approval:
    mode: Auto
  source:
    git:
      url: %s
      ref: main
      credentialsSecret: gitcreds
  backend:
    type: http
    config:
      address: %s/state
    configSecret: backend
  variables:
  - name: s_string
    valueFrom:
      secretKeyRef: {name: leak, key: string}
  - name: s_number
    hcl: true
    valueFrom:
      secretKeyRef: {name: leak, key: number}
  - name: s_object
    hcl: true
    valueFrom:
      secretKeyRef: {name: leak, key: object}
`, engineName, gitURL, stateSrv.URL)))
	// The same configuration from a private OCI registry: its password
	// (and the forms a registry is sent it in) must leak nowhere either. It
	// plans against the state the first run applies, and finds no changes.
	reg := ocitest.Start(t, ocitest.Options{Private: true})
	reg.Push("infra/leak", "v1", ocitest.Artifact{Layer: ocitest.TarGz(map[string]string{"main.tf": leakTF})})
	e.secret(t, "default", "pull", ".dockerconfigjson", string(reg.DockerConfig()))
	e.secret(t, "default", "registry-ca", "ca.crt", string(reg.CA))

	run := e.waitPhase(t, "leak", 4*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Fatalf("run ended %s: %s\nplan log:\n%s", run.Status.Phase, run.Status.Message,
			mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("leak", "logs?stage=plan")))
	}
	if run.Status.Source == nil || len(run.Status.Source.Revision) != 40 {
		t.Errorf("status.source = %+v, want the cloned commit", run.Status.Source)
	}
	if !state.wasWritten() {
		t.Errorf("the http backend was never written: the backend credentials were not used")
	}

	leakSpec := mustKubectl(t, e.Kubeconfig, "get", "tfr", "leak", "-o", "jsonpath={.spec.variables}")
	e.create(t, runManifest("leak-oci", fmt.Sprintf(`  engine:
    binary: %s
  workspace: default
  approval:
    mode: Auto
  source:
    oci:
      url: %s
      ref: {tag: v1}
      credentialsSecret: pull
      certSecret: registry-ca
  backend:
    type: http
    config:
      address: %s/state
    configSecret: backend
  variables: %s
`, engineName, reg.URL("infra/leak"), stateSrv.URL, leakSpec)))
	ociRun := e.waitPhase(t, "leak-oci", 4*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if ociRun.Status.Phase != v1alpha1.RunPhaseSucceeded || ociRun.Status.Source == nil || !strings.HasPrefix(ociRun.Status.Source.Revision, "v1@sha256:") {
		t.Fatalf("run leak-oci ended %s (%s), source %+v; plan log:\n%s", ociRun.Status.Phase, ociRun.Status.Message, ociRun.Status.Source,
			mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("leak-oci", "logs?stage=plan")))
	}

	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	forms := []secretForm{
		{"string variable", "raw", str}, {"string variable", "upper", strings.ToUpper(str)}, {"string variable", "base64encode", b64(str)},
		{"number variable", "raw", num}, {"number variable", "base64encode", b64(num)},
		{"object variable", "raw key", objKey}, {"object variable", "upper key", strings.ToUpper(objKey)},
		{"object variable", "base64encode key", b64(objKey)}, {"object variable", "raw number", objNum},
		{"backend configSecret", "raw", backendPass},
		{"git credentials", "raw", gitPass}, {"git credentials", "basic authorization", b64(gitUser + ":" + gitPass)},
		{"registry credentials", "raw", reg.Password}, {"registry credentials", "basic authorization", b64(reg.Username + ":" + reg.Password)},
	}

	// The outputs subresource is the one place that serves them.
	outputs := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("leak", "outputs"))
	for _, f := range []secretForm{forms[1], forms[2], forms[3], forms[5]} {
		if !strings.Contains(outputs, f.value) {
			t.Errorf("the outputs subresource lacks the %s of the %s: the matrix would prove nothing", f.form, f.input)
		}
	}
	for _, o := range run.Status.Outputs {
		if o.Name != "plain" && (!o.Sensitive || o.Value != nil) {
			t.Errorf("status.outputs[%s] = %+v, want sensitive without value", o.Name, o)
		}
	}

	places := map[string]string{
		"plan log":            mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("leak", "logs?stage=plan")),
		"apply log":           mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("leak", "logs?stage=apply")),
		"plan text":           mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("leak", "plan")),
		"plan JSON":           mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("leak", "plan?format=json")),
		"status":              mustKubectl(t, e.Kubeconfig, "get", "tfr", "leak", "-o", "json"),
		"describe":            mustKubectl(t, e.Kubeconfig, "describe", "tfr", "leak"),
		"table, wide":         mustKubectl(t, e.Kubeconfig, "get", "tfr", "leak", "-o", "wide"),
		"OCI run's plan log":  mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("leak-oci", "logs?stage=plan")),
		"OCI run's plan text": mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("leak-oci", "plan")),
		"OCI run's status":    mustKubectl(t, e.Kubeconfig, "get", "tfr", "leak-oci", "-o", "json"),
		"OCI run's describe":  mustKubectl(t, e.Kubeconfig, "describe", "tfr", "leak-oci"),
	}
	if !strings.Contains(places["apply log"], "provisioned") || !strings.Contains(places["plan JSON"], "resource_changes") {
		t.Fatalf("the logs or plan are not what the run made:\napply log:\n%s\nplan JSON:\n%.400s", places["apply log"], places["plan JSON"])
	}
	for what, path := range map[string]string{
		"a log that does not exist":   raw("leak", "logs?stage=apply&attempt=9"),
		"a plan in an unknown format": raw("leak", "plan?format=yaml"),
	} {
		out, err := kubectl(t, e.Kubeconfig, "get", "--raw", path)
		if err == nil {
			t.Errorf("GET %s succeeded", path)
		}
		places["error: "+what] = out
	}
	approval := filepath.Join(t.TempDir(), "approval.json")
	writeFile(t, approval, `{"apiVersion":"terrarun.dev/v1alpha1","kind":"TerraformRunApproval","planDigest":"sha256:`+strings.Repeat("0", 64)+`"}`)
	out, _ := kubectl(t, e.bob, "create", "--raw", raw("leak", "approve"), "-f", approval)
	places["error: a late approval"] = out

	// Stop the server so that its log is complete.
	if err := e.Stop(90 * time.Second); err != nil {
		t.Error(err)
	}
	places["server log"] = e.output.String()
	files := dataDirFiles(t, e.DataDir)

	for _, f := range forms {
		for place, content := range places {
			if strings.Contains(content, f.value) {
				t.Errorf("%s: the %s of the %s appears: %s", place, f.form, f.input, excerpt(content, f.value))
			}
		}
		for path, content := range files {
			if bytes.Contains(content, []byte(f.value)) {
				t.Errorf("file %s: the %s of the %s appears", path, f.form, f.input)
			}
		}
	}
}

// dataDirFiles reads every file left in the data directory after the run,
// but for those that hold secrets by design: the Secrets themselves
// (values/), etcd's data, whose plan files hold the variables as terraform
// saved them (encrypt it with --encryption-provider-config), and states.
func dataDirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			switch rel {
			case "values", "etcd", "state":
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files[rel] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// excerpt shows where s holds value, with the value marked.
func excerpt(s, value string) string {
	i := strings.Index(s, value)
	start, end := max(i-80, 0), min(i+len(value)+80, len(s))
	return fmt.Sprintf("%q", s[start:i]+"»"+value+"«"+s[i+len(value):end])
}

// stateServer is a Terraform http backend that requires basic
// authentication.
type stateServer struct {
	user, pass string

	mu      sync.Mutex
	state   []byte
	written bool
}

func (s *stateServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if u, p, ok := r.BasicAuth(); !ok || u != s.user || p != s.pass {
		w.Header().Set("WWW-Authenticate", `Basic realm="state"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method {
	case http.MethodGet:
		if s.state == nil {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_, _ = w.Write(s.state)
	case http.MethodPost:
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.state, s.written = b, true
	case http.MethodDelete:
		s.state = nil
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (s *stateServer) wasWritten() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written
}

// gitServer serves a repository with files on branch main over https, to
// user:pass only. It returns the repository's URL and the PEM of the
// server's certificate.
func gitServer(t *testing.T, user, pass string, files map[string]string) (string, string) {
	t.Helper()
	repo := gitserver.New(t, user, pass, files)
	return repo.URL, repo.CA
}
