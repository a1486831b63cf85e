package client_test

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/client"
	"github.com/lockapi/lockapi/client/api"
	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/apitest"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// promptly bounds what should happen "at once": generous, so that a loaded
// CI machine does not flake, yet far below the waits under test.
const promptly = 5 * time.Second

// Env is a real lockapi server on a loopback port and a client of it whose
// requests are recorded and checked against openapi.yaml.
type Env struct {
	t      *testing.T
	Store  lock.Store
	cfg    lockhttp.Config
	Addr   string
	URL    string
	Rec    *Recorder
	Client *client.Client
	API    *api.ClientWithResponses

	mu     sync.Mutex
	server *lockhttp.Server // nil while stopped
}

// MustOpenMemoryEnv starts a server on the memory store.
func MustOpenMemoryEnv(t *testing.T, cfg lockhttp.Config) *Env {
	t.Helper()
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	return mustOpenEnv(t, mem, cfg)
}

// MustOpenRedisEnv starts a server on a Redis store, on a redis-server of
// its own; it returns that too so that tests can stop it.
func MustOpenRedisEnv(t *testing.T, cfg lockhttp.Config) (*Env, *redistest.Server) {
	t.Helper()
	rs := redistest.Start(t)
	rdb, err := redisstore.NewClient(redisstore.ClientConfig{URL: rs.URL}) // as lockapi serve does
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := redisstore.New(rdb, redisstore.Options{Prefix: "clienttest:", Events: true}) // as lockapi serve does
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return mustOpenEnv(t, st, cfg), rs
}

// DownURL returns the URL of a loopback port where nothing listens.
func DownURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_ = ln.Close()
	return "http://" + ln.Addr().String()
}

// ForEachStore runs body on the memory store and on Redis.
func ForEachStore(t *testing.T, cfg lockhttp.Config, body func(t *testing.T, e *Env)) {
	t.Run("Memory", func(t *testing.T) { body(t, MustOpenMemoryEnv(t, cfg)) })
	t.Run("Redis", func(t *testing.T) {
		e, _ := MustOpenRedisEnv(t, cfg)
		body(t, e)
	})
}

func mustOpenEnv(t *testing.T, st lock.Store, cfg lockhttp.Config) *Env {
	t.Helper()
	cfg.Logger = zerolog.Nop()
	if cfg.Release == nil {
		cfg.Release, _ = auth.NewReleaseSigner(auth.RandomSecret())
	}
	e := &Env{t: t, Store: st, cfg: cfg}
	e.start("127.0.0.1:0")
	e.Addr = strings.TrimPrefix(e.server.URL(), "http://")
	e.URL = e.server.URL()
	e.Rec = &Recorder{base: apitest.NewClient(t, e.URL, apitest.ValidateRequests()).Transport}
	c, err := client.New(e.URL, client.WithHTTPClient(&http.Client{Transport: e.Rec}))
	if err != nil {
		t.Fatal(err)
	}
	e.Client = c
	// The generated client, for the tests that compare the SDK with the
	// server's own answers.
	e.API, err = api.NewClientWithResponses(e.URL, api.WithHTTPClient(&http.Client{Transport: e.Rec}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	return e
}

func (e *Env) start(addr string) {
	e.t.Helper()
	srv := lockhttp.NewServer(e.Store, e.cfg)
	if err := srv.Open(addr); err != nil {
		e.t.Fatalf("open server on %s: %v", addr, err)
	}
	e.mu.Lock()
	e.server = srv
	e.mu.Unlock()
}

// Stop closes the server; its port then refuses connections.
func (e *Env) Stop() {
	e.mu.Lock()
	srv := e.server
	e.server = nil
	e.mu.Unlock()
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), promptly)
	defer cancel()
	if err := srv.Close(ctx); err != nil {
		e.t.Errorf("close server: %v", err)
	}
}

// Resume starts a new server on the same address and store.
func (e *Env) Resume() {
	e.t.Helper()
	e.start(e.Addr)
}

