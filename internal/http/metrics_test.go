package http_test

import (
	"bufio"
	"bytes"
	"net/http"
	"strconv"
	"testing"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/metrics"
)

// scrapeMetrics reads the server's registry, as GET /metrics serves it, into
// series -> value, keyed like `lockapi_grants_total{kind="fresh"}`.
func scrapeMetrics(t *testing.T, e *Env) map[string]float64 {
	t.Helper()
	resp := e.Do("GET", "/metrics", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, resp.Body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(resp.Body))
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		i := bytes.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(string(line[i+1:]), 64)
		if err != nil {
			t.Fatalf("unparsable metrics line %q", line)
		}
		out[string(line[:i])] = v
	}
	return out
}

// Every handler that grants, refuses or releases a lease reports it to the
// metrics itself: a handler that stopped reporting, or a route renamed
// under a counter that matched its pattern, fails here. Answers that change
// nothing (a replayed grant, a retried release, a force release of a free
// lock) count nothing.
func TestMetrics_handlers_report_lock_events(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{Metrics: metrics.New()})
	want := map[string]float64{}
	check := func(step string) {
		t.Helper()
		got := scrapeMetrics(t, e)
		for series, n := range want {
			if got[series] != n {
				t.Errorf("after %s: %s = %v, want %v", step, series, got[series], n)
			}
		}
	}
	status := func(resp Response, code int) Response {
		t.Helper()
		if resp.StatusCode != code {
			t.Fatalf("%s %s: %d %s, want %d", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, resp.Body, code)
		}
		return resp
	}
	const (
		fresh     = `lockapi_grants_total{kind="fresh"}`
		reentrant = `lockapi_grants_total{kind="reentrant"}`
		conflicts = `lockapi_conflicts_total`
		lost      = `lockapi_lease_lost_total`
		byLease   = `lockapi_releases_total{kind="lease"}`
		signed    = `lockapi_releases_total{kind="signed_url"}`
		forced    = `lockapi_releases_total{kind="force"}`
	)
	for _, series := range []string{fresh, reentrant, conflicts, lost, byLease, signed, forced} {
		want[series] = 0
	}
	check("start") // every series exists before its first event

	l := e.Acquire("m:a", `{"owner":"a"}`)
	e.Acquire("m:a", `{"owner":"a"}`)
	status(e.Do("POST", "/v1/locks/m:a/leases", `{"owner":"b"}`), http.StatusConflict)
	want[fresh], want[reentrant], want[conflicts] = 1, 1, 1
	check("acquire")

	status(e.Do("POST", "/v1/locks/m:i/leases", `{"owner":"a"}`, "Idempotency-Key", "k"), http.StatusCreated)
	status(e.Do("POST", "/v1/locks/m:i/leases", `{"owner":"a"}`, "Idempotency-Key", "k"), http.StatusCreated)
	want[fresh] = 2
	check("a replayed acquire")

	status(e.Do("DELETE", "/v1/locks/m:a/leases/"+l.LeaseID, ""), http.StatusOK)
	status(e.Do("DELETE", "/v1/locks/m:a/leases/"+l.LeaseID, ""), http.StatusOK)
	status(e.Do("DELETE", "/v1/locks/m:a/leases/"+l.LeaseID, ""), http.StatusOK) // a retry
	status(e.Do("POST", "/v1/locks/m:a/leases/"+l.LeaseID+"/renew", `{}`), http.StatusGone)
	want[byLease], want[lost] = 2, 1
	check("release and renew")

	s := e.Acquire("m:s", `{"owner":"a"}`)
	status(e.Do("POST", s.ReleaseURL, ""), http.StatusOK)
	status(e.Do("POST", s.ReleaseURL, ""), http.StatusGone)
	want[fresh], want[signed], want[lost] = 3, 1, 2
	check("signed release")

	e.Acquire("m:f", `{"owner":"a"}`)
	status(e.Do("DELETE", "/v1/locks/m:f", ""), http.StatusOK)
	status(e.Do("DELETE", "/v1/locks/m:f", ""), http.StatusOK) // free already
	want[fresh], want[forced] = 4, 1
	check("force release")

	ml := Decode[lockhttp.MultiLeases](t, status(e.Do("POST", "/v1/leases", `{"locks":["m:x","m:y"],"owner":"a"}`), http.StatusCreated))
	status(e.Do("POST", "/v1/leases", `{"locks":["m:x","m:y"],"owner":"b"}`), http.StatusConflict)
	status(e.Do("DELETE", "/v1/leases?id=m:x/"+ml.Leases[0].LeaseID+"&id=m:y/"+ml.Leases[1].LeaseID, ""), http.StatusOK)
	want[fresh], want[conflicts], want[byLease] = 6, 2, 4
	check("multi-lock")

	// Requests are still counted by route pattern.
	want[`lockapi_http_requests_total{method="POST",route="/v1/locks/{name}/leases",status="409"}`] = 1
	check("all")
}
