package memory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
	"github.com/lockapi/lockapi/internal/testkit/storetest"
)

// The rules of docs/LOCK_KINDS.md ("Store rules, step by step") as the memory
// store applies them. The cross-store suite is internal/testkit/storetest.

var bg = context.Background()

func newStore(t *testing.T) *memory.Store {
	t.Helper()
	m := memory.New()
	t.Cleanup(func() { m.Close() })
	return m
}

// grant acquires or fails the test; TTL defaults to a minute.
func grant(t *testing.T, s lock.Store, req lock.AcquireRequest) lock.Grant {
	t.Helper()
	if req.TTL == 0 {
		req.TTL = time.Minute
	}
	g, err := s.TryAcquire(bg, req)
	if err != nil {
		t.Fatalf("acquire %+v: %v", req, err)
	}
	return g
}

// refused makes an acquire that must fail with code and returns its error.
func refused(t *testing.T, s lock.Store, req lock.AcquireRequest, code lock.Code) *lock.Error {
	t.Helper()
	if req.TTL == 0 {
		req.TTL = time.Minute
	}
	g, err := s.TryAcquire(bg, req)
	if err == nil {
		t.Fatalf("acquire %+v was granted: %+v", req, g.Lease)
	}
	storetest.WantCode(t, err, code)
	var e *lock.Error
	errors.As(err, &e)
	return e
}

func release(t *testing.T, s lock.Store, name, id string) lock.ReleaseResult {
	t.Helper()
	res, err := s.Release(bg, lock.LeaseRef{Lock: name, ID: id}, false)
	if err != nil {
		t.Fatalf("release %s of %s: %v", id, name, err)
	}
	return res
}

// join puts a waiter in name's queue that never renews its place: the
// acquire must be refused and must queue. It stands for a waiter whose
// lockapi instance died, or for one whose tries the test makes by hand.
func join(t *testing.T, s lock.Store, req lock.AcquireRequest) string {
	t.Helper()
	req.WaiterID = lock.NewWaiterID(req)
	e := refused(t, s, req, lock.CodeHeld)
	if !e.HeldBy.Queued {
		t.Fatalf("%+v did not queue: %+v", req, e.HeldBy)
	}
	return req.WaiterID
}

// woken waits for w's wake-up.
func woken(t *testing.T, w lock.Watcher, what string) {
	t.Helper()
	select {
	case <-w.C():
	case <-time.After(5 * time.Second):
		t.Fatalf("%s was not woken", what)
	}
}

// asleep checks that w has no wake-up: notices are sent before the call that
// decides them returns, so there is nothing to wait for.
func asleep(t *testing.T, w lock.Watcher, what string) {
	t.Helper()
	select {
	case <-w.C():
		t.Fatalf("%s was woken", what)
	default:
	}
}

type result struct {
	g   lock.Grant
	err error
	at  time.Time
}

// wait runs lock.AcquireWait in the background.
func wait(s lock.Store, req lock.AcquireRequest, d time.Duration) <-chan result {
	if req.TTL == 0 {
		req.TTL = time.Minute
	}
	done := make(chan result, 1)
	go func() {
		g, err := lock.AcquireWait(bg, s, req, d)
		done <- result{g, err, time.Now()}
	}()
	return done
}

func await(t *testing.T, done <-chan result, what string) result {
	t.Helper()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was not granted", what)
	}
	panic("unreachable")
}

