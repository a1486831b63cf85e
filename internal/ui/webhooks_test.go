package ui

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
	"github.com/lockapi/lockapi/internal/webhook"
	"github.com/lockapi/lockapi/internal/webhook/memstate"
)

// webhookFixture is a store with events and a State holding two
// subscriptions: ci (prefix ci:, granted events, two events behind, two
// dead letters) and teamA (prefix team-a:, caught up, none).
type webhookFixture struct {
	store     *memory.Store
	state     *memstate.State
	ci, teamA webhook.Subscription
	secrets   []string
}

func newWebhookFixture(t *testing.T) *webhookFixture {
	t.Helper()
	ctx := context.Background()
	f := &webhookFixture{store: memory.New(), state: memstate.New()}
	grant := func(name string) {
		if _, err := f.store.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "o", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	last := func() string {
		id, err := f.store.LastEventID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	sub := func(id, url, prefix string, types ...lock.EventType) webhook.Subscription {
		s := webhook.Subscription{ID: id, URL: url, Prefix: prefix, Types: types, Secrets: []string{webhook.NewSecret(), webhook.NewSecret()},
			Source: webhook.SourceAPI, CreatedAt: time.Now()}
		f.secrets = append(f.secrets, s.Secrets...)
		return s
	}
	grant("ci:a")
	f.ci = sub("ci-hook", "https://ci.example/hooks/lockapi", "ci:", lock.EventGranted)
	if err := f.state.Create(ctx, f.ci, last(), 0); err != nil {
		t.Fatal(err)
	}
	grant("ci:b")
	grant("other")
	grant("ci:c")
	f.teamA = sub("team-a-hook", "https://a.example/hook", "team-a:")
	if err := f.state.Create(ctx, f.teamA, last(), 0); err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"1-0", "2-0"} {
		d := webhook.DeadLetter{EventID: id, Payload: []byte(`{"type":"granted","lock":"ci:x"}`), Attempts: 7 + i, LastStatus: 500,
			LastError: "receiver <b>failed</b>", FailedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
		if err := f.state.AddDeadLetter(ctx, f.ci.ID, d); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// checkPage checks what every webhooks page must be: no secret, no inline
// script or style, the CSP header.
func (f *webhookFixture) checkPage(t *testing.T, w *http.Response, body string) {
	t.Helper()
	for _, s := range f.secrets {
		if strings.Contains(body, s) || strings.Contains(body, s[len("whsec_"):]) {
			t.Fatalf("a secret is on the page:\n%s", body)
		}
	}
	if strings.Contains(body, "whsec_") {
		t.Fatalf("a secret is on the page:\n%s", body)
	}
	if regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]|<style|\sstyle=|\son[a-z]+=`).MatchString(body) {
		t.Fatalf("inline script or style:\n%s", body)
	}
	if w.Header.Get("Content-Security-Policy") != contentSecurityPolicy {
		t.Fatalf("CSP %q", w.Header.Get("Content-Security-Policy"))
	}
}

// row returns the table row of subscription id.
func row(t *testing.T, body, id string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<tr data-webhook="` + regexp.QuoteMeta(id) + `">.*?</tr>`).FindString(body)
	if m == "" {
		t.Fatalf("no row of %s:\n%s", id, body)
	}
	return m
}

func TestWebhooksPage(t *testing.T) {
	f := newWebhookFixture(t)
	d := newDashWith(t, f.store, f.state)
	admin, _ := d.signIn(t, d.admin)

	t.Run("ListsHealth", func(t *testing.T) {
		w := serve(d.h, "GET", "/ui/webhooks", admin, nil)
		body := w.Body.String()
		if w.Code != http.StatusOK {
			t.Fatalf("%d %s", w.Code, body)
		}
		f.checkPage(t, w.Result(), body)
		ci := row(t, body, f.ci.ID)
		cursor, _, _ := f.state.Cursor(context.Background(), f.ci.ID)
		for _, want := range []string{f.ci.URL, "<code>ci:</code>", "granted", ">api<", "<code>" + cursor + "</code>",
			`<td class="num behind">2</td>`, `href="/ui/webhooks/ci-hook/dead-letters">2</a>`, "HTTP 500 receiver &lt;b&gt;failed&lt;/b&gt;", "none holds the lease"} {
			if !strings.Contains(ci, want) {
				t.Errorf("the ci row lacks %q:\n%s", want, ci)
			}
		}
		a := row(t, body, f.teamA.ID)
		for _, want := range []string{"every type", `<td class="num behind">0</td>`, `dead-letters">0</a>`} {
			if !strings.Contains(a, want) {
				t.Errorf("the team-a row lacks %q:\n%s", want, a)
			}
		}
		if !strings.Contains(body, `href="/ui/webhooks"`) {
			t.Errorf("no link to the page in the header")
		}
	})
	t.Run("ShowsTheDeliveringInstance", func(t *testing.T) {
		if _, err := f.store.TryAcquire(context.Background(), lock.AcquireRequest{Lock: webhook.LeaseName(f.teamA.ID), Owner: "host-1/abcd", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		body := serve(d.h, "GET", "/ui/webhooks", admin, nil).Body.String()
		if a := row(t, body, f.teamA.ID); !strings.Contains(a, "host-1/abcd") {
			t.Fatalf("no worker:\n%s", a)
		}
	})
	t.Run("KeysSeeWhatTheyManage", func(t *testing.T) {
		teamA, _ := d.signIn(t, d.teamA)
		body := serve(d.h, "GET", "/ui/webhooks", teamA, nil).Body.String()
		if !strings.Contains(body, f.teamA.ID) || strings.Contains(body, f.ci.ID) {
			t.Fatalf("team-a's page:\n%s", body)
		}
		if w := serve(d.h, "GET", "/ui/webhooks/ci-hook/dead-letters", teamA, nil); w.Code != http.StatusNotFound {
			t.Fatalf("team-a reads ci's dead letters: %d", w.Code)
		}
	})
	t.Run("ErrNotAdmin", func(t *testing.T) {
		reader, _ := d.signIn(t, d.reader)
		for _, path := range []string{"/ui/webhooks", "/ui/webhooks/ci-hook/dead-letters"} {
			w := serve(d.h, "GET", path, reader, nil)
			if w.Code != http.StatusForbidden || strings.Contains(w.Body.String(), f.ci.URL) {
				t.Fatalf("%s: %d %s", path, w.Code, w.Body)
			}
		}
		if body := serve(d.h, "GET", "/ui/", reader, nil).Body.String(); strings.Contains(body, `href="/ui/webhooks"`) {
			t.Fatalf("the reader is offered the webhooks page")
		}
	})
	t.Run("SignInFirst", func(t *testing.T) {
		w := serve(d.h, "GET", "/ui/webhooks", "", nil)
		if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/ui/signin") {
			t.Fatalf("%d %v", w.Code, w.Header())
		}
	})
}

func TestDeadLettersPage(t *testing.T) {
	f := newWebhookFixture(t)
	d := newDashWith(t, f.store, f.state)
	admin, _ := d.signIn(t, d.admin)

	w := serve(d.h, "GET", "/ui/webhooks/ci-hook/dead-letters", admin, nil)
	body := w.Body.String()
	if w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, body)
	}
	f.checkPage(t, w.Result(), body)
	for _, want := range []string{f.ci.URL, `data-event="1-0"`, `data-event="2-0"`, "2025-01-02 03:04:05.000Z", ">8<", ">500<",
		"receiver &lt;b&gt;failed&lt;/b&gt;", "ci:x"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q:\n%s", want, body)
		}
	}
	if strings.Count(body, "<form") != 1 { // signing out
		t.Errorf("the page is not read-only:\n%s", body)
	}
	if w := serve(d.h, "GET", "/ui/webhooks/ci-hook/dead-letters?after=1-0", admin, nil); strings.Contains(w.Body.String(), `data-event="1-0"`) ||
		!strings.Contains(w.Body.String(), `data-event="2-0"`) {
		t.Fatalf("after=1-0:\n%s", w.Body)
	}
	for path, status := range map[string]int{
		"/ui/webhooks/nope/dead-letters":              http.StatusNotFound,
		"/ui/webhooks/bad%21id/dead-letters":          http.StatusBadRequest,
		"/ui/webhooks/ci-hook/dead-letters?after=zzz": http.StatusBadRequest,
		"/ui/webhooks/team-a-hook/dead-letters":       http.StatusOK,
	} {
		if w := serve(d.h, "GET", path, admin, nil); w.Code != status {
			t.Errorf("%s: %d, want %d: %s", path, w.Code, status, w.Body)
		}
	}
}

