package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// eventBehaviours check the event log of docs/EVENTS.md (lock.EventLog):
// every change of a lock records exactly its events, in order, with the
// lease's fields, and nothing else does; readers resume after an id and wait
// for the next event; expiry is recorded within a second, once.
//
// A store whose events are off (its Events returns nil: redlock mode, or
// LOCKAPI_EVENTS=false) skips them. Each behaviour reads from the newest id when it
// starts and looks only at its own lock names (a prefix), so that a log
// shared with other tests does not disturb it.
var eventBehaviours = []behaviour{
	{"Events_of_an_exclusive_lock", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		c := newEventCheck(t, backend, s, "ev:x")
		const name = "ev:x"
		req := lock.AcquireRequest{Lock: name, Owner: "w", Principal: "team-a", IdempotencyKey: "k-1"}
		g := tryAcquire(t, s, req)
		l := g.Lease
		c.want("fresh grant", evOf(lock.EventGranted, l, 1))

		if r := tryAcquire(t, s, req); !r.Replayed {
			t.Fatalf("not a replay: %+v", r)
		}
		c.want("idempotent replay")
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "other", TTL: time.Minute})
		WantCode(t, err, lock.CodeHeld)
		_, err = s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "w", Principal: "team-b", TTL: time.Minute})
		WantCode(t, err, lock.CodeHeld)
		c.want("refused acquires")

		r := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "w", Principal: "team-a"})
		if r.Fresh || r.Lease.HoldCount != 2 {
			t.Fatalf("re-entry = %+v", r)
		}
		c.want("re-entry", evOf(lock.EventReentered, l, 2))

		renewed, err := s.Renew(ctx, lock.LeaseRef{Lock: name, ID: l.ID, Principal: "team-a"}, 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Renew(ctx, lock.LeaseRef{Lock: name, ID: l.ID}, 0); err != nil {
			t.Fatal(err)
		}
		c.want("renewals", evOf(lock.EventRenewed, renewed, 2), evOf(lock.EventRenewed, renewed, 2))

		_, err = s.Renew(ctx, lock.LeaseRef{Lock: name, ID: l.ID, Principal: "team-b"}, time.Hour)
		WantCode(t, err, lock.CodeForbidden)
		_, err = s.Release(ctx, lock.LeaseRef{Lock: name, ID: l.ID, Principal: "team-b"}, true)
		WantCode(t, err, lock.CodeForbidden)
		_, err = s.Renew(ctx, lock.LeaseRef{Lock: name, ID: "01J00000000000000000000000"}, time.Hour)
		WantCode(t, err, lock.CodeLeaseLost)
		c.want("refused renewals and releases")

		if res := release(t, s, name, l.ID, false); res.Released || res.HoldCount != 1 {
			t.Fatalf("release of one hold = %+v", res)
		}
		c.want("release of one hold", evOf(lock.EventReleased, l, 1))
		if res := release(t, s, name, l.ID, false); !res.Released {
			t.Fatalf("release of the last hold = %+v", res)
		}
		c.want("release of the last hold", evOf(lock.EventReleased, l, 0))
		if res := release(t, s, name, l.ID, false); !res.Retried {
			t.Fatalf("retried release = %+v", res)
		}
		c.want("retried release")

		// Release of every hold at once: one event.
		l2 := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "w2"}).Lease
		tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "w2"})
		tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "w2"})
		release(t, s, name, l2.ID, true)
		c.want("release of all holds",
			evOf(lock.EventGranted, l2, 1), evOf(lock.EventReentered, l2, 2), evOf(lock.EventReentered, l2, 3),
			evOf(lock.EventReleased, l2, 0))
		if l2.Token <= l.Token {
			t.Fatalf("token %d after %d", l2.Token, l.Token)
		}
	}},
	// Abandon is a release that the server makes for a grant nobody
	// received: it records released when it drops a hold, and nothing when
	// it drops none.
	{"Events_of_abandon", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		c := newEventCheck(t, backend, s, "ev:ab")
		const name = "ev:ab"
		g := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "w", Principal: "team-a"})
		re := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "w", Principal: "team-a"})
		l := g.Lease
		c.want("grant and re-entry", evOf(lock.EventGranted, l, 1), evOf(lock.EventReentered, l, 2))
		abandon(t, s, name, re.RequestID)
		c.want("abandon of the re-entry", evOf(lock.EventReleased, l, 1))
		abandon(t, s, name, re.RequestID)
		abandon(t, s, name, "01J00000000000000000000000")
		c.want("abandons that drop nothing")
		abandon(t, s, name, g.RequestID)
		c.want("abandon of the fresh grant", evOf(lock.EventReleased, l, 0))

		// A grant a replay claimed is not abandoned.
		req := lock.AcquireRequest{Lock: name, Owner: "w", IdempotencyKey: "k"}
		k := tryAcquire(t, s, req)
		tryAcquire(t, s, req)
		abandon(t, s, name, k.RequestID)
		c.want("abandon of a claimed grant", evOf(lock.EventGranted, k.Lease, 1))
		release(t, s, name, k.Lease.ID, true)
		c.want("release", evOf(lock.EventReleased, k.Lease, 0))

		// A downgrade's shared lease and a permit.
		e := Acquire(t, s, name, "w", time.Minute)
		sh := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "w", Mode: lock.Shared})
		abandon(t, s, name, sh.RequestID)
		p := tryAcquire(t, s, lock.AcquireRequest{Lock: "ev:ab:sem", Owner: "w", Limit: 2})
		abandon(t, s, "ev:ab:sem", p.RequestID)
		c.want("abandon of a shared lease and a permit",
			evOf(lock.EventGranted, e, 1), evOf(lock.EventGranted, sh.Lease, 1), evOf(lock.EventReleased, sh.Lease, 0),
			evOf(lock.EventGranted, p.Lease, 1), evOf(lock.EventReleased, p.Lease, 0))
	}},
	{"Events_a_grant_carries_how_long_it_waited", func(t *testing.T, backend Backend) {
		// AcquireWait tells each try after its first how long it has
		// waited (AcquireRequest.Waited); a fresh grant records it, to the
		// millisecond, and no other event carries it.
		s := backend.Open(t)
		c := newEventCheck(t, backend, s, "ev:w")
		waited := tryAcquire(t, s, lock.AcquireRequest{Lock: "ev:w", Owner: "w", WaiterID: lock.NewWaiterID(lock.AcquireRequest{Lock: "ev:w"}),
			Waited: 1500*time.Millisecond + 400*time.Microsecond})
		tryAcquire(t, s, lock.AcquireRequest{Lock: "ev:w", Owner: "w", Waited: time.Second}) // a re-entry
		atOnce := tryAcquire(t, s, lock.AcquireRequest{Lock: "ev:w:2", Owner: "w"})
		shared := tryAcquire(t, s, lock.AcquireRequest{Lock: "ev:w:3", Owner: "w", Mode: lock.Shared, Waited: 20 * time.Millisecond})
		got := c.next()
		slices.SortStableFunc(got, func(a, b lock.Event) int { return cmp.Compare(a.Lock, b.Lock) })
		want := []struct {
			token  uint64
			typ    lock.EventType
			waited time.Duration
		}{{waited.Lease.Token, lock.EventGranted, 1500 * time.Millisecond}, {waited.Lease.Token, lock.EventReentered, 0},
			{atOnce.Lease.Token, lock.EventGranted, 0}, {shared.Lease.Token, lock.EventGranted, 20 * time.Millisecond}}
		if len(got) != len(want) {
			t.Fatalf("recorded %d events, want %d: %v", len(got), len(want), got)
		}
		for i, w := range want {
			if e := got[i]; e.Token != w.token || e.Type != w.typ || e.Waited != w.waited {
				t.Errorf("event %d: %s waited %v, want %s of token %d waited %v", i, describe(e), e.Waited, w.typ, w.token, w.waited)
			}
		}
	}},
	{"Events_of_shared_leases_and_permits", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		c := newEventCheck(t, backend, s, "ev:s")
		const name = "ev:s:rw"
		r1 := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "r1", Principal: "team-a", Mode: lock.Shared}).Lease
		r2 := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "r2", Principal: "team-b", Mode: lock.Shared}).Lease
		tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "r1", Principal: "team-a", Mode: lock.Shared})
		c.want("two readers, one re-entering",
			evOf(lock.EventGranted, r1, 1), evOf(lock.EventGranted, r2, 1), evOf(lock.EventReentered, r1, 2))
		if r1.Mode != lock.Shared {
			t.Fatalf("shared lease = %+v", r1)
		}

		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "w", TTL: time.Minute})
		WantCode(t, err, lock.CodeHeld)
		_, err = s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "r1", Principal: "team-a", TTL: time.Minute})
		WantCode(t, err, lock.CodeUpgrade)
		_, err = s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "p", Limit: 2, TTL: time.Minute})
		WantCode(t, err, lock.CodeLimitMismatch)
		c.want("refused writer, upgrade and limit")

		renewed, err := s.Renew(ctx, lock.LeaseRef{Lock: name, ID: r2.ID}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		release(t, s, name, r1.ID, false)
		release(t, s, name, r1.ID, false)
		release(t, s, name, r2.ID, true)
		c.want("renewal and releases",
			evOf(lock.EventRenewed, renewed, 1), evOf(lock.EventReleased, r1, 1), evOf(lock.EventReleased, r1, 0),
			evOf(lock.EventReleased, r2, 0))

		// A downgrade: the writer's own shared lease is a fresh grant.
		w := Acquire(t, s, name, "w", time.Minute)
		ws := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "w", Mode: lock.Shared}).Lease
		release(t, s, name, w.ID, false)
		release(t, s, name, ws.ID, false)
		c.want("downgrade",
			evOf(lock.EventGranted, w, 1), evOf(lock.EventGranted, ws, 1),
			evOf(lock.EventReleased, w, 0), evOf(lock.EventReleased, ws, 0))

		// Permits: each acquire is a fresh grant, even by the same owner.
		const sem = "ev:s:sem"
		req := lock.AcquireRequest{Lock: sem, Owner: "p", Principal: "team-a", Limit: 2, IdempotencyKey: "k"}
		p1 := tryAcquire(t, s, req).Lease
		p2 := tryAcquire(t, s, lock.AcquireRequest{Lock: sem, Owner: "p", Principal: "team-a", Limit: 2}).Lease
		if r := tryAcquire(t, s, req); !r.Replayed {
			t.Fatalf("not a replay: %+v", r)
		}
		_, err = s.TryAcquire(ctx, lock.AcquireRequest{Lock: sem, Owner: "q", Limit: 2, TTL: time.Minute})
		WantCode(t, err, lock.CodeHeld)
		_, err = s.TryAcquire(ctx, lock.AcquireRequest{Lock: sem, Owner: "q", Limit: 3, TTL: time.Minute})
		WantCode(t, err, lock.CodeLimitMismatch)
		renewedP, err := s.Renew(ctx, lock.LeaseRef{Lock: sem, ID: p2.ID}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		release(t, s, sem, p1.ID, false)
		release(t, s, sem, p1.ID, false) // a retry
		c.want("permits",
			evOf(lock.EventGranted, p1, 1), evOf(lock.EventGranted, p2, 1), evOf(lock.EventRenewed, renewedP, 1),
			evOf(lock.EventReleased, p1, 0))
	}},
	// A queue place is not a lease: taking, keeping and leaving one records
	// nothing. Events of a lock with a queue carry its length (or -1).
	{"Events_queue_places_record_nothing", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		c := newEventCheck(t, backend, s, "ev:q")
		const name = "ev:q"
		a := Acquire(t, s, name, "a", time.Minute)
		c.want("grant", evOf(lock.EventGranted, a, 1))
		waiter, stopFirst := keepQueued(t, s, lock.AcquireRequest{Lock: name, Owner: "p", Fair: true})
		_, stopSecond := keepQueued(t, s, lock.AcquireRequest{Lock: name, Owner: "p", Fair: true})
		c.want("joining the queue")
		renewed, err := s.Renew(ctx, lock.LeaseRef{Lock: name, ID: a.ID}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		c.want("renewal with two queued", withQueue(evOf(lock.EventRenewed, renewed, 1), 2))
		stopFirst()
		if err := s.Leave(ctx, name, waiter); err != nil {
			t.Fatal(err)
		}
		c.want("leaving the queue")
		stopSecond()
		release(t, s, name, a.ID, false)
		c.want("release with one queued", withQueue(evOf(lock.EventReleased, a, 0), 1))
	}},
	// Force release ends every lease of the name: one force_released event
	// per lease, with the lease's owner and the admin's principal.
	{"Events_of_force_release", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		c := newEventCheck(t, backend, s, "ev:f")
		forced := func(l lock.Lease) ev {
			e := evOf(lock.EventForceReleased, l, 0)
			e.Principal = "admin"
			return e
		}
		force := func(name string) {
			t.Helper()
			if freed, err := s.ForceRelease(ctx, name, "admin"); err != nil || !freed {
				t.Fatalf("force release of %s = %v, %v", name, freed, err)
			}
		}

		x := tryAcquire(t, s, lock.AcquireRequest{Lock: "ev:f:x", Owner: "w", Principal: "team-a"}).Lease
		tryAcquire(t, s, lock.AcquireRequest{Lock: "ev:f:x", Owner: "w", Principal: "team-a"})
		c.want("exclusive grant", evOf(lock.EventGranted, x, 1), evOf(lock.EventReentered, x, 2))
		force("ev:f:x")
		c.want("force release of an exclusive lease", forced(x))
		if freed, err := s.ForceRelease(ctx, "ev:f:x", "admin"); err != nil || freed {
			t.Fatalf("force release of a free lock = %v, %v", freed, err)
		}
		c.want("force release of a free lock")

		var readers []lock.Lease
		for i := range 3 {
			readers = append(readers, tryAcquire(t, s, lock.AcquireRequest{Lock: "ev:f:rw", Owner: fmt.Sprint("r", i), Principal: fmt.Sprint("team-", i), Mode: lock.Shared}).Lease)
		}
		c.want("three readers", evOf(lock.EventGranted, readers[0], 1), evOf(lock.EventGranted, readers[1], 1), evOf(lock.EventGranted, readers[2], 1))
		force("ev:f:rw")
		c.wantAnyOrder("force release of three readers", forced(readers[0]), forced(readers[1]), forced(readers[2]))

		p1 := permit(t, s, "ev:f:sem", "p", 2, time.Minute)
		p2 := permit(t, s, "ev:f:sem", "p", 2, time.Minute)
		e := Acquire(t, s, "ev:f:down", "d", time.Minute)
		sh := tryAcquire(t, s, lock.AcquireRequest{Lock: "ev:f:down", Owner: "d", Mode: lock.Shared}).Lease
		c.want("permits and a downgrade",
			evOf(lock.EventGranted, p1, 1), evOf(lock.EventGranted, p2, 1), evOf(lock.EventGranted, e, 1), evOf(lock.EventGranted, sh, 1))
		force("ev:f:sem")
		c.wantAnyOrder("force release of two permits", forced(p1), forced(p2))
		force("ev:f:down")
		c.wantAnyOrder("force release of a downgrade", forced(e), forced(sh))

		// The queue is left alone, and the events say how long it is.
		q := Acquire(t, s, "ev:f:q", "a", time.Minute)
		_, stopQueued := keepQueued(t, s, lock.AcquireRequest{Lock: "ev:f:q", Owner: "p", Fair: true})
		c.want("grant", evOf(lock.EventGranted, q, 1))
		stopQueued()
		force("ev:f:q")
		c.want("force release with one queued", withQueue(forced(q), 1))
	}},
	// A reader that starts after LastEventID sees only what comes next, and
	// pages through the log in order.
	{"Events_read_after_the_last_id", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		log := eventLogOf(t, backend, s)
		a := Acquire(t, s, "ev:r:a", "w", time.Minute)
		last, err := log.LastEventID(ctx)
		if err != nil || last == "" {
			t.Fatalf("last event id = %q, %v", last, err)
		}
		if _, _, ok := lock.ParseEventID(last); !ok {
			t.Fatalf("last event id %q is not <ms>-<seq>", last)
		}
		b := Acquire(t, s, "ev:r:b", "w", time.Minute)
		release(t, s, "ev:r:b", b.ID, false)
		release(t, s, "ev:r:a", a.ID, false)

		got := only(readAll(t, log, last, 100), "ev:r:")
		wantEventList(t, "after the last id", log.merged(), got,
			evOf(lock.EventGranted, b, 1), evOf(lock.EventReleased, b, 0), evOf(lock.EventReleased, a, 0))
		newest, err := log.LastEventID(ctx)
		if err != nil || lock.CompareEventIDs(newest, got[2].ID) < 0 {
			t.Fatalf("last event id = %q, %v; the newest event read is %q", newest, err, got[2].ID)
		}

		// From the start of the log, a's grant comes before them.
		all := only(readAll(t, log, "", 100), "ev:r:")
		wantEventList(t, "from the oldest kept", log.merged(), all,
			evOf(lock.EventGranted, a, 1), evOf(lock.EventGranted, b, 1), evOf(lock.EventReleased, b, 0), evOf(lock.EventReleased, a, 0))

		// One event at a time gives the same events.
		paged := only(readAll(t, log, last, 1), "ev:r:")
		if len(paged) != len(got) {
			t.Fatalf("read one at a time: %d events, want %d", len(paged), len(got))
		}
		for i := range got {
			if paged[i].ID != got[i].ID {
				t.Fatalf("read one at a time: event #%d is %q, want %q", i, paged[i].ID, got[i].ID)
			}
		}

		// After an id the log has not reached yet: nothing, and no error.
		ms, _, _ := lock.ParseEventID(newest)
		future := fmt.Sprintf("%d-0", ms+3_600_000)
		if evs, err := log.ReadEvents(ctx, future, 100); err != nil || len(evs) != 0 {
			t.Fatalf("read after %s (an hour ahead) = %d events, %v", future, len(evs), err)
		}
	}},
	// ReadEventsBefore reads the log backwards, newest first, page by page:
	// the same events as a forward read, in reverse.
	{"Events_read_before_an_id_newest_first", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		log := eventLogOf(t, backend, s)
		for i := range 4 { // names on several masters of a cluster
			name := fmt.Sprintf("ev:b:%d", i)
			l := Acquire(t, s, name, "w", time.Minute)
			release(t, s, name, l.ID, false)
		}
		log.settle()
		last, err := log.LastEventID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		newest, err := log.ReadEventsBefore(ctx, "", 1)
		if err != nil || len(newest) != 1 || lock.CompareEventIDs(newest[0].ID, last) < 0 {
			t.Fatalf("the newest event = %+v, %v; the last event id is %q", newest, err, last)
		}
		forward := only(readAll(t, log, "", 100), "ev:b:")
		if len(forward) != 8 {
			t.Fatalf("read forward: %d events, want 8", len(forward))
		}
		var backward []lock.Event
		for before, pages := "", 0; ; pages++ {
			if pages > 1000 {
				t.Fatal("read backwards: no end")
			}
			batch, err := log.ReadEventsBefore(ctx, before, 3)
			if err != nil {
				t.Fatalf("read before %q: %v", before, err)
			}
			if len(batch) > 3 {
				t.Fatalf("read %d events with limit 3", len(batch))
			}
			for i, e := range batch {
				notBefore := before != "" && lock.CompareEventIDs(e.ID, before) >= 0
				if notBefore || i > 0 && lock.CompareEventIDs(e.ID, batch[i-1].ID) >= 0 {
					t.Fatalf("read before %q: %q is out of order in %+v", before, e.ID, batch)
				}
			}
			backward = append(backward, only(batch, "ev:b:")...)
			if len(batch) < 3 {
				break
			}
			before = batch[len(batch)-1].ID
		}
		slices.Reverse(backward)
		if len(backward) != len(forward) {
			t.Fatalf("read backwards: %d events, forwards %d", len(backward), len(forward))
		}
		for i := range forward {
			if backward[i].ID != forward[i].ID || backward[i].Type != forward[i].Type || backward[i].Lock != forward[i].Lock {
				t.Fatalf("event #%d backwards is %+v, forwards %+v", i, backward[i], forward[i])
			}
		}
		_, err = log.ReadEventsBefore(ctx, "not-an-id", 10)
		WantCode(t, err, lock.CodeInvalid)
	}},
	{"Events_WaitEvents_wakes_on_a_new_event", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		log := eventLogOf(t, backend, s)
		before, err := log.LastEventID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		type woken struct {
			evs []lock.Event
			err error
			at  time.Time
		}
		done := make(chan woken, 1)
		go func() {
			evs, err := waitFor(wctx, log, before, "ev:w:")
			done <- woken{evs, err, time.Now()}
		}()
		select {
		case w := <-done:
			t.Fatalf("WaitEvents returned with nothing recorded: %+v, %v", w.evs, w.err)
		case <-time.After(300 * time.Millisecond):
		}
		acquired := time.Now()
		l := Acquire(t, s, "ev:w:a", "w", time.Minute)
		var w woken
		select {
		case w = <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("WaitEvents did not wake within 5s of a grant")
		}
		if w.err != nil {
			t.Fatal(w.err)
		}
		t.Logf("grant to WaitEvents' return: %v", w.at.Sub(acquired))
		wantEventList(t, "woken by a grant", false, w.evs, evOf(lock.EventGranted, l, 1))

		// With an event already after the id, it returns at once.
		start := time.Now()
		evs, err := log.WaitEvents(wctx, before, 100)
		if err != nil || len(only(evs, "ev:w:")) == 0 || time.Since(start) > 2*time.Second {
			t.Fatalf("WaitEvents with an event recorded = %d events, %v after %v", len(evs), err, time.Since(start))
		}

		// It ends with its context.
		last, err := log.LastEventID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancelShort()
		start = time.Now()
		_, err = waitFor(short, log, last, "ev:w:")
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 3*time.Second {
			t.Fatalf("WaitEvents past its deadline = %v after %v", err, time.Since(start))
		}
	}},
	// An expiry is recorded without anyone touching the lock, within a
	// second of the TTL's end, once; a lease renewed in time never expires.
	{"Events_expired_within_a_second_once", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		c := newEventCheck(t, backend, s, "ev:e:")
		const ttl = 300 * time.Millisecond
		x := Acquire(t, s, "ev:e:x", "w", ttl)
		sh := shared(t, s, "ev:e:rw", "r", ttl)
		p := permit(t, s, "ev:e:sem", "p", 2, ttl)
		kept := Acquire(t, s, "ev:e:kept", "k", ttl)
		renewed, err := s.Renew(ctx, lock.LeaseRef{Lock: "ev:e:kept", ID: kept.ID}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		c.want("grants",
			evOf(lock.EventGranted, x, 1), evOf(lock.EventGranted, sh, 1), evOf(lock.EventGranted, p, 1),
			evOf(lock.EventGranted, kept, 1), evOf(lock.EventRenewed, renewed, 1))

		leases := map[string]lock.Lease{x.ID: x, sh.ID: sh, p.ID: p}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var expired []lock.Event
		after := c.from
		for len(expired) < len(leases) {
			evs, err := c.log.WaitEvents(wctx, after, 100)
			if err != nil {
				t.Fatalf("waiting for %d expiries, %d seen: %v", len(leases), len(expired), err)
			}
			now := time.Now()
			after = evs[len(evs)-1].ID
			for _, e := range only(evs, "ev:e:") {
				l, ok := leases[e.LeaseID]
				if e.Type != lock.EventExpired || !ok {
					t.Fatalf("while waiting for expiries: %s", describe(e))
				}
				lag := now.Sub(l.ExpiresAt)
				t.Logf("%s (%s) expired: seen %v after its TTL ended", l.Lock, l.Mode, lag.Round(time.Millisecond))
				if lag > 1500*time.Millisecond {
					t.Fatalf("%s's expiry seen %v after its TTL ended, want within 1s", l.Lock, lag)
				}
				if e.Time.Before(l.ExpiresAt.Add(-time.Millisecond)) || e.Time.After(l.ExpiresAt.Add(1500*time.Millisecond)) {
					t.Fatalf("%s's expiry is timed %v; its TTL ended at %v", l.Lock, e.Time, l.ExpiresAt)
				}
				expired = append(expired, e)
			}
		}
		c.wantAnyOrder("expiries", evOf(lock.EventExpired, x, 0), evOf(lock.EventExpired, sh, 0), evOf(lock.EventExpired, p, 0))

		// Once: neither more time nor a look at the locks records it again.
		time.Sleep(1200 * time.Millisecond)
		for _, name := range []string{"ev:e:x", "ev:e:rw", "ev:e:sem", "ev:e:kept"} {
			Inspect(t, s, name)
		}
		next := Acquire(t, s, "ev:e:x", "w2", time.Minute)
		c.want("after the expiries", evOf(lock.EventGranted, next, 1))
	}},
	// An expiry comes before the grant it made possible, however soon that
	// grant follows the TTL's end: a reader that follows the log never sees
	// two holders of one exclusive lock.
	{"Events_expiry_comes_before_the_next_grant", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		c := newEventCheck(t, backend, s, "ev:n:")
		const ttl = 200 * time.Millisecond
		for _, kind := range []struct {
			name    string
			holder  lock.AcquireRequest
			blocked lock.AcquireRequest
			queue   int // at the expiry: a writer queues behind readers
		}{
			{"exclusive", lock.AcquireRequest{Owner: "a"}, lock.AcquireRequest{Owner: "b"}, 0},
			{"shared", lock.AcquireRequest{Owner: "a", Mode: lock.Shared}, lock.AcquireRequest{Owner: "b"}, 1},
			{"permit", lock.AcquireRequest{Owner: "a", Limit: 1}, lock.AcquireRequest{Owner: "b", Limit: 1}, 0},
		} {
			name := "ev:n:" + kind.name
			kind.holder.Lock, kind.holder.TTL = name, ttl
			a := tryAcquire(t, s, kind.holder).Lease
			kind.blocked.Lock = name
			w := wantGranted(t, startWait(t, s, kind.blocked, 10*time.Second), 5*time.Second)
			c.want(kind.name, evOf(lock.EventGranted, a, 1), withQueue(evOf(lock.EventExpired, a, 0), kind.queue), evOf(lock.EventGranted, w.g.Lease, 1))
		}
	}},
}

