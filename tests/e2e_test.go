package tests

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockapi/lockapi/fence"
	"github.com/lockapi/lockapi/internal/testkit/apitest"
	"github.com/lockapi/lockapi/internal/testkit/fencetest"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// startOnRedis starts a Redis and a lockapi on it.
func startOnRedis(t *testing.T, args ...string) (*server, *redistest.Server) {
	t.Helper()
	rs := redistest.Start(t)
	return startServer(t, []string{"LOCKAPI_REDIS_URL=" + rs.URL}, args...), rs
}

func TestE2E_memory_store_by_default(t *testing.T) {
	s := startServer(t, []string{"LOCKAPI_REDIS_URL="})
	a := newAPI(t, s)
	l := a.mustAcquire("demo", nil, 201)
	if l.FencingToken == 0 || l.HoldCount != 1 {
		t.Fatalf("lease = %+v", l)
	}
	if !hasLine(s.Logs(), "embedded memory store") {
		t.Fatalf("no startup line says the memory store is in use:\n%s", s.Logs())
	}
}

func TestE2E_acquire_reenter_release(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	first := a.mustAcquire("deploy:prod", map[string]any{"owner": "worker-7", "ttl_ms": 30000, "metadata": map[string]string{"job": "nightly"}}, 201)
	again := a.mustAcquire("deploy:prod", map[string]any{"owner": "worker-7"}, 200)
	if again.LeaseID != first.LeaseID || again.FencingToken != first.FencingToken || again.HoldCount != 2 {
		t.Fatalf("reentrant = %+v, first %+v", again, first)
	}
	r := a.acquire("deploy:prod", map[string]any{"owner": "someone-else"})
	if r.Status != 409 {
		t.Fatalf("other owner: %d %s", r.Status, r.Body)
	}
	p := r.problem(t)
	if p.Type != problemType("lock-held") || p.Holder == nil || p.Holder.Owner != "worker-7" || p.Holder.FencingToken != first.FencingToken || r.Header.Get("Retry-After") == "" {
		t.Fatalf("409 = %+v, Retry-After %q", p, r.Header.Get("Retry-After"))
	}
	if rel := a.release(first); rel.Status != 200 || !strings.Contains(string(rel.Body), `"released":false`) {
		t.Fatalf("first release: %d %s", rel.Status, rel.Body)
	}
	if rel := a.release(first); rel.Status != 200 || !strings.Contains(string(rel.Body), `"released":true`) {
		t.Fatalf("second release: %d %s", rel.Status, rel.Body)
	}
	if rel := a.release(first); rel.Status != 200 {
		t.Fatalf("retried release: %d %s", rel.Status, rel.Body)
	}
	if st := a.state("deploy:prod"); st.Held || st.FencingToken != first.FencingToken {
		t.Fatalf("state = %+v", st)
	}
}

func TestE2E_longpoll_handoff(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	holder := a.mustAcquire("handoff", map[string]any{"ttl_ms": 300000}, 201)

	var latencies []time.Duration
	for i := 0; i < 5; i++ {
		got := make(chan response, 1)
		go func() {
			r, err := a.do(context.Background(), "POST", "/v1/locks/handoff/leases", map[string]any{"ttl_ms": 300000, "wait_ms": 30000})
			if err != nil {
				t.Error(err)
			}
			got <- r
		}()
		waitForWaiters(t, a, 1)
		released := time.Now()
		if r := a.release(holder); r.Status != 200 {
			t.Fatalf("release: %d %s", r.Status, r.Body)
		}
		r := <-got
		latency := time.Since(released)
		if r.Status != 201 {
			t.Fatalf("waiter: %d %s", r.Status, r.Body)
		}
		var next Lease
		r.decode(t, &next)
		if next.FencingToken <= holder.FencingToken {
			t.Fatalf("token %d after %d", next.FencingToken, holder.FencingToken)
		}
		latencies = append(latencies, latency)
		holder = next
	}
	t.Logf("release-to-201 hand-off latencies over HTTP: %v", latencies)
	for _, l := range latencies {
		// The holder's TTL is five minutes: a 201 within seconds came from
		// the release notification.
		if l > 3*time.Second {
			t.Fatalf("hand-off took %v", l)
		}
	}
}

