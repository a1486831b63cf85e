package http_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/metrics"
	"github.com/lockapi/lockapi/internal/store/memory"
)

// TestWait_PanickingStore runs a wait whose store panics on the try after
// the wake-up, on both waiting paths: parked off net/http, and in net/http
// (a request that closes its connection cannot park). Either way the
// server answers 500, logs the panic with the request's id, counts it,
// gives back the waiter's place and the watch, and lives on.
func TestWait_PanickingStore(t *testing.T) {
	for _, tc := range []struct {
		name, path, body string
		header           []string
		// tries is the waiter's last try before it sleeps.
		tries int32
	}{
		{"Parked", "/v1/locks/q/leases", `{"owner":"b","wait_ms":60000}`, nil, 2},
		{"NetHTTP", "/v1/locks/q/leases", `{"owner":"b","wait_ms":60000}`, []string{"Connection", "close"}, 2},
		// m:a, then q in the way; again once q is watched.
		{"ParkedMulti", "/v1/leases", `{"locks":["q","m:a"],"owner":"b","wait_ms":60000}`, nil, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := MustOpenHookedEnv(t, lockhttp.Config{Metrics: metrics.New()})
			var panicking atomic.Bool
			var tries atomic.Int32
			asleep := make(chan struct{})
			e.Hooks.OnTryAcquire = func(ctx context.Context, req lock.AcquireRequest) (lock.Grant, error) {
				if panicking.Load() {
					panic("store fault")
				}
				g, err := e.Mem.TryAcquire(ctx, req)
				if req.Owner == "b" && tries.Add(1) == tc.tries {
					close(asleep)
				}
				return g, err
			}
			holder := e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
			c := dialRaw(t, e)
			id := "panic-" + strings.ToLower(tc.name)
			c.send(request("POST", tc.path, tc.body, append([]string{"X-Request-ID", id}, tc.header...)...))
			Within(t, asleep, "waiter asleep")
			if tc.header == nil {
				waitParked(t, e, 1)
			}
			panicking.Store(true)
			e.Do("DELETE", "/v1/locks/q/leases/"+holder.LeaseID, "")

			WantProblem(t, c.read(), http.StatusInternalServerError, "internal")
			Within(t, e.Hooks.Unwatched, "watch closed")
			waitParked(t, e, 0)
			if line := accessLine(t, e, id); line["status"] != float64(http.StatusInternalServerError) {
				t.Errorf("access-log line = %v", line)
			}
			logged := false
			for _, line := range e.Logs.Lines(t) {
				if line["message"] == "internal error" && line["request_id"] == id &&
					strings.Contains(line["error"].(string), "store fault") && line["stack"] != nil {
					logged = true
				}
			}
			if !logged {
				t.Errorf("no internal-error line with the panic and its stack for %s", id)
			}
			got := scrapeMetrics(t, e)
			if got["lockapi_panics_total"] != 1 || got["lockapi_waiters"] != 0 {
				t.Errorf("panics %v, waiters %v", got["lockapi_panics_total"], got["lockapi_waiters"])
			}

			// The server lives on, and so do its locks.
			panicking.Store(false)
			if st := e.State("m:a"); st.Held {
				t.Errorf("m:a held by %q", st.Holder.Owner)
			}
			if l := e.Acquire("q", `{"owner":"c"}`); l.Owner != "c" {
				t.Fatalf("lease = %+v", l)
			}
		})
	}
}

// logGate holds up the access-log line of one request until release is
// closed: the parked path logs a request just before it writes the answer.
type logGate struct {
	*syncBuffer
	line             []byte
	reached, release chan struct{}
	once             sync.Once
}

