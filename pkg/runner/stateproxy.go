package runner

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

// Headers of the server's state answers that the proxy reports in the log
// (registry/terraformrun's StateImportedHeader and StateBrokenLockHeader).
const (
	stateImportedHeader   = "X-Terrarun-State-Imported"
	stateBrokenLockHeader = "X-Terrarun-State-Broken-Lock"
)

// maxStateBody bounds what the proxy reads of the engine's state and lock
// bodies; the server applies its own, lower, limits.
const maxStateBody = 1 << 30

// stateProxy is the engine's http backend for the state terrarun serves
// (stage.ServedBackend): a server on the loopback interface that forwards
// each request to the run's state and statelock subresources with the
// stage's credentials, which the engine never sees. It asks the engine for
// a password of its own, so that no other process that can reach the
// loopback interface (pods sharing a network namespace) uses it.
type stateProxy struct {
	client   Client
	password string
	srv      *http.Server
	base     string
	logf     func(format string, args ...any)
}

// startStateProxy starts the proxy; ctx bounds its requests to the server.
func startStateProxy(ctx context.Context, client Client, logf func(string, ...any)) (*stateProxy, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("starting the state proxy: %w", err)
	}
	p := &stateProxy{client: client, password: hex.EncodeToString(b[:]), base: "http://" + ln.Addr().String(), logf: logf}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// close stops the proxy.
func (p *stateProxy) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
}

// env is the engine's environment for its http backend: the addresses and
// credentials come from the environment, not the configuration, so that
// they are not recorded in the plan file (an apply stage has a proxy of
// its own).
func (p *stateProxy) env() map[string]string {
	return map[string]string{
		"TF_HTTP_ADDRESS":        p.base + "/state",
		"TF_HTTP_LOCK_ADDRESS":   p.base + "/lock",
		"TF_HTTP_UNLOCK_ADDRESS": p.base + "/lock",
		"TF_HTTP_USERNAME":       "terrarun",
		"TF_HTTP_PASSWORD":       p.password,
	}
}

func (p *stateProxy) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	user, pass, ok := req.BasicAuth()
	if !ok || user != "terrarun" || subtle.ConstantTimeCompare([]byte(pass), []byte(p.password)) != 1 {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxStateBody))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var (
		method, sub string
		q           = url.Values{}
	)
	switch {
	case req.URL.Path == "/state" && req.Method == http.MethodGet:
		method, sub = http.MethodGet, "state"
	case req.URL.Path == "/state" && req.Method == http.MethodPost:
		method, sub = http.MethodPost, "state"
		q.Set("lockID", req.URL.Query().Get("ID"))
	case req.URL.Path == "/lock" && req.Method == "LOCK":
		method, sub = http.MethodPost, "statelock"
	case req.URL.Path == "/lock" && req.Method == "UNLOCK":
		var info struct{ ID string }
		if err := json.Unmarshal(body, &info); err != nil {
			http.Error(w, "the body is not lock information", http.StatusBadRequest)
			return
		}
		method, sub, body = http.MethodDelete, "statelock", nil
		q.Set("lockID", info.ID)
	default:
		// The state terrarun serves has one workspace per run; the engine's
		// workspaces are not used, so there is nothing to delete.
		http.Error(w, "not supported by the state terrarun serves", http.StatusMethodNotAllowed)
		return
	}
	resp, err := p.client.State(req.Context(), method, sub, q, body)
	var se *StatusError
	switch {
	case errors.As(err, &se) && se.Code == http.StatusLocked:
		// The holder's lock information, for the engine to print.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusLocked)
		_, _ = io.WriteString(w, se.Message)
		return
	case err != nil:
		p.logf("terrarun: the state terrarun serves refused the engine's request: %v", err)
		code := http.StatusInternalServerError
		if se != nil && se.Code == http.StatusConflict {
			code = http.StatusConflict
		}
		http.Error(w, err.Error(), code)
		return
	}
	defer resp.Body.Close()
	if src := resp.Header.Get(stateImportedHeader); src != "" {
		p.logf("terrarun: imported the state kept by the kubernetes backend in %s; terrarun keeps the state from now on: delete that Secret once you have checked it", src)
	}
	if held := resp.Header.Get(stateBrokenLockHeader); held != "" {
		p.logf("terrarun: took over the state lock of %s, which has ended", held)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
