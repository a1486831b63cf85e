package store_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/fencing"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store"
	"github.com/lockapi/lockapi/internal/store/memory"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// backend is one Store implementation under the conformance suite.
type backend struct {
	name string
	open func(t *testing.T) lock.Store
	// loseData simulates the store losing everything (FLUSHALL, a restart
	// without persistence, a process restart for memory) and returns the
	// store to go on with.
	loseData map[string]func(t *testing.T, s lock.Store) lock.Store
}

// topology, when set, is the only backend: TestTopologies runs the whole
// suite once per multi-node Redis topology, on one shared set of processes.
var topology *backend

func backends(t *testing.T) []backend {
	if topology != nil {
		return []backend{*topology}
	}
	return []backend{
		{
			name: "memory",
			open: func(t *testing.T) lock.Store {
				m := memory.New()
				t.Cleanup(func() { m.Close() })
				return m
			},
			loseData: map[string]func(*testing.T, lock.Store) lock.Store{
				"process-restart": func(t *testing.T, s lock.Store) lock.Store {
					s.Close()
					m := memory.New()
					t.Cleanup(func() { m.Close() })
					return m
				},
			},
		},
		{
			name: "redis-batched",
			open: func(t *testing.T) lock.Store { return openRedisWith(t, redistest.Start(t), true) },
		},
		{
			name: "redis",
			open: func(t *testing.T) lock.Store { return openRedis(t, redistest.Start(t)) },
			loseData: map[string]func(*testing.T, lock.Store) lock.Store{
				"flushall": func(t *testing.T, s lock.Store) lock.Store {
					rdb := redisOf(t, s)
					if err := rdb.FlushAll(context.Background()).Err(); err != nil {
						t.Fatal(err)
					}
					return s
				},
			},
		},
	}
}

var redisClients sync.Map // lock.Store -> *redis.Client

func openRedis(t *testing.T, srv *redistest.Server) *store.Redis {
	t.Helper()
	return openRedisWith(t, srv, false)
}

// openRedisWith opens a Redis store, with script calls batched into
// pipelines or not.
func openRedisWith(t *testing.T, srv *redistest.Server, batch bool) *store.Redis {
	t.Helper()
	s := openStore(t, store.ClientConfig{URL: srv.URL}, batch)
	redisClients.Store(lock.Store(s), srv.Client(t))
	return s
}

// openStore opens a Redis store the way lockapi serve does, on a client from
// store.NewClient, closed with the test.
func openStore(t *testing.T, cfg store.ClientConfig, batch bool) *store.Redis {
	t.Helper()
	c, err := store.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := store.NewRedis(c, store.RedisOptions{Prefix: "test:" + ulid.Make().String() + ":", Batch: batch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func redisOf(t *testing.T, s lock.Store) *redis.Client {
	v, ok := redisClients.Load(s)
	if !ok {
		t.Fatal("not a redis store of this suite")
	}
	return v.(*redis.Client)
}

// forEachStore runs body against every backend.
func forEachStore(t *testing.T, body func(t *testing.T, s lock.Store)) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { body(t, b.open(t)) })
	}
}

var ctx = context.Background()

func acquire(t *testing.T, s lock.Store, name, owner string, ttl time.Duration) lock.Lease {
	t.Helper()
	g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: owner, TTL: ttl})
	if err != nil {
		t.Fatalf("acquire %s by %s: %v", name, owner, err)
	}
	return g.Lease
}

func wantCode(t *testing.T, err error, code lock.Code) {
	t.Helper()
	if got := lock.ErrorCode(err); got != code {
		t.Fatalf("error code = %q (%v), want %q", got, err, code)
	}
}

