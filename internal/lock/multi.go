package lock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// MaxMultiLocks bounds the names of one multi-lock.
const MaxMultiLocks = 64

// maxRetryJitter bounds the pause of a woken multi-lock before it tries its
// whole set again: multi-locks woken together by one release spread out, so
// that they do not keep taking and giving back each other's names.
const maxRetryJitter = 10 * time.Millisecond

// LockError is an error about one lock of several: AcquireAll's refusal
// names the lock that was in the way. Err is the store's error, so
// ErrorCode and AsError see through it.
type LockError struct {
	Lock string
	Err  error
}

func (e *LockError) Error() string { return fmt.Sprintf("lock %q: %v", e.Lock, e.Err) }

func (e *LockError) Unwrap() error { return e.Err }

// ValidateAll checks the requests of a multi-lock: 1 to MaxMultiLocks
// distinct valid names (the field "locks"), each request as Validate checks
// it, and none of what a multi-lock cannot do: fair queueing, semaphore
// limits, idempotency keys (a replayed grant could not be given back).
// A problem shared by several requests is reported once.
func ValidateAll(reqs []AcquireRequest) error {
	var fields []FieldError
	add := func(fe FieldError) {
		if !slices.Contains(fields, fe) {
			fields = append(fields, fe)
		}
	}
	names := make([]string, len(reqs))
	for i, r := range reqs {
		names[i] = r.Lock
	}
	if fe := CheckLocks("locks", names); fe != nil {
		add(*fe)
	}
	for _, r := range reqs {
		if r.Fair || r.WaiterID != "" {
			add(FieldError{Field: "fair", Detail: "a multi-lock does not queue"})
		}
		if r.Limit != 0 {
			add(FieldError{Field: "limit", Detail: "a multi-lock takes locks, not semaphore permits"})
		}
		if r.IdempotencyKey != "" {
			add(FieldError{Field: "Idempotency-Key", Detail: "not supported on a multi-lock"})
		}
		if err := r.Validate(); err != nil {
			for _, fe := range AsError(err).Fields {
				if fe.Field != "name" { // CheckLocks reported it as "locks"
					add(fe)
				}
			}
		}
	}
	if len(fields) > 0 {
		return Invalid(fields...)
	}
	return nil
}

// CheckLocks returns a field error unless names holds 1 to MaxMultiLocks
// valid lock names, none twice.
func CheckLocks(field string, names []string) *FieldError {
	if len(names) < 1 || len(names) > MaxMultiLocks {
		return &FieldError{Field: field, Detail: fmt.Sprintf("give 1-%d lock names (got %d)", MaxMultiLocks, len(names))}
	}
	seen := make(map[string]bool, len(names))
	for i, name := range names {
		if fe := CheckName(field, name); fe != nil {
			return &FieldError{Field: field, Detail: fmt.Sprintf("item %d: %s", i, fe.Detail)}
		}
		if seen[name] {
			return &FieldError{Field: field, Detail: fmt.Sprintf("%q appears more than once", name)}
		}
		seen[name] = true
	}
	return nil
}

// AcquireAll acquires every lock of reqs or none, waiting up to wait for
// them; with wait <= 0 it tries once. The grants are in the order of reqs,
// which passed ValidateAll: AcquireAll does not check them again.
//
// The names are taken one at a time in byte order of the name, the one
// order every multi-lock follows. A multi-lock never holds part of its set
// while it waits: when a name is held, it gives back exactly the holds it
// took (Abandon), waits for that name's release, and tries the whole set
// again. So overlapping multi-locks cannot deadlock, and the names need not
// share a store shard.
//
// The watch on the name in the way is registered before the next try, so a
// release in between is not missed. A refusal answers the error of the name
// in the way, as a *LockError.
//
// A caller whose ctx is cancelled keeps no grant: each try runs on a
// context the caller cannot cancel half-way, and the holds taken are given
// back. As for AcquireWait, a store that is briefly unavailable while
// waiting does not end the wait; only the first try fails at once.
func AcquireAll(ctx context.Context, s Store, reqs []AcquireRequest, wait time.Duration) ([]Grant, error) {
	grants, mwt, err := BeginAll(ctx, s, reqs, wait)
	if mwt == nil {
		return grants, err
	}
	return mwt.Wait(ctx)
}

// MultiWaiting is an AcquireAll that has made its tries, watches the name
// in the way and is about to sleep: BeginAll's answer when the set stays
// out of reach. Wait sleeps and tries again until the call is answered;
// Park does the same with no goroutine while it sleeps, as Waiting's do.
type MultiWaiting struct {
	s        Store
	reqs     []AcquireRequest
	order    []int
	mw       multiWait
	deadline time.Time
	// retryAt and last are the last try's: when to try again without a
	// wake-up (zero: only on one), and its refusal, the answer if the wait
	// runs out. pausing: retryAt ends the pause after a wake-up.
	retryAt time.Time
	last    error
	pausing bool

	answer func([]Grant, error) // Park's
}

