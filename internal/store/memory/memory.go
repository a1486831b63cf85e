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
	"cmp"
	"context"
	"crypto/cipher"
	"errors"
	"maps"
	"slices"
	"sort"
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

var errNoReplicas = errors.New("store: the memory store has no replicas to confirm a grant")

// TryAcquire implements lock.Store.
func (m *Store) TryAcquire(ctx context.Context, req lock.AcquireRequest) (lock.Grant, error) {
	if req.MinReplicas > 0 {
		return lock.Grant{}, lock.Unavailable(errNoReplicas)
	}
	if req.Mode == "" {
		req.Mode = lock.Exclusive
	}
	m.mu.Lock()
	now := time.Now()
	var g lock.Grant
	var ns []notice
	bound, err := m.binding(req, now)
	if err == nil {
		g, ns, err = m.acquire(req, bound, now)
	}
	m.tidy(req.Lock)
	m.mu.Unlock()
	m.notify(req.Lock, ns...)
	return g, err
}

// acquire decides an acquire by the store rules of docs/LOCK_KINDS.md, whose
// numbers the comments cite. req.Mode is set. Callers hold m.mu and tidy the
// name afterwards. bound is the live session req binds the lease to, or nil.
func (m *Store) acquire(req lock.AcquireRequest, bound *memSession, now time.Time) (lock.Grant, []notice, error) {
	n := m.live(req.Lock, now) // 2
	if n == nil {
		n = &memName{shared: make(map[string]*memLease)}
		m.names[req.Lock] = n
	}
	if l := n.replay(req); l != nil { // 3
		l.settle(l.idemOp, markClaimed)
		return lock.Grant{Lease: copyLease(&l.Lease), Fresh: l.idemOp == l.ID, RequestID: l.idemOp, Replayed: true}, nil, nil
	}
	if err := m.delayed(req.Lock, now); err != nil {
		return lock.Grant{}, nil, err
	}
	if held := n.limit(); held != req.Limit && (held > 0 || n.held()) { // 4
		return lock.Grant{}, nil, lock.LimitMismatch(req.Lock, req.Limit, held)
	}

	c, err := n.contest(req)
	if err != nil {
		return lock.Grant{}, nil, err
	}
	f := m.fence(req.Lock)
	requestID := ulid.Make().String()
	if c.reenter != nil {
		g, ns := m.reenter(n, c.reenter, f, req, requestID, now)
		return g, ns, nil
	}
	if len(c.inTheWay) > 0 || (!c.skipQueue && n.heldOff(req)) {
		return lock.Grant{}, nil, m.refuse(n, f, req, now, c.inTheWay, c.joins)
	}
	return m.grantFresh(n, f, req, bound, requestID, now)
}

// contest is what an acquire meets on a name: the lease it re-enters, or
// the leases in the way. joins says whether a refusal takes a place in the
// queue (rule 9), and skipQueue whether the queue is ignored (rule 6.3).
type contest struct {
	reenter   *memLease
	inTheWay  []*memLease
	joins     bool
	skipQueue bool
}

// contest finds what req meets on n by rules 5-7, or the refusal of an
// exclusive acquire by an owner that holds the name shared.
func (n *memName) contest(req lock.AcquireRequest) (contest, error) {
	c := contest{joins: req.Fair}
	switch {
	case req.Limit > 0: // 7
		if len(n.shared) >= req.Limit {
			for l := range n.leases {
				c.inTheWay = append(c.inTheWay, l)
			}
		}
	case req.Mode == lock.Exclusive: // 5
		if n.excl != nil && n.excl.ownedBy(req) {
			c.reenter = n.excl
			break
		}
		if n.ownShared(req) != nil {
			return contest{}, lock.UpgradeRefused(req.Lock, req.Owner)
		}
		for l := range n.leases {
			if !l.ownedBy(req) {
				c.inTheWay = append(c.inTheWay, l)
				if l.Mode == lock.Shared {
					c.joins = true // a writer queues so that new readers wait behind it
				}
			}
		}
	default: // 6: shared
		if l := n.ownShared(req); l != nil {
			c.reenter = l
			break
		}
		if n.excl != nil && !n.excl.ownedBy(req) {
			c.inTheWay = append(c.inTheWay, n.excl)
		}
		// A downgrade never waits for writers that wait for it.
		c.skipQueue = n.excl != nil
	}
	return c, nil
}