// eventLogOf returns s's event log, with what the backend declares of it.
// A backend without events (Backend.Events) skips the behaviour.
func eventLogOf(t *testing.T, backend Backend, s lock.Store) declaredLog {
	t.Helper()
	if !backend.Events {
		t.Skipf("%T records no events here (Backend.Events: events are off, as in redlock mode or with LOCKAPI_EVENTS=false)", s)
	}
	log := s.Events()
	if log == nil {
		t.Fatalf("%T: Backend.Events is set, but its Events() is nil", s)
	}
	return declaredLog{EventLog: log, hold: backend.EventsHold}
}

// declaredLog is a store's event log and how long a read of it holds back
// the newest events (Backend.EventsHold).
type declaredLog struct {
	lock.EventLog
	hold time.Duration
}

// merged reports a log merged from several, in which only each lock's
// events are in order.
func (l declaredLog) merged() bool { return l.hold > 0 }

// settle waits until what was recorded so far can be read from the log.
func (l declaredLog) settle() { time.Sleep(l.hold) }

// ev is what a behaviour expects of one event: all but its id and time, and
// the queue length only where the store knew it (Queue -1 matches any).
type ev struct {
	Type      lock.EventType
	Lock      string
	Owner     string
	Principal string
	LeaseID   string
	Mode      lock.Mode
	Token     uint64
	HoldCount int
	Queue     int
}

