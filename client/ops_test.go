package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/client"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/store/memory"
	"github.com/lockapi/lockapi/internal/webhook"
	"github.com/lockapi/lockapi/internal/webhook/memstate"
)

// Every operation of the API is a method on the SDK's own types: listing
// with its pages, the blocking query, force release, sessions.
func TestClient_locks_and_sessions(t *testing.T) {
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	ctx := context.Background()
	for _, name := range []string{"ops:a", "ops:b", "ops:c", "other"} {
		e.MustAcquire(name, client.AcquireOptions{Owner: "w"})
	}

	t.Run("OK_ListLocks_pages", func(t *testing.T) {
		page, err := e.Client.ListLocks(ctx, client.ListLocksOptions{Prefix: "ops:", Limit: 2})
		if err != nil || len(page.Locks) != 2 || page.NextCursor == "" || page.Locks[0].Lock != "ops:a" {
			t.Fatalf("first page: %+v, %v", page, err)
		}
		var names []string
		for st, err := range e.Client.Locks(ctx, client.ListLocksOptions{Prefix: "ops:", Limit: 2}) {
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, st.Lock)
		}
		if len(names) != 3 || names[2] != "ops:c" {
			t.Fatalf("Locks walked %v", names)
		}
	})

	t.Run("OK_Watch_answers_on_change", func(t *testing.T) {
		st, err := e.Client.Inspect(ctx, "ops:a")
		if err != nil {
			t.Fatal(err)
		}
		answered := make(chan *client.LockState, 1)
		go func() {
			got, err := e.Client.Watch(ctx, "ops:a", st.Index, time.Minute)
			if err != nil {
				t.Error(err)
			}
			answered <- got
		}()
		// The watch waits until the state changes: the force release.
		released, err := e.Client.ForceRelease(ctx, "ops:a")
		if err != nil || !released {
			t.Fatalf("force release: %v, %v", released, err)
		}
		select {
		case got := <-answered:
			if got == nil || got.Held || got.Index == st.Index {
				t.Fatalf("watch answered %+v", got)
			}
		case <-time.After(promptly):
			t.Fatal("the watch did not answer the change")
		}
		if released, err := e.Client.ForceRelease(ctx, "ops:a"); err != nil || released {
			t.Fatalf("force release of a free lock: %v, %v", released, err)
		}
	})

	t.Run("OK_ReleaseURL_frees_the_lock", func(t *testing.T) {
		l := e.MustAcquire("ops:url", client.AcquireOptions{Owner: "w"})
		resp, err := http.Post(e.URL+l.ReleaseURL(), "", nil) // no API key: the URL is the capability
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if st, err := e.Client.Inspect(ctx, "ops:url"); err != nil || st.Held {
			t.Fatalf("after a POST to %q (%d): %+v, %v", l.ReleaseURL(), resp.StatusCode, st, err)
		}
	})

	t.Run("OK_sessions", func(t *testing.T) {
		s, err := e.Client.NewSession(ctx, client.SessionOptions{Owner: "ops-sess", TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, "ops:bound", client.AcquireOptions{}); err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil || info.Owner != "ops-sess" || len(info.Leases) != 1 || info.Leases[0].Lock != "ops:bound" {
			t.Fatalf("info: %+v, %v", info, err)
		}
		list, err := e.Client.ListSessions(ctx, client.ListSessionsOptions{OwnerPrefix: "ops-"})
		if err != nil || len(list) != 1 || list[0].ID != s.ID() {
			t.Fatalf("list: %+v, %v", list, err)
		}
		if err := e.Client.DeleteSession(ctx, s.ID()); err != nil {
			t.Fatal(err)
		}
		var pe *client.ProblemError
		if _, err := e.Client.GetSession(ctx, s.ID()); !errors.As(err, &pe) || pe.Status != http.StatusGone {
			t.Fatalf("get of a deleted session: %v", err)
		}
		_ = s.Close(ctx)
	})
}