// reenter adds a hold to l, the lease req re-enters: its TTL is req's from
// now, and the fence's version moves (the state changed), not its token.
func (m *Store) reenter(n *memName, l *memLease, f *memFence, req lock.AcquireRequest, requestID string, now time.Time) (lock.Grant, []notice) {
	l.HoldCount++
	if l.session == nil { // a bound lease's expiry is its session's
		l.TTL = req.TTL
		m.reschedule(l, now.Add(req.TTL))
	}
	l.mark(requestID, markAdded)
	if req.IdempotencyKey != "" {
		l.idem, l.idemOp = req.IdempotencyKey, requestID
	}
	f.version++
	g := lock.Grant{Lease: copyLease(&l.Lease), RequestID: requestID}
	ns := n.admit(req, l)
	m.record(lock.EventReentered, n, l, l.HoldCount, now)
	return g, ns
}

// grantFresh grants req a new lease, named requestID, with the name's next
// fencing token, bound to session bound unless that is nil.
func (m *Store) grantFresh(n *memName, f *memFence, req lock.AcquireRequest, bound *memSession, requestID string, now time.Time) (lock.Grant, []notice, error) {
	token, err := fencing.Next(f.token, now)
	if err != nil {
		return lock.Grant{}, nil, &lock.Error{Code: lock.CodeInternal, Detail: "internal error", Err: err}
	}
	f.token = token
	f.version++
	l := &memLease{Lease: lock.Lease{
		Lock:       req.Lock,
		Mode:       req.Mode,
		Limit:      req.Limit,
		ID:         requestID,
		Owner:      req.Owner,
		Principal:  req.Principal,
		Token:      token,
		HoldCount:  1,
		TTL:        req.TTL,
		AcquiredAt: now,
		ExpiresAt:  now.Add(req.TTL),
		Metadata:   maps.Clone(req.Metadata),
	}}
	if req.IdempotencyKey != "" {
		l.idem, l.idemOp = req.IdempotencyKey, requestID
	}
	if bound != nil {
		bound.bind(l)
	}
	if req.Mode == lock.Exclusive && req.Limit == 0 {
		n.excl = l
	} else {
		n.shared[l.ID] = l
	}
	m.schedule(l)
	g := lock.Grant{Lease: copyLease(&l.Lease), Fresh: true, RequestID: requestID}
	ns := n.admit(req, l)
	e := leaseEvent(lock.EventGranted, n, l, 1, now)
	e.Waited = req.Waited.Truncate(time.Millisecond)
	m.log.add(e, now)
	return g, ns, nil
}

// admit takes a granted request's place out of the queue (rule 11) and
// returns the grant's notices: "c:<ttl>", and "q:<new head>" when it took
// a place out of a queue that is still not empty and the next head may be
// granted beside it (a reader behind a reader, a permit behind a permit).
// req was granted l.
func (n *memName) admit(req lock.AcquireRequest, l *memLease) []notice {
	ns := []notice{granted(l.TTL)}
	if n.leave(req.WaiterID) >= 0 && len(n.queue) > 0 && (req.Mode == lock.Shared || req.Limit > 0) {
		ns = append(ns, notice{head: n.head()})
	}
	return ns
}

// refuse answers a refused acquire: it keeps or takes the request's queue
// place (rule 9) and describes what is in the way (rule 10). inTheWay are
// the leases that refuse it, none when only the queue does.
func (m *Store) refuse(n *memName, f *memFence, req lock.AcquireRequest, now time.Time, inTheWay []*memLease, joins bool) error {
	queued := false
	if req.WaiterID != "" {
		if i := n.place(req.WaiterID); i >= 0 {
			n.queue[i].deadline = now.Add(lock.QueueEntryTTL)
			queued = true
		} else if joins {
			f.arrivals++
			f.version++
			n.queue = append(n.queue, queueEntry{id: req.WaiterID, arrival: f.arrivals, deadline: now.Add(lock.QueueEntryTTL)})
			queued = true
		}
	}
	by := lock.HeldBy{Queue: len(n.queue), Queued: queued}
	var first *memLease
	for _, l := range inTheWay {
		if first == nil || l.ExpiresAt.Before(first.ExpiresAt) || (l.ExpiresAt.Equal(first.ExpiresAt) && l.Token < first.Token) {
			first = l
		}
	}
	if first != nil {
		by.Owner, by.Token, by.ExpiresIn = first.Owner, first.Token, first.ExpiresAt.Sub(now)
		by.LeaseExpiresIn = by.ExpiresIn // the queue below may shorten only ExpiresIn
	}
	// The queue's head must renew its place by its deadline; a request
	// that is the head times only the lease in its way.
	if len(n.queue) > 0 && n.queue[0].id != req.WaiterID {
		if head := n.queue[0].deadline.Sub(now); first == nil || head < by.ExpiresIn {
			by.ExpiresIn = head
		}
	} else if first == nil {
		by.ExpiresIn = lock.QueueEntryTTL
	}
	return lock.Held(req.Lock, by)
}

