package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/lockapi/lockapi/client/api"
)

// The loss watch (Consul's monitorLock): while a lease is held, one
// blocking query on its lock (GET /v1/locks/{name}?index=) answers as soon
// as the lock changes, and a lease no longer among its holders is lost at
// once, not at its next renewal. A session's bound leases are watched
// together, with one blocking query on the session. The watch is an early
// warning only: renewal stays the source of truth, and a watch that fails
// is retried with backoff and never marks anything lost by itself.

// lossWatchWait is how long one blocking query of the watch asks to wait;
// the server clamps it to its maximum wait (60 s by default).
const lossWatchWait = 5 * time.Minute

// WithoutLossWatch turns the loss watch off: leases and sessions learn that
// they are lost only at their next renewal (every TTL/3), as before. For a
// client that holds thousands of leases, whose watches would each hold a
// blocking query on the server (and count against its limits of blocking
// queries, LOCKAPI_MAX_WATCHES_PER_CALLER, apart from its waiting acquires).
func WithoutLossWatch() Option {
	return func(c *config) { c.noLossWatch = true }
}

// refused reports an answer that asking again will not change (a key
// without read access to the lock, say): the watch then stops, and
// renewal alone tells the loss.
func refused(err error) bool {
	var pe *ProblemError
	return errors.As(err, &pe) && pe.Status >= 400 && pe.Status < 500 && pe.Status != http.StatusTooManyRequests &&
		pe.Status != http.StatusRequestTimeout
}

// newLossBackoff paces the retries of a failed watch.
func newLossBackoff() *backoff { return newBackoff(100*time.Millisecond, 5*time.Second) }

// watchHolders is an unbound lease's loss watch: it follows the lock with
// blocking queries until the lease ends or Release stops watchCtx, and
// ends the lease as lost once an answer no longer lists it.
func (l *Lease) watchHolders() {
	defer close(l.lossDone)
	ctx := l.watchCtx
	bo := newLossBackoff()
	index := "" // the first answer is immediate, and comes after the grant
	for ctx.Err() == nil {
		st, err := l.c.Watch(ctx, l.name, index, lossWatchWait)
		if err != nil {
			if ctx.Err() != nil || refused(err) {
				return
			}
			index = ""
			if !sleepUntil(ctx, time.Now().Add(bo.next())) {
				return
			}
			continue
		}
		bo = newLossBackoff()
		// A state that has not seen this lease's grant (an older fencing
		// token) says nothing about it.
		if st.LastToken >= l.token && !l.among(st) {
			l.lostBy("the server no longer lists it among the lock's holders: it was force-released or expired")
			return
		}
		index = st.Index
	}
}

// among reports whether st lists l among the lock's holders: the same
// owner and fencing token (a holder's lease id is not shown).
func (l *Lease) among(st *LockState) bool {
	for _, h := range st.Holders {
		if h.Token == l.token && h.Owner == l.owner {
			return true
		}
	}
	return false
}

// lostBy ends l as lost, shown by a watch: the server no longer has it.
// It stops the lease's watchdog, which has nothing left to renew.
func (l *Lease) lostBy(reason string) {
	l.mu.Lock()
	l.gone = true
	l.mu.Unlock()
	l.end(&lostError{lock: l.name, leaseID: l.id, token: l.token, reason: reason}, true)
	l.stopWatch()
}

// register counts bound lease l in the session's watch, which asks afresh
// so that it covers l's lock too.
func (s *Session) register(l *Lease) {
	if !s.watching {
		return
	}
	s.mu.Lock()
	s.gen++
	s.bound[l] = s.gen
	requery := s.requery
	s.mu.Unlock()
	if requery != nil {
		requery()
	}
}

// unregister takes l out of the session's watch, before its release is
// sent: the answer that no longer lists it is no loss.
func (s *Session) unregister(l *Lease) {
	s.mu.Lock()
	delete(s.bound, l)
	s.mu.Unlock()
}

// watchLeases is a session's loss watch: blocking queries on the session
// until Close stops watchCtx. A 410 or 404 is the session's loss (and so
// every bound lease's); a bound lease the answer no longer lists is lost
// on its own (force-released).
func (s *Session) watchLeases() {
	defer close(s.lossDone)
	bo := newLossBackoff()
	index := ""
	for s.watchCtx.Err() == nil {
		qctx, cancel := context.WithCancel(s.watchCtx)
		s.mu.Lock()
		s.requery = cancel
		sent := s.gen
		s.mu.Unlock()
		leases, next, err := s.c.watchSession(qctx, s.id, index, lossWatchWait)
		requeried := qctx.Err() != nil // before cancel
		cancel()
		switch {
		case s.watchCtx.Err() != nil:
			return
		case requeried: // a lease was bound: ask afresh
			index = ""
			continue
		case gone(err):
			s.end(s.lostError(err), true)
			s.stopWatch()
			return
		case refused(err):
			return
		case err != nil:
			index = ""
			if !sleepUntil(s.watchCtx, time.Now().Add(bo.next())) {
				return
			}
			continue
		}
		bo = newLossBackoff()
		s.judge(leases, sent)
		index = next
	}
}

// judge ends as lost each lease bound before the query was sent (gen at
// most sent) that the answer no longer lists.
func (s *Session) judge(listed map[string]bool, sent uint64) {
	var lost []*Lease
	s.mu.Lock()
	for l, gen := range s.bound {
		if gen <= sent && !listed[l.id] {
			lost = append(lost, l)
			delete(s.bound, l)
		}
	}
	s.mu.Unlock()
	for _, l := range lost {
		l.lostBy(fmt.Sprintf("the server no longer lists it in session %s: it was force-released or released elsewhere", s.id))
	}
}

// watchSession is one blocking query of session id: the lease ids it
// lists and its index.
func (c *Client) watchSession(ctx context.Context, id, index string, wait time.Duration) (map[string]bool, string, error) {
	params := &api.GetSessionParams{}
	if index != "" {
		params.Index = &index
	}
	ms := ceilMs(wait)
	params.WaitMs = &ms
	var sess api.Session
	err := c.call(ctx, "watch session "+id, "", wait+c.timeout, func(ctx context.Context) (*http.Response, error) {
		return c.api.GetSession(ctx, id, params)
	}, http.StatusOK, &sess)
	if err != nil {
		return nil, "", err
	}
	listed := make(map[string]bool, len(sess.Leases))
	for _, l := range sess.Leases {
		listed[l.LeaseID] = true
	}
	return listed, sess.Index, nil
}