func TestShared_many_readers_one_writer(t *testing.T) {
	s := newStore(t)
	var readers []lock.Grant
	for _, owner := range []string{"r1", "r2", "r3"} {
		g := grant(t, s, lock.AcquireRequest{Lock: "rw", Owner: owner, Mode: lock.Shared, TTL: time.Duration(len(readers)+1) * time.Minute})
		if !g.Fresh || g.Lease.Mode != lock.Shared || g.Lease.Limit != 0 || g.RequestID != g.Lease.ID {
			t.Fatalf("reader grant = %+v", g)
		}
		readers = append(readers, g)
	}
	st := storetest.Inspect(t, s, "rw")
	if !st.Held || st.Kind != lock.KindShared || st.Holder != nil || len(st.Holders) != 3 || st.Limit != 0 {
		t.Fatalf("state = %+v", st)
	}
	for i, h := range st.Holders {
		if h.Owner != readers[i].Lease.Owner || h.Token != readers[i].Lease.Token || h.Mode != lock.Shared {
			t.Fatalf("holders not in grant order: %+v", st.Holders)
		}
	}
	// A writer is refused; the lease in the way is the one that ends first.
	e := refused(t, s, lock.AcquireRequest{Lock: "rw", Owner: "w"}, lock.CodeHeld)
	if e.HeldBy.Owner != "r1" || e.HeldBy.Token != readers[0].Lease.Token || e.HeldBy.ExpiresIn > time.Minute || e.HeldBy.Queue != 0 || e.HeldBy.Queued {
		t.Fatalf("held by = %+v", e.HeldBy)
	}
	// A reader re-enters its own lease.
	again := grant(t, s, lock.AcquireRequest{Lock: "rw", Owner: "r2", Mode: lock.Shared})
	if again.Fresh || again.Lease.ID != readers[1].Lease.ID || again.Lease.HoldCount != 2 || again.RequestID == again.Lease.ID {
		t.Fatalf("reentrant reader = %+v", again)
	}
	s.Release(bg, lock.LeaseRef{Lock: "rw", ID: readers[1].Lease.ID}, true)
	release(t, s, "rw", readers[0].Lease.ID)
	release(t, s, "rw", readers[2].Lease.ID)
	w := grant(t, s, lock.AcquireRequest{Lock: "rw", Owner: "w"})
	if w.Lease.Mode != lock.Exclusive || w.Lease.Token <= readers[2].Lease.Token {
		t.Fatalf("writer = %+v", w.Lease)
	}
	// Readers wait for the writer.
	e = refused(t, s, lock.AcquireRequest{Lock: "rw", Owner: "r1", Mode: lock.Shared}, lock.CodeHeld)
	if e.HeldBy.Owner != "w" || e.HeldBy.Token != w.Lease.Token {
		t.Fatalf("held by = %+v", e.HeldBy)
	}
	st = storetest.Inspect(t, s, "rw")
	if st.Kind != lock.KindExclusive || st.Holder == nil || st.Holder.Mode != lock.Exclusive || len(st.Holders) != 1 {
		t.Fatalf("state = %+v", st)
	}
}

func TestShared_no_upgrade(t *testing.T) {
	s := newStore(t)
	r := grant(t, s, lock.AcquireRequest{Lock: "up", Owner: "r", Principal: "p", Mode: lock.Shared})
	e := refused(t, s, lock.AcquireRequest{Lock: "up", Owner: "r", Principal: "p", WaiterID: "x01"}, lock.CodeUpgrade)
	if e.HeldBy != nil {
		t.Fatalf("upgrade refusal with a holder: %+v", e.HeldBy)
	}
	// The same owner name under another principal is another owner.
	refused(t, s, lock.AcquireRequest{Lock: "up", Owner: "r", Principal: "q"}, lock.CodeHeld)
	if st := storetest.Inspect(t, s, "up"); st.Queue != 0 || len(st.Holders) != 1 {
		t.Fatalf("an upgrade refusal queued or took something: %+v", st)
	}
	release(t, s, "up", r.Lease.ID)
	grant(t, s, lock.AcquireRequest{Lock: "up", Owner: "r", Principal: "p"})
}

func TestShared_downgrade(t *testing.T) {
	s := newStore(t)
	x := grant(t, s, lock.AcquireRequest{Lock: "down", Owner: "a"})
	// A fair writer queues behind a; a's downgrade does not wait for it.
	writer := join(t, s, lock.AcquireRequest{Lock: "down", Owner: "w", Fair: true})
	sh := grant(t, s, lock.AcquireRequest{Lock: "down", Owner: "a", Mode: lock.Shared})
	if !sh.Fresh || sh.Lease.ID == x.Lease.ID || sh.Lease.Token <= x.Lease.Token || sh.Lease.Mode != lock.Shared {
		t.Fatalf("downgrade = %+v after %+v", sh.Lease, x.Lease)
	}
	st := storetest.Inspect(t, s, "down")
	if st.Kind != lock.KindExclusive || st.Holder == nil || st.Holder.Token != x.Lease.Token || len(st.Holders) != 2 || st.Holders[1].Mode != lock.Shared || st.Queue != 1 {
		t.Fatalf("state = %+v", st)
	}
	// Another reader waits while the exclusive lease lives.
	refused(t, s, lock.AcquireRequest{Lock: "down", Owner: "b", Mode: lock.Shared}, lock.CodeHeld)
	release(t, s, "down", x.Lease.ID)
	if err := s.Leave(bg, "down", writer); err != nil {
		t.Fatal(err)
	}
	st = storetest.Inspect(t, s, "down")
	if st.Kind != lock.KindShared || st.Holder != nil || len(st.Holders) != 1 || st.Queue != 0 {
		t.Fatalf("state after releasing the exclusive lease = %+v", st)
	}
	// a still reads, and other readers join it.
	grant(t, s, lock.AcquireRequest{Lock: "down", Owner: "b", Mode: lock.Shared})
	if _, err := s.Renew(bg, lock.LeaseRef{Lock: "down", ID: sh.Lease.ID}, time.Hour); err != nil {
		t.Fatal(err)
	}
}

