package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/test/internal/harness"
)

const (
	artifactsPrefix = "/terrarun/artifacts/"
	registryPrefix  = "/registry/"
)

// secretOutputTF has a sensitive output built from a variable that comes from
// a Secret.
const secretOutputTF = `variable "token" {
  type      = string
  sensitive = true
}

resource "terraform_data" "svc" {
  input = "service"
}

output "conn" {
  value     = "conn-${var.token}"
  sensitive = true
}
`

// encryptedRun runs secretOutputTF, with the Secret's value marker, on a
// server started with extraArgs, checks that /outputs serves the marker, stops
// the server, and returns every key and value in its etcd, and its data
// directory.
func encryptedRun(t *testing.T, marker string, extraArgs ...string) (map[string][]byte, string, *v1alpha1.TerraformRun) {
	t.Helper()
	e := newRunEnv(t, extraArgs...)
	e.secret(t, "default", "api", "token", marker)
	e.create(t, runManifest("secretive", inline(map[string]string{"main.tf": secretOutputTF}, `  approval:
    mode: Auto
  variables:
  - name: token
    valueFrom:
      secretKeyRef:
        name: api
        key: token
`)))
	run := e.waitPhase(t, "secretive", 5*time.Minute, v1alpha1.RunPhaseSucceeded, v1alpha1.RunPhaseFailed)
	if run.Status.Phase != v1alpha1.RunPhaseSucceeded {
		t.Fatalf("the run ended %s: %s", run.Status.Phase, run.Status.Message)
	}
	// Everything reads back through the server: it decrypts.
	if out := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("secretive", "outputs")); !strings.Contains(out, "conn-"+marker) {
		t.Errorf("/outputs lacks the sensitive value:\n%s", out)
	}
	if plan := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("secretive", "plan")); !strings.Contains(plan, "terraform_data.svc") {
		t.Errorf("the plan text does not read back:\n%s", plan)
	}
	if l := mustKubectl(t, e.Kubeconfig, "get", "--raw", raw("secretive", "logs?stage=apply")); !strings.Contains(l, "Apply complete!") {
		t.Errorf("the apply log does not read back:\n%s", l)
	}
	if _, err := e.client.TerrarunV1alpha1().TerraformRuns("default").Get(ctxT(t), "secretive", metav1.GetOptions{}); err != nil {
		t.Errorf("reading the run back: %v", err)
	}
	if err := e.Stop(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	return dumpEtcd(t, filepath.Join(e.DataDir, "etcd")), e.DataDir, run
}

// dumpEtcd opens the etcd data directory of a stopped server with embedded
// etcd on free loopback ports and returns every key and value at the latest
// revision.
func dumpEtcd(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	port := func() url.URL {
		p, err := harness.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		return url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(p))}
	}
	clientURL, peerURL := port(), port()
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "terrarun" // as the server names its member
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{clientURL}, []url.URL{clientURL}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peerURL}, []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.StrictReconfigCheck = false
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	etcd, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("opening the server's etcd in %s: %v", dir, err)
	}
	defer etcd.Close()
	select {
	case <-etcd.Server.ReadyNotify():
	case err := <-etcd.Err():
		t.Fatalf("etcd in %s: %v", dir, err)
	case <-time.After(60 * time.Second):
		t.Fatalf("etcd in %s did not become ready", dir)
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{clientURL.String()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := client.Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatalf("listing the keys: %v", err)
	}
	kvs := map[string][]byte{}
	for _, kv := range resp.Kvs {
		kvs[string(kv.Key)] = kv.Value
	}
	return kvs
}

