package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
	"github.com/lockapi/lockapi/internal/testkit/apitest"
)

// promptly bounds anything that should happen "at once": generous, so that a
// loaded CI machine does not flake, yet far below the waits under test.
const promptly = 5 * time.Second

// Env is a server on :0 backed by a real memory store, with a contract
// checking client.
type Env struct {
	t      *testing.T
	Mem    *memory.Store
	Hooks  *HookStore
	Server *lockhttp.Server
	URL    string
	Client *http.Client
	Logs   *syncBuffer

	validateRequests bool
}

// MustOpenEnv starts a server with cfg; it is closed when the test ends.
func MustOpenEnv(t *testing.T, cfg lockhttp.Config) *Env {
	t.Helper()
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	return mustOpenEnvOn(t, mem, &HookStore{Store: mem}, cfg)
}

// KeySpec is one API key of a keyed test server (MustOpenKeyedEnv).
type KeySpec struct {
	Principal string
	Scopes    []auth.Scope
	Patterns  []string
}

// MustOpenKeyedEnv is MustOpenEnv on a server that knows one new API key
// per spec, and no other: it returns each key's Authorization header pair,
// in the order of specs, for Do (e.Do(method, path, body, as[i]...)).
func MustOpenKeyedEnv(t *testing.T, specs ...KeySpec) (e *Env, as [][]string) {
	t.Helper()
	lines := make([]string, 0, len(specs))
	for _, s := range specs {
		key, line, err := auth.NewKey(s.Principal, s.Scopes, s.Patterns)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line)
		as = append(as, []string{"Authorization", "Bearer " + key})
	}
	keys, err := auth.ParseKeys(strings.Join(lines, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return MustOpenEnv(t, lockhttp.Config{Keys: keys}), as
}

func mustOpenEnvOn(t *testing.T, mem *memory.Store, hooks *HookStore, cfg lockhttp.Config) *Env {
	t.Helper()
	logs := &syncBuffer{}
	cfg.Logger = zerolog.New(logs)
	srv := mustOpenServer(t, hooks, cfg)
	e := &Env{Mem: mem, Hooks: hooks, Server: srv, URL: srv.URL(), Logs: logs, validateRequests: true}
	return e.For(t)
}

// mustOpenServer starts a server on store with cfg, after setup (such as
// mounting a dashboard) when given; it is closed when the test ends.
func mustOpenServer(t *testing.T, store lock.Store, cfg lockhttp.Config, setup ...func(*lockhttp.Server)) *lockhttp.Server {
	t.Helper()
	srv := lockhttp.NewServer(store, withRelease(cfg))
	for _, f := range setup {
		f(srv)
	}
	if err := srv.Open("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), promptly)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return srv
}

// withRelease gives cfg a release signer with a random secret, unless it
// has one: a server takes its secrets from its caller.
func withRelease(cfg lockhttp.Config) lockhttp.Config {
	if cfg.Release == nil {
		cfg.Release, _ = auth.NewReleaseSigner(auth.RandomSecret())
	}
	return cfg
}

// For returns a copy of e that reports to t, for use in subtests.
func (e *Env) For(t *testing.T) *Env {
	t.Helper()
	c := *e
	c.t = t
	var opts []apitest.Option
	if c.validateRequests {
		// Well-formed requests are checked against the spec too.
		opts = append(opts, apitest.ValidateRequests())
	}
	c.Client = apitest.NewClient(t, e.URL, opts...)
	return &c
}

// Malformed returns a copy of e whose client checks only the responses, for
// requests that break the spec on purpose.
func (e *Env) Malformed(t *testing.T) *Env {
	t.Helper()
	c := *e
	c.validateRequests = false
	return c.For(t)
}

// Response is a finished exchange.
type Response struct {
	*http.Response
	Body []byte
}

// Do sends a request with a raw body ("" for none) and optional header
// pairs; a body is sent as application/json unless a Content-Type is given.
func (e *Env) Do(method, path, body string, header ...string) Response {
	e.t.Helper()
	return e.DoContext(context.Background(), method, path, body, header...)
}

func (e *Env) DoContext(ctx context.Context, method, path, body string, header ...string) Response {
	e.t.Helper()
	resp, err := e.send(ctx, method, path, body, header...)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// send is Do without failing the test, for use off the test goroutine.
func (e *Env) send(ctx context.Context, method, path, body string, header ...string) (Response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.URL+path, rd)
	if err != nil {
		return Response{}, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	given := map[string]bool{} // a name given twice is sent twice
	for i := 0; i+1 < len(header); i += 2 {
		switch {
		case header[i+1] == "":
			req.Header.Del(header[i])
		case given[header[i]]:
			req.Header.Add(header[i], header[i+1])
		default:
			req.Header.Set(header[i], header[i+1])
		}
		given[header[i]] = true
	}
	resp, err := e.Client.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return Response{Response: resp, Body: b}, err
}

// Acquire acquires name for owner and fails the test unless it is granted.
func (e *Env) Acquire(name, body string) lockhttp.Lease {
	e.t.Helper()
	resp := e.Do("POST", "/v1/locks/"+name+"/leases", body)
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		e.t.Fatalf("acquire %s: %d %s", name, resp.StatusCode, resp.Body)
	}
	return Decode[lockhttp.Lease](e.t, resp)
}

// State inspects name directly in the store.
func (e *Env) State(name string) lock.State {
	e.t.Helper()
	st, err := e.Mem.Inspect(context.Background(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// Decode decodes a JSON response body strictly.
func Decode[T any](tb testing.TB, resp Response) T {
	tb.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(resp.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		tb.Fatalf("decode %T from %s: %v", v, resp.Body, err)
	}
	return v
}

// Problem is a decoded problem+json body.
type Problem struct {
	Type        string                  `json:"type"`
	Title       string                  `json:"title"`
	Status      int                     `json:"status"`
	Detail      string                  `json:"detail"`
	Instance    string                  `json:"instance"`
	Lock        string                  `json:"lock"`
	Holder      *lockhttp.ProblemHolder `json:"holder"`
	QueueLength *int                    `json:"queue_length"`
	// LockDelayRemainingMs is on lock-delay.
	LockDelayRemainingMs int64                 `json:"lock_delay_remaining_ms"`
	Errors               []lockhttp.FieldError `json:"errors"`
	OldestID             string                `json:"oldest_id"`
}

// WantProblem fails the test unless resp is a problem of the given status
// and type slug.
func WantProblem(tb testing.TB, resp Response, status int, slug string) Problem {
	tb.Helper()
	if resp.StatusCode != status {
		tb.Fatalf("status = %d, want %d; body %s", resp.StatusCode, status, resp.Body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		tb.Fatalf("Content-Type = %q, want application/problem+json", ct)
	}
	p := Decode[Problem](tb, resp)
	if want := lockhttp.ProblemTypeBase + slug; p.Type != want {
		tb.Fatalf("type = %q, want %q", p.Type, want)
	}
	if p.Status != status {
		tb.Fatalf("problem status = %d, want %d", p.Status, status)
	}
	return p
}

// HookStore wraps the real store to let tests see and steer it: Watch
// announces each registration on Watching and each unregistration on
// Unwatched, and the optional funcs replace methods to inject faults.
type HookStore struct {
	lock.Store
	Watching     chan lock.WatchKind
	Unwatched    chan struct{}
	OnInspect    func(ctx context.Context, name string) (lock.State, error)
	OnPing       func(ctx context.Context) error
	OnTryAcquire func(ctx context.Context, req lock.AcquireRequest) (lock.Grant, error)
	OnReadEvents func(ctx context.Context, after string, limit int) ([]lock.Event, error)
	// OnNotify, when set, runs before each watcher's Notify (a fault may
	// panic there).
	OnNotify func(f func())
	// OnClose, when set, runs before each watcher's Close.
	OnClose func()
	// OnJoin, when set, runs before each watcher's Join.
	OnJoin func()
	// NoSessions makes the store declare no sessions, as redlock (and a
	// Redis Cluster without events) does, and refuse an acquire that
	// names one.
	NoSessions bool
}

// Sessions shows the wrapped store's sessions, unless NoSessions.
func (h *HookStore) Sessions() lock.Sessions {
	if h.NoSessions {
		return nil
	}
	return h.Store.Sessions()
}

// Events, ReadEvents, WaitEvents and LastEventID show the wrapped store's
// event log, when it has one: without, the server answers as with events
// off.
func (h *HookStore) Events() lock.EventLog {
	if h.Store.Events() == nil {
		return nil
	}
	return h
}

func (h *HookStore) ReadEvents(ctx context.Context, after string, limit int) ([]lock.Event, error) {
	if h.OnReadEvents != nil {
		return h.OnReadEvents(ctx, after, limit)
	}
	return h.Store.Events().ReadEvents(ctx, after, limit)
}

func (h *HookStore) WaitEvents(ctx context.Context, after string, limit int) ([]lock.Event, error) {
	return h.Store.Events().WaitEvents(ctx, after, limit)
}

func (h *HookStore) LastEventID(ctx context.Context) (string, error) {
	return h.Store.Events().LastEventID(ctx)
}

func (h *HookStore) ReadEventsBefore(ctx context.Context, before string, limit int) ([]lock.Event, error) {
	return h.Store.Events().ReadEventsBefore(ctx, before, limit)
}

func (h *HookStore) TryAcquire(ctx context.Context, req lock.AcquireRequest) (lock.Grant, error) {
	if h.OnTryAcquire != nil {
		return h.OnTryAcquire(ctx, req)
	}
	if h.NoSessions && req.Session != "" {
		return lock.Grant{}, lock.Unsupported("this store keeps no sessions")
	}
	return h.Store.TryAcquire(ctx, req)
}

func (h *HookStore) Watch(ctx context.Context, name string, kind lock.WatchKind) (lock.Watcher, error) {
	w, err := h.Store.Watch(ctx, name, kind)
	if err != nil {
		return nil, err
	}
	if h.Watching != nil {
		h.Watching <- kind
	}
	return &hookWatcher{Watcher: w, closed: h.Unwatched, onNotify: h.OnNotify, onClose: h.OnClose, onJoin: h.OnJoin}, nil
}

func (h *HookStore) Inspect(ctx context.Context, name string) (lock.State, error) {
	if h.OnInspect != nil {
		return h.OnInspect(ctx, name)
	}
	return h.Store.Inspect(ctx, name)
}

func (h *HookStore) Ping(ctx context.Context) error {
	if h.OnPing != nil {
		return h.OnPing(ctx)
	}
	return h.Store.Ping(ctx)
}

type hookWatcher struct {
	lock.Watcher
	closed   chan struct{}
	once     sync.Once
	onNotify func(f func())
	onClose  func()
	onJoin   func()
}

func (w *hookWatcher) Join(waiterID string) {
	if w.onJoin != nil {
		w.onJoin()
	}
	w.Watcher.Join(waiterID)
}

func (w *hookWatcher) Notify(f func()) {
	if w.onNotify != nil {
		w.onNotify(f)
	}
	w.Watcher.Notify(f)
}

func (w *hookWatcher) Close() {
	if w.onClose != nil {
		w.onClose()
	}
	w.Watcher.Close()
	w.once.Do(func() {
		if w.closed != nil {
			w.closed <- struct{}{}
		}
	})
}

// MustOpenHookedEnv is MustOpenEnv with Watch announced on buffered channels.
func MustOpenHookedEnv(t *testing.T, cfg lockhttp.Config) *Env {
	t.Helper()
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	hooks := &HookStore{Store: mem, Watching: make(chan lock.WatchKind, 16), Unwatched: make(chan struct{}, 16)}
	return mustOpenEnvOn(t, mem, hooks, cfg)
}

// Within waits for ch or fails the test after promptly.
func Within[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(promptly):
		tb.Fatalf("%s: nothing after %v", what, promptly)
		var zero T
		return zero
	}
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Lines returns the decoded JSON log lines.
func (b *syncBuffer) Lines(tb testing.TB) []map[string]any {
	tb.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(b.buf.Bytes()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			tb.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
