package lock

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// PanicError is a panic recovered from a wait's look: a store call that
// panicked. No goroutine of the caller's is there to recover it, so the
// wait does, and answers it wrapped in a CodeInternal *Error; the server
// answers it as it answers a handler's panic (500, logged with its stack).
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// recovered runs f and returns its panic, if any, as a *PanicError.
func recovered(f func()) (pe *PanicError) {
	defer func() {
		if v := recover(); v != nil {
			pe = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	f()
	return nil
}

// parkable is a wait that a parking drives with no goroutine of its own
// while it sleeps: a single acquire's Waiting or a multi-lock's
// MultiWaiting.
type parkable interface {
	// sleeping is what the wait sleeps on now: the watch whose wake-ups
	// wake it (nil: none to look at) and when to try again without one
	// (zero: only on a wake-up).
	sleeping() (w Watcher, retryAt time.Time)
	// step acts on what is due now, as the wait's loop does after its
	// sleep. It answers a func that ends the wait and calls its caller's
	// answer, or nil while the wait goes on.
	step(ctx context.Context) (answer func())
	// abort ends the wait with err, as an answer from step does: a look
	// that panicked ends so.
	abort(ctx context.Context, err error) (answer func())
}

// parking is a parked wait's state: callbacks on its watcher, the deadline
// and the retry wake it, and so does its caller when ctx ends, and each
// wake-up looks at the wait on a goroutine of its own, which ends when it
// has looked. While the locks stay held nothing of the wait runs, and no
// goroutine is kept.
type parking struct {
	ctx      context.Context
	wait     parkable
	deadline time.Time
	// looking: a goroutine looks at the wait now, or the wait is
	// answered; wake-ups meanwhile are left to it. What follows is touched
	// only by the one looking.
	looking atomic.Bool
	// answered: the caller's answer has been called (see answered).
	answered      bool
	notified      Watcher // the watcher whose wake-ups call wake
	deadlineTimer *time.Timer
	retry         *time.Timer
}

// waitFor is a parked wait's answer for a caller that blocks for it: the
// goroutine path of the one wait state machine (parking and the wait's
// step), which the parked path drives with no goroutine. ctx's end wakes
// the wait, as internal/http's watch wakes a parked one.
func waitFor[T any](ctx context.Context, park func(context.Context, func(T, error)) (wake func())) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	wake := park(ctx, func(v T, err error) { done <- result{v, err} })
	stop := context.AfterFunc(ctx, wake)
	r := <-done
	stop()
	return r.v, r.err
}

// newParking is a parking for wait until deadline, started by start.
func newParking(ctx context.Context, wait parkable, deadline time.Time) *parking {
	return &parking{ctx: ctx, wait: wait, deadline: deadline}
}

// answering wraps the caller's answer so that a panic in it is told from a
// panic of the wait's: the wait recovers its own, never the caller's.
func answering[T any](p *parking, answer func(T, error)) func(T, error) {
	return func(v T, err error) {
		p.answered = true
		answer(v, err)
	}
}

// start parks the wait, and returns its wake (see Waiting.Park).
//
// A panic while it sets up (a store's Notify) ends the wait as a look's
// panic does: what it set up is undone and the caller answered the
// *PanicError, on a goroutine of its own; looking stays set.
func (p *parking) start() (wake func()) {
	p.looking.Store(true) // until set up
	var w Watcher
	var retryAt time.Time
	if pe := recovered(func() {
		w, retryAt = p.wait.sleeping()
		p.notify(w)
		p.deadlineTimer = time.AfterFunc(time.Until(p.deadline), p.wake)
		p.armRetry(retryAt)
	}); pe != nil {
		go p.fail(pe)
		return p.wake
	}
	p.looking.Store(false)
	if p.due(w, retryAt) {
		p.wake()
	}
	return p.wake
}

// wake starts a look at the wait, unless one runs or the wait is answered.
func (p *parking) wake() {
	if p.looking.CompareAndSwap(false, true) {
		go p.look()
	}
}

// look acts on what woke the wait, until nothing is due or the wait is
// answered. What the wait sleeps on is read while looking is set: a look
// may start once it is clear.
//
// A look runs on a goroutine of its own, where a panic would end the
// process: a panic of the wait's (a store call) ends the wait instead,
// answered as a *PanicError. A panic in the caller's answer is the
// caller's to recover (internal/http does).
func (p *parking) look() {
	defer func() {
		if v := recover(); v != nil {
			if p.answered {
				panic(v)
			}
			p.fail(&PanicError{Value: v, Stack: debug.Stack()})
		}
	}()
	w, retryAt := p.wait.sleeping()
	for {
		if p.due(w, retryAt) {
			if answer := p.wait.step(p.ctx); answer != nil {
				// The answer stands, a grant above all: a panic while
				// the wait lets go of its wake-ups does not replace it.
				_ = recovered(p.stop)
				answer() // looking stays set: no more looks
				return
			}
			w, retryAt = p.wait.sleeping()
			p.notify(w)
			p.armRetry(retryAt)
		}
		p.looking.Store(false)
		// A wake-up while this look ran was left to it.
		if !p.due(w, retryAt) || !p.looking.CompareAndSwap(false, true) {
			return
		}
	}
}

// stop ends the timers and the wake-ups of an answered wait.
func (p *parking) stop() {
	if p.deadlineTimer != nil { // nil: start panicked before it
		p.deadlineTimer.Stop()
	}
	if p.retry != nil {
		p.retry.Stop()
	}
	if p.notified != nil {
		p.notified.Notify(nil)
	}
}

// fail ends a wait whose look panicked: with pe, as a CodeInternal error.
// looking stays set: no more looks.
func (p *parking) fail(pe *PanicError) {
	_ = recovered(p.stop) // a second panic: the first is the one answered
	p.wait.abort(p.ctx, &Error{Code: CodeInternal, Detail: "wait panicked", Err: pe})()
}

// due reports whether the wait has something to act on, sleeping on w
// with its retry at retryAt.
func (p *parking) due(w Watcher, retryAt time.Time) bool {
	now := time.Now()
	return (w != nil && len(w.C()) > 0) || p.ctx.Err() != nil || !now.Before(p.deadline) ||
		(!retryAt.IsZero() && !now.Before(retryAt))
}

// notify has w's wake-ups wake the wait: a multi-lock changes the name it
// watches. A nil w (nothing to look at for now) leaves the last one's.
func (p *parking) notify(w Watcher) {
	if w != nil && w != p.notified {
		w.Notify(p.wake)
		p.notified = w
	}
}

// armRetry sets the retry timer to retryAt.
func (p *parking) armRetry(retryAt time.Time) {
	if p.retry != nil {
		p.retry.Stop()
		p.retry = nil
	}
	if !retryAt.IsZero() {
		p.retry = time.AfterFunc(time.Until(retryAt), p.wake)
	}
}
