package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/stage"
)

// ErrForbidden means the server refused a write because this executor's
// identity is not the run's current stage attempt: the executor must stop.
var ErrForbidden = errors.New("forbidden: this executor is not the run's current stage")

// Client is the executor's side of the write-back protocol described in
// package stage.
type Client interface {
	// OpenLog starts a streamed POST of the stage's log. Every Write is sent
	// as it happens; Close ends the body, and with it the log, and returns
	// the server's answer.
	OpenLog(ctx context.Context, stage v1alpha1.StageName, attempt int32) (io.WriteCloser, error)
	// PutPlan uploads parts of the plan in one request, the result, if it
	// is among them, last: the server stores them together.
	PutPlan(ctx context.Context, attempt int32, parts []PlanPart) error
	// GetPlan downloads the approved plan as "file" or "source".
	GetPlan(ctx context.Context, format string) (io.ReadCloser, error)
	// AwaitApply waits until the server grants this plan stage the run's
	// apply stage (stage.Spec.ApplyAfterPlan), and downloads the approved
	// plan file then; it returns a nil body, and downloads nothing, when
	// the server says that file is the one with digest have.
	AwaitApply(ctx context.Context, have string) (io.ReadCloser, error)
	// PutOutputs uploads the JSON of `terraform output -json`.
	PutOutputs(ctx context.Context, attempt int32, r io.Reader) error
	// State sends one request to the state terrarun serves
	// (stage.ServedBackend): sub is "state" or "statelock". It returns a
	// 2xx response, whose body must be closed, or a *StatusError.
	State(ctx context.Context, method, sub string, q url.Values, body []byte) (*http.Response, error)
}

// StatusError is a non-2xx answer of the server.
type StatusError struct {
	// Op says what was attempted, e.g. "upload plan part file".
	Op      string
	Code    int
	Reason  metav1.StatusReason
	Message string
}

func (e *StatusError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	return fmt.Sprintf("%s: server answered %d: %s", e.Op, e.Code, msg)
}

// Is makes a 403 match ErrForbidden.
func (e *StatusError) Is(target error) bool {
	return target == ErrForbidden && e.Code == http.StatusForbidden
}

// HTTPClient implements Client against terrarun-apiserver.
type HTTPClient struct {
	base *url.URL
	// token is the token read from Spec.TokenFD; without it, the token is
	// read from tokenFile for every request.
	token     string
	tokenFile string
	// stageKey is sent in stage.StageKeyHeader, when the stage has one.
	stageKey string
	hc       *http.Client
	// Retries is how many times an upload or download is retried after a
	// connection error or a 429/502/503/504 answer.
	Retries int
	// Backoff is the wait before the first retry; it doubles.
	Backoff time.Duration
	// Timeout bounds each try of an upload or download, body included (not
	// the log stream).
	Timeout time.Duration
	// retrying, when set, is told of each retry: what failed and when it is
	// tried again.
	retrying func(err error, wait time.Duration)
}

// retryReporter is a Client that tells of its retries; the runner says them
// in the stage's log, so that whoever follows it sees what the stage waits
// for (the artifact store down, say).
type retryReporter interface {
	reportRetries(func(err error, wait time.Duration))
}

func (c *HTTPClient) reportRetries(fn func(err error, wait time.Duration)) { c.retrying = fn }

// NewHTTPClient returns a Client for spec: the server and run it names, its
// CA and its token file (read again for every request, so rotated tokens
// are picked up).
func NewHTTPClient(spec stage.Spec) (Client, error) {
	return newHTTPClient(spec)
}

