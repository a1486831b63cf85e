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
//   - Fencing tokens (the rule is internal/fencing's): each master's script
//     proposes its own next token (its counter + 1, floored by its clock).
//     A fresh grant's token is the largest proposal of the majority
//     (fencing.Majority), and it is written back to a majority
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
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/internal/fencing"
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

// TryAcquire implements lock.Store.
func (s *Store) TryAcquire(ctx context.Context, req lock.AcquireRequest) (lock.Grant, error) {
	// The caller validated req; each master's store checks its kind.
	if err := unsupported(req); err != nil {
		return lock.Grant{}, err
	}
	// No queue places: each master's queue could name a different head,
	// and waiters at the heads of different masters would hold each other
	// off. A waiter watches instead.
	req.WaiterID = ""
	start := time.Now()
	id := ulid.Make().String()
	lead := s.leader(req.Lock)
	answers, err := s.ask(ctx, req, id, lead)
	if err != nil {
		return lock.Grant{}, err
	}
	leaseID, group := s.majorityLease(ctx, req.Lock, id, answers)
	if group == nil {
		s.undo(ctx, req.Lock, id, answers)
		if a := answers[lead]; a.err == nil && !a.v.Fresh {
			return lock.Grant{}, errOrderRaced()
		}
		return lock.Grant{}, s.refusal(req.Lock, answers)
	}
	g, writeBack := mergeGrants(group)
	if err := raced(answers[lead], leaseID, g, writeBack); err != nil {
		s.undo(ctx, req.Lock, id, answers)
		return lock.Grant{}, err
	}
	if a := answers[s.first(req.Lock)]; a.err == nil && a.v.Lease.ID == leaseID {
		// The first master's count, not the largest: see first.
		g.Lease.HoldCount = a.v.Lease.HoldCount
	}
	if writeBack {
		if err := s.writeBack(ctx, req.Lock, leaseID, g.Lease.Token); err != nil {
			s.undo(ctx, req.Lock, id, answers)
			return lock.Grant{}, err
		}
	}
	return s.withValidity(ctx, req, start, id, g, group, answers)
}

// unsupported refuses what redlock mode does not offer.
func unsupported(req lock.AcquireRequest) error {
	if req.Limit > 0 {
		return lock.Unsupported("semaphores (limit) are not offered in redlock mode: permits counted on each master do not add up to a limit under majorities")
	}
	if req.Fair {
		return lock.Unsupported("fair locks are not offered in redlock mode: each master's queue may name a different head")
	}
	if req.Session != "" {
		return errNoSessions
	}
	return nil
}

// errNoSessions refuses sessions in redlock mode: docs/SESSIONS.md says why.
var errNoSessions = lock.Unsupported("sessions are not offered in redlock mode: a session renewed on a minority of masters would leave them disagreeing on whether its leases live (docs/SESSIONS.md)")

// ask asks every master to grant req as request id, the name's leader
// (master lead, see leader) first, and returns their answers in master order; or the refusal when the
// leader refused. When many acquire a free lock at once, the leader grants
// one of them, and only that one asks the others. Asking all at once, each
// master could grant a different caller, and no caller would win a
// majority. When the leader refuses, nothing was granted (no other master
// was asked); when it does not answer, the others must grant all but it.
func (s *Store) ask(ctx context.Context, req lock.AcquireRequest, id string, lead int) ([]answer[lock.Grant], error) {
	acquire := func(ctx context.Context, m *redisstore.Store) (lock.Grant, error) {
		return m.AcquireAs(ctx, req, id)
	}
	leadGrant, leadErr := call(ctx, s, lead, acquire)
	if leadErr != nil && !unknown(leadErr) {
		return nil, s.confirmRefusal(ctx, req.Lock, lead, leadErr)
	}
	return each(ctx, s, func(ctx context.Context, m *redisstore.Store) (lock.Grant, error) {
		if m == s.masters[lead] {
			return leadGrant, leadErr // asked already
		}
		return m.AcquireAs(ctx, req, id)
	}), nil
}

// leader is the master an acquire of name asks first: the name's first
// master, or while that one is marked down, the next master after it that
// is not. A stand-in only keeps acquirers from splitting the others; hold
// counts stay the first master's (see first), and answers without it carry
// the largest of the others'.
func (s *Store) leader(name string) int {
	first := s.first(name)
	for k := range len(s.masters) {
		if i := (first + k) % len(s.masters); !s.health.isDown(i) {
			return i
		}
	}
	return first
}

