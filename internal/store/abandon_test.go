package store_test

import (
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

func tryAcquire(t *testing.T, s lock.Store, req lock.AcquireRequest) lock.Grant {
	t.Helper()
	if req.TTL == 0 {
		req.TTL = time.Minute
	}
	g, err := s.TryAcquire(ctx, req)
	if err != nil {
		t.Fatalf("acquire %+v: %v", req, err)
	}
	return g
}

func abandon(t *testing.T, s lock.Store, name, requestID string) {
	t.Helper()
	if err := s.Abandon(ctx, name, requestID); err != nil {
		t.Fatalf("abandon %s of %s: %v", requestID, name, err)
	}
}

func holds(t *testing.T, s lock.Store, name string) int {
	t.Helper()
	st := inspect(t, s, name)
	if !st.Held {
		return 0
	}
	return st.Holder.HoldCount
}

// An idempotent retry returns the lease as it is: same lease, token and hold
// count, nothing added; the store marks it as a replay.
func TestStore_Idempotency_key_replays_the_grant(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		req := lock.AcquireRequest{Lock: "idem", Owner: "w", IdempotencyKey: "k-1"}
		first := tryAcquire(t, s, req)
		if !first.Fresh || first.Replayed || first.RequestID != first.Lease.ID {
			t.Fatalf("first grant = %+v", first)
		}
		again := tryAcquire(t, s, req)
		if !again.Replayed || !again.Fresh || again.Lease.ID != first.Lease.ID || again.Lease.Token != first.Lease.Token || again.Lease.HoldCount != 1 {
			t.Fatalf("replay = %+v, first %+v", again, first)
		}
		if n := holds(t, s, "idem"); n != 1 {
			t.Fatalf("hold count after a replay = %d, want 1", n)
		}
		// A new key is a new (reentrant) acquire.
		other := tryAcquire(t, s, lock.AcquireRequest{Lock: "idem", Owner: "w", IdempotencyKey: "k-2"})
		if other.Replayed || other.Fresh || other.Lease.HoldCount != 2 {
			t.Fatalf("acquire with another key = %+v", other)
		}
		// The key is the owner's: another owner is refused as for any held lock.
		_, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: "idem", Owner: "x", IdempotencyKey: "k-2", TTL: time.Minute})
		wantCode(t, err, lock.CodeHeld)
		// After the lease ends the key means nothing: a fresh grant.
		if _, err := s.Release(ctx, lock.LeaseRef{Lock: "idem", ID: first.Lease.ID}, true); err != nil {
			t.Fatal(err)
		}
		fresh := tryAcquire(t, s, lock.AcquireRequest{Lock: "idem", Owner: "w", IdempotencyKey: "k-2"})
		if fresh.Replayed || !fresh.Fresh || fresh.Lease.Token <= first.Lease.Token {
			t.Fatalf("after release = %+v", fresh)
		}
	})
}

// Abandon undoes exactly the hold of the acquire it names, once, and leaves
// alone an answer that a replay claimed.
func TestStore_Abandon(t *testing.T) {
	forEachStore(t, func(t *testing.T, s lock.Store) {
		t.Run("fresh", func(t *testing.T) {
			g := tryAcquire(t, s, lock.AcquireRequest{Lock: "ab1", Owner: "w"})
			abandon(t, s, "ab1", g.RequestID)
			if n := holds(t, s, "ab1"); n != 0 {
				t.Fatalf("abandoned fresh grant left %d holds", n)
			}
			abandon(t, s, "ab1", g.RequestID) // again: nothing to do
			next := tryAcquire(t, s, lock.AcquireRequest{Lock: "ab1", Owner: "other"})
			abandon(t, s, "ab1", g.RequestID)
			if st := inspect(t, s, "ab1"); !st.Held || st.Holder.Owner != "other" || st.Holder.Token != next.Lease.Token {
				t.Fatalf("an old abandon touched the next holder: %+v", st)
			}
		})
		t.Run("fresh_then_retried_by_the_owner", func(t *testing.T) {
			// The ghost: the grant's answer was lost, the client
			// retried with the same owner and got hold 2, and releases once.
			ghost := tryAcquire(t, s, lock.AcquireRequest{Lock: "ab2", Owner: "w"})
			retry := tryAcquire(t, s, lock.AcquireRequest{Lock: "ab2", Owner: "w"})
			if retry.Lease.HoldCount != 2 {
				t.Fatalf("retry = %+v", retry)
			}
			abandon(t, s, "ab2", ghost.RequestID)
			abandon(t, s, "ab2", ghost.RequestID)
			if n := holds(t, s, "ab2"); n != 1 {
				t.Fatalf("holds after abandoning the ghost (twice) = %d, want 1", n)
			}
			if res, err := s.Release(ctx, lock.LeaseRef{Lock: "ab2", ID: retry.Lease.ID}, false); err != nil || !res.Released {
				t.Fatalf("the client's one release = %+v, %v", res, err)
			}
		})
		t.Run("reentrant", func(t *testing.T) {
			tryAcquire(t, s, lock.AcquireRequest{Lock: "ab3", Owner: "w"})
			second := tryAcquire(t, s, lock.AcquireRequest{Lock: "ab3", Owner: "w"})
			if second.RequestID == second.Lease.ID {
				t.Fatalf("a reentrant acquire has the lease's request id")
			}
			abandon(t, s, "ab3", second.RequestID)
			if n := holds(t, s, "ab3"); n != 1 {
				t.Fatalf("holds = %d, want 1", n)
			}
		})
		t.Run("claimed_by_a_replay", func(t *testing.T) {
			req := lock.AcquireRequest{Lock: "ab4", Owner: "w", IdempotencyKey: "k"}
			g := tryAcquire(t, s, req)
			if r := tryAcquire(t, s, req); !r.Replayed {
				t.Fatalf("not a replay: %+v", r)
			}
			abandon(t, s, "ab4", g.RequestID)
			if n := holds(t, s, "ab4"); n != 1 {
				t.Fatalf("abandon undid a grant a replay had claimed: holds = %d", n)
			}
		})
		t.Run("replay_after_abandon_acquires_again", func(t *testing.T) {
			req := lock.AcquireRequest{Lock: "ab5", Owner: "w", IdempotencyKey: "k"}
			tryAcquire(t, s, lock.AcquireRequest{Lock: "ab5", Owner: "w"})
			g := tryAcquire(t, s, req)
			abandon(t, s, "ab5", g.RequestID)
			r := tryAcquire(t, s, req)
			if r.Replayed || r.Lease.HoldCount != 2 {
				t.Fatalf("a retry after the abandon must add its hold again: %+v", r)
			}
		})
		t.Run("unknown_request", func(t *testing.T) {
			g := tryAcquire(t, s, lock.AcquireRequest{Lock: "ab6", Owner: "w"})
			abandon(t, s, "ab6", "01J00000000000000000000000")
			abandon(t, s, "never-held", g.RequestID)
			if n := holds(t, s, "ab6"); n != 1 {
				t.Fatalf("holds = %d", n)
			}
		})
	})
}
