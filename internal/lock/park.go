package lock

import (
	"context"
	"sync/atomic"
	"time"
)

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
	looking       atomic.Bool
	notified      Watcher // the watcher whose wake-ups call wake
	deadlineTimer *time.Timer
	retry         *time.Timer
}

// park parks wait until deadline, and returns its wake (see Waiting.Park).
func park(ctx context.Context, wait parkable, deadline time.Time) (wake func()) {
	p := &parking{ctx: ctx, wait: wait, deadline: deadline}
	p.looking.Store(true) // until set up
	w, retryAt := wait.sleeping()
	p.notify(w)
	p.deadlineTimer = time.AfterFunc(time.Until(deadline), p.wake)
	p.armRetry(retryAt)
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
func (p *parking) look() {
	w, retryAt := p.wait.sleeping()
	for {
		if p.due(w, retryAt) {
			if answer := p.wait.step(p.ctx); answer != nil {
				p.deadlineTimer.Stop()
				if p.retry != nil {
					p.retry.Stop()
				}
				if p.notified != nil {
					p.notified.Notify(nil)
				}
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