// majorityLease returns the lease most masters granted and those masters'
// grants of it; no grants when fewer than a majority granted it. All of
// them name the same lease, unless a master lost a lease that the others
// re-entered: such a master's hold, on another lease of this owner, is not
// part of the grant and is abandoned.
func (s *Store) majorityLease(ctx context.Context, name, id string, answers []answer[lock.Grant]) (string, []lock.Grant) {
	votes := map[string]int{}
	leaseID, n := "", 0
	for _, a := range answers {
		if a.err == nil {
			votes[a.v.Lease.ID]++
			if c := votes[a.v.Lease.ID]; c > n {
				leaseID, n = a.v.Lease.ID, c
			}
		}
	}
	if n < s.quorum {
		return "", nil
	}
	var group []lock.Grant
	for i, a := range answers {
		if a.err != nil {
			continue
		}
		if a.v.Lease.ID != leaseID {
			_ = s.masters[i].Abandon(context.WithoutCancel(ctx), name, id)
			continue
		}
		group = append(group, a.v)
	}
	return leaseID, group
}

// errOrderRaced is the error of an acquire undone because the masters ran
// it and other calls of the same lease in different orders: the leader
// granted another lease than the majority did (see raced), or let it
// re-enter a lease that fewer than a majority then granted (the others
// had not yet run that lease's acquire, or had run its release). Not a
// refusal: the leader counted the hold until the undo, and a concurrent
// acquire or release of the lease may have answered with it counted, so
// the acquire may have taken effect before it was undone.
func errOrderRaced() error {
	return &lock.Error{Code: lock.CodeUnavailable,
		Detail: "concurrent calls on this owner's lease reached the redlock masters in different orders; the acquire was undone: try again"}
}

// raced is the error of an acquire whose majority's grant (lease leaseID,
// merged into g, writeBack as mergeGrants said) does not fit the order in
// which the leader (its answer lead) ran the name's calls; nil when it fits
// or the leader did not answer. Two cases, both races with another call of
// the same lease, which every master runs in the order it receives them:
//
//   - The majority granted another lease than the leader: two acquires of
//     one owner on a free lock reached the leader in one order and the
//     others in the other (each master grants the first afresh and lets
//     the second re-enter it), or an acquire and a release of the lease it
//     re-enters did. Answered, the leader would not hold the lease
//     granted, and its hold counts and refusals would no longer describe
//     the lock (see first).
//   - A re-entry whose masters hold the lease with different tokens: the
//     lease's own acquire is still in flight, its token (the largest
//     proposal, perhaps of a master outside this majority) not yet
//     written back. Answered, the re-entry would name a token the lease
//     may not have, and the lease's acquire may still fail.
//
// Such an acquire is undone and answered unavailable, not refused: the
// leader counted its hold until the undo, so a concurrent acquire or
// release of the lease may have answered with that hold counted.
func raced(lead answer[lock.Grant], leaseID string, g lock.Grant, writeBack bool) error {
	switch {
	case lead.err == nil && lead.v.Lease.ID != leaseID:
		return errOrderRaced()
	case !g.Fresh && !g.Replayed && writeBack:
		return &lock.Error{Code: lock.CodeUnavailable,
			Detail: "the lease re-entered is still being granted (its fencing token is not yet written back); the acquire was undone: try again"}
	}
	return nil
}

// writeBack writes a fresh grant's token, the largest proposal, back to
// the masters (see the package comment); a majority must take it, or the
// grant is not safe to answer.
func (s *Store) writeBack(ctx context.Context, name, leaseID string, token uint64) error {
	raised := each(ctx, s, func(ctx context.Context, m *redisstore.Store) (bool, error) {
		return m.RaiseToken(ctx, name, leaseID, token)
	})
	if _, ok := errsOf(raised); ok < s.quorum {
		return &lock.Error{Code: lock.CodeUnavailable,
			Detail: fmt.Sprintf("the fencing token reached %d of %d masters, fewer than a majority; the grant was undone", ok, len(s.masters))}
	}
	return nil
}

