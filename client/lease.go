package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lockapi/lockapi/client/api"
)

// Lease is a held lock. A watchdog goroutine renews it every TTL/3 until
// Release, or until it is lost: then Lost and Done are closed and Err says
// why. A loss watch (a blocking query on the lock, or on its session for a
// bound lease) learns of a force release or an expiry within moments
// rather than at the next renewal; WithoutLossWatch turns it off.
//
// The watchdog retries renewals that fail in ways that may pass (network
// errors, 503, 429; see ErrUnavailable) with exponential backoff and jitter,
// but only while the lease is surely still held: it declares the lease lost
// once less than a safety margin (a fifth of the TTL) is left before the
// last expiry it can vouch for, since after that another holder may exist.
// A 410 answer is final at once.
//
// Holding is never certain: a process can pause past its lease. Pass Token
// to the resources you guard, and have them refuse smaller tokens than one
// they have seen.
type Lease struct {
	c          *Client
	name       string
	id         string
	owner      string
	token      uint64
	mode       string // "exclusive" or "shared"
	limit      int    // the semaphore's permits; 0 for a lock
	releaseAll bool   // the owner is unique to this lease: Release drops every hold
	bound      bool   // bound to a session, which renews it
	sess       *Session
	releaseURL string

	mu        sync.Mutex
	metadata  map[string]string // UpdateMetadata replaces it
	ttl       time.Duration
	holdCount int
	renewedAt time.Time // when the last successful acquire or renewal was sent
	err       error     // why the lease ended; nil while held
	gone      bool      // the server said the lease is gone (410)

	lost chan struct{} // closed when the lease is lost
	done chan struct{} // closed when the lease ends: lost or released

	watchCtx  context.Context // cancelled by Release to stop the watchdog
	stopWatch context.CancelFunc
	watchDone chan struct{} // closed when the watchdog has returned
	lossDone  chan struct{} // closed when the loss watch has returned

	releaseOnce sync.Once
	releaseErr  error
}

func newLease(c *Client, g *api.Lease, releaseAll bool, sent time.Time) *Lease {
	l := &Lease{
		c:          c,
		name:       g.Lock,
		id:         g.LeaseID,
		owner:      g.Owner,
		token:      uint64(g.FencingToken),
		metadata:   g.Metadata,
		mode:       string(g.Mode),
		limit:      int(g.Limit),
		releaseAll: releaseAll,
		releaseURL: g.ReleaseURL,
		ttl:        time.Duration(g.TTLMs) * time.Millisecond,
		holdCount:  int(g.HoldCount),
		renewedAt:  sent,
		lost:       make(chan struct{}),
		done:       make(chan struct{}),
		watchDone:  make(chan struct{}),
		lossDone:   make(chan struct{}),
	}
	l.watchCtx, l.stopWatch = context.WithCancel(context.Background())
	return l
}

// Name returns the lock's name.
func (l *Lease) Name() string { return l.name }

// Shared reports whether the lease is a read lease.
func (l *Lease) Shared() bool { return l.mode == string(api.LeaseModeShared) }

// Limit returns the semaphore's number of permits when the lease is a
// permit, else 0.
func (l *Lease) Limit() int { return l.limit }

// ID returns the lease id, the capability to renew and release the lease.
func (l *Lease) ID() string { return l.id }

// ReleaseURL returns the lease's signed release URL, relative to the
// server: a POST to it, with no API key, releases every hold (for a CI
// system or a webhook to end the lease). Keep it as secret as the ID.
func (l *Lease) ReleaseURL() string { return l.releaseURL }

// Owner returns the owner the lease was granted to.
func (l *Lease) Owner() string { return l.owner }

// Token returns the fencing token: larger than that of every earlier grant
// of the lock. A reentrant acquire returns the same token.
func (l *Lease) Token() uint64 { return l.token }

// Metadata returns the labels kept with the lease (do not modify), as
// acquired or last updated (UpdateMetadata).
func (l *Lease) Metadata() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.metadata
}

// TTL returns the lease's TTL as of the last acquire or renewal.
func (l *Lease) TTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// HoldCount returns how many reentrant holds the lease had as of the last
// acquire or renewal.
func (l *Lease) HoldCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holdCount
}

// ExpiresAt returns when the lease ends unless renewed, as far as this
// client can vouch for it: measured on the local clock from when the last
// successful acquire or renewal was sent, so never later than the server's
// own expiry.
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewedAt.Add(l.ttl)
}

