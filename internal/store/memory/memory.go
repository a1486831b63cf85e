// Package memory implements lock.Store in the process's memory: the embedded
// store lockapi serves from when no Redis is configured.
package memory

import (
	"context"
	"encoding/base64"
	"errors"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/internal/fencing"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/notify"
)

// Store is the embedded store: the default when no Redis is configured. It
// has the same semantics as the Redis store, checked by the same conformance
// suite, but its locks live and die with the process. Its fencing tokens come
// from the same rule, so they keep rising across restarts as long as the
// wall clock does.
type Store struct {
	hub *notify.Hub

	mu     sync.Mutex
	locks  map[string]*memLock  // current leases; may be expired until swept
	fences map[string]*memFence // never deleted, like the Redis fence hash
	done   chan struct{}
	closed bool
}

// memLock is a current lease with what the Redis store's acquire.lua keeps
// beside it in the lock hash: the lease's latest acquire (op), the last
// idempotency key and the acquire that used it, and which acquires' answers
// were claimed by a replay ('c') or abandoned ('x').
type memLock struct {
	lock.Lease
	op, idem, idemOp string
	settled          map[string]byte
}

// memFence is what outlives a lease: the last token, the last lease that
// fully released (for idempotent release), and a change counter.
type memFence struct {
	token      uint64
	released   string
	releasedBy string // the principal of the released lease
	version    uint64
}

var _ lock.Store = (*Store)(nil)

// New returns an empty memory store. Close stops its expiry sweeper.
func New() *Store {
	m := &Store{
		hub:    notify.New(nil),
		locks:  make(map[string]*memLock),
		fences: make(map[string]*memFence),
		done:   make(chan struct{}),
	}
	go m.sweep()
	return m
}

// sweep drops expired leases so that abandoned locks do not pile up; reads
// already treat an expired lease as absent.
func (m *Store) sweep() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-m.done:
			return
		case now := <-t.C:
			m.mu.Lock()
			for name, l := range m.locks {
				if !now.Before(l.ExpiresAt) {
					delete(m.locks, name)
				}
			}
			m.mu.Unlock()
		}
	}
}

// current returns the live lease of name, dropping an expired one. Callers
// hold m.mu.
func (m *Store) current(name string, now time.Time) *memLock {
	l := m.locks[name]
	if l != nil && !now.Before(l.ExpiresAt) {
		delete(m.locks, name)
		return nil
	}
	return l
}

func (m *Store) fence(name string) *memFence {
	f := m.fences[name]
	if f == nil {
		f = &memFence{}
		m.fences[name] = f
	}
	return f
}

var errNoReplicas = errors.New("store: the memory store has no replicas to confirm a grant")