// A writer that waits for readers queues, and new readers wait behind it
// while the readers already holding keep their leases.
func TestShared_writer_does_not_starve(t *testing.T) {
	s := storetest.Watch(newStore(t))
	r1 := grant(t, s, lock.AcquireRequest{Lock: "ws", Owner: "r1", Mode: lock.Shared})
	done := wait(s, lock.AcquireRequest{Lock: "ws", Owner: "w"}, 20*time.Second)
	storetest.WaitForWaiters(t, s, 1) // its first try, which queued it, came before
	if st := storetest.Inspect(t, s, "ws"); st.Queue != 1 {
		t.Fatalf("the writer did not queue: %+v", st)
	}
	e := refused(t, s, lock.AcquireRequest{Lock: "ws", Owner: "r2", Mode: lock.Shared}, lock.CodeHeld)
	if e.HeldBy.Owner != "" || e.HeldBy.Token != 0 || e.HeldBy.Queue != 1 || e.HeldBy.Queued || e.HeldBy.ExpiresIn <= 0 || e.HeldBy.ExpiresIn > lock.QueueEntryTTL {
		t.Fatalf("a new reader behind a queued writer: held by = %+v", e.HeldBy)
	}
	// The reader already holding re-enters: re-entering is never held off.
	grant(t, s, lock.AcquireRequest{Lock: "ws", Owner: "r1", Mode: lock.Shared})
	if _, err := s.Release(bg, lock.LeaseRef{Lock: "ws", ID: r1.Lease.ID}, true); err != nil {
		t.Fatal(err)
	}
	w := await(t, done, "the writer")
	if w.g.Lease.Mode != lock.Exclusive || w.g.Lease.Token <= r1.Lease.Token {
		t.Fatalf("writer = %+v", w.g.Lease)
	}
	if st := storetest.Inspect(t, s, "ws"); st.Queue != 0 || st.Kind != lock.KindExclusive {
		t.Fatalf("the grant left its place in the queue: %+v", st)
	}
}

// A writer refused by readers gets a place. As the queue's head it times the
// lease in its way (its own place is renewed every QueueRenewal anyway).
func TestShared_refused_writer_queues(t *testing.T) {
	s := newStore(t)
	grant(t, s, lock.AcquireRequest{Lock: "q", Owner: "r", Mode: lock.Shared, TTL: time.Hour})
	req := lock.AcquireRequest{Lock: "q", Owner: "w", TTL: time.Minute}
	req.WaiterID = lock.NewWaiterID(req)
	e := refused(t, s, req, lock.CodeHeld)
	if e.HeldBy.Owner != "r" || !e.HeldBy.Queued || e.HeldBy.Queue != 1 || e.HeldBy.ExpiresIn < 59*time.Minute {
		t.Fatalf("held by = %+v", e.HeldBy)
	}
	// A writer held off by another writer does not queue, unless fair.
	x := grant(t, s, lock.AcquireRequest{Lock: "q2", Owner: "a"})
	other := lock.AcquireRequest{Lock: "q2", Owner: "b"}
	other.WaiterID = lock.NewWaiterID(other)
	if e := refused(t, s, other, lock.CodeHeld); e.HeldBy.Queued || e.HeldBy.Queue != 0 || e.HeldBy.Token != x.Lease.Token {
		t.Fatalf("held by = %+v", e.HeldBy)
	}
}

