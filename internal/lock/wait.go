package lock

import (
	"context"
	"errors"
	"time"
)

// storeCallTimeout bounds one store call made on behalf of a waiter whose own
// context may be cancelled at any moment (see AcquireWait).
const storeCallTimeout = 5 * time.Second

// AcquireWait acquires the lock, waiting up to wait for it to become free.
// With wait <= 0 it tries once.
//
// The waiter is registered with s.Watch before its final try, so a release
// between that try and the wait is never missed. It then sleeps until the
// store signals a release, the holder's TTL runs out (expiry publishes
// nothing), the wait ends or ctx is cancelled: while the lock stays held it
// issues no store calls at all.
//
// A caller whose ctx is cancelled is never left holding a lock: each try runs
// on a context that the caller cannot cancel half-way (a script that ran but
// whose answer was dropped would grant a lease nobody knows about), and a
// grant that arrives after cancellation is released again.
//
// A try that finds the store unavailable while waiting does not end the
// wait: a failover wakes every waiter to look again at the moment the store
// switches masters, and those tries may fail. The waiter looks again after
// a backoff (25 ms doubling to 1 s) until the wait ends, and then answers
// with the last error. Only the first try, before any waiting, fails at once.
//
// A waiter may hold a place in the lock's queue (a fair acquire, or a writer
// that readers keep out; see docs/LOCK_KINDS.md). It renews the place by
// trying again every QueueRenewal, wakes when a notice names it the queue's
// head, and gives the place up when it leaves without the lock. With an
// Idempotency-Key the place is named after the key, and a wait that runs out
// keeps it for a repeat of the request until it lapses.
func AcquireWait(ctx context.Context, s Store, req AcquireRequest, wait time.Duration) (Grant, error) {
	g, wt, err := BeginWait(ctx, s, req, wait)
	if wt == nil {
		return g, err
	}
	return wt.Wait(ctx)
}

// Waiting is an AcquireWait that has made its tries, is registered with the
// store's watch and is about to sleep: BeginWait's answer when the lock
// stays out of reach. Wait sleeps and tries again until the call is
// answered; Park does the same with no goroutine while it sleeps
// (internal/http parks long-poll acquires so, freed of the request's
// goroutine and buffers).
type Waiting struct {
	s        Store
	req      AcquireRequest
	keep     bool
	sw       *singleWait
	deadline time.Time
	// started is when the call made its first try: each later try tells
	// the store how long it has waited (AcquireRequest.Waited).
	started time.Time
	// retryAt and last are the last try's: when to try again without a
	// wake-up (zero: only on one), and its refusal, the answer if the wait
	// runs out.
	retryAt time.Time
	last    error

	answer func(Grant, error) // Park's
}

// BeginWait makes AcquireWait's tries up to its first sleep. With a nil
// *Waiting, g and err are AcquireWait's answer. Otherwise the caller must
// call the Waiting's Wait or Park, once, for the answer; ctx need only last
// until BeginWait returns, and the wait may go on on another goroutine with
// another context.
func BeginWait(ctx context.Context, s Store, req AcquireRequest, wait time.Duration) (_ Grant, _ *Waiting, err error) {
	req, keep := withWaiterID(req, wait)
	started := time.Now()
	g, err := tryAcquire(ctx, s, req)
	if wait <= 0 || !waitMends(err) {
		return g, nil, err
	}
	wt := &Waiting{s: s, req: req, keep: keep, deadline: time.Now().Add(wait), started: started,
		sw: &singleWait{queued: heldBy(err).Queued, backoff: minUnavailableBackoff}}
	w, err := s.Watch(ctx, req.Lock, WaitForRelease)
	if err != nil {
		wt.finish(ctx)
		return Grant{}, nil, err
	}
	wt.sw.w = w
	tried := false
	defer func() {
		if !tried { // Join or the try panicked: the watch and queue place go
			wt.finish(ctx)
		}
	}()
	w.Join(req.WaiterID)
	g, err, done := wt.try(ctx)
	tried = true
	if done {
		wt.finish(ctx)
		return g, nil, err
	}
	return Grant{}, wt, nil
}

// Wait sleeps until a wake-up, a retry, the deadline or ctx's end, and tries
// again, until the call is answered: AcquireWait's answer. It is Park with
// the caller's goroutine blocked for the answer: one state machine (step)
// serves both.
func (wt *Waiting) Wait(ctx context.Context) (Grant, error) {
	return waitFor(ctx, wt.Park)
}