// filesContaining returns the files under dir that contain s: etcd's WAL,
// snapshots and bbolt database, which hold every revision.
func filesContaining(t *testing.T, dir string, s []byte) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, s) {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func keysWith(kvs map[string][]byte, match func(key string, value []byte) bool) []string {
	var out []string
	for k, v := range kvs {
		if match(k, v) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func randomMarker(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b)
}

// TestEncryptionAtRest runs a run with a secret variable and a sensitive
// output on a server with --encryption-provider-config: every value of the
// run in etcd, object and artifacts, is encrypted. Without the config, the same
// scan finds the secret in the outputs artifact.
func TestEncryptionAtRest(t *testing.T) {
	t.Run("Encrypted", func(t *testing.T) {
		t.Parallel()
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			t.Fatal(err)
		}
		config := filepath.Join(t.TempDir(), "encryption.yaml")
		writeFile(t, config, fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources:
  - terraformruns.terrarun.dev
  providers:
  - aesgcm:
      keys:
      - name: key1
        secret: %s
  - identity: {}
`, base64.StdEncoding.EncodeToString(key)))
		marker := randomMarker(t, "enc-marker-")
		kvs, dataDir, run := encryptedRun(t, marker, "--encryption-provider-config", config)

		const sealed = "k8s:enc:aesgcm:v1:key1:"
		runBase := artifactsPrefix + "default/secretive/" + string(run.UID) + "/"
		for _, kind := range []string{"plan-file", "plan-text", "plan-json", "outputs", "logs/plan/", "logs/apply/"} {
			if len(keysWith(kvs, func(k string, _ []byte) bool { return strings.HasPrefix(k, runBase+kind) })) == 0 {
				t.Errorf("no %s artifact of the run under %s in etcd; the scan would prove nothing", kind, runBase)
			}
		}
		objects := keysWith(kvs, func(k string, _ []byte) bool {
			return strings.HasPrefix(k, registryPrefix) && strings.Contains(k, "terraformruns")
		})
		if len(objects) == 0 {
			t.Errorf("no terraformruns under %s in etcd", registryPrefix)
		}
		for _, k := range objects {
			if !bytes.HasPrefix(kvs[k], []byte(sealed)) {
				t.Errorf("the run object %s is not sealed with %q: %.80q", k, sealed, kvs[k])
			}
		}
		t.Logf("%d keys in etcd; terraformruns objects %q; %d artifact keys of the run", len(kvs), objects,
			len(keysWith(kvs, func(k string, _ []byte) bool { return strings.HasPrefix(k, runBase) })))

		if leak := keysWith(kvs, func(_ string, v []byte) bool { return bytes.Contains(v, []byte(marker)) }); len(leak) > 0 {
			t.Errorf("the secret is stored in plain under %q", leak)
		}
		if leak := keysWith(kvs, func(k string, v []byte) bool {
			return (strings.HasPrefix(k, artifactsPrefix) || strings.HasPrefix(k, registryPrefix)) && bytes.Contains(v, []byte("terraform_data"))
		}); len(leak) > 0 {
			t.Errorf("plan, source or log text is stored in plain under %q", leak)
		}
		// Every value of a run is sealed, but for the lease ID (of runs
		// written by older servers), the empty markers that list the
		// attempts with a log and their followers, and the logs' sizes
		// (pkg/artifacts).
		plain := keysWith(kvs, func(k string, v []byte) bool {
			switch {
			case strings.HasPrefix(k, artifactsPrefix):
				rest := strings.TrimPrefix(k, artifactsPrefix)
				if strings.HasSuffix(rest, "/lease") || (strings.Contains(rest, "/log-index/") || strings.Contains(rest, "/log-followers/")) && len(v) == 0 {
					return false
				}
				if _, err := strconv.ParseUint(string(v), 10, 63); err == nil && strings.HasPrefix(rest, "_log-usage/") {
					return false
				}
			case strings.HasPrefix(k, registryPrefix) && strings.Contains(k, "/terraformruns/"):
			default:
				return false
			}
			return !bytes.HasPrefix(v, []byte(sealed))
		})
		if len(plain) > 0 {
			t.Errorf("values not sealed with %q: %q", sealed, plain)
		}
		// Not in any revision either: the WAL and the database hold them all.
		if files := filesContaining(t, filepath.Join(dataDir, "etcd"), []byte(marker)); len(files) > 0 {
			t.Errorf("the secret is in plain in etcd's files %q", files)
		}
	})

	t.Run("Plain", func(t *testing.T) {
		t.Parallel()
		marker := randomMarker(t, "plain-marker-")
		kvs, dataDir, run := encryptedRun(t, marker)
		outputs := artifactsPrefix + "default/secretive/" + string(run.UID) + "/outputs/"
		found := keysWith(kvs, func(k string, v []byte) bool {
			return strings.HasPrefix(k, outputs) && bytes.Contains(v, []byte("conn-"+marker))
		})
		if len(found) == 0 {
			t.Errorf("without encryption the scan does not find the secret in the outputs artifact; keys: %q",
				keysWith(kvs, func(k string, _ []byte) bool { return strings.HasPrefix(k, artifactsPrefix) }))
		}
		if len(keysWith(kvs, func(k string, v []byte) bool {
			return strings.HasPrefix(k, registryPrefix) && bytes.Contains(v, []byte("terraform_data"))
		})) == 0 {
			t.Errorf("without encryption the scan does not find the source in the run object")
		}
		if files := filesContaining(t, filepath.Join(dataDir, "etcd"), []byte(marker)); len(files) == 0 {
			t.Errorf("without encryption the file scan does not find the secret")
		}
		t.Logf("without encryption the secret is in %q", keysWith(kvs, func(_ string, v []byte) bool { return bytes.Contains(v, []byte(marker)) }))
	})
}
