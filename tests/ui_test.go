package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/testkit/apitest"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// screenshotEnv names the file TestUI_dashboard saves a screenshot of the
// list page to, when set: docs/dashboard.png is made with
//
//	LOCKAPI_UI_SCREENSHOT=$PWD/docs/dashboard.png go test ./tests -run TestUI_dashboard
const screenshotEnv = "LOCKAPI_UI_SCREENSHOT"

// TestUI_dashboard drives the dashboard in a real headless Chromium: an
// admin signs in, sees a lock granted through the API appear within 1 s,
// watches its TTL count down and force-releases it through the
// confirmation, which lockapi_releases_total{kind="force"} counts; a
// read-only key sees no force-release button and is refused when it posts
// one anyway with its session's CSRF token.
func TestUI_dashboard(t *testing.T) {
	chromium := lookChromium(t)
	adminKey, adminLine := uiKey(t, "ops", auth.ScopeAdmin)
	readKey, readLine := uiKey(t, "viewer", auth.ScopeRead)
	rs := redistest.Start(t)
	s := startServer(t, []string{"LOCKAPI_REDIS_URL=" + rs.URL, "LOCKAPI_API_KEYS=" + adminLine + ";" + readLine})
	b := startBrowser(t, chromium)

	b.run("sign in as the admin", signIn(s.URL, adminKey)...)
	b.checkSessionCookie(s.URL)

	lease := uiGrant(t, s, adminKey, "deploy:prod", map[string]any{"owner": "ci-7", "ttl_ms": 20000})
	granted := time.Now()
	row := `#locks tr[data-lock="deploy:prod"]`
	b.waitFor(time.Second, fmt.Sprintf(`document.querySelector('%s') !== null`, row))
	t.Logf("the lock appeared %v after its grant", time.Since(granted).Round(time.Millisecond))
	cells := get(b, "read the row", chromedp.Evaluate[[]string](fmt.Sprintf(`[...document.querySelectorAll('%s td')].map(td => td.textContent.trim())`, row)))
	// Lock, mode, owner, fencing token, holds, TTL, waiters, action.
	if len(cells) != 8 || cells[1] != "exclusive" || cells[2] != "ci-7" || cells[3] != strconv.FormatUint(lease.FencingToken, 10) || cells[4] != "1" || cells[6] != "0" || cells[7] != "Force release…" {
		t.Fatalf("row = %q, lease %+v", cells, lease)
	}

	ttl := func() float64 {
		text := get(b, "read the TTL", chromedp.Text(chromedp.CSS(row+` .ttl`)))
		v, err := strconv.ParseFloat(strings.TrimSuffix(text, " s"), 64)
		if err != nil {
			t.Fatalf("TTL %q: %v", text, err)
		}
		return v
	}
	first := ttl()
	time.Sleep(1200 * time.Millisecond)
	if second := ttl(); first > 20 || second >= first || second < first-5 {
		t.Fatalf("TTL went from %.1f s to %.1f s in 1.2 s", first, second)
	}

	if path := os.Getenv(screenshotEnv); path != "" {
		b.screenshot(s, adminKey, path)
	}

	b.run("force-release through the confirmation",
		chromedp.Click(chromedp.CSS(row+` a.force-release`)),
		chromedp.WaitVisible(chromedp.CSS(`form#force-release button`)),
		chromedp.Click(chromedp.CSS(`form#force-release button`)),
		chromedp.WaitVisible(chromedp.CSS(`.notice`)))
	notice := get(b, "read the notice", chromedp.Text(chromedp.CSS(`.notice`)))
	present := get(b, "look for the row", chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector('%s') !== null`, row)))
	if notice != "Force-released deploy:prod." || present {
		t.Fatalf("after the force release: notice %q, row still there %v", notice, present)
	}
	if st := uiState(t, s, adminKey, "deploy:prod"); st.Held {
		t.Fatalf("the lock is still held: %+v", st)
	}
	// Counted as one through DELETE /v1/locks/{name} is.
	if got := scrape(t, newAPI(t, s))[`lockapi_releases_total{kind="force"}`]; got != 1 {
		t.Fatalf(`lockapi_releases_total{kind="force"} = %v after the dashboard's force release, want 1`, got)
	}
	if status := eventsStatus(t, s, adminKey); status != http.StatusOK {
		t.Fatalf("GET /v1/events answers %d", status)
	}
	// The live feed (SSE) shows the force release, with who did it.
	b.waitFor(3*time.Second, `document.querySelector('#feed li[data-type="force_released"][data-lock="deploy:prod"]') !== null`)
	// And a lease's new metadata (PATCH: a leader's proclaim), with it.
	leader := uiGrant(t, s, adminKey, "deploy:prod", map[string]any{"owner": "node-a", "ttl_ms": 20000})
	var updated Lease
	uiCall(t, s, adminKey, "PATCH", "/v1/locks/deploy:prod/leases/"+leader.LeaseID, map[string]any{"metadata": map[string]string{"state": "serving", "addr": "10.0.0.7"}}, &updated)
	b.waitFor(3*time.Second, `[...document.querySelectorAll('#feed li[data-type="updated"][data-lock="deploy:prod"] .metadata')].some(el => el.textContent === 'addr=10.0.0.7, state=serving')`)
	var released map[string]any
	uiCall(t, s, adminKey, "DELETE", "/v1/locks/deploy:prod/leases/"+leader.LeaseID, nil, &released)

	// A read-only key: the lock's page without a force-release button, and
	// a forged force release refused.
	uiGrant(t, s, adminKey, "deploy:prod", map[string]any{"owner": "ci-8", "ttl_ms": 20000})
	b.run("sign out", chromedp.Click(chromedp.CSS(`form.signout button`)), chromedp.WaitVisible(chromedp.CSS(`input[name=key]`)))
	b.run("sign in as the reader", signIn(s.URL, readKey)...)
	if get(b, "look for the list", chromedp.Evaluate[bool](`document.querySelector('#locks') !== null`)) {
		t.Fatal("a key without the admin scope sees the list of locks, which GET /v1/locks refuses it")
	}
	b.run("open the lock", chromedp.Navigate(s.URL+"/ui/locks/deploy:prod"))
	owner := get(b, "read the holder", chromedp.Text(chromedp.CSS(`table.holders tbody td`)))
	buttons := get(b, "count force-release controls", chromedp.Evaluate[int](`document.querySelectorAll('.force-release, form#force-release').length`))
	if owner != "ci-8" || buttons != 0 {
		t.Fatalf("the reader sees owner %q and %d force-release controls", owner, buttons)
	}
	type answer struct {
		Status int
		Body   string
	}
	forged := get(b, "post a forged force release", chromedp.Evaluate[answer](`
		fetch('/ui/locks/deploy:prod/release', {method: 'POST',
			body: new URLSearchParams({csrf: document.querySelector('form.signout input[name=csrf]').value})})
		.then(async r => ({Status: r.status, Body: await r.text()}))`, chromedp.EvalAwaitPromise))
	if forged.Status != http.StatusForbidden || !strings.Contains(forged.Body, "lacks the admin scope") {
		t.Fatalf("forged force release: %d %s", forged.Status, forged.Body)
	}
	if st := uiState(t, s, adminKey, "deploy:prod"); !st.Held {
		t.Fatal("the forged force release freed the lock")
	}
	b.checkConsole()
}

