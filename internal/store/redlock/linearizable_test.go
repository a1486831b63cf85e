package redlock_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/store/redlock"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
	"github.com/lockapi/lockapi/internal/testkit/storetest"
)

// These tests pin what redlock's answers promise (docs/TOPOLOGIES.md,
// "What redlock's answers promise"): every answer fits one order of the
// operations. Each stages, with real masters, a race an outside
// linearizability check found.

// roles names, for one lock name, the master asked first and the two others.
type roles struct{ first, second, third int }

func rolesOf(s *redlock.Store, name string) roles {
	f := s.FirstMaster(name)
	return roles{f, (f + 1) % 3, (f + 2) % 3}
}

// acquireResult is the answer of an acquire run in the background.
type acquireResult struct {
	g   lock.Grant
	err error
}

func tryInBackground(s *redlock.Store, req lock.AcquireRequest) <-chan acquireResult {
	out := make(chan acquireResult, 1)
	go func() {
		g, err := s.TryAcquire(ctx, req)
		out <- acquireResult{g, err}
	}()
	return out
}

// waitLeaseOn waits until master m holds an exclusive lease of owner on
// name: the acquire in flight has reached it.
func waitLeaseOn(t *testing.T, m *redistest.Server, prefix, name, owner string) {
	t.Helper()
	c := m.Client(t)
	for range 500 {
		if got, _ := c.HGet(ctx, prefix+"{"+name+"}:lock", "owner").Result(); got == owner {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s holds no lease of %q on %q after 5 s", m.Addr, owner, name)
}

// heldBy returns the holder a lock-held refusal names (Owner "" for none).
func heldBy(t *testing.T, err error) lock.HeldBy {
	t.Helper()
	storetest.WantCode(t, err, lock.CodeHeld)
	var e *lock.Error
	if !errors.As(err, &e) || e.HeldBy == nil {
		t.Fatalf("a held refusal without HeldBy: %v", err)
	}
	return *e.HeldBy
}

// TestRefusal_names_no_token_before_the_write_back: alice's acquire is in
// flight (the third master is stopped, so it waits out its deadline before
// the write-back); the first master holds her lease with its own proposal,
// and the second proposed far more, so the token she is granted is the
// second's. A refusal to bob meanwhile must not name the first master's
// proposal, a token alice never had.
func TestRefusal_names_no_token_before_the_write_back(t *testing.T) {
	rl := redistest.StartRedlock(t, 3)
	s := openWith(t, rl, time.Second)
	prefix := prefixOf(t, s, rl)
	const name = "tk"
	r := rolesOf(s, name)
	ahead := uint64(time.Now().Add(24 * time.Hour).UnixMicro())
	if err := rl.Masters[r.second].Client(t).HSet(ctx, prefix+"{"+name+"}:fence", "token", ahead).Err(); err != nil {
		t.Fatal(err)
	}
	stopped := rl.Masters[r.third].Node(t)
	stopped.Pause(t)
	defer stopped.Continue(t)
	alice := tryInBackground(s, lock.AcquireRequest{Lock: name, Owner: "alice", TTL: time.Minute})
	waitLeaseOn(t, rl.Masters[r.first], prefix, name, "alice")
	waitLeaseOn(t, rl.Masters[r.second], prefix, name, "alice")

	_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "bob", TTL: time.Minute})
	by := heldBy(t, err)
	a := <-alice
	if a.err != nil {
		t.Fatalf("alice: %v", a.err)
	}
	if a.g.Lease.Token != ahead+1 {
		t.Fatalf("alice was granted token %d, want the second master's proposal %d", a.g.Lease.Token, ahead+1)
	}
	if by.Owner != "" && (by.Owner != "alice" || by.Token != a.g.Lease.Token) {
		t.Fatalf("bob's refusal names %q with token %d; alice was granted token %d", by.Owner, by.Token, a.g.Lease.Token)
	}
}

// TestRefusal_names_no_holder_whose_acquire_fails: carol's lease is on one
// master only (an acquire that lost, whose undo has not arrived yet). Alice
// is granted by the first master, refused by carol's, and waits out the
// stopped third master's deadline, then fails. A refusal to bob meanwhile
// must not name alice: she never held the lock.
func TestRefusal_names_no_holder_whose_acquire_fails(t *testing.T) {
	rl := redistest.StartRedlock(t, 3)
	s := openWith(t, rl, time.Second)
	prefix := prefixOf(t, s, rl)
	const name = "fl"
	r := rolesOf(s, name)
	carolOn := masterStore(t, rl.Masters[r.second], prefix)
	if _, err := carolOn.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "carol", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	stopped := rl.Masters[r.third].Node(t)
	stopped.Pause(t)
	defer stopped.Continue(t)
	alice := tryInBackground(s, lock.AcquireRequest{Lock: name, Owner: "alice", TTL: time.Minute})
	waitLeaseOn(t, rl.Masters[r.first], prefix, name, "alice")

	_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "bob", TTL: time.Minute})
	by := heldBy(t, err)
	a := <-alice
	if a.err == nil {
		t.Fatalf("alice was granted %+v with one master of three", a.g.Lease)
	}
	if by.Owner == "alice" {
		t.Fatalf("bob's refusal names alice (token %d), whose acquire then failed: %v", by.Token, a.err)
	}
}

