package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/lockapi/lockapi/client"
	lockhttp "github.com/lockapi/lockapi/internal/http"
)

func TestSession_keeps_every_lease_and_Close_frees_them(t *testing.T) {
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	ctx := context.Background()
	// A TTL that a loaded CI machine's pauses do not outlast: the test is
	// of the one watchdog renewing every lease, not of its timing.
	s, err := e.Client.NewSession(ctx, client.SessionOptions{TTL: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	one, err := s.Acquire(ctx, "sess:one", client.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	two, err := s.AcquireAll(ctx, []string{"sess:a", "sess:b"}, client.AcquireOptions{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	// Three TTLs pass: the session's one watchdog keeps all of them.
	time.Sleep(4500 * time.Millisecond)
	for _, name := range []string{"sess:one", "sess:a", "sess:b"} {
		st, err := e.Client.Inspect(ctx, name)
		if err != nil || !st.Held {
			t.Fatalf("%s after three TTLs: %+v, %v", name, st, err)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sess:one", "sess:a", "sess:b"} {
		if st, _ := e.Client.Inspect(ctx, name); st.Held {
			t.Fatalf("%s is held after Close", name)
		}
	}
	for _, l := range append(two, one) {
		select {
		case <-l.Done():
		case <-time.After(promptly):
			t.Fatalf("lease of %s not done after Close", l.Name())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release after Close: %v", err)
		}
	}
}

func TestSession_Lost_when_the_server_ends_it(t *testing.T) {
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	ctx := context.Background()
	s, err := e.Client.NewSession(ctx, client.SessionOptions{TTL: 300 * time.Millisecond, LockDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, "sess:lost", client.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Someone else ends it (an admin, say): the next renewal finds it gone.
	req, _ := http.NewRequest("DELETE", e.URL+"/v1/sessions/"+s.ID(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, ch := range []<-chan struct{}{s.Lost(), l.Lost()} {
		select {
		case <-ch:
		case <-time.After(promptly):
			t.Fatalf("not lost: session %v, lease %v", s.Err(), l.Err())
		}
	}
	if !errors.Is(s.Err(), client.ErrSessionLost) || !errors.Is(l.Err(), client.ErrLeaseLost) {
		t.Fatalf("errors %v, %v", s.Err(), l.Err())
	}
	if err := s.Close(ctx); !errors.Is(err, client.ErrSessionLost) {
		t.Fatalf("Close after the loss = %v", err)
	}
}

// TestAcquire_waits_through_a_lock_delay: a force release of a session's
// lease closes its lock for the session's lock-delay. A try fails with a
// *LockDelayError that tells what is left, Inspect shows it, and an
// acquire with a Wait is granted once it ends, or fails with it when the
// delay outlasts the wait.
func TestAcquire_waits_through_a_lock_delay(t *testing.T) {
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	ctx := context.Background()
	const delay = time.Second
	s, err := e.Client.NewSession(ctx, client.SessionOptions{LockDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if _, err := s.Acquire(ctx, "ld:short", client.AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	long, err := e.Client.NewSession(ctx, client.SessionOptions{LockDelay: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close(ctx)
	if _, err := long.Acquire(ctx, "ld:long", client.AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	forced := time.Now()
	e.ForceRelease("ld:short")
	e.ForceRelease("ld:long")

	_, err = e.Client.Acquire(ctx, "ld:short", client.AcquireOptions{})
	var de *client.LockDelayError
	if !client.IsLockDelay(err) || !errors.As(err, &de) || de.Lock != "ld:short" || de.Remaining <= 0 || de.Remaining > delay {
		t.Fatalf("try during the lock-delay: %#v", err)
	}
	if pe, ok := errors.AsType[*client.ProblemError](err); !ok || pe.Status != http.StatusConflict || client.IsHeld(err) {
		t.Fatalf("the lock-delay error unwraps to %#v", pe)
	}
	st, err := e.Client.Inspect(ctx, "ld:short")
	if err != nil || st.Held || st.LockDelay <= 0 || st.LockDelay > delay {
		t.Fatalf("Inspect during the lock-delay: %+v, %v", st, err)
	}

	l, err := e.Client.Acquire(ctx, "ld:short", client.AcquireOptions{Wait: 10 * time.Second})
	if err != nil {
		t.Fatalf("an acquire that waits through the lock-delay: %v", err)
	}
	if waited := time.Since(forced); waited < delay-100*time.Millisecond {
		t.Fatalf("granted %v after the force release, before the %v lock-delay ended", waited, delay)
	}
	_ = l.Release(ctx)

	_, err = e.Client.Acquire(ctx, "ld:long", client.AcquireOptions{Wait: 200 * time.Millisecond})
	if !errors.As(err, &de) || de.Remaining < 50*time.Second {
		t.Fatalf("an acquire whose wait the lock-delay outlasts: %v", err)
	}
}
