package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
)

// WaitForPhase polls the run until it is in one of phases, for at most
// timeout, and returns it; on timeout the error holds its last status.
func WaitForPhase(ctx context.Context, client versioned.Interface, namespace, name string, timeout time.Duration, phases ...v1alpha1.RunPhase) (*v1alpha1.TerraformRun, error) {
	var run *v1alpha1.TerraformRun
	err := Poll(ctx, 100*time.Millisecond, timeout, fmt.Sprintf("run %s/%s to be %v", namespace, name, phases), func(ctx context.Context) bool {
		r, err := client.TerrarunV1alpha1().TerraformRuns(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		run = r
		return slices.Contains(phases, r.Status.Phase)
	})
	if err != nil {
		if run != nil {
			err = fmt.Errorf("%w; last status: %+v", err, run.Status)
		}
		return nil, err
	}
	return run, nil
}

// Stream is a `kubectl get --raw PATH` in flight, such as a log follow.
type Stream struct {
	done   chan struct{}
	out    strings.Builder
	stderr bytes.Buffer
	err    error
}

// StartStream runs `kubectl --kubeconfig KUBECONFIG get --raw PATH` until it
// ends by itself or ctx ends, collecting what it prints.
func StartStream(ctx context.Context, kubectl, kubeconfig, path string) (*Stream, error) {
	s := &Stream{done: make(chan struct{})}
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "get", "--raw", path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = &s.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			s.out.WriteString(sc.Text() + "\n")
		}
		s.err = cmd.Wait()
	}()
	return s, nil
}

// Wait returns what the stream printed once it ended by itself, within
// timeout; it is an error when it did not, or when kubectl failed (with what
// kubectl printed on stderr).
func (s *Stream) Wait(timeout time.Duration) (string, error) {
	select {
	case <-s.done:
	case <-time.After(timeout):
		return "", fmt.Errorf("kubectl get --raw did not end within %s", timeout)
	}
	if s.err != nil {
		return s.out.String(), fmt.Errorf("kubectl get --raw: %w: %s", s.err, strings.TrimSpace(s.stderr.String()))
	}
	return s.out.String(), nil
}

// StageToken waits, for at most timeout, for the token of a stage execution
// of run in the local executor's work directory under dataDir (stageDir is,
// for example, apply-1) and returns it.
func StageToken(ctx context.Context, dataDir string, run *v1alpha1.TerraformRun, stageDir string, timeout time.Duration) (string, error) {
	path := filepath.Join(dataDir, "work", run.Namespace, run.Name, string(run.UID), stageDir, "token")
	var token string
	err := Poll(ctx, 50*time.Millisecond, timeout, "the stage token at "+path, func(context.Context) bool {
		data, err := os.ReadFile(path)
		token = strings.TrimSpace(string(data))
		return err == nil && token != ""
	})
	return token, err
}

// RequestAs sends a request to cfg.Host+path as the bearer of token, as an
// executor does, or with cfg's own credentials when token is empty. It
// returns the status code and the body of the answer.
func RequestAs(ctx context.Context, cfg *rest.Config, token, method, path string, body io.Reader) (int, string, error) {
	return request(ctx, cfg, token, method, path, "", body)
}

// RequestAsContentType POSTs body to path as the user of cfg with the
// Content-Type contentType, and returns the status code and the body.
func RequestAsContentType(ctx context.Context, cfg *rest.Config, contentType, path string, body io.Reader) (int, string, error) {
	return request(ctx, cfg, "", http.MethodPost, path, contentType, body)
}

func request(ctx context.Context, cfg *rest.Config, token, method, path, contentType string, body io.Reader) (int, string, error) {
	c := rest.CopyConfig(cfg)
	if token != "" {
		c = rest.AnonymousClientConfig(c)
		c.BearerToken = token
	}
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Host+path, body)
	if err != nil {
		return 0, "", err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out), err
}

// GetWithAccept GETs path from the server of cfg with the Accept header
// accept, and returns the status code, the Content-Type and the body.
func GetWithAccept(ctx context.Context, cfg *rest.Config, path, accept string) (int, string, []byte, error) {
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return 0, "", nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+path, nil)
	if err != nil {
		return 0, "", nil, err
	}
	req.Header.Set("Accept", accept)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), body, err
}