// Leave implements lock.Store.
func (m *Store) Leave(ctx context.Context, name, waiterID string) error {
	m.mu.Lock()
	n := m.live(name, time.Now())
	if n == nil || waiterID == "" {
		m.mu.Unlock()
		return nil
	}
	i := n.leave(waiterID)
	if i < 0 {
		m.mu.Unlock()
		return nil
	}
	m.fence(name).version++
	var ns []notice
	if i == 0 {
		// The head left: the next one may be granted now, or, with
		// nobody queued, whoever the queue held off.
		if head := n.head(); head != "" {
			ns = append(ns, notice{head: head})
		} else {
			ns = append(ns, notice{released: true})
		}
	}
	m.tidy(name)
	m.mu.Unlock()
	m.notify(name, ns...)
	return nil
}

// Renew implements lock.Store.
func (m *Store) Renew(ctx context.Context, ref lock.LeaseRef, ttl time.Duration) (lock.Lease, error) {
	name := ref.Lock
	m.mu.Lock()
	now := time.Now()
	var l *memLease
	n := m.live(name, now)
	if n != nil {
		l = n.find(ref.ID)
	}
	if l == nil {
		m.mu.Unlock()
		return lock.Lease{}, lock.LeaseLost(name, ref.ID)
	}
	if ref.Principal != "" && ref.Principal != l.Principal {
		m.mu.Unlock()
		return lock.Lease{}, lock.NotYourLease(name, ref.ID)
	}
	if l.session != nil {
		// A bound lease's expiry is its session's: renew the session.
		out := copyLease(&l.Lease)
		m.mu.Unlock()
		return out, nil
	}
	if ttl > 0 {
		l.TTL = ttl
	}
	m.reschedule(l, now.Add(l.TTL))
	m.fence(name).version++
	m.record(lock.EventRenewed, n, l, l.HoldCount, now)
	out := copyLease(&l.Lease)
	m.mu.Unlock()
	m.notify(name, granted(out.TTL))
	return out, nil
}

// Release implements lock.Store.
func (m *Store) Release(ctx context.Context, ref lock.LeaseRef, all bool) (lock.ReleaseResult, error) {
	name, leaseID := ref.Lock, ref.ID
	res := lock.ReleaseResult{Lock: name, LeaseID: leaseID}
	m.mu.Lock()
	now := time.Now()
	n := m.live(name, now)
	f := m.fence(name)
	var l *memLease
	if n != nil {
		l = n.find(leaseID)
	}
	if l == nil {
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
		m.record(lock.EventReleased, n, l, l.HoldCount, now)
		m.mu.Unlock()
		m.notify(name, changed)
		return res, nil
	}
	m.end(n, l)
	m.record(lock.EventReleased, n, l, 0, now)
	f.released, f.releasedBy = leaseID, l.Principal
	ended := n.ended()
	m.tidy(name)
	m.mu.Unlock()
	m.notify(name, ended)
	res.Released = true
	return res, nil
}

// Inspect implements lock.Store.
func (m *Store) Inspect(ctx context.Context, name string) (lock.State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state(name, time.Now()), nil
}

