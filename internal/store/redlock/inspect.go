package redlock

import (
	"context"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
)

// Inspect implements lock.Store: a majority must answer, and a lease is
// shown when a majority holds it, valid until a majority's copies expire.
func (s *Store) Inspect(ctx context.Context, name string) (lock.State, error) {
	states, err := s.inspectAll(ctx, name)
	if err != nil {
		return lock.State{}, err
	}
	return s.merge(name, states), nil
}

// inspectAll reads the name's state on every master (nil where a master did
// not answer); a majority must answer.
func (s *Store) inspectAll(ctx context.Context, name string) ([]*lock.State, error) {
	answers := each(ctx, s, func(ctx context.Context, m *redisstore.Store) (lock.State, error) {
		return m.Inspect(ctx, name)
	})
	if errs, ok := errsOf(answers); ok < s.quorum {
		return nil, s.failure(errs)
	}
	states := make([]*lock.State, len(answers))
	for i, a := range answers {
		if a.err == nil {
			states[i] = &a.v
		}
	}
	return states, nil
}

// merge makes one state of the masters' states (nil: no answer). Holders
// are matched by mode, principal and owner, which name a lease; its token
// is the largest a master reports, and its hold count the first master's
// (see first), or the largest where that one does not show it.
func (s *Store) merge(name string, states []*lock.State) lock.State {
	type seen struct {
		h          lock.Holder
		n          int
		exps       []time.Time
		ins        []time.Time // now + ExpiresIn, on this process's clock
		firstHolds int         // the first master's count; 0 if it shows none
	}
	firstIdx := s.first(name)
	now := time.Now()
	st := lock.State{Lock: name}
	var order []string
	byKey := map[string]*seen{}
	for i, m := range states {
		if m == nil {
			continue
		}
		st.LastToken = max(st.LastToken, m.LastToken)
		st.Queue = max(st.Queue, m.Queue)
		for _, h := range m.Holders {
			key := string(h.Mode) + "\n" + h.Principal + "\n" + h.Owner
			x := byKey[key]
			if x == nil {
				x = &seen{h: h}
				byKey[key] = x
				order = append(order, key)
			}
			x.n++
			x.h.Token = max(x.h.Token, h.Token)
			x.h.HoldCount = max(x.h.HoldCount, h.HoldCount)
			if i == firstIdx {
				x.firstHolds = h.HoldCount
			}
			x.exps = append(x.exps, h.ExpiresAt)
			x.ins = append(x.ins, now.Add(h.ExpiresIn))
		}
	}
	for _, key := range order {
		x := byKey[key]
		if x.n < s.quorum {
			continue // a remnant: an undone acquire, a master that lost data
		}
		h := x.h
		if x.firstHolds > 0 {
			h.HoldCount = x.firstHolds
		}
		h.ExpiresAt = s.quorumTime(x.exps)
		h.ExpiresIn = s.quorumTime(x.ins).Sub(now)
		st.Holders = append(st.Holders, h)
	}
	for i := range st.Holders {
		if st.Holders[i].Mode == lock.Exclusive {
			h := st.Holders[i]
			st.Holder = &h
		}
	}
	st.Held = len(st.Holders) > 0
	switch {
	case st.Holder != nil:
		st.Kind = lock.KindExclusive
	case st.Held:
		st.Kind = lock.KindShared
	}
	// The index follows what the merged state shows, not each master's
	// version: a remnant that expires on one master changes nothing here.
	st.Index = lock.ComputeIndex(0, st)
	return st
}
