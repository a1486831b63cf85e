package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
	"github.com/lockapi/lockapi/internal/testkit/storetest"
)

// commandCalls reads INFO commandstats as command -> calls.
func commandCalls(t *testing.T, rdb *goredis.Client) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, field := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				calls[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return calls
}

// commandsSince counts the commands run since before, leaving out the INFO
// and CLIENT calls this test makes to observe.
func commandsSince(t *testing.T, rdb *goredis.Client, before map[string]int64) map[string]int64 {
	t.Helper()
	diff := map[string]int64{}
	for name, n := range commandCalls(t, rdb) {
		if name == "info" || strings.HasPrefix(name, "client") {
			continue
		}
		if d := n - before[name]; d != 0 {
			diff[name] = d
		}
	}
	return diff
}

// scripts counts the script calls among calls: FCALL, and EVALSHA and EVAL
// on a Redis without Functions.
func scripts(calls map[string]int64) int64 {
	return calls["fcall"] + calls["evalsha"] + calls["eval"]
}

// waitForScripts waits until Redis has run at least n script calls.
func waitForScripts(t *testing.T, rdb *goredis.Client, n int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for scripts(commandCalls(t, rdb)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d script calls, want %d", scripts(commandCalls(t, rdb)), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitForQuiet waits until Redis has run no command for a whole quiet
// window. A count of script calls says the waiters' tries have started, not
// that each has finished what follows it: on a loaded machine one waiter's
// last try can still be on its way when the count is reached.
func waitForQuiet(t *testing.T, rdb *goredis.Client, quiet time.Duration) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		before := commandCalls(t, rdb)
		time.Sleep(quiet)
		diff := commandsSince(t, rdb, before)
		if len(diff) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis never went quiet for %v: still %v", quiet, diff)
		}
	}
}

func pubsubClients(t *testing.T, rdb *goredis.Client) int {
	t.Helper()
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " sub=") && !strings.Contains(line, " sub=0 ") {
			n++
		}
	}
	return n
}

// TestRedis_waiters_share_one_connection_and_cost_nothing: 1,000 waiters on a
// held lock use one pub/sub connection and send Redis no command at all while
// they wait.
func TestRedis_waiters_share_one_connection_and_cost_nothing(t *testing.T) {
	srv := redistest.Start(t)
	observer := srv.Client(t)
	s := storetest.Watch(openRedis(t, srv))
	holder := storetest.Acquire(t, s, "idle", "holder", 5*time.Minute)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const n, batch = 1000, 100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	// They arrive a hundred at a time: 1,000 first tries at once queue for
	// the client's pool past the store's deadline on a loaded machine, and
	// a waiter whose first try fails never waits. Once waiting, all 1,000
	// wait together.
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := lock.AcquireWait(wctx, s, lock.AcquireRequest{Lock: "idle", Owner: "w" + strconv.Itoa(i), TTL: time.Minute}, time.Minute)
			errs <- err
		}()
		if (i+1)%batch == 0 {
			storetest.WaitForWaiters(t, s, i+1)
		}
	}
	// Each waiter tries once, registers, and tries once more before it
	// sleeps: wait until all those tries have run.
	waitForScripts(t, observer, 1+2*n)
	waitForQuiet(t, observer, 300*time.Millisecond)

	if got := pubsubClients(t, observer); got > 2 {
		t.Errorf("%d waiters use %d pub/sub connections, want at most 2", n, got)
	}
	before := commandCalls(t, observer)
	time.Sleep(time.Second) // the thing measured is that nothing happens
	if diff := commandsSince(t, observer, before); len(diff) != 0 {
		t.Errorf("waiting on a held lock issued Redis commands: %v", diff)
	}

	// One release hands the lock to exactly one waiter.
	if _, err := s.Release(ctx, lock.LeaseRef{Lock: "idle", ID: holder.ID}, false); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("first waiter to return: %v", err)
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != context.Canceled {
			t.Fatalf("a cancelled waiter returned %v", err)
		}
	}
	storetest.WaitForWaiters(t, s, 0)
	if st := storetest.Inspect(t, s, "idle"); !st.Held || st.Holder.Owner == "holder" {
		t.Fatalf("after the release: %+v", st.Holder)
	}
}

