package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lockapi/lockapi/client/api"
)

// ErrSessionLost means the session ended without Close: the server answered
// 410 session-lost (it was not renewed within its TTL, or someone deleted
// it), or no renewal succeeded in time. Every lease bound to it is lost
// too; stop the guarded work.
var ErrSessionLost = errors.New("lockapi: session lost")

// SessionOptions tunes a session (docs/SESSIONS.md). Every field is
// optional.
type SessionOptions struct {
	// TTL is how long the session, and every lease bound to it, lasts
	// unless renewed; 0 is the server's default (10s). The session renews
	// itself every TTL/3.
	TTL time.Duration
	// LockDelay is how long a lock stays closed to new grants after a lease
	// bound to the session ended by the session's expiry or a force
	// release, so that the lost holder's last writes land first. 0: none.
	LockDelay time.Duration
	// Owner names the session's holder; empty: a unique one.
	Owner string
}

// Session is a server-side session: one watchdog renews it, and with it
// every lease bound to it (Session.Acquire, Session.AcquireAll), whatever
// their number. When it is lost, Lost is closed and so is every bound
// lease's Lost. Close ends it and releases every bound lease at once.
type Session struct {
	c         *Client
	id        string
	owner     string
	lockDelay time.Duration

	mu        sync.Mutex
	ttl       time.Duration
	renewedAt time.Time // when the last successful create or renewal was sent
	err       error     // why the session ended; nil while it lives

	lost chan struct{} // closed when the session is lost
	done chan struct{} // closed when the session ends: lost or closed

	watchCtx  context.Context
	stopWatch context.CancelFunc
	watchDone chan struct{}

	// The loss watch (watchLeases): watching unless WithoutLossWatch;
	// bound are the bound leases it covers, each with the gen it was
	// registered at; requery makes it ask afresh.
	watching bool
	gen      uint64
	bound    map[*Lease]uint64
	requery  context.CancelFunc
	lossDone chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// NewSession starts a session and its watchdog.
func (c *Client) NewSession(ctx context.Context, opts SessionOptions) (*Session, error) {
	owner := opts.Owner
	if owner == "" {
		owner = uniqueOwner()
	}
	body := api.CreateSessionRequest{Owner: &owner}
	if opts.TTL > 0 {
		ms := ceilMs(opts.TTL)
		body.TTLMs = &ms
	}
	if opts.LockDelay > 0 {
		ms := ceilMs(opts.LockDelay)
		body.LockDelayMs = &ms
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	sent := time.Now()
	resp, err := c.api.CreateSessionWithResponse(rctx, body)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("lockapi: new session: %w", context.Cause(ctx))
	case err != nil:
		return nil, fmt.Errorf("lockapi: new session: %w", unavailable(err))
	case resp.JSON201 == nil:
		return nil, responseError("", resp.HTTPResponse, resp.Body)
	}
	g := resp.JSON201
	s := &Session{
		c:         c,
		id:        g.SessionID,
		owner:     g.Owner,
		lockDelay: time.Duration(g.LockDelayMs) * time.Millisecond,
		ttl:       time.Duration(g.TTLMs) * time.Millisecond,
		renewedAt: sent,
		lost:      make(chan struct{}),
		done:      make(chan struct{}),
		watchDone: make(chan struct{}),
		watching:  c.lossWatch,
		bound:     make(map[*Lease]uint64),
		lossDone:  make(chan struct{}),
	}
	s.watchCtx, s.stopWatch = context.WithCancel(context.Background())
	go watch(s.watchCtx, s, c.timeout, s.watchDone)
	if s.watching {
		go s.watchLeases()
	} else {
		close(s.lossDone)
	}
	return s, nil
}

// ID returns the session's id.
func (s *Session) ID() string { return s.id }

// Owner returns the session's owner.
func (s *Session) Owner() string { return s.owner }

// TTL returns the session's TTL.
func (s *Session) TTL() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ttl
}

// Lost returns a channel that is closed when the session is lost: the
// server answered 410 or 404 to a renewal or to the loss watch (a blocking
// query on the session, which learns of it within moments), or no renewal
// succeeded in time. It is not closed by Close.
func (s *Session) Lost() <-chan struct{} { return s.lost }

// Done returns a channel that is closed when the session ends, lost or
// closed.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns nil while the session lives; after, an error wrapping
// ErrSessionLost if it was lost, or ErrReleased after Close.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Acquire acquires the lock name bound to the session: it has no TTL or
// watchdog of its own (opts.TTL is ignored), lives as long as the session,
// and its Lost closes when the session is lost. Release releases it alone.
func (s *Session) Acquire(ctx context.Context, name string, opts AcquireOptions) (*Lease, error) {
	return s.c.acquire(ctx, name, opts, s)
}