// BeginAll makes AcquireAll's tries up to its first sleep. With a nil
// *MultiWaiting, grants and err are AcquireAll's answer. Otherwise the
// caller must call the MultiWaiting's Wait or Park, once, for the answer;
// ctx need only last until BeginAll returns.
func BeginAll(ctx context.Context, s Store, reqs []AcquireRequest, wait time.Duration) ([]Grant, *MultiWaiting, error) {
	order := byName(reqs)
	grants, err := takeAll(ctx, s, reqs, order)
	if wait <= 0 || !waitMends(err) {
		return grants, nil, err
	}
	mwt := &MultiWaiting{s: s, reqs: reqs, order: order, deadline: time.Now().Add(wait),
		mw: multiWait{s: s, backoff: minUnavailableBackoff}}
	tried := false
	defer func() {
		if !tried { // a try panicked: the watch goes
			mwt.mw.drop()
		}
	}()
	grants, err, done := mwt.refused(ctx, err)
	tried = true
	if done {
		mwt.mw.drop()
		return grants, nil, err
	}
	return nil, mwt, nil
}

// Wait sleeps until a wake-up, a retry, the deadline or ctx's end, and tries
// again, until the call is answered: AcquireAll's answer. As Waiting's, it
// is Park with the caller's goroutine blocked for the answer.
func (mwt *MultiWaiting) Wait(ctx context.Context) ([]Grant, error) {
	return waitFor(ctx, mwt.Park)
}

// try tries the whole set and takes in the answer: done when it is the
// call's.
func (mwt *MultiWaiting) try(ctx context.Context) ([]Grant, error, bool) {
	grants, err := takeAll(ctx, mwt.s, mwt.reqs, mwt.order)
	if err == nil {
		mwt.mw.granted(grants, mwt.reqs)
		return grants, nil, true
	}
	return mwt.refused(ctx, err)
}

// refused takes in a try's refusal: it tries again at once while another
// name is found in the way (to watch it first), and is done when the
// refusal or a grant is the call's answer.
func (mwt *MultiWaiting) refused(ctx context.Context, err error) ([]Grant, error, bool) {
	for {
		retryIn, again, fatal := mwt.mw.next(ctx, err)
		if fatal != nil {
			return nil, fatal, true
		}
		if !again {
			mwt.last, mwt.retryAt = err, time.Time{}
			if retryIn > 0 {
				mwt.retryAt = time.Now().Add(retryIn)
			}
			return nil, nil, false
		}
		var grants []Grant
		if grants, err = takeAll(ctx, mwt.s, mwt.reqs, mwt.order); err == nil {
			mwt.mw.granted(grants, mwt.reqs)
			return grants, nil, true
		}
	}
}

// Park is Wait for a caller that keeps no goroutine while the wait sleeps,
// as Waiting.Park is.
func (mwt *MultiWaiting) Park(ctx context.Context, answer func([]Grant, error)) (wake func()) {
	p := newParking(ctx, mwt, mwt.deadline)
	mwt.answer = answering(p, answer)
	return p.start()
}

// sleeping implements parkable. A pause after a wake-up looks at no
// wake-up, as sleep's pause does not.
func (mwt *MultiWaiting) sleeping() (Watcher, time.Time) {
	if mwt.pausing {
		return nil, mwt.retryAt
	}
	return mwt.mw.w, mwt.retryAt
}

// step implements parkable: one round of Wait's loop, on what is due now.
// A wake-up starts the pause (sleep's jitter) as a retry.
func (mwt *MultiWaiting) step(ctx context.Context) (answer func()) {
	now := time.Now()
	retryDue := !mwt.retryAt.IsZero() && !now.Before(mwt.retryAt)
	over := ctx.Err() != nil || !now.Before(mwt.deadline)
	if mwt.pausing {
		switch {
		case over:
			return mwt.answering(nil, leaveErr(ctx, mwt.last))
		case !retryDue:
			return nil
		}
		mwt.pausing = false
	} else {
		var woken <-chan struct{}
		if mwt.mw.w != nil {
			woken = mwt.mw.w.C()
		}
		select {
		case <-woken:
			mwt.mw.woken, mwt.pausing = true, true
			mwt.retryAt = now.Add(rand.N(maxRetryJitter))
			return nil
		default:
		}
		switch {
		case ctx.Err() != nil:
			return mwt.answering(nil, ctx.Err())
		case retryDue:
		case over:
			return mwt.answering(nil, mwt.last)
		default:
			return nil
		}
	}
	if grants, err, done := mwt.try(ctx); done {
		return mwt.answering(grants, err)
	}
	return nil
}

// answering is a parked wait's end: the watch closed, then the answer. The
// answer stands, grants above all: a panic in drop does not replace it.
func (mwt *MultiWaiting) answering(grants []Grant, err error) func() {
	return func() {
		_ = recovered(mwt.mw.drop)
		mwt.answer(grants, err)
	}
}

// abort implements parkable, as Waiting's does.
func (mwt *MultiWaiting) abort(_ context.Context, err error) func() {
	return func() {
		_ = recovered(mwt.mw.drop)
		mwt.answer(nil, err)
	}
}

