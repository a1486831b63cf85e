// Package memory implements lock.Store in the process's memory: the embedded
// store lockapi serves from when no Redis is configured.
//
// It follows docs/LOCK_KINDS.md ("Store rules, step by step") as the Redis
// store's scripts do, one operation at a time under one mutex, and records
// each change in its event log (docs/EVENTS.md) under the same mutex.
//
// It trusts the requests it is given: an acquire was validated once, in
// the domain (lock.AcquireRequest.Validate, which the HTTP API calls), and
// the store checks none of it again.
package memory

import (
	"context"
	"crypto/cipher"
	"slices"
	"sync"
	"time"

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
	names  map[string]*memName  // leases and queues; may hold expired ones until swept
	fences map[string]*memFence // never deleted, like the Redis fence hash
	// delays names the fences whose lock-delay may still run, for List,
	// which drops those that ended.
	delays map[string]struct{}
	// sessions holds live sessions, and ended ones for
	// lock.EndedSessionMemory (sessions.go).
	sessions map[string]*memSession
	// owned holds each principal's sessions that may live, to count them
	// against a quota (lock.SessionRequest.Quota); ended ones leave at the
	// next count.
	owned map[string]map[*memSession]struct{}
	log   *eventLog
	// due holds every live lease, earliest expiry first; timer fires at
	// the earliest (expiry.go). armedAt is when it is set to fire.
	due     schedule
	timer   *time.Timer
	armed   bool
	armedAt time.Time
	done    chan struct{}
	closed  bool
	// cursors seals list cursors (list.go).
	cursors cipher.AEAD
}

// memName is what one lock name holds now: its exclusive lease, its shared
// leases or semaphore permits, and its queue of waiters. A name with none of
// them is dropped from Store.names.
type memName struct {
	excl *memLease
	// shared holds the shared leases, or the permits of a semaphore (leases
	// with Limit set), by lease id: the Redis store's {name}:lock:shared.
	shared map[string]*memLease
	queue  []queueEntry // in arrival order
}

// memLease is a current lease with what the Redis store's scripts keep beside
// it: the last idempotency key and the acquire that used it, and a mark per
// acquire that added a hold (see the mark constants).
type memLease struct {
	lock.Lease
	idem, idemOp string
	// marks holds, by request id, each re-entry's hold (markAdded) and
	// every acquire whose answer was settled (markClaimed, markAbandoned).
	// A fresh grant needs no mark until it is settled: its request id is
	// the lease id. The marks die with the lease; none is ever pruned
	// before, as the Redis store prunes none (docs/LOCK_KINDS.md, "Abandon").
	marks map[string]byte
	slot  int // index in Store.due; -1 once the lease ended
	// session is the session the lease is bound to, nil for none; the
	// lease's ExpiresAt is then the session's.
	session *memSession
}

// The marks of a lease's acquires, as the Redis store's scripts write them.
const (
	markAdded     = 'g' // added a hold, answer not settled
	markClaimed   = 'c' // answer claimed by an idempotent replay
	markAbandoned = 'x' // hold undone by Abandon
)

// memFence is what outlives a lease: the last token, the last lease that
// fully released (for idempotent release), a change counter, and the last
// queue arrival number.
type memFence struct {
	token      uint64
	released   string
	releasedBy string // the principal of the released lease
	version    uint64
	arrivals   uint64
	// delayedUntil is the end of the name's lock-delay (sessions.go).
	delayedUntil time.Time
}

var _ lock.Store = (*Store)(nil)

// Options configure a memory store. The zero value is what New uses.
type Options struct {
	// MaxEvents is how many events the event log keeps at most
	// (LOCKAPI_EVENTS_MAX); 0 means DefaultMaxEvents.
	MaxEvents int
	// EventRetention is how long the event log keeps an event
	// (LOCKAPI_EVENTS_RETENTION); 0 means DefaultEventRetention.
	EventRetention time.Duration
	// NoEvents turns event recording off (LOCKAPI_EVENTS=false):
	// Events returns nil and the EventLog methods fail.
	NoEvents bool
}

// New returns an empty memory store with default Options. Close stops its
// timers.
func New() *Store { return NewWithOptions(Options{}) }

// NewWithOptions returns an empty memory store configured by o.
func NewWithOptions(o Options) *Store {
	m := &Store{
		hub:    notify.New(nil),
		names:  make(map[string]*memName),
		fences: make(map[string]*memFence),
		delays: make(map[string]struct{}),

		sessions: make(map[string]*memSession),
		owned:    make(map[string]map[*memSession]struct{}),
		log:      newEventLog(o),
		done:     make(chan struct{}),
	}
	m.cursors = newCursorSealer()
	m.timer = time.AfterFunc(time.Hour, m.expireDue)
	m.timer.Stop() // armed by the first lease
	go m.sweep()
	return m
}

// sweep drops lapsed queue places (and any expired lease the expiry timer
// has not dropped yet) so that abandoned locks do not pile up, and trims
// the event log by age while nothing is recorded; every operation already
// treats lapsed places as absent.
func (m *Store) sweep() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-m.done:
			return
		case now := <-t.C:
			m.mu.Lock()
			for name := range m.names {
				m.live(name, now)
			}
			for name := range m.delays {
				if !now.Before(m.fences[name].delayedUntil) {
					delete(m.delays, name)
				}
			}
			m.log.trim(now)
			m.forgetSessions(now)
			m.mu.Unlock()
		}
	}
}

