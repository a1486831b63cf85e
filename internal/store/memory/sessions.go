package memory

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/internal/lock"
)

// Sessions (docs/SESSIONS.md). A bound lease stays in the expiry heap with
// its session's expiry as its own, so the one expiry timer ends it when
// the session runs out, and every operation that meets it after that sees
// it expired: a session needs no timer of its own. Renewing a session moves
// each bound lease in the heap; memory can afford it.

// memSession is a session and its live bound leases.
type memSession struct {
	lock.Session // without Leases: see leases
	leases       map[*memLease]struct{}
	// ended is set by EndSession; a session whose ExpiresAt has passed has
	// ended too.
	ended bool
}

var _ lock.Sessions = (*Store)(nil)

// Sessions implements lock.Store: the memory store keeps sessions.
func (m *Store) Sessions() lock.Sessions { return m }

func (s *memSession) live(now time.Time) bool { return !s.ended && now.Before(s.ExpiresAt) }

// bind binds fresh lease l to s: its TTL and expiry are the session's.
func (s *memSession) bind(l *memLease) {
	l.session, l.Session = s, s.ID
	l.TTL, l.ExpiresAt = s.TTL, s.ExpiresAt
	s.leases[l] = struct{}{}
}

// find returns the session ref names, if it is ref.Principal's, live or
// ended: nil when there is none. Callers hold m.mu.
func (m *Store) findSession(ref lock.SessionRef) *memSession {
	s := m.sessions[ref.ID]
	if s == nil || (ref.Principal != "" && ref.Principal != s.Principal) {
		return nil
	}
	return s
}

// liveSession returns the live session ref names, or the error that says
// why there is none. Callers hold m.mu.
func (m *Store) liveSession(ref lock.SessionRef, now time.Time) (*memSession, error) {
	s := m.findSession(ref)
	switch {
	case s == nil:
		return nil, lock.SessionNotFound(ref.ID)
	case !s.live(now):
		return nil, lock.SessionLost(ref.ID)
	}
	return s, nil
}

// binding returns the live session req binds its lease to, nil when it
// names none. Callers hold m.mu.
func (m *Store) binding(req lock.AcquireRequest, now time.Time) (*memSession, error) {
	if req.Session == "" {
		return nil, nil
	}
	return m.liveSession(lock.SessionRef{ID: req.Session, Principal: req.Principal}, now)
}

// delay closes l's name for its session's lock-delay, counted from from,
// after l ended by the session's expiry or a force release. Callers hold
// m.mu.
func (m *Store) delay(l *memLease, from time.Time) {
	if l.session == nil || l.session.LockDelay <= 0 {
		return
	}
	f := m.fence(l.Lock)
	if until := from.Add(l.session.LockDelay); until.After(f.delayedUntil) {
		f.delayedUntil = until
		f.version++
		m.delays[l.Lock] = struct{}{}
	}
}

// delayed returns the lock-delay refusal of an acquire of name at now, or
// nil when the name is open. Callers hold m.mu.
func (m *Store) delayed(name string, now time.Time) error {
	if f := m.fences[name]; f != nil && now.Before(f.delayedUntil) {
		return lock.LockDelayed(name, f.delayedUntil.Sub(now))
	}
	return nil
}

// CreateSession implements lock.Sessions.
func (m *Store) CreateSession(ctx context.Context, req lock.SessionRequest) (lock.Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if req.Quota > 0 && m.liveSessionsOf(req.Principal, now) >= req.Quota {
		return lock.Session{}, lock.QuotaExceeded("sessions", req.Quota)
	}
	s := &memSession{
		Session: lock.Session{
			ID:        ulid.Make().String(),
			Owner:     req.Owner,
			Principal: req.Principal,
			TTL:       req.TTL,
			LockDelay: req.LockDelay,
			ExpiresAt: now.Add(req.TTL),
		},
		leases: make(map[*memLease]struct{}),
	}
	m.sessions[s.ID] = s
	owned := m.owned[req.Principal]
	if owned == nil {
		owned = make(map[*memSession]struct{})
		m.owned[req.Principal] = owned
	}
	owned[s] = struct{}{}
	return s.view(), nil
}

// liveSessionsOf counts principal's live sessions, and forgets its ended
// ones, so that a count costs what the principal has, not every session
// the store remembers. Callers hold m.mu.
func (m *Store) liveSessionsOf(principal string, now time.Time) int {
	owned := m.owned[principal]
	for s := range owned {
		if !s.live(now) {
			delete(owned, s)
		}
	}
	if len(owned) == 0 {
		delete(m.owned, principal)
	}
	return len(owned)
}

