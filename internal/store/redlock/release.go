package redlock

import (
	"context"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
)

// Renew implements lock.Store: a majority must renew.
func (s *Store) Renew(ctx context.Context, ref lock.LeaseRef, ttl time.Duration) (lock.Lease, error) {
	start := time.Now()
	answers := each(ctx, s, func(ctx context.Context, m *redisstore.Store) (lock.Lease, error) {
		return m.Renew(ctx, ref, ttl)
	})
	errs, ok := errsOf(answers)
	var lease lock.Lease
	for _, a := range answers {
		if a.err != nil {
			continue
		}
		holds := max(lease.HoldCount, a.v.HoldCount)
		if a.v.Token > lease.Token {
			lease = a.v
		}
		lease.HoldCount = holds
	}
	if a := answers[s.first(ref.Lock)]; a.err == nil {
		lease.HoldCount = a.v.HoldCount // see first
	}
	if ok < s.quorum {
		return lock.Lease{}, s.failure(errs)
	}
	if ttl == 0 {
		ttl = lease.TTL
	}
	if time.Since(start)+Drift(ttl) >= ttl {
		return lock.Lease{}, &lock.Error{Code: lock.CodeUnavailable,
			Detail: "the masters answered too slowly to leave the renewal any validity: renew again"}
	}
	lease.ExpiresAt = start.Add(ttl - Drift(ttl))
	return lease, nil
}

// Release implements lock.Store: a majority must answer it (a master that
// no longer knows the lease answers too). The answer is the first
// master's whenever it carried the release out (see first): whether it
// ended the lease, the holds left, and whether it is a retry of the
// release that ended it. Concurrent calls of one lease reach the other
// masters in other orders: the release that ends the lease there need not
// be the one that ends it on the first master, which also ran the lease's
// acquires in its order (answering the majority's end with the first
// master's counts, two releases of three holds could both leave 2), and a
// release that ended another lease there moves their record of the last
// lease released. Without the first master's release, a majority must
// carry it out, and the lease ended when a majority freed the lock. Once
// the lease ended, masters that still count holds of it (they ran the
// calls in another order, missed a release, or saw a reentrant acquire the
// others did not) drop them all.
func (s *Store) Release(ctx context.Context, ref lock.LeaseRef, all bool) (lock.ReleaseResult, error) {
	answers := each(ctx, s, func(ctx context.Context, m *redisstore.Store) (lock.ReleaseResult, error) {
		return m.Release(ctx, ref, all)
	})
	out := lock.ReleaseResult{Lock: ref.Lock, LeaseID: ref.ID, Retried: true}
	errs, ok := errsOf(answers)
	answered, released := 0, 0
	for _, a := range answers {
		if !unknown(a.err) {
			answered++
		}
		if a.err != nil {
			continue
		}
		out.Retried = out.Retried && a.v.Retried
		if a.v.Released {
			released++
		} else {
			out.HoldCount = max(out.HoldCount, a.v.HoldCount)
		}
	}
	first := answers[s.first(ref.Lock)]
	switch {
	case first.err == nil && answered >= s.quorum:
		out.Released, out.HoldCount, out.Retried = first.v.Released, first.v.HoldCount, first.v.Retried // see first
	case ok < s.quorum:
		return lock.ReleaseResult{Lock: ref.Lock, LeaseID: ref.ID}, s.failure(errs)
	default:
		out.Released = released >= s.quorum
	}
	if !out.Released {
		out.Retried = false
		return out, nil
	}
	out.HoldCount = 0
	releaseAll := func(ctx context.Context, m *redisstore.Store) error {
		_, err := m.Release(ctx, ref, true)
		return err
	}
	for i, a := range answers {
		if a.err == nil && !a.v.Released {
			_ = releaseAll(ctx, s.masters[i])
		}
	}
	// A master marked down would hold the lease until its TTL, and refuse
	// every acquire it is asked first for meanwhile.
	s.laterOnDown(errs, releaseAll)
	return out, nil
}

// Abandon implements lock.Store on every master; a master marked down gets
// it before it rejoins.
func (s *Store) Abandon(ctx context.Context, name, requestID string) error {
	abandon := func(ctx context.Context, m *redisstore.Store) error { return m.Abandon(ctx, name, requestID) }
	errs := s.everywhere(ctx, abandon)
	s.laterOnDown(errs, abandon)
	return s.majority(errs)
}

// Leave implements lock.Store on every master.
func (s *Store) Leave(ctx context.Context, name, waiterID string) error {
	return s.majority(s.everywhere(ctx, func(ctx context.Context, m *redisstore.Store) error {
		return m.Leave(ctx, name, waiterID)
	}))
}

// ForceRelease implements lock.Store on every master; a majority must
// answer. It reports whether any master held the name.
func (s *Store) ForceRelease(ctx context.Context, name, principal string) (bool, error) {
	answers := each(ctx, s, func(ctx context.Context, m *redisstore.Store) (bool, error) {
		return m.ForceRelease(ctx, name, principal)
	})
	errs, ok := errsOf(answers)
	if ok < s.quorum {
		return false, s.failure(errs)
	}
	// A master marked down would keep the lease, as after a lost release.
	s.laterOnDown(errs, func(ctx context.Context, m *redisstore.Store) error {
		_, err := m.ForceRelease(ctx, name, principal)
		return err
	})
	held := false
	for _, a := range answers {
		held = held || a.err == nil && a.v
	}
	return held, nil
}
