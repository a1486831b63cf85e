// Package storetest is the conformance suite of lock.Store: every behaviour
// the HTTP API relies on, written once and run against every store
// (internal/store/memory, and internal/store/redis on a single Redis, a
// Sentinel set and a Cluster), so that the stores cannot drift apart.
//
// A store's own tests call Run with a Backend that opens it:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Backend{Open: openStore})
//	}
package storetest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// Backend is one lock.Store implementation under the suite, and what it
// declares it offers. A behaviour that needs what a store lacks is skipped,
// and the suite checks the store's refusal instead; nothing in the suite
// depends on which store it is, so that two backends can run in parallel.
type Backend struct {
	// Open returns an empty store, closed when t ends. Every behaviour opens
	// its own.
	Open func(t *testing.T) lock.Store
	// LoseData names the ways the store can lose everything it holds
	// (FLUSHALL, a restart without persistence, a process restart for
	// memory); each loses s's data and returns the store to go on with.
	// Tokens_survive_data_loss runs once per entry.
	LoseData map[string]func(t *testing.T, s lock.Store) lock.Store

	// Semaphores: the store grants permits (AcquireRequest.Limit).
	Semaphores bool
	// FairQueues: the store grants fair locks (AcquireRequest.Fair) and
	// queues waiters, holding later acquires off while they wait.
	FairQueues bool
	// Events: the store keeps an event log (its Events is not nil).
	Events bool
	// Sessions: the store keeps sessions (its Sessions is not nil).
	Sessions bool
	// Updates: the store replaces a lease's metadata (Store.Update); one
	// without refuses it as unsupported (redlock).
	Updates bool
	// EventsHold is how long a read of the event log holds back the
	// newest events: a log merged from several, ordered by their clocks
	// (Redis Cluster's, one per master), in which only each lock's events
	// are in order. 0 for a log that is one sequence.
	EventsHold time.Duration
	// ClockSlack is how far a lease's times may be from what Inspect shows
	// of them: 0, but on a store that answers what is left of a TTL on
	// lockapi's clock, less a clock-drift allowance of 1 % of the TTL
	// (redlock), while Inspect shows the times its masters hold.
	ClockSlack time.Duration
}

// Run runs every behaviour of the suite on b, each as a subtest of t named
// after the behaviour.
func Run(t *testing.T, b Backend) {
	t.Run("Declared_events_match_the_store", func(t *testing.T) { checkEvents(t, b) })
	t.Run("Declared_sessions_match_the_store", func(t *testing.T) { checkSessions(t, b) })
	t.Run("Refused_kinds", func(t *testing.T) { refusedKinds(t, b) })
	for _, c := range slices.Concat(behaviours, sessionBehaviours, updateBehaviours) {
		t.Run(c.name, func(t *testing.T) { c.test(t, b) })
	}
}

// sameTime reports whether x and y are the same time, within the
// backend's ClockSlack.
func (b Backend) sameTime(x, y time.Time) bool {
	d := x.Sub(y)
	slack := b.ClockSlack
	if slack > 0 {
		// The drift allowance grows with the TTL: 1 % of it.
		slack += time.Until(x) / 50
	}
	return max(d, -d) <= slack
}

// BenchAcquireRelease measures one acquire and release cycle on s, on a new
// lock name each time.
func BenchAcquireRelease(b *testing.B, s lock.Store) {
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
}

var ctx = context.Background()

// Acquire acquires name for owner or fails the test.
func Acquire(t *testing.T, s lock.Store, name, owner string, ttl time.Duration) lock.Lease {
	t.Helper()
	g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: owner, TTL: ttl})
	if err != nil {
		t.Fatalf("acquire %s by %s: %v", name, owner, err)
	}
	return g.Lease
}

// WantCode fails the test unless err carries code.
func WantCode(t *testing.T, err error, code lock.Code) {
	t.Helper()
	if got := lock.ErrorCode(err); got != code {
		t.Fatalf("error code = %q (%v), want %q", got, err, code)
	}
}

// Inspect returns name's state or fails the test.
func Inspect(t *testing.T, s lock.Store, name string) lock.State {
	t.Helper()
	st, err := s.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Watched is a store whose waiters the test can count: the kit's hook on
// Watch, through which every wait passes (lock.AcquireWait, AcquireAll, a
// parked wait, a blocking query). A watcher counts from the moment Watch
// returns it, when it is registered with the store, until it is closed.
type Watched struct {
	lock.Store
	mu      sync.Mutex
	n       int
	changed chan struct{} // closed, and replaced, whenever n changes
}

// Watch wraps s so that WaitForWaiters can count its waiters.
func Watch(s lock.Store) *Watched {
	return &Watched{Store: s, changed: make(chan struct{})}
}

// Watch implements lock.Store: it counts the watcher it returns.
func (w *Watched) Watch(ctx context.Context, name string, kind lock.WatchKind) (lock.Watcher, error) {
	inner, err := w.Store.Watch(ctx, name, kind)
	if err != nil {
		return nil, err
	}
	w.add(1)
	return &countedWatcher{Watcher: inner, w: w}, nil
}

// Waiters returns how many watchers are registered now, and a channel
// closed when that changes.
func (w *Watched) Waiters() (int, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n, w.changed
}

func (w *Watched) add(d int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n += d
	close(w.changed)
	w.changed = make(chan struct{})
}

// countedWatcher is a watcher of a Watched store: closing it, once, counts
// it out.
type countedWatcher struct {
	lock.Watcher
	w      *Watched
	closed sync.Once
}

func (c *countedWatcher) Close() {
	c.Watcher.Close()
	c.closed.Do(func() { c.w.add(-1) })
}

// WaitForWaiters waits until at least n waiters are registered with s, or
// none when n is 0 (every waiter closed its watcher), woken by each change
// of the count, not by a sleep.
func WaitForWaiters(t testing.TB, s *Watched, n int) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		got, changed := s.Waiters()
		if (n == 0 && got == 0) || (n > 0 && got >= n) {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("%d waiters registered, want %d", got, n)
		}
	}
}

func tryAcquire(t *testing.T, s lock.Store, req lock.AcquireRequest) lock.Grant {
	t.Helper()
	if req.TTL == 0 {
		req.TTL = time.Minute
	}
	g, err := s.TryAcquire(ctx, req)
	if err != nil {
		t.Fatalf("acquire %+v: %v", req, err)
	}
	return g
}

func abandon(t *testing.T, s lock.Store, name, requestID string) {
	t.Helper()
	if err := s.Abandon(ctx, name, requestID); err != nil {
		t.Fatalf("abandon %s of %s: %v", requestID, name, err)
	}
}

func holds(t *testing.T, s lock.Store, name string) int {
	t.Helper()
	st := Inspect(t, s, name)
	if !st.Held {
		return 0
	}
	return st.Holder.HoldCount
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func checkTokensSurvive(t *testing.T, s lock.Store, loseData func() lock.Store) {
	t.Helper()
	var last uint64
	for i := 0; i < 50; i++ {
		l := Acquire(t, s, "survivor", "w", time.Minute)
		last = l.Token
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: "survivor", ID: l.ID}, false); err != nil {
			t.Fatal(err)
		}
	}
	held := Acquire(t, s, "survivor", "w", time.Minute)
	s = loseData()
	if st := Inspect(t, s, "survivor"); st.Held || st.LastToken != 0 {
		t.Fatalf("the data was not lost: %+v", st)
	}
	after := Acquire(t, s, "survivor", "other", time.Minute)
	if after.Token <= held.Token || held.Token <= last {
		t.Fatalf("tokens %d, %d, then %d after data loss", last, held.Token, after.Token)
	}
}