// AcquireAll acquires every lock in names, or none, each bound to the
// session (see Client.AcquireAll and Session.Acquire).
func (s *Session) AcquireAll(ctx context.Context, names []string, opts AcquireOptions) ([]*Lease, error) {
	return s.c.acquireAll(ctx, names, opts, s)
}

// bind makes an acquire body's lease bound to s: its session, and no TTL.
// A nil s leaves the body as it is.
func (s *Session) bind(session **api.SessionID, ttlMs **int64) {
	if s == nil {
		return
	}
	id := s.id
	*session, *ttlMs = &id, nil
}

// Close stops the watchdog and ends the session on the server, which
// releases every bound lease at once (no lock-delay). It returns an error
// wrapping ErrSessionLost when the session was lost before. Close is
// idempotent.
func (s *Session) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.close(ctx) })
	return s.closeErr
}

func (s *Session) close(ctx context.Context) error {
	s.stopWatch()
	<-s.watchDone
	<-s.lossDone
	if err := s.Err(); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, s.c.timeout)
	defer cancel()
	resp, err := s.c.api.DeleteSessionWithResponse(rctx, s.id)
	switch {
	case err != nil && ctx.Err() != nil:
		err = context.Cause(ctx)
	case err != nil:
		err = unavailable(err)
	case resp.StatusCode() == http.StatusOK:
		s.end(ErrReleased, false)
		return nil
	default:
		err = responseError("", resp.HTTPResponse, resp.Body)
	}
	if gone(err) {
		err = s.lostError(err)
		s.end(err, true)
		return err
	}
	s.end(ErrReleased, false)
	return fmt.Errorf("lockapi: close session %s (it ends by itself within its TTL): %w", s.id, err)
}

// nextRenewal implements renewable.
func (s *Session) nextRenewal() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewedAt.Add(s.ttl / 3)
}

// timeoutError implements renewable.
func (s *Session) timeoutError(last error) error {
	return &sessionLostError{id: s.id, cause: last, reason: "no renewal succeeded in time, after which its leases may have other holders"}
}

func (s *Session) renewOnce(ctx context.Context, deadline time.Time) error {
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	sent := time.Now()
	resp, err := s.c.api.RenewSessionWithResponse(rctx, s.id, api.RenewSessionRequest{})
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return unavailable(err)
	}
	if resp.JSON200 == nil {
		return responseError("", resp.HTTPResponse, resp.Body)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sent.After(s.renewedAt) {
		s.renewedAt = sent
	}
	s.ttl = time.Duration(resp.JSON200.TTLMs) * time.Millisecond
	return nil
}

func (s *Session) safeDeadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewedAt.Add(s.ttl - safetyMargin(s.ttl))
}

// end records why the session ended, once.
func (s *Session) end(err error, lost bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	s.err = err
	close(s.done)
	if lost {
		close(s.lost)
	}
}

// gone reports whether err is the server's word that the session is no
// more: 410 session-lost, or 404 (it was forgotten).
func gone(err error) bool {
	var pe *ProblemError
	return errors.As(err, &pe) && (pe.Status == http.StatusGone || pe.Status == http.StatusNotFound)
}

// sessionLostError says why a session was lost; it matches ErrSessionLost
// and ErrLeaseLost (its leases are lost with it).
type sessionLostError struct {
	id     string
	reason string
	cause  error
}

func (e *sessionLostError) Error() string {
	msg := fmt.Sprintf("lockapi: session lost: %s: %s", e.id, e.reason)
	if e.cause != nil {
		msg += "; last error: " + strings.TrimPrefix(e.cause.Error(), "lockapi: ")
	}
	return msg
}

func (e *sessionLostError) Is(target error) bool {
	return target == ErrSessionLost || target == ErrLeaseLost
}

func (e *sessionLostError) Unwrap() error { return e.cause }

func (s *Session) lostError(cause error) error {
	reason := "the server refused to renew it"
	if gone(cause) {
		reason = "the server no longer has it: it expired or was deleted"
	}
	return &sessionLostError{id: s.id, reason: reason, cause: cause}
}

// follow ends a lease bound to sess when the session ends, or returns when
// the lease is released (Release stops watchCtx): a bound lease's
// watchdog.
func (l *Lease) follow(sess *Session) {
	defer close(l.watchDone)
	select {
	case <-sess.Done():
	case <-l.watchCtx.Done():
		return
	}
	l.mu.Lock()
	l.gone = true // the server dropped it with the session
	l.mu.Unlock()
	// Err is set, under the session's mutex, before Done closes.
	if err := sess.Err(); errors.Is(err, ErrSessionLost) {
		l.end(&lostError{lock: l.name, leaseID: l.id, token: l.token, cause: err, reason: "its session was lost"}, true)
		return
	}
	l.end(ErrReleased, false) // Close released it
}