// MustAcquire acquires name and releases it when the test ends, so that no
// watchdog outlives its test.
func (e *Env) MustAcquire(name string, opts client.AcquireOptions) *client.Lease {
	e.t.Helper()
	l, err := e.Client.Acquire(context.Background(), name, opts)
	if err != nil {
		e.t.Fatalf("acquire %q: %v", name, err)
	}
	e.t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

// ForceRelease frees name, as an operator.
func (e *Env) ForceRelease(name string) {
	e.t.Helper()
	released, err := e.Client.ForceRelease(context.Background(), name)
	if err != nil || !released {
		e.t.Fatalf("force release %q: released %v, %v", name, released, err)
	}
}

// Holder returns the owner and hold count of name's holder ("" if free).
func (e *Env) Holder(name string) (owner string, holds int) {
	e.t.Helper()
	st, err := e.Client.Inspect(context.Background(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	if h := st.Holder; st.Held && h != nil {
		return h.Owner, h.HoldCount
	}
	return "", 0
}

// Op classifies a request of the API.
type Op string

const (
	OpAcquire Op = "acquire"
	OpRenew   Op = "renew"
	OpRelease Op = "release"
	OpOther   Op = "other"
)

func classify(r *http.Request) (op Op, leaseID string) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/") // v1 locks NAME leases [ID [renew]]
	switch {
	case r.Method == http.MethodPost && len(parts) == 4 && parts[3] == "leases":
		return OpAcquire, ""
	case r.Method == http.MethodPost && len(parts) == 6 && parts[5] == "renew":
		return OpRenew, parts[4]
	case r.Method == http.MethodDelete && len(parts) == 5 && parts[3] == "leases":
		return OpRelease, parts[4]
	}
	return OpOther, ""
}

// Event is one finished request seen by a Recorder.
type Event struct {
	Op      Op
	LeaseID string
	Status  int // 0 when the request failed
	Err     error
}

// Recorder is an http.RoundTripper around the real transport that counts
// requests, tracks the renewals in flight, and reports every finished
// request on Events.
type Recorder struct {
	base http.RoundTripper
	// RenewDelay holds each renewal this long before sending it, which
	// widens the window in which a renewal is in flight.
	RenewDelay time.Duration

	mu       sync.Mutex
	counts   map[Op]int
	inflight map[string]int     // renewals in flight by lease id
	released map[string]bool    // leases whose Release has returned
	late     []string           // renewals started after their lease's Release returned
	subs     []chan<- Event     // see Subscribe
	started  map[Op]chan<- bool // see OnStart
	keys     []string           // the Idempotency-Key of each acquire, in order
}

// AcquireKeys returns the Idempotency-Key header of every acquire so far.
func (r *Recorder) AcquireKeys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.keys)
}

func (r *Recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	op, id := classify(req)
	r.mu.Lock()
	if r.counts == nil {
		r.counts, r.inflight, r.released = map[Op]int{}, map[string]int{}, map[string]bool{}
	}
	r.counts[op]++
	if op == OpAcquire {
		r.keys = append(r.keys, req.Header.Get("Idempotency-Key"))
	}
	if op == OpRenew {
		r.inflight[id]++
		if r.released[id] {
			r.late = append(r.late, id)
		}
	}
	startCh := r.started[op]
	r.mu.Unlock()
	if startCh != nil {
		select {
		case startCh <- true:
		default:
		}
	}

	if op == OpRenew && r.RenewDelay > 0 {
		time.Sleep(r.RenewDelay)
	}
	resp, err := r.base.RoundTrip(req)

	ev := Event{Op: op, LeaseID: id, Err: err}
	if err == nil {
		ev.Status = resp.StatusCode
	}
	r.mu.Lock()
	if op == OpRenew {
		r.inflight[id]--
	}
	subs := r.subs
	r.mu.Unlock()
	for _, ch := range subs {
		select {
		case ch <- ev:
		default:
		}
	}
	return resp, err
}

// Count returns how many requests of op were sent.
func (r *Recorder) Count(op Op) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[op]
}

// Subscribe returns a channel that receives every finished request from now
// on (as long as it has room).
func (r *Recorder) Subscribe() <-chan Event {
	ch := make(chan Event, 1000)
	r.mu.Lock()
	r.subs = append(r.subs, ch)
	r.mu.Unlock()
	return ch
}

// OnStart returns a channel that receives a value when a request of op
// starts (as long as it has room).
func (r *Recorder) OnStart(op Op) <-chan bool {
	ch := make(chan bool, 100)
	r.mu.Lock()
	if r.started == nil {
		r.started = map[Op]chan<- bool{}
	}
	r.started[op] = ch
	r.mu.Unlock()
	return ch
}

// MarkReleased records that id's Release has returned and reports how many
// of its renewals were then in flight.
func (r *Recorder) MarkReleased(id string) (inflight int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released == nil {
		r.counts, r.inflight, r.released = map[Op]int{}, map[string]int{}, map[string]bool{}
	}
	r.released[id] = true
	return r.inflight[id]
}

// Late returns the leases that had renewals sent after their Release.
func (r *Recorder) Late() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.late...)
}

// WaitFor waits until ch delivers an event that match accepts, n times.
func WaitFor(t *testing.T, ch <-chan Event, n int, what string, match func(Event) bool) {
	t.Helper()
	timeout := time.After(promptly)
	for n > 0 {
		select {
		case ev := <-ch:
			if match(ev) {
				n--
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// MustClose waits for ch to be closed, for at most d.
func MustClose(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
	}
}

// isClosed reports whether ch is closed now.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