// Lost returns a channel that is closed when the lease is lost: the loss
// watch saw the lock no longer held by it (force-released, expired, its
// session lost), a renewal or the release was answered 410, or no renewal
// succeeded in time. It is not closed by a successful Release.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Done returns a channel that is closed when the lease ends, lost or
// released.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err returns nil while the lease is held. After it ends, it returns an
// error wrapping ErrLeaseLost if the lease was lost, or ErrReleased.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Renew renews the lease now, for its full TTL, and reports whether it is
// still held: nil, or an error wrapping ErrLeaseLost once it is lost (the
// server answered 410, or no renewal succeeded before the safety margin
// ahead of its expiry; Lost is then closed). Other failures
// (ErrUnavailable, ctx) leave the lease as it was: try again, before
// ExpiresAt less the safety margin. A lease taken with
// AcquireOptions.Manual is renewed only this way; a watched one may be
// renewed early with it too. A lease bound to a session is renewed by its
// session: Renew of one returns an error.
func (l *Lease) Renew(ctx context.Context) error {
	if l.bound {
		return fmt.Errorf("lockapi: renew lock %q: the lease is bound to a session, which renews it", l.name)
	}
	if err := l.Err(); err != nil {
		return err
	}
	safe := l.safeDeadline()
	if !time.Now().Before(safe) {
		err := l.timeoutError(nil)
		l.end(err, true)
		return l.Err()
	}
	err := l.renewOnce(ctx, earliest(safe, time.Now().Add(l.c.timeout)))
	switch {
	case err == nil:
		return l.Err() // nil, unless it ended meanwhile
	case ctx.Err() != nil:
		return fmt.Errorf("lockapi: renew lock %q: %w", l.name, context.Cause(ctx))
	case errors.Is(err, ErrUnavailable):
		return fmt.Errorf("lockapi: renew lock %q: %w", l.name, err)
	}
	l.end(l.lostError(err), true)
	return l.Err()
}

// expire is the watchdog of a manual lease: it renews nothing, and ends
// the lease as lost once the safety margin ahead of its expiry is reached
// without a renewal (Renew moves that deadline on). Release stops it.
func (l *Lease) expire() {
	defer close(l.watchDone)
	for {
		safe := l.safeDeadline()
		if !sleepUntil(l.watchCtx, safe) {
			return
		}
		if !time.Now().Before(l.safeDeadline()) {
			l.end(&lostError{lock: l.name, leaseID: l.id, token: l.token,
				reason: fmt.Sprintf("it was not renewed (Lease.Renew) until %v before its expiry, after which another holder may exist", safetyMargin(l.TTL()))}, true)
			return
		}
	}
}

// Release stops the renewals and releases the lease: one hold, or every
// hold when AcquireOptions.Owner was empty. The watchdog has stopped before
// Release sends anything, and no renewal is sent after it returns.
//
// Release returns nil when the lease was held until released. When it was
// lost before, by the watchdog's account or because the server answers 410,
// it returns an error wrapping ErrLeaseLost: the guarded work may have
// overlapped with another holder's. Other failures (ErrUnavailable, ctx)
// are retried a few times while that is safe, then returned; the lease then
// ends by itself within its TTL. Release is idempotent: later calls send
// nothing and return the first call's result.
func (l *Lease) Release(ctx context.Context) error {
	l.releaseOnce.Do(func() { l.releaseErr = l.release(ctx) })
	return l.releaseErr
}

func (l *Lease) release(ctx context.Context) error {
	l.stopWatch()
	<-l.watchDone
	<-l.lossDone
	if l.sess != nil {
		l.sess.unregister(l)
	}

	l.mu.Lock()
	lostErr, gone := l.err, l.gone
	l.mu.Unlock()
	if errors.Is(lostErr, ErrReleased) {
		return nil // its session's Close released it
	}
	if lostErr != nil {
		if !gone {
			// Lost by the watchdog's timeout: the server may still hold the
			// lease, and releasing it frees the lock sooner.
			rctx, cancel := context.WithTimeout(ctx, attemptTimeout(l.TTL(), l.c.timeout))
			_ = l.delete(rctx)
			cancel()
		}
		return lostErr
	}

	err := l.deleteWithRetry(ctx)
	switch {
	case err == nil:
		l.end(ErrReleased, false)
		return nil
	case errors.Is(err, ErrLeaseLost):
		err = l.lostError(err)
		l.end(err, true)
		return err
	default:
		l.end(ErrReleased, false)
		return fmt.Errorf("lockapi: release lock %q, lease %s (it ends by itself within its TTL): %w", l.name, l.id, err)
	}
}

// releaseAttempts is how often Release sends its request at most.
const releaseAttempts = 3

// deleteWithRetry sends the release, and retries failures that may pass a
// few times: while the lease may still be held, ctx allows, and a retry
// cannot drop more holds than this lease has.
func (l *Lease) deleteWithRetry(ctx context.Context) error {
	idempotent := l.releaseAll || l.HoldCount() <= 1
	bo := newRenewBackoff(l.TTL())
	for attempt := 1; ; attempt++ {
		err := l.delete(ctx)
		if err == nil || ctx.Err() != nil || !idempotent || !errors.Is(err, ErrUnavailable) || attempt == releaseAttempts {
			return err
		}
		safe := l.safeDeadline()
		if !time.Now().Before(safe) || !sleepUntil(ctx, earliest(safe, time.Now().Add(bo.next()))) {
			return err
		}
	}
}

