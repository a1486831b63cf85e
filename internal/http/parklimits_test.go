package http_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/metrics"
)

// TestPark_WaiterLimits fills a small waiter limit with parked waiters:
// the next waiter is refused 429, as in net/http, and the parked ones are
// granted in turn as the lock is passed on. On an open server every test
// client is one caller (its address), so either limit is the one reached.
func TestPark_WaiterLimits(t *testing.T) {
	const n = 3
	for _, tc := range []struct {
		name string
		cfg  lockhttp.Config
	}{
		{"MaxWaiters", lockhttp.Config{MaxWaiters: n}},
		{"MaxWaitersPerCaller", lockhttp.Config{MaxWaitersPerCaller: n}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Metrics = metrics.New()
			e := MustOpenHookedEnv(t, tc.cfg)
			holder := e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
			type answer struct {
				status int
				lease  lockhttp.Lease
				err    error
			}
			answers := make(chan answer, n)
			for i := range n {
				c := dialRaw(t, e)
				c.send(request("POST", "/v1/locks/q/leases", `{"owner":"w","wait_ms":60000}`))
				waitParked(t, e, i+1)
				go func() {
					resp, err := http.ReadResponse(c.r, nil)
					a := answer{err: err}
					if err == nil {
						a.status = resp.StatusCode
						body, _ := io.ReadAll(resp.Body)
						a.err = json.Unmarshal(body, &a.lease)
					}
					answers <- a
				}()
			}

			over := dialRaw(t, e)
			over.send(request("POST", "/v1/locks/q/leases", `{"owner":"over","wait_ms":60000}`))
			WantProblem(t, over.read(), http.StatusTooManyRequests, "rate-limited")
			if got := scrapeMetrics(t, e)["lockapi_waiters"]; got != n {
				t.Errorf("waiters = %v, want %d", got, n)
			}

			lease := holder.LeaseID
			for i := range n {
				e.Do("DELETE", "/v1/locks/q/leases/"+lease, "")
				a := Within(t, answers, "a parked waiter granted")
				if a.err != nil || a.status != http.StatusCreated {
					t.Fatalf("waiter %d: status %d, %v", i, a.status, a.err)
				}
				lease = a.lease.LeaseID
			}
			waitParked(t, e, 0)
			if got := scrapeMetrics(t, e)["lockapi_waiters"]; got != 0 {
				t.Errorf("waiters = %v after every grant, want 0", got)
			}
		})
	}
}