func TestSemaphore(t *testing.T) {
	s := newStore(t)
	var permits []lock.Grant
	for i := 0; i < 3; i++ {
		// One owner: a semaphore is not reentrant, each acquire is a permit.
		g := grant(t, s, lock.AcquireRequest{Lock: "sem", Owner: "w", Limit: 3, TTL: time.Duration(3-i) * time.Minute})
		if !g.Fresh || g.Lease.HoldCount != 1 || g.Lease.Limit != 3 || g.Lease.Mode != lock.Exclusive {
			t.Fatalf("permit %d = %+v", i, g)
		}
		if i > 0 && (g.Lease.ID == permits[i-1].Lease.ID || g.Lease.Token <= permits[i-1].Lease.Token) {
			t.Fatalf("permit %d = %+v after %+v", i, g.Lease, permits[i-1].Lease)
		}
		permits = append(permits, g)
	}
	st := storetest.Inspect(t, s, "sem")
	if !st.Held || st.Kind != lock.KindSemaphore || st.Limit != 3 || st.Holder != nil || len(st.Holders) != 3 {
		t.Fatalf("state = %+v", st)
	}
	// All permits held: the one in the way is the one that ends first.
	e := refused(t, s, lock.AcquireRequest{Lock: "sem", Owner: "x", Limit: 3}, lock.CodeHeld)
	if e.HeldBy.Token != permits[2].Lease.Token || e.HeldBy.Owner != "w" {
		t.Fatalf("held by = %+v, want permit %+v", e.HeldBy, permits[2].Lease)
	}
	for _, req := range []lock.AcquireRequest{
		{Lock: "sem", Owner: "x", Limit: 2},
		{Lock: "sem", Owner: "x"},
		{Lock: "sem", Owner: "x", Mode: lock.Shared},
		{Lock: "sem", Owner: "w"},
	} {
		refused(t, s, req, lock.CodeLimitMismatch)
	}
	// A limit on a name held as a lock is a mismatch too.
	grant(t, s, lock.AcquireRequest{Lock: "plain", Owner: "w"})
	refused(t, s, lock.AcquireRequest{Lock: "plain", Owner: "w", Limit: 1}, lock.CodeLimitMismatch)

	// A released permit comes back; the limit is forgotten once none is held.
	release(t, s, "sem", permits[0].Lease.ID)
	grant(t, s, lock.AcquireRequest{Lock: "sem", Owner: "x", Limit: 3})
	if _, err := s.ForceRelease(bg, "sem", "admin"); err != nil {
		t.Fatal(err)
	}
	grant(t, s, lock.AcquireRequest{Lock: "sem", Owner: "x", Limit: 5})
}

func TestSemaphore_expired_permit_comes_back(t *testing.T) {
	s := newStore(t)
	grant(t, s, lock.AcquireRequest{Lock: "crash", Owner: "a", Limit: 2})
	dead := grant(t, s, lock.AcquireRequest{Lock: "crash", Owner: "b", Limit: 2, TTL: 200 * time.Millisecond})
	start := time.Now()
	r := await(t, wait(s, lock.AcquireRequest{Lock: "crash", Owner: "c", Limit: 2}, 10*time.Second), "the permit waiter")
	if took := r.at.Sub(start); took < 150*time.Millisecond || r.g.Lease.Token <= dead.Lease.Token {
		t.Fatalf("granted after %v: %+v", took, r.g.Lease)
	}
	if st := storetest.Inspect(t, s, "crash"); len(st.Holders) != 2 {
		t.Fatalf("holders = %+v", st.Holders)
	}
}

// Fair waiters are granted in arrival order, and a plain acquire does not
// jump the queue.
func TestFair_arrival_order(t *testing.T) {
	s := storetest.Watch(newStore(t))
	a := grant(t, s, lock.AcquireRequest{Lock: "fifo", Owner: "a"})
	owners := []string{"w1", "w2", "w3", "w4"}
	var waits []<-chan result
	for i, owner := range owners {
		waits = append(waits, wait(s, lock.AcquireRequest{Lock: "fifo", Owner: owner, Fair: true}, 30*time.Second))
		storetest.WaitForWaiters(t, s, i+1) // queued in this order
	}
	if st := storetest.Inspect(t, s, "fifo"); st.Queue != len(owners) {
		t.Fatalf("queue = %d", st.Queue)
	}
	prev := a.Lease
	release(t, s, "fifo", a.Lease.ID)
	for i, done := range waits {
		r := await(t, done, owners[i])
		if r.g.Lease.Token <= prev.Token {
			t.Fatalf("%s granted with token %d after %d", owners[i], r.g.Lease.Token, prev.Token)
		}
		// Between two hand-offs a plain acquire is refused: by the queue
		// while the lock is free, or by the next waiter once granted.
		release(t, s, "fifo", r.g.Lease.ID)
		if i < len(waits)-1 {
			e := refused(t, s, lock.AcquireRequest{Lock: "fifo", Owner: "intruder"}, lock.CodeHeld)
			if e.HeldBy.Owner == "" && (e.HeldBy.Token != 0 || e.HeldBy.Queue == 0) {
				t.Fatalf("held by = %+v", e.HeldBy)
			}
		}
		prev = r.g.Lease
	}
	grant(t, s, lock.AcquireRequest{Lock: "fifo", Owner: "intruder"})
}

