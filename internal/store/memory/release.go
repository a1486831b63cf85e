package memory

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// Renew implements lock.Store.
func (m *Store) Renew(ctx context.Context, ref lock.LeaseRef, ttl time.Duration) (lock.Lease, error) {
	name := ref.Lock
	m.mu.Lock()
	now := time.Now()
	n, l, err := m.leaseOf(ref, now)
	if err != nil {
		m.mu.Unlock()
		return lock.Lease{}, err
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
	n, l, err := m.leaseOf(ref, now)
	f := m.fence(name)
	if l == nil {
		// No live lease: a retry of the release that ended it answers as
		// that release did.
		retry, by := f.released == leaseID, f.releasedBy
		m.mu.Unlock()
		if retry {
			if ref.Principal != "" && ref.Principal != by {
				return res, lock.NotYourLease(name, leaseID)
			}
			res.Released, res.Retried = true, true
			return res, nil
		}
		return res, err
	}
	if err != nil {
		m.mu.Unlock()
		return res, err
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
