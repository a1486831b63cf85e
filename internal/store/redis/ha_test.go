package redis_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
	"github.com/lockapi/lockapi/internal/testkit/storetest"
)

// The tests in this file break real Redis processes (kill -9, SIGSTOP,
// CLIENT PAUSE, failovers) and check what the store does then. Bounds are
// the ones lockapi promises in docs/RELIABILITY.md; each test logs what it
// measured.

// openStoreWith is openStore with a call deadline of its own.
func openStoreWith(t *testing.T, cfg redisstore.ClientConfig, batch bool, callTimeout time.Duration) *redisstore.Store {
	t.Helper()
	return openStoreAt(t, cfg, "ha:"+ulid.Make().String()+":", batch, callTimeout)
}

// openStoreAndSetup opens a store whose calls time out after callTimeout,
// as openStoreWith does, and a second one on the same keys (setupURL's
// Redis, cfg's when empty) whose calls may take 10 s. A test of a short
// call deadline sets up and checks its locks through the second: on a
// loaded machine a step that is not under test must not time out.
func openStoreAndSetup(t *testing.T, cfg redisstore.ClientConfig, setupURL string, batch bool, callTimeout time.Duration) (s, setup *redisstore.Store) {
	t.Helper()
	prefix := "ha:" + ulid.Make().String() + ":"
	s = openStoreAt(t, cfg, prefix, batch, callTimeout)
	if setupURL != "" {
		cfg.URL = setupURL
	}
	return s, openStoreAt(t, cfg, prefix, batch, 10*time.Second)
}

