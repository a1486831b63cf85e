package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/client"
	"github.com/lockapi/lockapi/event"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
	"github.com/lockapi/lockapi/internal/webhook"
	"github.com/lockapi/lockapi/internal/webhook/memstate"
)

// promptly bounds what should happen at once: generous for loaded CI
// machines, far below anything under test.
const promptly = 10 * time.Second

// receiver is a webhook receiver as a user would write one: it verifies
// every request the Standard Webhooks way, answers 500 to the first fail
// of them, and records what it accepted.
type receiver struct {
	t      *testing.T
	URL    string
	fail   atomic.Int32 // requests still to fail
	status int          // the failing answer

	mu       sync.Mutex
	secrets  []string
	attempts map[string]int // webhook-id -> requests
	got      []event.Event
	ids      []string // webhook-id of each accepted request
	arrived  chan struct{}
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t, status: http.StatusInternalServerError, attempts: map[string]int{}, arrived: make(chan struct{}, 1000)}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL + "/hooks/lockapi"
	return r
}

func (r *receiver) setSecret(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.secrets = []string{s}
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	v := client.WebhookVerifier{Secrets: r.secrets}
	r.mu.Unlock()
	if _, err := v.Verify(req.Header, body); err != nil {
		r.t.Errorf("receiver: %v (headers %v)", err, req.Header)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	id := req.Header.Get(webhook.HeaderID)
	r.mu.Lock()
	r.attempts[id]++
	r.mu.Unlock()
	if r.fail.Add(-1) >= 0 {
		w.WriteHeader(r.status)
		return
	}
	var p event.Event
	if err := json.Unmarshal(body, &p); err != nil {
		r.t.Errorf("receiver: %v: %s", err, body)
	}
	var raw map[string]any
	_ = json.Unmarshal(body, &raw)
	if _, ok := raw["lease_id"]; ok {
		r.t.Errorf("receiver: a delivery shows the lease id: %s", body)
	}
	if p.ID != id {
		r.t.Errorf("receiver: webhook-id %q, body id %q", id, p.ID)
	}
	r.mu.Lock()
	r.got = append(r.got, p)
	r.ids = append(r.ids, id)
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
	r.arrived <- struct{}{}
}

// waitFor waits until the receiver accepted n requests.
func (r *receiver) waitFor(n int) []event.Event {
	r.t.Helper()
	deadline := time.After(promptly)
	for {
		r.mu.Lock()
		got := slices.Clone(r.got)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-r.arrived:
		case <-deadline:
			r.t.Fatalf("receiver got %d deliveries, want %d: %+v", len(got), n, got)
		}
	}
}

func (r *receiver) payloads() []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// fixture is a memory store, a State and a service delivering from them.
type fixture struct {
	t     *testing.T
	store *memory.Store
	state *memstate.State
	svc   *webhook.Service
	stop  func()

	mu       sync.Mutex
	outcomes map[webhook.Outcome]int
}

func newFixture(t *testing.T, tune func(*webhook.Config)) *fixture {
	t.Helper()
	f := &fixture{t: t, store: memory.New(), state: memstate.New(), outcomes: map[webhook.Outcome]int{}}
	t.Cleanup(func() { _ = f.store.Close() })
	f.svc, f.stop = f.start(f.store, tune)
	t.Cleanup(f.stop)
	return f
}

// start runs one more service (an instance) on the fixture's state.
func (f *fixture) start(st interface {
	lock.Store
	lock.EventLog
}, tune func(*webhook.Config)) (*webhook.Service, func()) {
	cfg := webhook.Config{
		Store:    st,
		Log:      st,
		State:    f.state,
		Policy:   webhook.Policy{AllowPrivate: true},
		Backoff:  webhook.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		LeaseTTL: time.Second,
		Logger:   zerolog.New(zerolog.NewTestWriter(f.t)).Level(zerolog.InfoLevel),
		OnDelivery: func(o webhook.Outcome) {
			f.mu.Lock()
			f.outcomes[o]++
			f.mu.Unlock()
		},
	}
	if tune != nil {
		tune(&cfg)
	}
	svc, err := webhook.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(ctx) }()
	var once sync.Once
	return svc, func() { once.Do(func() { cancel(); <-done }) }
}

func (f *fixture) outcome(o webhook.Outcome) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.outcomes[o]
}

