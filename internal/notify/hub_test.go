package notify

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

var ctx = context.Background()

func woken(w *Watcher) bool {
	select {
	case <-w.C():
		return true
	default:
		return false
	}
}

func mustWatch(t *testing.T, h *Hub, name string, kind lock.WatchKind) *Watcher {
	t.Helper()
	w, err := h.Watch(ctx, name, kind)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestHub_release_wakes_one_waiter_and_every_watcher(t *testing.T) {
	h := New(nil)
	a, b := mustWatch(t, h, "l", lock.WaitForRelease), mustWatch(t, h, "l", lock.WaitForRelease)
	x, y := mustWatch(t, h, "l", lock.WatchChanges), mustWatch(t, h, "l", lock.WatchChanges)
	other := mustWatch(t, h, "other", lock.WaitForRelease)

	h.Notify("l", true, 0, "")
	if !woken(a) || woken(b) || !woken(x) || !woken(y) || woken(other) {
		t.Fatal("a release must wake the first waiter and every watcher of that lock only")
	}
	h.Notify("l", false, 0, "")
	if woken(a) || woken(b) || !woken(x) || !woken(y) {
		t.Fatal("a change that is not a release must wake watchers, not waiters")
	}
}

func TestHub_unconsumed_wakeup_passes_on(t *testing.T) {
	h := New(nil)
	a, b := mustWatch(t, h, "l", lock.WaitForRelease), mustWatch(t, h, "l", lock.WaitForRelease)
	h.Notify("l", true, 0, "")
	a.Close() // a leaves without acting on its wake-up
	if !woken(b) {
		t.Fatal("the wake-up a did not consume was lost")
	}
	b.Close()
	if h.Len() != 0 {
		t.Fatalf("%d watchers left", h.Len())
	}
}

func TestHub_expiry_wakes_one_waiter(t *testing.T) {
	h := New(nil)
	a, b := mustWatch(t, h, "l", lock.WaitForRelease), mustWatch(t, h, "l", lock.WaitForRelease)
	a.ExpectExpiry(time.Now().Add(20 * time.Millisecond))
	select {
	case <-a.C():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder's expiry did not wake a waiter")
	}
	if woken(b) {
		t.Fatal("expiry woke every waiter")
	}
}

// fakeSource is an in-process notification source. It records its calls
// ("+name", "-name"); the test delivers confirmations by hand unless hub is
// set.
type fakeSource struct {
	hub  *Hub              // when set, each successful subscribe is confirmed as it is made
	hold func(call string) // when set, runs in every call after it is recorded; a test blocks calls here

	mu      sync.Mutex
	subs    []string
	fail    map[string]error // Subscribe's error, by name
	busy    map[string]bool  // names with a call under way
	overlap bool             // two calls for one name overlapped
}

func (f *fakeSource) Subscribe(name string) error {
	err := f.call("+", name)
	if err == nil && f.hub != nil {
		f.hub.Confirmed(name)
	}
	return err
}

func (f *fakeSource) Unsubscribe(name string) error {
	f.call("-", name)
	return nil
}

func (f *fakeSource) call(op, name string) error {
	f.mu.Lock()
	if f.busy[name] {
		f.overlap = true
	}
	if f.busy == nil {
		f.busy = make(map[string]bool)
	}
	f.busy[name] = true
	f.subs = append(f.subs, op+name)
	var err error
	if op == "+" {
		err = f.fail[name]
	}
	f.mu.Unlock()
	if f.hold != nil {
		f.hold(op + name)
	}
	f.mu.Lock()
	delete(f.busy, name)
	f.mu.Unlock()
	return err
}

func (f *fakeSource) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.subs)
}

// within fails the test unless c is closed within a generous time.
func within(t *testing.T, c <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(2 * time.Second):
		t.Fatal(msg)
	}
}

// quiet waits until the hub has made every Subscriber call for name it has
// decided so far.
func quiet(t *testing.T, h *Hub, name string) {
	t.Helper()
	waitFor(t, func() bool { h.mu.Lock(); defer h.mu.Unlock(); return !h.syncing[name] })
}