// withValidity completes a majority's grant with its request id and
// validity. A replayed grant is the lease as it is: valid while a majority
// still holds it. Any other is valid from the call's start for the TTL less
// the drift allowance, and is undone when the masters took that long.
func (s *Store) withValidity(ctx context.Context, req lock.AcquireRequest, start time.Time, id string, g lock.Grant, group []lock.Grant, answers []answer[lock.Grant]) (lock.Grant, error) {
	g.RequestID = id
	if g.Replayed {
		var exps []time.Time
		for _, x := range group {
			exps = append(exps, x.Lease.ExpiresAt)
		}
		g.Lease.ExpiresAt = s.quorumTime(exps).Add(-Drift(g.Lease.TTL))
		return g, nil
	}
	validity := req.TTL - time.Since(start) - Drift(req.TTL)
	if validity <= 0 {
		s.undo(ctx, req.Lock, id, answers)
		return lock.Grant{}, &lock.Error{Code: lock.CodeUnavailable,
			Detail: "the masters answered too slowly to leave the lease any validity; the grant was undone"}
	}
	g.Lease.ExpiresAt = start.Add(req.TTL - Drift(req.TTL))
	if g.Fresh {
		g.Lease.AcquiredAt = start
	}
	return g, nil
}

// first is the master asked first for name: one per name, spread over the
// masters.
//
// Its hold counts are the ones answered (acquire, renew, release,
// inspect) whenever it answered. Every master counts a lease's holds, but
// concurrent acquires and releases of one lease reach the masters in
// different orders, so the largest count can repeat: two acquires that
// each came last on some master both get it. One master runs every
// acquire and release of the name atomically and in one order, whichever
// lockapi instance sent them, so its counts are distinct and fit that
// order; the first master is the one every acquire asks before any other.
// (Serialising an owner's acquires in this process would not order those
// of other instances.) Where it did not answer, or was not asked because
// it is marked down (see health; a stand-in then leads the acquires, see
// leader), the largest count of the others is answered, and promises
// nothing more.
func (s *Store) first(name string) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % uint32(len(s.masters)))
}

// mergeGrants makes one grant of the masters' grants of one lease, its
// token as the fencing rule decides (fencing.Majority), and reports whether
// that token must be written back to the masters. Its hold count is the
// largest, which the caller replaces with the first master's when that one
// granted (see first).
func mergeGrants(group []lock.Grant) (lock.Grant, bool) {
	proposals := make([]fencing.Proposal, len(group))
	g := group[0]
	g.Replayed = true
	holds := 0
	for i, x := range group {
		proposals[i] = fencing.Proposal{Token: x.Lease.Token, Fresh: x.Fresh}
		g.Replayed = g.Replayed && x.Replayed
		holds = max(holds, x.Lease.HoldCount)
	}
	d := fencing.Majority(proposals)
	for _, x := range group {
		if x.Fresh == d.Fresh && x.Lease.Token == d.Token {
			g.Lease = x.Lease
			break
		}
	}
	g.Fresh, g.Lease.HoldCount = d.Fresh, holds
	return g, d.WriteBack
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

// undo abandons an acquire on the masters that granted it or whose answer
// is unknown: where it ran, its hold goes; where it is still on its way, it
// will grant nothing. A master that refused it, or was not asked (marked
// down), has nothing to undo. A master that cannot be reached is left to
// its store's reaper, which repeats the abandon; one marked down also gets
// it before it rejoins, without this call waiting out its deadline again.
func (s *Store) undo(ctx context.Context, name, requestID string, answers []answer[lock.Grant]) {
	ctx = context.WithoutCancel(ctx)
	abandon := func(ctx context.Context, m *redisstore.Store) error { return m.Abandon(ctx, name, requestID) }
	var wg sync.WaitGroup
	for i, a := range answers {
		if a.err != nil && !unknown(a.err) || skipped(a.err) {
			continue
		}
		if s.health.isDown(i) {
			s.health.later(i, abandon)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = abandon(ctx, s.masters[i])
		}()
	}
	wg.Wait()
}

// laterOnDown keeps r for each master that is marked down and did not
// answer (errs in master order), to run on it before it rejoins.
func (s *Store) laterOnDown(errs []error, r repair) {
	for i, err := range errs {
		if err != nil && s.health.isDown(i) {
			s.health.later(i, r)
		}
	}
}

// unknown reports an answer that may hide a grant: the master was not
// reached, or did not answer in time.
func unknown(err error) bool {
	return lock.ErrorCode(err) == lock.CodeUnavailable || ctxErr(err)
}

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

// quorumTime is the time until which a majority of the given times (one
// per master, at least a majority of them) has not passed: the quorum-th
// latest.
func (s *Store) quorumTime(times []time.Time) time.Time {
	sorted := slices.Clone(times)
	slices.SortFunc(sorted, func(a, b time.Time) int { return b.Compare(a) })
	return sorted[s.quorum-1]
}

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