// state reads name's state. Callers hold m.mu.
func (m *Store) state(name string, now time.Time) lock.State {
	st := lock.State{Lock: name}
	n := m.live(name, now) // first: an expiry it finds may close the name
	var version uint64
	if f := m.fences[name]; f != nil {
		st.LastToken, version = f.token, f.version
		if now.Before(f.delayedUntil) {
			st.LockDelay = f.delayedUntil.Sub(now)
		}
	}
	if n != nil {
		st.Queue = len(n.queue)
		for l := range n.leases {
			st.Holders = append(st.Holders, holder(l, now))
		}
		sort.Slice(st.Holders, func(i, j int) bool { return st.Holders[i].Token < st.Holders[j].Token })
		st.Held = n.held()
		st.Limit = n.limit()
		switch {
		case n.excl != nil:
			st.Kind = lock.KindExclusive
			h := holder(n.excl, now)
			st.Holder = &h
		case st.Limit > 0:
			st.Kind = lock.KindSemaphore
		case st.Held:
			st.Kind = lock.KindShared
		}
	}
	st.Index = lock.ComputeIndex(version, st)
	return st
}

func holder(l *memLease, now time.Time) lock.Holder {
	return lock.Holder{
		Mode:       l.Mode,
		Owner:      l.Owner,
		Principal:  l.Principal,
		Token:      l.Token,
		HoldCount:  l.HoldCount,
		Session:    l.Session,
		AcquiredAt: l.AcquiredAt,
		ExpiresAt:  l.ExpiresAt,
		ExpiresIn:  l.ExpiresAt.Sub(now),
		Metadata:   maps.Clone(l.Metadata),
	}
}

func (l *memLease) mark(requestID string, how byte) {
	if l.marks == nil {
		l.marks = make(map[string]byte)
	}
	l.marks[requestID] = how
}

// added reports whether requestID's acquire added a hold to l: it granted l,
// or re-entered it.
func (l *memLease) added(requestID string) bool {
	_, ok := l.marks[requestID]
	return ok || l.ID == requestID
}

// settle marks requestID's answer claimed or abandoned and reports whether
// it was unsettled: its hold is still one Abandon may undo.
func (l *memLease) settle(requestID string, how byte) bool {
	if was, ok := l.marks[requestID]; ok && was != markAdded {
		return false
	}
	l.mark(requestID, how)
	return true
}

// Abandon implements lock.Store as the Redis store's abandon.lua does, for
// leases of every mode: it undoes the hold requestID's acquire added, to the
// lease it granted (the request id is the lease id) or to any lease it
// re-entered, whatever acquires came after it, if that lease lives and the
// answer was not settled (docs/LOCK_KINDS.md, "Abandon"). Memory calls never
// end with an unknown outcome, so no acquire can arrive after its abandon.
func (m *Store) Abandon(ctx context.Context, name, requestID string) error {
	m.mu.Lock()
	now := time.Now()
	n := m.live(name, now)
	var l *memLease
	if n != nil {
		for x := range n.leases {
			if x.added(requestID) {
				l = x
				break
			}
		}
	}
	if l == nil || !l.settle(requestID, markAbandoned) {
		m.mu.Unlock()
		return nil
	}
	m.fence(name).version++
	l.HoldCount--
	ns := changed
	if l.HoldCount == 0 {
		m.end(n, l)
		ns = n.ended()
	}
	m.record(lock.EventReleased, n, l, l.HoldCount, now)
	m.tidy(name)
	m.mu.Unlock()
	m.notify(name, ns)
	return nil
}

// ForceRelease implements lock.Store. It ends every lease of the name, each
// with a force_released event naming principal, in grant order; the queue
// stays as it is.
func (m *Store) ForceRelease(ctx context.Context, name, principal string) (bool, error) {
	m.mu.Lock()
	now := time.Now()
	n := m.live(name, now)
	if n == nil || !n.held() {
		m.mu.Unlock()
		return false, nil
	}
	ls := slices.Collect(n.leases)
	slices.SortFunc(ls, func(a, b *memLease) int { return cmp.Compare(a.Token, b.Token) })
	for _, l := range ls {
		m.end(n, l)
		m.delay(l, now)
		e := leaseEvent(lock.EventForceReleased, n, l, 0, now)
		e.Principal = principal
		m.log.add(e, now)
	}
	m.fence(name).version++
	ended := n.ended()
	m.tidy(name)
	m.mu.Unlock()
	m.notify(name, ended)
	return true, nil
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
		m.timer.Stop()
		m.closeEvents()
	}
	return nil
}

func copyLease(l *lock.Lease) lock.Lease {
	out := *l
	out.Metadata = maps.Clone(l.Metadata)
	return out
}