// byName is the order a multi-lock takes its requests in: by name, in byte
// order, the one order every multi-lock follows.
func byName(reqs []AcquireRequest) []int {
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case reqs[a].Lock < reqs[b].Lock:
			return -1
		case reqs[a].Lock > reqs[b].Lock:
			return 1
		}
		return 0
	})
	return order
}

// multiWait is a waiting multi-lock's state between tries.
type multiWait struct {
	s Store
	// w watches the name in the way, watching; woken: the last try was
	// made because of a wake-up of w, which nobody has acted on if that
	// try failed short of the name; leaving then, pass it on.
	w        Watcher
	watching string
	woken    bool
	backoff  time.Duration
}

// next decides what a failed try calls for: a watch on another name in the
// way and a try at once (again), a wait for a wake-up or for retry (how
// soon to try again without one; 0: only on one), or the end of the wait
// with fatal.
func (mw *multiWait) next(ctx context.Context, err error) (retry time.Duration, again bool, fatal error) {
	var e *Error
	errors.As(err, &e)
	var le *LockError
	errors.As(err, &le)
	switch {
	case e != nil && e.Code == CodeHeld && le == nil: // takeAll names the lock; never
		return 0, false, err
	case e != nil && e.Code == CodeHeld && le.Lock != mw.watching:
		// Another name is in the way: watch it, then try again, so that
		// its release between that try and the wait is not missed.
		mw.drop()
		w, err := mw.s.Watch(ctx, le.Lock, WaitForRelease)
		mw.w = w
		if err != nil {
			return 0, false, err
		}
		mw.watching = le.Lock
		return 0, true, nil
	case e != nil && e.Code == CodeHeld:
		// The name watched is still in the way: whoever took it will
		// wake the watch when it lets go.
		mw.woken, mw.backoff = false, minUnavailableBackoff
		if e.HeldBy != nil {
			mw.w.ExpectExpiry(time.Now().Add(e.HeldBy.ExpiresIn))
		}
		return 0, false, nil
	case e != nil && e.Code == CodeLockDelay:
		// Nothing publishes the delay's end: look again then.
		return max(e.RetryIn, time.Nanosecond), false, nil
	case e != nil && e.Code == CodeUnavailable:
		retry = mw.backoff
		mw.backoff = min(2*mw.backoff, maxUnavailableBackoff)
		return retry, false, nil
	default: // an error that waiting will not mend
		return 0, false, err
	}
}

// granted passes on the wake-up that led to grants when the release that
// woke this waiter may admit more than one: another reader, another
// permit.
func (mw *multiWait) granted(grants []Grant, reqs []AcquireRequest) {
	if mw.woken && passesOn(grants, reqs, mw.watching) {
		_ = recovered(mw.w.PassOn) // a panic there must not lose the grants
	}
	mw.woken = false
}

// drop closes the watch, passing on a wake-up nobody acted on.
func (mw *multiWait) drop() {
	if mw.w != nil {
		if mw.woken {
			mw.w.PassOn()
		}
		mw.w.Close()
		mw.w, mw.woken = nil, false
	}
}

// leaveErr is the error of a wait that ended during a pause: the caller's
// cancellation, or else the last refusal.
func leaveErr(ctx context.Context, last error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return last
}

// passesOn reports whether the grant of name admits others after it too.
func passesOn(grants []Grant, reqs []AcquireRequest, name string) bool {
	for i, r := range reqs {
		if r.Lock == name {
			return grants[i].Lease.Mode == Shared || grants[i].Lease.Limit > 0
		}
	}
	return false
}

// takeAll makes one pass over the names in order. On a refusal it gives
// back exactly the holds it took and answers the refusal as a *LockError;
// a caller whose ctx is cancelled keeps nothing.
//
// A try that panics gives back the holds taken before it, then panics on.
func takeAll(ctx context.Context, s Store, reqs []AcquireRequest, order []int) ([]Grant, error) {
	grants := make([]Grant, len(reqs))
	taken := 0 // the holds order[:taken] are taken, and not given back
	defer func() {
		if v := recover(); v != nil {
			_ = recovered(func() { giveBack(ctx, s, reqs, grants, order[:taken]) })
			panic(v)
		}
	}()
	for n, i := range order {
		g, err := tryAcquire(ctx, s, reqs[i])
		if err != nil {
			taken = 0
			giveBack(ctx, s, reqs, grants, order[:n])
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &LockError{Lock: reqs[i].Lock, Err: err}
		}
		grants[i] = g
		taken = n + 1
	}
	if err := ctx.Err(); err != nil {
		taken = 0
		giveBack(ctx, s, reqs, grants, order)
		return nil, err
	}
	return grants, nil
}

// giveBack abandons the grants of the requests taken, newest first, on a
// context the caller cannot cancel: a hold left behind would keep its name
// until the lease's TTL. A store that cannot be reached undoes them later
// (the Redis store's reaper retries an abandon until Redis answers).
func giveBack(ctx context.Context, s Store, reqs []AcquireRequest, grants []Grant, taken []int) {
	for _, i := range slices.Backward(taken) {
		callCtx, stop := uncancellable(ctx)
		_ = s.Abandon(callCtx, reqs[i].Lock, grants[i].RequestID)
		stop()
	}
}
