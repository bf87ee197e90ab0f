package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// webView is a `kubectl terrarun ui` of one user: the built plugin, run as
// the user would run it.
type webView struct {
	login  string // the one-time login link it printed
	origin string // http://127.0.0.1:PORT
}

// startWebView starts kubectl terrarun ui (with args) as the user of
// kubeconfig and reads the link it prints.
func startWebView(t *testing.T, kubeconfig string, args ...string) *webView {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(filepath.Dir(apiserverBinary), "kubectl-terrarun"), append([]string{"ui", "--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &testWriter{t: t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	link := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := regexp.MustCompile(`http://127\.0\.0\.1:\d+/\S*\?token=\S+`).FindString(sc.Text()); m != "" {
				link <- m
			}
		}
	}()
	select {
	case l := <-link:
		u, err := url.Parse(l)
		if err != nil {
			t.Fatal(err)
		}
		return &webView{login: l, origin: "http://" + u.Host}
	case <-time.After(30 * time.Second):
		t.Fatal("kubectl terrarun ui printed no link in 30s")
	}
	return nil
}

// browser is a headless Debian Chromium of its own (own profile, own
// cookies), driven over the DevTools protocol.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("TERRARUN_CHROMIUM")
	if path == "" {
		var err error
		if path, err = exec.LookPath("chromium"); err != nil {
			t.Fatal("the web view's tests need Chromium (hack/requirements.sh integration installs Debian's chromium), or TERRARUN_CHROMIUM naming one")
		}
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, // as root, in CI
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.WindowSize(1366, 900), // a laptop's screen
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// do runs browser actions with a deadline, and fails the test with what
// they were for.
func do(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	browse(t, ctx, what, chromedp.Steps(actions...))
}

// browse runs a browser action that returns a value, as do does.
func browse[T any](t *testing.T, ctx context.Context, what string, action chromedp.Action[T]) T {
	t.Helper()
	timeout, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	v, err := chromedp.Run(timeout, action)
	if err != nil {
		short, stop := context.WithTimeout(ctx, 10*time.Second)
		defer stop()
		text, _ := chromedp.Run(short, chromedp.Text(chromedp.CSS("body")))
		if png, err := chromedp.Run(short, chromedp.FullScreenshot(100)); err == nil {
			keep(t, "failed-"+t.Name(), png)
		}
		t.Fatalf("%s: %v\nthe page says:\n%s", what, err, text)
	}
	return v
}

// screenshot keeps the page as it looks, as a test artifact, in
// _output/webview (or TERRARUN_ARTIFACTS/webview).
// A failed step keeps the page it failed on, as failed-<test>.png.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	keep(t, name, browse(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100)))
}

// keep writes a screenshot into the artifacts' directory.
func keep(t *testing.T, name string, png []byte) {
	t.Helper()
	dir := filepath.Join("..", "..", "_output", "webview")
	if d := os.Getenv("TERRARUN_ARTIFACTS"); d != "" {
		dir = filepath.Join(d, "webview")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Error(err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, strings.ReplaceAll(name, "/", "_")+".png"), png, 0o644); err != nil {
		t.Error(err)
	}
}

