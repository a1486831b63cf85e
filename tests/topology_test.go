package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// The tests in this file run two lockapi processes on one real Sentinel set
// or Cluster (internal/testkit/redistest), so that a waiter and the releaser that
// wakes it are on different instances: the wake-up can only come through
// Redis pub/sub. Holders take five-minute TTLs, so a grant within seconds of
// a release came from the release's notification, not from expiry.

const (
	// handOffBound is how soon after a release the waiter on the other
	// instance must be granted. Hand-offs take milliseconds on loopback; the
	// bound is generous so that a loaded -race run does not flake.
	handOffBound = 2 * time.Second
	// holdTTL is the holders' TTL: far beyond any bound here.
	holdTTL = 300000
	// failoverWaitMs is how long a waiter parked across a failover waits:
	// longer than a failover can take (redistest bounds it at 20 s).
	failoverWaitMs = 60000
)

// startPair starts two lockapi instances on the same Redis deployment, and
// checks that their startup line names every address of redisURL.
func startPair(t *testing.T, mode, redisURL string) (a, b *api) {
	t.Helper()
	env := []string{"LOCKAPI_REDIS_MODE=" + mode, "LOCKAPI_REDIS_URL=" + redisURL}
	sa, sb := startServer(t, env), startServer(t, env)
	u, err := url.Parse(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	var startup string // logged before /healthz answers, read by a goroutine
	for deadline := time.Now().Add(5 * time.Second); startup == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for line := range strings.Lines(sa.Logs()) {
			if strings.Contains(line, "using Redis store") {
				startup = line
			}
		}
	}
	for _, addr := range append([]string{u.Host}, u.Query()["addr"]...) {
		if !strings.Contains(startup, addr) {
			t.Errorf("the startup line does not name %s: %s", addr, startup)
		}
	}
	return newAPI(t, sa), newAPI(t, sb)
}

// waitIdle waits until a reports no waiting requests, so that the next
// waitForWaiters counts new waiters, not ones still on their way out (the
// gauge drops only after the answer is written).
func waitIdle(t *testing.T, a *api) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for scrape(t, a)["lockapi_waiters"] != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("lockapi_waiters = %v, want 0", scrape(t, a)["lockapi_waiters"])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// longPoll sends an acquire of name by owner to a that waits up to waitMs,
// and returns the channel its answer arrives on.
func longPoll(t *testing.T, a *api, name, owner string, waitMs int) <-chan response {
	got := make(chan response, 1)
	go func() {
		r, err := a.do(context.Background(), "POST", "/v1/locks/"+name+"/leases",
			map[string]any{"owner": owner, "ttl_ms": holdTTL, "wait_ms": waitMs})
		if err != nil {
			t.Errorf("waiter %s on %s: %v", owner, name, err)
		}
		got <- r
	}()
	return got
}

// granted waits for a waiter's answer and checks that it is a fresh grant
// whose fencing token is larger than prev. It returns the lease and how long
// after since it arrived; a waiter that is still waiting long after bound
// missed its wake-up.
func granted(t *testing.T, got <-chan response, since time.Time, prev uint64, bound time.Duration) (Lease, time.Duration) {
	t.Helper()
	select {
	case r := <-got:
		took := time.Since(since)
		if r.Status != 201 {
			t.Fatalf("waiter answered %d %s after %v, want 201", r.Status, r.Body, took)
		}
		var l Lease
		r.decode(t, &l)
		if l.FencingToken <= prev {
			t.Fatalf("waiter granted token %d after token %d", l.FencingToken, prev)
		}
		if took > bound {
			t.Fatalf("waiter granted %v after the release, bound %v", took, bound)
		}
		return l, took
	case <-time.After(bound + 10*time.Second):
		t.Fatalf("waiter not granted %v after the release: a lost wake-up", bound+10*time.Second)
		return Lease{}, 0
	}
}

// handOffRound parks one waiter on to for each held lock, then releases the
// holders one by one on from; each waiter must be granted within
// handOffBound with a larger fencing token. It returns the new leases (held
// through to) and the release-to-201 latencies.
func handOffRound(t *testing.T, from, to *api, holders []Lease, round int) ([]Lease, []time.Duration) {
	t.Helper()
	waitIdle(t, to)
	waiters := make([]<-chan response, len(holders))
	for i, h := range holders {
		waiters[i] = longPoll(t, to, h.Lock, fmt.Sprintf("%s-r%d", h.Lock, round), 30000)
	}
	waitForWaiters(t, to, float64(len(holders)))
	next := make([]Lease, len(holders))
	latencies := make([]time.Duration, len(holders))
	for i, h := range holders {
		released := time.Now()
		if r := from.release(h); r.Status != 200 || !strings.Contains(string(r.Body), `"released":true`) {
			t.Fatalf("release %s: %d %s", h.Lock, r.Status, r.Body)
		}
		next[i], latencies[i] = granted(t, waiters[i], released, h.FencingToken, handOffBound)
	}
	return next, latencies
}

