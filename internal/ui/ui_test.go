package ui

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/force"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/metrics"
	"github.com/lockapi/lockapi/internal/store/memory"
)

// dash is a dashboard on a memory store, with an admin key, a read-only
// key and an admin of team-a's names only.
type dash struct {
	h                    *Handler
	store                lock.Store
	admin, reader, teamA string
	api                  *http.Request    // the last request the API handler got
	metrics              *metrics.Metrics // what the dashboard's force releases report to
	keys                 *auth.Keyring
	lines                []string // the key lines of admin, reader and teamA
}

func newDash(t *testing.T, store lock.Store) *dash {
	t.Helper()
	return newDashWith(t, store, nil)
}

// newDashWith is newDash with the webhook service webhooks.
func newDashWith(t *testing.T, store lock.Store, webhooks Webhooks) *dash {
	t.Helper()
	d := &dash{store: store}
	var lines []string
	key := func(principal string, scope auth.Scope, pattern string) string {
		k, line, err := auth.NewKey(principal, []auth.Scope{scope}, []string{pattern})
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line)
		return k
	}
	d.admin = key("ops", auth.ScopeAdmin, "*")
	d.reader = key("viewer", auth.ScopeRead, "*")
	d.teamA = key("team-a", auth.ScopeAdmin, "team-a:*")
	keys, err := auth.ParseKeys(strings.Join(lines, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	d.keys, d.lines = keys, lines
	d.metrics = metrics.New()
	d.h = New(Config{
		Store: store,
		Keys:  keys,
		API: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d.api = r
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, ": the API\n\n")
		}),
		Force:    force.NewReleaser(store, d.metrics),
		Webhooks: webhooks,
	})
	return d
}

