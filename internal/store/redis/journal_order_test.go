package redis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// TestEvents_expiry_recorded_before_the_next_change: with no sweeper
// running, the next script of a name records the expiry of a lease whose
// TTL ran out before its own event, so that the name's events keep the
// order of its changes (and the sweeper, later, records nothing twice).
func TestEvents_expiry_recorded_before_the_next_change(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	s, err := New(srv.Client(t), Options{Prefix: "order:", Events: true})
	if err != nil {
		t.Fatal(err)
	}
	s.journal.single.sweep.close()
	s.journal.single.sweep = nil
	t.Cleanup(func() { s.Close() })
	short := 30 * time.Millisecond
	try := func(req lock.AcquireRequest) lock.Lease {
		t.Helper()
		if req.TTL == 0 {
			req.TTL = time.Minute
		}
		g, err := s.TryAcquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return g.Lease
	}
	// An exclusive lease Redis deleted, then a grant.
	try(lock.AcquireRequest{Lock: "x", Owner: "a", TTL: short})
	time.Sleep(2 * short)
	try(lock.AcquireRequest{Lock: "x", Owner: "b"})
	// Shared leases that ran out beside a live one, then a renewal of it.
	r := try(lock.AcquireRequest{Lock: "s", Owner: "r1", Mode: lock.Shared})
	try(lock.AcquireRequest{Lock: "s", Owner: "r2", Mode: lock.Shared, TTL: short})
	time.Sleep(2 * short)
	if _, err := s.Renew(ctx, lock.LeaseRef{Lock: "s", ID: r.ID}, time.Minute); err != nil {
		t.Fatal(err)
	}
	// The last shared lease of a name, then a force release that finds
	// nothing held: the expiry is recorded all the same, from the record
	// the shared keys keep past their last lease.
	try(lock.AcquireRequest{Lock: "f", Owner: "r", Mode: lock.Shared, TTL: short})
	time.Sleep(2 * short)
	if ok, err := s.ForceRelease(ctx, "f", "root"); err != nil || ok {
		t.Fatalf("force release of an expired lease: %v, %v", ok, err)
	}
	// A lease whose keys are gone (the grace passed with no sweeper).
	try(lock.AcquireRequest{Lock: "g", Owner: "r", Mode: lock.Shared, TTL: short})
	time.Sleep(2 * short)
	if err := srv.Client(t).Del(ctx, s.sharedKey("g"), s.expiryKey("g")).Err(); err != nil {
		t.Fatal(err)
	}

	evs, err := s.Events().ReadEvents(ctx, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%s %s %s", e.Type, e.Lock, e.Owner))
	}
	want := []string{
		"granted x a", "expired x a", "granted x b",
		"granted s r1", "granted s r2", "expired s r2", "renewed s r1",
		"granted f r", "expired f r",
		"granted g r",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	// The sweeper records what no script saw (g's lease), and nothing twice.
	s.journal.single.sweep = newSweeper(s.reaper, s.journal.single, DefaultEventsRetention)
	s.journal.single.sweep.start()
	deadline := time.Now().Add(3 * time.Second)
	for {
		evs, err := s.Events().ReadEvents(ctx, evs[len(evs)-1].ID, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 1 && evs[0].Type == lock.EventExpired && evs[0].Lock == "g" {
			break
		}
		if len(evs) > 1 || time.Now().After(deadline) {
			t.Fatalf("after the sweep: %+v", evs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var tracked []string
	for _, m := range srv.Client(t).ZRange(ctx, s.expiriesKey(), 0, -1).Val() {
		if m != "" { // the announced mark
			tracked = append(tracked, m)
		}
	}
	if len(tracked) != 2 {
		t.Errorf("tracked %q, want the 2 leases that live", tracked)
	}
}

// TestEvents_renewed_lease_does_not_expire: a lease renewed past the
// expiry the sweeper was woken for is left alone.
func TestEvents_renewed_lease_does_not_expire(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	s, err := New(srv.Client(t), Options{Prefix: "renewed:", Events: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "r", Owner: "o", TTL: 200 * time.Millisecond, Mode: lock.Shared})
	if err != nil {
		t.Fatal(err)
	}
	x, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "x", Owner: "o", TTL: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	for _, l := range []lock.Lease{g.Lease, x.Lease} {
		if _, err := s.Renew(ctx, lock.LeaseRef{Lock: l.Lock, ID: l.ID}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(400 * time.Millisecond)
	evs, err := s.Events().ReadEvents(ctx, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Type == lock.EventExpired {
			t.Fatalf("a renewed lease was recorded expired: %+v", e)
		}
	}
	if len(evs) != 4 {
		t.Fatalf("%d events, want 2 grants and 2 renewals", len(evs))
	}
}