func TestE2E_two_waiters_one_at_a_time(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	holder := a.mustAcquire("two", map[string]any{"ttl_ms": 300000}, 201)
	got := make(chan Lease, 2)
	for i := 0; i < 2; i++ {
		go func() {
			r, err := a.do(context.Background(), "POST", "/v1/locks/two/leases", map[string]any{"owner": fmt.Sprint("w", i), "wait_ms": 30000, "ttl_ms": 300000})
			if err != nil || r.Status != 201 {
				t.Errorf("waiter %d: %v %d %s", i, err, r.Status, r.Body)
				return
			}
			var l Lease
			r.decode(t, &l)
			got <- l
		}()
	}
	waitForWaiters(t, a, 2)
	a.release(holder)
	first := <-got
	select {
	case second := <-got:
		t.Fatalf("both waiters got the lock: %+v and %+v", first, second)
	case <-time.After(300 * time.Millisecond):
	}
	a.release(first)
	select {
	case second := <-got:
		if second.FencingToken <= first.FencingToken || second.Owner == first.Owner {
			t.Fatalf("second %+v after %+v", second, first)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second waiter was not granted after the first released")
	}
}

func TestE2E_wait_timeout(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	a.mustAcquire("busy", map[string]any{"ttl_ms": 300000}, 201)
	start := time.Now()
	r := a.acquire("busy", map[string]any{"wait_ms": 1000})
	took := time.Since(start)
	if r.Status != 409 || r.problem(t).Type != problemType("lock-held") {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	if took < 900*time.Millisecond || took > 4*time.Second {
		t.Fatalf("a 1s wait answered after %v", took)
	}
}

func TestE2E_expiry_gives_a_larger_token(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	old := a.mustAcquire("exp", map[string]any{"ttl_ms": 200}, 201)
	next := a.mustAcquire("exp", map[string]any{"wait_ms": 10000}, 201)
	if next.FencingToken <= old.FencingToken {
		t.Fatalf("token %d after %d", next.FencingToken, old.FencingToken)
	}
	r := a.must("POST", "/v1/locks/exp/leases/"+old.LeaseID+"/renew", map[string]any{})
	if r.Status != 410 || r.problem(t).Type != problemType("lease-lost") {
		t.Fatalf("late renew: %d %s", r.Status, r.Body)
	}
	if r := a.release(old); r.Status != 410 {
		t.Fatalf("late release: %d %s", r.Status, r.Body)
	}
	if st := a.state("exp"); !st.Held || st.Holder.FencingToken != next.FencingToken {
		t.Fatalf("the late holder touched the new lease: %+v", st)
	}
}

func TestE2E_concurrent_acquirers_one_wins(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	// At most 250 connections: 1,000 fresh connections at once can overflow
	// the listen backlog of a loaded machine, which tests the kernel, not
	// lockapi. The requests still race for the lock.
	a.c = &http.Client{Transport: &http.Transport{MaxConnsPerHost: 250, MaxIdleConnsPerHost: 250}}
	var created, conflict atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < 1000; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := a.do(context.Background(), "POST", "/v1/locks/stampede/leases", map[string]any{})
			if err != nil {
				t.Error(err)
				return
			}
			switch r.Status {
			case 201:
				created.Add(1)
			case 409:
				conflict.Add(1)
			default:
				t.Errorf("%d %s", r.Status, r.Body)
			}
		}()
	}
	close(start)
	wg.Wait()
	if created.Load() != 1 || conflict.Load() != 999 {
		t.Fatalf("%d created, %d conflicts", created.Load(), conflict.Load())
	}
}

func TestE2E_sequential_cycles(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	start := time.Now()
	// Throughput is cmd/lockbench's to measure; this checks that many
	// cycles in a row each grant a single hold with a token, and free it.
	const n = 200
	for i := 0; i < n; i++ {
		l := a.mustAcquire(fmt.Sprint("cycle:", i), nil, 201)
		if l.FencingToken == 0 || l.HoldCount != 1 {
			t.Fatalf("cycle %d: token %d, hold count %d", i, l.FencingToken, l.HoldCount)
		}
		if r := a.release(l); r.Status != 200 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	}
	t.Logf("%d acquire+release cycles over HTTP in %v", n, time.Since(start))
}