// handOffs passes each lock back and forth between a and b for rounds
// rounds, starting from holders on a, and returns the last holders (on b
// after an odd number of rounds) and every latency.
func handOffs(t *testing.T, a, b *api, names []string, rounds int) ([]Lease, []time.Duration) {
	t.Helper()
	holders := make([]Lease, len(names))
	for i, name := range names {
		holders[i] = a.mustAcquire(name, map[string]any{"owner": name + "-r0", "ttl_ms": holdTTL}, 201)
	}
	insts := [2]*api{a, b}
	var all []time.Duration
	for round := 1; round <= rounds; round++ {
		var latencies []time.Duration
		holders, latencies = handOffRound(t, insts[(round+1)%2], insts[round%2], holders, round)
		all = append(all, latencies...)
	}
	return holders, all
}

// releaseAfterFailover releases l on a, retrying while a answers 503 as it
// may while it finds the new master, and returns when the attempt that
// succeeded was sent.
func releaseAfterFailover(t *testing.T, a *api, l Lease) time.Time {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	retries := 0
	for {
		sent := time.Now()
		r := a.release(l)
		switch {
		case r.Status == 200 && strings.Contains(string(r.Body), `"released":true`):
			t.Logf("release after the failover answered 200 in %v, after %d answers of 503", time.Since(sent).Round(time.Microsecond), retries)
			return sent
		case r.Status == 503 && time.Now().Before(deadline):
			retries++
			time.Sleep(10 * time.Millisecond)
		case r.Status == 410:
			t.Fatalf("the failover lost the holder's lease (replication should have carried it): %s", r.Body)
		default:
			t.Fatalf("release after the failover: %d %s (after %d answers of 503)", r.Status, r.Body, retries)
		}
	}
}

// waiterAcrossFailover parks a waiter on b for holder's lock (held through
// a), runs failover, then releases on a: the waiter must be granted within
// handOffBound of the release.
func waiterAcrossFailover(t *testing.T, a, b *api, holder Lease, failover func()) {
	t.Helper()
	waitIdle(t, b)
	got := longPoll(t, b, holder.Lock, holder.Lock+"-after-failover", failoverWaitMs)
	waitForWaiters(t, b, 1)
	failover()
	select {
	case r := <-got:
		t.Fatalf("the parked waiter answered during the failover, before any release: %d %s", r.Status, r.Body)
	default:
	}
	released := releaseAfterFailover(t, a, holder)
	_, took := granted(t, got, released, holder.FencingToken, handOffBound)
	t.Logf("waiter parked across the failover on the other instance granted %v after the release (bound %v)", took.Round(time.Microsecond), handOffBound)
}

func logLatencies(t *testing.T, what string, ls []time.Duration) {
	t.Helper()
	var worst time.Duration
	rounded := make([]time.Duration, len(ls))
	for i, l := range ls {
		worst = max(worst, l)
		rounded[i] = l.Round(time.Microsecond)
	}
	t.Logf("%s: release-to-201 latencies %v (max %v, bound %v)", what, rounded, worst.Round(time.Microsecond), handOffBound)
}

// TestE2E_sentinel_handoff_across_instances: on one Sentinel set, a lock
// passes between two lockapi instances, the waiter always on the instance
// that did not release; and a waiter parked across a failover is woken by a
// release on the other instance on the new master.
func TestE2E_sentinel_handoff_across_instances(t *testing.T) {
	t.Parallel()
	sen := redistest.StartSentinel(t)
	a, b := startPair(t, "sentinel", sen.URL())

	_, latencies := handOffs(t, a, b, []string{"sentinel:x"}, 5)
	logLatencies(t, "Sentinel, 5 hand-offs alternating between instances", latencies)

	holder := a.mustAcquire("sentinel:parked", map[string]any{"owner": "holder", "ttl_ms": holdTTL}, 201)
	waiterAcrossFailover(t, a, b, holder, func() {
		old, cur := sen.Failover(t)
		t.Logf("Sentinel failover %s -> %s", old, cur)
	})
}