func openStoreAt(t *testing.T, cfg redisstore.ClientConfig, prefix string, batch bool, callTimeout time.Duration) *redisstore.Store {
	t.Helper()
	c, err := redisstore.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.Options{Prefix: prefix, Batch: batch, CallTimeout: callTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// eventually retries f every 10 ms until it succeeds or within passes, and
// returns when it first succeeded.
func eventually(t *testing.T, within time.Duration, what string, f func() error) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, within, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// parkWaiter starts AcquireWait for name by owner and returns a channel with
// its outcome, once the waiter is registered.
func parkWaiter(t *testing.T, s lock.Store, name, owner string) <-chan error {
	t.Helper()
	w := storetest.Watch(s)
	done := make(chan error, 1)
	go func() {
		_, err := lock.AcquireWait(context.Background(), w, lock.AcquireRequest{Lock: name, Owner: owner, TTL: time.Minute}, 30*time.Second)
		done <- err
	}()
	storetest.WaitForWaiters(t, w, 1)
	return done
}

// releaseAndTime releases lease (retrying while the store is unavailable,
// as right after a failover) and returns when the release took effect.
func releaseAndTime(t *testing.T, s lock.Store, l lock.Lease) time.Time {
	t.Helper()
	return eventually(t, 15*time.Second, "release after the failover", func() error {
		_, err := s.Release(ctx, lock.LeaseRef{Lock: l.Lock, ID: l.ID}, true)
		if lock.ErrorCode(err) == lock.CodeLeaseLost {
			t.Fatalf("the failover lost the holder's lease (replication should have carried it): %v", err)
		}
		return err
	})
}

func wantGrantedWithin(t *testing.T, done <-chan error, since time.Time, bound time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
		t.Logf("waiter granted %v after the release (bound %v)", time.Since(since).Round(time.Millisecond), bound)
		if d := time.Since(since); d > bound {
			t.Fatalf("waiter granted %v after the release, bound %v", d, bound)
		}
	case <-time.After(bound + 5*time.Second):
		t.Fatalf("waiter not granted %v after the release (bound %v): a lost wake-up", bound+5*time.Second, bound)
	}
}

// A waiter parked across a Sentinel failover is woken by a release on the
// new master: the pub/sub connection follows +switch-master.
func TestSentinel_waiter_parked_across_failover(t *testing.T) {
	sen := redistest.StartSentinel(t)
	cfg := redisstore.ClientConfig{URL: sen.URL(), Mode: redisstore.ModeSentinel}
	stores := []*redisstore.Store{openStoreWith(t, cfg, false, time.Second), openStoreWith(t, cfg, true, time.Second)}
	holders := make([]lock.Lease, len(stores))
	waiters := make([]<-chan error, len(stores))
	for i, s := range stores {
		holders[i] = storetest.Acquire(t, s, "deploy", "holder", time.Minute)
		waiters[i] = parkWaiter(t, s, "deploy", "waiter")
	}
	old, cur := sen.Failover(t)
	t.Logf("failover %s -> %s", old, cur)
	for i, s := range stores {
		released := releaseAndTime(t, s, holders[i])
		wantGrantedWithin(t, waiters[i], released, time.Second)
		if s.MasterSwitches() < 1 {
			t.Errorf("master switches = %d", s.MasterSwitches())
		}
	}
}

// min_replicas: a grant is answered once WAIT counts enough replicas, and
// released when it does not.
func TestSentinel_min_replicas(t *testing.T) {
	sen := redistest.StartSentinel(t)
	s := openStoreWith(t, redisstore.ClientConfig{URL: sen.URL(), Mode: redisstore.ModeSentinel}, false, time.Second)
	start := time.Now()
	g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "durable", Owner: "w", TTL: time.Minute, MinReplicas: 1})
	if err != nil {
		t.Fatalf("min_replicas 1 with one replica: %v", err)
	}
	t.Logf("acquire with min_replicas=1: %v", time.Since(start))
	if res, err := s.Release(ctx, lock.LeaseRef{Lock: "durable", ID: g.Lease.ID}, true); err != nil || !res.Released {
		t.Fatal(res, err)
	}
	_, err = s.TryAcquire(ctx, lock.AcquireRequest{Lock: "durable", Owner: "w", TTL: time.Minute, MinReplicas: 2})
	storetest.WantCode(t, err, lock.CodeUnavailable)
	if !strings.Contains(lock.AsError(err).Detail, "replication did not confirm") {
		t.Errorf("detail = %q", lock.AsError(err).Detail)
	}
	if st := storetest.Inspect(t, s, "durable"); st.Held {
		t.Fatalf("an unconfirmed grant stayed behind: %+v", st)
	}

	// Renewals and releases wait for the server's min_replicas.
	c, err := redisstore.NewClient(redisstore.ClientConfig{URL: sen.URL(), Mode: redisstore.ModeSentinel})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, n := range []int{1, 2} {
		rs, err := redisstore.New(c, redisstore.Options{Prefix: fmt.Sprintf("mr%d:", n), CallTimeout: time.Second, MinReplicas: n})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		l := storetest.Acquire(t, rs, "durable", "w", time.Minute)
		ref := lock.LeaseRef{Lock: "durable", ID: l.ID}
		_, err = rs.Renew(ctx, ref, time.Hour)
		_, rerr := rs.Release(ctx, ref, true)
		switch n {
		case 1:
			if err != nil || rerr != nil {
				t.Fatalf("min_replicas 1 with one replica: renew %v, release %v", err, rerr)
			}
		case 2:
			storetest.WantCode(t, err, lock.CodeUnavailable)
			if !strings.Contains(lock.AsError(err).Detail, "renewal") {
				t.Errorf("renew detail = %q", lock.AsError(err).Detail)
			}
			storetest.WantCode(t, rerr, lock.CodeUnavailable)
			// It took effect on the master, and a repeat says so.
			if res, err := rs.Release(ctx, ref, true); lock.ErrorCode(err) != lock.CodeUnavailable || !res.Retried {
				t.Fatalf("repeated release = %+v, %v", res, err)
			}
		}
	}
}

