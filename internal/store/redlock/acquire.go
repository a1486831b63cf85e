package redlock

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/internal/fencetoken"
	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
)

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
// token as the fencing rule decides (fencetoken.Majority), and reports whether
// that token must be written back to the masters. Its hold count is the
// largest, which the caller replaces with the first master's when that one
// granted (see first).
func mergeGrants(group []lock.Grant) (lock.Grant, bool) {
	proposals := make([]fencetoken.Proposal, len(group))
	g := group[0]
	g.Replayed = true
	holds := 0
	for i, x := range group {
		proposals[i] = fencetoken.Proposal{Token: x.Lease.Token, Fresh: x.Fresh}
		g.Replayed = g.Replayed && x.Replayed
		holds = max(holds, x.Lease.HoldCount)
	}
	d := fencetoken.Majority(proposals)
	for _, x := range group {
		if x.Fresh == d.Fresh && x.Lease.Token == d.Token {
			g.Lease = x.Lease
			break
		}
	}
	g.Fresh, g.Lease.HoldCount = d.Fresh, holds
	return g, d.WriteBack
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