func newHTTPClient(spec stage.Spec) (*HTTPClient, error) {
	u, err := url.Parse(spec.Server)
	if err != nil {
		return nil, errors.New("invalid server URL")
	}
	if u.Scheme != "https" && u.Scheme != "http" || u.Host == "" {
		return nil, errors.New("server URL must be https://host[:port]")
	}
	if u.User != nil {
		return nil, errors.New("server URL must not hold credentials")
	}
	if spec.Namespace == "" || spec.Name == "" {
		return nil, errors.New("spec names no run")
	}
	var token string
	switch {
	case spec.TokenFD > 0:
		f := os.NewFile(uintptr(spec.TokenFD), "token")
		b, err := io.ReadAll(io.LimitReader(f, 64<<10))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("reading the token from descriptor %d: %w", spec.TokenFD, err)
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return nil, fmt.Errorf("descriptor %d holds no token", spec.TokenFD)
		}
	case spec.TokenFile == "":
		return nil, errors.New("spec names no token file or descriptor")
	default:
		if _, err := readToken(spec.TokenFile); err != nil {
			return nil, err
		}
	}
	var stageKey string
	if spec.StageKeyFile != "" {
		b, err := os.ReadFile(spec.StageKeyFile)
		if err != nil {
			return nil, fmt.Errorf("reading the stage key: %w", err)
		}
		stageKey = strings.TrimSpace(string(b))
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if spec.CAFile != "" {
		pem, err := os.ReadFile(spec.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the server CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the server CA file %s holds no PEM certificate", spec.CAFile)
		}
		tlsConfig.RootCAs = pool
	}
	transport := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsConfig,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 0, // the log POST answers only when its body ends
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   4,
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/apis/terrarun.dev/v1alpha1/namespaces/" +
		url.PathEscape(spec.Namespace) + "/terraformruns/" + url.PathEscape(spec.Name)
	u.RawQuery, u.Fragment = "", ""
	return &HTTPClient{
		base:      u,
		token:     token,
		tokenFile: spec.TokenFile,
		stageKey:  stageKey,
		hc:        &http.Client{Transport: transport},
		// About a minute of retries (0.5s doubling): enough to ride out a
		// restart of terrarun-apiserver while a stage runs.
		Retries: 7,
		Backoff: 500 * time.Millisecond,
		Timeout: 10 * time.Minute,
	}, nil
}

func readToken(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("reading the token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", errors.New("the token file is empty")
	}
	return t, nil
}

func (c *HTTPClient) url(sub string, q url.Values) string {
	u := *c.base
	u.Path += "/" + sub
	u.RawQuery = q.Encode()
	return u.String()
}

func (c *HTTPClient) newRequest(ctx context.Context, method, sub string, q url.Values, body io.Reader, contentType string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.url(sub, q), body)
	if err != nil {
		return nil, err
	}
	token := c.token
	if token == "" {
		if token, err = readToken(c.tokenFile); err != nil {
			return nil, err
		}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if c.stageKey != "" {
		req.Header.Set(stage.StageKeyHeader, c.stageKey)
	}
	req.Header.Set("Accept", "application/json, */*")
	req.Header.Set("User-Agent", "terrarun-executor")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req, nil
}

// statusError builds the error for a non-2xx response, decoding a
// metav1.Status body when there is one.
func statusError(op string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &StatusError{Op: op, Code: resp.StatusCode}
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && (st.Kind == "Status" || st.Message != "") {
		e.Message, e.Reason = st.Message, st.Reason
		if st.Code != 0 {
			e.Code = int(st.Code)
		}
	} else if s := strings.TrimSpace(string(body)); s != "" && len(s) < 1024 {
		e.Message = s
	}
	if e.Code == http.StatusForbidden && e.Reason == "" {
		e.Reason = metav1.StatusReasonForbidden
	}
	return e
}

// netError hides the request URL that net/http puts in its errors: the
// message says what was attempted and why it failed.
func netError(op string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("%s: %w", op, err)
}