// TestReentrant_hold_counts_are_distinct: concurrent reentrant acquires of
// one owner reach the masters in different orders; each answer's hold
// count must still be one of its own, as on one Redis: 2, 3, ... 11.
func TestReentrant_hold_counts_are_distinct(t *testing.T) {
	rl := redistest.StartRedlock(t, 3)
	s := open(t, rl)
	const name, workers, rounds = "rc", 10, 20
	l := storetest.Acquire(t, s, name, "alice", time.Minute)
	for round := range rounds {
		counts := make([]int, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "alice", TTL: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				counts[w] = g.Lease.HoldCount
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		slices.Sort(counts)
		var want []int
		for i := range workers {
			want = append(want, 2+i)
		}
		if !slices.Equal(counts, want) {
			t.Fatalf("round %d: hold counts %v, want %v", round, counts, want)
		}
		// Back to one hold for the next round: release one at a time, each
		// answer one less.
		for left := workers; left > 0; left-- {
			res, err := s.Release(ctx, lock.LeaseRef{Lock: name, ID: l.ID}, false)
			if err != nil || res.Released || res.HoldCount != left {
				t.Fatalf("round %d: release = %+v, %v; want %d holds left", round, res, err, left)
			}
		}
	}
}

// masterStore opens a plain store on one master under prefix, to stage
// what only one master holds.
func masterStore(t *testing.T, m *redistest.Server, prefix string) *redisstore.Store {
	t.Helper()
	c, err := redisstore.NewClient(redisstore.ClientConfig{URL: m.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	st, err := redisstore.New(c, redisstore.Options{Prefix: prefix, CallTimeout: 2 * time.Second, NoSessions: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestRace_granted_only_as_the_first_master_granted: two acquires of alice
// on a free lock reach the masters in different orders. The first master
// ran hers first (a fresh lease of her request id); the two others ran
// the other's first (lease x, which hers re-enters there). Answered as the
// majority's re-entry of x, the first master would not hold the lease
// granted, and later refusals and hold counts read there would not
// describe the lock. The acquire is undone instead and answered
// unavailable, leaving x as it was.
func TestRace_granted_only_as_the_first_master_granted(t *testing.T) {
	rl := redistest.StartRedlock(t, 3)
	s := open(t, rl)
	prefix := prefixOf(t, s, rl)
	const name = "order"
	r := rolesOf(s, name)
	req := lock.AcquireRequest{Lock: name, Owner: "alice", TTL: time.Minute}
	const x = "01HX0000000000000000000000" // the other acquire's request id
	for _, m := range []int{r.second, r.third} {
		if _, err := masterStore(t, rl.Masters[m], prefix).AcquireAs(ctx, req, x); err != nil {
			t.Fatal(err)
		}
	}

	g, err := s.TryAcquire(ctx, req)
	if err == nil {
		t.Fatalf("granted %+v, a lease the first master does not hold", g.Lease)
	}
	storetest.WantCode(t, err, lock.CodeUnavailable)
	first := rl.Masters[r.first].Client(t)
	if n, _ := first.Exists(ctx, prefix+"{"+name+"}:lock").Result(); n != 0 {
		t.Fatalf("the first master still holds the undone acquire's lease")
	}
	for _, m := range []int{r.second, r.third} {
		count, _ := rl.Masters[m].Client(t).HGet(ctx, prefix+"{"+name+"}:lock", "count").Result()
		if count != "1" {
			t.Fatalf("master %d holds x with %q holds, want the other acquire's 1", m, count)
		}
	}
}

// TestRace_no_reentry_of_a_lease_still_being_granted: alice's lease x is
// on the first two masters with their own token proposals, its write-back
// (of the larger, or of the stopped third master's, larger still) not yet
// done. A re-entry must not answer either proposal as the lease's token:
// it is undone and answered unavailable.
func TestRace_no_reentry_of_a_lease_still_being_granted(t *testing.T) {
	rl := redistest.StartRedlock(t, 3)
	s := open(t, rl)
	prefix := prefixOf(t, s, rl)
	const name = "inflight"
	r := rolesOf(s, name)
	ahead := uint64(time.Now().Add(time.Hour).UnixMicro())
	if err := rl.Masters[r.second].Client(t).HSet(ctx, prefix+"{"+name+"}:fence", "token", ahead).Err(); err != nil {
		t.Fatal(err)
	}
	req := lock.AcquireRequest{Lock: name, Owner: "alice", TTL: time.Minute}
	const x = "01HX0000000000000000000000"
	for _, m := range []int{r.first, r.second} {
		if _, err := masterStore(t, rl.Masters[m], prefix).AcquireAs(ctx, req, x); err != nil {
			t.Fatal(err)
		}
	}

	g, err := s.TryAcquire(ctx, req)
	if err == nil {
		t.Fatalf("re-entered with token %d while the lease's token is not written back", g.Lease.Token)
	}
	storetest.WantCode(t, err, lock.CodeUnavailable)
	for _, m := range []int{r.first, r.second} {
		count, _ := rl.Masters[m].Client(t).HGet(ctx, prefix+"{"+name+"}:lock", "count").Result()
		if count != "1" {
			t.Fatalf("master %d holds x with %q holds after the undo, want 1", m, count)
		}
	}
}

// TestRace_release_ends_the_lease_where_the_first_master_does: alice holds
// her lease twice and releases twice at once. The other masters ran the
// other release first, the first master runs this one first: this release
// frees a majority but leaves the first master one hold. Answered as the
// majority's end of the lease, the other release would then end it too,
// and neither would answer one hold left. The first master's order
// decides: this one leaves 1 hold, the other ends the lease.
func TestRace_release_ends_the_lease_where_the_first_master_does(t *testing.T) {
	rl := redistest.StartRedlock(t, 3)
	s := open(t, rl)
	prefix := prefixOf(t, s, rl)
	const name = "rel"
	r := rolesOf(s, name)
	l := storetest.Acquire(t, s, name, "alice", time.Minute)
	storetest.Acquire(t, s, name, "alice", time.Minute)
	ref := lock.LeaseRef{Lock: name, ID: l.ID}
	for _, m := range []int{r.second, r.third} { // the other release, there first
		if res, err := masterStore(t, rl.Masters[m], prefix).Release(ctx, ref, false); err != nil || res.HoldCount != 1 {
			t.Fatalf("master %d: release = %+v, %v", m, res, err)
		}
	}

	res, err := s.Release(ctx, ref, false)
	if err != nil || res.Released || res.HoldCount != 1 {
		t.Fatalf("this release = %+v, %v; want 1 hold left, as the first master ran it first", res, err)
	}
	res, err = s.Release(ctx, ref, false) // the other, on the first master
	if err != nil || !res.Released || res.HoldCount != 0 {
		t.Fatalf("the other release = %+v, %v; want the lease ended", res, err)
	}
	for i, m := range rl.Masters {
		if n, _ := m.Client(t).Exists(ctx, prefix+"{"+name+"}:lock").Result(); n != 0 {
			t.Fatalf("master %d still holds the lease after it ended", i)
		}
	}
}

// TestRace_reentry_refused_by_the_others_answers_unavailable: alice's
// lease is on the first master only (the others have not run its acquire
// yet; they hold other owners' leases). Her re-entry is counted there
// until it is undone: a concurrent release may answer with it counted, so
// a 409 (no effect) would not fit; it answers unavailable.
func TestRace_reentry_refused_by_the_others_answers_unavailable(t *testing.T) {
	rl := redistest.StartRedlock(t, 3)
	s := open(t, rl)
	prefix := prefixOf(t, s, rl)
	const name = "reref"
	r := rolesOf(s, name)
	req := func(owner string) lock.AcquireRequest {
		return lock.AcquireRequest{Lock: name, Owner: owner, TTL: time.Minute}
	}
	if _, err := masterStore(t, rl.Masters[r.first], prefix).AcquireAs(ctx, req("alice"), "01HX0000000000000000000000"); err != nil {
		t.Fatal(err)
	}
	for m, owner := range map[int]string{r.second: "bob", r.third: "carol"} {
		if _, err := masterStore(t, rl.Masters[m], prefix).TryAcquire(ctx, req(owner)); err != nil {
			t.Fatal(err)
		}
	}

	_, err := s.TryAcquire(ctx, req("alice"))
	storetest.WantCode(t, err, lock.CodeUnavailable)
	count, _ := rl.Masters[r.first].Client(t).HGet(ctx, prefix+"{"+name+"}:lock", "count").Result()
	if count != "1" {
		t.Fatalf("the first master counts %q holds after the undo, want 1", count)
	}
}

// TestRace_retried_release_is_the_first_masters_answer: alice's lease
// ended everywhere; then another lease of the name was released on the
// other masters only (its release reached them, and the first master ran
// an abandon that ended it there). Her retried release is still the
// lease's last release on the first master, which ran every call of the
// name in one order: it answers 200 again, not the others' lease-lost.
func TestRace_retried_release_is_the_first_masters_answer(t *testing.T) {
	rl := redistest.StartRedlock(t, 3)
	s := open(t, rl)
	prefix := prefixOf(t, s, rl)
	const name = "retry"
	r := rolesOf(s, name)
	l := storetest.Acquire(t, s, name, "alice", time.Minute)
	ref := lock.LeaseRef{Lock: name, ID: l.ID}
	if res, err := s.Release(ctx, ref, false); err != nil || !res.Released {
		t.Fatalf("release = %+v, %v", res, err)
	}
	for _, m := range []int{r.second, r.third} {
		st := masterStore(t, rl.Masters[m], prefix)
		g, err := st.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "bob", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Release(ctx, lock.LeaseRef{Lock: name, ID: g.Lease.ID}, false); err != nil {
			t.Fatal(err)
		}
	}

	res, err := s.Release(ctx, ref, false)
	if err != nil || !res.Released || !res.Retried {
		t.Fatalf("retried release = %+v, %v; want 200 again, as the first master answers", res, err)
	}
}
