package redis_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
	"github.com/lockapi/lockapi/internal/testkit/storetest"
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
		evs, err := s.Events().ReadEvents(ctx, after, 1000)
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

// TestEvents_by_field_reads_the_same: an instance that writes each event
// as one field (the default) and one that writes a field per event field
// (Options.EventsByField, for a rolling deploy from versions that read only
// that) record events that read the same, in one log.
func TestEvents_by_field_reads_the_same(t *testing.T) {
	srv := redistest.Start(t)
	prefix := newPrefix()
	packed := openEvents(t, srv, prefix)
	byField := openEvents(t, srv, prefix, func(o *redisstore.Options) { o.EventsByField = true })
	req := lock.AcquireRequest{Lock: "deploy:prod", Owner: "ci-7", Principal: "ci"}
	g := acquire(t, packed, req)
	acquire(t, byField, req)
	release(t, byField, g.Lease, false)
	release(t, packed, g.Lease, false)

	for _, s := range []*redisstore.Store{packed, byField} {
		evs := readAll(t, s, "")
		wantEvents(t, evs,
			"granted deploy:prod ci-7 exclusive h=1",
			"reentered deploy:prod ci-7 exclusive h=2",
			"released deploy:prod ci-7 exclusive h=1",
			"released deploy:prod ci-7 exclusive h=0")
		for _, e := range evs {
			wantLease(t, e, g.Lease)
		}
	}
	entries, err := srv.Client(t).XRange(ctx, prefix+"events", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var layouts []string
	for _, m := range entries {
		var fields []string
		for f := range m.Values {
			fields = append(fields, f)
		}
		slices.Sort(fields)
		layouts = append(layouts, strings.Join(fields, ","))
	}
	want := []string{"e,v", "h,k,l,m,n,o,p,q,t", "h,k,l,m,n,o,p,q,t", "e,v"}
	if !slices.Equal(layouts, want) {
		t.Errorf("stream entries' fields %v, want %v", layouts, want)
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

// After a plain acquire and release (the fast scripts, which leave the
// fence's member of the released lease behind), the full scripts that meet
// the free name record no expiry for it: a repeated release, a renewal, a
// force release, and a shared acquire and release.
func TestEvents_nothing_settled_after_a_fast_release(t *testing.T) {
	s := openEvents(t, redistest.Start(t), newPrefix())
	g := acquire(t, s, lock.AcquireRequest{Lock: "job", Owner: "a", TTL: time.Minute})
	release(t, s, g.Lease, true)
	after, _ := s.Events().LastEventID(ctx)
	_, _ = s.Release(ctx, lock.LeaseRef{Lock: "job", ID: g.Lease.ID}, false)
	_, _ = s.Renew(ctx, lock.LeaseRef{Lock: "job", ID: g.Lease.ID}, time.Minute)
	if ok, _ := s.ForceRelease(ctx, "job", "root"); ok {
		t.Fatal("a force release found the released lock held")
	}
	sh := acquire(t, s, lock.AcquireRequest{Lock: "job", Owner: "b", TTL: time.Minute, Mode: lock.Shared})
	release(t, s, sh.Lease, true)
	wantEvents(t, readAll(t, s, after),
		"granted job b shared h=1",
		"released job b shared h=0")
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
	after, _ := s.Events().LastEventID(ctx)
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

// expiredEvent waits (up to 5 s) for the expired event of lease l. A
// store unavailable for a moment (a failover) is asked again.
func expiredEvent(t *testing.T, s *redisstore.Store, after string, l lock.Lease) lock.Event {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		evs, err := s.Events().WaitEvents(wctx, after, 100)
		if lock.ErrorCode(err) == lock.CodeUnavailable && wctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("no expired event for lease %s of %s: %v", l.ID, l.Lock, err)
		}
		for _, e := range evs {
			if e.Type == lock.EventExpired && e.LeaseID == l.ID {
				return e
			}
			after = e.ID
		}
	}
}

// TestEvents_expired_within_a_second: the sweeper records a lease's expiry
// within 1 s of its TTL's end (bound here 1.5 s), measured on Redis's clock
// (the event's time against the lease's expiry), for each kind of lease.
func TestEvents_expired_within_a_second(t *testing.T) {
	s := openEvents(t, redistest.Start(t), newPrefix())
	for _, req := range []lock.AcquireRequest{
		{Lock: "x", Owner: "a", TTL: 300 * time.Millisecond},
		{Lock: "s", Owner: "a", TTL: 300 * time.Millisecond, Mode: lock.Shared},
		{Lock: "p", Owner: "a", TTL: 300 * time.Millisecond, Limit: 3},
		// A lease renewed to a shorter TTL than the set's earliest.
		{Lock: "long", Owner: "a", TTL: time.Minute},
	} {
		after, _ := s.Events().LastEventID(ctx)
		l := acquire(t, s, req).Lease
		if req.Lock == "long" {
			var err error
			if l, err = s.Renew(ctx, lock.LeaseRef{Lock: "long", ID: l.ID}, 200*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		e := expiredEvent(t, s, after, l)
		late := e.Time.Sub(l.ExpiresAt)
		t.Logf("%s (%s, limit %d): expired recorded %v after the TTL's end", req.Lock, l.Mode, l.Limit, late)
		if late < 0 || late > 1500*time.Millisecond {
			t.Errorf("%s: expired recorded %v after the TTL's end, want within 1 s", req.Lock, late)
		}
		wantLease(t, e, l)
		if e.HoldCount != 0 || e.Owner != "a" {
			t.Errorf("expired event %+v", e)
		}
	}
}

// TestEvents_expiry_behind_a_released_one: an expiry later than the one
// announced goes unannounced; when the announced lease is released early,
// the sweeper still records the later one on time, in another instance too.
func TestEvents_expiry_behind_a_released_one(t *testing.T) {
	srv := redistest.Start(t)
	prefix := newPrefix()
	b := openEvents(t, srv, prefix)
	a, err := redisstore.New(srv.Client(t), redisstore.Options{Prefix: prefix, Events: true})
	if err != nil {
		t.Fatal(err)
	}
	// Read from before the grants: a.Close can take longer than later's
	// TTL on a loaded machine, and a reader that starts after the expiry
	// was recorded would wait for the next event.
	after, err := b.Events().LastEventID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := acquire(t, a, lock.AcquireRequest{Lock: "first", Owner: "o", TTL: 300 * time.Millisecond}).Lease
	later := acquire(t, a, lock.AcquireRequest{Lock: "later", Owner: "o", TTL: 600 * time.Millisecond}).Lease
	release(t, a, first, true)
	a.Close() // only b sweeps
	e := expiredEvent(t, b, after, later)
	late := e.Time.Sub(later.ExpiresAt)
	t.Logf("expired recorded %v after the TTL's end", late)
	if late < 0 || late > 1500*time.Millisecond {
		t.Errorf("expired recorded %v after the TTL's end, want within 1 s", late)
	}
}

// TestEvents_expired_once_with_two_sweepers: two instances sweep the same
// Redis; each expiry is recorded once.
func TestEvents_expired_once_with_two_sweepers(t *testing.T) {
	srv := redistest.Start(t)
	prefix := newPrefix()
	a, b := openEvents(t, srv, prefix), openEvents(t, srv, prefix)
	const n = 40
	for i := range n {
		s := a
		if i%2 == 1 {
			s = b
		}
		mode := lock.Exclusive
		if i%4 >= 2 {
			mode = lock.Shared
		}
		acquire(t, s, lock.AcquireRequest{Lock: fmt.Sprint("n", i), Owner: "o", Mode: mode,
			TTL: time.Duration(100+i*5) * time.Millisecond})
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		expired := map[string]int{}
		granted := map[string]bool{}
		for _, e := range readAll(t, a, "") {
			switch e.Type {
			case lock.EventExpired:
				expired[e.LeaseID]++
			case lock.EventGranted:
				granted[e.LeaseID] = true
			}
		}
		done := len(expired) == n
		for id, c := range expired {
			if c != 1 || !granted[id] {
				t.Fatalf("lease %s: %d expired events (granted: %v)", id, c, granted[id])
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d leases recorded expired after 5 s", len(expired), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// And no sweeper records any of them again.
	time.Sleep(300 * time.Millisecond)
	if evs := readAll(t, b, ""); len(evs) != 2*n {
		t.Fatalf("%d events, want %d", len(evs), 2*n)
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
		evs, err := s.Events().ReadEvents(ctx, after, 3)
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
	_, err := s.Events().ReadEvents(ctx, early[0].ID, 10)
	storetest.WantCode(t, err, lock.CodeEventsGone)
	if oldest := err.(*lock.Error).Oldest; oldest != all[0].ID {
		t.Errorf("events-gone says the log starts at %s, it starts at %s", oldest, all[0].ID)
	}
	_, err = s.Events().WaitEvents(ctx, early[0].ID, 10)
	storetest.WantCode(t, err, lock.CodeEventsGone)
	// The newest event is a fine resume point, with nothing after it.
	last, err := s.Events().LastEventID(ctx)
	if err != nil || last != all[len(all)-1].ID {
		t.Fatalf("LastEventID = %q, %v; want %s", last, err, all[len(all)-1].ID)
	}
	if evs, err := s.Events().ReadEvents(ctx, last, 10); err != nil || len(evs) != 0 {
		t.Fatalf("after the newest: %v, %v", evs, err)
	}
	_, err = s.Events().ReadEvents(ctx, "nope", 10)
	storetest.WantCode(t, err, lock.CodeInvalid)
}

// TestEvents_gone_only_when_trimmed: a resume point before the oldest event
// is fine while the log never trimmed anything (0-0 reads everything), and
// on a log that has recorded nothing yet.
func TestEvents_gone_only_when_trimmed(t *testing.T) {
	s := openEvents(t, redistest.Start(t), newPrefix())
	if evs, err := s.Events().ReadEvents(ctx, "0-0", 10); err != nil || len(evs) != 0 {
		t.Fatalf("after 0-0 on a log with nothing recorded: %v, %v", evs, err)
	}
	l := acquire(t, s, lock.AcquireRequest{Lock: "a", Owner: "o"}).Lease
	release(t, s, l, true)
	evs, err := s.Events().ReadEvents(ctx, "0-0", 10)
	if err != nil || len(evs) != 2 {
		t.Fatalf("after 0-0 on a log that trimmed nothing: %v, %v", evs, err)
	}
	if evs, err := s.Events().ReadEvents(ctx, "1-0", 10); err != nil || len(evs) != 2 {
		t.Fatalf("after 1-0 on a log that trimmed nothing: %v, %v", evs, err)
	}
}

// TestEvents_retention: while this process writes, the sweeper trims
// events older than the retention.
func TestEvents_retention(t *testing.T) {
	srv := redistest.Start(t)
	prefix := newPrefix()
	// One entry per stream node, so that MINID ~ trims to the entry.
	if err := srv.Client(t).ConfigSet(ctx, "stream-node-max-entries", "1").Err(); err != nil {
		t.Fatal(err)
	}
	s := openEvents(t, srv, prefix, func(o *redisstore.Options) { o.EventsRetention = 300 * time.Millisecond })
	l := acquire(t, s, lock.AcquireRequest{Lock: "old", Owner: "o"}).Lease
	release(t, s, l, true)
	time.Sleep(400 * time.Millisecond)
	l = acquire(t, s, lock.AcquireRequest{Lock: "new", Owner: "o"}).Lease
	release(t, s, l, true)
	deadline := time.Now().Add(2 * time.Second)
	for {
		evs := readAll(t, s, "")
		if len(evs) == 2 && evs[0].Lock == "new" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("past the retention the log keeps %d events: %v", len(evs), evs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEvents_wait: WaitEvents returns the next event as soon as it is
// recorded, and returns promptly when its context ends; the blocking read
// does not hold up the scripts.
func TestEvents_wait(t *testing.T) {
	s := openEvents(t, redistest.Start(t), newPrefix())
	last, err := s.Events().LastEventID(ctx)
	if err != nil || last != "" {
		t.Fatalf("LastEventID of an empty log = %q, %v", last, err)
	}
	for round := range 3 {
		after, _ := s.Events().LastEventID(ctx)
		got := make(chan []lock.Event, 1)
		go func() {
			evs, err := s.Events().WaitEvents(ctx, after, 10)
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
	after, _ := s.Events().LastEventID(ctx)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Events().WaitEvents(wctx, after, 10)
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
	// A cancelled wait is unblocked at once (CLIENT UNBLOCK); one that was
	// not would wait out the 2 s call deadline. 1 s tells the two apart
	// on a loaded machine (528-584 ms seen at a load of 16 on 2 cores).
	if d := time.Since(start); d > time.Second {
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
	if _, err := s.Events().WaitEvents(dctx, after, 10); err != context.DeadlineExceeded {
		t.Fatalf("wait past its deadline: %v", err)
	}
	// Redis answers the waiter's XREAD and the acquire's script at once,
	// and the waiter may well be scheduled first: the test waits for the
	// acquire's own answer too, or its cleanup closes the client (and the
	// connection the acquire reads from) under it.
	acquired := make(chan error, 1)
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "late", Owner: "o", TTL: time.Minute})
		acquired <- err
	}()
	evs, err := s.Events().WaitEvents(ctx, after, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-acquired; err != nil {
		t.Fatalf("acquire late by o: %v", err)
	}
	wantEvents(t, evs, "granted late o exclusive h=1")
}

// TestEvents_off: without Options.Events the scripts write no event log,
// no expiries and no trace in the fence; the store has no event log.
func TestEvents_off(t *testing.T) {
	srv := redistest.Start(t)
	prefix := newPrefix()
	s := openEvents(t, srv, prefix, func(o *redisstore.Options) { o.Events = false })
	if s.Events() != nil {
		t.Fatal("an event log with Events off")
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
}

// TestEvents_idle_costs_nothing: while leases are held and nothing
// changes, the sweeper sends Redis nothing; nor does it while nothing is
// held.
func TestEvents_idle_costs_nothing(t *testing.T) {
	srv := redistest.Start(t)
	prefix := newPrefix()
	observer := srv.Client(t)
	s := openEvents(t, srv, prefix)
	acquire(t, s, lock.AcquireRequest{Lock: "held", Owner: "o", TTL: 5 * time.Minute})
	time.Sleep(200 * time.Millisecond) // the startup looks and the first trim
	before := commandCalls(t, observer)
	time.Sleep(time.Second)
	if diff := commandsSince(t, observer, before); len(diff) != 0 {
		t.Errorf("held and idle, the store sent %v", diff)
	}
}

// TestSentinel_events_across_failover: the log lives on with the data on
// the new master; a reader blocked across the failover reads on, and the
// sweeper, whose announcements follow the master, records expiries there
// on time.
func TestSentinel_events_across_failover(t *testing.T) {
	sen := redistest.StartSentinel(t)
	s := openStoreOptions(t, redisstore.ClientConfig{URL: sen.URL(), Mode: redisstore.ModeSentinel},
		redisstore.Options{Events: true, CallTimeout: time.Second})
	held := acquire(t, s, lock.AcquireRequest{Lock: "held", Owner: "o"}).Lease
	after, err := s.Events().LastEventID(ctx)
	if err != nil || after == "" {
		t.Fatalf("LastEventID = %q, %v", after, err)
	}
	woken := make(chan []lock.Event, 1)
	go func() {
		for {
			evs, err := s.Events().WaitEvents(ctx, after, 10)
			if err == nil {
				woken <- evs
				return
			}
			time.Sleep(50 * time.Millisecond) // unavailable during the failover
		}
	}()
	time.Sleep(100 * time.Millisecond)
	old, cur := sen.Failover(t)
	t.Logf("failover %s -> %s", old, cur)

	var l lock.Lease
	eventually(t, 15*time.Second, "acquire after the failover", func() error {
		g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "short", Owner: "o", TTL: 300 * time.Millisecond})
		l = g.Lease
		return err
	})
	select {
	case evs := <-woken:
		wantEvents(t, evs, "granted short o exclusive h=1")
	case <-time.After(10 * time.Second):
		t.Fatal("the reader blocked across the failover did not read the next event")
	}
	e := expiredEvent(t, s, after, l)
	late := e.Time.Sub(l.ExpiresAt)
	t.Logf("expired recorded %v after the TTL's end, on the new master", late)
	if late < 0 || late > 1500*time.Millisecond {
		t.Errorf("expired recorded %v after the TTL's end, want within 1 s", late)
	}
	evs := readAll(t, s, "")
	if len(evs) == 0 || evs[0].LeaseID != held.ID {
		t.Errorf("the log lost its first event in the failover: %v", evs)
	}
}

// TestEvents_caller_deadline: a read whose caller's deadline passed before
// Redis answered answers the caller's context error, not "unavailable":
// Redis is not to blame.
func TestEvents_caller_deadline(t *testing.T) {
	s := openEvents(t, redistest.Start(t), newPrefix())
	past, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	if _, err := s.Events().ReadEvents(past, "", 10); err != context.DeadlineExceeded {
		t.Errorf("ReadEvents past the caller's deadline: %v", err)
	}
	if _, err := s.Events().WaitEvents(past, "", 10); err != context.DeadlineExceeded {
		t.Errorf("WaitEvents past the caller's deadline: %v", err)
	}
	if _, err := s.Events().LastEventID(past); err != context.DeadlineExceeded {
		t.Errorf("LastEventID past the caller's deadline: %v", err)
	}
}
