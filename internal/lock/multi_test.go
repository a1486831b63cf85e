package lock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
	"github.com/lockapi/lockapi/internal/testkit/storetest"
)

func newMemory(t *testing.T) *memory.Store {
	t.Helper()
	m := memory.New()
	t.Cleanup(func() { m.Close() })
	return m
}

// multi builds the requests of one multi-lock by owner on names.
func multi(owner string, names ...string) []lock.AcquireRequest {
	reqs := make([]lock.AcquireRequest, len(names))
	for i, name := range names {
		reqs[i] = lock.AcquireRequest{Lock: name, Owner: owner, TTL: time.Minute}
	}
	return reqs
}

// mustHold takes name for owner or fails the test.
func mustHold(t *testing.T, s lock.Store, name, owner string) lock.Grant {
	t.Helper()
	g, err := s.TryAcquire(context.Background(), lock.AcquireRequest{Lock: name, Owner: owner, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// holders returns the owner of each name, "" when free.
func holders(t *testing.T, s lock.Store, names ...string) []string {
	t.Helper()
	out := make([]string, len(names))
	for i, name := range names {
		st, err := s.Inspect(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Held && st.Holder != nil {
			out[i] = st.Holder.Owner
		}
	}
	return out
}

func TestAcquireAll_grants_in_the_callers_order(t *testing.T) {
	s := newMemory(t)
	reqs := multi("me", "c", "a", "b")
	grants, err := lock.AcquireAll(context.Background(), s, reqs, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range grants {
		if g.Lease.Lock != reqs[i].Lock || g.Lease.Owner != "me" || !g.Fresh {
			t.Errorf("grant %d = %+v, want a fresh lease of %s", i, g.Lease, reqs[i].Lock)
		}
	}
	if got := holders(t, s, "a", "b", "c"); !slices.Equal(got, []string{"me", "me", "me"}) {
		t.Fatalf("holders %q", got)
	}
}

// recorder is the memory store, recording the names it is asked for.
type recorder struct {
	*memory.Store
	mu    sync.Mutex
	tried []string
}

func (r *recorder) TryAcquire(ctx context.Context, req lock.AcquireRequest) (lock.Grant, error) {
	r.mu.Lock()
	r.tried = append(r.tried, req.Lock)
	r.mu.Unlock()
	return r.Store.TryAcquire(ctx, req)
}

func TestAcquireAll_takes_names_in_byte_order(t *testing.T) {
	s := &recorder{Store: newMemory(t)}
	// Byte order, not case-insensitive or numeric: "B" < "a", "a10" < "a9".
	if _, err := lock.AcquireAll(context.Background(), s, multi("me", "a9", "a10", "a", "B", "~"), 0); err != nil {
		t.Fatal(err)
	}
	if want := []string{"B", "a", "a10", "a9", "~"}; !slices.Equal(s.tried, want) {
		t.Fatalf("taken in the order %q, want %q", s.tried, want)
	}
}

// A refusal gives back every name taken before it and touches none after.
func TestAcquireAll_all_or_nothing(t *testing.T) {
	s := newMemory(t)
	mustHold(t, s, "b", "other")
	_, err := lock.AcquireAll(context.Background(), s, multi("me", "c", "a", "b"), 0)
	if lock.ErrorCode(err) != lock.CodeHeld {
		t.Fatalf("err = %v, want held", err)
	}
	var le *lock.LockError
	if !errors.As(err, &le) || le.Lock != "b" {
		t.Fatalf("err = %#v, want a LockError naming b", err)
	}
	if h := lock.AsError(err).HeldBy; h == nil || h.Owner != "other" {
		t.Fatalf("HeldBy = %+v", h)
	}
	if got := holders(t, s, "a", "b", "c"); !slices.Equal(got, []string{"", "other", ""}) {
		t.Fatalf("holders after the refusal %q, want only b held by other", got)
	}
}

// A reentrant hold that the multi-lock added is given back, and only it:
// the owner's own earlier hold stays.
func TestAcquireAll_gives_back_exactly_the_holds_it_added(t *testing.T) {
	s := newMemory(t)
	mine := mustHold(t, s, "a", "me")
	mustHold(t, s, "b", "other")
	if _, err := lock.AcquireAll(context.Background(), s, multi("me", "a", "b"), 0); lock.ErrorCode(err) != lock.CodeHeld {
		t.Fatalf("err = %v, want held", err)
	}
	st, err := s.Inspect(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.Holder.Token != mine.Lease.Token || st.Holder.HoldCount != 1 {
		t.Fatalf("a = %+v, want my lease with its one hold", st.Holder)
	}
}

func TestValidateAll(t *testing.T) {
	many := make([]string, lock.MaxMultiLocks+1)
	for i := range many {
		many[i] = fmt.Sprintf("n%d", i)
	}
	withReq := func(f func(*lock.AcquireRequest)) []lock.AcquireRequest {
		reqs := multi("me", "a", "b")
		for i := range reqs {
			f(&reqs[i])
		}
		return reqs
	}
	for _, tc := range []struct {
		name  string
		reqs  []lock.AcquireRequest
		field string
	}{
		{"None", nil, "locks"},
		{"TooMany", multi("me", many...), "locks"},
		{"Duplicate", multi("me", "a", "b", "a"), "locks"},
		{"BadName", multi("me", "a", "b c"), "locks"},
		{"Fair", withReq(func(r *lock.AcquireRequest) { r.Fair = true }), "fair"},
		{"Limit", withReq(func(r *lock.AcquireRequest) { r.Limit = 3 }), "limit"},
		{"IdempotencyKey", withReq(func(r *lock.AcquireRequest) { r.IdempotencyKey = "k" }), "Idempotency-Key"},
		{"BadMode", withReq(func(r *lock.AcquireRequest) { r.Mode = "upgrade" }), "mode"},
		{"NoOwner", withReq(func(r *lock.AcquireRequest) { r.Owner = "" }), "owner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := lock.AsError(lock.ValidateAll(tc.reqs))
			if e.Code != lock.CodeInvalid || len(e.Fields) != 1 || e.Fields[0].Field != tc.field {
				t.Fatalf("err = %+v, want invalid naming %q once", e, tc.field)
			}
		})
	}
	// 64 names are fine.
	if err := lock.ValidateAll(multi("me", many[:lock.MaxMultiLocks]...)); err != nil {
		t.Fatalf("64 names: %v", err)
	}
}

// A waiting multi-lock holds nothing while it waits, and takes the whole
// set once the name in the way is released.
func TestAcquireAll_waits_holding_nothing(t *testing.T) {
	s := storetest.Watch(newMemory(t))
	holder := mustHold(t, s, "b", "other")
	done := make(chan error, 1)
	var grants []lock.Grant
	go func() {
		var err error
		grants, err = lock.AcquireAll(context.Background(), s, multi("me", "a", "b", "c"), 10*time.Second)
		done <- err
	}()
	storetest.WaitForWaiters(t, s, 1)
	time.Sleep(20 * time.Millisecond) // let a broken waiter take something
	if got := holders(t, s, "a", "b", "c"); !slices.Equal(got, []string{"", "other", ""}) {
		t.Fatalf("while waiting: holders %q, want only b held by other", got)
	}
	if _, err := s.Release(context.Background(), lock.LeaseRef{Lock: "b", ID: holder.Lease.ID}, true); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not granted after the release")
	}
	if len(grants) != 3 {
		t.Fatalf("grants %+v", grants)
	}
	if got := holders(t, s, "a", "b", "c"); !slices.Equal(got, []string{"me", "me", "me"}) {
		t.Fatalf("holders %q", got)
	}
}

// A multi-lock that waits for one name and then finds another in the way
// watches that one instead.
func TestAcquireAll_follows_the_name_in_the_way(t *testing.T) {
	s := storetest.Watch(newMemory(t))
	hb := mustHold(t, s, "b", "other")
	done := make(chan error, 1)
	go func() {
		_, err := lock.AcquireAll(context.Background(), s, multi("me", "a", "b", "c"), 10*time.Second)
		done <- err
	}()
	storetest.WaitForWaiters(t, s, 1)
	// c is taken before b goes: the waiter wakes, finds c held, and must
	// wait for c now.
	hc := mustHold(t, s, "c", "other")
	if _, err := s.Release(context.Background(), lock.LeaseRef{Lock: "b", ID: hb.Lease.ID}, true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if got := holders(t, s, "a", "b", "c"); !slices.Equal(got, []string{"", "", "other"}) {
		t.Fatalf("while waiting for c: holders %q", got)
	}
	if _, err := s.Release(context.Background(), lock.LeaseRef{Lock: "c", ID: hc.Lease.ID}, true); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not granted after c was released")
	}
}

// watchHook runs before each Watch registers.
type watchHook struct {
	*memory.Store
	before func()
}

func (h *watchHook) Watch(ctx context.Context, name string, kind lock.WatchKind) (lock.Watcher, error) {
	if h.before != nil {
		h.before()
		h.before = nil
	}
	return h.Store.Watch(ctx, name, kind)
}

// A release between the refusal and the watch's registration, which no
// watch sees, is not missed: the multi-lock tries again once it watches.
func TestAcquireAll_release_before_the_watch_is_not_missed(t *testing.T) {
	s := &watchHook{Store: newMemory(t)}
	holder := mustHold(t, s, "b", "other")
	s.before = func() {
		if _, err := s.Release(context.Background(), lock.LeaseRef{Lock: "b", ID: holder.Lease.ID}, true); err != nil {
			t.Error(err)
		}
	}
	start := time.Now()
	if _, err := lock.AcquireAll(context.Background(), s, multi("me", "a", "b"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("granted after %v: the release was missed", d)
	}
}

func TestAcquireAll_wait_runs_out_holding_nothing(t *testing.T) {
	s := storetest.Watch(newMemory(t))
	mustHold(t, s, "b", "other")
	start := time.Now()
	_, err := lock.AcquireAll(context.Background(), s, multi("me", "a", "b"), 100*time.Millisecond)
	if lock.ErrorCode(err) != lock.CodeHeld {
		t.Fatalf("err = %v, want held", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("gave up after %v, before the wait ended", d)
	}
	if got := holders(t, s, "a", "b"); !slices.Equal(got, []string{"", "other"}) {
		t.Fatalf("holders %q", got)
	}
	if n := watchers(s); n != 0 {
		t.Fatalf("%d watchers left behind", n)
	}
}

func TestAcquireAll_cancelled_holds_nothing(t *testing.T) {
	s := storetest.Watch(newMemory(t))
	mustHold(t, s, "b", "other")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := lock.AcquireAll(ctx, s, multi("me", "a", "b", "c"), time.Minute)
		done <- err
	}()
	storetest.WaitForWaiters(t, s, 1)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled multi-lock kept waiting")
	}
	if got := holders(t, s, "a", "b", "c"); !slices.Equal(got, []string{"", "other", ""}) {
		t.Fatalf("holders %q", got)
	}
}

// cancelling cancels the caller's context from inside its n-th try, after
// the store granted it: the grant arrives when nobody can receive it.
type cancelling struct {
	*memory.Store
	n      atomic.Int32
	cancel context.CancelFunc
}

func (c *cancelling) TryAcquire(ctx context.Context, req lock.AcquireRequest) (lock.Grant, error) {
	g, err := c.Store.TryAcquire(ctx, req)
	if c.n.Add(-1) == 0 {
		c.cancel()
	}
	return g, err
}

func TestAcquireAll_cancelled_mid_pass_holds_nothing(t *testing.T) {
	for _, at := range []int32{1, 2, 3} {
		t.Run(fmt.Sprint("try", at), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := &cancelling{Store: newMemory(t), cancel: cancel}
			s.n.Store(at)
			_, err := lock.AcquireAll(ctx, s, multi("me", "a", "b", "c"), time.Minute)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if got := holders(t, s, "a", "b", "c"); !slices.Equal(got, []string{"", "", ""}) {
				t.Fatalf("holders %q after a cancelled multi-lock", got)
			}
		})
	}
}

// Eight clients take random overlapping sets of names for a while. No two
// ever hold a name at once, nobody deadlocks, and every attempt ends with
// its grants or cleanly with lock-held at its deadline, holding nothing.
func TestAcquireAll_no_deadlock(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	const (
		clients  = 8
		nNames   = 10
		duration = 3 * time.Second
		wait     = 2 * time.Second
	)
	s := storetest.Watch(newMemory(t))
	names := make([]string, nNames)
	for i := range names {
		names[i] = fmt.Sprintf("n%d", i)
	}
	var occupied [nNames]atomic.Bool
	var granted, timedOut atomic.Int64
	stop := time.Now().Add(duration)

	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			owner := fmt.Sprintf("client-%d", c)
			for time.Now().Before(stop) {
				picked := rand.Perm(nNames)[:1+rand.IntN(5)]
				var set []string
				for _, i := range picked {
					set = append(set, names[i])
				}
				start := time.Now()
				grants, err := lock.AcquireAll(context.Background(), s, multi(owner, set...), wait)
				if took := time.Since(start); took > wait+time.Second {
					t.Errorf("%s: an attempt on %q took %v, over its %v wait", owner, set, took, wait)
				}
				if err != nil {
					if lock.ErrorCode(err) != lock.CodeHeld {
						t.Errorf("%s: %v", owner, err)
						return
					}
					timedOut.Add(1)
					continue
				}
				for _, i := range picked {
					if !occupied[i].CompareAndSwap(false, true) {
						t.Errorf("%s: %s is already occupied by someone else", owner, names[i])
					}
				}
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				for _, i := range picked {
					occupied[i].Store(false)
				}
				for _, g := range grants {
					if _, err := s.Release(context.Background(), lock.LeaseRef{Lock: g.Lease.Lock, ID: g.Lease.ID}, true); err != nil {
						t.Errorf("%s: release %s: %v", owner, g.Lease.Lock, err)
					}
				}
				granted.Add(1)
			}
		})
	}
	wg.Wait()
	t.Logf("%d multi-locks granted, %d timed out", granted.Load(), timedOut.Load())
	if granted.Load() == 0 {
		t.Fatal("no multi-lock was ever granted")
	}
	if got := holders(t, s, names...); strings.Join(got, "") != "" {
		t.Fatalf("names still held at the end: %q", got)
	}
	if n := watchers(s); n != 0 {
		t.Fatalf("%d watchers left behind", n)
	}
}
