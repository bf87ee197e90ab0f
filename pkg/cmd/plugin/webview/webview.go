// Package webview is the server behind `kubectl terrarun ui`: it serves the
// embedded single-page app (built from web/ by hack/update-webview.sh into
// dist/) on a loopback address, and forwards the few API requests the app
// makes to the cluster with the user's own kubeconfig credentials, so that
// RBAC decides everything exactly as it does for kubectl.
//
// Nothing but the user's own browser may use it: every request must come
// from loopback, name the server's own Host (no DNS rebinding), carry no
// foreign Origin (no cross-site requests; a request that changes anything
// must carry the server's Origin), and hold the session cookie that the
// one-time login link set. Cookies are not kept apart by port, so the
// browser also sends that cookie to any other server on 127.0.0.1 the user
// visits: an API request must also carry the session key (keyHeader), which
// the login handed to the page alone, in the fragment of its redirect (never
// sent to a server), and which the page keeps in its origin's storage. The proxy forwards only reads of the terrarun.dev
// group and of Events, the run and workspace actions (approve, discard,
// cancel, override, rerun), and self-subject reviews; it drops the browser's
// headers but Accept and Content-Type.
package webview

import (
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

//go:embed all:dist
var dist embed.FS

// Paths of the server's own (the rest are the app's pages and assets).
const (
	// apiPrefix prefixes the API paths the proxy forwards.
	apiPrefix = "/k8s"
	// sessionPath answers the app's question of who and where it is.
	sessionPath = "/ui/session"
	// maxBody bounds what the app may send: an action's small JSON body.
	maxBody = 64 << 10
	// keyHeader carries the session key on the app's API requests.
	keyHeader = "X-Terrarun-Ui-Key"
	// keyFragment names the session key in the fragment of the login's
	// redirect, where the app reads it.
	keyFragment = "key"
)

// forwarded are the requests the proxy forwards: a method and a path (below
// apiPrefix) that must match all of it. Names are DNS labels or subdomains.
var forwarded = []struct {
	method string
	path   *regexp.Regexp
}{
	// Reads of the terrarun.dev group: discovery, lists and watches, objects,
	// and a run's plan (redacted) and logs; not its state or outputs, which
	// the app does not show (status.outputs hides sensitive values).
	{http.MethodGet, regexp.MustCompile(`^/apis/terrarun\.dev(/v1alpha1(/namespaces/[a-z0-9-]+)?(/[a-z]+(/[a-z0-9.-]+(/(plan|logs))?)?)?)?$`)},
	// The actions of the app, and nothing else that writes.
	{http.MethodPost, regexp.MustCompile(`^/apis/terrarun\.dev/v1alpha1/namespaces/[a-z0-9-]+/terraformruns/[a-z0-9.-]+/(approve|discard|cancel|override)$`)},
	{http.MethodPost, regexp.MustCompile(`^/apis/terrarun\.dev/v1alpha1/namespaces/[a-z0-9-]+/terraformworkspaces/[a-z0-9.-]+/rerun$`)},
	// Events, for a run's timeline.
	{http.MethodGet, regexp.MustCompile(`^/api/v1(/namespaces/[a-z0-9-]+)?/events$`)},
	// What the user may do (which buttons show), and who the user is.
	{http.MethodPost, regexp.MustCompile(`^/apis/authorization\.k8s\.io/v1/selfsubjectaccessreviews$`)},
	{http.MethodPost, regexp.MustCompile(`^/apis/authentication\.k8s\.io/v1/selfsubjectreviews$`)},
}

// Config is what a Server serves with.
type Config struct {
	// REST is the user's client configuration: the proxy's upstream and
	// credentials.
	REST *rest.Config
	// Port is the port the server listens on, on 127.0.0.1: what Host and
	// Origin must name.
	Port int
	// Namespace and Context are the kubeconfig's, shown by the app and its
	// default filter.
	Namespace, Context string
}

// Server is the web view's HTTP handler.
type Server struct {
	hosts   []string // the Host headers accepted: 127.0.0.1:port, localhost:port
	cookie  string   // the session cookie's name, per port
	session string   // the session cookie's value
	key     string   // the session key (keyHeader) of the app's API requests
	info    []byte   // sessionPath's answer
	proxy   http.Handler
	pages   http.Handler

	mu    sync.Mutex
	token string // the login link's token; "" once used
}

// New returns a Server for cfg, with a new login token and session.
func New(cfg Config) (*Server, error) {
	upstream, err := url.Parse(cfg.REST.Host)
	if err != nil || cfg.REST.Host == "" {
		return nil, fmt.Errorf("the kubeconfig's server %q is not a URL: %v", cfg.REST.Host, err)
	}
	if upstream.Scheme == "" {
		upstream, _ = url.Parse("https://" + cfg.REST.Host)
	}
	transport, err := rest.TransportFor(cfg.REST)
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig's credentials: %w", err)
	}
	assets, err := fs.Sub(dist, "dist")
	if err != nil {
		return nil, err
	}
	if _, err := fs.Stat(assets, "index.html"); err != nil {
		return nil, fmt.Errorf("this build has no web view: build it with make build (hack/update-webview.sh builds the app)")
	}
	token, err := random()
	if err != nil {
		return nil, err
	}
	session, err := random()
	if err != nil {
		return nil, err
	}
	key, err := random()
	if err != nil {
		return nil, err
	}
	info, err := json.Marshal(map[string]string{"namespace": cfg.Namespace, "context": cfg.Context, "server": upstream.Host})
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(cfg.Port)
	s := &Server{
		hosts:   []string{net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("localhost", port)},
		cookie:  "terrarun-ui-" + port,
		session: session,
		key:     key,
		token:   token,
		info:    info,
		pages:   pages(assets),
	}
	s.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.Out.URL.Path = strings.TrimSuffix(upstream.Path, "/") + strings.TrimPrefix(pr.In.URL.Path, apiPrefix)
			pr.Out.URL.RawPath = ""
			pr.Out.Header = http.Header{}
			for _, h := range []string{"Accept", "Content-Type"} {
				if v := pr.In.Header.Get(h); v != "" {
					pr.Out.Header.Set(h, v)
				}
			}
		},
		Transport:     transport,
		FlushInterval: -1, // watches and followed logs stream
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Del("Set-Cookie")
			resp.Header.Set("Cache-Control", "no-store")
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			status(w, http.StatusBadGateway, metav1.StatusReasonServiceUnavailable, "the cluster did not answer: "+err.Error())
		},
	}
	return s, nil
}