// A waiter that stops renewing its place (its lockapi instance died) drops
// out, and the next one, renewing, reaches the head.
func TestFair_dead_waiter_drops_out(t *testing.T) {
	s := storetest.Watch(newStore(t))
	a := grant(t, s, lock.AcquireRequest{Lock: "dead", Owner: "a"})
	joined := time.Now()
	join(t, s, lock.AcquireRequest{Lock: "dead", Owner: "ghost", Fair: true})
	done := wait(s, lock.AcquireRequest{Lock: "dead", Owner: "b", Fair: true}, 20*time.Second)
	storetest.WaitForWaiters(t, s, 1)
	release(t, s, "dead", a.Lease.ID)
	r := await(t, done, "the waiter behind a dead one")
	took := r.at.Sub(joined)
	t.Logf("granted %v after the dead waiter's last renewal", took)
	if took < lock.QueueEntryTTL || took > 3*time.Second {
		t.Fatalf("granted %v after the dead waiter joined; its place lasts %v", took, lock.QueueEntryTTL)
	}
}

func TestFair_leave(t *testing.T) {
	s := newStore(t)
	a := grant(t, s, lock.AcquireRequest{Lock: "lv", Owner: "a"})
	first := join(t, s, lock.AcquireRequest{Lock: "lv", Owner: "f1", Fair: true})
	second := join(t, s, lock.AcquireRequest{Lock: "lv", Owner: "f2", Fair: true})
	third := join(t, s, lock.AcquireRequest{Lock: "lv", Owner: "f3", Fair: true})
	release(t, s, "lv", a.Lease.ID)
	// The lock is free, but a plain acquire is held off by the queue alone.
	e := refused(t, s, lock.AcquireRequest{Lock: "lv", Owner: "plain"}, lock.CodeHeld)
	if e.HeldBy.Owner != "" || e.HeldBy.Token != 0 || e.HeldBy.Queue != 3 || e.HeldBy.Queued || e.HeldBy.ExpiresIn <= 0 || e.HeldBy.ExpiresIn > lock.QueueEntryTTL {
		t.Fatalf("held by = %+v", e.HeldBy)
	}

	w, err := s.Watch(bg, "lv", lock.WaitForRelease)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Join(third)
	plain, err := s.Watch(bg, "lv", lock.WaitForRelease)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()

	// Not the head: nobody is told.
	if err := s.Leave(bg, "lv", second); err != nil {
		t.Fatal(err)
	}
	asleep(t, w, "the third waiter")
	asleep(t, plain, "a plain waiter")
	if st := storetest.Inspect(t, s, "lv"); st.Queue != 2 {
		t.Fatalf("queue = %d", st.Queue)
	}
	// The head: the new head is told, by its id.
	if err := s.Leave(bg, "lv", first); err != nil {
		t.Fatal(err)
	}
	woken(t, w, "the new head")
	asleep(t, plain, "a plain waiter")
	// Leaving again, or never having queued, is fine.
	if err := s.Leave(bg, "lv", first); err != nil {
		t.Fatal(err)
	}
	if err := s.Leave(bg, "never", "x01"); err != nil {
		t.Fatal(err)
	}
	// The last one: whoever the queue held off may go. (w's waiter is
	// gone by then; a release wakes the first waiter still registered.)
	w.Close()
	if err := s.Leave(bg, "lv", third); err != nil {
		t.Fatal(err)
	}
	woken(t, plain, "a plain waiter")
	if st := storetest.Inspect(t, s, "lv"); st.Queue != 0 {
		t.Fatalf("queue = %d", st.Queue)
	}
	grant(t, s, lock.AcquireRequest{Lock: "lv", Owner: "b"})
}