// After kill -9 of a cluster master, its shard serves again right after the
// replica's promotion: the store reloads the slot map on connection errors
// instead of once a minute.
func TestCluster_master_killed(t *testing.T) {
	cl := redistest.StartCluster(t)
	s, setup := openStoreAndSetup(t, redisstore.ClientConfig{URL: cl.URL(), Mode: redisstore.ModeCluster}, "", false, 500*time.Millisecond)
	storetest.Acquire(t, setup, "shard", "holder", time.Minute)
	master := cl.MasterForKey(t, "{shard}")
	master.Kill(t)
	killed := time.Now()
	// Traffic while the master is dead, as a real service has.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				_, _ = s.Inspect(ctx, "shard")
			}
		}
	}()
	promoted := cl.WaitPromoted(t, master)
	promotedAt := time.Now()
	close(stop)
	wg.Wait()
	served := eventually(t, 10*time.Second, "serving the shard after promotion", func() error {
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "shard", Owner: "holder", TTL: time.Minute})
		return err
	})
	t.Logf("master %s killed; %s promoted after %v; shard served %v after promotion was seen",
		master, promoted, promotedAt.Sub(killed).Round(time.Millisecond), served.Sub(promotedAt).Round(time.Millisecond))
	if d := served.Sub(promotedAt); d > 2*time.Second {
		t.Fatalf("shard served %v after promotion, bound 2s", d)
	}
	eventually(t, 10*time.Second, "readiness", func() error { return s.Ping(ctx) })
}

// A waiter parked across CLUSTER FAILOVER of its lock's shard is woken by a
// release on the new master: sharded pub/sub moves with the slot.
func TestCluster_waiter_parked_across_failover(t *testing.T) {
	cl := redistest.StartCluster(t)
	s := openStoreWith(t, redisstore.ClientConfig{URL: cl.URL(), Mode: redisstore.ModeCluster}, true, time.Second)
	holder := storetest.Acquire(t, s, "hot", "holder", time.Minute)
	waiter := parkWaiter(t, s, "hot", "waiter")
	cl.FailoverReplicaOf(t, cl.MasterForKey(t, "{hot}"))
	released := releaseAndTime(t, s, holder)
	wantGrantedWithin(t, waiter, released, time.Second)
}

// A script call that times out is answered unavailable and never sent again,
// on a cluster without batching too (go-redis's cluster client re-sent it).
func TestCluster_timed_out_release_runs_at_most_once(t *testing.T) {
	cl := redistest.StartCluster(t)
	s, setup := openStoreAndSetup(t, redisstore.ClientConfig{URL: cl.URL(), Mode: redisstore.ModeCluster}, "", false, 200*time.Millisecond)
	l := storetest.Acquire(t, setup, "once", "w", time.Minute)
	storetest.Acquire(t, setup, "once", "w", time.Minute)
	if st := storetest.Inspect(t, setup, "once"); st.Holder.HoldCount != 2 {
		t.Fatalf("set up two holds, the lock has %+v", st)
	}
	cl.MasterForKey(t, "{once}").ClientPause(t, 1500*time.Millisecond, redistest.PauseAll)
	_, err := s.Release(ctx, lock.LeaseRef{Lock: "once", ID: l.ID}, false)
	storetest.WantCode(t, err, lock.CodeUnavailable)
	var st lock.State
	eventually(t, 10*time.Second, "inspect after the pause", func() error {
		var err error
		st, err = setup.Inspect(ctx, "once")
		return err
	})
	if !st.Held || st.Holder.HoldCount < 1 {
		t.Fatalf("one DELETE of one of two holds freed the lock: the release ran more than once: %+v", st)
	}
	t.Logf("holds after the timed-out release: %d (2: it never ran, 1: it ran once)", st.Holder.HoldCount)
}

