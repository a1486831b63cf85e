package http_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/metrics"
)

// TestPark_BlockingQuery: a blocking query on a lock is parked off net/http
// as a waiting acquire is (an SDK's loss watch holds one per held lease),
// answered on the lock's change with its new index on the same connection,
// which then serves the next request; it is not timed as an acquire's
// wait; and a client that hangs up frees its place.
func TestPark_BlockingQuery(t *testing.T) {
	t.Parallel()
	e := MustOpenHookedEnv(t, lockhttp.Config{Metrics: metrics.New()})
	holder := e.Acquire("w", `{"owner":"a","ttl_ms":600000}`)
	index := e.Do("GET", "/v1/locks/w", "").Header.Get("X-Lock-Index")
	query := func(index string) string {
		return "/v1/locks/w?wait_ms=60000&index=" + url.QueryEscape(index)
	}

	c := dialRaw(t, e)
	c.send(request("GET", query(index), "", "X-Request-ID", "query-1"))
	waitParked(t, e, 1)
	e.Do("DELETE", "/v1/locks/w/leases/"+holder.LeaseID, "")
	resp := c.read()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("status %d, close %v: %s", resp.StatusCode, resp.Close, resp.Body)
	}
	next := resp.Header.Get("X-Lock-Index")
	if st := Decode[lockhttp.LockState](t, resp); st.Held || next == "" || next == index || st.Index != next ||
		resp.Header.Get("X-Request-ID") != "query-1" {
		t.Errorf("state %+v, X-Lock-Index %q (was %q), header %v", st, next, index, resp.Header)
	}
	waitParked(t, e, 0)
	if line := accessLine(t, e, "query-1"); line["route"] != "/v1/locks/{name}" || line["status"] != float64(200) {
		t.Errorf("access-log line = %v", line)
	}
	c.send(request("GET", "/v1/locks/w", ""))
	if resp := c.read(); resp.StatusCode != http.StatusOK {
		t.Fatalf("next request on the connection: %d %s", resp.StatusCode, resp.Body)
	}
	for series, v := range scrapeMetrics(t, e) {
		if strings.HasPrefix(series, "lockapi_wait_duration_seconds_count") && v != 0 {
			t.Errorf("%s = %v: a blocking query is timed as an acquire's wait", series, v)
		}
	}

	gone := dialRaw(t, e)
	gone.send(request("GET", query(next), ""))
	waitParked(t, e, 1)
	waitGauge(t, e, "lockapi_blocking_queries", 1)
	gone.conn.Close()
	waitParked(t, e, 0)
	waitGauge(t, e, "lockapi_blocking_queries", 0)
}

// TestPark_BlockingQueryPanickingStore: a store that panics while a parked
// blocking query looks again is answered 500 internal, as a handler's
// panic is, counted, and the query's watch and place are given back.
func TestPark_BlockingQueryPanickingStore(t *testing.T) {
	t.Parallel()
	e := MustOpenHookedEnv(t, lockhttp.Config{Metrics: metrics.New()})
	var panicking atomic.Bool
	e.Hooks.OnInspect = func(ctx context.Context, name string) (lock.State, error) {
		if panicking.Load() {
			panic("store fault")
		}
		return e.Mem.Inspect(ctx, name)
	}
	holder := e.Acquire("w", `{"owner":"a","ttl_ms":600000}`)
	index := e.Do("GET", "/v1/locks/w", "").Header.Get("X-Lock-Index")
	c := dialRaw(t, e)
	c.send(request("GET", "/v1/locks/w?wait_ms=60000&index="+url.QueryEscape(index), ""))
	Within(t, e.Hooks.Watching, "query watching")
	waitParked(t, e, 1)
	panicking.Store(true)
	e.Do("DELETE", "/v1/locks/w/leases/"+holder.LeaseID, "")
	WantProblem(t, c.read(), http.StatusInternalServerError, "internal")
	Within(t, e.Hooks.Unwatched, "watch closed")
	waitParked(t, e, 0)
	panicking.Store(false)
	got := scrapeMetrics(t, e)
	if got["lockapi_panics_total"] != 1 || got["lockapi_blocking_queries"] != 0 {
		t.Errorf("lockapi_panics_total = %v, lockapi_blocking_queries = %v; want 1 and 0",
			got["lockapi_panics_total"], got["lockapi_blocking_queries"])
	}
}
