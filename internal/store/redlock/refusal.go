package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
)

// refusal is the error of an acquire that no majority granted: what a
// majority answered when it agrees (an upgrade refused, a forbidden
// principal), the lock held when enough masters answered that no majority
// is possible, and unavailable when too few answered. The lease in the way
// is named only when every master names it (see heldRefusal).
func (s *Store) refusal(name string, answers []answer[lock.Grant]) error {
	errs, _ := errsOf(answers)
	if err := s.agreed(errs); err != nil {
		return err
	}
	sightings := make([]*lock.HeldBy, len(errs))
	answered := 0
	for i, err := range errs {
		if unknown(err) {
			continue
		}
		answered++
		var e *lock.Error
		if errors.As(err, &e) && e.Code == lock.CodeHeld && e.HeldBy != nil && e.HeldBy.Owner != "" {
			sightings[i] = e.HeldBy
		}
	}
	if answered >= s.quorum {
		return heldRefusal(name, sightings)
	}
	return s.unreached(errs)
}

// confirmRefusal is the answer to an acquire the leader (master lead, see
// leader) refused: as it is, unless it names a lease in the way, which is
// then named only when every other master holds that lease with that token
// too (read, not asked to grant: asking would let the others grant what
// the leader refused). The leader alone may show a lease whose grant is
// still in flight: with its own token proposal, before the grant's token
// (the largest proposal) is written back, or one that a majority will
// refuse.
func (s *Store) confirmRefusal(ctx context.Context, name string, lead int, err error) error {
	var e *lock.Error
	if !errors.As(err, &e) || e.Code != lock.CodeHeld || e.HeldBy == nil || e.HeldBy.Owner == "" {
		return err
	}
	by := e.HeldBy
	states := each(ctx, s, func(ctx context.Context, m *redisstore.Store) (lock.State, error) {
		if m == s.masters[lead] {
			return lock.State{}, nil // it answered already
		}
		return m.Inspect(ctx, name)
	})
	sightings := make([]*lock.HeldBy, len(s.masters))
	sightings[lead] = by
	for i, a := range states {
		if i == lead || a.err != nil {
			continue
		}
		for _, h := range a.v.Holders {
			if h.Owner == by.Owner && h.Token == by.Token {
				sightings[i] = &lock.HeldBy{Owner: h.Owner, Token: h.Token, ExpiresIn: h.ExpiresIn, LeaseExpiresIn: h.ExpiresIn}
			}
		}
	}
	if named := heldRefusal(name, sightings); lock.AsError(named).HeldBy.Unconfirmed {
		return named
	}
	return err
}

// heldRefusal is the lock-held error of a refused acquire, given what each
// master showed in its way (nil: no answer, or no lease). It names the
// lease only when every master shows the same owner and token. Each master
// holds a grant's lease either with its own proposal or, once written back,
// with the grant's token, the largest proposal of the masters that granted
// it. When all N show one token, either one of them was written back, so it
// is the grant's token, or all proposed it, so the largest is it too; and a
// lease on every master has its majority, so its acquire is answered as
// that grant unless it then fails as unavailable (too slow, or the
// write-back reached too few masters). A majority agreeing proves neither:
// the master left out may have proposed more, or not granted at all. So
// with a master down nothing is named. Otherwise the refusal says only
// that this acquire took no effect (lock.HeldBy.Unconfirmed), and to look
// again when the longest lease seen ends. A named lease's expiry is the
// longest its masters show, as its look-again time is.
func heldRefusal(name string, sightings []*lock.HeldBy) error {
	var agreed *lock.HeldBy
	same := true
	var longest, lease time.Duration
	for _, by := range sightings {
		if by == nil {
			same = false
			continue
		}
		longest = max(longest, by.ExpiresIn)
		lease = max(lease, by.LeaseExpiresIn)
		if agreed == nil {
			agreed = by
		}
		same = same && by.Owner == agreed.Owner && by.Token == agreed.Token
	}
	if same && agreed != nil {
		return lock.Held(name, lock.HeldBy{Owner: agreed.Owner, Token: agreed.Token, ExpiresIn: longest, LeaseExpiresIn: lease})
	}
	if longest == 0 {
		// Nothing seen for long: the masters disagree (a lease granted on
		// some, another on others), which resolves when those acquires are
		// abandoned or expire.
		longest = 50 * time.Millisecond
	}
	return &lock.Error{Code: lock.CodeHeld, HeldBy: &lock.HeldBy{ExpiresIn: longest, Unconfirmed: true},
		Detail: fmt.Sprintf("lock %q is not free on a majority of the redlock masters, and they do not all name one granted lease in the way (a grant in flight or being undone, or a master down): the holder is not named", name)}
}

// ctxErr reports the caller's context ending (cancelled, or its deadline
// passed), which a master's store returns as it is, not as its own error.
func ctxErr(err error) bool {
	var e *lock.Error
	return (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) && !errors.As(err, &e)
}

// agreed returns the error a majority of the masters gave, when it is one
// waiting cannot mend (not held, not unavailable), or nil.
func (s *Store) agreed(errs []error) error {
	byCode := map[lock.Code]int{}
	for _, err := range errs {
		code := lock.ErrorCode(err)
		if err == nil || code == lock.CodeHeld || unknown(err) {
			continue
		}
		if byCode[code]++; byCode[code] >= s.quorum {
			return err
		}
	}
	return nil
}

// unavailable says how many masters could not be reached.
func (s *Store) unavailable(errs []error) error {
	down := 0
	var cause error
	for _, err := range errs {
		if err != nil {
			down++
			if cause == nil {
				cause = err
			}
		}
	}
	return &lock.Error{Code: lock.CodeUnavailable, Err: cause,
		Detail: fmt.Sprintf("the lock store is unavailable: %d of %d Redis masters did not answer, and a majority (%d) must", down, len(s.masters), s.quorum)}
}

// failure is the error of a renew, release or other call that fewer than a
// majority carried out: the error a majority agrees on, or unavailable.
func (s *Store) failure(errs []error) error {
	if err := s.agreed(errs); err != nil {
		return err
	}
	// Some masters no longer know the lease and too few answered to say
	// more: the lease may be lost, but that is not known.
	return s.unreached(errs)
}

// unreached is the error of a call too few masters answered: the caller's
// own context error when it ended, unavailable otherwise.
func (s *Store) unreached(errs []error) error {
	for _, err := range errs {
		if ctxErr(err) {
			return err
		}
	}
	return s.unavailable(errs)
}