// TestE2E_Kleppmann: A's lease expires while A is paused; B acquires with a
// larger token and writes; A's late write is refused by the fenced resource.
func TestE2E_Kleppmann(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	var storage fencetest.Resource
	leaseA := a.mustAcquire("storage", map[string]any{"owner": "A", "ttl_ms": 100}, 201)
	// A pauses (GC); its lease runs out. B waits and is granted.
	leaseB := a.mustAcquire("storage", map[string]any{"owner": "B", "wait_ms": 10000}, 201)
	if err := storage.Write(leaseB.FencingToken, "B"); err != nil {
		t.Fatal(err)
	}
	if err := storage.Write(leaseA.FencingToken, "A, late"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("A's late write: %v", err)
	}
	if w := storage.Writes(); len(w) != 1 || w[0].Value != "B" {
		t.Fatalf("storage = %+v", w)
	}
}

func TestE2E_client_disconnect_during_wait(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	holder := a.mustAcquire("gone", map[string]any{"ttl_ms": 300000}, 201)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := a.do(ctx, "POST", "/v1/locks/gone/leases", map[string]any{"owner": "departed", "wait_ms": 30000})
		done <- err
	}()
	waitForWaiters(t, a, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request returned %v", err)
	}
	a.release(holder)
	// The departed waiter must not end up holding the lock: it is free now
	// and stays free.
	deadline := time.Now().Add(5 * time.Second)
	for a.state("gone").Held {
		if time.Now().After(deadline) {
			t.Fatalf("the lock is held after its only waiter left: %+v", a.state("gone"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if st := a.state("gone"); st.Held {
		t.Fatalf("a departed waiter was granted the lock: %+v", st.Holder)
	}
}

func TestE2E_blocking_query(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	st := a.state("watched")
	got := make(chan response, 1)
	go func() {
		r, err := a.do(context.Background(), "GET", "/v1/locks/watched?index="+st.Index, nil) // no wait_ms: up to the maximum wait
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	select {
	case r := <-got:
		t.Fatalf("the blocking query returned before any change: %d %s", r.Status, r.Body)
	case <-time.After(200 * time.Millisecond):
	}
	changed := time.Now()
	l := a.mustAcquire("watched", nil, 201)
	r := <-got
	t.Logf("blocking query woke %v after the change", time.Since(changed))
	var now LockState
	r.decode(t, &now)
	if r.Status != 200 || !now.Held || now.Holder.FencingToken != l.FencingToken || now.Index == st.Index || r.Header.Get("X-Lock-Index") != now.Index {
		t.Fatalf("blocking query: %d %s (X-Lock-Index %q)", r.Status, r.Body, r.Header.Get("X-Lock-Index"))
	}
	// With an index that is current and a short wait, it answers after the
	// wait with the same state.
	start := time.Now()
	r2 := a.must("GET", "/v1/locks/watched?index="+now.Index+"&wait_ms=300", nil)
	var same LockState
	r2.decode(t, &same)
	if took := time.Since(start); took < 250*time.Millisecond || same.Index != now.Index {
		t.Fatalf("an unchanged blocking query answered after %v with %+v", took, same)
	}
}

func TestE2E_restart_keeps_leases(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	l := a.mustAcquire("survives", map[string]any{"ttl_ms": 60000}, 201)
	s.restart()
	r := a.must("POST", "/v1/locks/survives/leases/"+l.LeaseID+"/renew", map[string]any{"ttl_ms": 60000})
	if r.Status != 200 {
		t.Fatalf("renew after restart: %d %s", r.Status, r.Body)
	}
	if r := a.release(l); r.Status != 200 {
		t.Fatalf("release after restart: %d %s", r.Status, r.Body)
	}
}

func TestE2E_redis_goes_away(t *testing.T) {
	s, rs := startOnRedis(t)
	if !rs.CanRestart() {
		t.Skip("needs a Redis this test can stop")
	}
	a := newAPI(t, s)
	a.mustAcquire("before", nil, 201)
	rs.Stop(t)
	if r := a.must("GET", "/readyz", nil); r.Status != 503 {
		t.Fatalf("/readyz with Redis down: %d %s", r.Status, r.Body)
	}
	if r := a.must("GET", "/healthz", nil); r.Status != 200 {
		t.Fatalf("/healthz with Redis down: %d %s", r.Status, r.Body)
	}
	r := a.acquire("during", nil)
	if r.Status != 503 || r.problem(t).Type != problemType("unavailable") || r.Header.Get("Retry-After") == "" {
		t.Fatalf("acquire with Redis down: %d %s", r.Status, r.Body)
	}
	if strings.Contains(string(r.Body), "127.0.0.1") || strings.Contains(string(r.Body), "dial") {
		t.Fatalf("the problem leaks internals: %s", r.Body)
	}
	rs.Resume(t)
	deadline := time.Now().Add(20 * time.Second)
	for a.must("GET", "/readyz", nil).Status != 200 {
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not recover")
		}
		time.Sleep(50 * time.Millisecond)
	}
	a.mustAcquire("after", nil, 201)
}

func TestE2E_shutdown_answers_waiters(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	a.mustAcquire("held", map[string]any{"ttl_ms": 300000}, 201)
	got := make(chan response, 1)
	go func() {
		r, _ := a.do(context.Background(), "POST", "/v1/locks/held/leases", map[string]any{"wait_ms": 60000})
		got <- r
	}()
	waitForWaiters(t, a, 1)
	stopped := time.Now()
	// The test waits for its own stop before it ends: a stop still running
	// then would report on a finished test, and outlive it.
	exited := make(chan error, 1)
	go func() { exited <- s.stop() }()
	defer func() { <-exited }()
	select {
	case r := <-got:
		if r.Status != 503 || r.Header.Get("Retry-After") == "" {
			t.Fatalf("waiter at shutdown: %d %s", r.Status, r.Body)
		}
		t.Logf("waiter answered %v after SIGTERM", time.Since(stopped))
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting request was not answered promptly at shutdown")
	}
}

func TestE2E_openapi_served(t *testing.T) {
	s := startServer(t, []string{"LOCKAPI_REDIS_URL="})
	r := newAPI(t, s).must("GET", "/openapi.yaml", nil)
	if r.Status != 200 || !strings.Contains(string(r.Body), "openapi: 3.0.3") || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/yaml") {
		t.Fatalf("%d %q", r.Status, r.Header.Get("Content-Type"))
	}
	_ = http.StatusOK
}

// TestE2E_percent_encoded_names: generated clients percent-encode path
// parameters, so deploy%3Aprod must mean deploy:prod.
func TestE2E_percent_encoded_names(t *testing.T) {
	s := startServer(t, []string{"LOCKAPI_REDIS_URL="})
	// Responses are still validated; kin-openapi's request validation would
	// check the path parameter without decoding it.
	a := &api{t: t, base: s.URL, c: apitest.NewClient(t, s.URL)}
	l := a.mustAcquire("deploy%3Aprod%40eu", nil, 201)
	if l.Lock != "deploy:prod@eu" {
		t.Fatalf("lock = %q", l.Lock)
	}
	if st := a.state("deploy:prod@eu"); !st.Held || st.Holder.FencingToken != l.FencingToken {
		t.Fatalf("state = %+v", st)
	}
	if r := a.must("DELETE", "/v1/locks/deploy%3Aprod%40eu/leases/"+l.LeaseID, nil); r.Status != 200 {
		t.Fatalf("release: %d %s", r.Status, r.Body)
	}
	if r := a.must("GET", "/v1/locks/deploy%2Fprod", nil); r.Status != 400 {
		t.Fatalf("an encoded slash: %d %s", r.Status, r.Body)
	}
}

// TestE2E_http2_waiters: a client can park many waiting requests on one
// HTTP/2 connection (h2c here), and they are woken like any other.
func TestE2E_http2_waiters(t *testing.T) {
	s, _ := startOnRedis(t)
	a := newAPI(t, s)
	holder := a.mustAcquire("h2", map[string]any{"ttl_ms": 300000}, 201)

	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	h2 := &api{t: t, base: s.URL, c: &http.Client{Transport: &http.Transport{Protocols: protocols}}}
	const n = 50
	got := make(chan response, n)
	for i := 0; i < n; i++ {
		go func() {
			r, err := h2.do(context.Background(), "POST", "/v1/locks/h2/leases", map[string]any{"wait_ms": 30000, "ttl_ms": 300000})
			if err != nil {
				t.Error(err)
			}
			got <- r
		}()
	}
	waitForWaiters(t, a, n)
	for i := 0; i < n; i++ {
		if r := a.release(holder); r.Status != 200 {
			t.Fatalf("release: %d %s", r.Status, r.Body)
		}
		r := <-got
		if r.Status != 201 {
			t.Fatalf("waiter %d: %d %s", i, r.Status, r.Body)
		}
		r.decode(t, &holder)
	}
	// The h2 client spoke HTTP/2 over one connection.
	resp, err := h2.c.Get(s.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("protocol %s, want HTTP/2", resp.Proto)
	}
}