// evOf is the event typ of lease l with holds left and nobody queued.
func evOf(typ lock.EventType, l lock.Lease, holds int) ev {
	return ev{Type: typ, Lock: l.Lock, Owner: l.Owner, Principal: l.Principal, LeaseID: l.ID, Mode: l.Mode, Token: l.Token, HoldCount: holds}
}

func withQueue(e ev, n int) ev {
	e.Queue = n
	return e
}

func (w ev) matches(e lock.Event) bool {
	return e.Type == w.Type && e.Lock == w.Lock && e.Owner == w.Owner && e.Principal == w.Principal &&
		e.LeaseID == w.LeaseID && e.Mode == w.Mode && e.Token == w.Token && e.HoldCount == w.HoldCount &&
		(e.Queue == w.Queue || e.Queue == -1)
}

func (w ev) String() string {
	return fmt.Sprintf("%s %s owner=%q principal=%q lease=%s %s token=%d holds=%d queue=%d",
		w.Type, w.Lock, w.Owner, w.Principal, w.LeaseID, w.Mode, w.Token, w.HoldCount, w.Queue)
}

func describe(e lock.Event) string {
	return fmt.Sprintf("%s: %s %s owner=%q principal=%q lease=%s %s token=%d holds=%d queue=%d at %s",
		e.ID, e.Type, e.Lock, e.Owner, e.Principal, e.LeaseID, e.Mode, e.Token, e.HoldCount, e.Queue, e.Time.Format(time.RFC3339Nano))
}