// A manual lease has no watchdog: it lives while Renew is called, and is
// lost once it is not.
func TestLease_Manual_Renew(t *testing.T) {
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	ctx := context.Background()
	const ttl = 1500 * time.Millisecond
	l, err := e.Client.Acquire(ctx, "manual", client.AcquireOptions{TTL: ttl, Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	// Renewed by hand past its TTL, it is still held.
	for range 3 {
		time.Sleep(ttl / 3)
		if err := l.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Left alone, nothing renews it: Lost closes before it expires.
	select {
	case <-l.Lost():
	case <-time.After(ttl + promptly):
		t.Fatal("a manual lease left unrenewed was never lost")
	}
	if err := l.Renew(ctx); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("Renew after the loss: %v", err)
	}

	t.Run("ErrLeaseLost_after_force_release", func(t *testing.T) {
		l, err := e.Client.Acquire(ctx, "manual2", client.AcquireOptions{Manual: true})
		if err != nil {
			t.Fatal(err)
		}
		e.ForceRelease("manual2")
		if err := l.Renew(ctx); !errors.Is(err, client.ErrLeaseLost) {
			t.Fatalf("Renew after a force release: %v", err)
		}
		select {
		case <-l.Lost():
		default:
			t.Fatal("Lost not closed by Renew's 410")
		}
	})
}

// Webhooks are managed with the SDK, and a receiver verifies lockapi's real
// deliveries with VerifyWebhook.
func TestClient_webhooks_and_VerifyWebhook(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	svc, err := webhook.New(webhook.Config{
		Store: mem, Log: mem.Events(), State: memstate.New(),
		Policy:  webhook.Policy{AllowPrivate: true},
		Backoff: webhook.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Logger:  zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); svc.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-ran })
	e := mustOpenEnv(t, mem, lockhttp.Config{Webhooks: svc})
	ctx := context.Background()

	type delivery struct {
		header http.Header
		body   []byte
	}
	got := make(chan delivery, 16)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- delivery{r.Header.Clone(), body}
	}))
	t.Cleanup(recv.Close)

	w, secret, err := e.Client.CreateWebhook(ctx, client.WebhookOptions{URL: recv.URL + "/hook", Prefix: "wh:", Types: []client.EventType{client.EventGranted}})
	if err != nil || secret == "" || w.ID == "" || w.Prefix != "wh:" {
		t.Fatalf("create: %+v, %q, %v", w, secret, err)
	}
	if list, err := e.Client.ListWebhooks(ctx); err != nil || len(list) != 1 || list[0].ID != w.ID {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if one, err := e.Client.GetWebhook(ctx, w.ID); err != nil || one.URL != w.URL {
		t.Fatalf("get: %+v, %v", one, err)
	}

	ping, err := e.Client.PingWebhook(ctx, w.ID)
	if err != nil || !ping.Delivered || ping.Status != http.StatusOK {
		t.Fatalf("ping: %+v, %v", ping, err)
	}
	d := <-got
	if ev, err := client.VerifyWebhook(secret, d.header, d.body); err != nil || ev.Type != client.EventPing || ev.ID != ping.EventID {
		t.Fatalf("verify the ping: %+v, %v", ev, err)
	}

	l := e.MustAcquire("wh:job", client.AcquireOptions{Owner: "w"})
	select {
	case d = <-got:
	case <-time.After(promptly):
		t.Fatal("no delivery of the grant")
	}
	ev, err := client.VerifyWebhook(secret, d.header, d.body)
	if err != nil || ev.Type != client.EventGranted || ev.Lock != "wh:job" || ev.FencingToken != l.Token() {
		t.Fatalf("verify the grant: %+v, %v", ev, err)
	}
	if _, err := client.VerifyWebhook(webhook.NewSecret(), d.header, d.body); !errors.Is(err, client.ErrWebhookSignature) {
		t.Errorf("another secret: %v", err)
	}
	late := client.WebhookVerifier{Secrets: []string{secret}, Now: func() time.Time { return time.Now().Add(time.Hour) }}
	if _, err := late.Verify(d.header, d.body); !errors.Is(err, client.ErrWebhookTimestamp) {
		t.Errorf("an hour later: %v", err)
	}

	if err := e.Client.DeleteWebhook(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	var pe *client.ProblemError
	if _, err := e.Client.GetWebhook(ctx, w.ID); !errors.As(err, &pe) || pe.Status != http.StatusNotFound {
		t.Fatalf("get of a deleted webhook: %v", err)
	}
}

// FromEnv reads LOCKAPI_URL and LOCKAPI_API_KEY, as every lockapi client does.
func TestFromEnv(t *testing.T) {
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	t.Setenv("LOCKAPI_URL", e.URL)
	t.Setenv("LOCKAPI_API_KEY", "lka_not_checked_by_an_open_server")
	c, err := client.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Inspect(context.Background(), "env"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LOCKAPI_URL", "localhost:8080")
	if _, err := client.FromEnv(); err == nil {
		t.Fatal("FromEnv took a URL without a scheme")
	}
}
