package client_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockapi/lockapi/client"
	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/testkit/apitest"
)

func TestNew(t *testing.T) {
	for _, u := range []string{"", "localhost:8080", "ftp://h", "http://", "://x"} {
		if _, err := client.New(u); err == nil {
			t.Errorf("New(%q): no error", u)
		}
	}
	for _, u := range []string{"http://localhost:8080", "https://locks.example/", "http://127.0.0.1:1/base"} {
		if _, err := client.New(u); err != nil {
			t.Errorf("New(%q): %v", u, err)
		}
	}
}

func TestAcquire_Release(t *testing.T) {
	ForEachStore(t, lockhttp.Config{}, func(t *testing.T, e *Env) {
		ctx := context.Background()
		before := time.Now()
		l, err := e.Client.Acquire(ctx, "deploy:prod", client.AcquireOptions{TTL: 10 * time.Second, Metadata: map[string]string{"job": "nightly"}})
		if err != nil {
			t.Fatal(err)
		}
		if l.Name() != "deploy:prod" || len(l.ID()) != 26 || l.Owner() == "" || l.Token() == 0 || l.HoldCount() != 1 || l.TTL() != 10*time.Second {
			t.Errorf("lease: name %q id %q owner %q token %d holds %d ttl %v", l.Name(), l.ID(), l.Owner(), l.Token(), l.HoldCount(), l.TTL())
		}
		if l.Metadata()["job"] != "nightly" {
			t.Errorf("metadata %v", l.Metadata())
		}
		if exp := l.ExpiresAt(); exp.Before(before.Add(10*time.Second)) || exp.After(time.Now().Add(10*time.Second)) {
			t.Errorf("ExpiresAt %v: want between %v and %v", exp, before.Add(10*time.Second), time.Now().Add(10*time.Second))
		}
		if owner, _ := e.Holder("deploy:prod"); owner != l.Owner() {
			t.Errorf("holder %q, want %q", owner, l.Owner())
		}
		if l.Err() != nil || isClosed(l.Done()) || isClosed(l.Lost()) {
			t.Errorf("a held lease: Err %v, Done closed %v, Lost closed %v", l.Err(), isClosed(l.Done()), isClosed(l.Lost()))
		}

		if err := l.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		if owner, _ := e.Holder("deploy:prod"); owner != "" {
			t.Errorf("after release the lock is held by %q", owner)
		}
		if !errors.Is(l.Err(), client.ErrReleased) || !isClosed(l.Done()) || isClosed(l.Lost()) {
			t.Errorf("a released lease: Err %v, Done closed %v, Lost closed %v", l.Err(), isClosed(l.Done()), isClosed(l.Lost()))
		}

		t.Run("ReleaseTwice", func(t *testing.T) {
			if err := l.Release(ctx); err != nil {
				t.Errorf("second release: %v", err)
			}
			if n := e.Rec.Count(OpRelease); n != 1 {
				t.Errorf("%d release requests, want 1", n)
			}
		})

		t.Run("NextTokenLarger", func(t *testing.T) {
			l2 := e.MustAcquire("deploy:prod", client.AcquireOptions{})
			if l2.Token() <= l.Token() {
				t.Errorf("token %d after %d", l2.Token(), l.Token())
			}
		})
	})
}

func TestAcquire_NamesRoundTrip(t *testing.T) {
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	for _, name := range []string{"a", "deploy:prod", "user@host~x.y_z-1", strings.Repeat("n", 200)} {
		l := e.MustAcquire(name, client.AcquireOptions{})
		if l.Name() != name {
			t.Errorf("lease name %q, want %q", l.Name(), name)
		}
		if owner, _ := e.Holder(name); owner != l.Owner() {
			t.Errorf("%q: holder %q, want %q", name, owner, l.Owner())
		}
	}
}

