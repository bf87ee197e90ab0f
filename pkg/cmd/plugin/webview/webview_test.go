package webview

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// upstream is a stand-in cluster that records what reached it.
type upstream struct {
	*httptest.Server
	got []*http.Request
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.got = append(u.got, r.Clone(r.Context()))
		http.SetCookie(w, &http.Cookie{Name: "upstream", Value: "x"})
		_, _ = io.WriteString(w, `{"kind":"TerraformRunList"}`)
	}))
	t.Cleanup(u.Close)
	return u
}

const port = 8123

func newServer(t *testing.T, up *upstream) *Server {
	t.Helper()
	s, err := New(Config{REST: &rest.Config{Host: up.URL, BearerToken: "user-token"}, Port: port, Namespace: "team", Context: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// request is a request as the user's browser on the page sends it, which
// each case then spoils in one way.
func request(method, target string) *http.Request {
	r := httptest.NewRequest(method, "http://127.0.0.1:8123"+target, strings.NewReader(`{}`))
	r.RemoteAddr = "127.0.0.1:50000"
	if method != http.MethodGet {
		r.Header.Set("Origin", "http://127.0.0.1:8123")
	}
	return r
}

func serve(s *Server, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

// session is what the login gives the user's page: the session cookie,
// and the session key its redirect hands the page in the fragment.
type session struct {
	cookie *http.Cookie
	key    string
}

// authorize makes r a request of the logged-in page.
func (ss session) authorize(r *http.Request) *http.Request {
	r.AddCookie(ss.cookie)
	r.Header.Set(keyHeader, ss.key)
	return r
}

// login spends the login link and returns the session.
func login(t *testing.T, s *Server) session {
	t.Helper()
	u, err := url.Parse(s.LoginURL("/"))
	if err != nil {
		t.Fatal(err)
	}
	w := serve(s, request(http.MethodGet, "/namespaces/team/terraformruns/r1?"+u.RawQuery))
	page, key, _ := strings.Cut(w.Header().Get("Location"), "#"+keyFragment+"=")
	if w.Code != http.StatusSeeOther || page != "/namespaces/team/terraformruns/r1" || len(key) < 40 {
		t.Fatalf("login: %d, Location %q", w.Code, w.Header().Get("Location"))
	}
	cookies := w.Result().Cookies()
	if len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || cookies[0].Path != "/" {
		t.Fatalf("the session cookie: %+v", cookies)
	}
	if cookies[0].Value == key || strings.Contains(u.RawQuery, key) {
		t.Fatalf("the session key is the cookie's value or in the login link")
	}
	return session{cookie: cookies[0], key: key}
}

func TestLoginOnce(t *testing.T) {
	s := newServer(t, newUpstream(t))
	if !strings.HasPrefix(s.LoginURL("/"), "http://127.0.0.1:8123/?token=") {
		t.Fatalf("login URL %q", s.LoginURL("/"))
	}
	u, _ := url.Parse(s.LoginURL("/"))
	if w := serve(s, request(http.MethodGet, "/?token=wrong")); w.Code != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d", w.Code)
	}
	ss := login(t, s)
	if w := serve(s, request(http.MethodGet, "/?"+u.RawQuery)); w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "used already") {
		t.Errorf("the link a second time: %d %s", w.Code, w.Body)
	}
	if w := serve(s, ss.authorize(request(http.MethodGet, "/ui/session"))); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"namespace":"team"`) || !strings.Contains(w.Body.String(), `"context":"prod"`) {
		t.Errorf("the session: %d %s", w.Code, w.Body)
	}
	forged := ss
	forged.cookie = &http.Cookie{Name: ss.cookie.Name, Value: "forged"}
	if w := serve(s, forged.authorize(request(http.MethodGet, "/ui/session"))); w.Code != http.StatusUnauthorized {
		t.Errorf("a forged session: %d", w.Code)
	}
	// The browser sends the cookie to every server on 127.0.0.1, whatever
	// its port: such a server, holding the cookie, has no session key.
	for _, key := range []string{"", "guess"} {
		r := request(http.MethodGet, "/k8s/apis/terrarun.dev/v1alpha1/terraformruns")
		r.AddCookie(ss.cookie)
		if key != "" {
			r.Header.Set(keyHeader, key)
		}
		if w := serve(s, r); w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "no web view session key") {
			t.Errorf("the cookie with key %q: %d %s", key, w.Code, w.Body)
		}
	}
}

// TestLoginStaysHere: the login's redirect never leaves the web view.
func TestLoginStaysHere(t *testing.T) {
	for _, target := range []string{"//evil.example/", "///evil.example/x", "/a/../../evil"} {
		s := newServer(t, newUpstream(t))
		u, _ := url.Parse(s.LoginURL("/"))
		w := serve(s, request(http.MethodGet, target+"?"+u.RawQuery))
		loc := w.Header().Get("Location")
		if w.Code != http.StatusSeeOther || !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") {
			t.Errorf("login at %s: %d, Location %q", target, w.Code, loc)
		}
	}
}

func TestRefusesWhatIsNotTheUsersPage(t *testing.T) {
	up := newUpstream(t)
	s := newServer(t, up)
	ss := login(t, s)
	for _, c := range []struct {
		what  string
		spoil func(*http.Request)
		says  string
	}{
		{"from another host", func(r *http.Request) { r.RemoteAddr = "10.0.0.7:50000" }, "loopback"},
		{"a foreign Host", func(r *http.Request) { r.Host = "rebound.example:8123" }, "Host"},
		{"another port's Host", func(r *http.Request) { r.Host = "127.0.0.1:9999" }, "Host"},
		{"a foreign Origin", func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") }, "Origin"},
		{"a cross-site fetch", func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") }, "cross-site"},
		{"another port's page", func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "same-site") }, "another page of this host"},
		{"a write without Origin", func(r *http.Request) { r.Header.Del("Origin") }, "must carry"},
	} {
		r := ss.authorize(request(http.MethodPost, "/k8s/apis/terrarun.dev/v1alpha1/namespaces/team/terraformruns/r1/approve"))
		c.spoil(r)
		if w := serve(s, r); w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), c.says) {
			t.Errorf("%s: %d %s", c.what, w.Code, w.Body)
		}
	}
	if len(up.got) != 0 {
		t.Errorf("%d refused requests reached the cluster", len(up.got))
	}
	// localhost is the same web view.
	r := ss.authorize(request(http.MethodGet, "/k8s/apis/terrarun.dev/v1alpha1/terraformruns"))
	r.Host = "localhost:8123"
	if w := serve(s, r); w.Code != http.StatusOK {
		t.Errorf("through localhost: %d %s", w.Code, w.Body)
	}
}

func TestForwardsOnlyWhatTheAppNeeds(t *testing.T) {
	up := newUpstream(t)
	s := newServer(t, up)
	ss := login(t, s)
	for _, c := range []struct {
		method, path string
		ok           bool
	}{
		{"GET", "/apis/terrarun.dev/v1alpha1/terraformruns?watch=true", true},
		{"GET", "/apis/terrarun.dev/v1alpha1/namespaces/team/terraformruns/r1", true},
		{"GET", "/apis/terrarun.dev/v1alpha1/namespaces/team/terraformruns/r1/plan?format=json", true},
		{"GET", "/apis/terrarun.dev/v1alpha1/namespaces/team/terraformruns/r1/logs?follow=true", true},
		{"GET", "/apis/terrarun.dev/v1alpha1/namespaces/team/terraformworkspaces", true},
		{"POST", "/apis/terrarun.dev/v1alpha1/namespaces/team/terraformruns/r1/approve", true},
		{"POST", "/apis/terrarun.dev/v1alpha1/namespaces/team/terraformruns/r1/override", true},
		{"POST", "/apis/terrarun.dev/v1alpha1/namespaces/team/terraformworkspaces/w/rerun", true},
		{"GET", "/api/v1/namespaces/team/events", true},
		{"POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", true},
		{"POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", true},
		// Not the app's: other kinds, other writes, and paths that climb.
		{"GET", "/api/v1/namespaces/team/secrets", false},
		{"GET", "/api/v1/namespaces/team/pods/p/log", false},
		{"POST", "/apis/terrarun.dev/v1alpha1/namespaces/team/terraformruns", false},
		{"DELETE", "/apis/terrarun.dev/v1alpha1/namespaces/team/terraformruns/r1", false},
		{"PUT", "/apis/terrarun.dev/v1alpha1/namespaces/team/terraformruns/r1/status", false},
		{"POST", "/apis/terrarun.dev/v1alpha1/namespaces/team/terraformruns/r1/logs", false},
		{"POST", "/apis/terrarun.dev/v1alpha1/namespaces/team/terraformruns/r1/plan", false},
		{"GET", "/apis/terrarun.dev/v1alpha1/namespaces/team/terraformruns/r1/state", false},
		{"GET", "/apis/terrarun.dev/v1alpha1/namespaces/team/terraformruns/r1/outputs", false},
		{"GET", "/apis/terrarun.dev/../../api/v1/secrets", false},
		{"GET", "/apis/terrarun.dev.evil/v1alpha1/terraformruns", false},
		{"GET", "/apis/terrarun.dev//v1alpha1/terraformruns", false},
		{"GET", "/apis/terrarun.dev/./v1alpha1/terraformruns", false},
		{"GET", "/apis/terrarun.dev/v1alpha1/terraformruns/", false},
		{"GET", "/apis/terrarun.dev%2F..%2F..%2Fapi/v1/namespaces/team/secrets", false},
		{"GET", "/api/v1/namespaces/team/events/../secrets", false},
		{"POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", false},
	} {
		up.got = nil
		r := ss.authorize(request(c.method, "/k8s"+c.path))
		r.Header.Set("Authorization", "Bearer from-the-page")
		r.Header.Set("Impersonate-User", "admin")
		w := serve(s, r)
		if !c.ok {
			if w.Code != http.StatusForbidden || len(up.got) != 0 {
				t.Errorf("%s %s: %d, %d forwarded; want refused", c.method, c.path, w.Code, len(up.got))
			}
			continue
		}
		if w.Code != http.StatusOK || len(up.got) != 1 {
			t.Errorf("%s %s: %d %s; want forwarded", c.method, c.path, w.Code, w.Body)
			continue
		}
		got := up.got[0]
		if p, _, _ := strings.Cut(c.path, "?"); got.URL.Path != p {
			t.Errorf("%s %s: forwarded as %s", c.method, c.path, got.URL.Path)
		}
		if a := got.Header.Get("Authorization"); a != "Bearer user-token" {
			t.Errorf("%s %s: forwarded with Authorization %q, want the kubeconfig's", c.method, c.path, a)
		}
		for _, h := range []string{"Cookie", "Impersonate-User", "Origin"} {
			if v := got.Header.Get(h); v != "" {
				t.Errorf("%s %s: forwarded the page's %s: %q", c.method, c.path, h, v)
			}
		}
		if w.Header().Get("Set-Cookie") != "" {
			t.Errorf("%s %s: the cluster's Set-Cookie reached the page", c.method, c.path)
		}
	}
}

func TestServesTheApp(t *testing.T) {
	s := newServer(t, newUpstream(t))
	ss := login(t, s)
	r := request(http.MethodGet, "/namespaces/team/terraformruns/r1")
	r.AddCookie(ss.cookie)
	w := serve(s, r)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `<div id="app">`) {
		t.Fatalf("a page of the app: %d %.200s", w.Code, w.Body)
	}
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	asset := strings.Split(strings.Split(w.Body.String(), `src="`)[1], `"`)[0]
	r = request(http.MethodGet, asset)
	r.AddCookie(ss.cookie)
	if w := serve(s, r); w.Code != http.StatusOK || !strings.Contains(w.Header().Get("Content-Type"), "javascript") {
		t.Errorf("the app's script %s: %d %s", asset, w.Code, w.Header().Get("Content-Type"))
	}
	if w := serve(s, request(http.MethodGet, "/")); w.Code != http.StatusUnauthorized {
		t.Errorf("the app without a session: %d", w.Code)
	}
	// A browser that opens a page without a session is told, as a page,
	// what to do.
	r = request(http.MethodGet, "/namespaces/team/terraformruns/r1")
	r.Header.Set("Accept", "text/html,application/xhtml+xml")
	if w := serve(s, r); w.Code != http.StatusUnauthorized || !strings.Contains(w.Header().Get("Content-Type"), "text/html") || !strings.Contains(w.Body.String(), "open the link that kubectl terrarun ui printed") {
		t.Errorf("a page without a session: %d %s %s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
}
