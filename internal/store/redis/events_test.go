package redis_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/store/storetest"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

func newPrefix() string { return "ev:" + ulid.Make().String() + ":" }

// openEvents opens a store that records events on srv under prefix,
// adjusted by opts.
func openEvents(t *testing.T, srv *redistest.Server, prefix string, opts ...func(*redisstore.Options)) *redisstore.Store {
	t.Helper()
	c, err := redisstore.NewClient(redisstore.ClientConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	o := redisstore.Options{Prefix: prefix, Events: true}
	for _, f := range opts {
		f(&o)
	}
	s, err := redisstore.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// readAll reads every event after after, in pages of 1000.
func readAll(t *testing.T, s *redisstore.Store, after string) []lock.Event {
	t.Helper()
	var all []lock.Event
	for {
		evs, err := s.ReadEvents(ctx, after, 1000)
		if err != nil {
			t.Fatalf("ReadEvents(%q): %v", after, err)
		}
		if len(evs) == 0 {
			return all
		}
		all = append(all, evs...)
		after = evs[len(evs)-1].ID
	}
}

// brief writes an event as "type lock owner mode h=holds", the part of it
// the tests below spell out.
func brief(e lock.Event) string {
	return fmt.Sprintf("%s %s %s %s h=%d", e.Type, e.Lock, e.Owner, e.Mode, e.HoldCount)
}

func wantEvents(t *testing.T, got []lock.Event, want ...string) {
	t.Helper()
	var b []string
	for _, e := range got {
		b = append(b, brief(e))
	}
	if strings.Join(b, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n  %s\nwant:\n  %s", strings.Join(b, "\n  "), strings.Join(want, "\n  "))
	}
}

// wantLease checks that e names lease l: its id, token and principal.
func wantLease(t *testing.T, e lock.Event, l lock.Lease) {
	t.Helper()
	if e.LeaseID != l.ID || e.Token != l.Token || e.Principal != l.Principal {
		t.Errorf("%s event names lease %s token %d principal %q, want %s %d %q",
			e.Type, e.LeaseID, e.Token, e.Principal, l.ID, l.Token, l.Principal)
	}
}

// leasesTracked counts the leases in the expiries set at key, leaving out
// the announced mark (member "").
func leasesTracked(t *testing.T, srv *redistest.Server, key string) int {
	t.Helper()
	members, err := srv.Client(t).ZRange(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range members {
		if m != "" {
			n++
		}
	}
	return n
}

func acquire(t *testing.T, s lock.Store, req lock.AcquireRequest) lock.Grant {
	t.Helper()
	if req.TTL == 0 {
		req.TTL = time.Minute
	}
	g, err := s.TryAcquire(ctx, req)
	if err != nil {
		t.Fatalf("acquire %s by %s: %v", req.Lock, req.Owner, err)
	}
	return g
}

func release(t *testing.T, s lock.Store, l lock.Lease, all bool) {
	t.Helper()
	if _, err := s.Release(ctx, lock.LeaseRef{Lock: l.Lock, ID: l.ID}, all); err != nil {
		t.Fatalf("release %s of %s: %v", l.ID, l.Lock, err)
	}
}

// TestEvents_exclusive_lease: every change of an exclusive lease is one
// event, in order, naming the lease; the expiries set is empty once the
// lease ended.
func TestEvents_exclusive_lease(t *testing.T) {
	srv := redistest.Start(t)
	prefix := newPrefix()
	s := openEvents(t, srv, prefix)
	req := lock.AcquireRequest{Lock: "deploy:prod", Owner: "ci-7", Principal: "ci"}
	g := acquire(t, s, req)
	acquire(t, s, req)
	if _, err := s.Renew(ctx, lock.LeaseRef{Lock: "deploy:prod", ID: g.Lease.ID}, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	release(t, s, g.Lease, false)
	release(t, s, g.Lease, false)
	// A retry of the release that ended it records nothing.
	release(t, s, g.Lease, false)

	evs := readAll(t, s, "")
	wantEvents(t, evs,
		"granted deploy:prod ci-7 exclusive h=1",
		"reentered deploy:prod ci-7 exclusive h=2",
		"renewed deploy:prod ci-7 exclusive h=2",
		"released deploy:prod ci-7 exclusive h=1",
		"released deploy:prod ci-7 exclusive h=0")
	for i, e := range evs {
		wantLease(t, e, g.Lease)
		if i > 0 && lock.CompareEventIDs(evs[i-1].ID, e.ID) >= 0 {
			t.Errorf("event ids out of order: %s then %s", evs[i-1].ID, e.ID)
		}
		if d := e.Time.Sub(g.Lease.AcquiredAt); d < 0 || d > 10*time.Second {
			t.Errorf("%s event at %v, the grant at %v", e.Type, e.Time, g.Lease.AcquiredAt)
		}
	}
	if n := leasesTracked(t, srv, prefix+"events:expiries"); n != 0 {
		t.Errorf("%d leases left in the expiries set after the release", n)
	}
}

// TestEvents_refusals_replays_and_queue_places_record_nothing.
func TestEvents_refusals_replays_and_queue_places_record_nothing(t *testing.T) {
	s := openEvents(t, redistest.Start(t), newPrefix())
	req := lock.AcquireRequest{Lock: "db", Owner: "a", IdempotencyKey: "k1"}
	g := acquire(t, s, req)
	if r := acquire(t, s, req); !r.Replayed {
		t.Fatalf("the repeat with the idempotency key was not a replay: %+v", r)
	}
	_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "db", Owner: "b", TTL: time.Minute})
	storetest.WantCode(t, err, lock.CodeHeld)
	// A fair waiter's queue place.
	_, err = s.TryAcquire(ctx, lock.AcquireRequest{Lock: "db", Owner: "c", TTL: time.Minute, Fair: true,
		WaiterID: lock.NewWaiterID(lock.AcquireRequest{Fair: true})})
	storetest.WantCode(t, err, lock.CodeHeld)
	if st := storetest.Inspect(t, s, "db"); st.Queue != 1 {
		t.Fatalf("queue = %d, want the fair waiter's place", st.Queue)
	}
	release(t, s, g.Lease, true)
	evs := readAll(t, s, "")
	wantEvents(t, evs,
		"granted db a exclusive h=1",
		"released db a exclusive h=0")
	if evs[1].Queue != 1 {
		t.Errorf("the release's queue length = %d, want 1", evs[1].Queue)
	}
}

// TestEvents_shared_leases_and_permits: shared leases and semaphore permits
// are leases of their own, each event naming its lease.
func TestEvents_shared_leases_and_permits(t *testing.T) {
	s := openEvents(t, redistest.Start(t), newPrefix())
	r1 := acquire(t, s, lock.AcquireRequest{Lock: "cfg", Owner: "r1", Mode: lock.Shared}).Lease
	r2 := acquire(t, s, lock.AcquireRequest{Lock: "cfg", Owner: "r2", Mode: lock.Shared}).Lease
	acquire(t, s, lock.AcquireRequest{Lock: "cfg", Owner: "r1", Mode: lock.Shared})
	if _, err := s.Renew(ctx, lock.LeaseRef{Lock: "cfg", ID: r2.ID}, time.Minute); err != nil {
		t.Fatal(err)
	}
	release(t, s, r1, false)
	release(t, s, r1, false)
	release(t, s, r2, true)

	p1 := acquire(t, s, lock.AcquireRequest{Lock: "pool", Owner: "w1", Limit: 2}).Lease
	p2 := acquire(t, s, lock.AcquireRequest{Lock: "pool", Owner: "w2", Limit: 2}).Lease
	if _, err := s.Renew(ctx, lock.LeaseRef{Lock: "pool", ID: p1.ID}, time.Minute); err != nil {
		t.Fatal(err)
	}
	release(t, s, p2, false)
	release(t, s, p1, false)

	evs := readAll(t, s, "")
	wantEvents(t, evs,
		"granted cfg r1 shared h=1",
		"granted cfg r2 shared h=1",
		"reentered cfg r1 shared h=2",
		"renewed cfg r2 shared h=1",
		"released cfg r1 shared h=1",
		"released cfg r1 shared h=0",
		"released cfg r2 shared h=0",
		"granted pool w1 exclusive h=1",
		"granted pool w2 exclusive h=1",
		"renewed pool w1 exclusive h=1",
		"released pool w2 exclusive h=0",
		"released pool w1 exclusive h=0")
	for i, l := range []lock.Lease{r1, r2, r1, r2, r1, r1, r2, p1, p2, p1, p2, p1} {
		wantLease(t, evs[i], l)
	}
}

// TestEvents_abandon: undoing a grant nobody received is a release, of the
// lease or of the hold the acquire added.
func TestEvents_abandon(t *testing.T) {
	s := openEvents(t, redistest.Start(t), newPrefix())
	for _, mode := range []lock.Mode{lock.Exclusive, lock.Shared} {
		name := "abandon-" + string(mode)
		req := lock.AcquireRequest{Lock: name, Owner: "a", Mode: mode}
		g1 := acquire(t, s, req)
		g2 := acquire(t, s, req)
		if err := s.Abandon(ctx, name, g2.RequestID); err != nil {
			t.Fatal(err)
		}
		if err := s.Abandon(ctx, name, g1.RequestID); err != nil {
			t.Fatal(err)
		}
	}
	wantEvents(t, readAll(t, s, ""),
		"granted abandon-exclusive a exclusive h=1",
		"reentered abandon-exclusive a exclusive h=2",
		"released abandon-exclusive a exclusive h=1",
		"released abandon-exclusive a exclusive h=0",
		"granted abandon-shared a shared h=1",
		"reentered abandon-shared a shared h=2",
		"released abandon-shared a shared h=1",
		"released abandon-shared a shared h=0")
}

// TestEvents_force_release: one event per lease ended, with the admin as
// the principal; the leases leave the expiries set.
func TestEvents_force_release(t *testing.T) {
	srv := redistest.Start(t)
	prefix := newPrefix()
	s := openEvents(t, srv, prefix)
	var readers []lock.Lease
	for _, o := range []string{"r1", "r2", "r3"} {
		readers = append(readers, acquire(t, s, lock.AcquireRequest{Lock: "cfg", Owner: o, Principal: "app", Mode: lock.Shared}).Lease)
	}
	// An exclusive holder that also reads (a downgrade): two leases.
	x := acquire(t, s, lock.AcquireRequest{Lock: "db", Owner: "w", Principal: "app"}).Lease
	xs := acquire(t, s, lock.AcquireRequest{Lock: "db", Owner: "w", Principal: "app", Mode: lock.Shared}).Lease
	after, _ := s.LastEventID(ctx)
	for _, name := range []string{"cfg", "db"} {
		if ok, err := s.ForceRelease(ctx, name, "root"); err != nil || !ok {
			t.Fatalf("force release %s: %v, %v", name, ok, err)
		}
	}
	if ok, _ := s.ForceRelease(ctx, "cfg", "root"); ok {
		t.Fatal("a second force release found something held")
	}
	evs := readAll(t, s, after)
	wantEvents(t, evs,
		"force_released cfg r1 shared h=0",
		"force_released cfg r2 shared h=0",
		"force_released cfg r3 shared h=0",
		"force_released db w exclusive h=0",
		"force_released db w shared h=0")
	for i, l := range append(readers, x, xs) {
		if evs[i].LeaseID != l.ID || evs[i].Token != l.Token || evs[i].Principal != "root" {
			t.Errorf("event %d: lease %s token %d principal %q, want %s %d root", i, evs[i].LeaseID, evs[i].Token, evs[i].Principal, l.ID, l.Token)
		}
	}
	if n := leasesTracked(t, srv, prefix+"events:expiries"); n != 0 {
		t.Errorf("%d leases left in the expiries set after the force release", n)
	}
}

// TestEvents_read_in_pages: ReadEvents pages through the log in order, and
// a resume point the log trimmed away is answered events-gone with where
// the log starts.
func TestEvents_read_in_pages(t *testing.T) {
	srv := redistest.Start(t)
	prefix := newPrefix()
	s := openEvents(t, srv, prefix, func(o *redisstore.Options) { o.EventsMax = 10 })
	// Small stream nodes, so that MAXLEN ~ trims close to the bound.
	if err := srv.Client(t).ConfigSet(ctx, "stream-node-max-entries", "5").Err(); err != nil {
		t.Fatal(err)
	}
	first := acquire(t, s, lock.AcquireRequest{Lock: "a", Owner: "o"}).Lease
	release(t, s, first, true)
	early := readAll(t, s, "")
	for i := range 20 {
		l := acquire(t, s, lock.AcquireRequest{Lock: fmt.Sprint("p", i), Owner: "o"}).Lease
		release(t, s, l, true)
	}
	all := readAll(t, s, "")
	if len(all) < 10 || len(all) > 20 {
		t.Fatalf("the log keeps %d events with EventsMax 10", len(all))
	}
	var paged []lock.Event
	after := ""
	for {
		evs, err := s.ReadEvents(ctx, after, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) > 3 {
			t.Fatalf("a page of %d events, limit 3", len(evs))
		}
		if len(evs) == 0 {
			break
		}
		paged = append(paged, evs...)
		after = evs[len(evs)-1].ID
	}
	if fmt.Sprint(paged) != fmt.Sprint(all) {
		t.Fatalf("pages of 3 differ from one read:\n%v\n%v", paged, all)
	}
	_, err := s.ReadEvents(ctx, early[0].ID, 10)
	storetest.WantCode(t, err, lock.CodeEventsGone)
	if oldest := err.(*lock.Error).Oldest; oldest != all[0].ID {
		t.Errorf("events-gone says the log starts at %s, it starts at %s", oldest, all[0].ID)
	}
	_, err = s.WaitEvents(ctx, early[0].ID, 10)
	storetest.WantCode(t, err, lock.CodeEventsGone)
	// The newest event is a fine resume point, with nothing after it.
	last, err := s.LastEventID(ctx)
	if err != nil || last != all[len(all)-1].ID {
		t.Fatalf("LastEventID = %q, %v; want %s", last, err, all[len(all)-1].ID)
	}
	if evs, err := s.ReadEvents(ctx, last, 10); err != nil || len(evs) != 0 {
		t.Fatalf("after the newest: %v, %v", evs, err)
	}
	_, err = s.ReadEvents(ctx, "nope", 10)
	storetest.WantCode(t, err, lock.CodeInvalid)
}

// TestEvents_wait: WaitEvents returns the next event as soon as it is
// recorded, and returns promptly when its context ends; the blocking read
// does not hold up the scripts.
func TestEvents_wait(t *testing.T) {
	s := openEvents(t, redistest.Start(t), newPrefix())
	last, err := s.LastEventID(ctx)
	if err != nil || last != "" {
		t.Fatalf("LastEventID of an empty log = %q, %v", last, err)
	}
	for round := range 3 {
		after, _ := s.LastEventID(ctx)
		got := make(chan []lock.Event, 1)
		go func() {
			evs, err := s.WaitEvents(ctx, after, 10)
			if err != nil {
				t.Error(err)
			}
			got <- evs
		}()
		time.Sleep(100 * time.Millisecond) // let it block
		name := fmt.Sprint("w", round)
		start := time.Now()
		acquire(t, s, lock.AcquireRequest{Lock: name, Owner: "o"})
		select {
		case evs := <-got:
			t.Logf("round %d: woken %v after the grant", round, time.Since(start).Round(time.Microsecond))
			wantEvents(t, evs, "granted "+name+" o exclusive h=1")
		case <-time.After(2 * time.Second):
			t.Fatal("WaitEvents not woken by a grant")
		}
	}

	// Cancelled, several at once, while the scripts go on.
	after, _ := s.LastEventID(ctx)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.WaitEvents(wctx, after, 10)
			errs <- err
		}()
	}
	time.Sleep(100 * time.Millisecond)
	storetest.Inspect(t, s, "w0")
	cancel()
	start := time.Now()
	wg.Wait()
	close(errs)
	t.Logf("cancelled waits returned %v after the cancel", time.Since(start).Round(time.Microsecond))
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("cancelled waits returned %v after the cancel", d)
	}
	for err := range errs {
		if err != context.Canceled {
			t.Errorf("cancelled wait: %v", err)
		}
	}
	// A deadline ends a wait too; the connections still serve.
	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := s.WaitEvents(dctx, after, 10); err != context.DeadlineExceeded {
		t.Fatalf("wait past its deadline: %v", err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		acquire(t, s, lock.AcquireRequest{Lock: "late", Owner: "o"})
	}()
	evs, err := s.WaitEvents(ctx, after, 10)
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, evs, "granted late o exclusive h=1")
}