func TestAcquire_Invalid(t *testing.T) {
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	// The request breaks the contract on purpose: check only the answer.
	c, err := client.New(e.URL, client.WithHTTPClient(apitest.NewClient(t, e.URL)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(context.Background(), "bad name", client.AcquireOptions{})
	var pe *client.ProblemError
	if !errors.As(err, &pe) || pe.Status != 400 || pe.Type != "https://lockapi.dev/problems/invalid-request" || len(pe.Fields) == 0 || pe.Fields[0].Field != "name" {
		t.Fatalf("err %v (%#v), want a 400 naming the field", err, pe)
	}
	if pe.RequestID == "" || !strings.Contains(err.Error(), "invalid-request") {
		t.Errorf("error %q: want the problem type and request id", err)
	}
	if client.IsHeld(err) || errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrLeaseLost) {
		t.Errorf("a 400 matches another error kind: %v", err)
	}
}

func TestAcquire_Reentrant(t *testing.T) {
	ForEachStore(t, lockhttp.Config{}, func(t *testing.T, e *Env) {
		ctx := context.Background()
		opts := client.AcquireOptions{Owner: "worker-7", TTL: 5 * time.Second}
		l1 := e.MustAcquire("job", opts)
		l2 := e.MustAcquire("job", opts)
		if l2.ID() != l1.ID() || l2.Token() != l1.Token() || l2.HoldCount() != 2 {
			t.Fatalf("reentrant acquire: id %s token %d holds %d; first: id %s token %d", l2.ID(), l2.Token(), l2.HoldCount(), l1.ID(), l1.Token())
		}
		if err := l2.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if owner, holds := e.Holder("job"); owner != "worker-7" || holds != 1 {
			t.Errorf("after one release: holder %q with %d holds, want worker-7 with 1", owner, holds)
		}
		if err := l1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if owner, _ := e.Holder("job"); owner != "" {
			t.Errorf("after both releases: held by %q", owner)
		}
	})
}

func TestAcquire_Held(t *testing.T) {
	ForEachStore(t, lockhttp.Config{}, func(t *testing.T, e *Env) {
		holder := e.MustAcquire("job", client.AcquireOptions{Owner: "holder-1", TTL: 20 * time.Second})
		_, err := e.Client.Acquire(context.Background(), "job", client.AcquireOptions{Owner: "other"})
		if !client.IsHeld(err) {
			t.Fatalf("err %v, want held", err)
		}
		var he *client.HeldError
		errors.As(err, &he)
		if he.Lock != "job" || he.Owner != "holder-1" || he.Token != holder.Token() || he.ExpiresIn <= 0 || he.ExpiresIn > 20*time.Second {
			t.Errorf("held error %+v, holder token %d", he, holder.Token())
		}
		if msg := err.Error(); !strings.Contains(msg, `"holder-1"`) {
			t.Errorf("message %q does not name the holder", msg)
		}
		if errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrLeaseLost) {
			t.Errorf("a held error matches another kind: %v", err)
		}
	})
}

func TestAcquire_Wait(t *testing.T) {
	ForEachStore(t, lockhttp.Config{}, func(t *testing.T, e *Env) {
		holder := e.MustAcquire("job", client.AcquireOptions{TTL: 20 * time.Second})
		waiting := e.Rec.OnStart(OpAcquire)

		type result struct {
			l   *client.Lease
			err error
		}
		got := make(chan result, 1)
		go func() {
			l, err := e.Client.Acquire(context.Background(), "job", client.AcquireOptions{Wait: 30 * time.Second})
			got <- result{l, err}
		}()
		select {
		case <-waiting:
		case <-time.After(promptly):
			t.Fatal("the waiting acquire was not sent")
		}
		if err := holder.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.l.Release(context.Background())
			if r.l.Token() <= holder.Token() {
				t.Errorf("token %d after %d", r.l.Token(), holder.Token())
			}
		case <-time.After(promptly):
			t.Fatal("the waiter was not granted the lock after its release")
		}
	})
}