// readAll reads every event after after, limit at a time, checking that
// ids are well formed and rise, and that no read returns more than limit.
func readAll(t *testing.T, log declaredLog, after string, limit int) []lock.Event {
	t.Helper()
	log.settle()
	var out []lock.Event
	for {
		batch, err := log.ReadEvents(ctx, after, limit)
		if err != nil {
			t.Fatalf("read events after %q: %v", after, err)
		}
		if len(batch) == 0 {
			return out
		}
		if len(batch) > limit {
			t.Fatalf("read %d events with limit %d", len(batch), limit)
		}
		for _, e := range batch {
			if _, _, ok := lock.ParseEventID(e.ID); !ok {
				t.Fatalf("event id %q is not <ms>-<seq>: %s", e.ID, describe(e))
			}
			if after != "" && lock.CompareEventIDs(e.ID, after) <= 0 {
				t.Fatalf("event %s read after %s", e.ID, after)
			}
			after = e.ID
		}
		out = append(out, batch...)
	}
}

// waitFor waits for events after after until some of them are of names
// with prefix, and returns those.
func waitFor(ctx context.Context, log lock.EventLog, after, prefix string) ([]lock.Event, error) {
	for {
		evs, err := log.WaitEvents(ctx, after, 100)
		if err != nil {
			return nil, err
		}
		if mine := only(evs, prefix); len(mine) > 0 {
			return mine, nil
		}
		after = evs[len(evs)-1].ID
	}
}