// RenewSession implements lock.Sessions: the session's expiry, and every
// bound lease's, move to now plus the TTL. It records no event per lease:
// a renewal costs the same whatever the session holds (docs/SESSIONS.md).
func (m *Store) RenewSession(ctx context.Context, ref lock.SessionRef, ttl time.Duration) (lock.Session, error) {
	m.mu.Lock()
	now := time.Now()
	s, err := m.liveSession(ref, now)
	if err != nil {
		m.mu.Unlock()
		return lock.Session{}, err
	}
	if ttl > 0 {
		s.TTL = ttl
	}
	s.ExpiresAt = now.Add(s.TTL)
	names := make(map[string]bool)
	for l := range s.leases {
		l.TTL = s.TTL
		m.reschedule(l, s.ExpiresAt)
		names[l.Lock] = true
	}
	out := s.view()
	m.mu.Unlock()
	for name := range names {
		m.notify(name, granted(s.TTL))
	}
	return out, nil
}

// GetSession implements lock.Sessions.
func (m *Store) GetSession(ctx context.Context, ref lock.SessionRef) (lock.Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	s, err := m.liveSession(ref, now)
	if err != nil {
		return lock.Session{}, err
	}
	return s.view(), nil
}

// EndSession implements lock.Sessions: each bound lease is released as a
// clean release of all its holds would be, in grant order.
func (m *Store) EndSession(ctx context.Context, ref lock.SessionRef) (lock.Session, error) {
	m.mu.Lock()
	now := time.Now()
	s, err := m.liveSession(ref, now)
	if err != nil {
		m.mu.Unlock()
		return lock.Session{}, err
	}
	out := s.view()
	ls := make([]*memLease, 0, len(s.leases))
	for l := range s.leases {
		ls = append(ls, l)
	}
	slices.SortFunc(ls, func(a, b *memLease) int { return cmp.Compare(a.Token, b.Token) })
	ended := make(map[string]notice)
	for _, l := range ls {
		n := m.names[l.Lock]
		m.end(n, l)
		m.record(lock.EventReleased, n, l, 0, now)
		f := m.fence(l.Lock)
		f.version++
		f.released, f.releasedBy = l.ID, l.Principal
		ended[l.Lock] = n.ended()
		m.tidy(l.Lock)
	}
	s.ended, s.ExpiresAt = true, now
	m.mu.Unlock()
	for name, n := range ended {
		m.notify(name, n)
	}
	m.notify(lock.SessionWatchName(ref.ID), notice{}) // its blocking queries
	return out, nil
}

// ListSessions implements lock.Sessions.
func (m *Store) ListSessions(ctx context.Context, f lock.SessionFilter) ([]lock.Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var out []lock.Session
	for _, s := range m.sessions {
		if s.live(now) && (f.Principal == "" || f.Principal == s.Principal) && strings.HasPrefix(s.Owner, f.OwnerPrefix) {
			if v := s.view(); f.Shows(v) {
				out = append(out, v)
			}
		}
	}
	slices.SortFunc(out, func(a, b lock.Session) int { return cmp.Compare(a.ID, b.ID) })
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// forgetSessions drops the sessions that ended more than
// lock.EndedSessionMemory ago. Callers hold m.mu.
func (m *Store) forgetSessions(now time.Time) {
	for id, s := range m.sessions {
		if now.Sub(s.ExpiresAt) > lock.EndedSessionMemory {
			delete(m.sessions, id)
			if owned := m.owned[s.Principal]; owned != nil {
				delete(owned, s)
				if len(owned) == 0 {
					delete(m.owned, s.Principal)
				}
			}
		}
	}
}

// view is the session as callers see it, with its live leases by lock name
// and lease id. Callers hold m.mu.
func (s *memSession) view() lock.Session {
	out := s.Session
	out.Leases = make([]lock.SessionLease, 0, len(s.leases))
	for l := range s.leases {
		out.Leases = append(out.Leases, lock.SessionLease{Lock: l.Lock, LeaseID: l.ID, Mode: l.Mode, Limit: l.Limit, Token: l.Token})
	}
	slices.SortFunc(out.Leases, func(a, b lock.SessionLease) int {
		return cmp.Or(cmp.Compare(a.Lock, b.Lock), cmp.Compare(a.LeaseID, b.LeaseID))
	})
	return out
}