func inspect(t *testing.T, s lock.Store, name string) lock.State {
	t.Helper()
	st, err := s.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestStore_AcquireRelease(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		before := time.Now().Add(-time.Second)
		g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "job:a", Owner: "w1", TTL: 30 * time.Second, Metadata: map[string]string{"job": "nightly"}})
		if err != nil {
			t.Fatal(err)
		}
		l := g.Lease
		if !g.Fresh || l.HoldCount != 1 || l.Token == 0 || l.Owner != "w1" || l.Lock != "job:a" || l.TTL != 30*time.Second {
			t.Fatalf("grant = %+v", g)
		}
		if _, err := ulid.ParseStrict(l.ID); err != nil {
			t.Fatalf("lease id %q is not a ULID: %v", l.ID, err)
		}
		if l.AcquiredAt.Before(before) || l.ExpiresAt.Sub(l.AcquiredAt) != 30*time.Second || l.Metadata["job"] != "nightly" {
			t.Fatalf("lease times/metadata = %+v", l)
		}
		st := inspect(t, s, "job:a")
		if !st.Held || st.Holder.Owner != "w1" || st.Holder.Token != l.Token || st.LastToken != l.Token || st.Holder.Metadata["job"] != "nightly" || !st.Holder.ExpiresAt.Equal(l.ExpiresAt) {
			t.Fatalf("state = %+v holder %+v", st, st.Holder)
		}
		res, err := s.Release(ctx, lock.LeaseRef{Lock: "job:a", ID: l.ID}, false)
		if err != nil || !res.Released || res.HoldCount != 0 {
			t.Fatalf("release = %+v, %v", res, err)
		}
		st2 := inspect(t, s, "job:a")
		if st2.Held || st2.Holder != nil || st2.LastToken != l.Token || st2.Index == st.Index {
			t.Fatalf("state after release = %+v (index before %s)", st2, st.Index)
		}
	})
}

func TestStore_Inspect_free_lock_is_not_an_error(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		st := inspect(t, s, "never:used")
		if st.Held || st.LastToken != 0 || st.Index == "" {
			t.Fatalf("state = %+v", st)
		}
	})
}

func TestStore_Reentrant(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		first := acquire(t, s, "re", "w1", time.Second)
		g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "re", Owner: "w1", TTL: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if g.Fresh || g.Lease.ID != first.ID || g.Lease.Token != first.Token || g.Lease.HoldCount != 2 || g.Lease.TTL != 20*time.Second {
			t.Fatalf("reentrant grant = %+v, first %+v", g, first)
		}
		if !g.Lease.ExpiresAt.After(first.ExpiresAt) {
			t.Fatalf("reentrant acquire did not reset the TTL: %v then %v", first.ExpiresAt, g.Lease.ExpiresAt)
		}
		res, err := s.Release(ctx, lock.LeaseRef{Lock: "re", ID: first.ID}, false)
		if err != nil || res.Released || res.HoldCount != 1 {
			t.Fatalf("first release = %+v, %v", res, err)
		}
		if st := inspect(t, s, "re"); !st.Held || st.Holder.HoldCount != 1 {
			t.Fatalf("after one release: %+v", st)
		}
		res, err = s.Release(ctx, lock.LeaseRef{Lock: "re", ID: first.ID}, false)
		if err != nil || !res.Released {
			t.Fatalf("second release = %+v, %v", res, err)
		}
	})
}

func TestStore_Reentrancy_is_per_principal(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		if _, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "p", Owner: "same", Principal: "team-a", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "p", Owner: "same", Principal: "team-b", TTL: time.Minute})
		wantCode(t, err, lock.CodeHeld)
	})
}

func TestStore_Only_the_acquiring_principal_renews_and_releases(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "mine", Owner: "w", Principal: "team-a", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		before := inspect(t, s, "mine")
		theirs := lock.LeaseRef{Lock: "mine", ID: g.Lease.ID, Principal: "team-b"}
		_, err = s.Renew(ctx, theirs, time.Hour)
		wantCode(t, err, lock.CodeForbidden)
		_, err = s.Release(ctx, theirs, true)
		wantCode(t, err, lock.CodeForbidden)
		if after := inspect(t, s, "mine"); after.Index != before.Index {
			t.Fatal("another principal changed the lease")
		}
		if _, err := s.Renew(ctx, lock.LeaseRef{Lock: "mine", ID: g.Lease.ID, Principal: "team-a"}, time.Hour); err != nil {
			t.Fatalf("the acquiring principal's renew: %v", err)
		}
		// No principal: an admin, who may release anyone's lease.
		res, err := s.Release(ctx, lock.LeaseRef{Lock: "mine", ID: g.Lease.ID}, false)
		if err != nil || !res.Released || res.Retried {
			t.Fatalf("admin release = %+v, %v", res, err)
		}
		// A retry of that release is the acquiring principal's too.
		_, err = s.Release(ctx, theirs, false)
		wantCode(t, err, lock.CodeForbidden)
		if res, err := s.Release(ctx, lock.LeaseRef{Lock: "mine", ID: g.Lease.ID, Principal: "team-a"}, false); err != nil || !res.Retried {
			t.Fatalf("the owner's retry = %+v, %v", res, err)
		}
	})
}