// A wait longer than the server's maximum wait takes several long-poll
// requests, and the waiter still gets the lock.
func TestAcquire_WaitBeyondServerMaxWait(t *testing.T) {
	e := MustOpenMemoryEnv(t, lockhttp.Config{MaxWait: 150 * time.Millisecond})
	holder := e.MustAcquire("job", client.AcquireOptions{TTL: 20 * time.Second})
	started := e.Rec.OnStart(OpAcquire)

	got := make(chan error, 1)
	go func() {
		l, err := e.Client.Acquire(context.Background(), "job", client.AcquireOptions{Wait: 30 * time.Second})
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	for i := range 3 {
		select {
		case <-started:
		case <-time.After(promptly):
			t.Fatalf("only %d acquire requests", i)
		}
	}
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(promptly):
		t.Fatal("the waiter was not granted the lock after its release")
	}
	// The holder's acquire, then the waiter's requests: one key for all of
	// them, so that a retry is a repeat, not a second hold.
	keys := e.Rec.AcquireKeys()
	if len(keys) < 4 || keys[1] == "" || keys[1] == keys[0] {
		t.Fatalf("Idempotency-Keys = %q", keys)
	}
	for _, k := range keys[2:] {
		if k != keys[1] {
			t.Fatalf("one Acquire sent different Idempotency-Keys: %q", keys)
		}
	}
}

func TestAcquire_WaitTimeout(t *testing.T) {
	e := MustOpenMemoryEnv(t, lockhttp.Config{MaxWait: 100 * time.Millisecond})
	e.MustAcquire("job", client.AcquireOptions{Owner: "slow-job", TTL: 20 * time.Second})
	start := time.Now()
	_, err := e.Client.Acquire(context.Background(), "job", client.AcquireOptions{Wait: 400 * time.Millisecond})
	elapsed := time.Since(start)
	var he *client.HeldError
	if !errors.As(err, &he) || he.Owner != "slow-job" {
		t.Fatalf("err %v, want held by slow-job", err)
	}
	if elapsed < 400*time.Millisecond || elapsed > promptly {
		t.Errorf("gave up after %v, want about 400ms", elapsed)
	}
}

func TestAcquire_Cancelled(t *testing.T) {
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	e.MustAcquire("job", client.AcquireOptions{TTL: 20 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	started := e.Rec.OnStart(OpAcquire)
	got := make(chan error, 1)
	go func() {
		_, err := e.Client.Acquire(ctx, "job", client.AcquireOptions{Wait: time.Minute})
		got <- err
	}()
	<-started
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err %v, want context.Canceled", err)
		}
	case <-time.After(promptly):
		t.Fatal("a cancelled acquire did not return")
	}
}

