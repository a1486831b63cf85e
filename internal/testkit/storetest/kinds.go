package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/fencetoken"
	"github.com/lockapi/lockapi/internal/lock"
)

// kindBehaviours check the lock kinds of docs/LOCK_KINDS.md: shared and
// exclusive leases, semaphores and fair queues, and what every store must do
// for each of them (its "Store rules, step by step" and Notices). Each
// behaviour names the rule it checks; a lease held for minutes stands for one
// that is not going to end during the test, so that a grant within seconds
// can only have come from the rule (or notification) under test.
var kindBehaviours = []behaviour{
	{"Multi_lock_is_all_or_nothing", func(t *testing.T, backend Backend) {
		// Names that hash to different Redis Cluster slots: a multi-lock
		// takes each on its own shard.
		s := Watch(backend.Open(t))
		names := []string{"multi:a", "multi:b", "multi:c", "multi:d"}
		reqs := func(owner string) []lock.AcquireRequest {
			rs := make([]lock.AcquireRequest, len(names))
			for i, n := range names {
				rs[i] = lock.AcquireRequest{Lock: n, Owner: owner, TTL: 5 * time.Minute}
			}
			return rs
		}
		held := Acquire(t, s, "multi:c", "other", 5*time.Minute)
		if _, err := lock.AcquireAll(ctx, s, reqs("me"), 0); lock.ErrorCode(err) != lock.CodeHeld {
			t.Fatalf("over a held name: %v", err)
		}
		for _, n := range []string{"multi:a", "multi:b", "multi:d"} {
			if st := Inspect(t, s, n); st.Held {
				t.Fatalf("%s held after a refused multi-lock: %+v", n, st.Holders)
			}
		}
		type result struct {
			gs  []lock.Grant
			err error
		}
		done := make(chan result, 1)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel() // a failed check ends the wait
		go func() {
			gs, err := lock.AcquireAll(wctx, s, reqs("me"), 10*time.Second)
			done <- result{gs, err}
		}()
		WaitForWaiters(t, s, 1)
		// Each pass takes names for a moment; between passes it holds none.
		for _, n := range []string{"multi:a", "multi:b", "multi:d"} {
			deadline := time.Now().Add(2 * time.Second)
			for Inspect(t, s, n).Held {
				if time.Now().After(deadline) {
					t.Fatalf("%s stays held while the multi-lock waits: a partial set", n)
				}
				time.Sleep(time.Millisecond)
			}
		}
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: "multi:c", ID: held.ID}, false); err != nil {
			t.Fatal(err)
		}
		r := <-done
		gs := r.gs
		if r.err != nil || len(gs) != len(names) {
			t.Fatalf("%d grants, %v", len(gs), r.err)
		}
		for i, g := range gs {
			if g.Lease.Lock != names[i] || g.Lease.Owner != "me" {
				t.Fatalf("grant %d: %+v", i, g.Lease)
			}
		}
	}},
	// --- Read-write locks ---

	// Every shared lease is a lease of its own: id, token, TTL, renewal and
	// release; Inspect lists them all, in grant order.
	{"Shared_leases_hold_together", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		const name = "rw:together"
		var leases []lock.Lease
		for i, ttl := range []time.Duration{time.Minute, 30 * time.Second, 2 * time.Minute} {
			g := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: fmt.Sprint("r", i), Mode: lock.Shared, TTL: ttl, Metadata: map[string]string{"reader": fmt.Sprint(i)}})
			l := g.Lease
			if !g.Fresh || l.Mode != lock.Shared || l.Limit != 0 || l.HoldCount != 1 || l.TTL != ttl || l.Owner != fmt.Sprint("r", i) || l.Token > fencetoken.MaxToken || l.Metadata["reader"] != fmt.Sprint(i) {
				t.Fatalf("shared grant #%d = %+v", i, g)
			}
			for _, prev := range leases {
				if l.ID == prev.ID || l.Token <= prev.Token {
					t.Fatalf("shared lease %+v after %+v: ids must differ and tokens rise", l, prev)
				}
			}
			leases = append(leases, l)
		}
		st := Inspect(t, s, name)
		if !st.Held || st.Kind != lock.KindShared || st.Holder != nil || st.Limit != 0 || st.Queue != 0 || st.LastToken != leases[2].Token {
			t.Fatalf("state = %+v", st)
		}
		wantHolders(t, backend, st, leases...)
		for i, h := range st.Holders {
			if h.Metadata["reader"] != fmt.Sprint(i) {
				t.Fatalf("holder #%d's metadata = %v", i, h.Metadata)
			}
		}

		renewed, err := s.Renew(ctx, lock.LeaseRef{Lock: name, ID: leases[1].ID}, time.Hour)
		if err != nil || renewed.ID != leases[1].ID || renewed.Token != leases[1].Token || renewed.Mode != lock.Shared || renewed.TTL != time.Hour {
			t.Fatalf("renew of a shared lease = %+v, %v", renewed, err)
		}
		leases[1] = renewed
		wantHolders(t, backend, Inspect(t, s, name), leases...) // the others' expiries are unchanged

		res := release(t, s, name, leases[0].ID, false)
		if !res.Released || res.HoldCount != 0 {
			t.Fatalf("release of a shared lease = %+v", res)
		}
		wantHolders(t, backend, Inspect(t, s, name), leases[1:]...)
		_, err = s.Renew(ctx, lock.LeaseRef{Lock: name, ID: leases[0].ID}, time.Hour)
		WantCode(t, err, lock.CodeLeaseLost)

		release(t, s, name, leases[2].ID, false)
		release(t, s, name, leases[1].ID, false)
		if st := Inspect(t, s, name); st.Held || st.Kind != "" || st.Holder != nil || len(st.Holders) != 0 || st.LastToken != leases[2].Token {
			t.Fatalf("state after every reader left = %+v", st)
		}
	}},
	// An exclusive acquire is refused while another owner reads, and a shared
	// one while another owner writes; the refusal names the lease in the way
	// (of several, the one that ends first) and changes nothing.
	{"Shared_and_exclusive_exclude_each_other", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		const name = "rw:exclude"
		r1 := shared(t, s, name, "r1", time.Minute)
		r2 := shared(t, s, name, "r2", 20*time.Second)
		before := Inspect(t, s, name)
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "w", TTL: time.Minute})
		hb := refusal(t, err)
		if hb.Owner != "r2" || hb.Token != r2.Token || hb.ExpiresIn <= 0 || hb.ExpiresIn > 20*time.Second || hb.Queue != 0 || hb.Queued {
			t.Fatalf("exclusive acquire among readers refused with %+v, want the reader that ends first (r2)", hb)
		}
		_, err = s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "w", Mode: lock.Exclusive, TTL: time.Minute})
		refusal(t, err)
		if after := Inspect(t, s, name); after.Index != before.Index {
			t.Fatal("a refused exclusive acquire changed the lock")
		}

		release(t, s, name, r1.ID, false)
		release(t, s, name, r2.ID, false)
		g := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "w", Mode: lock.Exclusive})
		w := g.Lease
		if !g.Fresh || w.Mode != lock.Exclusive || w.Limit != 0 || w.Token <= r2.Token {
			t.Fatalf("exclusive grant after the readers left = %+v", g)
		}
		st := Inspect(t, s, name)
		if st.Kind != lock.KindExclusive || st.Holder == nil || st.Holder.Owner != "w" || st.Holder.Mode != lock.Exclusive || st.Holder.Token != w.Token {
			t.Fatalf("state = %+v holder %+v", st, st.Holder)
		}
		wantHolders(t, backend, st, w)

		_, err = s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "r3", Mode: lock.Shared, TTL: time.Minute})
		if hb := refusal(t, err); hb.Owner != "w" || hb.Token != w.Token {
			t.Fatalf("shared acquire refused with %+v, want the writer", hb)
		}
		release(t, s, name, w.ID, false)
		shared(t, s, name, "r3", time.Minute)
	}},
	// The same owner and principal acquiring in the mode it holds adds a hold
	// to its lease: same lease id and token, TTL reset.
	{"Shared_reentry_adds_a_hold", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		const name = "rw:reenter"
		req := lock.AcquireRequest{Lock: name, Owner: "r", Principal: "team-a", Mode: lock.Shared, TTL: time.Second}
		first := tryAcquire(t, s, req).Lease
		req.TTL = 20 * time.Second
		g := tryAcquire(t, s, req)
		if g.Fresh || g.Lease.ID != first.ID || g.Lease.Token != first.Token || g.Lease.HoldCount != 2 || g.Lease.TTL != 20*time.Second || g.Lease.Mode != lock.Shared {
			t.Fatalf("reentrant shared grant = %+v, first %+v", g, first)
		}
		if !g.Lease.ExpiresAt.After(first.ExpiresAt) {
			t.Fatalf("reentrant acquire did not reset the TTL: %v then %v", first.ExpiresAt, g.Lease.ExpiresAt)
		}
		if st := Inspect(t, s, name); len(st.Holders) != 1 || st.Holders[0].HoldCount != 2 {
			t.Fatalf("holders = %+v", st.Holders)
		}

		// Another principal with the same owner name is another reader.
		other := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "r", Principal: "team-b", Mode: lock.Shared})
		if !other.Fresh || other.Lease.ID == first.ID {
			t.Fatalf("another principal's shared acquire = %+v", other)
		}
		theirs := lock.LeaseRef{Lock: name, ID: first.ID, Principal: "team-b"}
		_, err := s.Renew(ctx, theirs, time.Hour)
		WantCode(t, err, lock.CodeForbidden)
		_, err = s.Release(ctx, theirs, true)
		WantCode(t, err, lock.CodeForbidden)

		if res := release(t, s, name, first.ID, false); res.Released || res.HoldCount != 1 {
			t.Fatalf("release of one hold = %+v", res)
		}
		tryAcquire(t, s, req)
		tryAcquire(t, s, req)
		if res := release(t, s, name, first.ID, true); !res.Released || res.HoldCount != 0 {
			t.Fatalf("release of every hold = %+v", res)
		}
		st := Inspect(t, s, name)
		if st.Kind != lock.KindShared || len(st.Holders) != 1 || st.Holders[0].Token != other.Lease.Token {
			t.Fatalf("after the first reader left: %+v", st)
		}
	}},
	// An exclusive holder may take a shared lease of its own (a fresh token)
	// and keeps reading after it releases the exclusive one.
	{"Downgrade_keeps_a_shared_lease", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		const name = "rw:down"
		e := Acquire(t, s, name, "a", time.Minute)
		g := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "a", Mode: lock.Shared})
		sh := g.Lease
		if !g.Fresh || sh.ID == e.ID || sh.Token <= e.Token || sh.Mode != lock.Shared || sh.HoldCount != 1 {
			t.Fatalf("downgrade grant = %+v, exclusive %+v", g, e)
		}
		st := Inspect(t, s, name)
		if st.Kind != lock.KindExclusive || st.Holder == nil || st.Holder.Token != e.Token || st.Holder.Mode != lock.Exclusive {
			t.Fatalf("state with both leases = %+v holder %+v", st, st.Holder)
		}
		wantHolders(t, backend, st, e, sh)

		for _, mode := range []lock.Mode{lock.Shared, lock.Exclusive} {
			_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "b", Mode: mode, TTL: time.Minute})
			if hb := refusal(t, err); hb.Owner != "a" {
				t.Fatalf("%s acquire by b refused with %+v, want a in the way", mode, hb)
			}
		}
		// Holding the exclusive lease, a re-enters it (no upgrade question).
		if again := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "a"}); again.Fresh || again.Lease.ID != e.ID || again.Lease.HoldCount != 2 {
			t.Fatalf("exclusive re-entry next to a shared lease = %+v", again)
		}

		release(t, s, name, e.ID, true)
		st = Inspect(t, s, name)
		if st.Kind != lock.KindShared || st.Holder != nil {
			t.Fatalf("state after the exclusive release = %+v", st)
		}
		wantHolders(t, backend, st, sh)
		if b := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "b", Mode: lock.Shared}); !b.Fresh || b.Lease.Token <= sh.Token {
			t.Fatalf("another reader after the downgrade = %+v", b)
		}
		if again := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "a", Mode: lock.Shared}); again.Fresh || again.Lease.ID != sh.ID || again.Lease.HoldCount != 2 {
			t.Fatalf("a's shared re-entry = %+v", again)
		}
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "a", TTL: time.Minute})
		WantCode(t, err, lock.CodeUpgrade)
	}},
	// A reader may not become the writer, even alone: it would wait for
	// itself. The refusal is not a "held" one, takes no queue place and does
	// not wait.
	{"Upgrade_is_refused", func(t *testing.T, backend Backend) {
		backend.require(t, fairLocks)
		s := backend.Open(t)
		const name = "rw:up"
		r := shared(t, s, name, "a", time.Minute)
		before := Inspect(t, s, name)
		for _, fair := range []bool{false, true} {
			req := lock.AcquireRequest{Lock: name, Owner: "a", Fair: fair, TTL: time.Minute}
			_, err := s.TryAcquire(ctx, req)
			WantCode(t, err, lock.CodeUpgrade)
			req.WaiterID = lock.NewWaiterID(req)
			_, err = s.TryAcquire(ctx, req)
			WantCode(t, err, lock.CodeUpgrade)
		}
		if after := Inspect(t, s, name); after.Index != before.Index || after.Queue != 0 {
			t.Fatalf("a refused upgrade changed the lock: %+v", after)
		}
		start := time.Now()
		_, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: name, Owner: "a", TTL: time.Minute}, 5*time.Second)
		WantCode(t, err, lock.CodeUpgrade)
		if took := time.Since(start); took > time.Second {
			t.Fatalf("a waiting upgrade was refused after %v, want at once", took)
		}
		// With another reader too, the answer is still upgrade-refused (rule
		// 5.2 comes before 5.3), not held.
		b := shared(t, s, name, "b", time.Minute)
		_, err = s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "a", TTL: time.Minute})
		WantCode(t, err, lock.CodeUpgrade)

		release(t, s, name, r.ID, false)
		release(t, s, name, b.ID, false)
		if g := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "a"}); g.Lease.Mode != lock.Exclusive || g.Lease.Token <= b.Token {
			t.Fatalf("exclusive acquire after releasing the shared lease = %+v", g)
		}
	}},
	// An exclusive waiter held off by readers takes a queue place; new readers
	// then wait behind it, the readers holding keep their leases, and the
	// writer is granted when the last of them leaves.
	{"Writers_do_not_starve", func(t *testing.T, backend Backend) {
		backend.require(t, queues)
		s := backend.Open(t)
		const name = "rw:writer"
		r1 := shared(t, s, name, "r1", 5*time.Minute)
		r2 := shared(t, s, name, "r2", 5*time.Minute)
		writer := startWait(t, s, lock.AcquireRequest{Lock: name, Owner: "writer"}, 10*time.Second)
		waitQueue(t, s, name, 1)

		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "r3", Mode: lock.Shared, TTL: time.Minute})
		if hb := refusal(t, err); hb.Queue != 1 || hb.Queued || hb.ExpiresIn <= 0 || hb.ExpiresIn > lock.QueueEntryTTL {
			t.Fatalf("a new reader behind a queued writer was refused with %+v", hb)
		}
		// The readers already in keep their leases: they re-enter and renew.
		if g := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "r1", Mode: lock.Shared}); g.Lease.ID != r1.ID || g.Lease.HoldCount != 2 {
			t.Fatalf("a holding reader's re-entry behind a queued writer = %+v", g)
		}
		if _, err := s.Renew(ctx, lock.LeaseRef{Lock: name, ID: r2.ID}, 5*time.Minute); err != nil {
			t.Fatalf("a holding reader's renewal: %v", err)
		}
		release(t, s, name, r1.ID, true)
		wantWaiting(t, writer, 2*lock.QueueRenewal) // r2 still reads
		released := time.Now()
		release(t, s, name, r2.ID, false)
		got := wantGranted(t, writer, 5*time.Second)
		t.Logf("last reader's release to the writer's grant: %v", got.at.Sub(released))
		w := got.g.Lease
		if w.Owner != "writer" || w.Mode != lock.Exclusive || w.Token <= r2.Token {
			t.Fatalf("writer's grant = %+v", got.g)
		}
		st := Inspect(t, s, name)
		if st.Kind != lock.KindExclusive || st.Holder == nil || st.Holder.Owner != "writer" || st.Queue != 0 {
			t.Fatalf("state after the writer's grant = %+v", st)
		}
	}},
	// A shared lease whose holder died ends with its TTL and lets the writer
	// in; the dead reader's lease is lost.
	{"Expired_shared_lease_frees_the_writer", func(t *testing.T, backend Backend) {
		s := backend.Open(t)
		const name = "rw:expire"
		// Timed from before the reader's grant: its TTL starts within
		// shared, and a loaded machine can spend much of it there.
		start := time.Now()
		r := shared(t, s, name, "r", 200*time.Millisecond)
		g, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: name, Owner: "w", TTL: time.Minute}, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited < 150*time.Millisecond || waited > 3*time.Second {
			t.Fatalf("the writer was granted after %v; the reader's TTL was 200ms", waited)
		}
		if g.Lease.Mode != lock.Exclusive || g.Lease.Token <= r.Token {
			t.Fatalf("writer's grant = %+v", g)
		}
		_, err = s.Release(ctx, lock.LeaseRef{Lock: name, ID: r.ID}, false)
		WantCode(t, err, lock.CodeLeaseLost)
		_, err = s.Renew(ctx, lock.LeaseRef{Lock: name, ID: r.ID}, time.Hour)
		WantCode(t, err, lock.CodeLeaseLost)
		st := Inspect(t, s, name)
		if st.Kind != lock.KindExclusive || st.Queue != 0 {
			t.Fatalf("state = %+v", st)
		}
		wantHolders(t, backend, st, g.Lease)
	}},
	// A writer's release wakes one waiting reader, whose grant passes the
	// wake-up on: every waiting reader gets in (a notice, not the writer's
	// five-minute TTL).
	{"Readers_waiting_for_a_writer_all_get_in", func(t *testing.T, backend Backend) {
		s := Watch(backend.Open(t))
		const name = "rw:readers-wake"
		a := Acquire(t, s, name, "a", 5*time.Minute)
		var readers []<-chan waited
		for i := 0; i < 3; i++ {
			readers = append(readers, startWait(t, s, lock.AcquireRequest{Lock: name, Owner: fmt.Sprint("r", i), Mode: lock.Shared}, 20*time.Second))
		}
		WaitForWaiters(t, s, 3)
		release(t, s, name, a.ID, false)
		for _, r := range readers {
			if got := wantGranted(t, r, 5*time.Second); got.g.Lease.Mode != lock.Shared || got.g.Lease.Token <= a.Token {
				t.Fatalf("reader's grant = %+v", got.g)
			}
		}
		if st := Inspect(t, s, name); st.Kind != lock.KindShared || len(st.Holders) != 3 || st.Queue != 0 {
			t.Fatalf("state = %+v", st)
		}
	}},
	// A release that ended a shared lease or a permit is answered again when
	// retried, and touches nothing.
	{"Release_retry_of_an_ended_shared_lease_or_permit", func(t *testing.T, backend Backend) {
		backend.require(t, semaphores)
		s := backend.Open(t)
		for _, c := range []struct {
			name string
			req  lock.AcquireRequest
		}{
			{"retry:shared", lock.AcquireRequest{Mode: lock.Shared}},
			{"retry:permit", lock.AcquireRequest{Limit: 2}},
		} {
			req := c.req
			req.Lock, req.Owner = c.name, "a"
			a := tryAcquire(t, s, req).Lease
			req.Owner = "b"
			b := tryAcquire(t, s, req).Lease
			for i := 0; i < 2; i++ {
				res, err := s.Release(ctx, lock.LeaseRef{Lock: c.name, ID: a.ID}, false)
				if err != nil || !res.Released || res.HoldCount != 0 || res.Retried != (i == 1) {
					t.Fatalf("%s: release #%d = %+v, %v", c.name, i+1, res, err)
				}
			}
			before := Inspect(t, s, c.name)
			if res, err := s.Release(ctx, lock.LeaseRef{Lock: c.name, ID: a.ID}, true); err != nil || !res.Retried {
				t.Fatalf("%s: retry with all = %+v, %v", c.name, res, err)
			}
			after := Inspect(t, s, c.name)
			if after.Index != before.Index {
				t.Fatalf("%s: a retried release changed the lock", c.name)
			}
			wantHolders(t, backend, after, b)
		}
	}},

	// --- Semaphores ---

	// "limit": N grants N permits, each a lease of its own; the next acquire
	// is refused with the permit that ends first.
	{"Semaphore_grants_its_limit", func(t *testing.T, backend Backend) {
		backend.require(t, semaphores)
		s := backend.Open(t)
		const name = "sem:limit"
		var permits []lock.Lease
		for i, ttl := range []time.Duration{time.Minute, 20 * time.Second, 2 * time.Minute} {
			g := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: fmt.Sprint("p", i), Limit: 3, TTL: ttl})
			l := g.Lease
			if !g.Fresh || l.Limit != 3 || l.Mode != lock.Exclusive || l.HoldCount != 1 || l.TTL != ttl {
				t.Fatalf("permit #%d = %+v", i, g)
			}
			for _, prev := range permits {
				if l.ID == prev.ID || l.Token <= prev.Token {
					t.Fatalf("permit %+v after %+v: ids must differ and tokens rise", l, prev)
				}
			}
			permits = append(permits, l)
		}
		st := Inspect(t, s, name)
		if !st.Held || st.Kind != lock.KindSemaphore || st.Limit != 3 || st.Holder != nil || st.Queue != 0 || st.LastToken != permits[2].Token {
			t.Fatalf("state = %+v", st)
		}
		wantHolders(t, backend, st, permits...)

		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "p3", Limit: 3, TTL: time.Minute})
		hb := refusal(t, err)
		if hb.Owner != "p1" || hb.Token != permits[1].Token || hb.ExpiresIn <= 0 || hb.ExpiresIn > 20*time.Second || hb.Queue != 0 || hb.Queued {
			t.Fatalf("the 4th acquire was refused with %+v, want the permit that ends first (p1)", hb)
		}
		if after := Inspect(t, s, name); after.Index != st.Index {
			t.Fatal("a refused acquire changed the semaphore")
		}

		renewed, err := s.Renew(ctx, lock.LeaseRef{Lock: name, ID: permits[1].ID}, time.Hour)
		if err != nil || renewed.ID != permits[1].ID || renewed.Limit != 3 || renewed.TTL != time.Hour {
			t.Fatalf("renew of a permit = %+v, %v", renewed, err)
		}
		permits[1] = renewed
		wantHolders(t, backend, Inspect(t, s, name), permits...)
		if res := release(t, s, name, permits[0].ID, false); !res.Released || res.HoldCount != 0 {
			t.Fatalf("release of a permit = %+v", res)
		}
		g := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "p3", Limit: 3})
		if g.Lease.Token <= permits[2].Token {
			t.Fatalf("a released permit's successor = %+v", g)
		}
		wantHolders(t, backend, Inspect(t, s, name), permits[1], permits[2], g.Lease)
	}},
	// The same owner acquiring twice holds two permits, not two holds.
	{"Semaphore_permits_are_not_reentrant", func(t *testing.T, backend Backend) {
		backend.require(t, semaphores)
		s := backend.Open(t)
		const name = "sem:same"
		a1 := permit(t, s, name, "a", 2, time.Minute)
		a2 := permit(t, s, name, "a", 2, time.Minute)
		if a2.ID == a1.ID || a2.Token <= a1.Token || a2.HoldCount != 1 {
			t.Fatalf("second permit of the same owner = %+v, first %+v", a2, a1)
		}
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "a", Limit: 2, TTL: time.Minute})
		refusal(t, err)
		wantHolders(t, backend, Inspect(t, s, name), a1, a2)
		if res := release(t, s, name, a1.ID, false); !res.Released || res.HoldCount != 0 {
			t.Fatalf("release of one of the owner's permits = %+v", res)
		}
		wantHolders(t, backend, Inspect(t, s, name), a2)
	}},
	// Every acquire of a held semaphore gives its limit; a lock takes none.
	{"Limit_mismatch", func(t *testing.T, backend Backend) {
		backend.require(t, semaphores)
		s := backend.Open(t)
		mismatch := func(t *testing.T, name string, reqs ...lock.AcquireRequest) {
			t.Helper()
			before := Inspect(t, s, name)
			for _, req := range reqs {
				req.Lock, req.TTL = name, time.Minute
				_, err := s.TryAcquire(ctx, req)
				if lock.ErrorCode(err) != lock.CodeLimitMismatch {
					t.Fatalf("%+v on %s: %v, want %s", req, name, err, lock.CodeLimitMismatch)
				}
			}
			if after := Inspect(t, s, name); after.Index != before.Index {
				t.Fatalf("a limit mismatch changed %s", name)
			}
		}
		t.Run("held_semaphore", func(t *testing.T) {
			const name = "lim:sem"
			p := permit(t, s, name, "p", 3, time.Minute)
			mismatch(t, name,
				lock.AcquireRequest{Owner: "q", Limit: 4},
				lock.AcquireRequest{Owner: "p", Limit: 2},
				lock.AcquireRequest{Owner: "q"},
				lock.AcquireRequest{Owner: "p"},
				lock.AcquireRequest{Owner: "q", Mode: lock.Exclusive},
				lock.AcquireRequest{Owner: "q", Mode: lock.Shared},
			)
			permit(t, s, name, "q", 3, time.Minute)
			permit(t, s, name, "r", 3, time.Minute)
			// Full, and still a mismatch first (rule 4 before rule 7).
			mismatch(t, name, lock.AcquireRequest{Owner: "s", Limit: 5}, lock.AcquireRequest{Owner: "s"})
			release(t, s, name, p.ID, false)
		})
		t.Run("held_lock", func(t *testing.T) {
			Acquire(t, s, "lim:lock", "a", time.Minute)
			mismatch(t, "lim:lock", lock.AcquireRequest{Owner: "b", Limit: 2}, lock.AcquireRequest{Owner: "a", Limit: 2})
		})
		t.Run("held_shared", func(t *testing.T) {
			shared(t, s, "lim:shared", "r", time.Minute)
			mismatch(t, "lim:shared", lock.AcquireRequest{Owner: "x", Limit: 1}, lock.AcquireRequest{Owner: "r", Limit: 1})
		})
	}},
	// The limit is fixed while any permit is held and forgotten when none is,
	// whether the last permit was released or expired.
	{"Limit_is_forgotten_when_no_permit_is_held", func(t *testing.T, backend Backend) {
		backend.require(t, semaphores)
		s := backend.Open(t)
		const name = "lim:forget"
		p := permit(t, s, name, "p", 2, time.Minute)
		release(t, s, name, p.ID, false)
		if st := Inspect(t, s, name); st.Held || st.Limit != 0 || st.Kind != "" {
			t.Fatalf("state of a semaphore without permits = %+v", st)
		}
		l := Acquire(t, s, name, "a", time.Minute)
		if st := Inspect(t, s, name); st.Kind != lock.KindExclusive || st.Limit != 0 || l.Limit != 0 {
			t.Fatalf("the name as a lock after its permits = %+v, lease %+v", st, l)
		}
		release(t, s, name, l.ID, false)
		permit(t, s, name, "p", 5, 200*time.Millisecond)
		if st := Inspect(t, s, name); st.Kind != lock.KindSemaphore || st.Limit != 5 {
			t.Fatalf("state with a new limit = %+v", st)
		}
		time.Sleep(300 * time.Millisecond) // the only permit expires
		g := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "r", Mode: lock.Shared})
		if st := Inspect(t, s, name); st.Kind != lock.KindShared || st.Limit != 0 || g.Lease.Limit != 0 {
			t.Fatalf("the name read-locked after its last permit expired = %+v", st)
		}
	}},
	// A permit whose holder died comes back when its TTL ends: a waiter gets
	// it on its own timer, and the dead holder's lease is lost.
	{"Expired_permit_comes_back", func(t *testing.T, backend Backend) {
		backend.require(t, semaphores)
		s := backend.Open(t)
		const name = "sem:expire"
		// Timed from before the grant: the TTL runs from when the store
		// granted it, which may be well before the answer arrives.
		start := time.Now()
		dead := permit(t, s, name, "dead", 2, 200*time.Millisecond)
		alive := permit(t, s, name, "alive", 2, 5*time.Minute)
		g, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: name, Owner: "c", Limit: 2, TTL: time.Minute}, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited < 150*time.Millisecond || waited > 3*time.Second {
			t.Fatalf("the permit came back after %v; its TTL was 200ms", waited)
		}
		if g.Lease.Token <= alive.Token || g.Lease.Limit != 2 {
			t.Fatalf("the returned permit's grant = %+v", g)
		}
		_, err = s.Release(ctx, lock.LeaseRef{Lock: name, ID: dead.ID}, false)
		WantCode(t, err, lock.CodeLeaseLost)
		_, err = s.Renew(ctx, lock.LeaseRef{Lock: name, ID: dead.ID}, time.Hour)
		WantCode(t, err, lock.CodeLeaseLost)
		wantHolders(t, backend, Inspect(t, s, name), alive, g.Lease)
	}},
	// A released permit wakes a waiter (one per permit), through a notice:
	// the permits' TTLs are five minutes.
	{"Released_permit_wakes_a_waiter", func(t *testing.T, backend Backend) {
		backend.require(t, semaphores)
		s := Watch(backend.Open(t))
		const name = "sem:wake"
		p1 := permit(t, s, name, "p1", 2, 5*time.Minute)
		p2 := permit(t, s, name, "p2", 2, 5*time.Minute)
		waiters := merge(
			startWait(t, s, lock.AcquireRequest{Lock: name, Owner: "w1", Limit: 2}, 20*time.Second),
			startWait(t, s, lock.AcquireRequest{Lock: name, Owner: "w2", Limit: 2}, 20*time.Second),
		)
		WaitForWaiters(t, s, 2)
		release(t, s, name, p1.ID, false)
		first := wantGranted(t, waiters, 5*time.Second)
		wantWaiting(t, waiters, 300*time.Millisecond) // one permit, one grant
		release(t, s, name, p2.ID, false)
		second := wantGranted(t, waiters, 5*time.Second)
		if first.g.Lease.Owner == second.g.Lease.Owner || first.g.Lease.Token <= p2.Token || second.g.Lease.Token <= first.g.Lease.Token {
			t.Fatalf("grants %+v then %+v", first.g.Lease, second.g.Lease)
		}
	}},
	// A permit renewed to a shorter TTL is waited out at its new expiry: the
	// renewal's notice moves the waiters' timers, as for a lock.
	{"Waiter_sees_a_shortened_permit", func(t *testing.T, backend Backend) {
		backend.require(t, semaphores)
		s := Watch(backend.Open(t))
		const name = "sem:short"
		p := permit(t, s, name, "p", 1, 30*time.Second)
		w := startWait(t, s, lock.AcquireRequest{Lock: name, Owner: "w", Limit: 1}, 20*time.Second)
		WaitForWaiters(t, s, 1)
		time.Sleep(50 * time.Millisecond) // let w make its try and time the 30s expiry
		renewed := time.Now()
		if _, err := s.Renew(ctx, lock.LeaseRef{Lock: name, ID: p.ID}, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		got := wantGranted(t, w, 5*time.Second)
		t.Logf("granted %v after the renewal to 100ms", got.at.Sub(renewed))
		if got.g.Lease.Token <= p.Token {
			t.Fatalf("grant = %+v", got.g)
		}
	}},
	// A store takes requests as valid (lock.AcquireRequest.Validate is its
	// caller's, TestValidate_kinds in internal/lock): limit 0 is no limit,
	// MaxLimit the largest semaphore.
	{"Limits_at_the_edges", func(t *testing.T, backend Backend) {
		backend.require(t, semaphores)
		s := backend.Open(t)
		if g := tryAcquire(t, s, lock.AcquireRequest{Lock: "v:zero", Owner: "a", Limit: 0, Mode: lock.Exclusive}); g.Lease.Limit != 0 || Inspect(t, s, "v:zero").Kind != lock.KindExclusive {
			t.Fatalf("limit 0 = %+v", g)
		}
		if g := tryAcquire(t, s, lock.AcquireRequest{Lock: "v:max", Owner: "a", Limit: lock.MaxLimit, Mode: lock.Exclusive}); g.Lease.Limit != lock.MaxLimit || Inspect(t, s, "v:max").Limit != lock.MaxLimit {
			t.Fatalf("limit %d = %+v", lock.MaxLimit, g)
		}
	}},

	// --- Every kind ---

	// Every fresh grant, whatever its mode, has a token larger than every
	// earlier grant of the name; re-entry keeps its lease's token.
	{"Tokens_rise_across_modes", func(t *testing.T, backend Backend) {
		backend.require(t, semaphores)
		s := backend.Open(t)
		const name = "tok:modes"
		var last uint64
		fresh := func(req lock.AcquireRequest) lock.Lease {
			t.Helper()
			req.Lock = name
			g := tryAcquire(t, s, req)
			if !g.Fresh || g.Lease.Token <= last || g.Lease.Token > fencetoken.MaxToken {
				t.Fatalf("%+v: grant %+v after token %d", req, g, last)
			}
			last = g.Lease.Token
			return g.Lease
		}
		for round := 0; round < 20; round++ {
			e := fresh(lock.AcquireRequest{Owner: "w"})
			down := fresh(lock.AcquireRequest{Owner: "w", Mode: lock.Shared})
			release(t, s, name, e.ID, false)
			r := fresh(lock.AcquireRequest{Owner: "r", Mode: lock.Shared})
			if g := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "r", Mode: lock.Shared}); g.Lease.Token != r.Token {
				t.Fatalf("shared re-entry changed the token: %+v", g)
			}
			release(t, s, name, down.ID, false)
			release(t, s, name, r.ID, true)
			p1 := fresh(lock.AcquireRequest{Owner: "p", Limit: 2})
			p2 := fresh(lock.AcquireRequest{Owner: "p", Limit: 2})
			release(t, s, name, p1.ID, false)
			p3 := fresh(lock.AcquireRequest{Owner: "q", Limit: 2})
			release(t, s, name, p2.ID, false)
			release(t, s, name, p3.ID, false)
		}
		if st := Inspect(t, s, name); st.Held || st.LastToken != last {
			t.Fatalf("state = %+v, last token %d", st, last)
		}
	}},
	// An Idempotency-Key makes a retry safe for shared leases and permits
	// too: the replay answers the lease as it is, adding nothing (for a
	// semaphore, that is what stops a retry from taking a second permit).
	{"Idempotency_key_replays_shared_leases_and_permits", func(t *testing.T, backend Backend) {
		backend.require(t, semaphores)
		s := backend.Open(t)
		t.Run("shared", func(t *testing.T) {
			const name = "idem:shared"
			req := lock.AcquireRequest{Lock: name, Owner: "r", Mode: lock.Shared, IdempotencyKey: "k1"}
			first := tryAcquire(t, s, req)
			again := tryAcquire(t, s, req)
			if !again.Replayed || again.Lease.ID != first.Lease.ID || again.Lease.Token != first.Lease.Token || again.Lease.HoldCount != 1 || again.Lease.Mode != lock.Shared {
				t.Fatalf("replay = %+v, first %+v", again, first)
			}
			if st := Inspect(t, s, name); len(st.Holders) != 1 || st.Holders[0].HoldCount != 1 {
				t.Fatalf("holders after a replay = %+v", st.Holders)
			}
			if g := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "r", Mode: lock.Shared, IdempotencyKey: "k2"}); g.Replayed || g.Lease.ID != first.Lease.ID || g.Lease.HoldCount != 2 {
				t.Fatalf("acquire with another key = %+v", g)
			}
			if g := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "x", Mode: lock.Shared, IdempotencyKey: "k2"}); g.Replayed || !g.Fresh || g.Lease.ID == first.Lease.ID {
				t.Fatalf("another owner's acquire with the key = %+v", g)
			}
		})
		t.Run("permit", func(t *testing.T) {
			const name = "idem:sem"
			req := lock.AcquireRequest{Lock: name, Owner: "p", Limit: 3, IdempotencyKey: "k"}
			first := tryAcquire(t, s, req)
			again := tryAcquire(t, s, req)
			if !again.Replayed || again.Lease.ID != first.Lease.ID || again.Lease.Token != first.Lease.Token || again.Lease.Limit != 3 {
				t.Fatalf("replay = %+v, first %+v", again, first)
			}
			wantHolders(t, backend, Inspect(t, s, name), first.Lease)
			second := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "p", Limit: 3})
			third := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "p", Limit: 3, IdempotencyKey: "k2"})
			if second.Replayed || third.Replayed || !second.Fresh || !third.Fresh {
				t.Fatalf("new permits = %+v, %+v", second, third)
			}
			// All permits held: a replay still answers (rule 3 before 7).
			if r := tryAcquire(t, s, req); !r.Replayed || r.Lease.ID != first.Lease.ID {
				t.Fatalf("replay of a full semaphore = %+v", r)
			}
			_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "other", Limit: 3, IdempotencyKey: "k", TTL: time.Minute})
			refusal(t, err)
			wantHolders(t, backend, Inspect(t, s, name), first.Lease, second.Lease, third.Lease)
			// Once its permit is gone, the key takes a new one.
			release(t, s, name, first.Lease.ID, false)
			if g := tryAcquire(t, s, req); g.Replayed || !g.Fresh || g.Lease.Token <= third.Lease.Token {
				t.Fatalf("the key after its permit ended = %+v", g)
			}
		})
	}},
	// Abandon undoes exactly the hold of the acquire it names, in every mode:
	// a shared hold, a whole permit, a downgrade's shared lease.
	{"Abandon_drops_exactly_its_shared_hold_or_permit", func(t *testing.T, backend Backend) {
		backend.require(t, semaphores)
		s := backend.Open(t)
		t.Run("shared", func(t *testing.T) {
			const name = "ab:shared"
			g1 := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "a", Mode: lock.Shared})
			g2 := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "a", Mode: lock.Shared})
			b := shared(t, s, name, "b", time.Minute)
			if g2.RequestID == g1.RequestID || g2.RequestID == g2.Lease.ID {
				t.Fatalf("request ids: fresh %q, reentrant %q (lease %q)", g1.RequestID, g2.RequestID, g2.Lease.ID)
			}
			abandon(t, s, name, g2.RequestID)
			abandon(t, s, name, g2.RequestID)
			if h := holderOf(t, Inspect(t, s, name), g1.Lease.Token); h.HoldCount != 1 {
				t.Fatalf("a's holds after abandoning its re-entry (twice) = %d, want 1", h.HoldCount)
			}
			abandon(t, s, name, g1.RequestID)
			wantHolders(t, backend, Inspect(t, s, name), b)
		})
		t.Run("permit", func(t *testing.T) {
			const name = "ab:sem"
			p1 := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "a", Limit: 3})
			p2 := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "a", Limit: 3})
			abandon(t, s, name, p2.RequestID)
			abandon(t, s, name, p2.RequestID)
			wantHolders(t, backend, Inspect(t, s, name), p1.Lease)
			// A grant a replay claimed is left alone.
			req := lock.AcquireRequest{Lock: name, Owner: "a", Limit: 3, IdempotencyKey: "k"}
			p3 := tryAcquire(t, s, req)
			if r := tryAcquire(t, s, req); !r.Replayed {
				t.Fatalf("not a replay: %+v", r)
			}
			abandon(t, s, name, p3.RequestID)
			wantHolders(t, backend, Inspect(t, s, name), p1.Lease, p3.Lease)
		})
		t.Run("downgrade", func(t *testing.T) {
			const name = "ab:down"
			e := Acquire(t, s, name, "a", time.Minute)
			sh := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "a", Mode: lock.Shared})
			abandon(t, s, name, sh.RequestID)
			st := Inspect(t, s, name)
			if st.Kind != lock.KindExclusive || st.Holder == nil || st.Holder.HoldCount != 1 {
				t.Fatalf("state after abandoning the downgrade = %+v", st)
			}
			wantHolders(t, backend, st, e)
		})
	}},
	// Force-release ends every lease of the name, of every kind; the queue is
	// left alone.
	{"ForceRelease_ends_every_lease_of_the_name", func(t *testing.T, backend Backend) {
		backend.require(t, semaphores)
		s := backend.Open(t)
		force := func(t *testing.T, name string, leases ...lock.Lease) {
			t.Helper()
			freed, err := s.ForceRelease(ctx, name, "admin")
			if err != nil || !freed {
				t.Fatalf("force release of %s = %v, %v", name, freed, err)
			}
			if st := Inspect(t, s, name); st.Held || st.Kind != "" || st.Holder != nil || len(st.Holders) != 0 {
				t.Fatalf("state after force release = %+v", st)
			}
			for _, l := range leases {
				_, err := s.Renew(ctx, lock.LeaseRef{Lock: name, ID: l.ID}, time.Hour)
				WantCode(t, err, lock.CodeLeaseLost)
				_, err = s.Release(ctx, lock.LeaseRef{Lock: name, ID: l.ID}, false)
				WantCode(t, err, lock.CodeLeaseLost)
			}
			if freed, err := s.ForceRelease(ctx, name, "admin"); err != nil || freed {
				t.Fatalf("force release of a free lock = %v, %v", freed, err)
			}
		}
		t.Run("shared", func(t *testing.T) {
			r1 := shared(t, s, "force:shared", "r1", time.Minute)
			r2 := shared(t, s, "force:shared", "r2", time.Minute)
			force(t, "force:shared", r1, r2)
			if w := Acquire(t, s, "force:shared", "w", time.Minute); w.Token <= r2.Token {
				t.Fatalf("token %d after %d", w.Token, r2.Token)
			}
		})
		t.Run("semaphore", func(t *testing.T) {
			p1 := permit(t, s, "force:sem", "p1", 2, time.Minute)
			p2 := permit(t, s, "force:sem", "p2", 2, time.Minute)
			force(t, "force:sem", p1, p2)
			permit(t, s, "force:sem", "p3", 3, time.Minute) // the limit went with the permits
		})
		t.Run("downgrade", func(t *testing.T) {
			e := Acquire(t, s, "force:down", "a", time.Minute)
			sh := tryAcquire(t, s, lock.AcquireRequest{Lock: "force:down", Owner: "a", Mode: lock.Shared}).Lease
			force(t, "force:down", e, sh)
		})
		t.Run("queue_left_alone", func(t *testing.T) {
			const name = "force:queue"
			Acquire(t, s, name, "a", time.Minute)
			joinQueue(t, s, lock.AcquireRequest{Lock: name, Owner: "p", Fair: true})
			force(t, name)
			if st := Inspect(t, s, name); st.Queue != 1 {
				t.Fatalf("queue after force release = %d, want 1", st.Queue)
			}
			_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "b", TTL: time.Minute})
			if hb := refusal(t, err); hb.Owner != "" || hb.Queue != 1 {
				t.Fatalf("acquire behind the kept queue refused with %+v", hb)
			}
		})
	}},
	// List shows every held name, however it is held.
	{"List_shows_shared_locks_and_semaphores", func(t *testing.T, backend Backend) {
		backend.require(t, semaphores)
		s := backend.Open(t)
		Acquire(t, s, "kl:excl", "w", time.Minute)
		shared(t, s, "kl:shared", "r1", time.Minute)
		shared(t, s, "kl:shared", "r2", time.Minute)
		permit(t, s, "kl:sem", "p1", 2, time.Minute)
		permit(t, s, "kl:sem", "p2", 2, time.Minute)
		gone := shared(t, s, "kl:gone", "r", time.Minute)
		release(t, s, "kl:gone", gone.ID, false)
		want := map[string]struct {
			kind    lock.Kind
			holders int
			limit   int
		}{
			"kl:excl":   {lock.KindExclusive, 1, 0},
			"kl:shared": {lock.KindShared, 2, 0},
			"kl:sem":    {lock.KindSemaphore, 2, 2},
		}
		seen := map[string]bool{}
		for _, st := range listAll(t, s, lock.ListRequest{Prefix: "kl:", Limit: 10}) {
			w, ok := want[st.Lock]
			if !ok || !st.Held || st.Kind != w.kind || len(st.Holders) != w.holders || st.Limit != w.limit || (st.Holder != nil) != (w.kind == lock.KindExclusive) {
				t.Fatalf("listed %+v", st)
			}
			seen[st.Lock] = true
		}
		if len(seen) != len(want) {
			t.Fatalf("listed %v, want %d names", sortedKeys(seen), len(want))
		}
	}},
	// A change watcher sees every change of every kind: grants, re-entries,
	// renewals and releases of shared leases and permits, and a Leave.
	{"Watch_sees_changes_of_every_kind", func(t *testing.T, backend Backend) {
		backend.require(t, semaphores)
		s := backend.Open(t)
		const name = "watch:kinds"
		w, err := s.Watch(ctx, name, lock.WatchChanges)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		step := func(what string, do func()) {
			t.Helper()
			select { // a notice of the step before, if it sent two
			case <-w.C():
			default:
			}
			do()
			select {
			case <-w.C():
			case <-time.After(5 * time.Second):
				t.Fatalf("no change notice after %s", what)
			}
		}
		var r1, r2, p lock.Lease
		step("a shared grant", func() { r1 = shared(t, s, name, "r1", time.Minute) })
		step("a second shared grant", func() { r2 = shared(t, s, name, "r2", time.Minute) })
		step("a shared re-entry", func() { shared(t, s, name, "r1", time.Minute) })
		step("a shared renewal", func() {
			if _, err := s.Renew(ctx, lock.LeaseRef{Lock: name, ID: r2.ID}, time.Hour); err != nil {
				t.Fatal(err)
			}
		})
		step("a dropped shared hold", func() { release(t, s, name, r1.ID, false) })
		step("an ended shared lease", func() { release(t, s, name, r1.ID, false) })
		step("the last shared lease's release", func() { release(t, s, name, r2.ID, false) })
		step("a permit", func() { p = permit(t, s, name, "p", 2, time.Minute) })
		step("a permit's release", func() { release(t, s, name, p.ID, false) })
		a := Acquire(t, s, name, "a", time.Minute)
		id := joinQueue(t, s, lock.AcquireRequest{Lock: name, Owner: "q", Fair: true})
		step("a Leave of the queue's head", func() {
			if err := s.Leave(ctx, name, id); err != nil {
				t.Fatal(err)
			}
		})
		step("a release", func() { release(t, s, name, a.ID, false) })
	}},

	// --- Fair queues ---

	// Fair waiters are granted in arrival order.
	{"Fair_waiters_are_granted_in_arrival_order", func(t *testing.T, backend Backend) {
		backend.require(t, fairLocks)
		s := backend.Open(t)
		const name = "fair:fifo"
		a := Acquire(t, s, name, "a", 5*time.Minute)
		var chans []<-chan waited
		for i := 0; i < 4; i++ {
			chans = append(chans, startWait(t, s, lock.AcquireRequest{Lock: name, Owner: fmt.Sprint("w", i), Fair: true}, 20*time.Second))
			waitQueue(t, s, name, i+1) // w<i> holds its place before the next arrives
		}
		grants := merge(chans...)
		release(t, s, name, a.ID, false)
		last := a.Token
		for i := 0; i < 4; i++ {
			got := wantGranted(t, grants, 5*time.Second)
			l := got.g.Lease
			if l.Owner != fmt.Sprint("w", i) || l.Token <= last {
				t.Fatalf("grant #%d went to %s (token %d after %d), want w%d", i, l.Owner, l.Token, last, i)
			}
			last = l.Token
			release(t, s, name, l.ID, false)
		}
		if st := Inspect(t, s, name); st.Held || st.Queue != 0 {
			t.Fatalf("state after every waiter = %+v", st)
		}
	}},
	// While the queue is not empty only its head is granted: every other
	// acquire is refused, even of a free lock, with no holder named; the
	// refusal's ExpiresIn is bounded by the head's place.
	{"Queue_holds_off_every_other_acquire", func(t *testing.T, backend Backend) {
		backend.require(t, queues)
		s := backend.Open(t)
		const name = "fair:holdoff"
		a := Acquire(t, s, name, "a", time.Minute)
		head := lock.AcquireRequest{Lock: name, Owner: "p", Fair: true, TTL: time.Minute}
		head.WaiterID = joinQueue(t, s, head)
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "b", TTL: time.Minute})
		if hb := refusal(t, err); hb.Owner != "a" || hb.Token != a.Token || hb.Queue != 1 || hb.ExpiresIn <= 0 || hb.ExpiresIn > lock.QueueEntryTTL {
			t.Fatalf("refusal while held and queued = %+v, want a, and the head's place as ExpiresIn", hb)
		}
		// The head itself is timed by the lease in its way, not its own place.
		_, err = s.TryAcquire(ctx, head)
		if hb := refusal(t, err); hb.Owner != "a" || !hb.Queued || hb.Queue != 1 || hb.ExpiresIn <= 50*time.Second || hb.ExpiresIn > time.Minute {
			t.Fatalf("the head's own refusal = %+v, want a's remaining TTL as ExpiresIn", hb)
		}
		release(t, s, name, a.ID, false)
		before := Inspect(t, s, name)
		if before.Held || before.Queue != 1 {
			t.Fatalf("state = %+v", before)
		}
		for _, req := range []lock.AcquireRequest{
			{Owner: "b"},
			{Owner: "b", Mode: lock.Shared},
			{Owner: "b", Fair: true},
			{Owner: "b", Limit: 2},
			{Owner: "b", WaiterID: lock.NewWaiterID(lock.AcquireRequest{})}, // a plain waiter: does not join
		} {
			req.Lock, req.TTL = name, time.Minute
			_, err := s.TryAcquire(ctx, req)
			if hb := refusal(t, err); hb.Owner != "" || hb.Queue != 1 || hb.Queued || hb.ExpiresIn <= 0 || hb.ExpiresIn > lock.QueueEntryTTL {
				t.Fatalf("%+v on a free lock with a queue: refused with %+v", req, hb)
			}
		}
		if after := Inspect(t, s, name); after.Index != before.Index || after.Queue != 1 {
			t.Fatalf("refused acquires changed the lock: %+v", after)
		}
		g := tryAcquire(t, s, head)
		if !g.Fresh || g.Lease.Owner != "p" {
			t.Fatalf("the head's grant = %+v", g)
		}
		if st := Inspect(t, s, name); st.Queue != 0 || st.Holder == nil || st.Holder.Owner != "p" {
			t.Fatalf("a grant must take its place out of the queue: %+v", st)
		}
	}},
	// Rule 9: who takes a place when refused. Fair waiters do; so does an
	// exclusive waiter refused because of another owner's shared lease;
	// other waiters wait outside the queue.
	{"Who_joins_the_queue", func(t *testing.T, backend Backend) {
		backend.require(t, queues)
		s := backend.Open(t)
		try := func(t *testing.T, req lock.AcquireRequest) lock.HeldBy {
			t.Helper()
			req.TTL = time.Minute
			req.WaiterID = lock.NewWaiterID(req)
			_, err := s.TryAcquire(ctx, req)
			return refusal(t, err)
		}
		t.Run("held_exclusive", func(t *testing.T) {
			const name = "join:excl"
			Acquire(t, s, name, "a", 5*time.Minute)
			for i, c := range []struct {
				req    lock.AcquireRequest
				queued bool
				queue  int
			}{
				{lock.AcquireRequest{Owner: "b"}, false, 0},
				{lock.AcquireRequest{Owner: "c", Mode: lock.Shared}, false, 0},
				{lock.AcquireRequest{Owner: "d", Fair: true}, true, 1},
				{lock.AcquireRequest{Owner: "e", Mode: lock.Shared, Fair: true}, true, 2},
				{lock.AcquireRequest{Owner: "f"}, false, 2},
			} {
				c.req.Lock = name
				if hb := try(t, c.req); hb.Queued != c.queued || hb.Queue != c.queue || hb.Owner != "a" {
					t.Fatalf("#%d %+v refused with %+v, want queued %v, queue %d", i, c.req, hb, c.queued, c.queue)
				}
			}
			if st := Inspect(t, s, name); st.Queue != 2 {
				t.Fatalf("queue = %d, want 2", st.Queue)
			}
		})
		t.Run("held_shared", func(t *testing.T) {
			const name = "join:shared"
			shared(t, s, name, "r", 5*time.Minute)
			if hb := try(t, lock.AcquireRequest{Lock: name, Owner: "w"}); !hb.Queued || hb.Queue != 1 || hb.Owner != "r" {
				t.Fatalf("a writer held off by a reader was refused with %+v, want a place", hb)
			}
			if hb := try(t, lock.AcquireRequest{Lock: name, Owner: "r2", Mode: lock.Shared}); hb.Queued || hb.Queue != 1 {
				t.Fatalf("a reader behind the queued writer was refused with %+v, want no place", hb)
			}
		})
		t.Run("semaphore", func(t *testing.T) {
			const name = "join:sem"
			permit(t, s, name, "p", 1, 5*time.Minute)
			if hb := try(t, lock.AcquireRequest{Lock: name, Owner: "q", Limit: 1}); hb.Queued || hb.Queue != 0 || hb.Owner != "p" {
				t.Fatalf("a plain permit waiter was refused with %+v", hb)
			}
			if hb := try(t, lock.AcquireRequest{Lock: name, Owner: "q", Limit: 1, Fair: true}); !hb.Queued || hb.Queue != 1 {
				t.Fatalf("a fair permit waiter was refused with %+v", hb)
			}
		})
	}},
	// Rule 10: a refusal tells when to look again, which a queued head's
	// renewal deadline may make sooner than the lease in the way ends, and
	// apart from it the holder's own expiry, which no queue shortens
	// (lock-held's holder.expires_in_ms).
	{"Held_by_reports_the_holders_expiry_behind_a_queue", func(t *testing.T, backend Backend) {
		backend.require(t, fairLocks)
		s := backend.Open(t)
		const name = "held:queue"
		Acquire(t, s, name, "h", 30*time.Second)
		joinQueue(t, s, lock.AcquireRequest{Lock: name, Owner: "q", Fair: true})
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "b", TTL: time.Minute})
		hb := refusal(t, err)
		if hb.Owner != "h" || hb.Queue != 1 {
			t.Fatalf("refused with %+v, want h in the way and 1 queued", hb)
		}
		if hb.LeaseExpiresIn < 20*time.Second || hb.LeaseExpiresIn > 30*time.Second {
			t.Errorf("holder's lease expires in %v, want about 30s (refused with %+v)", hb.LeaseExpiresIn, hb)
		}
		if hb.ExpiresIn <= 0 || hb.ExpiresIn > lock.QueueEntryTTL {
			t.Errorf("look again in %v, want within the queue head's renewal deadline %v", hb.ExpiresIn, lock.QueueEntryTTL)
		}
	}},
	// A waiter that has a place keeps it when refused again, until it is
	// granted. A plain exclusive entry holds off only shared acquires, so a
	// plain exclusive try may pass it (rule 8; only fair waiting promises
	// order).
	{"Queue_place_is_kept_until_granted", func(t *testing.T, backend Backend) {
		backend.require(t, queues)
		s := backend.Open(t)
		const name = "fair:keep"
		r := shared(t, s, name, "r", 5*time.Minute)
		wreq := lock.AcquireRequest{Lock: name, Owner: "w", TTL: time.Minute}
		wreq.WaiterID = lock.NewWaiterID(wreq)
		_, err := s.TryAcquire(ctx, wreq)
		if hb := refusal(t, err); !hb.Queued || hb.Queue != 1 {
			t.Fatalf("writer refused with %+v", hb)
		}
		release(t, s, name, r.ID, false)
		b := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "b"})
		_, err = s.TryAcquire(ctx, wreq)
		if hb := refusal(t, err); !hb.Queued || hb.Queue != 1 || hb.Owner != "b" {
			t.Fatalf("the queued writer's next try refused with %+v, want its place kept", hb)
		}
		release(t, s, name, b.Lease.ID, false)
		if g := tryAcquire(t, s, wreq); !g.Fresh || g.Lease.Owner != "w" {
			t.Fatalf("the writer's grant = %+v", g)
		}
		if st := Inspect(t, s, name); st.Queue != 0 {
			t.Fatalf("queue after the grant = %d", st.Queue)
		}
	}},
	// A queue place that is not renewed lapses after QueueEntryTTL: the next
	// waiter, renewing, finds itself at the head soon after; a plain waiter
	// the dead place held off looks again when it would lapse (its refusal's
	// ExpiresIn); and Inspect no longer counts the dead place.
	{"Unrenewed_queue_place_lapses", func(t *testing.T, backend Backend) {
		backend.require(t, queues)
		s := backend.Open(t)
		const name, plain, counted = "fair:lapse", "fair:lapse-plain", "fair:lapse-count"
		a := Acquire(t, s, name, "a", 5*time.Minute)
		pa := Acquire(t, s, plain, "a", 5*time.Minute)
		Acquire(t, s, counted, "a", 5*time.Minute)
		joined := time.Now()
		var countedJoined time.Time
		for _, n := range []string{name, plain, counted} {
			joinQueue(t, s, lock.AcquireRequest{Lock: n, Owner: "dead", Fair: true})
			countedJoined = time.Now() // the last join's place is counted's
		}
		c := startWait(t, s, lock.AcquireRequest{Lock: name, Owner: "c", Fair: true}, 10*time.Second)
		waitQueue(t, s, name, 2)
		release(t, s, name, a.ID, false)
		release(t, s, plain, pa.ID, false)
		b := startWait(t, s, lock.AcquireRequest{Lock: plain, Owner: "b"}, 10*time.Second)
		for _, w := range []struct {
			who string
			c   <-chan waited
		}{{"the next fair waiter", c}, {"a plain waiter", b}} {
			got := wantGranted(t, w.c, 5*time.Second)
			after := got.at.Sub(joined)
			t.Logf("%s was granted %v after the dead place was taken", w.who, after)
			if after < lock.QueueEntryTTL-100*time.Millisecond || after > 2500*time.Millisecond {
				t.Fatalf("%s was granted %v after a dead waiter joined ahead; its place lasts %v", w.who, after, lock.QueueEntryTTL)
			}
		}
		// counted's place was taken last, up to a few ms after the others
		// on a loaded machine: look once it has surely lapsed too.
		time.Sleep(time.Until(countedJoined.Add(lock.QueueEntryTTL + 50*time.Millisecond)))
		if st := Inspect(t, s, counted); st.Queue != 0 {
			t.Fatalf("a lapsed place is still counted: queue = %d", st.Queue)
		}
	}},
	// Leave takes a place out at once and wakes whoever is next: the next
	// queued waiter, or (the queue now empty) a waiter the queue held off.
	{"Leave_takes_a_place_out_and_wakes_the_next", func(t *testing.T, backend Backend) {
		backend.require(t, queues)
		s := Watch(backend.Open(t))
		t.Run("next_in_queue", func(t *testing.T) {
			const name = "leave:fair"
			a := Acquire(t, s, name, "a", 5*time.Minute)
			head := joinQueue(t, s, lock.AcquireRequest{Lock: name, Owner: "p", Fair: true})
			c := startWait(t, s, lock.AcquireRequest{Lock: name, Owner: "c", Fair: true}, 10*time.Second)
			waitQueue(t, s, name, 2)
			release(t, s, name, a.ID, false)
			left := time.Now()
			if err := s.Leave(ctx, name, head); err != nil {
				t.Fatal(err)
			}
			got := wantGranted(t, c, 5*time.Second)
			t.Logf("Leave to the next waiter's grant: %v", got.at.Sub(left))
			if got.at.Sub(left) > 600*time.Millisecond {
				t.Fatalf("the next waiter was granted %v after the head left", got.at.Sub(left))
			}
		})
		t.Run("held_off_waiter", func(t *testing.T) {
			const name = "leave:plain"
			a := Acquire(t, s, name, "a", 5*time.Minute)
			head := joinQueue(t, s, lock.AcquireRequest{Lock: name, Owner: "p", Fair: true})
			release(t, s, name, a.ID, false)
			b := startWait(t, s, lock.AcquireRequest{Lock: name, Owner: "b"}, 10*time.Second)
			WaitForWaiters(t, s, 1)
			if st := Inspect(t, s, name); st.Queue != 1 {
				t.Fatalf("queue = %d: a plain waiter must not join", st.Queue)
			}
			left := time.Now()
			if err := s.Leave(ctx, name, head); err != nil {
				t.Fatal(err)
			}
			if st := Inspect(t, s, name); st.Queue != 0 {
				t.Fatalf("queue after Leave = %d", st.Queue)
			}
			// Without a notice b would look again only when the head's place
			// would have lapsed, about a second after it joined.
			got := wantGranted(t, b, 5*time.Second)
			t.Logf("Leave to the held-off waiter's grant: %v", got.at.Sub(left))
			if got.at.Sub(left) > 600*time.Millisecond {
				t.Fatalf("the held-off waiter was granted %v after the queue emptied", got.at.Sub(left))
			}
		})
		t.Run("never_queued", func(t *testing.T) {
			Acquire(t, s, "leave:none", "a", time.Minute)
			before := Inspect(t, s, "leave:none")
			for _, name := range []string{"leave:none", "leave:never-used"} {
				if err := s.Leave(ctx, name, lock.NewWaiterID(lock.AcquireRequest{Fair: true})); err != nil {
					t.Fatalf("Leave of a waiter that never queued on %s: %v", name, err)
				}
			}
			if after := Inspect(t, s, "leave:none"); after.Index != before.Index {
				t.Fatal("Leave of a stranger changed the lock")
			}
		})
	}},
	// A waiter whose wait ends, or whose caller leaves, gives its place up at
	// once rather than holding the queue up until it lapses.
	{"Waiter_that_gives_up_leaves_the_queue", func(t *testing.T, backend Backend) {
		backend.require(t, queues)
		s := backend.Open(t)
		t.Run("fair_timeout", func(t *testing.T) {
			const name = "giveup:fair"
			a := Acquire(t, s, name, "a", 5*time.Minute)
			_, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: name, Owner: "b", Fair: true, TTL: time.Minute}, 400*time.Millisecond)
			WantCode(t, err, lock.CodeHeld)
			if st := Inspect(t, s, name); st.Queue != 0 {
				t.Fatalf("queue after the waiter gave up = %d", st.Queue)
			}
			release(t, s, name, a.ID, false)
			Acquire(t, s, name, "c", time.Minute)
		})
		t.Run("fair_cancelled", func(t *testing.T) {
			const name = "giveup:cancel"
			a := Acquire(t, s, name, "a", 5*time.Minute)
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := lock.AcquireWait(cctx, s, lock.AcquireRequest{Lock: name, Owner: "b", Fair: true, TTL: time.Minute}, 20*time.Second)
				done <- err
			}()
			waitQueue(t, s, name, 1)
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled wait returned %v", err)
			}
			if st := Inspect(t, s, name); st.Queue != 0 {
				t.Fatalf("queue after the waiter was cancelled = %d", st.Queue)
			}
			release(t, s, name, a.ID, false)
			Acquire(t, s, name, "c", time.Minute)
		})
		t.Run("writer_timeout", func(t *testing.T) {
			const name = "giveup:writer"
			shared(t, s, name, "r", 5*time.Minute)
			_, err := lock.AcquireWait(ctx, s, lock.AcquireRequest{Lock: name, Owner: "w", TTL: time.Minute}, 400*time.Millisecond)
			WantCode(t, err, lock.CodeHeld)
			if st := Inspect(t, s, name); st.Queue != 0 {
				t.Fatalf("queue after the writer gave up = %d", st.Queue)
			}
			shared(t, s, name, "r2", time.Minute) // no writer left to wait behind
		})
	}},
	// A fair wait with an Idempotency-Key that runs out keeps its place for a
	// repeat of the request (a wait longer than the server's longest), which
	// takes it up where it was; a cancelled one gives it up.
	{"Keyed_fair_waiter_keeps_its_place_across_repeats", func(t *testing.T, backend Backend) {
		backend.require(t, fairLocks)
		s := Watch(backend.Open(t))
		t.Run("repeat", func(t *testing.T) {
			const name = "fair:repeat"
			a := Acquire(t, s, name, "a", 5*time.Minute)
			req := lock.AcquireRequest{Lock: name, Owner: "w1", Fair: true, IdempotencyKey: "wait-1", TTL: time.Minute}
			_, err := lock.AcquireWait(ctx, s, req, 300*time.Millisecond)
			WantCode(t, err, lock.CodeHeld)
			if st := Inspect(t, s, name); st.Queue != 1 {
				t.Fatalf("queue after a keyed wait ran out = %d, want its place kept", st.Queue)
			}
			w2 := startWait(t, s, lock.AcquireRequest{Lock: name, Owner: "w2", Fair: true}, 10*time.Second)
			waitQueue(t, s, name, 2)
			w1 := startWait(t, s, req, 10*time.Second) // the repeat, within the place's second
			WaitForWaiters(t, s, 2)
			if st := Inspect(t, s, name); st.Queue != 2 {
				t.Fatalf("queue after the repeat = %d, want its old place taken up", st.Queue)
			}
			release(t, s, name, a.ID, false)
			grants := merge(w1, w2)
			first := wantGranted(t, grants, 5*time.Second).g.Lease
			if first.Owner != "w1" {
				t.Fatalf("%s was granted first; w1's repeat kept the place ahead of w2", first.Owner)
			}
			release(t, s, name, first.ID, false)
			if second := wantGranted(t, grants, 5*time.Second).g.Lease; second.Owner != "w2" {
				t.Fatalf("second grant = %+v", second)
			}
		})
		t.Run("cancelled", func(t *testing.T) {
			const name = "fair:repeat-cancel"
			Acquire(t, s, name, "a", 5*time.Minute)
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := lock.AcquireWait(cctx, s, lock.AcquireRequest{Lock: name, Owner: "w", Fair: true, IdempotencyKey: "k", TTL: time.Minute}, 20*time.Second)
				done <- err
			}()
			waitQueue(t, s, name, 1)
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled wait returned %v", err)
			}
			if st := Inspect(t, s, name); st.Queue != 0 {
				t.Fatalf("queue after a keyed waiter was cancelled = %d", st.Queue)
			}
		})
	}},
	// Re-entering is never held off by the queue, nor is a downgrade.
	{"Reentry_is_never_held_off_by_the_queue", func(t *testing.T, backend Backend) {
		backend.require(t, queues)
		s := backend.Open(t)
		t.Run("exclusive", func(t *testing.T) {
			const name = "reentry:excl"
			a := Acquire(t, s, name, "a", 5*time.Minute)
			joinQueue(t, s, lock.AcquireRequest{Lock: name, Owner: "p", Fair: true})
			if g := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "a"}); g.Lease.ID != a.ID || g.Lease.HoldCount != 2 {
				t.Fatalf("re-entry with a fair waiter queued = %+v", g)
			}
			if g := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "a", Mode: lock.Shared}); !g.Fresh || g.Lease.Mode != lock.Shared {
				t.Fatalf("downgrade with a fair waiter queued = %+v", g)
			}
		})
		t.Run("shared", func(t *testing.T) {
			const name = "reentry:shared"
			r := shared(t, s, name, "r", 5*time.Minute)
			joinQueue(t, s, lock.AcquireRequest{Lock: name, Owner: "w"})
			joinQueue(t, s, lock.AcquireRequest{Lock: name, Owner: "f", Fair: true})
			if g := tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: "r", Mode: lock.Shared}); g.Lease.ID != r.ID || g.Lease.HoldCount != 2 {
				t.Fatalf("shared re-entry with writers queued = %+v", g)
			}
			_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "r2", Mode: lock.Shared, TTL: time.Minute})
			refusal(t, err)
		})
		t.Run("fair_reentry", func(t *testing.T) {
			const name = "reentry:fair"
			a := Acquire(t, s, name, "a", 5*time.Minute)
			joinQueue(t, s, lock.AcquireRequest{Lock: name, Owner: "p", Fair: true})
			req := lock.AcquireRequest{Lock: name, Owner: "a", Fair: true}
			req.WaiterID = lock.NewWaiterID(req)
			if g := tryAcquire(t, s, req); g.Lease.ID != a.ID || g.Lease.HoldCount != 2 {
				t.Fatalf("a fair re-entry with a waiter queued = %+v", g)
			}
		})
	}},
	// Fair works with shared heads: consecutive readers at the head are
	// granted one after another, and the writer behind them waits for both.
	{"Fair_shared_heads_are_granted_together", func(t *testing.T, backend Backend) {
		backend.require(t, fairLocks)
		s := backend.Open(t)
		const name = "fair:readers"
		a := Acquire(t, s, name, "a", 5*time.Minute)
		r1 := startWait(t, s, lock.AcquireRequest{Lock: name, Owner: "r1", Mode: lock.Shared, Fair: true}, 20*time.Second)
		waitQueue(t, s, name, 1)
		r2 := startWait(t, s, lock.AcquireRequest{Lock: name, Owner: "r2", Mode: lock.Shared, Fair: true}, 20*time.Second)
		waitQueue(t, s, name, 2)
		w := startWait(t, s, lock.AcquireRequest{Lock: name, Owner: "w", Fair: true}, 20*time.Second)
		waitQueue(t, s, name, 3)
		release(t, s, name, a.ID, false)
		g1 := wantGranted(t, r1, 5*time.Second).g.Lease
		g2 := wantGranted(t, r2, 5*time.Second).g.Lease
		if g1.Mode != lock.Shared || g2.Mode != lock.Shared || g1.Token <= a.Token || g2.Token <= g1.Token {
			t.Fatalf("readers' grants %+v, %+v: want r1 then r2", g1, g2)
		}
		wantWaiting(t, w, 2*lock.QueueRenewal)
		if st := Inspect(t, s, name); st.Kind != lock.KindShared || len(st.Holders) != 2 || st.Queue != 1 {
			t.Fatalf("state with two readers in and the writer queued = %+v", st)
		}
		release(t, s, name, g1.ID, false)
		wantWaiting(t, w, 2*lock.QueueRenewal)
		release(t, s, name, g2.ID, false)
		if gw := wantGranted(t, w, 5*time.Second).g.Lease; gw.Mode != lock.Exclusive || gw.Token <= g2.Token {
			t.Fatalf("writer's grant = %+v", gw)
		}
	}},
	// Fair works with a semaphore: permits go in arrival order.
	{"Fair_permits_go_in_arrival_order", func(t *testing.T, backend Backend) {
		backend.require(t, fairLocks)
		s := backend.Open(t)
		const name = "fair:permits"
		p1 := permit(t, s, name, "p1", 2, 5*time.Minute)
		p2 := permit(t, s, name, "p2", 2, 5*time.Minute)
		var chans []<-chan waited
		for i := 0; i < 3; i++ {
			chans = append(chans, startWait(t, s, lock.AcquireRequest{Lock: name, Owner: fmt.Sprint("f", i), Limit: 2, Fair: true}, 20*time.Second))
			waitQueue(t, s, name, i+1)
		}
		grants := merge(chans...)
		next := func(want string) lock.Lease {
			t.Helper()
			l := wantGranted(t, grants, 5*time.Second).g.Lease
			if l.Owner != want || l.Limit != 2 {
				t.Fatalf("permit went to %+v, want %s", l, want)
			}
			return l
		}
		release(t, s, name, p1.ID, false)
		f0 := next("f0")
		release(t, s, name, p2.ID, false)
		next("f1")
		release(t, s, name, f0.ID, false)
		next("f2")
		if st := Inspect(t, s, name); st.Queue != 0 || len(st.Holders) != 2 {
			t.Fatalf("state = %+v", st)
		}
	}},
}

