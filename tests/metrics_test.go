package tests

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrape reads /metrics into series -> value, keyed by the series line
// without its value, e.g. `lockapi_grants_total{kind="fresh"}`.
func scrape(t *testing.T, a *api) map[string]float64 {
	t.Helper()
	r := a.must("GET", "/metrics", nil)
	if r.Status != 200 {
		t.Fatalf("/metrics: %d %s", r.Status, r.Body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(r.Body)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("unparsable metrics line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// waitForWaiters waits until the server reports n waiting requests on its
// lockapi_waiters gauge: an event from the server, not a guess.
func waitForWaiters(t *testing.T, a *api, n float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if got := scrape(t, a)["lockapi_waiters"]; got >= n {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("lockapi_waiters = %v, want %v", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestMetrics_series_exist_and_move(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	before := scrape(t, a)
	for _, name := range []string{"process_resident_memory_bytes", "go_goroutines", "lockapi_waiters", "lockapi_pubsub_reconnects_total"} {
		if _, ok := before[name]; !ok {
			t.Errorf("series %s is missing", name)
		}
	}

	l := a.mustAcquire("metrics:job-42", map[string]any{"owner": "w", "ttl_ms": 60000}, 201)
	a.mustAcquire("metrics:job-42", map[string]any{"owner": "w"}, 200)
	if r := a.acquire("metrics:job-42", map[string]any{"owner": "other"}); r.Status != 409 {
		t.Fatalf("%d", r.Status)
	}
	got := make(chan response, 1)
	go func() {
		r, _ := a.do(context.Background(), "POST", "/v1/locks/metrics:job-42/leases", map[string]any{"owner": "waiter", "wait_ms": 30000})
		got <- r
	}()
	waitForWaiters(t, a, 1)
	a.must("DELETE", "/v1/locks/metrics:job-42/leases/"+l.LeaseID+"?all=true", nil)
	if r := <-got; r.Status != 201 {
		t.Fatalf("waiter: %d %s", r.Status, r.Body)
	}
	if r := a.must("POST", "/v1/locks/metrics:job-42/leases/"+l.LeaseID+"/renew", map[string]any{}); r.Status != 410 {
		t.Fatalf("renew of a released lease: %d", r.Status)
	}
	a.must("DELETE", "/v1/locks/metrics:job-42", nil)

	after := scrape(t, a)
	for series, min := range map[string]float64{
		`lockapi_grants_total{kind="fresh"}`:                                                      2,
		`lockapi_grants_total{kind="reentrant"}`:                                                  1,
		`lockapi_conflicts_total`:                                                                 1,
		`lockapi_releases_total{kind="lease"}`:                                                    1,
		`lockapi_releases_total{kind="force"}`:                                                    1,
		`lockapi_lease_lost_total`:                                                                1,
		`lockapi_wait_duration_seconds_count{outcome="granted"}`:                                  1,
		`lockapi_http_requests_total{method="POST",route="/v1/locks/{name}/leases",status="201"}`: 2,
		`lockapi_http_request_duration_seconds_count{method="POST",route="/v1/locks/{name}/leases",status="409"}`: 1,
		`lockapi_store_script_duration_seconds_count{script="acquire"}`:                                           4,
		`lockapi_store_script_duration_seconds_count{script="release"}`:                                           1,
	} {
		if d := after[series] - before[series]; d < min {
			t.Errorf("%s moved by %v, want at least %v", series, d, min)
		}
	}
	if after["lockapi_waiters"] != 0 {
		t.Errorf("lockapi_waiters = %v after the wait ended", after["lockapi_waiters"])
	}
	for series := range after {
		if strings.Contains(series, "job-42") {
			t.Fatalf("a lock name is a label: %s", series)
		}
	}
}

func TestMetrics_can_be_turned_off(t *testing.T) {
	s := startServer(t, []string{"LOCKAPI_REDIS_URL=", "LOCKAPI_METRICS=false"})
	if r := newAPI(t, s).must("GET", "/metrics", nil); r.Status != 404 {
		t.Fatalf("/metrics with metrics off: %d", r.Status)
	}
}
