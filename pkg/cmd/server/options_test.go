package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/util/compatibility"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// parse returns options parsed from args as the command parses them.
func parse(t *testing.T, args ...string) *Options {
	t.Helper()
	o := NewOptions(io.Discard)
	fs := pflag.NewFlagSet("terrarun-apiserver", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := o.Complete(fs); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestValidate(t *testing.T) {
	cases := []struct {
		args []string
		want []string // substrings of the error; none: valid
	}{
		{args: []string{"--standalone", "--data-dir", t.TempDir()}},
		{args: []string{"--standalone", "--data-dir", ""}, want: []string{"--data-dir is required"}},
		{args: []string{"--standalone", "--etcd-servers", "http://127.0.0.1:2379"}, want: []string{"--etcd-servers cannot be combined with --standalone"}},
		{args: []string{"--etcd-servers", "http://127.0.0.1:2379", "--executor", "docker"}, want: []string{"--executor must be local, kubernetes or tekton"}},
		{args: []string{"--etcd-servers", "http://127.0.0.1:2379", "--executor", "local"}, want: []string{"--executor=local outside standalone mode runs every stage on this server's host", "--allow-unsandboxed-local-executor"}},
		{args: []string{"--etcd-servers", "http://127.0.0.1:2379", "--executor", "local", "--allow-unsandboxed-local-executor"}, want: []string{"--executor=local needs --executor-server-url and --executor-ca-file"}},
		{args: []string{"--etcd-servers", "http://127.0.0.1:2379", "--executor", "local", "--allow-unsandboxed-local-executor", "--executor-server-url", "https://10.0.0.1:8443", "--executor-ca-file", "/etc/terrarun/ca.crt"}},
		{args: []string{"--etcd-servers", "http://127.0.0.1:2379", "--executor", "kubernetes"}, want: []string{"--executor=kubernetes needs --executor-server-url"}},
		{args: []string{"--etcd-servers", "http://127.0.0.1:2379", "--executor", "tekton"}, want: []string{"--executor=tekton needs --executor-server-url"}},
		{args: []string{"--etcd-servers", "http://127.0.0.1:2379", "--executor", "kubernetes", "--executor-server-url", "https://terrarun.example"}},
		{args: []string{"--standalone", "--controller-workers", "0", "--default-engine", "opentofu"}, want: []string{"--controller-workers must be at least 1", "--default-engine must be terraform or tofu"}},
		{args: []string{"--executor", "kubernetes", "--executor-server-url", "https://terrarun.example"}, want: []string{"--etcd-servers must be specified"}},
		{args: []string{"--standalone", "--local-executor-user", "1000:1000", "--local-executor-mount", "/opt/mirror,/var/cache/tf:rw"}},
		{args: []string{"--standalone", "--local-executor-user", "0:1000"}, want: []string{`--local-executor-user must be UID:GID with numbers, neither 0 (root), not "0:1000"`}},
		{args: []string{"--standalone", "--local-executor-user", "1000:0"}, want: []string{`--local-executor-user must be UID:GID`}},
		{args: []string{"--standalone", "--local-executor-user", "nobody"}, want: []string{`--local-executor-user must be UID:GID`}},
		{args: []string{"--standalone", "--local-executor-env", "TF_CLI_CONFIG_FILE=/etc/terrarun/terraformrc", "--local-executor-env", "HTTPS_PROXY=http://proxy:3128"}},
		{args: []string{"--standalone", "--local-executor-env", "TF CLI=x"}, want: []string{`--local-executor-env "TF CLI=x" must be NAME=VALUE`}},
		{args: []string{"--standalone", "--local-executor-env", "novalue"}, want: []string{`--local-executor-env "novalue" must be NAME=VALUE`}},
		{args: []string{"--standalone", "--local-executor-env", "TMPDIR=/tmp"}, want: []string{`--local-executor-env TMPDIR: each stage gets its own TMPDIR; it cannot be set`}},
		{args: []string{"--standalone", "--max-follows-per-user", "0"}, want: []string{`--max-follows-per-user must be at least 1, not 0`}},
		{args: []string{"--standalone", "--embedded-etcd-quota-bytes", "8589934592"}},
		{args: []string{"--standalone", "--embedded-etcd-quota-bytes", "8589934593"}, want: []string{`--embedded-etcd-quota-bytes must be between 0 (etcd's default, 2 GiB) and 8589934592 (8 GiB), not 8589934593`}},
		{args: []string{"--etcd-servers", "http://127.0.0.1:2379", "--embedded-etcd-quota-bytes", "4294967296"}, want: []string{`--embedded-etcd-quota-bytes applies to --standalone only`}},
		{args: []string{"--etcd-servers", "http://127.0.0.1:2379", "--admission-policy-dir", "/policies"}, want: []string{`--admission-policy-dir applies to --standalone only`}},
		{args: []string{"--executor", "kubernetes", "--executor-server-url", "https://terrarun.example", "--executor-node-lost-after", "0s", "--etcd-servers", "http://127.0.0.1:2379"}, want: []string{`--executor-node-lost-after must be a positive duration`}},
		{args: []string{"--executor", "kubernetes", "--executor-server-url", "https://terrarun.example", "--etcd-servers", "http://127.0.0.1:2379", "--executor-plugin-cache-storage-class", "nfs", "--executor-plugin-cache-size", "20Gi"}},
		{args: []string{"--executor", "kubernetes", "--executor-server-url", "https://terrarun.example", "--etcd-servers", "http://127.0.0.1:2379", "--executor-plugin-cache-storage-class", "nfs", "--executor-plugin-cache-size", "0"}, want: []string{`--executor-plugin-cache-size must be a positive quantity, such as 5Gi, not 0`}},
		{args: []string{"--executor", "kubernetes", "--executor-server-url", "https://terrarun.example", "--etcd-servers", "http://127.0.0.1:2379", "--executor-plugin-cache-storage-class", "NFS RWX"}, want: []string{`--executor-plugin-cache-storage-class "NFS RWX" is not a StorageClass name`}},
		{args: []string{"--standalone", "--executor-plugin-cache-storage-class", "nfs"}, want: []string{`--executor-plugin-cache-storage-class applies to --executor=kubernetes and tekton only`}},
		{args: []string{"--standalone", "--max-total-log-bytes", "-1"}, want: []string{`--max-total-log-bytes must not be negative (0 means the default)`}},
		{args: []string{"--standalone", "--local-executor-mount", "mirror"}, want: []string{`--local-executor-mount "mirror" must be a clean absolute path other than /, optionally followed by :rw`}},
		{args: []string{"--standalone", "--local-executor-mount", "/opt/mirror:ro"}, want: []string{`--local-executor-mount "/opt/mirror:ro"`}},
		{args: []string{"--standalone", "--local-executor-sandbox=false", "--local-executor-user", "0:0"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			err := parse(t, c.args...).Validate()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate succeeded, want %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestConfigLeavesOptionsAlone checks that Validate and Config read the
// options without changing them, even in standalone mode, which replaces
// etcd, serving, authentication, authorization and admission.
func TestConfigLeavesOptionsAlone(t *testing.T) {
	o := parse(t, "--standalone", "--data-dir", t.TempDir(), "--executor-binary", "/bin/true")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	o.Recommended.SecureServing.Listener = l
	before := snapshot(o)
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(o); !reflect.DeepEqual(before, after) {
		t.Fatalf("Validate changed the options:\nbefore %+v\nafter  %+v", before, after)
	}
	config, cleanup, err := o.Config(t.Context())
	defer cleanup()
	if err != nil {
		t.Fatalf("Config: %v", err)
	}
	if after := snapshot(o); !reflect.DeepEqual(before, after) {
		t.Fatalf("Config changed the options:\nbefore %+v\nafter  %+v", before, after)
	}
	if config.GenericConfig.Authentication.Authenticator == nil || config.GenericConfig.Authorization.Authorizer == nil ||
		config.GenericConfig.AdmissionControl == nil || config.ExtraConfig.Executor.Executor == nil || config.ExtraConfig.Storage.Artifacts == nil {
		t.Errorf("standalone config is missing authentication, authorization, admission, the executor or the artifact store: %+v", config.ExtraConfig)
	}
	if ip := config.GenericConfig.SecureServing.Listener.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		t.Errorf("standalone mode listens on %s, want loopback", ip)
	}
}

// optionsSnapshot is what Config must not change.
type optionsSnapshot struct {
	etcdServers                []string
	bindAddress                string
	certFile                   string
	authn, authz, admission    bool
	pluginOrder                []string
	priorityAndFairness        bool
	executorURL, executorCA    string
	extraAdmissionInitializers bool
}

func snapshot(o *Options) optionsSnapshot {
	r := o.Recommended
	return optionsSnapshot{
		etcdServers:                append([]string(nil), r.Etcd.StorageConfig.Transport.ServerList...),
		bindAddress:                r.SecureServing.BindAddress.String(),
		certFile:                   r.SecureServing.ServerCert.CertKey.CertFile,
		authn:                      r.Authentication != nil,
		authz:                      r.Authorization != nil,
		admission:                  r.Admission != nil,
		pluginOrder:                append([]string(nil), r.Admission.RecommendedPluginOrder...),
		priorityAndFairness:        r.Features.EnablePriorityAndFairness,
		executorURL:                o.Executor.ServerURL,
		executorCA:                 o.Executor.CAFile,
		extraAdmissionInitializers: r.ExtraAdmissionInitializers != nil,
	}
}

// TestRelativeDataDir: `--data-dir .terrarun`, as a user types it, is the
// directory under the working directory, absolute from then on (the
// sandbox and the kubeconfig files need absolute paths).
func TestRelativeDataDir(t *testing.T) {
	t.Chdir(t.TempDir())
	o := parse(t, "--standalone", "--data-dir", ".terrarun")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(wd, ".terrarun"); o.DataDir != want {
		t.Errorf("DataDir = %q, want %q", o.DataDir, want)
	}
}

// TestServerVersionParses: /version's gitVersion is semver, as `kubectl
// version` requires, at the API level served.
func TestServerVersionParses(t *testing.T) {
	info := serverVersion{compatibility.DefaultBuildEffectiveVersion()}.Info()
	v, err := utilversion.ParseSemantic(info.GitVersion)
	if err != nil {
		t.Fatalf("gitVersion %q: %v", info.GitVersion, err)
	}
	if fmt.Sprint(v.Major()) != info.Major || fmt.Sprint(v.Minor()) != info.Minor || !strings.Contains(info.GitVersion, "+terrarun.") {
		t.Errorf("gitVersion %q for API level %s.%s", info.GitVersion, info.Major, info.Minor)
	}
}

// TestStorageMediaType: runs are stored in protobuf unless
// --storage-media-type says JSON or YAML, and either codec reads what the
// others stored; a media type the group cannot store is refused by name.
func TestStorageMediaType(t *testing.T) {
	run := &terrarun.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"},
		Spec:       terrarun.TerraformRunSpec{Source: terrarun.Source{Inline: map[string]string{"main.tf": "# empty\n"}}},
	}
	stored := map[string][]byte{}
	for _, tc := range []struct{ flag, prefix string }{
		{"", "k8s\x00"},
		{"--storage-media-type=application/vnd.kubernetes.protobuf", "k8s\x00"},
		{"--storage-media-type=application/json", `{"kind":"TerraformRun"`},
		{"--storage-media-type=application/yaml", "apiVersion: terrarun.dev/v1alpha1"},
	} {
		var args []string
		if tc.flag != "" {
			args = append(args, tc.flag)
		}
		codec := parse(t, args...).Recommended.Etcd.StorageConfig.Codec
		data, err := runtime.Encode(codec, run)
		if err != nil {
			t.Fatalf("%s: %v", tc.flag, err)
		}
		if !bytes.HasPrefix(data, []byte(tc.prefix)) {
			t.Errorf("%q: stored as %.40q, want it to start with %q", tc.flag, data, tc.prefix)
		}
		stored[tc.flag] = data
	}
	for flag, data := range stored {
		obj, err := runtime.Decode(parse(t).Recommended.Etcd.StorageConfig.Codec, data)
		if got, ok := obj.(*terrarun.TerraformRun); err != nil || !ok || got.Name != "web" || got.Spec.Source.Inline["main.tf"] != "# empty\n" {
			t.Errorf("the protobuf storage reading what %q stored: %v, %#v", flag, err, obj)
		}
	}

	o := NewOptions(io.Discard)
	fs := pflag.NewFlagSet("terrarun-apiserver", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--storage-media-type=application/cbor"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Complete(fs); err == nil || !strings.Contains(err.Error(), "--storage-media-type") {
		t.Errorf("--storage-media-type=application/cbor: %v, want an error naming the flag", err)
	}
}

// TestMissingEngine: a local executor without the engine its runs use says
// so, with the fix; Jobs (whose image has the engine) never do.
func TestMissingEngine(t *testing.T) {
	empty, both := t.TempDir(), t.TempDir()
	for _, name := range []string{"terraform", "tofu"} {
		if err := os.WriteFile(filepath.Join(both, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, path string
		args       []string
		want       string // "" for no warning
	}{
		{name: "neither", path: empty, want: "neither terraform nor tofu is on PATH"},
		{name: "terraform and tofu", path: both},
		{name: "tofu chosen, missing", path: empty, args: []string{"--default-engine=tofu"}, want: "--default-engine=tofu, but tofu is not on PATH"},
		{name: "jobs", path: empty, args: []string{"--executor=kubernetes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PATH", tc.path)
			got := parse(t, tc.args...).Executor.missingEngine()
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("missingEngine() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestPortInUse: a taken port is reported with the flag that picks another.
func TestPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = net.Listen("tcp", l.Addr().String())
	if err == nil {
		t.Fatal("a second listener on a taken port")
	}
	// As the generic server reports it: text only.
	err = portInUse(fmt.Errorf("applying options: failed to create listener: %v", err), port)
	if want := fmt.Sprintf("port %d is taken", port); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--secure-port") {
		t.Errorf("%v, want %q and the flag", err, want)
	}
	if other := errors.New("applying options: no such file"); portInUse(other, port) != other {
		t.Errorf("another error changed: %v", portInUse(other, port))
	}
}