func (f *fixture) subscribe(r *receiver, prefix string, types ...string) webhook.Subscription {
	f.t.Helper()
	sub, err := f.svc.Create(context.Background(), webhook.Spec{URL: r.URL, Prefix: prefix, Types: types})
	if err != nil {
		f.t.Fatal(err)
	}
	r.setSecret(sub.Secrets[0])
	return sub
}

// cycle takes and releases name: a granted and a released event.
func (f *fixture) cycle(name string) {
	f.t.Helper()
	ctx := context.Background()
	g, err := f.store.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "ci-7", Principal: "ci", TTL: time.Minute})
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.store.Release(ctx, lock.LeaseRef{Lock: name, ID: g.Lease.ID}, true); err != nil {
		f.t.Fatal(err)
	}
}

func locksOf(ps []event.Event) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Lock
	}
	return out
}

func TestService_delivers_selected_events_in_order(t *testing.T) {
	f := newFixture(t, nil)
	f.cycle("ci:before") // before the subscription: not delivered
	r := newReceiver(t)
	f.subscribe(r, "ci:", "released")
	for _, name := range []string{"ci:a", "deploy:prod", "ci:b", "ci:c"} {
		f.cycle(name)
	}
	got := r.waitFor(3)
	if want := []string{"ci:a", "ci:b", "ci:c"}; !slices.Equal(locksOf(got), want) {
		t.Fatalf("delivered %v, want %v", locksOf(got), want)
	}
	for _, p := range got {
		if p.Type != lock.EventReleased || p.Owner != "ci-7" || p.Principal != "ci" || p.Mode != event.Exclusive || p.FencingToken == 0 || p.Time.IsZero() {
			t.Fatalf("payload %+v", p)
		}
	}
	waitUntil(t, func() bool { return f.outcome(webhook.OutcomeDelivered) == 3 })
}

func TestService_retries_with_the_same_id_until_a_2xx(t *testing.T) {
	f := newFixture(t, nil)
	r := newReceiver(t)
	r.fail.Store(3)
	f.subscribe(r, "job", "released")
	f.cycle("job")
	f.cycle("job2")
	got := r.waitFor(2)
	r.mu.Lock()
	first := r.attempts[r.ids[0]]
	r.mu.Unlock()
	if first != 4 {
		t.Fatalf("the first event took %d requests, want 3 failures and a success", first)
	}
	if got[0].Lock != "job" || got[1].Lock != "job2" {
		t.Fatalf("order: %v", locksOf(got))
	}
	if n := f.outcome(webhook.OutcomeRejected); n != 3 {
		t.Fatalf("%d rejected outcomes, want 3", n)
	}
	if b := f.svc.RetryBacklog(); b != 0 {
		t.Fatalf("retry backlog %d after delivery", b)
	}
}

func TestService_dead_letters_and_replay(t *testing.T) {
	f := newFixture(t, func(c *webhook.Config) { c.RetryFor = 300 * time.Millisecond })
	r := newReceiver(t)
	r.fail.Store(1 << 30)
	sub := f.subscribe(r, "dl:", "released")
	f.cycle("dl:lost")
	ctx := context.Background()

	var letters []webhook.DeadLetter
	waitUntil(t, func() bool {
		var err error
		letters, err = f.svc.DeadLetters(ctx, sub.ID, "", 10)
		return err == nil && len(letters) == 1
	})
	d := letters[0]
	if d.Attempts < 2 || d.LastStatus != http.StatusInternalServerError || d.LastError == "" {
		t.Fatalf("dead letter %+v", d)
	}
	var p event.Event
	if err := json.Unmarshal(d.Payload, &p); err != nil || p.Lock != "dl:lost" || p.ID != d.EventID {
		t.Fatalf("dead letter payload %s: %v", d.Payload, err)
	}
	if f.outcome(webhook.OutcomeDeadLetter) != 1 {
		t.Fatal("no dead_lettered outcome")
	}

	// The receiver is back: later events flow, and the replay comes with
	// the dead letter's id.
	r.fail.Store(0)
	f.cycle("dl:next")
	r.waitFor(1)
	if err := f.svc.Replay(ctx, sub.ID, d.EventID); err != nil {
		t.Fatal(err)
	}
	got := r.waitFor(2)
	if got[1].ID != d.EventID || got[1].Lock != "dl:lost" {
		t.Fatalf("replay delivered %+v", got[1])
	}
	waitUntil(t, func() bool {
		letters, err := f.svc.DeadLetters(ctx, sub.ID, "", 10)
		return err == nil && len(letters) == 0
	})
	if err := f.svc.Replay(ctx, sub.ID, d.EventID); lock.ErrorCode(err) != webhook.CodeNotFound {
		t.Fatalf("second replay: %v", err)
	}
	if _, err := f.svc.DeadLetters(ctx, "nope", "", 1); lock.ErrorCode(err) != webhook.CodeNotFound {
		t.Fatalf("dead letters of an unknown webhook: %v", err)
	}
}