func TestHub_watch_returns_only_when_confirmed(t *testing.T) {
	src := &fakeSource{}
	h := New(src)
	first := make(chan *Watcher)
	go func() { first <- mustWatch(t, h, "l", lock.WaitForRelease) }()
	waitFor(t, func() bool { src.mu.Lock(); defer src.mu.Unlock(); return len(src.subs) == 1 })
	select {
	case <-first:
		t.Fatal("Watch returned before the subscription was confirmed")
	case <-time.After(20 * time.Millisecond):
	}
	h.Confirmed("l")
	w := <-first
	w.Close()

	// Subscribe, unsubscribe, subscribe again: the first confirmation must
	// not mark the second subscription ready.
	second := make(chan *Watcher)
	go func() { second <- mustWatch(t, h, "l", lock.WaitForRelease) }()
	waitFor(t, func() bool { src.mu.Lock(); defer src.mu.Unlock(); return len(src.subs) == 3 })
	h.mu.Lock()
	h.pending["l"]++ // as if the earlier subscribe's confirmation were still on its way
	h.mu.Unlock()
	h.Confirmed("l")
	select {
	case <-second:
		t.Fatal("a late confirmation of an earlier subscription marked a new one ready")
	case <-time.After(20 * time.Millisecond):
	}
	h.Confirmed("l")
	w = <-second

	// An unexpected confirmation means the source resubscribed after a
	// reconnect: everyone looks again.
	h.Confirmed("l")
	if !woken(w) {
		t.Fatal("a resubscription did not wake the waiters")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestHub_consumed_wakeup_is_passed_on(t *testing.T) {
	h := New(nil)
	a, b := mustWatch(t, h, "l", lock.WaitForRelease), mustWatch(t, h, "l", lock.WaitForRelease)
	h.Notify("l", true, 0, "")
	if !woken(a) { // a reads its wake-up...
		t.Fatal("a was not woken")
	}
	a.PassOn() // ...but leaves without trying the lock
	if !woken(b) {
		t.Fatal("the wake-up a consumed and did not act on was lost")
	}
}

func TestHub_new_ttl_moves_the_expiry(t *testing.T) {
	h := New(nil)
	a := mustWatch(t, h, "l", lock.WaitForRelease)
	a.ExpectExpiry(time.Now().Add(time.Hour))
	h.Notify("l", false, 20*time.Millisecond, "") // renewed shorter
	select {
	case <-a.C():
	case <-time.After(5 * time.Second):
		t.Fatal("a lease renewed to 20ms was waited out at its old expiry")
	}
}

// TestHub_lost_confirmation_does_not_block_the_name: a subscribe whose
// confirmation died with the connection must not leave a count behind that
// blocks every later subscription of that name.
func TestHub_lost_confirmation_does_not_block_the_name(t *testing.T) {
	for _, order := range []string{"reset-then-leave", "leave-then-reset"} {
		t.Run(order, func(t *testing.T) {
			src := &fakeSource{}
			h := New(src)
			h.confirmTimeout = 50 * time.Millisecond
			left := make(chan error, 1)
			go func() {
				_, err := h.Watch(ctx, "x", lock.WaitForRelease)
				left <- err
			}()
			waitFor(t, func() bool { src.mu.Lock(); defer src.mu.Unlock(); return len(src.subs) == 1 })
			if order == "reset-then-leave" {
				h.Reset() // the connection died before the confirmation came
			}
			if err := <-left; err != ErrNotConfirmed {
				t.Fatalf("unconfirmed watch: %v", err)
			}
			if order == "leave-then-reset" {
				h.Reset()
			}
			// A later watch is confirmed by its own confirmation.
			done := make(chan error, 1)
			go func() {
				w, err := h.Watch(ctx, "x", lock.WaitForRelease)
				if err == nil {
					w.Close()
				}
				done <- err
			}()
			waitFor(t, func() bool { src.mu.Lock(); defer src.mu.Unlock(); return len(src.subs) >= 3 })
			h.Confirmed("x")
			if err := <-done; err != nil {
				t.Fatalf("the name stays blocked: %v", err)
			}
		})
	}
}

// TestHub_slow_subscribe_stalls_only_its_name: a Subscribe blocked on the
// network (a reconnect) holds up the Watch that needs it, and nothing else.
func TestHub_slow_subscribe_stalls_only_its_name(t *testing.T) {
	started, unblock := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(unblock) })
	t.Cleanup(release)
	src := &fakeSource{hold: func(call string) {
		if call == "+slow" {
			close(started)
			<-unblock
		}
	}}
	h := New(src)
	src.hub = h

	slow := make(chan error, 1)
	go func() {
		w, err := h.Watch(ctx, "slow", lock.WaitForRelease)
		if err == nil {
			w.Close()
		}
		slow <- err
	}()
	within(t, started, "the slow subscribe was not made")

	other := make(chan struct{})
	go func() {
		defer close(other)
		w, err := h.Watch(ctx, "fast", lock.WaitForRelease)
		if err != nil {
			t.Error(err)
			return
		}
		h.Notify("fast", true, 0, "")
		h.Notify("slow", true, 0, "")
		if !woken(w) {
			t.Error("a release of fast did not wake its waiter")
		}
		w.Close()
	}()
	within(t, other, "a slow subscribe of one name stalled the hub for another")

	select {
	case err := <-slow:
		t.Fatalf("the slow Watch returned (%v) before its subscription was made", err)
	default:
	}
	release()
	select {
	case err := <-slow:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the slow Watch did not complete once its subscribe went through")
	}
}