// try makes one try and takes in its answer: done when it is the call's.
func (wt *Waiting) try(ctx context.Context) (Grant, error, bool) {
	wt.req.Waited = time.Since(wt.started)
	g, err := tryAcquire(ctx, wt.s, wt.req)
	retryIn, done := wt.sw.next(g, err)
	if done {
		return g, err, true
	}
	wt.last, wt.retryAt = err, time.Time{}
	if retryIn > 0 {
		wt.retryAt = time.Now().Add(retryIn)
	}
	return Grant{}, nil, false
}

// finish undoes what the wait set up: the watch, and the waiter's queue
// place unless it is kept for a repeat of the request.
func (wt *Waiting) finish(ctx context.Context) {
	if wt.sw.w != nil {
		wt.sw.w.Close()
	}
	if wt.sw.queued && (!wt.keep || ctx.Err() != nil) {
		leave(ctx, wt.s, wt.req)
	}
}

// Park is Wait for a caller that keeps no goroutine while the wait sleeps:
// it returns at once, and calls answer with Wait's answer, once, on a
// goroutine of its own.
//
// Park does not watch ctx: its caller calls wake once ctx has ended (it
// knows when, and a context.AfterFunc would cost every parked wait a few
// hundred bytes more). wake may be called any time, from any goroutine.
func (wt *Waiting) Park(ctx context.Context, answer func(Grant, error)) (wake func()) {
	p := newParking(ctx, wt, wt.deadline)
	wt.answer = answering(p, answer)
	return p.start()
}

// sleeping implements parkable.
func (wt *Waiting) sleeping() (Watcher, time.Time) { return wt.sw.w, wt.retryAt }

// step implements parkable: one round of Wait's loop, on what is due now.
func (wt *Waiting) step(ctx context.Context) (answer func()) {
	now := time.Now()
	// Something is due (parking.due), so sleep returns at once.
	var deadline, retry <-chan time.Time
	if !now.Before(wt.deadline) {
		deadline = passed
	}
	if !wt.retryAt.IsZero() && !now.Before(wt.retryAt) {
		retry = passed
	}
	if err := wt.sw.sleep(ctx, wt.req.Mode, deadline, retry, wt.last); err != nil {
		return wt.answering(ctx, Grant{}, err)
	}
	if g, err, done := wt.try(ctx); done {
		return wt.answering(ctx, g, err)
	}
	return nil
}

// answering is a parked wait's end: finish, then the answer. The answer
// stands, a grant above all: a panic in finish does not replace it.
func (wt *Waiting) answering(ctx context.Context, g Grant, err error) func() {
	return func() {
		_ = recovered(func() { wt.finish(ctx) })
		wt.answer(g, err)
	}
}

// abort implements parkable: the wait's end with err. What it set up is
// undone as far as it can be: a second panic there is dropped, the first
// is the one answered.
func (wt *Waiting) abort(ctx context.Context, err error) func() {
	return func() {
		_ = recovered(func() { wt.finish(ctx) })
		wt.answer(Grant{}, err)
	}
}

// passed is a channel that has delivered: a time that has come.
var passed = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// withWaiterID names a waiting request's waiter, unless the caller did.
// keep reports a waiter named after the Idempotency-Key: its queue place
// outlives this call when its wait runs out, for a repeat of the request
// (same key) to take up.
func withWaiterID(req AcquireRequest, wait time.Duration) (_ AcquireRequest, keep bool) {
	if wait > 0 && req.WaiterID == "" {
		req.WaiterID = NewWaiterID(req)
		if req.IdempotencyKey != "" {
			req.WaiterID, keep = StableWaiterID(req), true
		}
	}
	return req, keep
}

// singleWait is a waiting AcquireWait's state between tries.
type singleWait struct {
	w Watcher
	// woken: the last try was made because of a wake-up, which nobody has
	// acted on if that try failed; leaving then, pass it on.
	woken   bool
	backoff time.Duration
	// queued: the waiter may hold a place in the lock's queue, which it
	// gives up when it leaves without the lock, unless it keeps the place
	// for its repeat (the place lapses unless renewed, see QueueEntryTTL).
	queued bool
}

