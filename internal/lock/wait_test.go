package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
	"github.com/lockapi/lockapi/internal/testkit/storetest"
)

// flaky is the memory store whose TryAcquire answers unavailable while
// failing is positive, counting down: a store in the middle of a failover.
type flaky struct {
	*memory.Store
	failing atomic.Int32
}

func (f *flaky) TryAcquire(ctx context.Context, req lock.AcquireRequest) (lock.Grant, error) {
	if f.failing.Add(-1) >= 0 {
		return lock.Grant{}, lock.Unavailable(errors.New("failing over"))
	}
	return f.Store.TryAcquire(ctx, req)
}

func newFlaky(t *testing.T) *flaky {
	m := memory.New()
	t.Cleanup(func() { m.Close() })
	return &flaky{Store: m}
}

// A waiter woken while the store is briefly unavailable keeps waiting and is
// granted once the store answers, instead of failing with 503.
func TestAcquireWait_rides_out_an_unavailable_store(t *testing.T) {
	s := newFlaky(t)
	ctx := context.Background()
	holder, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "x", Owner: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	w := storetest.Watch(s)
	done := make(chan error, 1)
	go func() {
		_, err := lock.AcquireWait(ctx, w, lock.AcquireRequest{Lock: "x", Owner: "b", TTL: time.Minute}, 10*time.Second)
		done <- err
	}()
	storetest.WaitForWaiters(t, w, 1)
	s.failing.Store(3)
	if _, err := s.Release(ctx, lock.LeaseRef{Lock: "x", ID: holder.Lease.ID}, true); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the waiter gave up on an unavailable store: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not granted after the store came back")
	}
	if n := s.failing.Load(); n >= 0 {
		t.Fatalf("the store failed only %d of 3 tries: the test proved nothing", 3-n)
	}
}

// When the store stays unavailable, the wait ends at its deadline with the
// unavailable error, not before and not with lock-held.
func TestAcquireWait_unavailable_until_the_deadline(t *testing.T) {
	s := newFlaky(t)
	ctx := context.Background()
	holder, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "x", Owner: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w := storetest.Watch(s)
	done := make(chan error, 1)
	go func() {
		_, err := lock.AcquireWait(ctx, w, lock.AcquireRequest{Lock: "x", Owner: "b", TTL: time.Minute}, 500*time.Millisecond)
		done <- err
	}()
	storetest.WaitForWaiters(t, w, 1)
	s.failing.Store(1 << 30)
	if _, err := s.Release(ctx, lock.LeaseRef{Lock: "x", ID: holder.Lease.ID}, true); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if lock.ErrorCode(err) != lock.CodeUnavailable {
		t.Fatalf("err = %v, want unavailable", err)
	}
	if d := time.Since(start); d < 450*time.Millisecond {
		t.Fatalf("gave up after %v, before the 500ms wait ended", d)
	}
}