// TestE2E_cluster_handoff_across_nodes: on one Cluster, locks on every
// master pass between two lockapi instances (sharded pub/sub, one
// subscription per master and instance); a waiter parked across its
// master's failover is woken by a release on the other instance; and
// listing pages through the held locks of every shard.
func TestE2E_cluster_handoff_across_nodes(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	a, b := startPair(t, "cluster", cl.URL())
	masters := cl.Masters(t)

	// One lock name per master.
	var names []string
	seen := map[string]bool{}
	for i := 0; len(names) < len(masters); i++ {
		if i > 1000 {
			t.Fatalf("found lock names on only %d of %d masters", len(names), len(masters))
		}
		name := fmt.Sprintf("cluster:%d", i)
		if m := cl.MasterForKey(t, "{"+name+"}").Addr(); !seen[m] {
			seen[m] = true
			names = append(names, name)
			t.Logf("lock %s lives on master %s", name, m)
		}
	}
	// Two rounds: from a to b, then back; the holders end on a.
	holders, latencies := handOffs(t, a, b, names, 2)
	logLatencies(t, fmt.Sprintf("Cluster, 2 hand-offs each way on each of %d masters", len(masters)), latencies)

	listed := holdSpread(t, cl, a, b, 30)
	checkListing(t, b, listed)
	checkListing(t, a, listed)

	old := cl.MasterForKey(t, "{"+holders[0].Lock+"}")
	waiterAcrossFailover(t, a, b, holders[0], func() {
		cur := cl.FailoverReplicaOf(t, old)
		t.Logf("Cluster failover of %s's master %s -> %s", holders[0].Lock, old, cur)
	})
	// The shard layout changed: the listing still finds every lock once.
	checkListing(t, b, listed)
}

// holdSpread acquires n locks named list:NN, alternately through a and b,
// checks that they live on every master, and returns their fencing tokens
// by name.
func holdSpread(t *testing.T, cl *redistest.Cluster, a, b *api, n int) map[string]uint64 {
	t.Helper()
	held := make(map[string]uint64, n)
	perMaster := map[string]int{}
	for i := range n {
		name := fmt.Sprintf("list:%02d", i)
		via := a
		if i%2 == 1 {
			via = b
		}
		held[name] = via.mustAcquire(name, map[string]any{"ttl_ms": holdTTL}, 201).FencingToken
		perMaster[cl.MasterForKey(t, "{"+name+"}").Addr()]++
	}
	for _, m := range cl.Masters(t) {
		if perMaster[m.Addr()] == 0 {
			t.Fatalf("none of the %d listed locks lives on master %s: %v", n, m, perMaster)
		}
	}
	t.Logf("%d held locks per master: %v", n, perMaster)
	return held
}

