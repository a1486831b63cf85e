package memory

import (
	"context"
	"maps"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// Update implements lock.Store: it replaces the metadata of a live lease of
// any mode (a reentrant lease's one copy, a reader's or a permit's own),
// and leaves its token, TTL, expiry and holds as they are.
func (m *Store) Update(ctx context.Context, ref lock.LeaseRef, metadata map[string]string) (lock.Lease, error) {
	name := ref.Lock
	m.mu.Lock()
	now := time.Now()
	n, l, err := m.leaseOf(ref, now)
	if err != nil {
		m.mu.Unlock()
		return lock.Lease{}, err
	}
	l.Metadata = nil
	if len(metadata) > 0 {
		l.Metadata = maps.Clone(metadata)
	}
	m.fence(name).version++
	e := leaseEvent(lock.EventUpdated, n, l, l.HoldCount, now)
	e.Metadata = maps.Clone(l.Metadata)
	if e.Metadata == nil {
		e.Metadata = map[string]string{}
	}
	m.log.add(e, now)
	out := copyLease(&l.Lease)
	m.mu.Unlock()
	m.notify(name, changed)
	return out, nil
}