// TestRedis_release_does_not_stampede: a release wakes one of a process's
// waiters, so it costs a couple of script calls, not one per waiter.
func TestRedis_release_does_not_stampede(t *testing.T) {
	srv := redistest.Start(t)
	observer := srv.Client(t)
	s := storetest.Watch(openRedis(t, srv))
	holder := storetest.Acquire(t, s, "herd", "holder", 5*time.Minute)

	const n = 50
	granted := make(chan lock.Lease, n)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := 0; i < n; i++ {
		go func() {
			g, err := lock.AcquireWait(wctx, s, lock.AcquireRequest{Lock: "herd", Owner: "w" + strconv.Itoa(i), TTL: 5 * time.Minute}, time.Minute)
			if err == nil {
				granted <- g.Lease
			}
		}()
	}
	storetest.WaitForWaiters(t, s, n)
	waitForScripts(t, observer, 1+2*n)
	waitForQuiet(t, observer, 300*time.Millisecond)
	before := commandCalls(t, observer)
	if _, err := s.Release(ctx, lock.LeaseRef{Lock: "herd", ID: holder.ID}, false); err != nil {
		t.Fatal(err)
	}
	<-granted
	time.Sleep(200 * time.Millisecond) // room for a stampede to show
	calls := scripts(commandsSince(t, observer, before))
	// The release, and the one woken waiter's acquire.
	if calls > 4 {
		t.Fatalf("a release with %d waiters caused %d script calls", n, calls)
	}
}

// TestRedis_plain_pair_runs_one_script_each: a plain acquire, a refusal and
// a release run one script each (the fast ones), with events recorded or
// not. A second hold, and a release that leaves one, go on to the full
// scripts: two calls.
func TestRedis_plain_pair_runs_one_script_each(t *testing.T) {
	for _, events := range []bool{false, true} {
		t.Run(fmt.Sprintf("events=%v", events), func(t *testing.T) {
			srv := redistest.Start(t)
			observer := srv.Client(t)
			s := openStoreOptions(t, redisstore.ClientConfig{URL: srv.URL}, redisstore.Options{Events: events})
			calls := func(what string, want int64, do func()) {
				t.Helper()
				before := commandCalls(t, observer)
				do()
				if got := scripts(commandsSince(t, observer, before)); got != want {
					t.Errorf("%s: %d script calls, want %d", what, got, want)
				}
			}
			// The first call gives this Redis the library.
			storetest.Acquire(t, s, "warm-up", "a", time.Minute)
			var a lock.Lease
			release := func() {
				if _, err := s.Release(ctx, lock.LeaseRef{Lock: "plain", ID: a.ID}, false); err != nil {
					t.Fatal(err)
				}
			}
			calls("acquire", 1, func() { a = storetest.Acquire(t, s, "plain", "a", time.Minute) })
			calls("refusal", 1, func() {
				_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "plain", Owner: "b", TTL: time.Minute})
				storetest.WantCode(t, err, lock.CodeHeld)
			})
			calls("second hold", 2, func() { storetest.Acquire(t, s, "plain", "a", time.Minute) })
			calls("release of one of two holds", 2, release)
			calls("release", 1, release)
		})
	}
}

// TestRedis_without_Functions_runs_EVAL: a Redis that refuses Functions
// to lockapi's user (as one refuses FCALL that has none, 6.2) gets the
// scripts with EVALSHA, and the store works as ever.
func TestRedis_without_Functions_runs_EVAL(t *testing.T) {
	srv := redistest.Start(t)
	observer := srv.Client(t)
	if err := observer.Do(ctx, "ACL", "SETUSER", "nofunctions", "on", ">pw", "~*", "&*", "+@all", "-function", "-fcall", "-fcall_ro").Err(); err != nil {
		t.Fatal(err)
	}
	url := strings.Replace(srv.URL, "redis://", "redis://nofunctions:pw@", 1)
	s := openStoreOptions(t, redisstore.ClientConfig{URL: url}, redisstore.Options{Events: true, Batch: true})
	a := storetest.Acquire(t, s, "plain", "a", time.Minute)
	if _, err := s.Release(ctx, lock.LeaseRef{Lock: "plain", ID: a.ID}, false); err != nil {
		t.Fatal(err)
	}
	calls := commandCalls(t, observer)
	if calls["evalsha"]+calls["eval"] == 0 || calls["function|load"] != 0 {
		t.Errorf("scripts ran as %v", calls)
	}
}

// TestRedis_pubsub_reconnect_wakes_waiters: when the pub/sub connection drops,
// the store redials and every waiter looks again, so a release made while the
// connection was down is not missed until the holder's TTL.
func TestRedis_pubsub_reconnect_wakes_waiters(t *testing.T) {
	srv := redistest.Start(t)
	observer := srv.Client(t)
	rs := openRedis(t, srv)
	s := storetest.Watch(rs)
	holder := storetest.Acquire(t, s, "reconnect", "holder", 5*time.Minute)
	done := make(chan error, 1)
	go func() {
		_, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "reconnect", Owner: "b", TTL: time.Minute}, time.Minute)
		done <- err
	}()
	storetest.WaitForWaiters(t, s, 1)
	if err := observer.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, lock.LeaseRef{Lock: "reconnect", ID: holder.ID}, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter missed the release made while pub/sub was reconnecting")
	}
	if rs.Reconnects() < 1 {
		t.Errorf("reconnects = %d", rs.Reconnects())
	}
}

