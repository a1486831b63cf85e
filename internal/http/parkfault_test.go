package http_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/metrics"
)

// TestWait_PanickingStore runs a wait whose store panics on the try after
// the wake-up, on both waiting paths: parked off net/http, and in net/http
// (a request that closes its connection cannot park). Either way the
// server answers 500, logs the panic with the request's id, counts it,
// gives back the waiter's place and the watch, and lives on.
func TestWait_PanickingStore(t *testing.T) {
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
			e.Hooks.OnTryAcquire = func(ctx context.Context, req lock.AcquireRequest) (lock.Grant, error) {
				if panicking.Load() {
					panic("store fault")
				}
				return e.Mem.TryAcquire(ctx, req)
			}
			holder := e.Acquire("q", `{"owner":"a","ttl_ms":600000}`)
			c := dialRaw(t, e)
			id := "panic-" + strings.ToLower(tc.name)
			c.send(request("POST", "/v1/locks/q/leases", `{"owner":"b","wait_ms":60000}`, append([]string{"X-Request-ID", id}, tc.header...)...))
			Within(t, e.Hooks.Watching, "waiter registered")
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
			if l := e.Acquire("q", `{"owner":"c"}`); l.Owner != "c" {
				t.Fatalf("lease = %+v", l)
			}
		})
	}
}