func retryable(code int) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// do sends a request with a replayable body and header's fields besides the
// usual ones, retrying transient failures, and returns a 2xx response, or a
// 304 to a request with If-None-Match. The response's body must be closed.
func (c *HTTPClient) do(ctx context.Context, op, method, sub string, q url.Values, body []byte, contentType string, header http.Header) (*http.Response, error) {
	backoff := c.Backoff
	for try := 0; ; try++ {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		tryCtx, cancel := ctx, context.CancelFunc(func() {})
		if c.Timeout > 0 {
			tryCtx, cancel = context.WithTimeout(ctx, c.Timeout)
		}
		req, err := c.newRequest(tryCtx, method, sub, q, rd, contentType)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := c.hc.Do(req)
		var fail error
		switch {
		case err != nil:
			cancel()
			if ctx.Err() != nil {
				return nil, netError(op, err)
			}
			fail = netError(op, err)
		case resp.StatusCode >= 200 && resp.StatusCode < 300,
			resp.StatusCode == http.StatusNotModified && req.Header.Get("If-None-Match") != "":
			resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
			return resp, nil
		default:
			fail = statusError(op, resp)
			resp.Body.Close()
			cancel()
			if !retryable(resp.StatusCode) {
				return nil, fail
			}
		}
		if try >= c.Retries {
			return nil, fail
		}
		if c.retrying != nil {
			c.retrying(fail, backoff)
		}
		select {
		case <-ctx.Done():
			return nil, fail
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

// cancelOnClose releases a request's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

func (c *HTTPClient) upload(ctx context.Context, op, sub string, q url.Values, r io.Reader, contentType string) error {
	body, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	resp, err := c.do(ctx, op, http.MethodPost, sub, q, body, contentType, nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.Body.Close()
}

// PlanPart is one part of a plan upload.
type PlanPart struct {
	// Name is the part's name: v1alpha1.PlanPartFile, ...
	Name string
	// Body is its content.
	Body []byte
}

// planPartTypes are the parts' media types.
var planPartTypes = map[string]string{
	v1alpha1.PlanPartFile:   "application/octet-stream",
	v1alpha1.PlanPartText:   "text/plain; charset=utf-8",
	v1alpha1.PlanPartJSON:   "application/json",
	v1alpha1.PlanPartResult: "application/json",
	v1alpha1.PlanPartSource: "application/gzip",
}

// PutPlan implements Client: one multipart/form-data body (part=all), each
// part a form part named by its name.
func (c *HTTPClient) PutPlan(ctx context.Context, attempt int32, parts []PlanPart) error {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", mime.FormatMediaType("form-data", map[string]string{"name": p.Name}))
		h.Set("Content-Type", planPartTypes[p.Name])
		// The server names what it stores by this digest (RFC 9530), and
		// refuses the part when its bytes do not hash to it.
		sum := sha256.Sum256(p.Body)
		h.Set("Content-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(sum[:])+":")
		w, err := mw.CreatePart(h)
		if err != nil {
			return err
		}
		if _, err := w.Write(p.Body); err != nil {
			return err
		}
	}
	if err := mw.Close(); err != nil {
		return err
	}
	q := url.Values{"attempt": {strconv.Itoa(int(attempt))}, "part": {v1alpha1.PlanPartAll}}
	return c.upload(ctx, "upload the plan", "plan", q, &body, mw.FormDataContentType())
}

// PutOutputs implements Client.
func (c *HTTPClient) PutOutputs(ctx context.Context, attempt int32, r io.Reader) error {
	q := url.Values{"attempt": {strconv.Itoa(int(attempt))}}
	return c.upload(ctx, "upload outputs", "outputs", q, r, "application/json")
}

// State implements Client.
func (c *HTTPClient) State(ctx context.Context, method, sub string, q url.Values, body []byte) (*http.Response, error) {
	contentType := ""
	if body != nil {
		contentType = "application/json"
	}
	return c.do(ctx, method+" "+sub, method, sub, q, body, contentType, nil)
}

// GetPlan implements Client.
func (c *HTTPClient) GetPlan(ctx context.Context, format string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, "download plan "+format, http.MethodGet, "plan", url.Values{"format": {format}}, nil, "", nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// AwaitApply implements Client.
func (c *HTTPClient) AwaitApply(ctx context.Context, have string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, "wait for the apply stage", http.MethodGet, "plan", url.Values{"format": {v1alpha1.PlanFormatFile}, "wait": {"true"}}, nil, "",
		http.Header{"If-None-Match": {strconv.Quote(have)}})
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusNotModified {
		resp.Body.Close()
		return nil, nil
	}
	return resp.Body, nil
}

// OpenLog implements Client. The body is an io.Pipe: each Write reaches the
// server as it happens. If the server answers before the body ends (a 403,
// say), the next Write fails with that answer.
func (c *HTTPClient) OpenLog(ctx context.Context, stageName v1alpha1.StageName, attempt int32) (io.WriteCloser, error) {
	pr, pw := io.Pipe()
	// Each stream is the rest of the stage's log: one that the executor
	// ends cleanly ends the log, in the transaction of its last lines.
	q := url.Values{"stage": {string(stageName)}, "attempt": {strconv.Itoa(int(attempt))}, "end": {"true"}}
	req, err := c.newRequest(ctx, http.MethodPost, "logs", q, pr, "text/plain; charset=utf-8")
	if err != nil {
		return nil, fmt.Errorf("open log stream: %w", err)
	}
	req.ContentLength = -1
	lw := &logWriter{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(lw.done)
		resp, err := c.hc.Do(req)
		switch {
		case err != nil:
			lw.err = netError("log stream", err)
		case resp.StatusCode < 200 || resp.StatusCode > 299:
			lw.err = statusError("log stream", resp)
			resp.Body.Close()
		default:
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
		}
		if lw.err != nil {
			pr.CloseWithError(lw.err)
		} else {
			pr.CloseWithError(errors.New("log stream: the server ended the stream"))
		}
	}()
	return lw, nil
}

type logWriter struct {
	pw   *io.PipeWriter
	done chan struct{}
	err  error // set before done is closed
}

func (l *logWriter) Write(p []byte) (int, error) {
	return l.pw.Write(p)
}

// Close ends the body and waits for the server's answer.
func (l *logWriter) Close() error {
	_ = l.pw.Close()
	<-l.done
	return l.err
}
