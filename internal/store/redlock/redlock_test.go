package redlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/store/redlock"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
	"github.com/lockapi/lockapi/internal/testkit/storetest"
)

var ctx = context.Background()

// TestConformance runs the conformance suite on 3 and 5 independent
// masters, started once: every behaviour's store has a key prefix of its
// own. The two run side by side (t.Parallel): each waits on its masters
// and on TTLs far more than it computes.
func TestConformance(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(map[int]string{3: "3-masters", 5: "5-masters"}[n], func(t *testing.T) {
			t.Parallel()
			rl := redistest.StartRedlock(t, n)
			storetest.Run(t, storetest.Backend{
				Open: func(t *testing.T) lock.Store { return open(t, rl) },
				// No semaphores, fair locks, queue or event log
				// (docs/GUARANTEES.md); a lease answers what is left of
				// its TTL after the round trip and the drift allowance.
				ClockSlack: 5 * time.Second,
			})
		})
	}
}

// open opens a redlock store on rl's masters under a key prefix of its own,
// with a per-master deadline generous for a loaded test machine.
func open(t *testing.T, rl *redistest.Redlock) *redlock.Store {
	t.Helper()
	return openWith(t, rl, 2*time.Second)
}

func openWith(t *testing.T, rl *redistest.Redlock, perMaster time.Duration) *redlock.Store {
	t.Helper()
	prefix := "test:" + ulid.Make().String() + ":"
	var masters []*redisstore.Store
	for _, m := range rl.Masters {
		c, err := redisstore.NewClient(redisstore.ClientConfig{URL: m.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s, err := redisstore.New(c, redisstore.Options{Prefix: prefix, CallTimeout: perMaster, Batch: true, NoSessions: true})
		if err != nil {
			t.Fatal(err)
		}
		masters = append(masters, s)
	}
	s, err := redlock.New(masters)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestToken_written_back_to_a_majority: a fresh grant's token is the
// largest proposal, and it reaches a majority before the grant is answered,
// so a later grant by a majority without the master that proposed it is
// still larger. One master's counter is set far ahead of the clock; once it
// is gone, only the write-back keeps the next token above the last.
func TestToken_written_back_to_a_majority(t *testing.T) {
	rl := redistest.StartRedlock(t, 3)
	s := open(t, rl)
	prefix := prefixOf(t, s, rl)
	ahead := uint64(time.Now().Add(24 * time.Hour).UnixMicro())
	far := rl.Masters[2]
	if err := far.Client(t).HSet(ctx, prefix+"{wb}:fence", "token", ahead).Err(); err != nil {
		t.Fatal(err)
	}
	first := storetest.Acquire(t, s, "wb", "a", time.Minute)
	if first.Token != ahead+1 {
		t.Fatalf("token %d, want the largest proposal %d", first.Token, ahead+1)
	}
	for i, m := range rl.Masters {
		got, err := m.Client(t).HGet(ctx, prefix+"{wb}:lock", "token").Uint64()
		if err != nil || got != first.Token {
			t.Fatalf("master %d holds the lease with token %d (%v), want %d", i, got, err, first.Token)
		}
	}
	if _, err := s.Release(ctx, lock.LeaseRef{Lock: "wb", ID: first.ID}, false); err != nil {
		t.Fatal(err)
	}
	far.Node(t).Kill(t)
	second := storetest.Acquire(t, s, "wb", "b", time.Minute)
	if second.Token <= first.Token {
		t.Fatalf("token %d after %d, with the master that proposed it gone", second.Token, first.Token)
	}
}

// TestMinorityDown: with one master of three down, leases are granted,
// renewed and released; with two down, nothing is granted and the answer
// is unavailable.
func TestMinorityDown(t *testing.T) {
	rl := redistest.StartRedlock(t, 3)
	s := open(t, rl)
	rl.Masters[0].Node(t).Kill(t)
	l := storetest.Acquire(t, s, "md", "a", time.Minute)
	if _, err := s.Renew(ctx, lock.LeaseRef{Lock: "md", ID: l.ID}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if st := storetest.Inspect(t, s, "md"); !st.Held || st.Holder.Token != l.Token {
		t.Fatalf("state = %+v", st)
	}
	if _, err := s.Release(ctx, lock.LeaseRef{Lock: "md", ID: l.ID}, false); err != nil {
		t.Fatal(err)
	}
	rl.Masters[1].Node(t).Kill(t)
	_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "md", Owner: "b", TTL: time.Minute})
	storetest.WantCode(t, err, lock.CodeUnavailable)
	if err := s.Ping(ctx); lock.ErrorCode(err) != lock.CodeUnavailable {
		t.Fatalf("ping with 2 of 3 masters down: %v", err)
	}
}

// prefixOf finds the key prefix open gave s, from the keys a probe acquire
// leaves on the first master.
func prefixOf(t *testing.T, s *redlock.Store, rl *redistest.Redlock) string {
	t.Helper()
	l := storetest.Acquire(t, s, "probe", "p", time.Minute)
	if _, err := s.Release(ctx, lock.LeaseRef{Lock: "probe", ID: l.ID}, false); err != nil {
		t.Fatal(err)
	}
	keys, err := rl.Masters[0].Client(t).Keys(ctx, "*{probe}:fence").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("probe keys %v, %v", keys, err)
	}
	prefix, _, _ := strings.Cut(keys[0], "{probe}")
	return prefix
}

// TestStoppedMaster: a master that stops answering (SIGSTOP) costs each call
// its per-master deadline, not more: a waiter watches the others and is
// granted soon after the holder's release.
func TestStoppedMaster(t *testing.T) {
	rl := redistest.StartRedlock(t, 3)
	s := storetest.Watch(openWith(t, rl, 300*time.Millisecond))
	rl.Masters[0].Node(t).Pause(t)
	defer rl.Masters[0].Node(t).Continue(t)
	l := storetest.Acquire(t, s, "sm", "a", time.Minute)
	got := make(chan error, 1)
	go func() {
		_, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: "sm", Owner: "b", TTL: time.Minute}, 20*time.Second)
		got <- err
	}()
	storetest.WaitForWaiters(t, s, 1)
	released := time.Now()
	if _, err := s.Release(ctx, lock.LeaseRef{Lock: "sm", ID: l.ID}, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("waiter granted %v after the release, one master of 3 stopped", time.Since(released).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Fatal("waiter not granted within 3 s of the release with one master stopped")
	}
}