// Ghost grants: an acquire that ran in Redis but whose answer never came
// back (here a proxy drops Redis's replies, as a network partition right
// after the write does) is answered 503, and its grant must not stay behind.
func TestRedis_no_ghost_grants_when_answers_are_lost(t *testing.T) {
	srv := redistest.Start(t)
	proxy := startReplyDropper(t, srv.Addr)
	s, setup := openStoreAndSetup(t, redisstore.ClientConfig{URL: "redis://" + proxy.addr + "/0"}, srv.URL, false, 300*time.Millisecond)
	// A first call through the proxy opens the connection the acquires
	// below use; on a loaded machine it may take more than 300 ms.
	eventually(t, 10*time.Second, "a first acquire through the proxy", func() error {
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "warm", Owner: "w", TTL: time.Minute})
		return err
	})
	proxy.drop.Store(true)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "ghost", Owner: "w" + string(rune('a'+i)), TTL: time.Minute})
			if lock.ErrorCode(err) != lock.CodeUnavailable {
				t.Errorf("acquire whose answer is lost: %v", err)
			}
		}()
	}
	wg.Wait()
	// Redis did grant one of them: a ghost, until the reaper runs.
	if held := proxy.heldInRedis(t, "ghost"); !held {
		t.Fatal("no acquire reached Redis: the test would prove nothing")
	}
	start := time.Now()
	if err := s.Ping(ctx); lock.ErrorCode(err) != lock.CodeUnavailable {
		t.Errorf("ping without answers = %v", err)
	}
	// Not stuck: it answered near its deadline (1 s of slack for a
	// loaded machine).
	if d := time.Since(start); d > 300*time.Millisecond+time.Second {
		t.Errorf("ping took %v with a 300ms deadline", d)
	}
	proxy.drop.Store(false)
	eventually(t, 10*time.Second, "reaper done", func() error {
		if _, pending := s.Ghosts(); pending > 0 {
			return errors.New("ghosts pending")
		}
		return nil
	})
	abandoned, _ := s.Ghosts()
	if st := storetest.Inspect(t, setup, "ghost"); st.Held {
		t.Fatalf("a ghost grant holds the lock: %+v (abandoned %d)", st, abandoned)
	}
	t.Logf("ghost holds abandoned: %d", abandoned)
	if abandoned < 1 {
		t.Fatalf("abandoned = %d, want the ghost's hold", abandoned)
	}
	storetest.Acquire(t, setup, "ghost", "after", time.Minute)
}

// replyDropper is a loopback TCP proxy to Redis that, while drop is set,
// forwards requests and throws Redis's replies away.
type replyDropper struct {
	addr   string
	target string
	drop   atomic.Bool
}

func startReplyDropper(t *testing.T, target string) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{addr: ln.Addr().String(), target: target}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			conns.Add(2)
			go func() { defer conns.Done(); _, _ = io.Copy(r, c); r.Close() }()
			go func() {
				defer conns.Done()
				defer c.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := r.Read(buf)
					if n > 0 && !p.drop.Load() {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

// heldInRedis looks at the lock hash behind the proxy's back.
func (p *replyDropper) heldInRedis(t *testing.T, name string) bool {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: p.target})
	defer c.Close()
	keys, err := c.Keys(ctx, "*{"+name+"}:lock").Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(keys) > 0
}

// After Redis restarts, the store serves again within 200 ms of Redis
// answering PING, although go-redis's dial breaker had opened.
func TestRedis_recovers_quickly_after_restart(t *testing.T) {
	srv := redistest.Start(t)
	if !srv.CanRestart() {
		t.Skip("needs a redis-server this test runs")
	}
	s := openStoreWith(t, redisstore.ClientConfig{URL: srv.URL}, true, time.Second)
	storetest.Acquire(t, s, "r", "w", time.Minute)
	srv.Stop(t)
	for range 100 { // more failed dials than the pool has connections
		_, _ = s.Inspect(ctx, "r")
	}
	time.Sleep(1500 * time.Millisecond) // the breaker's probe sleeps a second between tries
	srv.Resume(t)                       // returns once redis-server answers PING
	up := time.Now()
	served := eventually(t, 5*time.Second, "serving after the restart", func() error {
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "r2", Owner: "w", TTL: time.Minute})
		return err
	})
	t.Logf("served %v after Redis answered PING", served.Sub(up).Round(time.Millisecond))
	if d := served.Sub(up); d > 200*time.Millisecond {
		t.Fatalf("served %v after Redis answered PING, bound 200ms", d)
	}
}