func TestStore_ReleaseAll(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		l := acquire(t, s, "all", "w", time.Minute)
		acquire(t, s, "all", "w", time.Minute)
		acquire(t, s, "all", "w", time.Minute)
		res, err := s.Release(ctx, lock.LeaseRef{Lock: "all", ID: l.ID}, true)
		if err != nil || !res.Released || res.HoldCount != 0 {
			t.Fatalf("release all = %+v, %v", res, err)
		}
		if inspect(t, s, "all").Held {
			t.Fatal("still held")
		}
	})
}

func TestStore_Held_by_another(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		a := acquire(t, s, "h", "a", 10*time.Second)
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "h", Owner: "b", TTL: time.Second})
		wantCode(t, err, lock.CodeHeld)
		var e *lock.Error
		errors.As(err, &e)
		if e.HeldBy.Owner != "a" || e.HeldBy.Token != a.Token || e.HeldBy.ExpiresIn <= 0 || e.HeldBy.ExpiresIn > 10*time.Second {
			t.Fatalf("held by = %+v", e.HeldBy)
		}
	})
}

func TestStore_Wrong_lease_changes_nothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		acquire(t, s, "w", "a", time.Minute)
		before := inspect(t, s, "w")
		other := ulid.Make().String()
		_, err := s.Release(ctx, lock.LeaseRef{Lock: "w", ID: other}, false)
		wantCode(t, err, lock.CodeLeaseLost)
		_, err = s.Release(ctx, lock.LeaseRef{Lock: "w", ID: other}, true)
		wantCode(t, err, lock.CodeLeaseLost)
		_, err = s.Renew(ctx, lock.LeaseRef{Lock: "w", ID: other}, time.Hour)
		wantCode(t, err, lock.CodeLeaseLost)
		if after := inspect(t, s, "w"); after.Index != before.Index || after.Holder.HoldCount != 1 || !after.Holder.ExpiresAt.Equal(before.Holder.ExpiresAt) {
			t.Fatalf("state changed: %+v -> %+v", before.Holder, after.Holder)
		}
	})
}

func TestStore_Renew(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		l := acquire(t, s, "r", "a", time.Second)
		renewed, err := s.Renew(ctx, lock.LeaseRef{Lock: "r", ID: l.ID}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if renewed.ID != l.ID || renewed.Token != l.Token || renewed.TTL != time.Minute || renewed.ExpiresAt.Sub(l.ExpiresAt) < 58*time.Second {
			t.Fatalf("renewed = %+v, was %+v", renewed, l)
		}
		again, err := s.Renew(ctx, lock.LeaseRef{Lock: "r", ID: l.ID}, 0)
		if err != nil || again.TTL != time.Minute {
			t.Fatalf("renew with the lease's TTL = %+v, %v", again, err)
		}
		if st := inspect(t, s, "r"); !st.Holder.ExpiresAt.Equal(again.ExpiresAt) {
			t.Fatalf("inspect expiry %v, renew said %v", st.Holder.ExpiresAt, again.ExpiresAt)
		}
	})
}

func TestStore_Expiry_frees_and_late_holder_is_lost(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		a := acquire(t, s, "exp", "a", 200*time.Millisecond)
		start := time.Now()
		g, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "exp", Owner: "b", TTL: time.Minute}, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		waited := time.Since(start)
		if waited < 150*time.Millisecond || waited > 5*time.Second {
			t.Fatalf("b was granted after %v; a's TTL was 200ms", waited)
		}
		if g.Lease.Token <= a.Token {
			t.Fatalf("token %d after %d", g.Lease.Token, a.Token)
		}
		before := inspect(t, s, "exp")
		_, err = s.Release(ctx, lock.LeaseRef{Lock: "exp", ID: a.ID}, false)
		wantCode(t, err, lock.CodeLeaseLost)
		_, err = s.Renew(ctx, lock.LeaseRef{Lock: "exp", ID: a.ID}, time.Hour)
		wantCode(t, err, lock.CodeLeaseLost)
		after := inspect(t, s, "exp")
		if after.Index != before.Index || after.Holder.Owner != "b" || after.Holder.Token != g.Lease.Token {
			t.Fatalf("late holder touched the new lease: %+v -> %+v", before.Holder, after.Holder)
		}
	})
}

