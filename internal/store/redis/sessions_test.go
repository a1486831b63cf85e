package redis_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
	"github.com/lockapi/lockapi/internal/testkit/storetest"
)

// TestSessions_renewal_costs_the_same counts the Redis commands a session's
// renewal costs (INFO commandstats: the call on the wire and every command
// its script runs) with 1 bound lease and with 300 (more than one chunk of
// session_sweep.lua): the same few, whatever the session holds, within the
// issue's budget of 5.
func TestSessions_renewal_costs_the_same(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s := openStoreOptions(t, redisstore.ClientConfig{URL: srv.URL}, redisstore.Options{})
	ss := s.Sessions()
	var costs []int64
	for _, n := range []int{1, 300} {
		sess, err := ss.CreateSession(ctx, lock.SessionRequest{Owner: "w", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			req := lock.AcquireRequest{Lock: fmt.Sprintf("cost:%d:%d", n, i), Owner: "w", Session: sess.ID}
			if i%3 == 1 {
				req.Mode = lock.Shared
			}
			if _, err := s.TryAcquire(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		// The least of three renewals: the store's background work (the
		// sessions sweeper's look, pub/sub pings, a reaper) can land in
		// one renewal's window and only ever adds commands.
		cost := int64(-1)
		for range 3 {
			before := commandCalls(t, rdb)
			renewed, err := ss.RenewSession(ctx, lock.SessionRef{ID: sess.ID}, 0)
			if err != nil || len(renewed.Leases) != n {
				t.Fatalf("renew = %d leases, %v; want %d", len(renewed.Leases), err, n)
			}
			var c int64
			for name, calls := range commandsSince(t, rdb, before) {
				if name != "zrangebyscore" && name != "ping" {
					c += calls
				}
			}
			if cost < 0 || c < cost {
				cost = c
			}
		}
		costs = append(costs, cost)
	}
	t.Logf("Redis commands per renewal: %d with 1 lease, %d with 300", costs[0], costs[1])
	if costs[0] != costs[1] || costs[1] > 5 {
		t.Fatalf("a renewal costs %d commands with 1 lease and %d with 300, want the same and at most 5", costs[0], costs[1])
	}
}

// TestSessions_on_cluster checks what docs/SESSIONS.md promises of a
// session spread over every master of a Redis Cluster: a renewal costs one
// script on the session's record and one per master holding its leases
// (INFO commandstats summed over the masters), whatever it holds; and the
// session's 1,000 leases are all ended within 2 s of its end, by DELETE or
// by expiry.
func TestSessions_on_cluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cluster := redistest.StartCluster(t)
	masters := cluster.Masters(t)
	cfg := redisstore.ClientConfig{URL: cluster.URL(), Mode: redisstore.ModeCluster}

	// bind acquires n leases bound to sess, a third of them shared, on
	// names that fall on every master, and returns the names.
	bind := func(t *testing.T, s *redisstore.Store, sess lock.Session, n int) []string {
		t.Helper()
		names := make([]string, n)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		work := make(chan int)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					req := lock.AcquireRequest{Lock: fmt.Sprintf("c:%s:%d", sess.ID, i), Owner: "w", Session: sess.ID}
					if i%3 == 1 {
						req.Mode = lock.Shared
					}
					names[i] = req.Lock
					if _, err := s.TryAcquire(ctx, req); err != nil {
						errs <- err
					}
				}
			}()
		}
		for i := range n {
			work <- i
		}
		close(work)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		covered := map[string]bool{}
		for _, name := range names {
			covered[cluster.MasterForKey(t, "{"+name+"}").Addr()] = true
		}
		if len(covered) != len(masters) {
			t.Fatalf("%d leases on %d of %d masters", n, len(covered), len(masters))
		}
		return names
	}
	// shadowLeases counts the session's leases its shadows still hold, on
	// every master.
	shadowLeases := func(t *testing.T, id string) int64 {
		t.Helper()
		var n int64
		for _, m := range masters {
			rdb := m.Client(t)
			keys, err := rdb.Keys(ctx, "*:s:"+id+":leases").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				n += rdb.HLen(ctx, k).Val()
			}
		}
		return n
	}
	allFree := func(t *testing.T, s *redisstore.Store, names []string) {
		t.Helper()
		for _, name := range names {
			st, err := s.Inspect(ctx, name)
			if err != nil || st.Held {
				t.Fatalf("%s after its session ended: held %v, %v", name, st.Held, err)
			}
		}
	}

	// The shadows live in the masters' event logs' hash tags.
	t.Run("none_without_events", func(t *testing.T) {
		s := openStoreOptions(t, cfg, redisstore.Options{})
		if s.Sessions() != nil {
			t.Fatal("a Redis Cluster store without events declares sessions")
		}
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "x", Owner: "w", Session: "01JD3Z8Q6W9M4T5R2K7X1B0C9S"})
		if lock.ErrorCode(err) != lock.CodeUnsupported {
			t.Fatalf("acquire naming a session = %v, want unsupported", err)
		}
	})

	t.Run("renewal_costs_one_script_and_one_per_master", func(t *testing.T) {
		s := openStore(t, cfg, false)
		ss := s.Sessions()
		var costs []sessionCost
		for _, n := range []int{30, 300} {
			sess, err := ss.CreateSession(ctx, lock.SessionRequest{Owner: "w", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			bind(t, s, sess, n)
			// The log's trim runs a second after the last event: let it.
			time.Sleep(1500 * time.Millisecond)
			// The counts are the masters' own, so the sweepers' and the
			// trim's work beside a renewal is counted with it on a loaded
			// machine. That work only adds: the least of three renewals is
			// a renewal's own cost.
			c := sessionCost{scripts: -1, commands: -1}
			for range 3 {
				if r := renewalCost(t, ss, masters, sess.ID, n); c.commands < 0 || r.commands < c.commands {
					c = r
				}
			}
			costs = append(costs, c)
		}
		t.Logf("a renewal on %d masters: %d scripts, %d Redis commands in all, with 30 leases; %d scripts, %d commands with 300",
			len(masters), costs[0].scripts, costs[0].commands, costs[1].scripts, costs[1].commands)
		if want := int64(1 + len(masters)); costs[0].scripts != want || costs[1].scripts != want {
			t.Fatalf("a renewal ran %d and %d scripts, want 1 + %d masters", costs[0].scripts, costs[1].scripts, len(masters))
		}
		if costs[0].commands != costs[1].commands {
			t.Fatalf("a renewal costs %d commands with 30 leases and %d with 300, want the same", costs[0].commands, costs[1].commands)
		}
	})

	t.Run("delete_frees_1000_leases_within_2s", func(t *testing.T) {
		s := openStore(t, cfg, true)
		ss := s.Sessions()
		sess, err := ss.CreateSession(ctx, lock.SessionRequest{Owner: "w", TTL: time.Minute, LockDelay: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		names := bind(t, s, sess, 1000)
		start := time.Now()
		ended, err := ss.EndSession(ctx, lock.SessionRef{ID: sess.ID})
		took := time.Since(start)
		if err != nil || len(ended.Leases) != 1000 {
			t.Fatalf("DELETE = %d leases, %v", len(ended.Leases), err)
		}
		if n := shadowLeases(t, sess.ID); n != 0 {
			t.Fatalf("%d leases left after DELETE", n)
		}
		t.Logf("DELETE of a session with 1,000 leases on %d masters: all free in %v", len(masters), took)
		if took > 2*time.Second {
			t.Fatalf("DELETE took %v to free 1,000 leases, want at most 2s", took)
		}
		allFree(t, s, names)
		// A clean release: no lock-delay.
		storetest.Acquire(t, s, names[0], "next", time.Minute)
	})

	t.Run("expiry_frees_1000_leases_within_2s", func(t *testing.T) {
		s := openStore(t, cfg, true)
		ss := s.Sessions()
		sess, err := ss.CreateSession(ctx, lock.SessionRequest{Owner: "w", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		names := bind(t, s, sess, 1000)
		renewed, err := ss.RenewSession(ctx, lock.SessionRef{ID: sess.ID}, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for shadowLeases(t, sess.ID) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d leases left 30s after the session's expiry", shadowLeases(t, sess.ID))
			}
			time.Sleep(20 * time.Millisecond)
		}
		after := time.Since(renewed.ExpiresAt)
		t.Logf("expiry of a session with 1,000 leases on %d masters: all ended %v after it", len(masters), after)
		if after > 2*time.Second {
			t.Fatalf("the leases ended %v after the session's expiry, want within 2s", after)
		}
		allFree(t, s, names)
	})
}

// TestSessions_min_replicas: a session's creation, renewal and end wait
// for the server's min_replicas as a lease's writes do (docs/RELIABILITY.md,
// "Sentinel, min_replicas 1"). With one replica, min_replicas 1 confirms
// them; min_replicas 2 cannot: the creation answers unavailable, and a
// renewal or an end answers unavailable after it took effect on the
// master. Before, each was answered at once, confirmed by no replica, so a
// failover could lose a renewal its holder was told of.
func TestSessions_min_replicas(t *testing.T) {
	sen := redistest.StartSentinel(t)
	cfg := redisstore.ClientConfig{URL: sen.URL(), Mode: redisstore.ModeSentinel}
	c, err := redisstore.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// Two stores on one keyspace, as two lockapi instances would be.
	open := func(n int) lock.Sessions {
		s, err := redisstore.New(c, redisstore.Options{Prefix: "smr:", CallTimeout: time.Second, MinReplicas: n})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s.Sessions()
	}
	one, two := open(1), open(2)

	// First with min_replicas 1, which also loads the scripts.
	sess, err := one.CreateSession(ctx, lock.SessionRequest{Owner: "w", TTL: time.Minute})
	if err != nil {
		t.Fatalf("create with min_replicas 1 and one replica: %v", err)
	}
	if _, err := two.CreateSession(ctx, lock.SessionRequest{Owner: "w", TTL: time.Minute}); lock.ErrorCode(err) != lock.CodeUnavailable ||
		!strings.Contains(lock.AsError(err).Detail, "replication did not confirm the session") {
		t.Fatalf("create with min_replicas 2 and one replica: %v, want unavailable", err)
	}
	ref := lock.SessionRef{ID: sess.ID}
	if _, err := one.RenewSession(ctx, ref, 0); err != nil {
		t.Fatalf("renew with min_replicas 1 and one replica: %v", err)
	}

	_, err = two.RenewSession(ctx, ref, time.Hour)
	storetest.WantCode(t, err, lock.CodeUnavailable)
	if !strings.Contains(lock.AsError(err).Detail, "session renewal") {
		t.Errorf("renew detail = %q", lock.AsError(err).Detail)
	}
	// It took effect on the master.
	if got, err := one.GetSession(ctx, ref); err != nil || time.Until(got.ExpiresAt) < 30*time.Minute {
		t.Fatalf("after the unconfirmed renewal to 1 h: %+v, %v", got, err)
	}
	_, err = two.EndSession(ctx, ref)
	storetest.WantCode(t, err, lock.CodeUnavailable)
	if _, err := one.GetSession(ctx, ref); lock.ErrorCode(err) != lock.CodeSessionLost {
		t.Fatalf("after the unconfirmed end: %v, want session-lost", err)
	}
}

// sessionCost is what one renewal cost the masters: the scripts it ran and
// the Redis commands, less those that run beside any call (pub/sub pings,
// the client's slot map, the test's own connections).
type sessionCost struct{ scripts, commands int64 }

// renewalCost renews session id, which holds n leases, and returns what
// the masters counted meanwhile.
func renewalCost(t *testing.T, ss lock.Sessions, masters []*redistest.Node, id string, n int) sessionCost {
	t.Helper()
	before := make([]map[string]int64, len(masters))
	for i, m := range masters {
		before[i] = commandCalls(t, m.Client(t))
	}
	renewed, err := ss.RenewSession(context.Background(), lock.SessionRef{ID: id}, 0)
	if err != nil || len(renewed.Leases) != n {
		t.Fatalf("renew = %d leases, %v; want %d", len(renewed.Leases), err, n)
	}
	var c sessionCost
	for i, m := range masters {
		for name, calls := range commandsSince(t, m.Client(t), before[i]) {
			if name != "ping" && name != "hello" && !strings.HasPrefix(name, "cluster") {
				c.commands += calls
			}
			if name == "fcall" {
				c.scripts += calls
			}
		}
	}
	return c
}

// TestSessions_quota_over_instances: two instances on one Redis count one
// principal's sessions together, creates racing from both never pass the
// quota, and a renewed session past its first expiry still counts.
func TestSessions_quota_over_instances(t *testing.T) {
	srv := redistest.Start(t)
	c, err := redisstore.NewClient(redisstore.ClientConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var stores [2]lock.Sessions
	for i := range stores {
		s, err := redisstore.New(c, redisstore.Options{Prefix: "quota:"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s.Sessions()
	}
	const quota = 5
	req := lock.SessionRequest{Owner: "w", Principal: "p", TTL: time.Minute, Quota: quota}
	// A short session, renewed: its first expiry passes, it lives on.
	short := req
	short.TTL = lock.MinSessionTTL
	renewed, err := stores[0].CreateSession(ctx, short)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stores[1].RenewSession(ctx, lock.SessionRef{ID: renewed.ID}, time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lock.MinSessionTTL + 1200*time.Millisecond) // past its first expiry and the slack
	var wg sync.WaitGroup
	var mu sync.Mutex
	made, refused := 0, 0
	for i := range 40 {
		wg.Go(func() {
			_, err := stores[i%2].CreateSession(ctx, req)
			mu.Lock()
			defer mu.Unlock()
			switch lock.ErrorCode(err) {
			case "":
				made++
			case lock.CodeQuotaExceeded:
				refused++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	list, err := stores[0].ListSessions(ctx, lock.SessionFilter{Principal: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if made+1 > quota || len(list) != made+1 || refused != 40-made {
		t.Fatalf("40 racing creates with a quota of %d and 1 renewed session: %d made, %d refused, %d listed", quota, made, refused, len(list))
	}
	// Whatever the race refused, the places left can be taken one by one.
	for range quota - 1 - made {
		if _, err := stores[1].CreateSession(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	_, err = stores[0].CreateSession(ctx, req)
	storetest.WantCode(t, err, lock.CodeQuotaExceeded)
}