func (g *logGate) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"message":"request"`)) && bytes.Contains(p, g.line) {
		g.once.Do(func() {
			close(g.reached)
			<-g.release
		})
	}
	return g.syncBuffer.Write(p)
}

// TestPark_UndeliveredGrantGivenBack: a parked acquire is granted, and its
// client resets the connection just before the answer is written. The
// write fails, and the server releases the grant rather than leave it held
// until its TTL.
func TestPark_UndeliveredGrantGivenBack(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	hooks := &HookStore{Store: mem, Watching: make(chan lock.WatchKind, 16), Unwatched: make(chan struct{}, 16)}
	logs := &syncBuffer{}
	gate := &logGate{syncBuffer: logs, line: []byte(`"request_id":"undelivered"`),
		reached: make(chan struct{}), release: make(chan struct{})}
	srv := mustOpenServer(t, hooks, lockhttp.Config{Logger: zerolog.New(gate), Metrics: metrics.New()})
	e := (&Env{Mem: mem, Hooks: hooks, Server: srv, URL: srv.URL(), Logs: logs, validateRequests: true}).For(t)

	holder := e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
	c := dialRaw(t, e)
	c.send(request("POST", "/v1/locks/q/leases", `{"owner":"b","ttl_ms":600000,"wait_ms":60000}`, "X-Request-ID", "undelivered"))
	waitParked(t, e, 1)
	e.Do("DELETE", "/v1/locks/q/leases/"+holder.LeaseID, "")

	Within(t, gate.reached, "the grant answered")
	if err := c.conn.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	c.conn.Close() // a reset: the server's write fails
	close(gate.release)

	for deadline := time.Now().Add(promptly); scrapeMetrics(t, e)["lockapi_grants_returned_total"] != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("grants returned: %v, want 1", scrapeMetrics(t, e)["lockapi_grants_returned_total"])
		}
	}
	if st := e.State("q"); st.Held {
		t.Fatalf("q held by %q after its answer could not be written", st.Holder.Owner)
	}
}

// TestWait_NotifyPanics: the store's Notify panics as a wait parks, on
// both waiting paths. The wait ends as a look's panic ends it: answered
// 500 on the connection, no longer parked, its watch closed; and the next
// waiter is woken by a release (no leaked watch swallows the wake-up).
func TestWait_NotifyPanics(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header []string
	}{
		{"Parked", nil},
		{"NetHTTP", []string{"Connection", "close"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := MustOpenHookedEnv(t, lockhttp.Config{Metrics: metrics.New()})
			var panicking atomic.Bool
			e.Hooks.OnNotify = func(f func()) {
				if f != nil && panicking.Load() {
					panic("notify fault")
				}
			}
			holder := e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
			panicking.Store(true)
			c := dialRaw(t, e)
			_ = c.conn.SetReadDeadline(time.Now().Add(promptly))
			c.send(request("POST", "/v1/locks/q/leases", `{"owner":"b","wait_ms":60000}`, tc.header...))

			WantProblem(t, c.read(), http.StatusInternalServerError, "internal")
			Within(t, e.Hooks.Unwatched, "watch closed")
			waitParked(t, e, 0)

			panicking.Store(false)
			next := dialRaw(t, e)
			_ = next.conn.SetReadDeadline(time.Now().Add(promptly))
			next.send(request("POST", "/v1/locks/q/leases", `{"owner":"c","wait_ms":60000}`))
			waitParked(t, e, 1)
			e.Do("DELETE", "/v1/locks/q/leases/"+holder.LeaseID, "")
			if resp := next.read(); resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
				t.Fatalf("next waiter: %d %s", resp.StatusCode, resp.Body)
			}
			if st := e.State("q"); !st.Held || st.Holder.Owner != "c" {
				t.Fatalf("q = %+v, want held by c", st)
			}
		})
	}
}

// TestAcquireAll_PanicGivesBackEarlierNames: the store panics on the
// second name of a multi-lock. The server answers 500, and the first name,
// already taken, is given back rather than held until its TTL.
func TestAcquireAll_PanicGivesBackEarlierNames(t *testing.T) {
	e := MustOpenHookedEnv(t, lockhttp.Config{Metrics: metrics.New()})
	e.Hooks.OnTryAcquire = func(ctx context.Context, req lock.AcquireRequest) (lock.Grant, error) {
		if req.Lock == "m:b" {
			panic("store fault")
		}
		return e.Mem.TryAcquire(ctx, req)
	}
	resp := e.Do("POST", "/v1/leases", `{"locks":["m:b","m:a"],"owner":"x","ttl_ms":600000}`)
	WantProblem(t, resp, http.StatusInternalServerError, "internal")
	if st := e.State("m:a"); st.Held {
		t.Fatalf("m:a held by %q after the multi-lock panicked", st.Holder.Owner)
	}
}

// TestAcquire_AnswerPanicGivesBackGrant: writing a granted acquire's answer
// panics, on the parked path, the net/http waiting path and a multi-lock.
// The client is answered 500 and never learns its lease: the server gives
// the grant back (counted) rather than keep it until its TTL.
func TestAcquire_AnswerPanicGivesBackGrant(t *testing.T) {
	for _, tc := range []struct {
		name, path, body string
		header           []string
	}{
		{"Parked", "/v1/locks/q/leases", `{"owner":"b","ttl_ms":600000,"wait_ms":60000}`, nil},
		{"NetHTTP", "/v1/locks/q/leases", `{"owner":"b","ttl_ms":600000,"wait_ms":60000}`, []string{"Connection", "close"}},
		{"ParkedMulti", "/v1/leases", `{"locks":["q","m:a"],"owner":"b","ttl_ms":600000,"wait_ms":60000}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := MustOpenHookedEnv(t, lockhttp.Config{Metrics: metrics.New()})
			holder := e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
			c := dialRaw(t, e)
			_ = c.conn.SetReadDeadline(time.Now().Add(promptly))
			c.send(request("POST", tc.path, tc.body, tc.header...))
			Within(t, e.Hooks.Watching, "waiter watching")
			if tc.header == nil {
				waitParked(t, e, 1)
			}
			lockhttp.FailNextGrantAnswer()
			e.Do("DELETE", "/v1/locks/q/leases/"+holder.LeaseID, "")

			WantProblem(t, c.read(), http.StatusInternalServerError, "internal")
			for _, name := range []string{"q", "m:a"} {
				if st := e.State(name); st.Held {
					t.Errorf("%s held by %q after its answer panicked", name, st.Holder.Owner)
				}
			}
			if got := scrapeMetrics(t, e)["lockapi_grants_returned_total"]; got == 0 {
				t.Errorf("grants returned: %v", got)
			}
		})
	}
}

