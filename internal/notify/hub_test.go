package notify

import (
	"context"
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

	h.Notify("l", true, 0)
	if !woken(a) || woken(b) || !woken(x) || !woken(y) || woken(other) {
		t.Fatal("a release must wake the first waiter and every watcher of that lock only")
	}
	h.Notify("l", false, 0)
	if woken(a) || woken(b) || !woken(x) || !woken(y) {
		t.Fatal("a change that is not a release must wake watchers, not waiters")
	}
}

func TestHub_unconsumed_wakeup_passes_on(t *testing.T) {
	h := New(nil)
	a, b := mustWatch(t, h, "l", lock.WaitForRelease), mustWatch(t, h, "l", lock.WaitForRelease)
	h.Notify("l", true, 0)
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

// fakeSource is an in-process notification source whose confirmations the
// test delivers by hand.
type fakeSource struct {
	mu   sync.Mutex
	subs []string
}

func (f *fakeSource) Subscribe(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs = append(f.subs, "+"+name)
	return nil
}

func (f *fakeSource) Unsubscribe(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs = append(f.subs, "-"+name)
	return nil
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
	h.Notify("l", true, 0)
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
	h.Notify("l", false, 20*time.Millisecond) // renewed shorter
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