// checkListing pages through GET /v1/locks?prefix=list: on a with a small
// limit and checks that every lock of want is listed exactly once, as held
// with its fencing token, and nothing else.
func checkListing(t *testing.T, a *api, want map[string]uint64) {
	t.Helper()
	const limit = 7
	count := map[string]int{}
	cursor := ""
	pages := 0
	for {
		pages++
		if pages > 100 {
			t.Fatalf("listing did not end after %d pages (limit %d, %d locks held)", pages-1, limit, len(want))
		}
		path := fmt.Sprintf("/v1/locks?prefix=list:&limit=%d", limit)
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		r := a.must("GET", path, nil)
		if r.Status != 200 {
			t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
		}
		var page struct {
			Locks      []LockState `json:"locks"`
			NextCursor *string     `json:"next_cursor"`
		}
		r.decode(t, &page)
		for _, st := range page.Locks {
			count[st.Lock]++
			token, ok := want[st.Lock]
			switch {
			case !ok:
				t.Errorf("listed %s, which is not one of the held locks", st.Lock)
			case !st.Held || st.Holder == nil || st.Holder.FencingToken != token:
				t.Errorf("listed %s as %+v, want held with token %d", st.Lock, st, token)
			}
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	for name := range want {
		if count[name] != 1 {
			t.Errorf("%s listed %d times, want once", name, count[name])
		}
	}
	t.Logf("listing with limit %d: %d locks in %d pages", limit, len(count), pages)
}

// serveExit runs lockapi serve with env, expecting it to refuse to start,
// and returns its exit code and what it wrote to stderr. A process that is
// still running after 20 s serves instead, which fails the test.
func serveExit(t *testing.T, env []string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "serve", "--addr", freeAddr(t))
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	// Killed by the deadline, rather than exited on its own as the
	// deadline passed.
	if ps := cmd.ProcessState; ps != nil && !ps.Exited() && ctx.Err() != nil {
		t.Fatalf("lockapi serve did not exit within 20 s, so it serves on a wrong configuration:\n%s%s", stdout.String(), stderr.String())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run lockapi: %v", err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// wantRefused checks that lockapi serve with env exits with status 2 and a
// log line on stderr that says "bad Redis configuration" and every reason,
// and that it never listened.
func wantRefused(t *testing.T, env []string, reasons ...string) {
	t.Helper()
	code, stderr := serveExit(t, env)
	if code != 2 {
		t.Errorf("exit status %d, want 2", code)
	}
	found := false
	for _, line := range strings.Split(stderr, "\n") {
		ok := strings.Contains(line, "bad Redis configuration")
		for _, r := range reasons {
			ok = ok && strings.Contains(line, r)
		}
		if ok && !found {
			found = true
			t.Logf("exit status %d, stderr: %s", code, line)
		}
	}
	if !found {
		t.Errorf("no stderr line says %q with %q", "bad Redis configuration", reasons)
	}
	if strings.Contains(stderr, "lockapi listening") {
		t.Errorf("lockapi listened before exiting")
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", stderr)
	}
}

// TestConfig_topology_mismatch_exits_2: a Redis configuration that does not
// match the deployment is refused at startup with status 2 and a line that
// says why; lockapi never falls back to another mode.
func TestConfig_topology_mismatch_exits_2(t *testing.T) {
	t.Parallel()
	sen := redistest.StartSentinel(t)
	plain := redistest.Start(t)

	t.Run("ErrSentinelURLWithoutMasterName", func(t *testing.T) {
		// The sentinels of sen, without ?master_name=.
		u := "redis://" + sen.SentinelAddrs[0] + "/0?addr=" + strings.Join(sen.SentinelAddrs[1:], "&addr=")
		wantRefused(t, []string{"LOCKAPI_REDIS_MODE=sentinel", "LOCKAPI_REDIS_URL=" + u}, "master_name")
	})
	t.Run("ErrClusterSeedNotClusterNode", func(t *testing.T) {
		wantRefused(t, []string{"LOCKAPI_REDIS_MODE=cluster", "LOCKAPI_REDIS_URL=redis://" + plain.Addr},
			"not a cluster node", plain.Addr)
	})
	t.Run("ErrMinReplicasAboveReplicas", func(t *testing.T) {
		wantRefused(t, []string{"LOCKAPI_REDIS_MODE=sentinel", "LOCKAPI_REDIS_URL=" + sen.URL(), "LOCKAPI_MIN_REPLICAS=2"},
			"min_replicas is 2", "has 1 replicas connected")
	})
	t.Run("OK_MinReplicasMet", func(t *testing.T) {
		// The same Sentinel set with a count it meets: the refusal above
		// was about the count.
		s := startServer(t, []string{"LOCKAPI_REDIS_MODE=sentinel", "LOCKAPI_REDIS_URL=" + sen.URL(), "LOCKAPI_MIN_REPLICAS=1"})
		a := newAPI(t, s)
		if r := a.must("GET", "/readyz", nil); r.Status != 200 {
			t.Fatalf("/readyz: %d %s", r.Status, r.Body)
		}
		a.mustAcquire("replicated", nil, 201)
	})
}

// TestE2E_redlock_across_instances: on three independent masters, a lock
// passes between two lockapi instances in redlock mode, the waiter always on
// the instance that did not release; what the mode does not offer answers
// 501; and a URL with an even number of masters, or fewer than three, is
// refused at startup.
func TestE2E_redlock_across_instances(t *testing.T) {
	t.Parallel()
	rl := redistest.StartRedlock(t, 3)
	a, b := startPair(t, "redlock", rl.URL())

	holders, latencies := handOffs(t, a, b, []string{"redlock:x"}, 5)
	logLatencies(t, "Redlock, 5 hand-offs alternating between instances", latencies)
	for i := 1; i < len(holders); i++ {
		if holders[i].FencingToken <= holders[i-1].FencingToken {
			t.Fatalf("token %d after %d", holders[i].FencingToken, holders[i-1].FencingToken)
		}
	}

	for _, c := range []struct {
		method, path string
		body         any
		typ          string
	}{
		{"POST", "/v1/locks/redlock:sem/leases", map[string]any{"owner": "o", "limit": 2}, "unsupported"},
		{"POST", "/v1/locks/redlock:fair/leases", map[string]any{"owner": "o", "fair": true}, "unsupported"},
		{"GET", "/v1/events", nil, "events-disabled"},
		{"GET", "/v1/webhooks", nil, "webhooks-disabled"},
	} {
		r := a.must(c.method, c.path, c.body)
		if r.Status != 501 || !strings.HasSuffix(r.problem(t).Type, "/"+c.typ) {
			t.Errorf("%s %s: %d %s, want 501 %s", c.method, c.path, r.Status, r.Body, c.typ)
		}
	}

	masters := strings.TrimPrefix(strings.TrimSuffix(rl.URL(), "/0"), "redis://")
	two := strings.Join(strings.Split(masters, ",")[:2], ",")
	wantRefused(t, []string{"LOCKAPI_REDIS_MODE=redlock", "LOCKAPI_REDIS_URL=redis://" + two}, "odd number", "names 2")
	wantRefused(t, []string{"LOCKAPI_REDIS_MODE=redlock", "LOCKAPI_REDIS_URL=redis://" + masters + "," + rl.Masters[0].Addr + "1"}, "odd number", "names 4")
}