// BenchmarkSentinel_min_replicas measures what confirming a grant costs: one
// acquire and release cycle on a Sentinel set's master, with and without
// waiting for the replica (WAIT). Run it with
//
//	go test -run '^$' -bench Sentinel_min_replicas -benchtime 2000x ./internal/store/redis/
func BenchmarkSentinel_min_replicas(b *testing.B) {
	sen := redistest.StartSentinel(b)
	for _, n := range []int{0, 1} {
		b.Run(fmt.Sprintf("min_replicas=%d", n), func(b *testing.B) {
			c, err := redisstore.NewClient(redisstore.ClientConfig{URL: sen.URL(), Mode: redisstore.ModeSentinel})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			s, err := redisstore.New(c, redisstore.Options{Prefix: "bench:" + ulid.Make().String() + ":", MinReplicas: n})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.ResetTimer()
			for i := range b.N {
				name := fmt.Sprint("b", i)
				g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "w", TTL: time.Minute, MinReplicas: n})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Release(ctx, lock.LeaseRef{Lock: name, ID: g.Lease.ID}, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// On Redis Cluster a batched store sends each master's calls in pipelines
// of their own: a master that stalls holds up its own names, not every
// name. (With one queue for the cluster, both pipelines in flight waited
// on the stalled master, and a call for another master waited behind
// them: three masters gave 1.6 times one master's pairs/s.)
func TestCluster_batches_wait_only_for_their_own_master(t *testing.T) {
	cl := redistest.StartCluster(t)
	s := openStoreWith(t, redisstore.ClientConfig{URL: cl.URL(), Mode: redisstore.ModeCluster}, true, 10*time.Second)
	stalled := cl.MasterForKey(t, "{slow}")
	// Names by master (a lock's keys share the tag {name}).
	var slow []string
	other := ""
	for i := 0; len(slow) < 2 || other == ""; i++ {
		name := fmt.Sprintf("n-%d", i)
		if cl.MasterForKey(t, "{"+name+"}").Addr() == stalled.Addr() {
			slow = append(slow, name)
		} else if other == "" {
			other = name
		}
	}
	storetest.Acquire(t, s, other, "warm", time.Minute) // both masters' lanes are known
	storetest.Acquire(t, s, "slow", "warm", time.Minute)

	// Paused for longer than a loaded machine could take to answer the
	// other call, and let go as soon as it has.
	stalled.ClientPause(t, 30*time.Second, redistest.PauseWrite)
	unpause := func() { _ = stalled.Client(t).Do(ctx, "CLIENT", "UNPAUSE").Err() }
	defer unpause()
	// Two calls for the stalled master, one after the other, so that each
	// takes a pipeline of its own (the batcher's two in flight).
	type answer struct {
		took time.Duration
		err  error
	}
	slowAnswers := make(chan answer, 2)
	for _, name := range slow[:2] {
		go func() {
			start := time.Now()
			_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "w", TTL: time.Minute})
			slowAnswers <- answer{time.Since(start), err}
		}()
		time.Sleep(50 * time.Millisecond)
	}

	// The other master's call is answered at once, well before the stalled
	// calls' own deadline (5 s) could free a pipeline for it.
	start := time.Now()
	_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: other, Owner: "w2", TTL: time.Minute})
	took := time.Since(start)
	if lock.ErrorCode(err) != lock.CodeHeld {
		t.Fatalf("acquire on the other master = %v, want it refused as held", err)
	}
	select {
	case a := <-slowAnswers:
		t.Fatalf("a call for the stalled master was answered (%v after it began: %v) before the other master's (%v)", a.took, a.err, took)
	default:
	}
	if took > 2500*time.Millisecond {
		t.Fatalf("the other master's call took %v while one master stalled", took)
	}
	unpause()
	<-slowAnswers
	<-slowAnswers
}
