package lock

import (
	"context"
	"sync"
	"time"
)

// uncancellable returns a context for one store call made on behalf of
// ctx's caller: it carries ctx's values, ignores ctx's cancellation (a
// script that ran but whose answer was dropped would grant a lease nobody
// knows about) and ends storeCallTimeout from now. Call stop when the call
// has returned.
//
// It is context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
// made lazily: the timer behind it is set only when the store asks for
// the context's Done channel (a call that waits on something: a Redis
// round trip). A store that answers from memory never asks, and every
// plain acquire then saves the timer and two of the three allocations.
// The deadline is fixed now either way, and Deadline, Err and Done agree
// on it whenever they are asked.
func uncancellable(ctx context.Context) (_ context.Context, stop func()) {
	return uncancellableFor(ctx, storeCallTimeout)
}

func uncancellableFor(ctx context.Context, timeout time.Duration) (_ context.Context, stop func()) {
	c := &callContext{Context: context.WithoutCancel(ctx), deadline: time.Now().Add(timeout)}
	return c, c.stop
}

// callContext is uncancellable's context. The embedded context (a
// context.WithoutCancel) answers Value; timed, once made, answers Done and
// Err.
type callContext struct {
	context.Context
	deadline time.Time

	mu      sync.Mutex
	timed   context.Context
	cancel  context.CancelFunc
	stopped bool
}

// timer returns the context with the timer, made on first use.
func (c *callContext) timer() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timed == nil {
		c.timed, c.cancel = context.WithDeadline(c.Context, c.deadline)
		if c.stopped {
			c.cancel()
		}
	}
	return c.timed
}

func (c *callContext) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *callContext) Done() <-chan struct{} { return c.timer().Done() }

// Err answers as the timer's context would: nil until the deadline or
// stop. Without the timer's context it makes none, but for the deadline
// having passed; Done, asked later, makes one that has ended.
func (c *callContext) Err() error {
	c.mu.Lock()
	timed, stopped := c.timed, c.stopped
	c.mu.Unlock()
	switch {
	case timed != nil:
		return timed.Err()
	case stopped:
		return context.Canceled
	case time.Now().Before(c.deadline):
		return nil
	}
	return c.timer().Err()
}

// AfterFunc lets context.WithCancel and context.AfterFunc under this
// context hook onto the timer's context rather than start a goroutine
// each to watch Done.
func (c *callContext) AfterFunc(f func()) (stop func() bool) {
	return context.AfterFunc(c.timer(), f)
}

// stop ends the context, as a CancelFunc does: Err is not nil from now on.
func (c *callContext) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	if c.cancel != nil {
		c.cancel()
	}
}

func (c *callContext) String() string { return "lock.uncancellable" }