// next takes in a try's answer: done when it is the call's answer (a grant,
// or an error that waiting will not mend), else retry, how soon to try again
// without a wake-up (0: only on a wake-up).
func (sw *singleWait) next(g Grant, err error) (retry time.Duration, done bool) {
	var e *Error
	errors.As(err, &e)
	switch {
	case e != nil && e.Code == CodeHeld:
		sw.w.ExpectExpiry(time.Now().Add(e.HeldBy.ExpiresIn))
		sw.woken, sw.backoff = false, minUnavailableBackoff
		if e.HeldBy.Queued {
			// Trying again is what renews the queue place.
			sw.queued = true
			return QueueRenewal, false
		}
		return 0, false
	case e != nil && e.Code == CodeLockDelay:
		// Nothing publishes the delay's end: look again then.
		sw.woken = false
		return max(e.RetryIn, time.Nanosecond), false
	case e != nil && e.Code == CodeUnavailable:
		retry = sw.backoff
		sw.backoff = min(2*sw.backoff, maxUnavailableBackoff)
		return retry, false
	}
	if err == nil {
		sw.queued = false // a grant takes the waiter out of the queue
		if sw.woken && g.Lease.Limit > 0 {
			// The release that woke this waiter may have freed more than
			// one permit (others expired). A panic there must not lose the grant.
			_ = recovered(sw.w.PassOn)
		}
	} else if sw.woken {
		sw.w.PassOn()
	}
	return 0, true
}

// sleep waits for the next try: a wake-up or retry. It returns the error
// to leave with when the wait or ctx ends first (last is the last try's),
// and nil to try again.
func (sw *singleWait) sleep(ctx context.Context, mode Mode, deadline, retry <-chan time.Time, last error) error {
	select {
	case <-sw.w.C():
		sw.woken = true
		if mode == Shared {
			// A release that lets one reader in lets every reader in:
			// wake the next waiter now, not after this try, so that the
			// readers try side by side.
			sw.w.PassOn()
			sw.woken = false
		}
		return nil
	case <-retry:
		return nil
	case <-deadline:
		if sw.woken {
			sw.w.PassOn()
		}
		return last
	case <-ctx.Done():
		if sw.woken {
			sw.w.PassOn()
		}
		return ctx.Err()
	}
}

// nextUnpublished returns when st changes next without a store write
// telling it: the first lease to end, or the lock-delay. ok is false when
// nothing of st ends by itself.
func nextUnpublished(st State) (next time.Duration, ok bool) {
	// Readers and permits have no Holder: look at every lease.
	for _, h := range st.Holders {
		if !ok || h.ExpiresIn < next {
			next, ok = h.ExpiresIn, true
		}
	}
	if st.LockDelay > 0 && (!ok || st.LockDelay < next) {
		next, ok = st.LockDelay, true
	}
	return next, ok
}

// waitMends reports whether a first try's refusal is one that waiting may
// turn into a grant: the lock is held, or closed for a lock-delay.
func waitMends(err error) bool {
	c := ErrorCode(err)
	return c == CodeHeld || c == CodeLockDelay
}

// heldBy returns the HeldBy of a CodeHeld error, or an empty one.
func heldBy(err error) HeldBy {
	var e *Error
	if errors.As(err, &e) && e.HeldBy != nil {
		return *e.HeldBy
	}
	return HeldBy{}
}

// leave gives up a waiter's queue place on a context its caller cannot
// cancel: the place would otherwise hold up the queue until it lapses.
func leave(ctx context.Context, s Store, req AcquireRequest) {
	callCtx, stop := uncancellable(ctx)
	defer stop()
	_ = s.Leave(callCtx, req.Lock, req.WaiterID)
}

// The backoff of a waiter whose tries find the store unavailable.
const (
	minUnavailableBackoff = 25 * time.Millisecond
	maxUnavailableBackoff = time.Second
)

// tryAcquire makes one uncancellable try and undoes a grant the caller can no
// longer receive.
func tryAcquire(ctx context.Context, s Store, req AcquireRequest) (Grant, error) {
	if err := ctx.Err(); err != nil {
		return Grant{}, err
	}
	callCtx, stop := uncancellable(ctx)
	defer stop()
	g, err := s.TryAcquire(callCtx, req)
	if err == nil && ctx.Err() != nil {
		// Undo just the hold this acquire added, so the caller's earlier
		// holds stay intact.
		_ = s.Abandon(callCtx, req.Lock, g.RequestID)
		return Grant{}, ctx.Err()
	}
	return g, err
}
