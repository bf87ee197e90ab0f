package fluxsource_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/terrarun/terrarun/pkg/fluxsource"
)

const (
	host   = "source-controller.flux-system.svc.cluster.local."
	digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// gitRepository is a GitRepository in namespace team of name infra, Ready
// with artifact (url, digest, revision), or with the Ready condition given.
func gitRepository(name string, ready string, artifact map[string]any) *unstructured.Unstructured {
	status := map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": ready, "reason": "GitOperationFailed", "message": "failed to checkout: auth required"}}}
	if artifact != nil {
		status["artifact"] = artifact
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"name": name, "namespace": "team"},
		"status":   status,
	}}
}

func artifact(url string) map[string]any {
	return map[string]any{"url": url, "digest": digest, "revision": "main@sha1:abc", "size": int64(1234), "lastUpdateTime": "2026-12-01T00:00:00Z"}
}

func reader(objs ...runtime.Object) *fluxsource.Reader {
	gvrs := map[schema.GroupVersionResource]string{
		fluxsource.GroupVersion.WithResource("gitrepositories"): "GitRepositoryList",
		fluxsource.GroupVersion.WithResource("ocirepositories"): "OCIRepositoryList",
		fluxsource.GroupVersion.WithResource("buckets"):         "BucketList",
	}
	return fluxsource.NewReader(dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), gvrs, objs...), host)
}

func TestGet(t *testing.T) {
	good := "http://" + host + "/gitrepository/team/infra/abc.tar.gz"
	r := reader(
		gitRepository("infra", "True", artifact(good)),
		gitRepository("failing", "False", artifact("http://"+host+"/gitrepository/team/failing/abc.tar.gz")),
		gitRepository("elsewhere", "True", artifact("http://attacker.example.com/gitrepository/team/elsewhere/abc.tar.gz")),
		gitRepository("borrowed", "True", artifact("http://"+host+"/gitrepository/other-team/secret/abc.tar.gz")),
		gitRepository("fetching", "True", nil),
		gitRepository("userinfo", "True", artifact("http://user:hunter2@"+host+"/gitrepository/team/userinfo/abc.tar.gz")),
		gitRepository("nodot", "True", artifact("http://"+strings.TrimSuffix(host, ".")+"/gitrepository/team/nodot/abc.tar.gz")),
		gitRepository("port", "True", artifact("http://"+strings.TrimSuffix(host, ".")+":9090/gitrepository/team/port/abc.tar.gz")),
	)
	art, err := r.Get(context.Background(), "team", "GitRepository", "infra")
	if err != nil || art.URL != good || art.Digest != digest || art.Revision != "main@sha1:abc" {
		t.Fatalf("Ready source: %+v, %v", art, err)
	}
	if _, err := r.Get(context.Background(), "team", "GitRepository", "nodot"); err != nil {
		t.Errorf("the artifact host without its trailing dot: %v", err)
	}
	for _, c := range []struct {
		name, kind string
		notReady   bool
		untrusted  bool
		want       string
	}{
		{"failing", "GitRepository", true, false, "GitRepository team/failing is not Ready (GitOperationFailed: failed to checkout: auth required)"},
		{"fetching", "GitRepository", true, false, "reports no artifact yet"},
		{"missing", "GitRepository", true, false, "GitRepository team/missing does not exist yet"},
		{"elsewhere", "GitRepository", false, true, `served from "attacker.example.com"`},
		{"borrowed", "GitRepository", false, true, `is not below "/gitrepository/team/borrowed/"`},
		{"userinfo", "GitRepository", false, true, "without credentials"},
		{"port", "GitRepository", false, true, `served from "source-controller.flux-system.svc.cluster.local:9090"`},
		{"infra", "HelmChart", false, false, "HelmChart is not a Flux source kind"},
	} {
		_, err := r.Get(context.Background(), "team", c.kind, c.name)
		var nr *fluxsource.NotReadyError
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s %s: the error shows the URL's password: %v", c.kind, c.name, err)
		}
		if err == nil || errors.As(err, &nr) != c.notReady || errors.Is(err, fluxsource.ErrUntrusted) != c.untrusted || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: %v; want not ready %v, untrusted %v, saying %q", c.kind, c.name, err, c.notReady, c.untrusted, c.want)
		}
	}
}

func TestCached(t *testing.T) {
	r := reader(gitRepository("infra", "True", artifact("http://"+host+"/gitrepository/team/infra/abc.tar.gz")))
	changed := make(chan string, 10)
	r.OnChange(func(namespace, kind, name string) { changed <- namespace + "/" + kind + "/" + name })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.Start(ctx)
	// The first call starts the watch of GitRepositories.
	_, _ = r.Cached("team", "GitRepository", "infra")
	if got := <-changed; got != "team/GitRepository/infra" {
		t.Fatalf("OnChange got %q", got)
	}
	var art fluxsource.Artifact
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var err error
		art, err = r.Cached("team", "GitRepository", "infra")
		return err == nil, nil
	})
	if err != nil || art.Revision != "main@sha1:abc" {
		t.Fatalf("Cached once the watch synced: %+v, %v", art, err)
	}
	var nr *fluxsource.NotReadyError
	if _, err := r.Cached("team", "GitRepository", "missing"); !errors.As(err, &nr) {
		t.Errorf("a missing source: %v, want a NotReadyError", err)
	}
}