// shared acquires a shared lease of name for owner or fails the test.
func shared(t *testing.T, s lock.Store, name, owner string, ttl time.Duration) lock.Lease {
	t.Helper()
	return tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: owner, Mode: lock.Shared, TTL: ttl}).Lease
}

// permit acquires one of limit permits of name for owner or fails the test.
func permit(t *testing.T, s lock.Store, name, owner string, limit int, ttl time.Duration) lock.Lease {
	t.Helper()
	return tryAcquire(t, s, lock.AcquireRequest{Lock: name, Owner: owner, Limit: limit, TTL: ttl}).Lease
}

func release(t *testing.T, s lock.Store, name, id string, all bool) lock.ReleaseResult {
	t.Helper()
	res, err := s.Release(ctx, lock.LeaseRef{Lock: name, ID: id}, all)
	if err != nil {
		t.Fatalf("release %s of %s: %v", id, name, err)
	}
	return res
}

// refusal returns what a CodeHeld refusal says of the holder, failing the
// test for any other answer.
func refusal(t *testing.T, err error) lock.HeldBy {
	t.Helper()
	WantCode(t, err, lock.CodeHeld)
	var e *lock.Error
	if !errors.As(err, &e) || e.HeldBy == nil {
		t.Fatalf("a held refusal without HeldBy: %v", err)
	}
	return *e.HeldBy
}