// waitText waits until the element of selector holds want.
func waitText(selector, want string) chromedp.Action[chromedp.Void] {
	wait := until(fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.innerText.includes(%q); })()`, selector, want))
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := wait(ctx, t); err != nil {
			return fmt.Errorf("waiting for %q in %s: %w", want, selector, err)
		}
		return nil
	})
}

// until waits until the JavaScript expression js is true, looking every
// 100ms.
func until(js string) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[bool](js, chromedp.WithPollingInterval(100*time.Millisecond))
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := poll(ctx, t)
		return err
	})
}

// visible waits until the element of a CSS selector is visible.
func visible(selector string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(selector))
}

// click clicks the element of a CSS selector.
func click(selector string) chromedp.Action[chromedp.Void] {
	return chromedp.Click(chromedp.CSS(selector))
}

// TestWebView drives the web view in a real browser, through kubectl
// terrarun ui against the real server: the runs list updates live, a plan's
// diff shows its resources with a sensitive value masked, logs stream, an
// approver approves and the run applies; a viewer sees no approve button and
// an approval forged from the page is refused by the server; and the web
// view refuses requests without its token, from a foreign Origin or Host,
// and that it does not forward. Screenshots of each page are kept.
func TestWebView(t *testing.T) {
	e := newRunEnv(t)
	bob, _ := e.user(t, "bob")
	vic := e.mint(t, "vic", "terrarun:viewers")
	secret := "s3cr3t-webview-7731"
	review := runManifest("review", inline(map[string]string{"main.tf": `variable "password" {
  type      = string
  sensitive = true
  default   = "` + secret + `"
}
resource "terraform_data" "db" {
  input = {
    engine   = "postgres"
    password = var.password
  }
  provisioner "local-exec" {
    command = "echo migrating; sleep 6; echo migrated"
  }
}
output "engine" {
  value = terraform_data.db.output.engine
}
output "password" {
  value     = terraform_data.db.output.password
  sensitive = true
}`}, ""))

	ui := startWebView(t, bob)
	ctx := browser(t)

	// The login link logs the browser in once, and the page drops it.
	do(t, ctx, "opening the login link",
		chromedp.Navigate(ui.login),
		visible(`#runs-title`),
		waitText(`.who`, "bob"))
	here := browse(t, ctx, "reading the address", chromedp.Location())
	if strings.Contains(here, "token=") {
		t.Errorf("the token stayed in the address bar: %s", here)
	}

	// The runs list is live: a run created now shows, and its phase moves.
	e.create(t, review)
	do(t, ctx, "the new run in the list", waitText(`tr[data-run="default/review"]`, "review"))
	do(t, ctx, "the run's phase moving to AwaitingApproval in the list", waitText(`tr[data-run="default/review"] .phase`, "AwaitingApproval"))
	screenshot(t, ctx, "runs")

	// The run's page: the plan as a per-resource diff, the sensitive value
	// masked and nowhere on the page; the plan stage's log.
	do(t, ctx, "opening the run",
		click(`tr[data-run="default/review"] a[href$="/terraformruns/review"]`),
		visible(`details[data-address="terraform_data.db"]`),
		waitText(`section.group.create`, "Create (1)"),
		waitText(`details[data-address="terraform_data.db"]`, "input.engine"),
		waitText(`details[data-address="terraform_data.db"]`, `"postgres"`),
		waitText(`details[data-address="terraform_data.db"]`, "(sensitive value)"),
		waitText(`pre.log`, "Plan: 1 to add"),
		visible(`section.actions[data-checked] button`))
	page := browse(t, ctx, "reading the page", chromedp.OuterHTML(chromedp.CSS("html")))
	if strings.Contains(page, secret) {
		t.Errorf("the sensitive value is on the run's page")
	}
	screenshot(t, ctx, "run-plan")

	// Approve: the dialog names the digest; the server's answer shows; the
	// run applies, and its apply log streams into the page.
	run := e.waitPhase(t, "review", time.Minute, v1alpha1.RunPhaseAwaitingApproval)
	digest := run.Status.Plan.Digest
	do(t, ctx, "asking to approve",
		click(`section.actions button[data-action="approve"]`),
		visible(`dialog[open]`),
		waitText(`dialog[open]`, digest),
		chromedp.SendKeys(chromedp.CSS(`dialog[open] textarea`), "reviewed in the browser"))
	screenshot(t, ctx, "approve-dialog")
	do(t, ctx, "confirming the approval",
		click(`dialog[open] button[type="submit"]`),
		waitText(`.answer`, "recorded for run default/review"))
	// The apply's log streams: the page shows what local-exec printed
	// first while the run still applies and before it printed the rest (a
	// log read once at the end could not show that; the command line it
	// logs first holds both words, its output lines do not).
	do(t, ctx, "the apply log streaming while the run applies", until(`(() => {
		const log = document.querySelector('pre.log'), h1 = document.querySelector('h1');
		return !!log && !!h1 && h1.innerText.includes('Applying') && log.innerText.includes('(local-exec): migrating') && !log.innerText.includes('(local-exec): migrated');
	})()`))
	screenshot(t, ctx, "run-applying")
	do(t, ctx, "the run applied",
		waitText(`h1`, "Succeeded"),
		waitText(`pre.log`, "migrated"),
		waitText(`pre.log`, "Apply complete!"),
		waitText(`table.outputs`, `"postgres"`),
		waitText(`table.outputs`, "(sensitive, hidden)"),
		waitText(`.answer`, "recorded for run default/review"))
	run = e.waitPhase(t, "review", time.Minute, v1alpha1.RunPhaseSucceeded)
	if a := run.Status.Approval; a == nil || a.ApprovedBy != "bob" || a.PlanDigest != digest || a.Comment != "reviewed in the browser" {
		t.Errorf("the approval recorded: %+v", a)
	}
	page = browse(t, ctx, "reading the page", chromedp.OuterHTML(chromedp.CSS("html")))
	if strings.Contains(page, secret) {
		t.Errorf("the sensitive value is on the applied run's page")
	}
	screenshot(t, ctx, "run-applied")

	// Workspaces and their dependencies, drawn.
	e.create(t, workspaceManifest("network", `resource "terraform_data" "net" {}`, "  approval:\n    mode: Manual\n"))
	e.create(t, workspaceManifest("app", `resource "terraform_data" "app" {}`, "  approval:\n    mode: Manual\n  dependsOn:\n  - name: network\n"))
	do(t, ctx, "the workspaces page",
		click(`nav a[href="/workspaces"]`),
		visible(`figure.graph svg`),
		waitText(`figure.graph`, "network"),
		waitText(`figure.graph`, "app"))
	screenshot(t, ctx, "workspaces")
	do(t, ctx, "a workspace's page",
		click(`table a[href$="/terraformworkspaces/app"]`),
		waitText(`h1`, "Workspace app"),
		waitText(`dl.facts`, "Depends on"),
		waitText(`dl.facts`, "network"),
		waitText(`section[aria-labelledby="ws-conditions"]`, "Waiting for workspace network"),
		waitText(`section[aria-labelledby="ws-history"]`, "No runs."))
	screenshot(t, ctx, "workspace")

	// A viewer: the run that waits shows no approve button, and an approval
	// forged from the page is refused by the server.
	e.create(t, runManifest("second", inline(map[string]string{"main.tf": `resource "terraform_data" "y" {}`}, "")))
	second := e.waitPhase(t, "second", time.Minute, v1alpha1.RunPhaseAwaitingApproval)
	vui := startWebView(t, vic, "second")
	vctx := browser(t)
	do(t, vctx, "the viewer's run page",
		chromedp.Navigate(vui.login), // the run's own page, as ui RUN links it
		visible(`section.actions[data-checked]`),
		waitText(`section.actions`, "No action on this run is open to you"),
		waitText(`.who`, "vic"))
	buttons := browse(t, vctx, "counting the action buttons", chromedp.Evaluate[int](`document.querySelectorAll('section.actions button').length`))
	if buttons != 0 {
		t.Errorf("the viewer sees %d action buttons", buttons)
	}
	screenshot(t, vctx, "viewer")
	forged := browse(t, vctx, "forging an approval from the page", chromedp.Evaluate[map[string]any](fmt.Sprintf(`fetch('/k8s/apis/terrarun.dev/v1alpha1/namespaces/default/terraformruns/second/approve?result=short', {
		method: 'POST', headers: {'Content-Type': 'application/json', 'X-Terrarun-Ui-Key': localStorage.getItem('terrarun-ui-key')},
		body: JSON.stringify({apiVersion: 'terrarun.dev/v1alpha1', kind: 'TerraformRunApproval', planDigest: %q})
	}).then(async (r) => ({code: r.status, body: await r.text()}))`, second.Status.Plan.Digest), chromedp.EvalAwaitPromise))
	if forged["code"] != float64(http.StatusForbidden) || !strings.Contains(fmt.Sprint(forged["body"]), "forbidden") {
		t.Errorf("an approval forged by a viewer's page: %v", forged)
	}
	if r := e.waitPhase(t, "second", time.Minute, v1alpha1.RunPhaseAwaitingApproval); r.Status.Approval != nil {
		t.Errorf("the viewer's forged approval was recorded: %+v", r.Status.Approval)
	}

	// What is not the user's own browser on the page is refused: no
	// session, a spent link, a foreign Origin or Host, a write without an
	// Origin, a path the web view does not forward.
	cookies := browse(t, ctx, "reading the session cookie", func(ctx context.Context, t *chromedp.Target) ([]*network.Cookie, error) {
		res, err := cdp.Call(ctx, t, network.GetCookies, network.GetCookiesParams{URLs: []string{ui.origin}})
		return res.Cookies, err
	})
	if len(cookies) != 1 || !cookies[0].HTTPOnly || cookies[0].SameSite != network.CookieSameSiteStrict {
		t.Fatalf("the session cookies: %+v", cookies)
	}
	session := cookies[0].Name + "=" + cookies[0].Value
	// The session key, which the login handed the page alone and which every
	// API request carries besides the cookie.
	key := browse(t, ctx, "reading the page's session key", chromedp.Evaluate[string](`localStorage.getItem('terrarun-ui-key')`))
	if len(key) < 40 {
		t.Fatalf("the page holds no session key: %q", key)
	}
	if here := browse(t, ctx, "reading the address", chromedp.Location()); strings.Contains(here, key) {
		t.Errorf("the session key stayed in the address bar: %s", here)
	}
	runs := ui.origin + "/k8s/apis/terrarun.dev/v1alpha1/namespaces/default/terraformruns"
	approve := runs + "/second/approve"
	for _, c := range []struct {
		what, method, url string
		header            map[string]string
		want              int
		says              string
	}{
		{"no session", "GET", runs, nil, 401, "no web view session"},
		{"the cookie alone (the browser sends it to every server on 127.0.0.1)", "GET", runs, map[string]string{"Cookie": session}, 401, "no web view session key"},
		{"a spent login link", "GET", ui.login, nil, 401, "used already"},
		{"a wrong token", "GET", ui.origin + "/?token=guess", nil, 401, "not valid"},
		{"a foreign Origin", "GET", runs, map[string]string{"Cookie": session, "Origin": "http://evil.example"}, 403, "cross-site"},
		{"a foreign Host (DNS rebinding)", "GET", runs, map[string]string{"Cookie": session, "Host": "evil.example"}, 403, "is not this web view's"},
		{"a write without Origin", "POST", approve, map[string]string{"Cookie": session}, 403, "must carry this web view's Origin"},
		{"a cross-site fetch", "POST", approve, map[string]string{"Cookie": session, "Origin": ui.origin, "Sec-Fetch-Site": "cross-site"}, 403, "cross-site"},
		{"Secrets", "GET", ui.origin + "/k8s/api/v1/namespaces/default/secrets", map[string]string{"Cookie": session, "X-Terrarun-Ui-Key": key}, 403, "does not forward"},
		{"a run's creation", "POST", runs, map[string]string{"Cookie": session, "X-Terrarun-Ui-Key": key, "Origin": ui.origin}, 403, "does not forward"},
		{"a path that climbs", "GET", ui.origin + "/k8s/apis/terrarun.dev/../../api/v1/secrets", map[string]string{"Cookie": session, "X-Terrarun-Ui-Key": key}, 403, "does not forward"},
	} {
		req, err := http.NewRequest(c.method, c.url, strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range c.header {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		jar, _ := cookiejar.New(nil)
		client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want || !strings.Contains(string(body), c.says) {
			t.Errorf("%s: %d %.300s, want %d saying %q", c.what, resp.StatusCode, body, c.want, c.says)
		}
	}
	// The same session does read what the app needs.
	req, _ := http.NewRequest("GET", runs, nil)
	req.Header.Set("Cookie", session)
	req.Header.Set("X-Terrarun-Ui-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the session's list of runs: %d", resp.StatusCode)
	}
}