// LoginURL is the link that opens the web view once, at page (a path such
// as /namespaces/NS/terraformruns/NAME, or "/"): it sets the session cookie
// and is then spent.
func (s *Server) LoginURL(page string) string {
	return "http://" + s.hosts[0] + page + "?token=" + s.token
}

func random() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// ServeHTTP refuses what does not come from the user's own browser, then
// logs in, answers the session question, forwards an API request, or serves
// the app.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if msg := s.foreign(r); msg != "" {
		refuse(w, r, http.StatusForbidden, metav1.StatusReasonForbidden, msg)
		return
	}
	if token := r.URL.Query().Get("token"); token != "" && r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, apiPrefix+"/") {
		s.login(w, r, token)
		return
	}
	if c, err := r.Cookie(s.cookie); err != nil || subtle.ConstantTimeCompare([]byte(c.Value), []byte(s.session)) != 1 {
		refuse(w, r, http.StatusUnauthorized, metav1.StatusReasonUnauthorized,
			"no web view session: open the link that kubectl terrarun ui printed (each link works once; run kubectl terrarun ui again for a new one)")
		return
	}
	api := r.URL.Path == sessionPath || strings.HasPrefix(r.URL.Path, apiPrefix+"/")
	if api && subtle.ConstantTimeCompare([]byte(r.Header.Get(keyHeader)), []byte(s.key)) != 1 {
		refuse(w, r, http.StatusUnauthorized, metav1.StatusReasonUnauthorized,
			"no web view session key: only the page the login link opened may call the API (open the link that kubectl terrarun ui printed; run it again for a new one)")
		return
	}
	switch {
	case r.URL.Path == sessionPath:
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		_, _ = w.Write(s.info)
	case strings.HasPrefix(r.URL.Path, apiPrefix+"/"):
		s.forward(w, r)
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		s.pages.ServeHTTP(w, r)
	default:
		status(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, r.Method+" is not served here")
	}
}

