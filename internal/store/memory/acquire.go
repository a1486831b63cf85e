package memory

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/internal/fencetoken"
	"github.com/lockapi/lockapi/internal/lock"
)

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
	token, err := fencetoken.Next(f.token, now)
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