func TestService_ping(t *testing.T) {
	f := newFixture(t, nil)
	r := newReceiver(t)
	sub := f.subscribe(r, "")
	a, p, err := f.svc.Ping(context.Background(), sub.ID)
	if err != nil || !a.OK() || a.Status != http.StatusNoContent {
		t.Fatalf("ping: %+v %v", a, err)
	}
	got := r.waitFor(1)
	if got[0].Type != webhook.PingType || got[0].ID != p.ID {
		t.Fatalf("ping delivered %+v, sent %+v", got[0], p)
	}
	r.fail.Store(1)
	if a, _, _ := f.svc.Ping(context.Background(), sub.ID); a.OK() || a.Status != 500 || a.Outcome != webhook.OutcomeRejected {
		t.Fatalf("failed ping: %+v", a)
	}
}

// A replay notice that wakes an idle worker delivers nothing: the wake ends
// the wait for an event, and no event came. (It once delivered an empty
// event, with a blank webhook-id, to a catch-all webhook.)
func TestService_woken_idle_worker_delivers_nothing(t *testing.T) {
	f := newFixture(t, nil)
	r := newReceiver(t)
	sub := f.subscribe(r, "")
	ctx := context.Background()
	// Each create is a State notice that wakes every worker.
	for i := range 40 {
		other := newReceiver(t)
		if _, err := f.svc.Create(ctx, webhook.Spec{URL: other.URL + fmt.Sprint(i), Prefix: "elsewhere:"}); err != nil {
			t.Fatal(err)
		}
	}
	_, p, err := f.svc.Ping(ctx, sub.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range r.waitFor(1) {
		if e.ID == "" {
			t.Fatalf("delivered an event with no id: %+v", e)
		}
	}
	if got := r.payloads(); got[0].ID != p.ID {
		t.Fatalf("first delivery %+v, want the ping %s", got[0], p.ID)
	}
}

func TestService_create_refuses_duplicates_and_delete_stops_delivery(t *testing.T) {
	f := newFixture(t, nil)
	r := newReceiver(t)
	sub := f.subscribe(r, "x:", "released", "granted")
	ctx := context.Background()
	_, err := f.svc.Create(ctx, webhook.Spec{URL: r.URL, Prefix: "x:", Types: []string{"granted", "released"}})
	if lock.ErrorCode(err) != webhook.CodeExists {
		t.Fatalf("duplicate: %v", err)
	}
	if err := f.svc.Delete(ctx, sub.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Delete(ctx, sub.ID); lock.ErrorCode(err) != webhook.CodeNotFound {
		t.Fatalf("second delete: %v", err)
	}
	// The worker stops: nothing more is delivered.
	waitUntil(t, func() bool {
		_, err := f.store.Inspect(ctx, webhook.LeaseName(sub.ID))
		st, _ := f.store.Inspect(ctx, webhook.LeaseName(sub.ID))
		return err == nil && !st.Held
	})
	f.cycle("x:after")
	time.Sleep(200 * time.Millisecond)
	if got := r.payloads(); len(got) != 0 {
		t.Fatalf("delivered after delete: %+v", got)
	}
}

// deadable is an instance's view of the store that can die: from then on
// every call fails, as if the process were killed -9 (its lease is never
// released, it only expires).
type deadable struct {
	*memory.Store
	dead atomic.Bool
}

var errDead = lock.Unavailable(io.ErrClosedPipe)

func (d *deadable) Renew(ctx context.Context, l lock.LeaseRef, ttl time.Duration) (lock.Lease, error) {
	if d.dead.Load() {
		return lock.Lease{}, errDead
	}
	return d.Store.Renew(ctx, l, ttl)
}

func (d *deadable) Release(ctx context.Context, l lock.LeaseRef, all bool) (lock.ReleaseResult, error) {
	if d.dead.Load() {
		return lock.ReleaseResult{}, errDead
	}
	return d.Store.Release(ctx, l, all)
}

// TestService_another_instance_takes_over: two instances deliver one
// subscription; the one holding its lease dies mid-backlog, and the other
// takes over within the lease's TTL and resumes from the cursor, so every
// event arrives at least once.
func TestService_another_instance_takes_over(t *testing.T) {
	f := newFixture(t, nil)
	f.stop() // the fixture's own instance is not used
	a := &deadable{Store: f.store}
	svcA, stopA := f.start(a, func(c *webhook.Config) { c.Owner = "instance-a" })
	defer stopA()
	r := newReceiver(t)
	sub, err := svcA.Create(context.Background(), webhook.Spec{URL: r.URL, Prefix: "t:", Types: []string{"released"}})
	if err != nil {
		t.Fatal(err)
	}
	r.setSecret(sub.Secrets[0])
	ctx := context.Background()
	waitUntil(t, func() bool {
		st, err := f.store.Inspect(ctx, webhook.LeaseName(sub.ID))
		return err == nil && st.Held && st.Holder.Owner == "instance-a"
	})
	_, stopB := f.start(f.store, func(c *webhook.Config) { c.Owner = "instance-b" })
	defer stopB()

	f.cycle("t:1")
	r.waitFor(1)
	// A dies while the receiver refuses: a backlog builds.
	r.fail.Store(1 << 30)
	f.cycle("t:2")
	f.cycle("t:3")
	waitUntil(t, func() bool { return f.outcome(webhook.OutcomeRejected) > 0 })
	a.dead.Store(true)
	stopA()
	died := time.Now()
	r.fail.Store(0)
	f.cycle("t:4")

	// At least once: an event may come twice (the dead instance's last
	// attempt may have reached the receiver), none may be missing.
	seenAll := func() bool {
		seen := map[string]bool{}
		for _, p := range r.payloads() {
			seen[p.Lock] = true
		}
		return seen["t:1"] && seen["t:2"] && seen["t:3"] && seen["t:4"]
	}
	deadline := time.Now().Add(promptly)
	for !seenAll() {
		if time.Now().After(deadline) {
			t.Fatalf("not every event was delivered: %v", locksOf(r.payloads()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(died)
	st, _ := f.store.Inspect(ctx, webhook.LeaseName(sub.ID))
	if !st.Held || st.Holder.Owner != "instance-b" {
		t.Fatalf("lease after the takeover: %+v", st.Holder)
	}
	if took > 3*time.Second {
		t.Fatalf("the takeover took %v with a 1 s lease", took)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(promptly)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The workers' lease is validated once, by New: a store takes acquires as
// valid, and a worker would otherwise try an invalid one for ever.
func TestNew_refuses_an_invalid_worker_lease(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	for name, tune := range map[string]func(*webhook.Config){
		"Owner": func(c *webhook.Config) { c.Owner = strings.Repeat("o", lock.MaxOwnerLen+1) },
		"TTL":   func(c *webhook.Config) { c.LeaseTTL = time.Millisecond },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := webhook.Config{Store: mem, Log: mem, State: memstate.New()}
			tune(&cfg)
			if _, err := webhook.New(cfg); lock.ErrorCode(err) != lock.CodeInvalid {
				t.Fatalf("New = %v, want invalid", err)
			}
		})
	}
}

// waitCounter is an event log that counts the blocking reads made of it
// at once.
type waitCounter struct {
	lock.EventLog
	now, most atomic.Int32
}

func (l *waitCounter) WaitEvents(ctx context.Context, after string, limit int) ([]lock.Event, error) {
	n := l.now.Add(1)
	defer l.now.Add(-1)
	for m := l.most.Load(); n > m && !l.most.CompareAndSwap(m, n); m = l.most.Load() {
	}
	return l.EventLog.WaitEvents(ctx, after, limit)
}

// However many webhooks an instance delivers, its workers share one reader
// of the event log: one blocking read at a time (on Redis, one connection
// rather than one per webhook out of the pool the acquires need).
func TestService_many_webhooks_share_one_read_of_the_log(t *testing.T) {
	var log *waitCounter
	f := newFixture(t, func(c *webhook.Config) {
		log = &waitCounter{EventLog: c.Log}
		c.Log = log
	})
	const hooks = 40
	receivers := make([]*receiver, hooks)
	for i := range receivers {
		receivers[i] = newReceiver(t)
		f.subscribe(receivers[i], "many:", "released")
	}
	f.cycle("many:a")
	for _, r := range receivers {
		if got := r.waitFor(1); got[0].Lock != "many:a" {
			t.Fatalf("delivered %+v", got)
		}
	}
	if most := log.most.Load(); most != 1 {
		t.Fatalf("%d blocking reads of the log at once for %d webhooks, want 1", most, hooks)
	}
}