// TestHub_subscription_calls_keep_their_order_under_churn: many Watch and
// Close calls on one name race; the Subscriber still sees one call at a time,
// subscribes and unsubscribes alternating, and ends subscribed exactly when
// someone watches.
func TestHub_subscription_calls_keep_their_order_under_churn(t *testing.T) {
	src := &fakeSource{hold: func(string) { runtime.Gosched() }}
	h := New(src)
	src.hub = h

	const goroutines, rounds = 16, 500
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	kinds := []lock.WatchKind{lock.WaitForRelease, lock.WatchChanges}
	kept := make(chan *Watcher, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			kind := kinds[g%2]
			for r := range rounds {
				if r%3 == 0 {
					// Gives up at once, often before its entry's
					// Subscribe has had its turn.
					if w, err := h.Watch(cancelled, "l", kind); err == nil {
						w.Close()
					} else if err != context.Canceled {
						t.Error(err)
						return
					}
					continue
				}
				w, err := h.Watch(ctx, "l", kind)
				if err != nil {
					t.Error(err)
					return
				}
				if r == rounds-1 && g%4 == 0 {
					kept <- w // still watching at the end
					return
				}
				w.Close()
				runtime.Gosched() // let the entry empty now and then
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a Watch hung")
	}
	close(kept)

	check := func(want string) {
		t.Helper()
		quiet(t, h, "l")
		calls := src.calls()
		for i, c := range calls {
			if c != []string{"+l", "-l"}[i%2] {
				t.Fatalf("call %d is %s: subscribes and unsubscribes do not alternate", i, c)
			}
		}
		if last := calls[len(calls)-1]; last != want {
			t.Fatalf("the last call is %s, want %s", last, want)
		}
		src.mu.Lock()
		defer src.mu.Unlock()
		if src.overlap {
			t.Fatal("two calls for one name overlapped")
		}
	}
	check("+l") // some watchers are left
	for w := range kept {
		w.Close()
	}
	check("-l")
}

// TestHub_failed_subscribe_fails_its_watches: every Watch waiting for a
// subscribe that failed gets its error, and the next Watch tries again.
func TestHub_failed_subscribe_fails_its_watches(t *testing.T) {
	errDown := errors.New("source down")
	hold := make(chan struct{})
	src := &fakeSource{
		fail: map[string]error{"l": errDown},
		hold: func(call string) {
			if call == "+l" {
				<-hold
			}
		},
	}
	h := New(src)
	src.hub = h

	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := h.Watch(ctx, "l", lock.WaitForRelease)
			errs <- err
		}()
	}
	waitFor(t, func() bool { return h.Len() == 2 })
	close(hold)
	for range 2 {
		if err := <-errs; !errors.Is(err, errDown) {
			t.Fatalf("Watch: %v, want %v", err, errDown)
		}
	}
	if h.Len() != 0 {
		t.Fatalf("%d watchers left", h.Len())
	}

	src.mu.Lock()
	delete(src.fail, "l")
	src.mu.Unlock()
	w := mustWatch(t, h, "l", lock.WaitForRelease)
	w.Close()
	quiet(t, h, "l")
	// A failed subscribe may have taken effect (go-redis retries it on
	// reconnect), so it is unsubscribed like any other.
	if got, want := src.calls(), []string{"+l", "-l", "+l", "-l"}; !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
}