// TryAcquire implements lock.Store.
func (m *Store) TryAcquire(ctx context.Context, req lock.AcquireRequest) (lock.Grant, error) {
	if err := req.Validate(); err != nil {
		return lock.Grant{}, err
	}
	if req.MinReplicas > 0 {
		return lock.Grant{}, lock.Unavailable(errNoReplicas)
	}
	m.mu.Lock()
	now := time.Now()
	l := m.current(req.Lock, now)
	f := m.fence(req.Lock)
	requestID := ulid.Make().String()
	if l != nil {
		if l.Owner != req.Owner || l.Principal != req.Principal {
			held := lock.Held(req.Lock, lock.HeldBy{Owner: l.Owner, Token: l.Token, ExpiresIn: l.ExpiresAt.Sub(now)})
			m.mu.Unlock()
			return lock.Grant{}, held
		}
		if req.IdempotencyKey != "" && req.IdempotencyKey == l.idem && l.settled[l.idemOp] != 'x' {
			l.settle(l.idemOp, 'c')
			g := lock.Grant{Lease: copyLease(&l.Lease), Fresh: l.idemOp == l.ID, RequestID: l.idemOp, Replayed: true}
			m.mu.Unlock()
			return g, nil
		}
		l.HoldCount++
		l.TTL = req.TTL
		l.ExpiresAt = now.Add(req.TTL)
		l.op = requestID
		if req.IdempotencyKey != "" {
			l.idem, l.idemOp = req.IdempotencyKey, requestID
		}
		f.version++
		g := lock.Grant{Lease: copyLease(&l.Lease), RequestID: requestID}
		m.mu.Unlock()
		m.hub.Notify(req.Lock, false, req.TTL, "")
		return g, nil
	}
	token, err := fencing.Next(f.token, now)
	if err != nil {
		m.mu.Unlock()
		return lock.Grant{}, &lock.Error{Code: lock.CodeInternal, Detail: "internal error", Err: err}
	}
	f.token = token
	f.version++
	l = &memLock{Lease: lock.Lease{
		Lock:       req.Lock,
		ID:         requestID,
		Owner:      req.Owner,
		Principal:  req.Principal,
		Token:      token,
		HoldCount:  1,
		TTL:        req.TTL,
		AcquiredAt: now,
		ExpiresAt:  now.Add(req.TTL),
		Metadata:   maps.Clone(req.Metadata),
	}, op: requestID}
	if req.IdempotencyKey != "" {
		l.idem, l.idemOp = req.IdempotencyKey, requestID
	}
	m.locks[req.Lock] = l
	g := lock.Grant{Lease: copyLease(&l.Lease), Fresh: true, RequestID: requestID}
	m.mu.Unlock()
	m.hub.Notify(req.Lock, false, req.TTL, "")
	return g, nil
}

// Renew implements lock.Store.
func (m *Store) Renew(ctx context.Context, ref lock.LeaseRef, ttl time.Duration) (lock.Lease, error) {
	name := ref.Lock
	m.mu.Lock()
	now := time.Now()
	l := m.current(name, now)
	if l == nil || l.ID != ref.ID {
		m.mu.Unlock()
		return lock.Lease{}, lock.LeaseLost(name, ref.ID)
	}
	if ref.Principal != "" && ref.Principal != l.Principal {
		m.mu.Unlock()
		return lock.Lease{}, lock.NotYourLease(name, ref.ID)
	}
	if ttl > 0 {
		l.TTL = ttl
	}
	l.ExpiresAt = now.Add(l.TTL)
	m.fence(name).version++
	out := copyLease(&l.Lease)
	m.mu.Unlock()
	m.hub.Notify(name, false, out.TTL, "")
	return out, nil
}

// Release implements lock.Store.
func (m *Store) Release(ctx context.Context, ref lock.LeaseRef, all bool) (lock.ReleaseResult, error) {
	name, leaseID := ref.Lock, ref.ID
	res := lock.ReleaseResult{Lock: name, LeaseID: leaseID}
	m.mu.Lock()
	l := m.current(name, time.Now())
	f := m.fence(name)
	if l == nil || l.ID != leaseID {
		retry, by := f.released == leaseID, f.releasedBy
		m.mu.Unlock()
		if retry {
			if ref.Principal != "" && ref.Principal != by {
				return res, lock.NotYourLease(name, leaseID)
			}
			res.Released, res.Retried = true, true
			return res, nil
		}
		return res, lock.LeaseLost(name, leaseID)
	}
	if ref.Principal != "" && ref.Principal != l.Principal {
		m.mu.Unlock()
		return res, lock.NotYourLease(name, leaseID)
	}
	f.version++
	if !all && l.HoldCount > 1 {
		l.HoldCount--
		res.HoldCount = l.HoldCount
		m.mu.Unlock()
		m.hub.Notify(name, false, 0, "")
		return res, nil
	}
	delete(m.locks, name)
	f.released, f.releasedBy = leaseID, l.Principal
	m.mu.Unlock()
	m.hub.Notify(name, true, 0, "")
	res.Released = true
	return res, nil
}

// Inspect implements lock.Store.
func (m *Store) Inspect(ctx context.Context, name string) (lock.State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state(name, time.Now()), nil
}