// TestWait_CleanupPanicKeepsGrant: a waiter is granted, and the store
// panics as the wait lets go of its watch (Notify(nil), or Close). The
// grant is answered all the same: a cleanup's panic must not turn it into
// a 500 that leaves the lock held by a lease nobody knows.
func TestWait_CleanupPanicKeepsGrant(t *testing.T) {
	for _, tc := range []struct {
		name, path, body string
		header           []string
		notify           bool // panic in Notify(nil), else in Close
	}{
		{"ParkedNotify", "/v1/locks/q/leases", `{"owner":"b","wait_ms":60000}`, nil, true},
		{"ParkedClose", "/v1/locks/q/leases", `{"owner":"b","wait_ms":60000}`, nil, false},
		{"NetHTTPClose", "/v1/locks/q/leases", `{"owner":"b","wait_ms":60000}`, []string{"Connection", "close"}, false},
		{"ParkedMultiClose", "/v1/leases", `{"locks":["q","m:a"],"owner":"b","wait_ms":60000}`, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := MustOpenHookedEnv(t, lockhttp.Config{Metrics: metrics.New()})
			var panicking atomic.Bool
			e.Hooks.OnNotify = func(f func()) {
				if f == nil && tc.notify && panicking.Load() {
					panic("notify fault")
				}
			}
			e.Hooks.OnClose = func() {
				if !tc.notify && panicking.Load() {
					panic("close fault")
				}
			}
			holder := e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
			c := dialRaw(t, e)
			_ = c.conn.SetReadDeadline(time.Now().Add(promptly))
			c.send(request("POST", tc.path, tc.body, tc.header...))
			Within(t, e.Hooks.Watching, "waiter watching")
			if tc.header == nil {
				waitParked(t, e, 1)
			}
			panicking.Store(true)
			e.Do("DELETE", "/v1/locks/q/leases/"+holder.LeaseID, "")

			if resp := c.read(); resp.StatusCode != http.StatusCreated {
				t.Fatalf("answer %d %s, want 201", resp.StatusCode, resp.Body)
			}
			panicking.Store(false)
			if st := e.State("q"); !st.Held || st.Holder.Owner != "b" {
				t.Fatalf("q = %+v, want held by b", st)
			}
		})
	}
}

// TestWait_JoinPanicClosesWatch: the store panics as a waiter joins its
// watch. The server answers 500, and the watch is closed, not leaked.
func TestWait_JoinPanicClosesWatch(t *testing.T) {
	e := MustOpenHookedEnv(t, lockhttp.Config{Metrics: metrics.New()})
	e.Hooks.OnJoin = func() { panic("join fault") }
	e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
	resp := e.Do("POST", "/v1/locks/q/leases", `{"owner":"b","wait_ms":60000}`)
	WantProblem(t, resp, http.StatusInternalServerError, "internal")
	Within(t, e.Hooks.Unwatched, "watch closed")
}
