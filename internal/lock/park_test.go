package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
)

type answer struct {
	g   lock.Grant
	err error
}

// parkOn holds "x" as a, and parks b's wait of wait on it.
func parkOn(t *testing.T, wait time.Duration) (*memory.Store, lock.Grant, context.CancelFunc, func(), chan answer) {
	t.Helper()
	m := memory.New()
	t.Cleanup(func() { m.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	holder, err := m.TryAcquire(ctx, lock.AcquireRequest{Lock: "x", Owner: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	_, wt, err := lock.BeginWait(ctx, m, lock.AcquireRequest{Lock: "x", Owner: "b", TTL: time.Minute}, wait)
	if wt == nil {
		t.Fatalf("BeginWait answered at once: %v", err)
	}
	answers := make(chan answer, 2)
	wake := wt.Park(ctx, func(g lock.Grant, err error) { answers <- answer{g, err} })
	return m, holder, cancel, wake, answers
}

func within(t *testing.T, answers chan answer) answer {
	t.Helper()
	select {
	case a := <-answers:
		return a
	case <-time.After(5 * time.Second):
		t.Fatal("the parked wait was not answered")
		return answer{}
	}
}

// A parked wait is granted by a release, with no goroutine of the caller's
// waiting for it, and answers once.
func TestWaiting_Park_granted_on_release(t *testing.T) {
	m, holder, _, _, answers := parkOn(t, time.Minute)
	if _, err := m.Release(context.Background(), lock.LeaseRef{Lock: "x", ID: holder.Lease.ID}, true); err != nil {
		t.Fatal(err)
	}
	a := within(t, answers)
	if a.err != nil || a.g.Lease.Owner != "b" {
		t.Fatalf("answer = %+v, %v", a.g.Lease, a.err)
	}
	if m.WatcherCount() != 0 {
		t.Errorf("%d watchers left", m.WatcherCount())
	}
	select {
	case a := <-answers:
		t.Fatalf("answered twice: %+v", a)
	case <-time.After(50 * time.Millisecond):
	}
}

// A parked wait runs out at its deadline with the holder's lock-held.
func TestWaiting_Park_deadline(t *testing.T) {
	m, _, _, _, answers := parkOn(t, 50*time.Millisecond)
	a := within(t, answers)
	if lock.ErrorCode(a.err) != lock.CodeHeld {
		t.Fatalf("answer error = %v, want lock-held", a.err)
	}
	if m.WatcherCount() != 0 {
		t.Errorf("%d watchers left", m.WatcherCount())
	}
}

// A parked wait whose context ends answers once woken, and holds nothing
// when the lock is released after.
func TestWaiting_Park_cancelled(t *testing.T) {
	m, holder, cancel, wake, answers := parkOn(t, time.Minute)
	cancel()
	wake()
	if a := within(t, answers); a.err != context.Canceled {
		t.Fatalf("answer error = %v, want context.Canceled", a.err)
	}
	if _, err := m.Release(context.Background(), lock.LeaseRef{Lock: "x", ID: holder.Lease.ID}, true); err != nil {
		t.Fatal(err)
	}
	st, err := m.Inspect(context.Background(), "x")
	if err != nil || st.Held {
		t.Fatalf("state = %+v, %v: the cancelled waiter holds the lock", st, err)
	}
}