// TestRedis_unavailable: with Redis gone, calls fail as unavailable (HTTP
// 503), and work again when it returns.
func TestRedis_unavailable(t *testing.T) {
	srv := redistest.Start(t)
	if !srv.CanRestart() {
		t.Skip("needs a Redis this test can stop")
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	s, err := redisstore.New(rdb, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv.Stop(t)
	_, err = s.TryAcquire(ctx, lock.AcquireRequest{Lock: "u", Owner: "a", TTL: time.Second})
	storetest.WantCode(t, err, lock.CodeUnavailable)
	storetest.WantCode(t, s.Ping(ctx), lock.CodeUnavailable)
	_, err = s.Inspect(ctx, "u")
	storetest.WantCode(t, err, lock.CodeUnavailable)
	srv.Resume(t)
	deadline := time.Now().Add(10 * time.Second)
	for s.Ping(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the store did not recover")
		}
		time.Sleep(20 * time.Millisecond)
	}
	storetest.Acquire(t, s, "u", "a", time.Second)
}

// TestRedis_reentry_marks_die_with_the_lease: every re-entry marks its
// request in the lease (abandon.lua), and the marks go with the lease: the
// lock hash of an exclusive lease, a shared record and all of its 'r:'
// fields, while another reader keeps the shared hash alive.
func TestRedis_reentry_marks_die_with_the_lease(t *testing.T) {
	srv := redistest.Start(t)
	prefix := newPrefix()
	s := openEvents(t, srv, prefix)
	rdb := srv.Client(t)

	x := acquire(t, s, lock.AcquireRequest{Lock: "x", Owner: "o"})
	x2 := acquire(t, s, lock.AcquireRequest{Lock: "x", Owner: "o"})
	if v := rdb.HGet(ctx, prefix+"{x}:lock", "s:"+x2.RequestID).Val(); v != "g" {
		t.Fatalf("re-entry's mark = %q, want g", v)
	}
	if _, err := s.Release(ctx, lock.LeaseRef{Lock: "x", ID: x.Lease.ID}, true); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, prefix+"{x}:lock").Val(); n != 0 {
		t.Fatalf("the lock hash outlived its lease")
	}

	sh := acquire(t, s, lock.AcquireRequest{Lock: "s", Owner: "o", Mode: lock.Shared})
	var reentries []string
	for range 3 {
		reentries = append(reentries, acquire(t, s, lock.AcquireRequest{Lock: "s", Owner: "o", Mode: lock.Shared}).RequestID)
	}
	acquire(t, s, lock.AcquireRequest{Lock: "s", Owner: "p", Mode: lock.Shared})
	if err := s.Abandon(ctx, "s", reentries[0]); err != nil {
		t.Fatal(err)
	}
	rFields := func() []string {
		var out []string
		for _, f := range rdb.HKeys(ctx, prefix+"{s}:lock:shared").Val() {
			if strings.HasPrefix(f, "r:") {
				out = append(out, f)
			}
		}
		return out
	}
	if got := rFields(); len(got) != len(reentries) {
		t.Fatalf("'r:' fields while the lease lives = %v, want one per re-entry %v", got, reentries)
	}
	if _, err := s.Release(ctx, lock.LeaseRef{Lock: "s", ID: sh.Lease.ID}, true); err != nil {
		t.Fatal(err)
	}
	if got := rFields(); len(got) != 0 {
		t.Fatalf("'r:' fields after the lease ended: %v", got)
	}
}

// TestRedis_abandon_reads_a_lease_written_before_the_marks: a lock hash
// that the previous library re-entered names its latest re-entry in 'op'
// only (a rolling upgrade); abandon.lua still undoes that hold, once.
func TestRedis_abandon_reads_a_lease_written_before_the_marks(t *testing.T) {
	srv := redistest.Start(t)
	prefix := newPrefix()
	s := openEvents(t, srv, prefix)
	rdb := srv.Client(t)
	acquire(t, s, lock.AcquireRequest{Lock: "x", Owner: "o"})
	old := acquire(t, s, lock.AcquireRequest{Lock: "x", Owner: "o"})
	key := prefix + "{x}:lock"
	rdb.HDel(ctx, key, "s:"+old.RequestID)
	rdb.HSet(ctx, key, "op", old.RequestID)
	for range 2 {
		if err := s.Abandon(ctx, "x", old.RequestID); err != nil {
			t.Fatal(err)
		}
	}
	if n := rdb.HGet(ctx, key, "count").Val(); n != "1" {
		t.Fatalf("holds after abandoning the old re-entry twice = %s, want 1", n)
	}
}
