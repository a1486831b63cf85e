package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
	"github.com/lockapi/lockapi/internal/testkit/storetest"
)

type answer struct {
	g   lock.Grant
	err error
}

// parkOn holds "x" as a, and parks b's wait of wait on it.
func parkOn(t *testing.T, wait time.Duration) (*storetest.Watched, lock.Grant, context.CancelFunc, func(), chan answer) {
	t.Helper()
	m := storetest.Watch(memory.New())
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

// watchers is how many watchers s has registered now.
func watchers(s *storetest.Watched) int {
	n, _ := s.Waiters()
	return n
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
	if n := watchers(m); n != 0 {
		t.Errorf("%d watchers left", n)
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
	if n := watchers(m); n != 0 {
		t.Errorf("%d watchers left", n)
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

type multiAnswer struct {
	grants []lock.Grant
	err    error
}

// parkAllOn holds "x" and "y" as a, and parks b's multi-lock of both, with
// a wait of wait, on them.
func parkAllOn(t *testing.T, wait time.Duration) (*storetest.Watched, []lock.Grant, context.CancelFunc, func(), chan multiAnswer) {
	t.Helper()
	m := storetest.Watch(memory.New())
	t.Cleanup(func() { m.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var holders []lock.Grant
	for _, name := range []string{"x", "y"} {
		g, err := m.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "a", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, g)
	}
	reqs := []lock.AcquireRequest{{Lock: "y", Owner: "b", TTL: time.Minute}, {Lock: "x", Owner: "b", TTL: time.Minute}}
	_, mwt, err := lock.BeginAll(ctx, m, reqs, wait)
	if mwt == nil {
		t.Fatalf("BeginAll answered at once: %v", err)
	}
	answers := make(chan multiAnswer, 2)
	wake := mwt.Park(ctx, func(grants []lock.Grant, err error) { answers <- multiAnswer{grants, err} })
	return m, holders, cancel, wake, answers
}

func withinAll(t *testing.T, answers chan multiAnswer) multiAnswer {
	t.Helper()
	select {
	case a := <-answers:
		return a
	case <-time.After(5 * time.Second):
		t.Fatal("the parked multi-lock was not answered")
		return multiAnswer{}
	}
}

func release(t *testing.T, m lock.Store, g lock.Grant) {
	t.Helper()
	if _, err := m.Release(context.Background(), lock.LeaseRef{Lock: g.Lease.Lock, ID: g.Lease.ID}, true); err != nil {
		t.Fatal(err)
	}
}

// A parked multi-lock follows the name in the way from one lock to the
// next, and is granted every lock, in the order asked, once both are free.
func TestMultiWaiting_Park_granted_on_releases(t *testing.T) {
	m, holders, _, _, answers := parkAllOn(t, time.Minute)
	release(t, m, holders[0]) // x: y is still in the way
	select {
	case a := <-answers:
		t.Fatalf("answered while y is held: %+v, %v", a.grants, a.err)
	case <-time.After(50 * time.Millisecond):
	}
	release(t, m, holders[1])
	a := withinAll(t, answers)
	if a.err != nil || len(a.grants) != 2 || a.grants[0].Lease.Lock != "y" || a.grants[1].Lease.Lock != "x" ||
		a.grants[0].Lease.Owner != "b" || a.grants[1].Lease.Owner != "b" {
		t.Fatalf("answer = %+v, %v", a.grants, a.err)
	}
	if n := watchers(m); n != 0 {
		t.Errorf("%d watchers left", n)
	}
}

// A parked multi-lock runs out at its deadline with lock-held, holding
// nothing.
func TestMultiWaiting_Park_deadline(t *testing.T) {
	m, holders, _, _, answers := parkAllOn(t, 50*time.Millisecond)
	release(t, m, holders[1]) // y free: x stays in the way
	a := withinAll(t, answers)
	var le *lock.LockError
	if lock.ErrorCode(a.err) != lock.CodeHeld || !errors.As(a.err, &le) || le.Lock != "x" {
		t.Fatalf("answer error = %v, want lock-held on x", a.err)
	}
	if st, err := m.Inspect(context.Background(), "y"); err != nil || st.Held {
		t.Fatalf("y = %+v, %v: the multi-lock kept part of its set", st, err)
	}
	if n := watchers(m); n != 0 {
		t.Errorf("%d watchers left", n)
	}
}

// A parked multi-lock whose context ends answers once woken, and holds
// nothing when the locks are released after.
func TestMultiWaiting_Park_cancelled(t *testing.T) {
	m, holders, cancel, wake, answers := parkAllOn(t, time.Minute)
	cancel()
	wake()
	if a := withinAll(t, answers); a.err != context.Canceled {
		t.Fatalf("answer error = %v, want context.Canceled", a.err)
	}
	for _, g := range holders {
		release(t, m, g)
	}
	for _, name := range []string{"x", "y"} {
		if st, err := m.Inspect(context.Background(), name); err != nil || st.Held {
			t.Fatalf("%s = %+v, %v: the cancelled multi-lock holds it", name, st, err)
		}
	}
}