// TestStore_Waiter_sees_a_shortened_lease: a holder that renews with a
// shorter TTL and then dies is waited out at the new expiry, not the old one.
func TestStore_Waiter_sees_a_shortened_lease(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		a := acquire(t, s, "short", "a", 30*time.Second)
		done := make(chan time.Time, 1)
		go func() {
			if _, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "short", Owner: "b", TTL: time.Minute}, 20*time.Second); err != nil {
				t.Error(err)
			}
			done <- time.Now()
		}()
		waitForWaiters(t, s, 1)
		time.Sleep(50 * time.Millisecond) // let b make its try and time the 30s expiry
		renewed := time.Now()
		if _, err := s.Renew(ctx, lock.LeaseRef{Lock: "short", ID: a.ID}, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-done:
			t.Logf("granted %v after the renewal to 100ms", at.Sub(renewed))
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter slept on the lease's old expiry")
		}
	})
}

func TestStore_Release_retry_is_idempotent(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		a := acquire(t, s, "idem", "a", time.Minute)
		for i := 0; i < 2; i++ {
			res, err := s.Release(ctx, lock.LeaseRef{Lock: "idem", ID: a.ID}, false)
			if err != nil || !res.Released || res.HoldCount != 0 || res.Retried != (i == 1) {
				t.Fatalf("release #%d = %+v, %v", i+1, res, err)
			}
		}
		b := acquire(t, s, "idem", "b", time.Minute)
		before := inspect(t, s, "idem")
		if res, err := s.Release(ctx, lock.LeaseRef{Lock: "idem", ID: a.ID}, true); err != nil || !res.Released {
			t.Fatalf("retry after a new grant = %+v, %v", res, err)
		}
		after := inspect(t, s, "idem")
		if after.Index != before.Index || after.Holder.Token != b.Token {
			t.Fatal("a retried release touched the newer holder")
		}
	})
}

func TestStore_ForceRelease(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		a := acquire(t, s, "force", "a", time.Minute)
		got := make(chan lock.Grant, 1)
		go func() {
			g, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "force", Owner: "b", TTL: time.Minute}, 20*time.Second)
			if err != nil {
				t.Error(err)
			}
			got <- g
		}()
		waitForWaiters(t, s, 1)
		freed, err := s.ForceRelease(ctx, "force")
		if err != nil || !freed {
			t.Fatalf("force release = %v, %v", freed, err)
		}
		var g lock.Grant
		select {
		case g = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not wake after a force release")
		}
		if g.Lease.Token <= a.Token {
			t.Fatalf("token %d after force release of %d", g.Lease.Token, a.Token)
		}
		_, err = s.Release(ctx, lock.LeaseRef{Lock: "force", ID: a.ID}, false)
		wantCode(t, err, lock.CodeLeaseLost)
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: "force", ID: g.Lease.ID}, false); err != nil {
			t.Fatal(err)
		}
		if freed, err := s.ForceRelease(ctx, "force"); err != nil || freed {
			t.Fatalf("force release of a free lock = %v, %v", freed, err)
		}
	})
}