// live returns what name holds at now, dropping expired leases and lapsed
// queue places first (rule 2), or nil when that leaves nothing. Callers hold
// m.mu.
func (m *Store) live(name string, now time.Time) *memName {
	n := m.names[name]
	if n == nil {
		return nil
	}
	m.prune(n, now)
	if n.empty() {
		delete(m.names, name)
		return nil
	}
	return n
}

// leaseOf finds ref's live lease at now, as live does, for an operation on it
// (renew, update, release): it returns the lease's name and the lease, with
// lock.LeaseLost when no live lease has the ID (l is nil) or
// lock.NotYourLease when ref names another principal than the holder's.
// Callers hold m.mu.
func (m *Store) leaseOf(ref lock.LeaseRef, now time.Time) (n *memName, l *memLease, err error) {
	n = m.live(ref.Lock, now)
	if n != nil {
		l = n.find(ref.ID)
	}
	switch {
	case l == nil:
		return n, nil, lock.LeaseLost(ref.Lock, ref.ID)
	case ref.Principal != "" && ref.Principal != l.Principal:
		return n, l, lock.NotYourLease(ref.Lock, ref.ID)
	}
	return n, l, nil
}

// tidy drops name once it holds nothing. Callers hold m.mu.
func (m *Store) tidy(name string) {
	if n := m.names[name]; n != nil && n.empty() {
		delete(m.names, name)
	}
}

func (m *Store) fence(name string) *memFence {
	f := m.fences[name]
	if f == nil {
		f = &memFence{}
		m.fences[name] = f
	}
	return f
}

// prune drops n's lapsed queue places and expired leases, recording each
// lease's expiry, in the order their TTLs ran out. Whoever finds a lease
// expired first (the expiry timer or an operation) drops it, so its expiry
// is recorded once. Callers hold m.mu.
func (m *Store) prune(n *memName, now time.Time) {
	n.pruneQueue(now)
	var expired []*memLease
	for l := range n.leases {
		if !now.Before(l.ExpiresAt) {
			expired = append(expired, l)
		}
	}
	slices.SortFunc(expired, expiresFirst)
	for _, l := range expired {
		m.end(n, l)
		m.delay(l, l.ExpiresAt)
		m.record(lock.EventExpired, n, l, 0, now)
	}
}

// end ends lease l of n, whatever ended it. Callers hold m.mu and record
// the event.
func (m *Store) end(n *memName, l *memLease) {
	n.drop(l)
	m.unschedule(l)
	if l.session != nil {
		delete(l.session.leases, l)
	}
}

func (n *memName) empty() bool { return !n.held() && len(n.queue) == 0 }

func (n *memName) held() bool { return n.excl != nil || len(n.shared) > 0 }

// leases yields every lease of the name: the exclusive one first, then the
// shared leases or permits in no particular order.
func (n *memName) leases(yield func(*memLease) bool) {
	if n.excl != nil && !yield(n.excl) {
		return
	}
	for _, l := range n.shared {
		if !yield(l) {
			return
		}
	}
}

// find returns the lease with id, or nil.
func (n *memName) find(id string) *memLease {
	if n.excl != nil && n.excl.ID == id {
		return n.excl
	}
	return n.shared[id]
}

// drop ends lease l.
func (n *memName) drop(l *memLease) {
	if n.excl == l {
		n.excl = nil
		return
	}
	delete(n.shared, l.ID)
}

// limit returns the semaphore's number of permits while any permit is held,
// and 0 otherwise.
func (n *memName) limit() int {
	for _, l := range n.shared {
		return l.Limit // all permits share one limit; shared leases have none
	}
	return 0
}

// ownedBy reports whether req re-enters l: same owner and principal, and
// bound to the same session (or to none).
func (l *memLease) ownedBy(req lock.AcquireRequest) bool {
	return l.Owner == req.Owner && l.Principal == req.Principal && l.Session == req.Session
}

// ownShared returns the shared lease (not a permit) of req's owner, or nil.
func (n *memName) ownShared(req lock.AcquireRequest) *memLease {
	for _, l := range n.shared {
		if l.Mode == lock.Shared && l.ownedBy(req) {
			return l
		}
	}
	return nil
}

// replay returns the lease whose latest keyed acquire req repeats (rule 3):
// same idempotency key, owner and principal, and not abandoned.
func (n *memName) replay(req lock.AcquireRequest) *memLease {
	if req.IdempotencyKey == "" {
		return nil
	}
	for l := range n.leases {
		if l.idem == req.IdempotencyKey && l.ownedBy(req) && l.marks[l.idemOp] != markAbandoned {
			return l
		}
	}
	return nil
}

// notice is one hub.Notify call. Operations decide their notices under m.mu
// and send them once it is unlocked: a waiter woken by one calls straight
// back into the store.
type notice struct {
	released bool
	ttl      time.Duration
	head     string
}

// granted is "c:<ttl>": a grant or a renewal.
func granted(ttl time.Duration) notice { return notice{ttl: ttl} }

// changed is "c": a hold dropped, the lease still held.
var changed = notice{}

// ended is the notice of a lease that ended (released, abandoned,
// force-released): "q:<head>" when the queue is not empty, else "r".
func (n *memName) ended() notice {
	if head := n.head(); head != "" {
		return notice{head: head}
	}
	return notice{released: true}
}

func (m *Store) notify(name string, ns ...notice) {
	for _, n := range ns {
		m.hub.Notify(name, n.released, n.ttl, n.head)
	}
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
		m.timer.Stop()
		m.closeEvents()
	}
	return nil
}