// A lease that ends with a queue wakes its head alone; a grant that takes
// its place out of the queue wakes the next head, so consecutive readers go
// one after another.
func TestNotices_wake_the_queue_head(t *testing.T) {
	s := newStore(t)
	a := grant(t, s, lock.AcquireRequest{Lock: "n", Owner: "a"})
	r1Req := lock.AcquireRequest{Lock: "n", Owner: "r1", Mode: lock.Shared, Fair: true}
	r1Req.WaiterID = join(t, s, r1Req)
	r2 := join(t, s, lock.AcquireRequest{Lock: "n", Owner: "r2", Mode: lock.Shared, Fair: true})

	head, err := s.Watch(bg, "n", lock.WaitForRelease)
	if err != nil {
		t.Fatal(err)
	}
	defer head.Close()
	head.Join(r1Req.WaiterID)
	next, err := s.Watch(bg, "n", lock.WaitForRelease)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	next.Join(r2)
	plain, err := s.Watch(bg, "n", lock.WaitForRelease)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	changes, err := s.Watch(bg, "n", lock.WatchChanges)
	if err != nil {
		t.Fatal(err)
	}
	defer changes.Close()

	release(t, s, "n", a.Lease.ID)
	woken(t, head, "the head")
	woken(t, changes, "a change watcher")
	asleep(t, next, "the second in the queue")
	asleep(t, plain, "a plain waiter")

	grant(t, s, r1Req)
	woken(t, next, "the new head")
	woken(t, changes, "a change watcher")
	asleep(t, plain, "a plain waiter")
}

// With a queue empty, a release wakes a plain waiter; AcquireWait's waiters
// hand the lock on from one to the next.
func TestNotices_release_hands_off(t *testing.T) {
	s := storetest.Watch(newStore(t))
	sh := grant(t, s, lock.AcquireRequest{Lock: "h", Owner: "r", Mode: lock.Shared, TTL: time.Hour})
	plain, err := s.Watch(bg, "h", lock.WaitForRelease)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	g := grant(t, s, lock.AcquireRequest{Lock: "h", Owner: "r", Mode: lock.Shared})
	asleep(t, plain, "a plain waiter after a grant")
	release(t, s, "h", g.Lease.ID) // one hold of two
	asleep(t, plain, "a plain waiter after a hold was dropped")
	release(t, s, "h", sh.Lease.ID)
	woken(t, plain, "a plain waiter")
	plain.Close()

	// An hour-long lease: a grant within seconds came from the notices.
	x := grant(t, s, lock.AcquireRequest{Lock: "h", Owner: "x", TTL: time.Hour})
	fair := wait(s, lock.AcquireRequest{Lock: "h", Owner: "f", Fair: true}, 30*time.Second)
	storetest.WaitForWaiters(t, s, 1)
	released := time.Now()
	release(t, s, "h", x.Lease.ID)
	r := await(t, fair, "the fair waiter")
	if d := r.at.Sub(released); d > 3*time.Second {
		t.Fatalf("hand-off took %v", d)
	}
}

// Every fresh grant takes the next token, whatever its mode.
func TestTokens_rise_across_modes(t *testing.T) {
	s := newStore(t)
	var last uint64
	check := func(g lock.Grant) {
		t.Helper()
		if !g.Fresh || g.Lease.Token <= last {
			t.Fatalf("grant %+v after token %d", g, last)
		}
		last = g.Lease.Token
	}
	for i := 0; i < 20; i++ {
		x := grant(t, s, lock.AcquireRequest{Lock: "tok", Owner: "a"})
		check(x)
		d := grant(t, s, lock.AcquireRequest{Lock: "tok", Owner: "a", Mode: lock.Shared})
		check(d)
		release(t, s, "tok", x.Lease.ID)
		r := grant(t, s, lock.AcquireRequest{Lock: "tok", Owner: "b", Mode: lock.Shared})
		check(r)
		if st := storetest.Inspect(t, s, "tok"); st.LastToken != last {
			t.Fatalf("last token %d, want %d", st.LastToken, last)
		}
		release(t, s, "tok", d.Lease.ID)
		release(t, s, "tok", r.Lease.ID)
		p := grant(t, s, lock.AcquireRequest{Lock: "tok", Owner: "a", Limit: 2})
		check(p)
		q := grant(t, s, lock.AcquireRequest{Lock: "tok", Owner: "a", Limit: 2})
		check(q)
		release(t, s, "tok", p.Lease.ID)
		release(t, s, "tok", q.Lease.ID)
	}
}