// only keeps the events of names with prefix.
func only(evs []lock.Event, prefix string) []lock.Event {
	var out []lock.Event
	for _, e := range evs {
		if strings.HasPrefix(e.Lock, prefix) {
			out = append(out, e)
		}
	}
	return out
}

// wantEventList fails the test unless got is exactly want, in order, each
// with a time.
func wantEventList(t *testing.T, step string, perLock bool, got []lock.Event, want ...ev) {
	t.Helper()
	if perLock {
		// Only each lock's events are in order: compare them lock by lock.
		got, want = slices.Clone(got), slices.Clone(want)
		slices.SortStableFunc(got, func(a, b lock.Event) int { return cmp.Compare(a.Lock, b.Lock) })
		slices.SortStableFunc(want, func(a, b ev) int { return cmp.Compare(a.Lock, b.Lock) })
	}
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = want[i].matches(got[i]) && !got[i].Time.IsZero()
	}
	if ok {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: recorded %d events:\n", step, len(got))
	for _, e := range got {
		fmt.Fprintf(&b, "\t%s\n", describe(e))
	}
	fmt.Fprintf(&b, "want %d:\n", len(want))
	for _, e := range want {
		fmt.Fprintf(&b, "\t%s\n", e)
	}
	t.Fatal(b.String())
}

