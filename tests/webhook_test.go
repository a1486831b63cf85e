package tests

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// verifyStandardWebhook checks a delivery as the Standard Webhooks
// specification tells receivers to, written from the spec's text rather
// than with lockapi's own code: the signed content is
// "<webhook-id>.<webhook-timestamp>.<body>", the key is the base64 after
// "whsec_", each space-separated "v1,<base64>" may match, and the
// timestamp must be within 5 minutes of now.
func verifyStandardWebhook(secret string, h http.Header, body []byte, now time.Time) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q: %v", ts, err)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("webhook-timestamp is %v off", d)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + string(body)))
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(sigs) {
		version, b64, _ := strings.Cut(sig, ",")
		got, err := base64.StdEncoding.DecodeString(b64)
		if version == "v1" && err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("no signature in %q matches", sigs)
}

// hookEvent is what the receiver reads of a delivery.
type hookEvent struct {
	ID           string `json:"id"`
	Type         string `json:"type"`
	Lock         string `json:"lock"`
	Owner        string `json:"owner"`
	FencingToken uint64 `json:"fencing_token"`
}

// e2eReceiver is a webhook receiver in the test: it verifies each
// delivery's signature, fails the first `fail` deliveries with 500, takes
// its time with each (so a backlog builds), and deduplicates by webhook-id.
type e2eReceiver struct {
	t     *testing.T
	URL   string
	delay time.Duration
	on    func(hookEvent) // called once per new event, off the request

	mu       sync.Mutex
	secret   string
	fail     int
	failed   int
	requests int
	seen     map[string]hookEvent // webhook-id -> event
	order    []hookEvent          // first deliveries, in arrival order
	dups     int
	changed  chan struct{}
}

func newE2EReceiver(t *testing.T, fail int, delay time.Duration) *e2eReceiver {
	r := &e2eReceiver{t: t, fail: fail, delay: delay, seen: map[string]hookEvent{}, changed: make(chan struct{}, 1)}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL + "/hooks/lockapi"
	return r
}