// Renew, release, abandon and release retries find shared leases and permits
// by id, with the principal checks of an exclusive lease.
func TestShared_lease_operations(t *testing.T) {
	s := newStore(t)
	r := grant(t, s, lock.AcquireRequest{Lock: "ops", Owner: "r", Principal: "team", Mode: lock.Shared, TTL: time.Second})
	other := grant(t, s, lock.AcquireRequest{Lock: "ops", Owner: "o", Mode: lock.Shared})
	theirs := lock.LeaseRef{Lock: "ops", ID: r.Lease.ID, Principal: "intruder"}
	_, err := s.Renew(bg, theirs, time.Hour)
	storetest.WantCode(t, err, lock.CodeForbidden)
	_, err = s.Release(bg, theirs, false)
	storetest.WantCode(t, err, lock.CodeForbidden)
	renewed, err := s.Renew(bg, lock.LeaseRef{Lock: "ops", ID: r.Lease.ID, Principal: "team"}, time.Hour)
	if err != nil || renewed.TTL != time.Hour || renewed.Mode != lock.Shared || renewed.ID != r.Lease.ID {
		t.Fatalf("renew = %+v, %v", renewed, err)
	}
	res := release(t, s, "ops", r.Lease.ID)
	if !res.Released || res.Retried {
		t.Fatalf("release = %+v", res)
	}
	if res := release(t, s, "ops", r.Lease.ID); !res.Released || !res.Retried {
		t.Fatalf("retried release = %+v", res)
	}
	_, err = s.Renew(bg, lock.LeaseRef{Lock: "ops", ID: r.Lease.ID}, time.Hour)
	storetest.WantCode(t, err, lock.CodeLeaseLost)
	if st := storetest.Inspect(t, s, "ops"); len(st.Holders) != 1 || st.Holders[0].Token != other.Lease.Token {
		t.Fatalf("holders = %+v", st.Holders)
	}
}

func TestAbandon_shared_and_permits(t *testing.T) {
	s := newStore(t)
	t.Run("fresh_shared", func(t *testing.T) {
		keep := grant(t, s, lock.AcquireRequest{Lock: "ab", Owner: "k", Mode: lock.Shared})
		g := grant(t, s, lock.AcquireRequest{Lock: "ab", Owner: "w", Mode: lock.Shared})
		if err := s.Abandon(bg, "ab", g.RequestID); err != nil {
			t.Fatal(err)
		}
		st := storetest.Inspect(t, s, "ab")
		if len(st.Holders) != 1 || st.Holders[0].Token != keep.Lease.Token {
			t.Fatalf("holders after abandoning a fresh shared grant = %+v", st.Holders)
		}
	})
	t.Run("reentrant_shared", func(t *testing.T) {
		grant(t, s, lock.AcquireRequest{Lock: "ab2", Owner: "w", Mode: lock.Shared})
		second := grant(t, s, lock.AcquireRequest{Lock: "ab2", Owner: "w", Mode: lock.Shared})
		for range 2 {
			if err := s.Abandon(bg, "ab2", second.RequestID); err != nil {
				t.Fatal(err)
			}
		}
		if st := storetest.Inspect(t, s, "ab2"); len(st.Holders) != 1 || st.Holders[0].HoldCount != 1 {
			t.Fatalf("holders = %+v", st.Holders)
		}
	})
	t.Run("permit", func(t *testing.T) {
		p := grant(t, s, lock.AcquireRequest{Lock: "ab3", Owner: "w", Limit: 1})
		if err := s.Abandon(bg, "ab3", p.RequestID); err != nil {
			t.Fatal(err)
		}
		grant(t, s, lock.AcquireRequest{Lock: "ab3", Owner: "x", Limit: 1})
	})
	t.Run("idempotent_permit", func(t *testing.T) {
		req := lock.AcquireRequest{Lock: "ab4", Owner: "w", Limit: 3, IdempotencyKey: "k"}
		g := grant(t, s, req)
		r := grant(t, s, req)
		if !r.Replayed || r.Lease.ID != g.Lease.ID || !r.Fresh {
			t.Fatalf("replay = %+v", r)
		}
		if st := storetest.Inspect(t, s, "ab4"); len(st.Holders) != 1 {
			t.Fatalf("a replay took another permit: %+v", st.Holders)
		}
		// Without the key, the same owner takes another permit.
		grant(t, s, lock.AcquireRequest{Lock: "ab4", Owner: "w", Limit: 3})
		if err := s.Abandon(bg, "ab4", g.RequestID); err != nil {
			t.Fatal(err)
		}
		if st := storetest.Inspect(t, s, "ab4"); len(st.Holders) != 2 {
			t.Fatalf("abandon undid a permit a replay had claimed: %+v", st.Holders)
		}
	})
}

