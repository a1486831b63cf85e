package redlock_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/redlock"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
	"github.com/lockapi/lockapi/internal/testkit/storetest"
)

// TestStoppedMaster_marked_down: once a call to a stopped (SIGSTOP) master
// timed out, later calls do not ask it, so an acquire+release pair costs
// what the two others cost instead of that master's deadline several
// times. After SIGCONT a probe hears from it: the release it missed runs on
// it, and calls reach it again.
func TestStoppedMaster_marked_down(t *testing.T) {
	rl := redistest.StartRedlock(t, 3)
	// Generous for a loaded machine: a live master that misses it would be
	// marked down too, and two of three down grant nothing.
	s := openWith(t, rl, 500*time.Millisecond)
	prefix := prefixOf(t, s, rl)
	held := storetest.Acquire(t, s, "before-stop", "early", time.Minute)

	stopped := rl.Masters[0]
	stopped.Node(t).Pause(t)
	defer stopped.Node(t).Continue(t) // a second SIGCONT is harmless
	start := time.Now()
	acquireRelease(t, s, "first-timeout")
	t.Logf("first pair, which waits out the stopped master's deadline: %v", time.Since(start).Round(time.Millisecond))
	if _, err := s.Release(ctx, lock.LeaseRef{Lock: "before-stop", ID: held.ID}, false); err != nil {
		t.Fatal(err)
	}

	const pairs = 41
	took := make([]time.Duration, pairs)
	for i := range pairs {
		start := time.Now()
		acquireRelease(t, s, fmt.Sprintf("fresh-%d", i))
		took[i] = time.Since(start)
	}
	slices.Sort(took)
	median := took[pairs/2]
	t.Logf("acquire+release on a fresh name, one master of 3 stopped and marked down: median %v, max %v (%d pairs)",
		median.Round(100*time.Microsecond), took[pairs-1].Round(100*time.Microsecond), pairs)
	if median > 50*time.Millisecond {
		t.Fatalf("median acquire+release %v with a master marked down, want ≤ 50 ms", median)
	}

	stopped.Node(t).Continue(t)
	waitRejoined(t, s, rl, prefix)
	for _, name := range []string{"before-stop", "first-timeout"} {
		if n, err := stopped.Client(t).Exists(ctx, prefix+"{"+name+"}:lock").Result(); err != nil || n != 0 {
			t.Fatalf("the stopped master still holds %q after it rejoined (%d, %v): it missed the release", name, n, err)
		}
	}
}

// acquireRelease acquires name as a fresh lease and releases it.
func acquireRelease(t *testing.T, s *redlock.Store, name string) {
	t.Helper()
	l := storetest.Acquire(t, s, name, "o", time.Minute)
	if res, err := s.Release(ctx, lock.LeaseRef{Lock: name, ID: l.ID}, false); err != nil || !res.Released {
		t.Fatalf("release %s = %+v, %v", name, res, err)
	}
}

// waitRejoined waits (10 s at most) until a fresh grant is present on
// every master: the calls reach all of them again.
func waitRejoined(t *testing.T, s *redlock.Store, rl *redistest.Redlock, prefix string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		name, owner := fmt.Sprintf("rejoin-%d", i), fmt.Sprintf("r%d", i)
		l := storetest.Acquire(t, s, name, owner, time.Minute)
		on := 0
		for _, m := range rl.Masters {
			if got, _ := m.Client(t).HGet(ctx, prefix+"{"+name+"}:lock", "owner").Result(); got == owner {
				on++
			}
		}
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: name, ID: l.ID}, false); err != nil {
			t.Fatal(err)
		}
		if on == len(rl.Masters) {
			t.Logf("rejoined: grant %d after SIGCONT is on all %d masters", i, on)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no fresh grant reached every master within 10 s of SIGCONT: the stopped master did not rejoin")
}