// signIn opens the dashboard, which asks for a key, and signs in with key.
func signIn(base, key string) []chromedp.Action[chromedp.Void] {
	return []chromedp.Action[chromedp.Void]{
		chromedp.Navigate(base + "/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=key]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=key]`), key),
		chromedp.Submit(chromedp.CSS(`input[name=key]`)),
		chromedp.WaitVisible(chromedp.CSS(`form.signout`)),
	}
}

// browser is one headless Chromium tab, with what its console reported.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu      sync.Mutex
	console []string // CSP violations and uncaught exceptions
}

// lookChromium finds Chromium; without it the test is skipped, or fails
// when CI is set.
func lookChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	missingTool(t, "Chromium is not on PATH: the dashboard test drives it headless (on Debian: apt-get install chromium)")
	return ""
}

func startBrowser(t *testing.T, path string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1280, 900))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root in its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first run starts Chromium, which lives as long as its context:
	// not one with a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	b := &browser{t: t, ctx: ctx}
	err := chromedp.Listen(ctx, func(ev any) {
		var msg string
		switch ev := ev.(type) {
		case *log.EventEntryAdded:
			if strings.Contains(ev.Entry.Text, "Content Security Policy") {
				msg = ev.Entry.Text
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg = fmt.Sprintf("%s at %s:%d", d.Text, d.URL, d.LineNumber+1)
			if d.Exception != nil {
				msg += ": " + d.Exception.Description
			}
		}
		if msg != "" {
			b.mu.Lock()
			b.console = append(b.console, msg)
			b.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// run runs actions in the tab, failing the test with what when they fail
// or take longer than 20 s.
func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	get(b, what, chromedp.Steps(actions...))
}

// get runs an action that returns a value, as run does.
func get[T any](b *browser, what string, action chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, action)
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// waitFor polls the page until the JavaScript expression cond is true,
// failing the test after within.
func (b *browser) waitFor(within time.Duration, cond string) {
	b.t.Helper()
	deadline := time.Now().Add(within)
	for {
		if get(b, "evaluate "+cond, chromedp.Evaluate[bool](cond)) {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("not within %v: %s", within, cond)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkSessionCookie checks that the key lives only in an HttpOnly,
// SameSite=Strict cookie: no script can read it, no storage holds it.
func (b *browser) checkSessionCookie(base string) {
	b.t.Helper()
	cookies := get(b, "read cookies", func(ctx context.Context, t *chromedp.Target) ([]*network.Cookie, error) {
		r, err := cdp.Call(ctx, t, network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/ui/"}})
		if err != nil {
			return nil, err
		}
		return r.Cookies, nil
	})
	script := get(b, "read document.cookie", chromedp.Evaluate[string](`document.cookie`))
	storage := get(b, "read storage", chromedp.Evaluate[string](`JSON.stringify(localStorage) + JSON.stringify(sessionStorage)`))
	if len(cookies) != 1 || !cookies[0].HTTPOnly || cookies[0].SameSite != network.CookieSameSiteStrict || cookies[0].Path != "/ui/" {
		b.t.Fatalf("cookies = %+v", cookies)
	}
	if script != "" || storage != "{}{}" {
		b.t.Fatalf("scripts see cookies %q and storage %s", script, storage)
	}
}

// screenshot saves the list page, with a few more locks of each kind, to
// path.
func (b *browser) screenshot(s *server, key, path string) {
	b.t.Helper()
	uiGrant(b.t, s, key, "reports:nightly", map[string]any{"owner": "cron@batch-2", "ttl_ms": 300000, "metadata": map[string]string{"job": "nightly"}})
	for _, owner := range []string{"reader-1", "reader-2"} {
		uiGrant(b.t, s, key, "catalog:index", map[string]any{"owner": owner, "mode": "shared", "ttl_ms": 90000})
	}
	// A fair waiter queues behind the nightly report until the test ends.
	ctx, cancel := context.WithCancel(context.Background())
	b.t.Cleanup(cancel)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/v1/locks/reports:nightly/leases", strings.NewReader(`{"owner": "cron@batch-3", "fair": true, "wait_ms": 60000}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	b.waitFor(2*time.Second, `document.querySelectorAll('#locks tbody tr[data-lock]').length === 3 &&
		document.querySelector('#locks tr[data-lock="reports:nightly"] td:nth-child(7)').textContent === '1'`)
	png := get(b, "screenshot", chromedp.Screenshot(chromedp.CSS("body")))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot saved to %s", filepath.Clean(path))
}

// checkConsole fails the test on CSP violations and uncaught exceptions.
func (b *browser) checkConsole() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, msg := range b.console {
		b.t.Errorf("browser console: %s", msg)
	}
}

// uiKey makes an API key with one scope for every name.
func uiKey(t *testing.T, principal string, scope auth.Scope) (key, line string) {
	t.Helper()
	key, line, err := auth.NewKey(principal, []auth.Scope{scope}, []string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	return key, line
}

// uiCall sends one API request with key and decodes a 2xx answer into out.
func uiCall(t *testing.T, s *server, key, method, path string, body, out any) {
	t.Helper()
	var rd *strings.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	} else {
		rd = strings.NewReader("")
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := apitest.NewClient(t, s.URL).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d", method, path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

func uiGrant(t *testing.T, s *server, key, name string, body map[string]any) Lease {
	t.Helper()
	var l Lease
	uiCall(t, s, key, "POST", "/v1/locks/"+name+"/leases", body, &l)
	return l
}

func uiState(t *testing.T, s *server, key, name string) LockState {
	t.Helper()
	var st LockState
	uiCall(t, s, key, "GET", "/v1/locks/"+name, nil, &st)
	return st
}

// eventsStatus returns the status GET /v1/events answers with. No headers
// within 10 s, or no answer at all, fails the test with the error: a
// stream that is merely slow to start on a loaded machine is told apart
// from one refused with a status.
func eventsStatus(t *testing.T, s *server, key string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /v1/events: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestUI_webhooks creates a webhook over the API and finds it on the
// dashboard's webhooks page, its secret nowhere in the HTML. Plain HTTP:
// no browser needed.
func TestUI_webhooks(t *testing.T) {
	adminKey, adminLine := uiKey(t, "ops", auth.ScopeAdmin)
	s := startServer(t, append([]string{"LOCKAPI_API_KEYS=" + adminLine}, webhookEnv...))
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(receiver.Close)

	var created struct {
		ID     string `json:"id"`
		URL    string `json:"url"`
		Secret string `json:"secret"`
	}
	uiCall(t, s, adminKey, "POST", "/v1/webhooks", map[string]any{"url": receiver.URL + "/hook", "prefix": "deploy:"}, &created)
	if created.ID == "" || !strings.HasPrefix(created.Secret, "whsec_") {
		t.Fatalf("created %+v", created)
	}

	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.PostForm(s.URL+"/ui/signin", url.Values{"key": {adminKey}, "next": {"/ui/webhooks"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(cookies) != 1 {
		t.Fatalf("sign in: %d %v", resp.StatusCode, cookies)
	}
	get := func(path string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", s.URL+path, nil)
		req.AddCookie(cookies[0])
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	page := get("/ui/webhooks")
	secret := strings.TrimPrefix(created.Secret, "whsec_")
	if !strings.Contains(page, `data-webhook="`+created.ID+`"`) || !strings.Contains(page, created.URL) {
		t.Fatalf("the page does not list webhook %s:\n%s", created.ID, page)
	}
	if strings.Contains(page, secret) || strings.Contains(page, "whsec_") {
		t.Fatalf("the webhook's secret is on the page:\n%s", page)
	}
	if dl := get("/ui/webhooks/" + created.ID + "/dead-letters"); !strings.Contains(dl, "No dead letters") || strings.Contains(dl, secret) {
		t.Fatalf("dead letters page:\n%s", dl)
	}
}