// eventCheck follows the events of one behaviour's names (a prefix) step
// by step: each want reads what was recorded since the previous one.
type eventCheck struct {
	t      *testing.T
	log    declaredLog
	prefix string
	from   string // the newest id read
}

// newEventCheck starts after the newest event of s's log.
func newEventCheck(t *testing.T, backend Backend, s lock.Store, prefix string) *eventCheck {
	t.Helper()
	l := eventLogOf(t, backend, s)
	from, err := l.LastEventID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &eventCheck{t: t, log: l, prefix: prefix, from: from}
}

// next returns the events of c's names since the previous step.
func (c *eventCheck) next() []lock.Event {
	c.t.Helper()
	evs := readAll(c.t, c.log, c.from, 100)
	if len(evs) > 0 {
		c.from = evs[len(evs)-1].ID
	}
	now := time.Now()
	mine := only(evs, c.prefix)
	for _, e := range mine {
		if e.Type != lock.EventExpired && (e.Time.Before(now.Add(-time.Minute)) || e.Time.After(now.Add(5*time.Second))) {
			c.t.Fatalf("event timed %v, read at %v: %s", e.Time, now, describe(e))
		}
	}
	return mine
}

// want fails the test unless the events since the previous step are
// exactly want, in order.
func (c *eventCheck) want(step string, want ...ev) {
	c.t.Helper()
	wantEventList(c.t, step, c.log.merged(), c.next(), want...)
}

// wantAnyOrder is want for events of one change that the store may record
// in any order (one per lease a force release ends, say).
func (c *eventCheck) wantAnyOrder(step string, want ...ev) {
	c.t.Helper()
	got := c.next()
	slices.SortStableFunc(got, func(a, b lock.Event) int { return cmp.Compare(a.Token, b.Token) })
	slices.SortStableFunc(want, func(a, b ev) int { return cmp.Compare(a.Token, b.Token) })
	wantEventList(c.t, step, c.log.merged(), got, want...)
}