// forceReleases reads lockapi_releases_total{kind="force"} as GET /metrics
// serves it.
func (d *dash) forceReleases(t *testing.T) string {
	t.Helper()
	w := httptest.NewRecorder()
	d.metrics.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	const series = `lockapi_releases_total{kind="force"} `
	for line := range strings.Lines(w.Body.String()) {
		if v, ok := strings.CutPrefix(line, series); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in:\n%s", series, w.Body)
	return ""
}

func (d *dash) grant(t *testing.T, name, owner string) {
	t.Helper()
	if _, err := d.store.TryAcquire(context.Background(), lock.AcquireRequest{Lock: name, Owner: owner, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
}

func (d *dash) held(t *testing.T, name string) bool {
	t.Helper()
	st, err := d.store.Inspect(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st.Held
}

// serve sends one request with the given cookie and headers.
func serve(h http.Handler, method, target, cookie string, form url.Values, header ...string) *httptest.ResponseRecorder {
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	r := httptest.NewRequest(method, target, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != "" {
		r.AddCookie(&http.Cookie{Name: cookieName, Value: cookie})
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// signIn signs in with key and returns the session cookie's value and the
// session's CSRF token.
func (d *dash) signIn(t *testing.T, key string) (cookie, csrf string) {
	t.Helper()
	w := serve(d.h, "POST", "/ui/signin", "", url.Values{"key": {key}, "next": {"/ui/"}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("sign in: %d %s", w.Code, w.Body)
	}
	for _, c := range w.Result().Cookies() {
		if c.Name == cookieName {
			cookie = c.Value
		}
	}
	page := serve(d.h, "GET", "/ui/", cookie, nil)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page.Body.String())
	if m == nil {
		t.Fatalf("no CSRF token on the page:\n%s", page.Body)
	}
	return cookie, m[1]
}

func TestSignIn(t *testing.T) {
	d := newDash(t, memory.New())

	t.Run("PagesAskForAKey", func(t *testing.T) {
		w := serve(d.h, "GET", "/ui/locks/a?x=1", "", nil)
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/signin?next=%2Fui%2Flocks%2Fa%3Fx%3D1" {
			t.Fatalf("%d %v", w.Code, w.Header())
		}
		if w := serve(d.h, "GET", "/ui/rows", "", nil); w.Code != http.StatusUnauthorized {
			t.Fatalf("a fetch without a session: %d", w.Code)
		}
	})
	t.Run("ErrBadKey", func(t *testing.T) {
		w := serve(d.h, "POST", "/ui/signin", "", url.Values{"key": {"lka_nope"}})
		if w.Code != http.StatusUnauthorized || len(w.Result().Cookies()) != 0 {
			t.Fatalf("%d %v", w.Code, w.Result().Cookies())
		}
	})
	t.Run("CookieFlags", func(t *testing.T) {
		for _, overTLS := range []bool{false, true} {
			r := httptest.NewRequest("POST", "/ui/signin", strings.NewReader(url.Values{"key": {d.admin}}.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if overTLS {
				r.TLS = &tls.ConnectionState{}
			}
			w := httptest.NewRecorder()
			d.h.ServeHTTP(w, r)
			cs := w.Result().Cookies()
			if len(cs) != 1 || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode || cs[0].Path != "/ui/" || cs[0].Secure != overTLS || cs[0].MaxAge != int(DefaultSessionTTL/time.Second) {
				t.Fatalf("TLS %v: cookies %+v", overTLS, cs)
			}
		}
	})
	t.Run("NextStaysOnTheDashboard", func(t *testing.T) {
		for next, want := range map[string]string{"/ui/locks/a": "/ui/locks/a", "//evil.example/": "/ui/", "https://evil.example/ui/": "/ui/", "/ui/\\evil": "/ui/"} {
			w := serve(d.h, "POST", "/ui/signin", "", url.Values{"key": {d.admin}, "next": {next}})
			if got := w.Header().Get("Location"); got != want {
				t.Errorf("next %q: went to %q, want %q", next, got, want)
			}
		}
	})
	t.Run("SignOut", func(t *testing.T) {
		cookie, csrf := d.signIn(t, d.admin)
		w := serve(d.h, "POST", "/ui/signout", cookie, url.Values{"csrf": {csrf}})
		if cs := w.Result().Cookies(); w.Code != http.StatusSeeOther || len(cs) != 1 || cs[0].MaxAge >= 0 {
			t.Fatalf("%d %+v", w.Code, cs)
		}
	})
}

// TestSignIn_ExpiredKey: the dashboard refuses a key past its expires=
// time by the API's rule, at sign-in and in a session begun before.
func TestSignIn_ExpiredKey(t *testing.T) {
	expiredAt := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	key, line, err := auth.NewExpiringKey("old-ops", []auth.Scope{auth.ScopeAdmin}, []string{"*"}, expiredAt)
	if err != nil {
		t.Fatal(err)
	}
	liveKey, liveLine, err := auth.NewExpiringKey("ops", []auth.Scope{auth.ScopeAdmin}, []string{"*"}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.ParseKeys(line + "\n" + liveLine)
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New()
	h := New(Config{Store: store, Keys: keys, API: http.NotFoundHandler(), Force: force.NewReleaser(store, metrics.New())})
	cookieOf := func(apiKey string) string { // a session begun an hour before the key expired
		k, err := keys.Authenticate(apiKey, expiredAt.Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return h.seal(make([]byte, sealIDLen), time.Now().Add(time.Hour), k)
	}

	w := serve(h, "POST", "/ui/signin", "", url.Values{"key": {key}, "next": {"/ui/"}})
	if w.Code != http.StatusUnauthorized || len(w.Result().Cookies()) != 0 {
		t.Fatalf("sign in with an expired key: %d %v", w.Code, w.Result().Cookies())
	}
	if want := "expired at " + expiredAt.Format(time.RFC3339); !strings.Contains(w.Body.String(), want) {
		t.Fatalf("the sign-in page does not say %q:\n%s", want, w.Body)
	}
	// A session begun before the key expired ends; one with a live key goes on.
	if w := serve(h, "GET", "/ui/rows", cookieOf(key), nil); w.Code != http.StatusUnauthorized {
		t.Fatalf("a session with an expired key: %d", w.Code)
	}
	if w := serve(h, "GET", "/ui/rows", cookieOf(liveKey), nil); w.Code != http.StatusOK {
		t.Fatalf("a session with a live key: %d %s", w.Code, w.Body)
	}
}

func TestForceRelease(t *testing.T) {
	d := newDash(t, memory.New())
	admin, adminCSRF := d.signIn(t, d.admin)
	reader, readerCSRF := d.signIn(t, d.reader)

	t.Run("ErrNoCSRFToken", func(t *testing.T) {
		d.grant(t, "a", "x")
		for _, token := range []string{"", "forged", readerCSRF} {
			if w := serve(d.h, "POST", "/ui/locks/a/release", admin, url.Values{"csrf": {token}}); w.Code != http.StatusForbidden || !d.held(t, "a") {
				t.Fatalf("token %q: %d, held %v", token, w.Code, d.held(t, "a"))
			}
		}
	})
	t.Run("ErrCrossOrigin", func(t *testing.T) {
		d.grant(t, "a", "x")
		w := serve(d.h, "POST", "/ui/locks/a/release", admin, url.Values{"csrf": {adminCSRF}}, "Sec-Fetch-Site", "cross-site")
		if w.Code != http.StatusForbidden || !d.held(t, "a") {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	})
	t.Run("ErrNotAdmin", func(t *testing.T) {
		d.grant(t, "a", "x")
		w := serve(d.h, "POST", "/ui/locks/a/release", reader, url.Values{"csrf": {readerCSRF}})
		if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "lacks the admin scope") || !d.held(t, "a") {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		if w := serve(d.h, "GET", "/ui/locks/a/release", reader, nil); w.Code != http.StatusForbidden {
			t.Fatalf("the confirmation: %d", w.Code)
		}
		if page := serve(d.h, "GET", "/ui/locks/a", reader, nil).Body.String(); strings.Contains(page, "force-release") {
			t.Fatalf("the reader's page offers a force release:\n%s", page)
		}
	})
	t.Run("ErrOtherNames", func(t *testing.T) {
		teamA, csrf := d.signIn(t, d.teamA)
		d.grant(t, "a", "x")
		if w := serve(d.h, "POST", "/ui/locks/a/release", teamA, url.Values{"csrf": {csrf}}); w.Code != http.StatusForbidden || !d.held(t, "a") {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	})
	t.Run("OK", func(t *testing.T) {
		d.grant(t, "a", "x")
		if w := serve(d.h, "GET", "/ui/locks/a/release", admin, nil); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `<form id="force-release"`) {
			t.Fatalf("the confirmation: %d %s", w.Code, w.Body)
		}
		w := serve(d.h, "POST", "/ui/locks/a/release", admin, url.Values{"csrf": {adminCSRF}})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/?released=a" || d.held(t, "a") {
			t.Fatalf("%d %v", w.Code, w.Header())
		}
	})
}

// TestForceRelease_counted: a force release through the confirmation form
// is counted in lockapi_releases_total{kind="force"}, as one through
// DELETE /v1/locks/{name} is; a refused one, or one of a free lock, is not.
func TestForceRelease_counted(t *testing.T) {
	d := newDash(t, memory.New())
	admin, adminCSRF := d.signIn(t, d.admin)
	reader, readerCSRF := d.signIn(t, d.reader)
	d.grant(t, "a", "x")

	serve(d.h, "POST", "/ui/locks/a/release", reader, url.Values{"csrf": {readerCSRF}})
	if got := d.forceReleases(t); got != "0" || !d.held(t, "a") {
		t.Fatalf("after a refused force release: %s counted, held %v", got, d.held(t, "a"))
	}
	if w := serve(d.h, "POST", "/ui/locks/a/release", admin, url.Values{"csrf": {adminCSRF}}); w.Code != http.StatusSeeOther || d.held(t, "a") {
		t.Fatalf("force release: %d %s", w.Code, w.Body)
	}
	if got := d.forceReleases(t); got != "1" {
		t.Fatalf("after the dashboard's force release: %s counted, want 1", got)
	}
	if w := serve(d.h, "POST", "/ui/locks/a/release", admin, url.Values{"csrf": {adminCSRF}}); w.Header().Get("Location") != "/ui/?free=a" {
		t.Fatalf("force release of a free lock: %d %v", w.Code, w.Header())
	}
	if got := d.forceReleases(t); got != "1" {
		t.Fatalf("after a force release of a free lock: %s counted, want 1", got)
	}
}

func TestList(t *testing.T) {
	d := newDash(t, memory.New())
	for _, name := range []string{"team-a:1", "team-a:2", "team-b:1"} {
		d.grant(t, name, "o")
	}
	rows := regexp.MustCompile(`<tr data-lock="([^"]+)"`)
	names := func(body string) (out []string) {
		for _, m := range rows.FindAllStringSubmatch(body, -1) {
			out = append(out, m[1])
		}
		return out
	}
	admin, _ := d.signIn(t, d.admin)
	teamA, _ := d.signIn(t, d.teamA)
	reader, _ := d.signIn(t, d.reader)

	t.Run("PatternsFilter", func(t *testing.T) {
		if got := fmt.Sprint(names(serve(d.h, "GET", "/ui/", admin, nil).Body.String())); got != "[team-a:1 team-a:2 team-b:1]" {
			t.Fatalf("admin sees %s", got)
		}
		if got := fmt.Sprint(names(serve(d.h, "GET", "/ui/?prefix=team-", teamA, nil).Body.String())); got != "[team-a:1 team-a:2]" {
			t.Fatalf("team-a sees %s", got)
		}
		if w := serve(d.h, "GET", "/ui/locks/team-b:1", teamA, nil); w.Code != http.StatusForbidden {
			t.Fatalf("team-a opens team-b:1: %d", w.Code)
		}
	})
	t.Run("ReadersDoNotList", func(t *testing.T) {
		// As GET /v1/locks: listing takes the admin scope.
		body := serve(d.h, "GET", "/ui/", reader, nil).Body.String()
		if len(names(body)) != 0 || !strings.Contains(body, `action="/ui/lock"`) {
			t.Fatalf("the reader's list:\n%s", body)
		}
	})
	t.Run("RowsSince", func(t *testing.T) {
		w := serve(d.h, "GET", "/ui/rows?prefix=team-a:", admin, nil)
		version := w.Header().Get("X-UI-Version")
		if w.Code != http.StatusOK || version == "" || len(names(w.Body.String())) != 2 {
			t.Fatalf("%d %q %s", w.Code, version, w.Body)
		}
		if w := serve(d.h, "GET", "/ui/rows?prefix=team-a:&since="+version, admin, nil); w.Code != http.StatusNoContent {
			t.Fatalf("unchanged: %d", w.Code)
		}
		d.grant(t, "team-a:3", "o")
		if w := serve(d.h, "GET", "/ui/rows?prefix=team-a:&since="+version, admin, nil); w.Code != http.StatusOK || len(names(w.Body.String())) != 3 {
			t.Fatalf("after a grant: %d %s", w.Code, w.Body)
		}
	})
}

func TestOpenServer(t *testing.T) {
	store := memory.New()
	h := New(Config{Store: store, API: http.NotFoundHandler(), Force: force.NewReleaser(store, nil)})
	w := serve(h, "GET", "/ui/", "", nil)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "Open server") || len(w.Result().Cookies()) != 1 {
		t.Fatalf("%d %v\n%s", w.Code, w.Result().Cookies(), w.Body)
	}
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Fatalf("CSP %q", csp)
	}
	if w := serve(h, "GET", "/ui", "", nil); w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "/ui/" {
		t.Fatalf("GET /ui: %d %v", w.Code, w.Header())
	}
	if w := serve(h, "GET", "/ui/static/app.js", "", nil); w.Code != http.StatusOK || !strings.Contains(w.Header().Get("Content-Type"), "javascript") {
		t.Fatalf("the script: %d %v", w.Code, w.Header())
	}
	// Even open, a force release needs the session's token.
	if _, err := store.TryAcquire(context.Background(), lock.AcquireRequest{Lock: "a", Owner: "x", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	cookie := w.Result().Cookies()[0].Value
	if w := serve(h, "POST", "/ui/locks/a/release", cookie, url.Values{"csrf": {"x"}}); w.Code != http.StatusForbidden {
		t.Fatalf("without the token: %d", w.Code)
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(serve(h, "GET", "/ui/locks/a/release", cookie, nil).Body.String())
	if w := serve(h, "POST", "/ui/locks/a/release", cookie, url.Values{"csrf": {csrf[1]}}); w.Code != http.StatusSeeOther {
		t.Fatalf("with it: %d %s", w.Code, w.Body)
	}
}

// The dashboard hides the names lockapi keeps for itself, as the API
// does: not listed, and no lock page.
func TestReservedNames(t *testing.T) {
	store := memory.New()
	h := New(Config{Store: store, API: http.NotFoundHandler(), Force: force.NewReleaser(store, nil)})
	for _, name := range []string{"lockapi.webhook.x", "job:visible"} {
		if _, err := store.TryAcquire(context.Background(), lock.AcquireRequest{Lock: name, Owner: "x", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	w := serve(h, "GET", "/ui/", "", nil)
	if w.Code != http.StatusOK || strings.Contains(w.Body.String(), "lockapi.webhook.x") || !strings.Contains(w.Body.String(), "job:visible") {
		t.Fatalf("%d\n%s", w.Code, w.Body)
	}
	cookie := w.Result().Cookies()[0].Value
	if w := serve(h, "GET", "/ui/locks/lockapi.webhook.x", cookie, nil); w.Code != http.StatusForbidden {
		t.Fatalf("the lock page of a reserved name: %d", w.Code)
	}
}

func TestEventsStream(t *testing.T) {
	d := newDash(t, memory.New())
	cookie, _ := d.signIn(t, d.reader)
	w := serve(d.h, "GET", "/ui/events?lock=a&after=5-0", cookie, nil, "Last-Event-ID", "7-1")
	r := d.api
	if w.Body.String() != ": the API\n\n" || r.URL.Path != "/v1/events" || r.URL.RawQuery != "lock=a&after=5-0" ||
		r.Header.Get("Authorization") != "" || r.Header.Get("Last-Event-ID") != "7-1" || r.Header.Get("Cookie") != "" {
		t.Fatalf("the API got %s %v; answered %q", r.URL, r.Header, w.Body)
	}
	if k, ok := auth.KeyFrom(r.Context()); !ok || k.Principal != "viewer" {
		t.Fatalf("the API's request is not the session's key: %+v", k)
	}
}

// eventStore is a memory store with an event log the test writes.
type eventStore struct {
	lock.Store
	events []lock.Event
}

func (s *eventStore) Events() lock.EventLog { return s }

func (s *eventStore) ReadEvents(_ context.Context, after string, limit int) ([]lock.Event, error) {
	var out []lock.Event
	for _, e := range s.events {
		if (after == "" || lock.CompareEventIDs(e.ID, after) > 0) && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

func (s *eventStore) WaitEvents(ctx context.Context, after string, limit int) ([]lock.Event, error) {
	return s.ReadEvents(ctx, after, limit)
}

func (s *eventStore) ReadEventsBefore(_ context.Context, before string, limit int) ([]lock.Event, error) {
	var out []lock.Event
	for i := len(s.events) - 1; i >= 0 && len(out) < limit; i-- {
		if before == "" || lock.CompareEventIDs(s.events[i].ID, before) < 0 {
			out = append(out, s.events[i])
		}
	}
	return out, nil
}

func (s *eventStore) LastEventID(context.Context) (string, error) {
	if len(s.events) == 0 {
		return "", nil
	}
	return s.events[len(s.events)-1].ID, nil
}

func TestRecentEvents(t *testing.T) {
	t.Run("NoEventLog", func(t *testing.T) {
		d := newDash(t, memory.NewWithOptions(memory.Options{NoEvents: true}))
		cookie, _ := d.signIn(t, d.admin)
		if body := serve(d.h, "GET", "/ui/locks/a", cookie, nil).Body.String(); !strings.Contains(body, "Events unavailable") {
			t.Fatalf("no note:\n%s", body)
		}
	})
	t.Run("NewestOfTheLock", func(t *testing.T) {
		// Three hours of events, one a second for locks a and b in turn.
		store := &eventStore{Store: memory.New()}
		start := time.Now().Add(-3 * time.Hour).Truncate(time.Second)
		for i := range 3 * 3600 {
			at := start.Add(time.Duration(i) * time.Second)
			store.events = append(store.events, lock.Event{ID: fmt.Sprintf("%d-0", at.UnixMilli()), Type: lock.EventGranted, Lock: []string{"a", "b"}[i%2], Owner: fmt.Sprint(i), Time: at})
		}
		d := newDash(t, store)
		cookie, _ := d.signIn(t, d.admin)
		body := serve(d.h, "GET", "/ui/locks/a", cookie, nil).Body.String()
		owners := regexp.MustCompile(`<li data-id="[^"]+" data-type="granted" data-lock="a">.*?<span class="owner">(\d+)</span>`).FindAllStringSubmatch(body, -1)
		last := store.events[len(store.events)-1]
		if len(owners) != recentEvents || owners[0][1] != fmt.Sprint(3*3600-2) || owners[recentEvents-1][1] != fmt.Sprint(3*3600-2*recentEvents) ||
			!strings.Contains(body, fmt.Sprintf(`data-after="%s"`, last.ID)) || strings.Contains(body, `data-lock="b">`) {
			t.Fatalf("owners %v, body:\n%s", owners, body)
		}
	})
}

// An updated event shows the lease's new metadata, in key order, as the
// live feed's script does; other events show none.
func TestRecentEvents_updated_shows_metadata(t *testing.T) {
	store := memory.New()
	d := newDash(t, store)
	g, err := store.TryAcquire(context.Background(), lock.AcquireRequest{Lock: "svc:leader", Owner: "node-a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Update(context.Background(), lock.LeaseRef{Lock: "svc:leader", ID: g.Lease.ID}, map[string]string{"state": "serving", "addr": "<10.0.0.7>"}); err != nil {
		t.Fatal(err)
	}
	cookie, _ := d.signIn(t, d.admin)
	body := serve(d.h, "GET", "/ui/locks/svc:leader", cookie, nil).Body.String()
	if !regexp.MustCompile(`data-type="updated" data-lock="svc:leader">.*<span class="metadata">addr=&lt;10.0.0.7&gt;, state=serving</span></li>`).MatchString(body) {
		t.Fatalf("no updated event with its metadata:\n%s", body)
	}
	if regexp.MustCompile(`data-type="granted"[^\n]*class="metadata"`).MatchString(body) {
		t.Fatalf("a granted event shows metadata:\n%s", body)
	}
}

// A lock's detail page names the session its lease is bound to.
func TestLockPage_shows_the_session(t *testing.T) {
	store := memory.New()
	t.Cleanup(func() { _ = store.Close() })
	d := newDash(t, store)
	sess, err := store.CreateSession(context.Background(), lock.SessionRequest{Owner: "w", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.TryAcquire(context.Background(), lock.AcquireRequest{Lock: "bound", Owner: "w", Session: sess.ID}); err != nil {
		t.Fatal(err)
	}
	admin, _ := d.signIn(t, d.admin)
	page := serve(d.h, "GET", "/ui/locks/bound", admin, nil).Body.String()
	if !strings.Contains(page, "<dt>Session</dt><dd><code>"+sess.ID+"</code>") {
		t.Fatalf("the page does not name session %s:\n%s", sess.ID, page)
	}
}

// A semaphore's leases are permits, on the lock's page and in the list: not
// exclusive holds.
func TestLockPage_semaphore_permits(t *testing.T) {
	store := memory.New()
	t.Cleanup(func() { _ = store.Close() })
	d := newDash(t, store)
	for _, owner := range []string{"trainer-1", "trainer-2"} {
		if _, err := store.TryAcquire(context.Background(), lock.AcquireRequest{Lock: "gpu-pool", Owner: owner, TTL: time.Minute, Limit: 4}); err != nil {
			t.Fatal(err)
		}
	}
	admin, _ := d.signIn(t, d.admin)
	page := serve(d.h, "GET", "/ui/locks/gpu-pool", admin, nil).Body.String()
	for _, owner := range []string{"trainer-1", "trainer-2"} {
		if !strings.Contains(page, "<tr><td>"+owner+"</td><td></td><td>permit</td>") {
			t.Errorf("the page does not show %s's permit:\n%s", owner, page)
		}
	}
	if strings.Contains(page, "exclusive") {
		t.Errorf("the page calls a permit exclusive:\n%s", page)
	}
	row := serve(d.h, "GET", "/ui/rows?prefix=gpu-", admin, nil).Body.String()
	if !strings.Contains(row, "<td>semaphore (4)</td><td>2 permits</td>") {
		t.Errorf("the list's row:\n%s", row)
	}
}

// A lock closed for a lock-delay is free, and both the list and its page
// show what is left of the delay.
func TestLockDelay_is_shown(t *testing.T) {
	store := memory.New()
	t.Cleanup(func() { _ = store.Close() })
	d := newDash(t, store)
	ctx := context.Background()
	sess, err := store.CreateSession(ctx, lock.SessionRequest{Owner: "w", TTL: time.Minute, LockDelay: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.TryAcquire(ctx, lock.AcquireRequest{Lock: "closed", Owner: "w", Session: sess.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ForceRelease(ctx, "closed", "admin"); err != nil {
		t.Fatal(err)
	}
	admin, _ := d.signIn(t, d.admin)
	list := serve(d.h, "GET", "/ui/", admin, nil).Body.String()
	row := regexp.MustCompile(`(?s)<tr data-lock="closed">.*?</tr>`).FindString(list)
	if !strings.Contains(row, "free") || !strings.Contains(row, `lock-delay <span class="ttl" data-ms="`) || strings.Contains(row, "Force release") {
		t.Fatalf("the list's row of the closed lock: %q\n%s", row, list)
	}
	page := serve(d.h, "GET", "/ui/locks/closed", admin, nil).Body.String()
	if !strings.Contains(page, "<dt>Lock-delay</dt>") || !strings.Contains(page, "<dd>free</dd>") {
		t.Fatalf("the lock's page does not show the lock-delay:\n%s", page)
	}
}
