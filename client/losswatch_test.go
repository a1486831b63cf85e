package client_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockapi/lockapi/client"
	lockhttp "github.com/lockapi/lockapi/internal/http"
)

// The loss watch's target is 250 ms from a force release (or an expiry)
// to the holder being told; the tests log what they measure and fail past
// lossBound, which leaves a loaded 2-core machine under -race room and
// still proves the watch: without it the holder learns at its next
// renewal, 10 s away with the 30 s TTL these tests use.
const (
	lossTTL   = 30 * time.Second
	lossBound = time.Second
)

// NewClient returns another client of e's server, through rt, with opts.
func (e *Env) NewClient(rt http.RoundTripper, opts ...client.Option) *client.Client {
	e.t.Helper()
	c, err := client.New(e.URL, append([]client.Option{client.WithHTTPClient(&http.Client{Transport: rt})}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// mustBeTold waits for ch, closed when the holder is told of a loss that
// happened at from, and returns how long that took.
func mustBeTold(t *testing.T, ch <-chan struct{}, from time.Time, what string) time.Duration {
	t.Helper()
	MustClose(t, ch, promptly, what)
	took := time.Since(from)
	t.Logf("%s: told %v after the loss (target 250ms, bound %v)", what, took, lossBound)
	if took > lossBound {
		t.Errorf("%s: told %v after the loss, want within %v (target 250ms)", what, took, lossBound)
	}
	return took
}

func TestLossWatch_force_release_cancels_WithLock(t *testing.T) {
	t.Parallel()
	ForEachStore(t, lockhttp.Config{}, func(t *testing.T, e *Env) {
		ctx := context.Background()
		err := e.Client.WithLock(ctx, "lw:job", client.AcquireOptions{TTL: lossTTL}, func(ctx context.Context, l *client.Lease) error {
			forced := time.Now()
			e.ForceRelease("lw:job")
			mustBeTold(t, ctx.Done(), forced, "WithLock's ctx")
			if !strings.Contains(l.Err().Error(), "no longer lists it") {
				t.Errorf("Err %q does not say what the watch saw", l.Err())
			}
			return ctx.Err()
		})
		if !errors.Is(err, client.ErrLeaseLost) {
			t.Fatalf("WithLock: %v, want ErrLeaseLost", err)
		}
		// A second holder is no loss of the first's lease, and is not told.
		l2 := e.MustAcquire("lw:job", client.AcquireOptions{TTL: lossTTL})
		if err := l2.Release(ctx); err != nil {
			t.Fatalf("release of the second holder's lease: %v", err)
		}
	})
}

func TestLossWatch_session(t *testing.T) {
	t.Parallel()
	ForEachStore(t, lockhttp.Config{}, func(t *testing.T, e *Env) {
		ctx := context.Background()
		s, err := e.Client.NewSession(ctx, client.SessionOptions{TTL: lossTTL})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		a, err := s.Acquire(ctx, "lws:a", client.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Acquire(ctx, "lws:b", client.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// One bound lease force-released: it alone is lost.
		forced := time.Now()
		e.ForceRelease("lws:a")
		mustBeTold(t, a.Lost(), forced, "a force-released bound lease")
		if isClosed(b.Done()) || isClosed(s.Done()) {
			t.Fatalf("the session (%v) or its other lease (%v) ended with it", s.Err(), b.Err())
		}
		// A lease bound after the watch began is watched too.
		c, err := s.Acquire(ctx, "lws:c", client.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		forced = time.Now()
		e.ForceRelease("lws:c")
		mustBeTold(t, c.Lost(), forced, "a lease bound later, force-released")
		if err := b.Release(ctx); err != nil {
			t.Fatalf("release of the lease that lives: %v", err)
		}
		d, err := s.Acquire(ctx, "lws:d", client.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The session ended by someone else: it and its leases are lost.
		ended := time.Now()
		if err := e.Client.DeleteSession(ctx, s.ID()); err != nil {
			t.Fatal(err)
		}
		mustBeTold(t, s.Lost(), ended, "a session deleted elsewhere")
		MustClose(t, d.Lost(), promptly, "its bound lease")
		if !errors.Is(d.Err(), client.ErrSessionLost) {
			t.Errorf("bound lease's Err %v, want ErrSessionLost", d.Err())
		}
	})
}

// failingGets answers every GET with a connection error while failing is
// set, and tells each failure on fails and each GET that got through on
// passed (its path).
type failingGets struct {
	base    http.RoundTripper
	failing atomic.Bool
	fails   chan struct{}
	passed  chan string
}

func (f *failingGets) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet {
		return f.base.RoundTrip(r)
	}
	if f.failing.Load() {
		select {
		case f.fails <- struct{}{}:
		default:
		}
		return nil, errors.New("connection refused (by the test)")
	}
	resp, err := f.base.RoundTrip(r)
	if err == nil {
		select {
		case f.passed <- r.URL.Path:
		default:
		}
	}
	return resp, err
}

// A watch that fails marks nothing lost: it is retried with backoff, and
// once it gets through it tells a force release as before.
func TestLossWatch_failing_watch_is_no_loss(t *testing.T) {
	t.Parallel()
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	ctx := context.Background()
	rt := &failingGets{base: e.Rec, fails: make(chan struct{}, 100), passed: make(chan string, 100)}
	rt.failing.Store(true)
	c := e.NewClient(rt)
	l, err := c.Acquire(ctx, "lwf:job", client.AcquireOptions{TTL: lossTTL})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	s, err := c.NewSession(ctx, client.SessionOptions{TTL: lossTTL})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	bound, err := s.Acquire(ctx, "lwf:bound", client.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Both watches fail a few times over (retried after 100, 200, 400 ms).
	for i := range 6 {
		select {
		case <-rt.fails:
		case <-time.After(promptly):
			t.Fatalf("the watches failed %d times, want them retried", i)
		}
	}
	for _, ch := range []<-chan struct{}{l.Done(), bound.Done(), s.Done()} {
		if isClosed(ch) {
			t.Fatalf("a failing watch ended something: lease %v, bound %v, session %v", l.Err(), bound.Err(), s.Err())
		}
	}
	rt.failing.Store(false)
	// Once both watches got through (their next retries), a force release
	// is told as before.
	var lockSeen, sessionSeen bool
	for !lockSeen || !sessionSeen {
		select {
		case path := <-rt.passed:
			lockSeen = lockSeen || strings.HasPrefix(path, "/v1/locks/lwf:job")
			sessionSeen = sessionSeen || strings.HasPrefix(path, "/v1/sessions/")
		case <-time.After(promptly):
			t.Fatalf("the watches did not get through again (lock %v, session %v)", lockSeen, sessionSeen)
		}
	}
	forced := time.Now()
	e.ForceRelease("lwf:job")
	mustBeTold(t, l.Lost(), forced, "a lease whose watch failed for a while")
	forced = time.Now()
	e.ForceRelease("lwf:bound")
	mustBeTold(t, bound.Lost(), forced, "a bound lease whose session watch failed for a while")
}

// WithoutLossWatch sends no blocking queries: only renewals.
func TestLossWatch_off(t *testing.T) {
	t.Parallel()
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	ctx := context.Background()
	var gets atomic.Int64
	c := e.NewClient(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodGet {
			gets.Add(1)
		}
		return e.Rec.RoundTrip(r)
	}), client.WithoutLossWatch())
	renewed := e.Rec.Subscribe()
	l, err := c.Acquire(ctx, "lwo:job", client.AcquireOptions{TTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.NewSession(ctx, client.SessionOptions{TTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "lwo:bound", client.AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, renewed, 2, "two renewals of the lease", func(ev Event) bool { return ev.Op == OpRenew && ev.LeaseID == l.ID() })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := gets.Load(); n != 0 {
		t.Errorf("%d GET requests without the loss watch, want none", n)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