// delete sends one release request.
func (l *Lease) delete(ctx context.Context) error {
	var params *api.ReleaseLeaseParams
	if l.releaseAll {
		all := true
		params = &api.ReleaseLeaseParams{All: &all}
	}
	rctx, cancel := context.WithTimeout(ctx, l.c.timeout)
	defer cancel()
	resp, err := l.c.api.ReleaseLeaseWithResponse(rctx, l.name, l.id, params)
	switch {
	case err != nil && ctx.Err() != nil:
		return context.Cause(ctx)
	case err != nil:
		return unavailable(err)
	case resp.StatusCode() == 200:
		return nil
	}
	return responseError(l.name, resp.HTTPResponse, resp.Body)
}

// nextRenewal implements renewable.
func (l *Lease) nextRenewal() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewedAt.Add(l.ttl / 3)
}

// renewOnce sends one renewal that must be answered by deadline.
func (l *Lease) renewOnce(ctx context.Context, deadline time.Time) error {
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	sent := time.Now()
	resp, err := l.c.api.RenewLeaseWithResponse(rctx, l.name, l.id, api.RenewRequest{})
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return unavailable(err)
	}
	if resp.StatusCode() != 200 || resp.JSON200 == nil {
		err := responseError(l.name, resp.HTTPResponse, resp.Body)
		if errors.Is(err, ErrLeaseLost) {
			l.mu.Lock()
			l.gone = true
			l.mu.Unlock()
		}
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if sent.After(l.renewedAt) {
		l.renewedAt = sent
	}
	l.ttl = time.Duration(resp.JSON200.TTLMs) * time.Millisecond
	l.holdCount = int(resp.JSON200.HoldCount)
	return nil
}

// safeDeadline is when the watchdog gives the lease up: its expiry less
// the safety margin.
func (l *Lease) safeDeadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewedAt.Add(l.ttl - safetyMargin(l.ttl))
}

// lostError says why a lease was lost. It matches ErrLeaseLost, and
// unwraps to the failure that showed the loss, if any.
type lostError struct {
	lock, leaseID string
	token         uint64
	reason        string
	cause         error
}

func (e *lostError) Error() string {
	return fmt.Sprintf("lockapi: lease lost: lock %q, lease %s, fencing token %d: %s", e.lock, e.leaseID, e.token, e.reason)
}

func (e *lostError) Is(target error) bool { return target == ErrLeaseLost }
func (e *lostError) Unwrap() error        { return e.cause }

// lostError explains a loss shown by cause, an answer to a renewal or the
// release.
func (l *Lease) lostError(cause error) error {
	e := &lostError{lock: l.name, leaseID: l.id, token: l.token, cause: cause}
	var pe *ProblemError
	switch {
	case errors.As(cause, &pe) && pe.Status == http.StatusGone:
		e.reason = "the server no longer has it: it expired or was force-released"
		if pe.RequestID != "" {
			e.reason += " (request id " + pe.RequestID + ")"
		}
	default:
		e.reason = "the server refused to renew it: " + strings.TrimPrefix(cause.Error(), "lockapi: ")
	}
	return e
}

// timeoutError explains a loss by the watchdog's deadline; last is the
// last renewal's failure, if any.
func (l *Lease) timeoutError(last error) error {
	e := &lostError{lock: l.name, leaseID: l.id, token: l.token, cause: last,
		reason: fmt.Sprintf("no renewal succeeded until %v before its expiry, after which another holder may exist", safetyMargin(l.TTL()))}
	if last != nil {
		e.reason += "; last error: " + strings.TrimPrefix(last.Error(), "lockapi: ")
	} else {
		e.reason += "; none could even be sent in time (was this process paused or starved of CPU?)"
	}
	return e
}

// end records why the lease ended, once.
func (l *Lease) end(err error, lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.err = err
	close(l.done) // first: whoever sees Lost closed sees Done closed too
	if lost {
		close(l.lost)
	}
}

// safetyMargin is how long before a lease's expiry the watchdog gives up
// on renewing it: clock drift between this host and the store, and time for
// the holder to stop its work.
func safetyMargin(ttl time.Duration) time.Duration { return ttl / 5 }

// attemptTimeout bounds one renewal, so that a request lost in the network
// leaves time to retry. It is never below a second, so that a slow answer
// still counts; the safety deadline bounds every attempt anyway.
func attemptTimeout(ttl, limit time.Duration) time.Duration {
	return min(max(ttl/6, time.Second), limit)
}

// backoff yields exponentially growing pauses with jitter.
type backoff struct {
	cur, max time.Duration
}

func newBackoff(base, max time.Duration) *backoff { return &backoff{cur: base, max: max} }

// newRenewBackoff paces renewal retries to the TTL: the retries of one
// lease fit between TTL/3 and the safety margin.
func newRenewBackoff(ttl time.Duration) *backoff {
	base := min(max(ttl/30, 5*time.Millisecond), 500*time.Millisecond)
	return newBackoff(base, min(max(ttl/6, base), 5*time.Second))
}

// next returns the next pause: between half and all of the current step,
// which then doubles up to the maximum.
func (b *backoff) next() time.Duration {
	d := b.cur
	b.cur = min(2*b.cur, b.max)
	return d/2 + rand.N(d/2+1)
}