// foreign says why r did not come from the user's browser on this page, or
// "".
func (s *Server) foreign(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return "the web view serves only this machine's loopback address"
	}
	if !contains(s.hosts, r.Host) {
		return fmt.Sprintf("Host %q is not this web view's (%s)", r.Host, s.hosts[0])
	}
	origin := r.Header.Get("Origin")
	if origin != "" && origin != "http://"+r.Host {
		return fmt.Sprintf("Origin %q is not this web view's: cross-site requests are refused", origin)
	}
	site := r.Header.Get("Sec-Fetch-Site")
	if site == "cross-site" {
		return "cross-site requests are refused"
	}
	if site == "same-site" && (r.URL.Path == sessionPath || strings.HasPrefix(r.URL.Path, apiPrefix+"/")) {
		// Another server on this host (another port) is same-site.
		return "API requests from another page of this host are refused"
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && origin == "" {
		return "a request that changes something must carry this web view's Origin"
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// login spends the login token for a session cookie, and sends the browser
// on to the page it asked for, without the token.
func (s *Server) login(w http.ResponseWriter, r *http.Request, token string) {
	s.mu.Lock()
	ok := s.token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.token)) == 1
	if ok {
		s.token = ""
	}
	s.mu.Unlock()
	if !ok {
		refuse(w, r, http.StatusUnauthorized, metav1.StatusReasonUnauthorized,
			"this login link is not valid: it was used already, or it is another kubectl terrarun ui's; run kubectl terrarun ui again for a new one")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: s.cookie, Value: s.session, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	q := r.URL.Query()
	q.Del("token")
	// A path of this server only: "//host/..." would send the browser to
	// another one.
	next := url.URL{Path: "/" + strings.TrimLeft(path.Clean("/"+r.URL.Path), "/"), RawQuery: q.Encode(),
		Fragment: keyFragment + "=" + s.key}
	http.Redirect(w, r, next.String(), http.StatusSeeOther)
}

// forward sends an API request the app may make to the cluster, and refuses
// every other.
func (s *Server) forward(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimPrefix(r.URL.Path, apiPrefix)
	if path.Clean(p) != p || !allowed(r.Method, p) {
		status(w, http.StatusForbidden, metav1.StatusReasonForbidden,
			fmt.Sprintf("the web view does not forward %s %s: only reads of terrarun.dev and Events, the run and workspace actions, and self-subject reviews", r.Method, p))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	s.proxy.ServeHTTP(w, r)
}

func allowed(method, p string) bool {
	for _, f := range forwarded {
		if f.method == method && f.path.MatchString(p) {
			return true
		}
	}
	return false
}

// refuse answers a refusal: as a page to a browser that opened a page (a
// link without a session, say), else as status does.
func refuse(w http.ResponseWriter, r *http.Request, code int, reason metav1.StatusReason, msg string) {
	if r.Method != http.MethodGet || strings.HasPrefix(r.URL.Path, apiPrefix+"/") || !strings.Contains(r.Header.Get("Accept"), "text/html") {
		status(w, code, reason, msg)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = fmt.Fprintf(w, "<!doctype html><html lang=\"en\"><meta charset=\"utf-8\"><title>terrarun web view</title><h1>terrarun web view</h1><p>%s</p></html>\n", html.EscapeString(msg))
}

// status writes a Kubernetes Status, as the API server's own refusals are,
// so that the app shows every refusal the same way.
func status(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(&metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code),
	})
}

// pages serves the app's assets, and its index.html for every other path
// (the app routes itself: /namespaces/NS/terraformruns/NAME and the like).
func pages(assets fs.FS) http.Handler {
	files := http.FileServer(http.FS(assets))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/assets/") {
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
			files.ServeHTTP(w, r)
			return
		}
		f, err := assets.Open("index.html")
		if err != nil {
			status(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
			return
		}
		defer f.Close()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = io.Copy(w, f)
	})
}
