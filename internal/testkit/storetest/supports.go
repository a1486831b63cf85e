package storetest

import (
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// feature is something a behaviour needs that not every store offers; the
// Backend declares which it has (Backend.Semaphores, Backend.FairQueues).
type feature int

const (
	semaphores feature = iota + 1 // lock.AcquireRequest.Limit
	fairLocks                     // lock.AcquireRequest.Fair
	queues                        // the queue a waiter joins, which holds off later acquires
	sessions                      // lock.Store.Sessions
	updates                       // lock.Store.Update
)

// has reports whether the backend declared f.
func (b Backend) has(f feature) bool {
	switch f {
	case semaphores:
		return b.Semaphores
	case fairLocks, queues:
		return b.FairQueues
	case sessions:
		return b.Sessions
	case updates:
		return b.Updates
	}
	return false
}

// require skips the behaviour unless the backend offers f. Refused_kinds
// checks that a store refuses what it lacks instead.
func (b Backend) require(t *testing.T, f feature) {
	t.Helper()
	if b.has(f) {
		return
	}
	why := map[feature]string{
		semaphores: "refuses semaphores",
		fairLocks:  "refuses fair locks",
		queues:     "queues no waiters",
		sessions:   "keeps no sessions",
		updates:    "updates no lease's metadata",
	}[f]
	t.Skip("the store " + why + " (Backend declares it; docs/GUARANTEES.md, choosing a deployment)")
}

// refusedKinds checks that a store refuses the lock kinds it does not
// offer as unsupported, and that the refusal changes nothing.
func refusedKinds(t *testing.T, b Backend) {
	var reqs []lock.AcquireRequest
	if !b.Semaphores {
		reqs = append(reqs, lock.AcquireRequest{Lock: "refused:sem", Owner: "o", TTL: time.Minute, Limit: 2})
	}
	if !b.FairQueues {
		reqs = append(reqs, lock.AcquireRequest{Lock: "refused:fair", Owner: "o", TTL: time.Minute, Fair: true})
	}
	if !b.Sessions {
		reqs = append(reqs, lock.AcquireRequest{Lock: "refused:session", Owner: "o", Session: "01HZZZZZZZZZZZZZZZZZZZZZZZ"})
	}
	if len(reqs) == 0 {
		t.Skip("the store offers every kind")
	}
	s := b.Open(t)
	for _, req := range reqs {
		_, err := s.TryAcquire(ctx, req)
		WantCode(t, err, lock.CodeUnsupported)
		if st := Inspect(t, s, req.Lock); st.Held || st.LastToken != 0 {
			t.Fatalf("a refused %+v changed %s: %+v", req, req.Lock, st)
		}
	}
}

// checkEvents fails the test unless s keeps an event log exactly when the
// backend declares one, so that a declaration that drifts from the store
// cannot skip the event behaviours unseen.
func checkEvents(t *testing.T, b Backend) {
	s := b.Open(t)
	if has := s.Events() != nil; has != b.Events {
		t.Fatalf("%T: Backend.Events = %v, but its Events() is %v", s, b.Events, s.Events())
	}
}
