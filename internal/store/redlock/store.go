// Package redlock implements lock.Store on N independent Redis masters (N
// odd, at least 3), the Redlock way: a lease exists when a majority of the
// masters granted it within its validity time, so the loss of a minority of
// masters loses nothing and needs no failover.
//
// Each master is a plain single-Redis store (internal/store/redis) running
// the same scripts; this package fans every call out to all of them in
// parallel and decides on the answers:
//
//   - An acquire gives every master the same request id, so a fresh lease
//     has one id everywhere. It is granted when a majority granted the same
//     lease and the time spent, plus a clock-drift allowance, leaves the
//     lease some validity; its expires_at is what is left. Otherwise every
//     master abandons the request (undoing its hold where it ran).
//   - Fencing tokens (the rule is internal/fencetoken's): each master's script
//     proposes its own next token (its counter + 1, floored by its clock).
//     A fresh grant's token is the largest proposal of the majority
//     (fencetoken.Majority), and it is written back to a majority
//     (RaiseToken) before the grant is answered. Any later
//     majority shares a master with that one, whose counter is then at
//     least this token, so every later token is larger
//     (docs/GUARANTEES.md).
//   - A refusal names the lease in the way only when every master shows
//     it with one token (heldRefusal): one master's view may be a grant
//     still in flight, with a token proposal that is not the grant's.
//   - Hold counts are the name's first master's, which runs the name's
//     acquires and releases in one order (see first). The answers keep
//     to that order: an acquire that the other masters ran in another
//     order with other calls of its lease is undone (raced), and a
//     release is the first master's answer (Release).
//   - Renew and release go to every master and succeed with a majority.
//   - Waiters watch every master: a release notice from any of them wakes
//     them.
//   - A master whose call times out is marked down: later calls do not ask
//     it (a majority of all N still decides) until a background PING
//     hears from it and the releases and abandons it missed have run on it
//     (see health).
//
// Semaphores and fair queues are refused (lock.CodeUnsupported): permits
// counted per master do not add up to a limit under majorities, and per
// master queues may name different heads. The event log is not offered:
// each master would record its own copy of every change.
//
// It trusts the requests it is given, as every store does: an acquire was
// validated once, in the domain (lock.AcquireRequest.Validate).
package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
)

// DefaultTimeout bounds each master's part of a call when the masters'
// stores say nothing shorter: much shorter than any TTL, so that a master
// that stopped answering costs little of a lease's validity.
const DefaultTimeout = 200 * time.Millisecond

// Drift is the clock-drift allowance of a lease of the given TTL: 1 % of it
// plus 2 ms, as in the Redlock description. A lease is answered valid until
// its grant began + TTL - Drift(TTL), which holds while no master's clock
// runs more than 1 % faster than this process's.
func Drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// Store is lock.Store over independent masters.
type Store struct {
	masters []*redisstore.Store
	quorum  int
	health  *health
}

var _ lock.Store = (*Store)(nil)

// New returns a store on masters, one store per independent Redis master,
// each opened with the per-master call timeout (its CallTimeout) and without
// events. It takes ownership of them: Close closes them.
func New(masters []*redisstore.Store) (*Store, error) {
	if n := len(masters); n < 3 || n%2 == 0 {
		return nil, fmt.Errorf("redlock needs an odd number of masters, at least 3; got %d", n)
	}
	return &Store{masters: masters, quorum: len(masters)/2 + 1, health: newHealth(masters)}, nil
}

// Quorum is how many masters must agree: ⌊N/2⌋+1.
func (s *Store) Quorum() int { return s.quorum }

// answer is one master's answer to a call.
type answer[T any] struct {
	v   T
	err error
}

// each runs f on every master in parallel and returns their answers in
// master order. Each master's store bounds its own call; a master marked
// down is not asked (see call).
func each[T any](ctx context.Context, s *Store, f func(ctx context.Context, m *redisstore.Store) (T, error)) []answer[T] {
	out := make([]answer[T], len(s.masters))
	var wg sync.WaitGroup
	for i := range s.masters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := call(ctx, s, i, f)
			out[i] = answer[T]{v, err}
		}()
	}
	wg.Wait()
	return out
}

// errsOf returns the answers' errors, in master order, and how many
// masters succeeded.
func errsOf[T any](answers []answer[T]) (errs []error, ok int) {
	errs = make([]error, len(answers))
	for i, a := range answers {
		errs[i] = a.err
		if a.err == nil {
			ok++
		}
	}
	return errs, ok
}

// quorumTime is the time until which a majority of the given times (one
// per master, at least a majority of them) has not passed: the quorum-th
// latest.
func (s *Store) quorumTime(times []time.Time) time.Time {
	sorted := slices.Clone(times)
	slices.SortFunc(sorted, func(a, b time.Time) int { return b.Compare(a) })
	return sorted[s.quorum-1]
}

// everywhere runs f on every master and returns their errors in master
// order.
func (s *Store) everywhere(ctx context.Context, f func(ctx context.Context, m *redisstore.Store) error) []error {
	answers := each(ctx, s, func(ctx context.Context, m *redisstore.Store) (struct{}, error) {
		return struct{}{}, f(ctx, m)
	})
	errs, _ := errsOf(answers)
	return errs
}

// majority is nil when a majority of errs (one per master) is nil, and the
// call's failure otherwise.
func (s *Store) majority(errs []error) error {
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	if ok < s.quorum {
		return s.failure(errs)
	}
	return nil
}

// Ping implements lock.Store: a majority of the masters must answer.
func (s *Store) Ping(ctx context.Context) error {
	return s.majority(s.everywhere(ctx, func(ctx context.Context, m *redisstore.Store) error { return m.Ping(ctx) }))
}

// Close stops the probes of masters marked down and closes every master's
// store.
func (s *Store) Close() error {
	s.health.close()
	var errs []error
	for _, m := range s.masters {
		errs = append(errs, m.Close())
	}
	return errors.Join(errs...)
}

// Events is nil: redlock mode keeps no event log (each master would
// record its own copy of every change), so /v1/events and webhooks answer
// 501.
func (s *Store) Events() lock.EventLog { return nil }

// Sessions is nil: redlock mode offers no sessions (errNoSessions).
func (s *Store) Sessions() lock.Sessions { return nil }

// Reconnects and Ghosts sum the masters' own, for metrics.
func (s *Store) Reconnects() (n int64) {
	for _, m := range s.masters {
		n += m.Reconnects()
	}
	return n
}

func (s *Store) Ghosts() (abandoned, pending int64) {
	for _, m := range s.masters {
		a, p := m.Ghosts()
		abandoned, pending = abandoned+a, pending+p
	}
	return abandoned, pending
}
