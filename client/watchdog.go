package client

import (
	"context"
	"errors"
	"time"
)

// renewable is what a watchdog keeps alive: a lease, or a session (which
// keeps its bound leases alive with it). Both renew by the same rules.
type renewable interface {
	TTL() time.Duration
	// nextRenewal is when the next renewal is due: the last one plus a
	// third of the TTL.
	nextRenewal() time.Time
	// safeDeadline is when it is given up: its expiry less the safety
	// margin.
	safeDeadline() time.Time
	// renewOnce sends one renewal that must be answered by deadline.
	renewOnce(ctx context.Context, deadline time.Time) error
	// timeoutError explains a loss by safeDeadline; last is the last
	// renewal's failure, if any.
	timeoutError(last error) error
	// lostError explains a loss shown by a renewal's answer.
	lostError(cause error) error
	// end records why it ended, once.
	end(err error, lost bool)
}

// watch is the watchdog of r: it renews r every TTL/3 until ctx ends (a
// release or a close) or r is lost, and closes done when it returns.
// callTimeout bounds one renewal's request.
func watch(ctx context.Context, r renewable, callTimeout time.Duration, done chan<- struct{}) {
	defer close(done)
	for {
		if !sleepUntil(ctx, r.nextRenewal()) {
			return
		}
		if err := keepAlive(ctx, r, callTimeout); err != nil {
			if ctx.Err() != nil {
				return // stopped by its owner, not lost
			}
			r.end(err, true)
			return
		}
	}
}

// keepAlive renews r, retrying failures that may pass (ErrUnavailable)
// until the safety margin before r's expiry; any other refusal is a loss.
func keepAlive(ctx context.Context, r renewable, callTimeout time.Duration) error {
	bo := newRenewBackoff(r.TTL())
	var last error
	for {
		safe := r.safeDeadline()
		if !time.Now().Before(safe) {
			return r.timeoutError(last)
		}
		err := r.renewOnce(ctx, earliest(safe, time.Now().Add(attemptTimeout(r.TTL(), callTimeout))))
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !errors.Is(err, ErrUnavailable):
			return r.lostError(err)
		}
		last = err
		if !sleepUntil(ctx, earliest(safe, time.Now().Add(bo.next()))) {
			return ctx.Err()
		}
	}
}
