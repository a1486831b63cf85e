package memory

import (
	"context"
	"maps"
	"sort"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

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

// Watch implements lock.Store.
func (m *Store) Watch(ctx context.Context, name string, kind lock.WatchKind) (lock.Watcher, error) {
	w, err := m.hub.Watch(ctx, name, kind)
	if err != nil {
		return nil, err
	}
	return w, nil
}

func copyLease(l *lock.Lease) lock.Lease {
	out := *l
	out.Metadata = maps.Clone(l.Metadata)
	return out
}