func TestStore_List_prefix_and_cursor(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		want := map[string]bool{}
		for i := 0; i < 23; i++ {
			name := fmt.Sprintf("list:a:%02d", i)
			l := acquire(t, s, name, "w", time.Minute)
			if i%5 == 0 {
				if _, err := s.Release(ctx, lock.LeaseRef{Lock: name, ID: l.ID}, false); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want[name] = true
		}
		acquire(t, s, "list:b:0", "w", time.Minute)
		acquire(t, s, "other", "w", time.Minute)

		seen := map[string]bool{}
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > 100 {
				t.Fatal("listing does not end")
			}
			page, err := s.List(ctx, lock.ListRequest{Prefix: "list:a:", Limit: 5, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range page.Locks {
				if !strings.HasPrefix(st.Lock, "list:a:") || !st.Held || st.Holder.Owner != "w" {
					t.Fatalf("listed %+v", st)
				}
				seen[st.Lock] = true
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
		if fmt.Sprint(sortedKeys(seen)) != fmt.Sprint(sortedKeys(want)) {
			t.Fatalf("listed %v\nwant %v", sortedKeys(seen), sortedKeys(want))
		}
		_, err := s.List(ctx, lock.ListRequest{Cursor: "not a cursor"})
		wantCode(t, err, lock.CodeInvalid)
	})
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestStore_Tokens_strictly_increase(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		var last uint64
		for i := 0; i < 1000; i++ {
			l := acquire(t, s, "tokens", "w", time.Minute)
			if l.Token <= last || l.Token > fencing.MaxToken {
				t.Fatalf("grant %d: token %d after %d", i, l.Token, last)
			}
			last = l.Token
			if _, err := s.Release(ctx, lock.LeaseRef{Lock: "tokens", ID: l.ID}, false); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestStore_Tokens_survive_data_loss(t *testing.T) {
	for _, b := range backends(t) {
		for how, lose := range b.loseData {
			t.Run(b.name+"/"+how, func(t *testing.T) {
				s := b.open(t)
				checkTokensSurvive(t, s, func() lock.Store { return lose(t, s) })
			})
		}
	}
	if topology != nil {
		return // the single-server restart below is the single topology's
	}
	t.Run("redis/restart-without-persistence", func(t *testing.T) {
		srv := redistest.Start(t)
		if !srv.CanRestart() {
			t.Skip("the Redis server is not one this test started, so it cannot restart it")
		}
		s := openRedis(t, srv)
		checkTokensSurvive(t, s, func() lock.Store { srv.Restart(t); return s })
	})
}

func checkTokensSurvive(t *testing.T, s lock.Store, loseData func() lock.Store) {
	t.Helper()
	var last uint64
	for i := 0; i < 50; i++ {
		l := acquire(t, s, "survivor", "w", time.Minute)
		last = l.Token
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: "survivor", ID: l.ID}, false); err != nil {
			t.Fatal(err)
		}
	}
	held := acquire(t, s, "survivor", "w", time.Minute)
	s = loseData()
	if st := inspect(t, s, "survivor"); st.Held || st.LastToken != 0 {
		t.Fatalf("the data was not lost: %+v", st)
	}
	after := acquire(t, s, "survivor", "other", time.Minute)
	if after.Token <= held.Token || held.Token <= last {
		t.Fatalf("tokens %d, %d, then %d after data loss", last, held.Token, after.Token)
	}
}

// waitForWaiters waits until n waiters are registered with the store's
// notification hub (an event, not a sleep).
func waitForWaiters(t *testing.T, s lock.Store, n int) {
	t.Helper()
	counter, ok := s.(interface{ WatcherCount() int })
	if !ok {
		t.Fatalf("%T does not count its watchers", s)
	}
	deadline := time.Now().Add(10 * time.Second)
	for counter.WatcherCount() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters registered, want %d", counter.WatcherCount(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestStore_Seed_waiter_is_woken_by_release(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		a := acquire(t, s, "handoff", "a", 5*time.Minute)
		type result struct {
			g   lock.Grant
			err error
			at  time.Time
		}
		done := make(chan result, 1)
		go func() {
			g, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "handoff", Owner: "b", TTL: time.Minute}, 10*time.Second)
			done <- result{g, err, time.Now()}
		}()
		waitForWaiters(t, s, 1)
		released := time.Now()
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: "handoff", ID: a.ID}, false); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		handoff := r.at.Sub(released)
		t.Logf("release-to-grant: %v", handoff)
		// A's TTL is five minutes: a grant within seconds came from the
		// release notification.
		if handoff > 3*time.Second || r.g.Lease.Token <= a.Token {
			t.Fatalf("b granted after %v with token %d (a had %d)", handoff, r.g.Lease.Token, a.Token)
		}
	})
}

func TestStore_Seed_two_waiters_one_at_a_time(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		a := acquire(t, s, "two", "a", 5*time.Minute)
		grants := make(chan lock.Lease, 2)
		for _, owner := range []string{"b", "c"} {
			go func() {
				g, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "two", Owner: owner, TTL: time.Minute}, 20*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				grants <- g.Lease
			}()
		}
		waitForWaiters(t, s, 2)
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: "two", ID: a.ID}, false); err != nil {
			t.Fatal(err)
		}
		first := <-grants
		select {
		case second := <-grants:
			t.Fatalf("both waiters hold the lock: %s and %s", first.Owner, second.Owner)
		case <-time.After(200 * time.Millisecond):
		}
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: "two", ID: first.ID}, false); err != nil {
			t.Fatal(err)
		}
		select {
		case second := <-grants:
			if second.Owner == first.Owner || second.Token <= first.Token {
				t.Fatalf("second grant %+v after %+v", second, first)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the second waiter was not woken by the first one's release")
		}
	})
}