// joinQueue makes a waiter id for req and takes a place in the lock's queue
// with one refused try, never renewed: a waiter that died at once. It
// returns the waiter id.
func joinQueue(t *testing.T, s lock.Store, req lock.AcquireRequest) string {
	t.Helper()
	if req.TTL == 0 {
		req.TTL = time.Minute
	}
	req.WaiterID = lock.NewWaiterID(req)
	_, err := s.TryAcquire(ctx, req)
	if hb := refusal(t, err); !hb.Queued {
		t.Fatalf("%+v refused with %+v, want a queue place", req, hb)
	}
	return req.WaiterID
}

// keepQueued joins name's queue as req and keeps the place, as a waiting
// request does, by trying again every QueueEntryTTL/4 until stop is called
// (or the test ends): a check that takes longer than QueueEntryTTL on a
// loaded machine (an event check waits out the log's hold) must not see
// the place lapse. Call stop before the operation the place is counted
// in: a try after a release would be granted.
func keepQueued(t *testing.T, s lock.Store, req lock.AcquireRequest) (id string, stop func()) {
	t.Helper()
	id = joinQueue(t, s, req)
	req.WaiterID = id
	if req.TTL == 0 {
		req.TTL = time.Minute
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(lock.QueueEntryTTL / 4)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				// Refused with the place renewed, as joinQueue checked.
				_, _ = s.TryAcquire(ctx, req)
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(quit); <-done }) }
	t.Cleanup(stop)
	return id, stop
}

