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
	st, err := redisstore.New(c, redisstore.Options{Prefix: prefix, CallTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
