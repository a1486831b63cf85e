package http

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/metrics"
)

// multiAcquireBody is the body of POST /v1/leases: the fields of a single
// acquire that make sense for several locks at once, and the locks. null is
// refused (decodeBody).
type multiAcquireBody struct {
	Locks    []string          `json:"locks"`
	Owner    *string           `json:"owner"`
	TTLMs    *int64            `json:"ttl_ms"`
	WaitMs   *int64            `json:"wait_ms"`
	Mode     *string           `json:"mode"`
	Metadata map[string]string `json:"metadata"`
	Session  *string           `json:"session"`
}

// handleAcquireAll handles the "POST /v1/leases" route: it grants every
// lock named in locks or none, waiting up to wait_ms for them (see
// lock.AcquireAll), and answers the leases in the order of locks.
func (s *Server) handleAcquireAll(w http.ResponseWriter, r *http.Request) {
	var body multiAcquireBody
	if err := decodeBody(w, r, &body); err != nil {
		Error(w, r, err)
		return
	}
	reqs, wait, err := s.multiRequests(body, r.Header.Values("Idempotency-Key"))
	if err != nil {
		Error(w, r, err)
		return
	}
	c := callerOf(r)
	for i := range reqs {
		if err := authorize(c, auth.ScopeWrite, reqs[i].Lock); err != nil {
			Error(w, r, err)
			return
		}
		reqs[i].Principal = c.principal
	}

	if wait > 0 && s.canPark(w, r) {
		s.acquireAllParking(w, r, c, reqs, wait)
		return
	}
	var grants []lock.Grant
	admitted, err := s.acquiring(w, r, c, wait, func(ctx context.Context) (err error) {
		grants, err = lock.AcquireAll(ctx, s.store, reqs, wait)
		return err
	})
	if !admitted {
		return
	}
	if wait > 0 && err == nil {
		err = s.keyGone(zerolog.Ctx(r.Context()), c, grants)
	}
	s.answerAcquireAll(w, r, grants, err)
	if wait > 0 && err == nil {
		s.deliverGrants(w, r, grants)
	}
}

// answerAcquireAll answers a multi-lock: its leases, in the order of its
// locks, or its error.
func (s *Server) answerAcquireAll(w http.ResponseWriter, r *http.Request, grants []lock.Grant, err error) {
	defer s.giveBackOnPanic(r, grants, err)
	s.reportAcquire(grants, err)
	if err != nil {
		Error(w, r, err)
		return
	}
	out := MultiLeases{Leases: make([]Lease, len(grants))}
	for i, g := range grants {
		out.Leases[i] = s.newLease(g.Lease)
	}
	writeJSON(w, r, http.StatusCreated, out)
}

// multiRequests validates a multi-lock and fills in its defaults: one
// request per name, all with the same owner (a fresh ULID when absent).
func (s *Server) multiRequests(b multiAcquireBody, idempotencyKeys []string) ([]lock.AcquireRequest, time.Duration, error) {
	base, wait, fields := s.newAcquire(acquireBody{Owner: b.Owner, TTLMs: b.TTLMs, WaitMs: b.WaitMs, Metadata: b.Metadata, Mode: b.Mode, Session: b.Session})
	if len(idempotencyKeys) > 0 {
		// A retried multi-lock could not give back a replayed grant.
		fields = append(fields, lock.FieldError{Field: "Idempotency-Key", Detail: "not supported on a multi-lock"})
	}
	reqs := make([]lock.AcquireRequest, len(b.Locks))
	for i, name := range b.Locks {
		reqs[i] = base
		reqs[i].Lock = name
	}
	if err := lock.ValidateAll(reqs); err != nil {
		fields = slices.Concat(lock.AsError(err).Fields, fields)
	}
	if len(fields) > 0 {
		return nil, 0, lock.Invalid(fields...)
	}
	return reqs, wait, nil
}

// handleReleaseAll handles the "DELETE /v1/leases" route: it releases every
// hold of each lease named by an id parameter, "<lock>/<lease id>", and
// answers one result per id. A lease that cannot be released (already gone,
// another principal's) is reported in its result; the others are released
// all the same.
func (s *Server) handleReleaseAll(w http.ResponseWriter, r *http.Request) {
	q := parseQuery(r)
	refs := leaseRefs(q)
	if err := q.err(); err != nil {
		Error(w, r, err)
		return
	}
	c := callerOf(r)
	for _, ref := range refs {
		if err := authorize(c, auth.ScopeWrite, ref.Lock); err != nil {
			Error(w, r, err)
			return
		}
	}

	out := MultiReleaseResult{Results: make([]MultiReleaseItem, len(refs))}
	for i, ref := range refs {
		item := MultiReleaseItem{Lock: ref.Lock, LeaseID: ref.ID}
		res, err := s.store.Release(r.Context(), leaseRef(c, ref.Lock, ref.ID), true)
		s.reportRelease(metrics.ReleaseLease, res, err)
		if err != nil {
			if r.Context().Err() != nil {
				Error(w, r, err) // the client left: nobody reads the rest
				return
			}
			p, _ := newProblem(r, err)
			item.Problem = &p
		} else {
			item.Released = true
		}
		out.Results[i] = item
	}
	writeJSON(w, r, http.StatusOK, out)
}

// leaseRefs reads the id parameters of DELETE /v1/leases: 1 to
// lock.MaxMultiLocks distinct "<lock>/<lease id>". A lease id alone does
// not say which lock it belongs to.
func leaseRefs(q *query) []lock.LeaseRef {
	ids := q.values["id"]
	if len(ids) < 1 || len(ids) > lock.MaxMultiLocks {
		q.fail("id", fmt.Sprintf("give 1-%d ids, each <lock>/<lease id> (got %d)", lock.MaxMultiLocks, len(ids)))
		return nil
	}
	refs := make([]lock.LeaseRef, len(ids))
	seen := make(map[string]bool, len(ids))
	for i, id := range ids {
		name, leaseID, _ := strings.Cut(id, "/")
		fe := lock.CheckName("id", name)
		if fe == nil {
			fe = checkLeaseID(leaseID)
		}
		switch {
		case fe != nil:
			q.fail("id", fmt.Sprintf("item %d: an id is <lock>/<lease id>: %s", i, fe.Detail))
			return nil
		case seen[id]:
			q.fail("id", fmt.Sprintf("%q appears more than once", id))
			return nil
		}
		seen[id] = true
		refs[i] = lock.LeaseRef{Lock: name, ID: leaseID}
	}
	return refs
}
