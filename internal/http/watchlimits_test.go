package http_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/metrics"
)

// TestWatchLimits: blocking queries (an SDK's loss watch, one per held lease
// and session) count under limits of their own. A caller whose share of
// blocking queries is full can still make a waiting acquire that waits, and
// its next blocking query is refused 429 rate-limited past its own bound.
// On an open server every test client is one caller (its address).
func TestWatchLimits(t *testing.T) {
	t.Parallel()
	const n = 2
	for _, tc := range []struct {
		name string
		cfg  lockhttp.Config
	}{
		{"MaxWatchesPerCaller", lockhttp.Config{MaxWatchesPerCaller: n}},
		{"MaxWatches", lockhttp.Config{MaxWatches: n}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The waiters' share is as small as the watches': before blocking
			// queries had their own limits, they filled it.
			tc.cfg.MaxWaitersPerCaller, tc.cfg.Metrics = n, metrics.New()
			e := MustOpenHookedEnv(t, tc.cfg)
			e.Acquire("watched", `{"owner":"a","ttl_ms":600000}`)
			lockIndex := e.Do("GET", "/v1/locks/watched", "").Header.Get("X-Lock-Index")
			sess := e.CreateSession(`{"ttl_ms":600000}`)
			sessIndex := Decode[lockhttp.Session](t, e.Do("GET", "/v1/sessions/"+sess.SessionID, "")).Index
			lockQuery := "/v1/locks/watched?wait_ms=60000&index=" + url.QueryEscape(lockIndex)

			// One blocking query on the lock, one on the session: the share
			// of blocking queries is full.
			for _, path := range []string{lockQuery, "/v1/sessions/" + sess.SessionID + "?wait_ms=60000&index=" + url.QueryEscape(sessIndex)} {
				dialRaw(t, e).send(request("GET", path, ""))
			}
			waitGauge(t, e, "lockapi_blocking_queries", n)
			waitParked(t, e, 1) // the lock's query; the session's waits in net/http

			over := dialRaw(t, e)
			over.send(request("GET", lockQuery, ""))
			p := WantProblem(t, over.read(), http.StatusTooManyRequests, "rate-limited")
			if !strings.Contains(p.Detail, "blocking queries") {
				t.Errorf("detail = %q, want it to name blocking queries", p.Detail)
			}

			// A waiting acquire still waits (parked), and is granted.
			holder := e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
			c := dialRaw(t, e)
			c.send(request("POST", "/v1/locks/q/leases", `{"owner":"w","wait_ms":60000}`))
			waitParked(t, e, 2)
			got := scrapeMetrics(t, e)
			if got["lockapi_waiters"] != n+1 || got["lockapi_blocking_queries"] != n {
				t.Errorf("lockapi_waiters = %v, lockapi_blocking_queries = %v; want %d and %d",
					got["lockapi_waiters"], got["lockapi_blocking_queries"], n+1, n)
			}
			e.Do("DELETE", "/v1/locks/q/leases/"+holder.LeaseID, "")
			if resp := c.read(); resp.StatusCode != http.StatusCreated {
				t.Fatalf("waiting acquire: %d %s", resp.StatusCode, resp.Body)
			}
		})
	}
}

// waitGauge waits until the server's gauge reads want.
func waitGauge(t *testing.T, e *Env, gauge string, want float64) {
	t.Helper()
	for deadline := time.Now().Add(promptly); ; time.Sleep(5 * time.Millisecond) {
		got := scrapeMetrics(t, e)[gauge]
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", gauge, got, want)
		}
	}
}
