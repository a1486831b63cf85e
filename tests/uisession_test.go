package tests

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// noRedirects is a client that shows redirects instead of following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// uiSignIn signs in to s's dashboard with key and returns the session cookie.
func uiSignIn(t *testing.T, s *server, key string) *http.Cookie {
	t.Helper()
	resp, err := noRedirects.PostForm(s.URL+"/ui/signin", url.Values{"key": {key}, "next": {"/ui/"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if cs := resp.Cookies(); resp.StatusCode == http.StatusSeeOther && len(cs) == 1 {
		return cs[0]
	}
	t.Fatalf("sign in: %d %v", resp.StatusCode, resp.Cookies())
	return nil
}

// uiPage gets path of s's dashboard with cookie: the status and body, or
// 0 and "" when it sends to sign in.
func uiPage(t *testing.T, s *server, cookie *http.Cookie, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", s.URL+path, nil)
	req.AddCookie(cookie)
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusSeeOther && strings.HasPrefix(resp.Header.Get("Location"), "/ui/signin") {
		return 0, ""
	}
	return resp.StatusCode, string(b)
}

// The dashboard's cookie is a sealed session, not the key: it is no
// credential for the API, it works on every instance on one Redis and
// across restarts, its live feed runs without the key, and signing out on
// one instance ends it on the others.
func TestUISession_sealed_across_instances(t *testing.T) {
	key, line, err := auth.NewKey("ops", []auth.Scope{auth.ScopeAdmin}, []string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	rs := redistest.Start(t)
	env := []string{"LOCKAPI_REDIS_URL=" + rs.URL, "LOCKAPI_API_KEYS=" + line, "LOCKAPI_RELEASE_SECRETS="}
	a, b := startServer(t, env), startServer(t, env)

	cookie := uiSignIn(t, a, key)
	for _, enc := range []string{key, strings.TrimPrefix(key, "lka_"), base64.RawURLEncoding.EncodeToString([]byte(key))} {
		if strings.Contains(cookie.Value, enc) {
			t.Fatalf("the cookie holds the key: %s", cookie.Value)
		}
	}
	// No credential for the API, as a bearer token or as the cookie.
	for _, h := range []func(*http.Request){
		func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+cookie.Value) },
		func(r *http.Request) { r.AddCookie(cookie) },
	} {
		req, _ := http.NewRequest("GET", a.URL+"/v1/locks", nil)
		h(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("the API answered a dashboard cookie %d, want 401", resp.StatusCode)
		}
	}
	// Every instance, and a restarted one.
	if code, _ := uiPage(t, b, cookie, "/ui/"); code != http.StatusOK {
		t.Fatalf("the session on the other instance: %d", code)
	}
	a.restart()
	code, page := uiPage(t, a, cookie, "/ui/")
	if code != http.StatusOK {
		t.Fatalf("the session after a restart: %d", code)
	}
	uiFeedStarts(t, b, cookie)

	// Signing out on a ends the session on b too.
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if csrf == nil {
		t.Fatalf("no CSRF token on the page:\n%s", page)
	}
	req, _ := http.NewRequest("POST", a.URL+"/ui/signout", strings.NewReader(url.Values{"csrf": {csrf[1]}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(cookie)
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: %d", resp.StatusCode)
	}
	for _, s := range []*server{a, b} {
		if code, _ := uiPage(t, s, cookie, "/ui/"); code != 0 {
			t.Errorf("a signed-out session on %s: %d, want the sign-in page", s.URL, code)
		}
	}
}

// uiFeedStarts checks that the dashboard's live feed (the API's event
// stream, asked as the session's key) answers with a stream.
func uiFeedStarts(t *testing.T, s *server, cookie *http.Cookie) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/ui/events", nil)
	req.AddCookie(cookie)
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("live feed: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
}
