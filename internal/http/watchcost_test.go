package http_test

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/metrics"
)

// TestWatchCost measures what 1,000 waiting blocking queries (an SDK's loss
// watches of 1,000 held leases) cost the server, beside 1,000 waiting
// acquires (parked off net/http): goroutines, and heap and stacks in use.
// The clients are raw connections, which keep no goroutine and no buffer
// of this process, so the difference is the server's. A measurement, not
// an assertion: it runs only with LOCKAPI_TEST_WATCH_COST=1, without -race
// (docs/PERFORMANCE.md, "Watched leases"):
//
//	LOCKAPI_TEST_WATCH_COST=1 go test -count=1 -run TestWatchCost -v ./internal/http/
func TestWatchCost(t *testing.T) {
	if os.Getenv("LOCKAPI_TEST_WATCH_COST") == "" {
		t.Skip("a measurement: set LOCKAPI_TEST_WATCH_COST=1")
	}
	const n = 1000
	for _, tc := range []struct {
		what, gauge string
		request     func(i int, index string) string
	}{
		{"blocking queries", "lockapi_blocking_queries", func(i int, index string) string {
			return request("GET", fmt.Sprintf("/v1/locks/cost-%d?wait_ms=60000&index=%s", i, url.QueryEscape(index)), "")
		}},
		{"waiting acquires", "lockapi_waiters", func(i int, _ string) string {
			return request("POST", fmt.Sprintf("/v1/locks/cost-%d/leases", i), `{"owner":"b","wait_ms":60000}`)
		}},
	} {
		// A server of its own each, so that one's freed memory is not the
		// next one's.
		t.Run(tc.what, func(t *testing.T) {
			e := MustOpenEnv(t, lockhttp.Config{Metrics: metrics.New(), MaxWaitersPerCaller: n})
			indexes := make([]string, n)
			for i := range n {
				name := fmt.Sprintf("cost-%d", i)
				e.Acquire(name, `{"owner":"a","ttl_ms":600000}`)
				indexes[i] = e.Do("GET", "/v1/locks/"+name, "").Header.Get("X-Lock-Index")
			}
			before := memNow()
			for i := range n {
				c, err := net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				if _, err := io.WriteString(c, tc.request(i, indexes[i])); err != nil {
					t.Fatal(err)
				}
			}
			waitGauge(t, e, tc.gauge, n)
			time.Sleep(time.Second) // let the waits settle: a measurement, not a test
			after := memNow()
			t.Logf("%d %s: goroutines %+d (%.2f each), heap in use %+.1f MB, stacks %+.1f MB (%.1f KB each, heap and stacks)",
				n, tc.what, after.goroutines-before.goroutines, float64(after.goroutines-before.goroutines)/n,
				mb(after.heap-before.heap), mb(after.stack-before.stack),
				float64(after.heap+after.stack-before.heap-before.stack)/n/1024)
		})
	}
}

type memSample struct {
	goroutines  int
	heap, stack int64
}

func memNow() memSample {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return memSample{runtime.NumGoroutine(), int64(m.HeapInuse), int64(m.StackInuse)}
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }
