package memory

import (
	"cmp"
	"container/heap"
	"time"
)

// Expiry: every live lease is in one heap ordered by ExpiresAt, and one
// timer is set for the earliest. When it fires, the leases whose TTL ran out
// are dropped and their expired events recorded, so that an expiry is
// recorded within moments of the TTL's end even if nobody touches the lock
// (docs/EVENTS.md). An operation that finds an expired lease first drops it
// the same way; either way the lease leaves the heap with its one event.

// schedule is the heap of live leases, earliest expiry first. Each lease
// knows its index (memLease.slot), so a renewal moves it and an ended lease
// leaves without a search.
type schedule []*memLease

func (s schedule) Len() int           { return len(s) }
func (s schedule) Less(i, j int) bool { return expiresFirst(s[i], s[j]) < 0 }
func (s schedule) Swap(i, j int) {
	s[i], s[j] = s[j], s[i]
	s[i].slot, s[j].slot = i, j
}
func (s *schedule) Push(x any) {
	l := x.(*memLease)
	l.slot = len(*s)
	*s = append(*s, l)
}
func (s *schedule) Pop() any {
	old := *s
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*s = old[:len(old)-1]
	l.slot = -1
	return l
}

// expiresFirst orders leases by expiry, then by grant (token).
func expiresFirst(a, b *memLease) int {
	if c := a.ExpiresAt.Compare(b.ExpiresAt); c != 0 {
		return c
	}
	return cmp.Compare(a.Token, b.Token)
}

// schedule puts a fresh lease into the heap. Callers hold m.mu.
func (m *Store) schedule(l *memLease) {
	heap.Push(&m.due, l)
	m.arm()
}

// reschedule sets l's expiry to at. Callers hold m.mu.
func (m *Store) reschedule(l *memLease, at time.Time) {
	l.ExpiresAt = at
	heap.Fix(&m.due, l.slot)
	m.arm()
}

// unschedule takes an ended lease out of the heap. The timer stays as it
// is: firing early finds nothing due and sets it again. Callers hold m.mu.
func (m *Store) unschedule(l *memLease) {
	if l.slot >= 0 {
		heap.Remove(&m.due, l.slot)
	}
}

// arm sets the timer for the earliest expiry unless it is already set to
// fire at or before it. Callers hold m.mu.
func (m *Store) arm() {
	if len(m.due) == 0 || m.closed {
		return
	}
	at := m.due[0].ExpiresAt
	if m.armed && !at.Before(m.armedAt) {
		return
	}
	m.armed, m.armedAt = true, at
	m.timer.Reset(time.Until(at))
}

// expireDue runs when the timer fires: it drops every lease whose TTL has
// run out, recording their expired events, and sets the timer for the next.
func (m *Store) expireDue() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.armed = false
	if m.closed {
		return
	}
	now := time.Now()
	for len(m.due) > 0 && !now.Before(m.due[0].ExpiresAt) {
		// live drops every expired lease of the name, the earliest among
		// them; the check after it only keeps a broken invariant from
		// spinning here forever under the store's mutex.
		l := m.due[0]
		m.live(l.Lock, now)
		m.unschedule(l)
	}
	m.arm()
}