func (m *Store) state(name string, now time.Time) lock.State {
	st := lock.State{Lock: name}
	var version uint64
	if f := m.fences[name]; f != nil {
		st.LastToken, version = f.token, f.version
	}
	if l := m.current(name, now); l != nil {
		st.Held = true
		st.Holder = &lock.Holder{
			Owner:      l.Owner,
			Principal:  l.Principal,
			Token:      l.Token,
			HoldCount:  l.HoldCount,
			AcquiredAt: l.AcquiredAt,
			ExpiresAt:  l.ExpiresAt,
			ExpiresIn:  l.ExpiresAt.Sub(now),
			Metadata:   maps.Clone(l.Metadata),
		}
	}
	st.Index = lock.ComputeIndex(version, st)
	return st
}

// settle marks requestID's answer claimed ('c') or abandoned ('x') and
// reports whether it was unsettled.
func (l *memLock) settle(requestID string, how byte) bool {
	if _, done := l.settled[requestID]; done {
		return false
	}
	if l.settled == nil {
		l.settled = make(map[string]byte)
	}
	l.settled[requestID] = how
	return true
}

// Abandon implements lock.Store as the Redis store's abandon.lua does. Memory
// calls never end with an unknown outcome, so no acquire can arrive after its
// abandon.
func (m *Store) Abandon(ctx context.Context, name, requestID string) error {
	m.mu.Lock()
	l := m.current(name, time.Now())
	if l == nil || (l.ID != requestID && l.op != requestID) || !l.settle(requestID, 'x') {
		m.mu.Unlock()
		return nil
	}
	m.fence(name).version++
	l.HoldCount--
	freed := l.HoldCount == 0
	if freed {
		delete(m.locks, name)
	}
	m.mu.Unlock()
	m.hub.Notify(name, freed, 0, "")
	return nil
}

// ForceRelease implements lock.Store.
func (m *Store) ForceRelease(ctx context.Context, name string) (bool, error) {
	m.mu.Lock()
	l := m.current(name, time.Now())
	if l == nil {
		m.mu.Unlock()
		return false, nil
	}
	delete(m.locks, name)
	m.fence(name).version++
	m.mu.Unlock()
	m.hub.Notify(name, true, 0, "")
	return true, nil
}

// List implements lock.Store. Pages are in name order and the cursor is the
// last name returned, so a page holds exactly up to Limit locks.
func (m *Store) List(ctx context.Context, req lock.ListRequest) (lock.ListPage, error) {
	after := ""
	if req.Cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(req.Cursor)
		if err != nil || !lock.ValidName(string(b)) {
			return lock.ListPage{}, lock.Invalid(lock.FieldError{Field: "cursor", Detail: "not a cursor returned by this server"})
		}
		after = string(b)
	}
	limit := req.Limit
	if limit <= 0 {
		limit = 100
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var names []string
	for name, l := range m.locks {
		if strings.HasPrefix(name, req.Prefix) && name > after && now.Before(l.ExpiresAt) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var page lock.ListPage
	if len(names) > limit {
		names = names[:limit]
		page.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(names[limit-1]))
	}
	page.Locks = make([]lock.State, 0, len(names))
	for _, name := range names {
		page.Locks = append(page.Locks, m.state(name, now))
	}
	return page, nil
}

// Watch implements lock.Store.
func (m *Store) Watch(ctx context.Context, name string, kind lock.WatchKind) (lock.Watcher, error) {
	w, err := m.hub.Watch(ctx, name, kind)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Ping implements lock.Store; memory is always reachable.
func (m *Store) Ping(ctx context.Context) error { return nil }

// Close implements lock.Store.
func (m *Store) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		close(m.done)
	}
	return nil
}

func copyLease(l *lock.Lease) lock.Lease {
	out := *l
	out.Metadata = maps.Clone(l.Metadata)
	return out
}

// WatcherCount returns the number of registered waiters and watchers.
func (m *Store) WatcherCount() int { return m.hub.Len() }

// Leave implements lock.Store.
func (m *Store) Leave(ctx context.Context, name, waiterID string) error { return nil }