func TestForceRelease_ends_every_lease_and_keeps_the_queue(t *testing.T) {
	s := newStore(t)
	grant(t, s, lock.AcquireRequest{Lock: "fr", Owner: "a", Mode: lock.Shared})
	grant(t, s, lock.AcquireRequest{Lock: "fr", Owner: "b", Mode: lock.Shared})
	writer := join(t, s, lock.AcquireRequest{Lock: "fr", Owner: "w"})
	head, err := s.Watch(bg, "fr", lock.WaitForRelease)
	if err != nil {
		t.Fatal(err)
	}
	defer head.Close()
	head.Join(writer)
	if freed, err := s.ForceRelease(bg, "fr", "admin"); err != nil || !freed {
		t.Fatalf("force release = %v, %v", freed, err)
	}
	woken(t, head, "the queue head")
	st := storetest.Inspect(t, s, "fr")
	if st.Held || st.Kind != "" || len(st.Holders) != 0 || st.Queue != 1 {
		t.Fatalf("state = %+v", st)
	}
	g := grant(t, s, lock.AcquireRequest{Lock: "fr", Owner: "w", WaiterID: writer})
	if st := storetest.Inspect(t, s, "fr"); st.Queue != 0 || st.Holder == nil || st.Holder.Token != g.Lease.Token {
		t.Fatalf("state = %+v", st)
	}
}

func TestList_every_kind(t *testing.T) {
	s := newStore(t)
	grant(t, s, lock.AcquireRequest{Lock: "k:excl", Owner: "a"})
	grant(t, s, lock.AcquireRequest{Lock: "k:shared", Owner: "a", Mode: lock.Shared})
	grant(t, s, lock.AcquireRequest{Lock: "k:sem", Owner: "a", Limit: 4})
	// Queued on a free lock: not held, not listed.
	held := grant(t, s, lock.AcquireRequest{Lock: "k:queued", Owner: "a"})
	join(t, s, lock.AcquireRequest{Lock: "k:queued", Owner: "b", Fair: true})
	release(t, s, "k:queued", held.Lease.ID)

	page, err := s.List(bg, lock.ListRequest{Prefix: "k:"})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name string
		kind lock.Kind
	}{{"k:excl", lock.KindExclusive}, {"k:sem", lock.KindSemaphore}, {"k:shared", lock.KindShared}}
	if len(page.Locks) != len(want) {
		t.Fatalf("listed %+v", page.Locks)
	}
	for i, w := range want {
		if st := page.Locks[i]; st.Lock != w.name || st.Kind != w.kind || !st.Held || len(st.Holders) != 1 {
			t.Fatalf("listed %+v, want %s (%s)", st, w.name, w.kind)
		}
	}
}

// Holders enter the index: a change to a shared lease changes it.
func TestIndex_follows_shared_leases(t *testing.T) {
	s := newStore(t)
	grant(t, s, lock.AcquireRequest{Lock: "ix", Owner: "a", Mode: lock.Shared})
	before := storetest.Inspect(t, s, "ix").Index
	g := grant(t, s, lock.AcquireRequest{Lock: "ix", Owner: "b", Mode: lock.Shared})
	mid := storetest.Inspect(t, s, "ix").Index
	release(t, s, "ix", g.Lease.ID)
	after := storetest.Inspect(t, s, "ix").Index
	if before == mid || mid == after {
		t.Fatalf("index %s -> %s -> %s", before, mid, after)
	}
}

// Readers and writers, fair and not, waiting at once: a writer never
// overlaps anyone, and every waiter is granted in the end.
func TestShared_mixed_waiters_never_overlap(t *testing.T) {
	s := newStore(t)
	var (
		mu              sync.Mutex
		readers, writer int
	)
	enter := func(mode lock.Mode) {
		mu.Lock()
		defer mu.Unlock()
		if writer > 0 || (mode == lock.Exclusive && readers > 0) {
			t.Errorf("%s granted while %d readers and %d writers hold", mode, readers, writer)
		}
		if mode == lock.Shared {
			readers++
		} else {
			writer++
		}
	}
	leave := func(mode lock.Mode) {
		mu.Lock()
		defer mu.Unlock()
		if mode == lock.Shared {
			readers--
		} else {
			writer--
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < 24; i++ {
		mode := lock.Shared
		if i%3 == 0 {
			mode = lock.Exclusive
		}
		wg.Go(func() {
			for j := 0; j < 5; j++ {
				req := lock.AcquireRequest{Lock: "mix", Owner: fmt.Sprint("w", i), Mode: mode, Fair: i%2 == 0, TTL: time.Minute}
				g, err := lock.AcquireWait(bg, s, req, 30*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				enter(mode)
				time.Sleep(time.Millisecond)
				leave(mode)
				if _, err := s.Release(bg, lock.LeaseRef{Lock: "mix", ID: g.Lease.ID}, false); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if st := storetest.Inspect(t, s, "mix"); st.Held || st.Queue != 0 {
		t.Fatalf("state after every waiter left = %+v", st)
	}
}