func (r *e2eReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	time.Sleep(r.delay)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	if err := verifyStandardWebhook(r.secret, req.Header, body, time.Now()); err != nil {
		r.t.Errorf("receiver: %v", err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if r.failed < r.fail {
		r.failed++
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	var e hookEvent
	if err := json.Unmarshal(body, &e); err != nil || e.ID != req.Header.Get("webhook-id") {
		r.t.Errorf("receiver: body %s (webhook-id %q): %v", body, req.Header.Get("webhook-id"), err)
	}
	if strings.Contains(string(body), "lease_id") {
		r.t.Errorf("receiver: a delivery shows a lease id: %s", body)
	}
	w.WriteHeader(http.StatusNoContent)
	if _, dup := r.seen[e.ID]; dup {
		r.dups++ // at least once: the idempotency key says so
		return
	}
	r.seen[e.ID] = e
	r.order = append(r.order, e)
	if r.on != nil {
		go r.on(e)
	}
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *e2eReceiver) setSecret(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.secret = s
}

func (r *e2eReceiver) delivered() []hookEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hookEvent(nil), r.order...)
}

// waitFor waits until at least n distinct events arrived.
func (r *e2eReceiver) waitFor(t *testing.T, n int, within time.Duration) []hookEvent {
	t.Helper()
	deadline := time.After(within)
	for {
		if got := r.delivered(); len(got) >= n {
			return got
		}
		select {
		case <-r.changed:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			got := r.delivered()
			t.Fatalf("the receiver got %d distinct events, want %d: %+v", len(got), n, got)
		}
	}
}

// webhookEnv makes deliveries to the test's receiver on 127.0.0.1
// possible, and retries quick.
var webhookEnv = []string{
	"LOCKAPI_WEBHOOKS_ALLOW_PRIVATE=true",
	"LOCKAPI_WEBHOOKS_BACKOFF_MIN=50ms",
	"LOCKAPI_WEBHOOKS_BACKOFF_MAX=500ms",
}

// subscribe creates a webhook for r, or skips the test when the server's
// store records no events.
func subscribe(t *testing.T, a *api, r *e2eReceiver, prefix string, types ...string) string {
	t.Helper()
	resp := a.must("POST", "/v1/webhooks", map[string]any{"url": r.URL, "prefix": prefix, "types": types})
	if resp.Status == http.StatusNotImplemented {
		t.Skipf("this store records no lock events, so it delivers no webhooks: %s", resp.Body)
	}
	if resp.Status != http.StatusCreated {
		t.Fatalf("create webhook: %d %s", resp.Status, resp.Body)
	}
	var created struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	resp.decode(t, &created)
	r.setSecret(created.Secret)
	return created.ID
}

// job takes and releases name as owner: a granted and a released event
// with the lease's token.
func job(t *testing.T, a *api, name, owner string) (granted, released string) {
	t.Helper()
	l := a.mustAcquire(name, map[string]any{"owner": owner, "ttl_ms": 60000}, 201)
	if r := a.release(l); r.Status != 200 {
		t.Fatalf("release %s: %d %s", name, r.Status, r.Body)
	}
	key := fmt.Sprintf("%s/%s/%d", name, owner, l.FencingToken)
	return "granted " + key, "released " + key
}

func eventKey(e hookEvent) string {
	return fmt.Sprintf("%s %s/%s/%d", e.Type, e.Lock, e.Owner, e.FencingToken)
}

// checkAll fails unless every wanted event arrived, and nothing else.
func checkAll(t *testing.T, got []hookEvent, want []string) {
	t.Helper()
	byKey := map[string]int{}
	for _, e := range got {
		byKey[eventKey(e)]++
	}
	for _, k := range want {
		if byKey[k] == 0 {
			t.Errorf("never delivered: %s", k)
		}
		delete(byKey, k)
	}
	for k := range byKey {
		t.Errorf("delivered but not expected: %s", k)
	}
}

// TestWebhooks_e2e_memory: on the memory store, a receiver that fails its
// first deliveries still gets every event, signed, in order.
func TestWebhooks_e2e_memory(t *testing.T) {
	s := startServer(t, append([]string{"LOCKAPI_REDIS_URL="}, webhookEnv...))
	a := newAPI(t, s)
	r := newE2EReceiver(t, 3, 0)
	subscribe(t, a, r, "e2e:", "granted", "released")

	var want []string
	for i := range 5 {
		g, rel := job(t, a, fmt.Sprintf("e2e:job-%d", i), "ci")
		want = append(want, g, rel)
	}
	job(t, a, "other:job", "ci") // outside the prefix
	got := r.waitFor(t, len(want), 30*time.Second)
	checkAll(t, got, want)
	for i, e := range got {
		if k := eventKey(e); k != want[i] {
			t.Fatalf("delivery %d is %s, want %s: events of one webhook arrive in order", i, k, want[i])
		}
	}
	// lockapi counts a delivery once the receiver's answer is in: a
	// moment after the receiver saw it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		m := scrape(t, a)
		rejected, delivered := m[`lockapi_webhook_deliveries_total{outcome="rejected"}`], m[`lockapi_webhook_deliveries_total{outcome="delivered"}`]
		if rejected >= 3 && delivered >= float64(len(want)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery metrics: %v rejected, %v delivered", rejected, delivered)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWebhooks_e2e_next_job: docs/WEBHOOKS.md's round trip. A CI job holds a
// lock; a webhook on `released` starts the next job, which takes the lock
// in turn. Nobody polls.
func TestWebhooks_e2e_next_job(t *testing.T) {
	s := startServer(t, append([]string{"LOCKAPI_REDIS_URL="}, webhookEnv...))
	a := newAPI(t, s)
	r := newE2EReceiver(t, 0, 0)
	const jobs = 3
	started := make(chan int, jobs)
	r.on = func(e hookEvent) {
		var n int
		if _, err := fmt.Sscanf(e.Owner, "job-%d", &n); err != nil || n+1 >= jobs {
			return
		}
		started <- n + 1 // the CI system starts the next job
	}
	subscribe(t, a, r, "ci:deploy", "released")

	for n := 0; n < jobs; n++ {
		if n > 0 {
			if got := <-started; got != n {
				t.Fatalf("job %d started after job %d", got, n-1)
			}
		}
		l := a.mustAcquire("ci:deploy", map[string]any{"owner": fmt.Sprintf("job-%d", n), "ttl_ms": 60000}, 201)
		if rel := a.release(l); rel.Status != 200 {
			t.Fatalf("job %d release: %d", n, rel.Status)
		}
	}
	if got := r.waitFor(t, jobs, 10*time.Second); len(got) != jobs {
		t.Fatalf("released events: %+v", got)
	}
}

// TestWebhooks_e2e_kill_restart: on Redis, lockapi is killed (-9) while
// a backlog is being delivered to a receiver that failed its first
// deliveries, and restarted: every event arrives at least once, from the
// persisted cursor, once the dead instance's lease expired.
func TestWebhooks_e2e_kill_restart(t *testing.T) {
	rs := redistest.Start(t)
	s := startServer(t, append([]string{"LOCKAPI_REDIS_URL=" + rs.URL}, webhookEnv...))
	a := newAPI(t, s)
	r := newE2EReceiver(t, 3, 100*time.Millisecond) // slow: a backlog builds
	subscribe(t, a, r, "e2e:", "granted", "released")

	var want []string
	for i := range 10 {
		g, rel := job(t, a, fmt.Sprintf("e2e:before-%d", i), "ci")
		want = append(want, g, rel)
	}
	r.waitFor(t, 4, 30*time.Second)
	s.killNow()
	if n := len(r.delivered()); n >= len(want) {
		t.Fatalf("the backlog was delivered before the kill (%d events): the test kills nothing mid-backlog", n)
	}
	s.start()
	for i := range 5 {
		g, rel := job(t, a, fmt.Sprintf("e2e:after-%d", i), "ci")
		want = append(want, g, rel)
	}
	// The dead instance's lease lasts up to 10 s.
	got := r.waitFor(t, len(want), 60*time.Second)
	checkAll(t, got, want)
	r.mu.Lock()
	t.Logf("%d requests, %d failed on purpose, %d duplicates for %d events", r.requests, r.failed, r.dups, len(want))
	r.mu.Unlock()
}