// TestEvents_off: without Options.Events the scripts write no event log,
// no expiries and no trace in the fence; the EventLog answers unavailable.
func TestEvents_off(t *testing.T) {
	srv := redistest.Start(t)
	prefix := newPrefix()
	s := openEvents(t, srv, prefix, func(o *redisstore.Options) { o.Events = false })
	if s.EventsEnabled() {
		t.Fatal("EventsEnabled with Events off")
	}
	x := acquire(t, s, lock.AcquireRequest{Lock: "a", Owner: "o", TTL: 50 * time.Millisecond}).Lease
	acquire(t, s, lock.AcquireRequest{Lock: "b", Owner: "o", Mode: lock.Shared})
	if _, err := s.Renew(ctx, lock.LeaseRef{Lock: "a", ID: x.ID}, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ForceRelease(ctx, "b", "root"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	acquire(t, s, lock.AcquireRequest{Lock: "a", Owner: "p"})
	rdb := srv.Client(t)
	if keys := rdb.Keys(ctx, prefix+"events*").Val(); len(keys) != 0 {
		t.Errorf("events off, yet Redis has %v", keys)
	}
	if f := rdb.HKeys(ctx, prefix+"{a}:fence").Val(); strings.Contains(fmt.Sprint(f), "evx") {
		t.Errorf("events off, yet the fence has %v", f)
	}
	_, err := s.ReadEvents(ctx, "", 10)
	storetest.WantCode(t, err, lock.CodeUnavailable)
	_, err = s.WaitEvents(ctx, "", 10)
	storetest.WantCode(t, err, lock.CodeUnavailable)
	_, err = s.LastEventID(ctx)
	storetest.WantCode(t, err, lock.CodeUnavailable)
}