func TestStore_Seed_wait_timeout(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		acquire(t, s, "timeout", "a", time.Minute)
		start := time.Now()
		_, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "timeout", Owner: "b", TTL: time.Minute}, time.Second)
		took := time.Since(start)
		wantCode(t, err, lock.CodeHeld)
		if took < 900*time.Millisecond || took > 3*time.Second {
			t.Fatalf("a 1s wait gave up after %v", took)
		}
	})
}

func TestStore_Seed_wait_cancelled(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		a := acquire(t, s, "cancel", "a", time.Minute)
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := lock.AcquireWait(cctx, s, lock.AcquireRequest{Lock: "cancel", Owner: "b", TTL: time.Minute}, 30*time.Second)
			done <- err
		}()
		waitForWaiters(t, s, 1)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait returned %v", err)
		}
		waitForWaiters(t, s, 0)
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: "cancel", ID: a.ID}, false); err != nil {
			t.Fatal(err)
		}
		if st := inspect(t, s, "cancel"); st.Held {
			t.Fatalf("a departed waiter holds the lock: %+v", st.Holder)
		}
	})
}

func TestStore_Seed_concurrent_acquirers_one_wins(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		var wins, held atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := 0; i < 1000; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "race", Owner: fmt.Sprint("w", i), TTL: time.Minute})
				switch lock.ErrorCode(err) {
				case "":
					wins.Add(1)
				case lock.CodeHeld:
					held.Add(1)
				default:
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if wins.Load() != 1 || held.Load() != 999 {
			t.Fatalf("%d won, %d refused", wins.Load(), held.Load())
		}
	})
}

func TestStore_Seed_sequential_cycles_on_distinct_names(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		start := time.Now()
		const n = 10000
		for i := 0; i < n; i++ {
			name := fmt.Sprint("seq:", i)
			g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "w", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if res, err := s.Release(ctx, lock.LeaseRef{Lock: name, ID: g.Lease.ID}, false); err != nil || !res.Released {
				t.Fatalf("release %s = %+v, %v", name, res, err)
			}
		}
		t.Logf("%d lock/unlock cycles in %v (%.0f/s, with -race if enabled)", n, time.Since(start), n/time.Since(start).Seconds())
	})
}

// TestStore_Kleppmann: a holder that stalls past its TTL finds its late write
// refused by a fenced resource, because the next holder's token is larger.
func TestStore_Kleppmann(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		var res fencing.Resource
		a := acquire(t, s, "storage", "a", 100*time.Millisecond)
		// A stalls (a GC pause) past its TTL; B waits for the lock and gets
		// it when A's lease expires.
		g, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "storage", Owner: "b", TTL: time.Minute}, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b := g.Lease
		if b.Token <= a.Token {
			t.Fatalf("t2 = %d is not larger than t1 = %d", b.Token, a.Token)
		}
		if err := res.Write(b.Token, "from b"); err != nil {
			t.Fatal(err)
		}
		// A wakes up and writes with its old token.
		if err := res.Write(a.Token, "from a"); !errors.Is(err, fencing.ErrStale) {
			t.Fatalf("late write with t1 = %v, want ErrStale", err)
		}
		if w := res.Writes(); len(w) != 1 || w[0].Value != "from b" {
			t.Fatalf("resource holds %+v", w)
		}
	})
}

func BenchmarkStore_AcquireRelease(b *testing.B) {
	for _, name := range []string{"memory", "redis"} {
		b.Run(name, func(b *testing.B) {
			var s lock.Store
			if name == "memory" {
				s = memory.New()
			} else {
				srv := redistest.Start(b)
				rs, err := store.NewRedis(srv.Client(b), store.RedisOptions{})
				if err != nil {
					b.Fatal(err)
				}
				s = rs
			}
			defer s.Close()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				n := fmt.Sprint("bench:", i)
				g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: n, Owner: "w", TTL: time.Minute})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Release(ctx, lock.LeaseRef{Lock: n, ID: g.Lease.ID}, false); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
		})
	}
}
