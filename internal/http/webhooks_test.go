package http_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/client"
	"github.com/lockapi/lockapi/event"
	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
	"github.com/lockapi/lockapi/internal/webhook"
	"github.com/lockapi/lockapi/internal/webhook/memstate"
)

// mustOpenWebhookEnv is MustOpenEnv with webhooks delivered from the
// env's memory store; tune adjusts the service's configuration.
func mustOpenWebhookEnv(t *testing.T, cfg lockhttp.Config, tune func(*webhook.Config)) *Env {
	t.Helper()
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	cfg.Webhooks = mustRunWebhooks(t, mem, tune)
	return mustOpenEnvOn(t, mem, &HookStore{Store: mem}, cfg)
}

// mustRunWebhooks runs a webhook service on store until the test ends,
// allowed to deliver to loopback and retrying fast; tune adjusts its
// configuration.
func mustRunWebhooks(t *testing.T, store lock.Store, tune func(*webhook.Config)) *webhook.Service {
	t.Helper()
	wc := webhook.Config{
		Store:   store,
		Log:     store.Events(),
		State:   memstate.New(),
		Policy:  webhook.Policy{AllowPrivate: true},
		Backoff: webhook.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Logger:  zerolog.Nop(),
	}
	if tune != nil {
		tune(&wc)
	}
	svc, err := webhook.New(wc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return svc
}

// hookReceiver verifies every delivery's signature and records the
// bodies; fail > 0 answers that many with 503 first.
type hookReceiver struct {
	t   *testing.T
	URL string

	mu     sync.Mutex
	secret string
	fail   int
	got    chan event.Event
}

func newHookReceiver(t *testing.T) *hookReceiver {
	r := &hookReceiver{t: t, got: make(chan event.Event, 100)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		secret, fail := r.secret, r.fail > 0
		if fail {
			r.fail--
		}
		r.mu.Unlock()
		if _, err := (client.WebhookVerifier{Secrets: []string{secret}}).Verify(req.Header, body); err != nil {
			t.Errorf("receiver: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if fail {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var p event.Event
		if err := json.Unmarshal(body, &p); err != nil {
			t.Errorf("receiver: %s: %v", body, err)
		}
		r.got <- p
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL + "/hook"
	return r
}

func (r *hookReceiver) set(secret string, fail int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.secret, r.fail = secret, fail
}

// strictPolicy refuses private destinations and resolves every *.example
// host to a public address, whatever DNS the test machine has.
var strictPolicy = webhook.Policy{Resolver: publicDNS{}}

type publicDNS struct{}

func (publicDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if strings.HasSuffix(host, ".example") {
		return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (e *Env) createWebhook(body string) lockhttp.NewWebhook {
	e.t.Helper()
	resp := e.Do("POST", "/v1/webhooks", body)
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("create webhook: %d %s", resp.StatusCode, resp.Body)
	}
	return Decode[lockhttp.NewWebhook](e.t, resp)
}

func TestWebhooks_create_list_get_delete(t *testing.T) {
	e := mustOpenWebhookEnv(t, lockhttp.Config{}, nil)
	resp := e.Do("POST", "/v1/webhooks", `{"url": "https://ci.example/hooks", "prefix": "ci:", "types": ["released", "granted"]}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, resp.Body)
	}
	created := Decode[lockhttp.NewWebhook](t, resp)
	if loc := resp.Header.Get("Location"); loc != "/v1/webhooks/"+created.ID {
		t.Fatalf("Location = %q", loc)
	}
	if !strings.HasPrefix(created.Secret, "whsec_") || created.Source != webhook.SourceAPI || created.Prefix != "ci:" ||
		strings.Join([]string{string(created.Types[0]), string(created.Types[1])}, ",") != "granted,released" || created.CreatedAt == "" {
		t.Fatalf("created = %+v", created)
	}

	// The secret is never shown again: strict decoding fails on it.
	list := Decode[lockhttp.WebhookList](t, e.Do("GET", "/v1/webhooks", ""))
	if len(list.Webhooks) != 1 || list.Webhooks[0].ID != created.ID || list.Webhooks[0].URL != "https://ci.example/hooks" {
		t.Fatalf("list = %+v", list)
	}
	got := Decode[lockhttp.Webhook](t, e.Do("GET", "/v1/webhooks/"+created.ID, ""))
	if got.ID != created.ID {
		t.Fatalf("get = %+v", got)
	}

	if resp := e.Do("DELETE", "/v1/webhooks/"+created.ID, ""); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d %s", resp.StatusCode, resp.Body)
	}
	WantProblem(t, e.Do("GET", "/v1/webhooks/"+created.ID, ""), http.StatusNotFound, "not-found")
	WantProblem(t, e.Do("DELETE", "/v1/webhooks/"+created.ID, ""), http.StatusNotFound, "not-found")
	if list := Decode[lockhttp.WebhookList](t, e.Do("GET", "/v1/webhooks", "")); len(list.Webhooks) != 0 {
		t.Fatalf("list after delete = %+v", list)
	}
}

// TestWebhooks_bad_input: each is a 4xx problem naming the field, and
// nothing changes.
func TestWebhooks_bad_input(t *testing.T) {
	e := mustOpenWebhookEnv(t, lockhttp.Config{}, func(c *webhook.Config) { c.Policy = strictPolicy })
	first := e.createWebhook(`{"url": "https://ci.example/hooks", "prefix": "ci:", "types": ["released"]}`)
	for _, c := range []struct {
		name, body string
		status     int
		slug       string
		field      string
	}{
		{"ErrUnknownType", `{"url": "https://ci.example/other", "types": ["released", "freed"]}`, 400, "invalid-request", "types[1]"},
		{"ErrNotHTTPS", `{"url": "http://ci.example/hooks"}`, 400, "invalid-request", "url"},
		{"ErrLoopback", `{"url": "https://127.0.0.1:8443/hooks"}`, 400, "invalid-request", "url"},
		{"ErrPrivate", `{"url": "https://192.168.1.20/hooks"}`, 400, "invalid-request", "url"},
		{"ErrMetadata", `{"url": "https://169.254.169.254/latest"}`, 400, "invalid-request", "url"},
		{"ErrResolvesToLoopback", `{"url": "https://localhost:8443/hooks"}`, 400, "invalid-request", "url"},
		{"ErrUnresolvable", `{"url": "https://nowhere.invalid/hooks"}`, 400, "invalid-request", "url"},
		{"ErrURLRequired", `{"prefix": "ci:"}`, 400, "invalid-request", "url"},
		{"ErrURLNull", `{"url": null}`, 400, "invalid-request", "url"},
		{"ErrPrefixNull", `{"url": "https://ci.example/x", "prefix": null}`, 400, "invalid-request", "prefix"},
		{"ErrTypeNull", `{"url": "https://ci.example/x", "types": [null]}`, 400, "invalid-request", "types"},
		{"ErrPrefix", `{"url": "https://ci.example/x", "prefix": "ci/*"}`, 400, "invalid-request", "prefix"},
		{"ErrUnknownField", `{"url": "https://ci.example/x", "secret": "whsec_x"}`, 400, "invalid-request", "secret"},
		{"ErrDuplicate", `{"url": "https://ci.example/hooks", "prefix": "ci:", "types": ["released", "released"]}`, 409, "webhook-exists", "url"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := e.Malformed(t)
			p := WantProblem(t, e.Do("POST", "/v1/webhooks", c.body), c.status, c.slug)
			if len(p.Errors) == 0 || p.Errors[0].Field != c.field {
				t.Fatalf("errors = %+v, want field %q (%s)", p.Errors, c.field, p.Detail)
			}
			if c.slug == "webhook-exists" && !strings.Contains(p.Detail, first.ID) {
				t.Fatalf("detail %q does not name %s", p.Detail, first.ID)
			}
		})
	}
	WantProblem(t, e.Malformed(t).Do("GET", "/v1/webhooks/not%20an%20id", ""), 400, "invalid-request")
	WantProblem(t, e.Malformed(t).Do("POST", "/v1/webhooks/"+first.ID+"/dead-letters/nope/replay", ""), 400, "invalid-request")
	WantProblem(t, e.Malformed(t).Do("GET", "/v1/webhooks/"+first.ID+"/dead-letters?after=x", ""), 400, "invalid-request")
	if list := Decode[lockhttp.WebhookList](t, e.Do("GET", "/v1/webhooks", "")); len(list.Webhooks) != 1 {
		t.Fatalf("bad input changed the list: %+v", list)
	}
}

func TestWebhooks_delivery_ping_dead_letters_replay(t *testing.T) {
	e := mustOpenWebhookEnv(t, lockhttp.Config{}, func(c *webhook.Config) { c.RetryFor = 300 * time.Millisecond })
	r := newHookReceiver(t)
	created := e.createWebhook(`{"url": "` + r.URL + `", "prefix": "job:", "types": ["released"]}`)
	r.set(created.Secret, 0)

	ping := Decode[lockhttp.PingResult](t, e.Do("POST", "/v1/webhooks/"+created.ID+"/ping", ""))
	if !ping.Delivered || ping.Outcome != "delivered" || ping.Status == nil || *ping.Status != 200 || ping.Error != nil {
		t.Fatalf("ping = %+v", ping)
	}
	if p := Within(t, r.got, "ping"); p.Type != webhook.PingType || p.ID != ping.EventID {
		t.Fatalf("ping delivered %+v", p)
	}

	l := e.Acquire("job:build", `{"owner": "ci-7"}`)
	e.Do("DELETE", "/v1/locks/job:build/leases/"+l.LeaseID, "")
	if p := Within(t, r.got, "released"); p.Type != lock.EventReleased || p.Lock != "job:build" || p.FencingToken != l.FencingToken {
		t.Fatalf("delivered %+v", p)
	}

	// The receiver fails until the event is given up.
	r.set(created.Secret, 1<<30)
	l = e.Acquire("job:deploy", `{"owner": "ci-7"}`)
	e.Do("DELETE", "/v1/locks/job:deploy/leases/"+l.LeaseID, "")
	var list lockhttp.DeadLetterList
	deadline := time.Now().Add(promptly)
	for len(list.DeadLetters) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no dead letter")
		}
		time.Sleep(20 * time.Millisecond)
		list = Decode[lockhttp.DeadLetterList](t, e.Do("GET", "/v1/webhooks/"+created.ID+"/dead-letters", ""))
	}
	d := list.DeadLetters[0]
	var ev event.Event
	if err := json.Unmarshal(d.Event, &ev); err != nil || ev.Lock != "job:deploy" || ev.ID != d.EventID || d.Attempts < 1 || d.LastStatus == nil || *d.LastStatus != 503 || list.NextAfter != nil {
		t.Fatalf("dead letters = %+v (event %s)", list, d.Event)
	}
	if strings.Contains(string(d.Event), "lease_id") {
		t.Fatalf("a dead letter shows the lease id: %s", d.Event)
	}

	r.set(created.Secret, 0)
	resp := e.Do("POST", "/v1/webhooks/"+created.ID+"/dead-letters/"+d.EventID+"/replay", "")
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("replay: %d %s", resp.StatusCode, resp.Body)
	}
	if p := Within(t, r.got, "replay"); p.ID != d.EventID {
		t.Fatalf("replayed %+v", p)
	}
	WantProblem(t, e.Do("POST", "/v1/webhooks/"+created.ID+"/dead-letters/"+d.EventID+"/replay", ""), http.StatusNotFound, "not-found")
	WantProblem(t, e.Do("GET", "/v1/webhooks/nope/dead-letters", ""), http.StatusNotFound, "not-found")
	WantProblem(t, e.Do("POST", "/v1/webhooks/nope/ping", ""), http.StatusNotFound, "not-found")
}

func TestWebhooks_need_an_admin_key_covering_the_prefix(t *testing.T) {
	mk := func(principal string, scopes []auth.Scope, patterns ...string) (string, string) {
		key, line, err := auth.NewKey(principal, scopes, patterns)
		if err != nil {
			t.Fatal(err)
		}
		return key, line
	}
	writer, wl := mk("ci", []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, "*")
	ciAdmin, cl := mk("ci-admin", []auth.Scope{auth.ScopeAdmin}, "ci:*")
	root, rl := mk("root", []auth.Scope{auth.ScopeAdmin}, "*")
	keys, err := auth.ParseKeys(wl + "\n" + cl + "\n" + rl)
	if err != nil {
		t.Fatal(err)
	}
	e := mustOpenWebhookEnv(t, lockhttp.Config{Keys: keys}, func(c *webhook.Config) { c.Policy = strictPolicy })
	bearer := func(k string) []string { return []string{"Authorization", "Bearer " + k} }

	WantProblem(t, e.Do("POST", "/v1/webhooks", `{"url": "https://a.example/"}`), 401, "unauthorized")
	WantProblem(t, e.Do("POST", "/v1/webhooks", `{"url": "https://a.example/"}`, bearer(writer)...), 403, "forbidden")
	WantProblem(t, e.Do("GET", "/v1/webhooks", "", bearer(writer)...), 403, "forbidden")
	// A key for ci:* may not see every lock's events.
	WantProblem(t, e.Do("POST", "/v1/webhooks", `{"url": "https://a.example/"}`, bearer(ciAdmin)...), 403, "forbidden")
	if resp := e.Do("POST", "/v1/webhooks", `{"url": "https://a.example/", "prefix": "ci:build"}`, bearer(ciAdmin)...); resp.StatusCode != 201 {
		t.Fatalf("ci admin under ci: %d %s", resp.StatusCode, resp.Body)
	}
	all := Decode[lockhttp.NewWebhook](t, e.Do("POST", "/v1/webhooks", `{"url": "https://b.example/"}`, bearer(root)...))
	if list := Decode[lockhttp.WebhookList](t, e.Do("GET", "/v1/webhooks", "", bearer(ciAdmin)...)); len(list.Webhooks) != 1 || list.Webhooks[0].Prefix != "ci:build" {
		t.Fatalf("the ci admin's list = %+v", list)
	}
	if list := Decode[lockhttp.WebhookList](t, e.Do("GET", "/v1/webhooks", "", bearer(root)...)); len(list.Webhooks) != 2 {
		t.Fatalf("root's list = %+v", list)
	}
	WantProblem(t, e.Do("DELETE", "/v1/webhooks/"+all.ID, "", bearer(ciAdmin)...), 403, "forbidden")
}

func TestWebhooks_of_the_file_are_read_only(t *testing.T) {
	subs, err := webhook.ParseFile([]byte(`{"webhooks": [{"id": "ci-next", "url": "https://ci.example/hooks", "types": ["released"], "secrets": ["`+webhook.NewSecret()+`"]}]}`), strictPolicy)
	if err != nil {
		t.Fatal(err)
	}
	e := mustOpenWebhookEnv(t, lockhttp.Config{}, func(c *webhook.Config) { c.File, c.Policy = subs, strictPolicy })
	list := Decode[lockhttp.WebhookList](t, e.Do("GET", "/v1/webhooks", ""))
	if len(list.Webhooks) != 1 || list.Webhooks[0].Source != webhook.SourceFile || list.Webhooks[0].CreatedAt != "" {
		t.Fatalf("list = %+v", list)
	}
	WantProblem(t, e.Do("DELETE", "/v1/webhooks/ci-next", ""), http.StatusConflict, "webhook-read-only")
	// The same subscription over the API is a duplicate of the file's.
	p := WantProblem(t, e.Do("POST", "/v1/webhooks", `{"url": "https://ci.example/hooks", "types": ["released"]}`), http.StatusConflict, "webhook-exists")
	if !strings.Contains(p.Detail, "ci-next") {
		t.Fatalf("detail = %q", p.Detail)
	}
}

func TestWebhooks_disabled(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	WantProblem(t, e.Do("POST", "/v1/webhooks", `{"url": "https://a.example/"}`), http.StatusNotImplemented, "webhooks-disabled")
	WantProblem(t, e.Do("GET", "/v1/webhooks", ""), http.StatusNotImplemented, "webhooks-disabled")
	WantProblem(t, e.Do("POST", "/v1/webhooks/abc/ping", ""), http.StatusNotImplemented, "webhooks-disabled")
}

// A webhook's prefix may not be under the reserved lockapi.: the events of
// lockapi's own names (webhook worker leases among them) are no one's.
func TestWebhooks_reservedPrefixRefused(t *testing.T) {
	e := mustOpenWebhookEnv(t, lockhttp.Config{}, nil)
	for _, prefix := range []string{"lockapi.", "lockapi.webhook."} {
		WantProblem(t, e.Do("POST", "/v1/webhooks", `{"url": "https://ci.example/hooks", "prefix": "`+prefix+`"}`), http.StatusForbidden, "reserved-name")
	}
	if list := Decode[lockhttp.WebhookList](t, e.Do("GET", "/v1/webhooks", "")); len(list.Webhooks) != 0 {
		t.Fatalf("a refused webhook was created: %+v", list)
	}
	e.createWebhook(`{"url": "https://ci.example/hooks", "prefix": "lockapi"}`) // not under lockapi.
}