func TestWebhooksPageWithTheService(t *testing.T) {
	f := newWebhookFixture(t)
	svc, err := webhook.New(webhook.Config{Store: f.store, Log: f.store, State: f.state})
	if err != nil {
		t.Fatal(err)
	}
	d := newDashWith(t, f.store, svc)
	admin, _ := d.signIn(t, d.admin)
	w := serve(d.h, "GET", "/ui/webhooks", admin, nil)
	body := w.Body.String()
	if w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, body)
	}
	f.checkPage(t, w.Result(), body)
	ci := row(t, body, f.ci.ID)
	// The Service reports cursors: the row says how far delivery got.
	for _, want := range []string{f.ci.URL, `dead-letters">2</a>`, `class="num behind"`} {
		if !strings.Contains(ci, want) {
			t.Errorf("the ci row lacks %q:\n%s", want, ci)
		}
	}
	if !strings.Contains(body, "0 subscription(s) waiting to retry") {
		t.Errorf("no backlog:\n%s", body)
	}
}

func TestWebhooksPageOff(t *testing.T) {
	d := newDash(t, memory.New())
	admin, _ := d.signIn(t, d.admin)
	w := serve(d.h, "GET", "/ui/webhooks", admin, nil)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "delivers no webhooks") {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if w := serve(d.h, "GET", "/ui/webhooks/x/dead-letters", admin, nil); w.Code != http.StatusNotFound {
		t.Fatalf("dead letters: %d", w.Code)
	}
}