func TestAcquire_ServerDown(t *testing.T) {
	c, err := client.New(DownURL(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(context.Background(), "job", client.AcquireOptions{})
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("err %v, want ErrUnavailable", err)
	}

	// A waiting acquire retries until its wait ends.
	start := time.Now()
	_, err = c.Acquire(context.Background(), "job", client.AcquireOptions{Wait: 500 * time.Millisecond})
	if !errors.Is(err, client.ErrUnavailable) || time.Since(start) < 500*time.Millisecond {
		t.Fatalf("after %v: err %v, want ErrUnavailable after the wait", time.Since(start), err)
	}
}

// The watchdog keeps a lease with a short TTL through work that lasts much
// longer.
func TestLease_WatchdogKeepsItAlive(t *testing.T) {
	ForEachStore(t, lockhttp.Config{}, func(t *testing.T, e *Env) {
		const ttl = 300 * time.Millisecond
		l := e.MustAcquire("job", client.AcquireOptions{TTL: ttl})
		select {
		case <-l.Lost():
			t.Fatalf("lost during the work: %v", l.Err())
		case <-time.After(4 * ttl): // the work
		}
		if n := e.Rec.Count(OpRenew); n < 3 {
			t.Errorf("%d renewals in %v with TTL %v", n, 4*ttl, ttl)
		}
		if _, err := e.Client.Acquire(context.Background(), "job", client.AcquireOptions{}); !client.IsHeld(err) {
			t.Errorf("another acquire: %v, want held", err)
		}
		if time.Until(l.ExpiresAt()) <= 0 {
			t.Errorf("ExpiresAt %v is past", l.ExpiresAt())
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestLease_LostByForceRelease(t *testing.T) {
	ForEachStore(t, lockhttp.Config{}, func(t *testing.T, e *Env) {
		const ttl = 2 * time.Second // time for the 410 to come back even on a slow machine
		// The renewal's account of the loss: without the loss watch, which
		// would tell first (losswatch_test.go).
		l, err := e.NewClient(e.Rec, client.WithoutLossWatch()).Acquire(context.Background(), "job", client.AcquireOptions{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		e.ForceRelease("job")
		MustClose(t, l.Lost(), ttl+promptly, "Lost after a force release")
		if !isClosed(l.Done()) || !errors.Is(l.Err(), client.ErrLeaseLost) {
			t.Errorf("Done closed %v, Err %v", isClosed(l.Done()), l.Err())
		}
		var pe *client.ProblemError
		if !errors.As(l.Err(), &pe) || pe.Status != 410 || !strings.Contains(l.Err().Error(), "force-released") {
			t.Errorf("Err %q does not unwrap to the 410 answer", l.Err())
		}
		releases := e.Rec.Count(OpRelease)
		if err := l.Release(context.Background()); !errors.Is(err, client.ErrLeaseLost) {
			t.Errorf("release of a lost lease: %v, want ErrLeaseLost", err)
		}
		if n := e.Rec.Count(OpRelease); n != releases {
			t.Errorf("release of a lease the server said was gone sent %d requests", n-releases)
		}
	})
}

// A force release between renewals shows on the release.
func TestLease_ReleaseAfterForceRelease(t *testing.T) {
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	l := e.MustAcquire("job", client.AcquireOptions{TTL: time.Minute})
	e.ForceRelease("job")
	err := l.Release(context.Background())
	if !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("release: %v, want ErrLeaseLost", err)
	}
	if !isClosed(l.Lost()) || !errors.Is(l.Err(), client.ErrLeaseLost) {
		t.Errorf("Lost closed %v, Err %v", isClosed(l.Lost()), l.Err())
	}
	if err2 := l.Release(context.Background()); err2 != err {
		t.Errorf("second release: %v, want the first result %v", err2, err)
	}
}

// With the server gone, the watchdog gives the lease up before its expiry:
// after that, another holder may exist.
func TestLease_LostWhenServerStops(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	l := e.MustAcquire("job", client.AcquireOptions{TTL: ttl})
	e.Stop()
	MustClose(t, l.Lost(), ttl+promptly, "Lost after the server stopped")
	if lostAt, exp := time.Now(), l.ExpiresAt(); !lostAt.Before(exp) {
		t.Errorf("lost at %v, after the expiry it vouched for, %v", lostAt, exp)
	}
	if err := l.Err(); !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("Err %v: want ErrLeaseLost caused by ErrUnavailable", err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Release(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, client.ErrLeaseLost) {
			t.Errorf("release: %v, want ErrLeaseLost", err)
		}
	case <-time.After(promptly):
		t.Fatal("release with the server down hangs")
	}
}

// When Redis goes away the server answers renewals 503; the watchdog
// retries them and gives the lease up before its expiry.
func TestLease_LostWhenRedisStops(t *testing.T) {
	// Long enough that a renewal outlasts the server's own attempts to
	// reach Redis (about 400ms), so that the 503 comes through.
	const ttl = 4 * time.Second
	e, rs := MustOpenRedisEnv(t, lockhttp.Config{})
	events := e.Rec.Subscribe()
	l := e.MustAcquire("job", client.AcquireOptions{TTL: ttl})
	rs.Stop(t)
	// The renewals fail (503, or time out on a slow machine) and are retried.
	WaitFor(t, events, 2, "two failed renewals", func(ev Event) bool { return ev.Op == OpRenew && ev.Status != 200 })
	MustClose(t, l.Lost(), ttl+promptly, "Lost after Redis stopped")
	if lostAt, exp := time.Now(), l.ExpiresAt(); !lostAt.Before(exp) {
		t.Errorf("lost at %v, after the expiry it vouched for, %v", lostAt, exp)
	}
	if err := l.Err(); !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("Err %v: want ErrLeaseLost caused by ErrUnavailable", err)
	}
}

// Renewals that fail while the server is briefly away are retried, and the
// lease survives.
func TestLease_SurvivesBriefOutage(t *testing.T) {
	const ttl = 3 * time.Second
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	events := e.Rec.Subscribe()
	l := e.MustAcquire("job", client.AcquireOptions{TTL: ttl})
	e.Stop()
	WaitFor(t, events, 1, "a failed renewal", func(ev Event) bool { return ev.Op == OpRenew && ev.Err != nil })
	e.Resume()
	WaitFor(t, events, 1, "a renewal after the outage", func(ev Event) bool { return ev.Op == OpRenew && ev.Status == 200 })
	if isClosed(l.Lost()) {
		t.Fatalf("lost: %v", l.Err())
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("release: %v", err)
	}
}

// No renewal is sent after Release returns, and none is in flight then,
// also when Release races a renewal.
func TestLease_NoRenewalAfterRelease(t *testing.T) {
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	e.Rec.RenewDelay = 5 * time.Millisecond
	const ttl = 60 * time.Millisecond
	for i := range 30 {
		l, err := e.Client.Acquire(context.Background(), fmt.Sprintf("job-%d", i), client.AcquireOptions{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(rand.N(2 * ttl)) // land the Release anywhere in the renewal cycle
		err = l.Release(context.Background())
		if inflight := e.Rec.MarkReleased(l.ID()); inflight != 0 {
			t.Errorf("lease %d: %d renewals in flight when Release returned", i, inflight)
		}
		// A slow machine may lose so short a lease; this test is about what
		// happens after Release.
		if err != nil && !errors.Is(err, client.ErrLeaseLost) {
			t.Errorf("lease %d: release: %v", i, err)
		}
	}
	if e.Rec.Count(OpRenew) == 0 {
		t.Fatal("no renewals at all: the test tests nothing")
	}
	time.Sleep(5 * ttl) // several renewal periods in which nothing may happen
	if late := e.Rec.Late(); len(late) > 0 {
		t.Errorf("renewals sent after Release returned, for leases %v", late)
	}
}

func TestLease_ConcurrentRelease(t *testing.T) {
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	l := e.MustAcquire("job", client.AcquireOptions{TTL: time.Second})
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = l.Release(context.Background()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("release %d: %v", i, err)
		}
	}
	if n := e.Rec.Count(OpRelease); n != 1 {
		t.Errorf("%d release requests, want 1", n)
	}
}

// An acquire that waited long is confirmed with a renewal, so its lease is
// measured from the grant rather than from the start of the wait.
func TestAcquire_LongWaitMeasuresFromGrant(t *testing.T) {
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	const ttl = 400 * time.Millisecond
	holder := e.MustAcquire("job", client.AcquireOptions{TTL: 20 * time.Second})
	started := e.Rec.OnStart(OpAcquire)
	go func() {
		<-started
		time.Sleep(2 * ttl) // the waiter waits longer than its own TTL
		_ = holder.Release(context.Background())
	}()
	l, err := e.Client.Acquire(context.Background(), "job", client.AcquireOptions{TTL: ttl, Wait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if left := time.Until(l.ExpiresAt()); left < ttl/2 {
		t.Errorf("only %v left of a lease just granted with TTL %v", left, ttl)
	}
	select {
	case <-l.Lost():
		t.Fatalf("lost: %v", l.Err())
	case <-time.After(2 * ttl):
	}
}

func TestWithLock(t *testing.T) {
	ctx := context.Background()
	e := MustOpenMemoryEnv(t, lockhttp.Config{})

	t.Run("OK", func(t *testing.T) {
		var token uint64
		err := e.Client.WithLock(ctx, "job", client.AcquireOptions{Owner: "w"}, func(ctx context.Context, l *client.Lease) error {
			token = l.Token()
			if owner, _ := e.Holder("job"); owner != "w" {
				t.Errorf("inside WithLock the lock is held by %q", owner)
			}
			return nil
		})
		if err != nil || token == 0 {
			t.Fatalf("err %v, token %d", err, token)
		}
		if owner, _ := e.Holder("job"); owner != "" {
			t.Errorf("after WithLock the lock is held by %q", owner)
		}
	})

	t.Run("ErrorFromFn", func(t *testing.T) {
		boom := errors.New("boom")
		err := e.Client.WithLock(ctx, "job", client.AcquireOptions{}, func(context.Context, *client.Lease) error { return boom })
		if !errors.Is(err, boom) {
			t.Fatalf("err %v, want boom", err)
		}
		if owner, _ := e.Holder("job"); owner != "" {
			t.Errorf("after WithLock the lock is held by %q", owner)
		}
	})

	t.Run("Panic", func(t *testing.T) {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("the panic did not pass through")
				}
			}()
			_ = e.Client.WithLock(ctx, "job", client.AcquireOptions{}, func(context.Context, *client.Lease) error { panic("boom") })
		}()
		if owner, _ := e.Holder("job"); owner != "" {
			t.Errorf("after a panic in WithLock the lock is held by %q", owner)
		}
	})

	t.Run("Held", func(t *testing.T) {
		holder := e.MustAcquire("job", client.AcquireOptions{Owner: "holder"})
		defer holder.Release(ctx)
		called := false
		err := e.Client.WithLock(ctx, "job", client.AcquireOptions{}, func(context.Context, *client.Lease) error {
			called = true
			return nil
		})
		if !client.IsHeld(err) || called {
			t.Fatalf("err %v, fn called %v; want held and not called", err, called)
		}
	})

	t.Run("LostCancelsContext", func(t *testing.T) {
		const ttl = 600 * time.Millisecond
		err := e.Client.WithLock(ctx, "job", client.AcquireOptions{TTL: ttl}, func(ctx context.Context, l *client.Lease) error {
			e.ForceRelease("job")
			select {
			case <-ctx.Done():
			case <-time.After(ttl + promptly):
				t.Fatal("the context was not cancelled after the lease was lost")
			}
			if cause := context.Cause(ctx); !errors.Is(cause, client.ErrLeaseLost) {
				t.Errorf("cause %v, want ErrLeaseLost", cause)
			}
			if !isClosed(l.Lost()) {
				t.Error("Lost is not closed")
			}
			return ctx.Err()
		})
		if !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want ErrLeaseLost and the work's context.Canceled", err)
		}
	})

	t.Run("ReleasesWhenCallerCancels", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		err := e.Client.WithLock(cctx, "job", client.AcquireOptions{}, func(ctx context.Context, l *client.Lease) error {
			cancel()
			<-ctx.Done()
			return ctx.Err()
		})
		if !errors.Is(err, context.Canceled) || errors.Is(err, client.ErrLeaseLost) {
			t.Fatalf("err %v, want just context.Canceled", err)
		}
		if owner, _ := e.Holder("job"); owner != "" {
			t.Errorf("after a cancelled WithLock the lock is held by %q", owner)
		}
	})
}

func TestAPIKey(t *testing.T) {
	key, line, err := auth.NewKey("ci", []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, []string{"job:*"})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.ParseKeys(line)
	if err != nil {
		t.Fatal(err)
	}
	e := MustOpenMemoryEnv(t, lockhttp.Config{Keys: keys})
	ctx := context.Background()

	t.Run("NoKey", func(t *testing.T) {
		_, err := e.Client.Acquire(ctx, "job:1", client.AcquireOptions{Wait: time.Second})
		var pe *client.ProblemError
		if !errors.As(err, &pe) || pe.Status != 401 || errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("err %v, want a 401 that is not retried", err)
		}
	})

	c, err := client.New(e.URL, client.WithAPIKey(key), client.WithHTTPClient(&http.Client{Transport: e.Rec}))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("OK", func(t *testing.T) {
		renewals := e.Rec.Subscribe()
		l, err := c.Acquire(ctx, "job:1", client.AcquireOptions{TTL: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		// Renewals carry the key too.
		WaitFor(t, renewals, 1, "a renewal", func(ev Event) bool { return ev.Op == OpRenew && ev.Status == 200 })
		if isClosed(l.Lost()) {
			t.Fatalf("lost: %v", l.Err())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("OutsideItsPatterns", func(t *testing.T) {
		_, err := c.Acquire(ctx, "deploy:prod", client.AcquireOptions{})
		var pe *client.ProblemError
		if !errors.As(err, &pe) || pe.Status != 403 {
			t.Fatalf("err %v, want 403", err)
		}
	})
}