// waitQueue waits until name's queue holds n waiters.
func waitQueue(t *testing.T, s lock.Store, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := Inspect(t, s, name)
		if st.Queue == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's queue holds %d waiters, want %d", name, st.Queue, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// wantHolders fails the test unless st lists exactly leases as its holders,
// in this order (the grant order), each as the lease says.
func wantHolders(t *testing.T, backend Backend, st lock.State, leases ...lock.Lease) {
	t.Helper()
	if len(st.Holders) != len(leases) {
		t.Fatalf("%s has %d holders %+v, want %d", st.Lock, len(st.Holders), st.Holders, len(leases))
	}
	for i, h := range st.Holders {
		l := leases[i]
		if h.Owner != l.Owner || h.Token != l.Token || h.Mode != l.Mode || h.HoldCount != l.HoldCount || !backend.sameTime(h.AcquiredAt, l.AcquiredAt) || !backend.sameTime(h.ExpiresAt, l.ExpiresAt) {
			t.Fatalf("%s's holder #%d = %+v, want lease %+v", st.Lock, i, h, l)
		}
	}
}

// holderOf returns st's holder with token, failing the test if there is none.
func holderOf(t *testing.T, st lock.State, token uint64) lock.Holder {
	t.Helper()
	for _, h := range st.Holders {
		if h.Token == token {
			return h
		}
	}
	t.Fatalf("%s has no holder with token %d: %+v", st.Lock, token, st.Holders)
	return lock.Holder{}
}

// waited is the outcome of an AcquireWait run by startWait.
type waited struct {
	g   lock.Grant
	err error
	at  time.Time
}

// startWait runs lock.AcquireWait(req, wait) on its own goroutine (TTL one
// minute unless req has one) and returns where its outcome arrives. The wait
// is cancelled when the test ends, before its store closes.
func startWait(t *testing.T, s lock.Store, req lock.AcquireRequest, wait time.Duration) <-chan waited {
	t.Helper()
	if req.TTL == 0 {
		req.TTL = time.Minute
	}
	cctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	out := make(chan waited, 1)
	go func() {
		g, err := lock.AcquireWait(cctx, s, req, wait)
		out <- waited{g, err, time.Now()}
	}()
	return out
}

// merge delivers the outcomes of several waits on one channel.
func merge(chans ...<-chan waited) <-chan waited {
	out := make(chan waited, len(chans))
	for _, c := range chans {
		go func() { out <- <-c }()
	}
	return out
}

// wantGranted waits up to within for a wait's outcome, which must be a grant.
func wantGranted(t *testing.T, c <-chan waited, within time.Duration) waited {
	t.Helper()
	select {
	case w := <-c:
		if w.err != nil {
			t.Fatalf("wait ended with %v", w.err)
		}
		return w
	case <-time.After(within):
		t.Fatalf("no grant within %v", within)
		return waited{}
	}
}

// wantWaiting fails the test if a wait ends within d.
func wantWaiting(t *testing.T, c <-chan waited, d time.Duration) {
	t.Helper()
	select {
	case w := <-c:
		t.Fatalf("the wait ended too soon: %+v, %v", w.g.Lease, w.err)
	case <-time.After(d):
	}
}
