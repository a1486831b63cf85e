package http

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/metrics"
)

// acquireBody is the body of POST /v1/locks/{name}/leases; every field is
// optional, and null is refused (decodeBody).
type acquireBody struct {
	Owner       *string           `json:"owner"`
	TTLMs       *int64            `json:"ttl_ms"`
	WaitMs      *int64            `json:"wait_ms"`
	Metadata    map[string]string `json:"metadata"`
	MinReplicas *int64            `json:"min_replicas"`
	Mode        *string           `json:"mode"`
	Limit       *int64            `json:"limit"`
	Fair        *bool             `json:"fair"`
	Session     *string           `json:"session"`
}

// renewBody is the body of POST /v1/locks/{name}/leases/{lease_id}/renew.
type renewBody struct {
	TTLMs *int64 `json:"ttl_ms"`
}

// handleAcquire handles the "POST /v1/locks/{name}/leases" route: it grants
// the lock, waiting up to wait_ms for it.
func (s *Server) handleAcquire(w http.ResponseWriter, r *http.Request) {
	var body acquireBody
	if err := decodeBody(w, r, &body); err != nil {
		Error(w, r, err)
		return
	}
	req, wait, err := s.acquireRequest(pathParam(r, "name"), body, r.Header.Values("Idempotency-Key"))
	if err != nil {
		Error(w, r, err)
		return
	}
	c := callerOf(r)
	if err := authorize(c, auth.ScopeWrite, req.Lock); err != nil {
		Error(w, r, err)
		return
	}
	req.Principal = c.principal

	if wait > 0 && s.canPark(w, r) {
		s.acquireParking(w, r, c, req, wait)
		return
	}
	var g lock.Grant
	admitted, err := s.acquiring(w, r, c, wait, func(ctx context.Context) (err error) {
		g, err = lock.AcquireWait(ctx, s.store, req, wait)
		return err
	})
	if !admitted {
		return
	}
	if wait > 0 && err == nil {
		err = s.keyGone(zerolog.Ctx(r.Context()), c, []lock.Grant{g})
	}
	s.answerAcquire(w, r, req.Lock, g, err)
	if wait > 0 && err == nil {
		s.deliverGrants(w, r, []lock.Grant{g})
	}
}

// answerAcquire answers a single acquire: its lease, or its error.
func (s *Server) answerAcquire(w http.ResponseWriter, r *http.Request, name string, g lock.Grant, err error) {
	defer s.giveBackOnPanic(r, []lock.Grant{g}, err)
	s.reportAcquire([]lock.Grant{g}, err)
	if err != nil {
		Error(w, r, &lock.LockError{Lock: name, Err: err})
		return
	}

	status := http.StatusCreated
	if !g.Fresh {
		status = http.StatusOK
	}
	if g.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Location", leaseLocation(g.Lease))
	writeJSON(w, r, status, s.newLease(g.Lease))
}

// acquiring runs acquire, which may wait up to wait. A waiting acquire is
// first admitted under the waiter limits (admitted is false when it was
// refused; the refusal is answered), and its wait is timed for the wait
// histogram. err is acquire's, or the cause that ended the wait.
func (s *Server) acquiring(w http.ResponseWriter, r *http.Request, c caller, wait time.Duration, acquire func(ctx context.Context) error) (admitted bool, err error) {
	ctx := r.Context()
	if wait > 0 {
		var end func()
		if ctx, end, err = s.beginWait(r, c); err != nil {
			Error(w, r, err)
			return false, nil
		}
		defer end()
	}
	start := time.Now()
	err = waitError(ctx, acquire(ctx))
	if wait > 0 {
		s.waitEnded(start, err)
	}
	return true, err
}

// waitOutcome names how a waiting acquire ended, for the wait histogram.
func waitOutcome(err error) string {
	switch {
	case err == nil:
		return "granted"
	case lock.ErrorCode(err) == lock.CodeHeld, lock.ErrorCode(err) == lock.CodeLockDelay:
		return "timeout"
	case errors.Is(err, errShuttingDown):
		return "shutdown"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return "error"
}

// acquireRequest validates an acquire and fills in its defaults.
// idempotencyKeys are the request's Idempotency-Key headers: none, or one.
func (s *Server) acquireRequest(name string, b acquireBody, idempotencyKeys []string) (lock.AcquireRequest, time.Duration, error) {
	req, wait, fields := s.newAcquire(b)
	req.Lock = name
	switch len(idempotencyKeys) {
	case 0:
	case 1:
		req.IdempotencyKey = idempotencyKeys[0]
		if req.IdempotencyKey == "" {
			fields = append(fields, lock.FieldError{Field: "Idempotency-Key", Detail: "must not be empty"})
		}
	default:
		fields = append(fields, lock.FieldError{Field: "Idempotency-Key", Detail: "give one Idempotency-Key header, not several"})
	}
	if err := req.Validate(); err != nil {
		fields = slices.Concat(lock.AsError(err).Fields, fields)
	}
	if len(fields) > 0 {
		return req, 0, lock.Invalid(fields...)
	}
	return req, wait, nil
}

// newAcquire turns the fields of an acquire body into a request with the
// server's defaults, and reports what breaks the server's limits or is not
// a value the API takes; the domain's rules are left to
// lock.AcquireRequest.Validate. An absent owner becomes a fresh ULID, so
// such acquires are never reentrant.
func (s *Server) newAcquire(b acquireBody) (lock.AcquireRequest, time.Duration, []lock.FieldError) {
	req := lock.AcquireRequest{TTL: s.cfg.DefaultTTL, Metadata: b.Metadata, MinReplicas: s.cfg.MinReplicas}
	if b.Owner != nil {
		req.Owner = *b.Owner
	} else {
		req.Owner = ulid.Make().String()
	}
	if b.Fair != nil {
		req.Fair = *b.Fair
	}

	// To the domain, mode "" and limit 0 are the defaults (an exclusive
	// lock); the API takes them only as absent members.
	var fields []lock.FieldError
	if b.Mode != nil {
		if req.Mode = lock.Mode(*b.Mode); req.Mode == "" {
			fields = append(fields, lock.FieldError{Field: "mode", Detail: `must be "exclusive" or "shared"; leave mode out for the default`})
		}
	}
	if b.Limit != nil {
		if req.Limit = saturate(*b.Limit); req.Limit == 0 {
			fields = append(fields, lock.FieldError{Field: "limit", Detail: "must be at least 1; leave limit out for a lock"})
		}
	}
	if b.Session != nil {
		// A bound lease lives as long as its session: no TTL of its own,
		// and ttl_ms beside session is refused (AcquireRequest.Validate).
		if *b.Session == "" {
			fields = append(fields, lock.FieldError{Field: "session", Detail: "must be a session id; leave session out for a lease with its own TTL"})
		} else {
			req.Session, req.TTL = *b.Session, 0
		}
	}
	if b.TTLMs != nil {
		req.TTL = millis(*b.TTLMs)
		if fe := s.checkMaxTTL(req.TTL); fe != nil {
			fields = append(fields, *fe)
		}
	}
	if b.MinReplicas != nil {
		if n := *b.MinReplicas; n < 0 || n > int64(s.cfg.MinReplicas) {
			fields = append(fields, lock.FieldError{Field: "min_replicas", Detail: fmt.Sprintf("must be between 0 and the server's min_replicas (%d)", s.cfg.MinReplicas)})
		} else {
			req.MinReplicas = int(n)
		}
	}
	var wait time.Duration
	if b.WaitMs != nil {
		switch ms := *b.WaitMs; {
		case ms < 0:
			fields = append(fields, lock.FieldError{Field: "wait_ms", Detail: "must be at least 0"})
		case ms > s.cfg.MaxWait.Milliseconds():
			wait = s.cfg.MaxWait
		default:
			wait = time.Duration(ms) * time.Millisecond
		}
	}
	return req, wait, fields
}

// checkMaxTTL returns a field error for a TTL longer than the server's
// MaxTTL. The shortest TTL is the domain's rule (lock.CheckTTL).
func (s *Server) checkMaxTTL(ttl time.Duration) *lock.FieldError {
	if ttl <= s.cfg.MaxTTL {
		return nil
	}
	return &lock.FieldError{Field: "ttl_ms", Detail: fmt.Sprintf("must be at most %d, the server's maximum TTL", s.cfg.MaxTTL.Milliseconds())}
}

// millis converts a count of milliseconds to a duration. A count too large
// for a duration saturates rather than wraps, so it fails the checks of
// the duration as it fails those of the count.
func millis(ms int64) time.Duration {
	const most = math.MaxInt64 / int64(time.Millisecond)
	return time.Duration(max(min(ms, most), -most)) * time.Millisecond
}

// saturate converts n to an int, keeping a value beyond an int's range (on
// 32-bit platforms) beyond the range the checks of the int accept.
func saturate(n int64) int {
	return int(max(min(n, math.MaxInt), math.MinInt))
}

func leaseLocation(l lock.Lease) string {
	return "/v1/locks/" + l.Lock + "/leases/" + l.ID
}

// checkLeaseID returns a field error unless id looks like a ULID, as the
// store issues them.
func checkLeaseID(id string) *lock.FieldError {
	if lock.ValidULID(id) {
		return nil
	}
	return &lock.FieldError{Field: "lease_id", Detail: "a lease id is a 26-character ULID"}
}

// leasePath validates the name and lease_id of a lease route.
func leasePath(r *http.Request) (name, leaseID string, fields []lock.FieldError) {
	name, leaseID = pathParam(r, "name"), pathParam(r, "lease_id")
	for _, fe := range []*lock.FieldError{lock.CheckName("name", name), checkLeaseID(leaseID)} {
		if fe != nil {
			fields = append(fields, *fe)
		}
	}
	return name, leaseID, fields
}

// handleRenew handles the "POST /v1/locks/{name}/leases/{lease_id}/renew"
// route: it resets the lease's expiry, with a new TTL if ttl_ms is given.
func (s *Server) handleRenew(w http.ResponseWriter, r *http.Request) {
	var body renewBody
	if err := decodeBody(w, r, &body); err != nil {
		Error(w, r, err)
		return
	}
	name, leaseID, fields := leasePath(r)
	var ttl time.Duration // 0: the lease's own TTL
	if body.TTLMs != nil {
		ttl = millis(*body.TTLMs)
		for _, fe := range []*lock.FieldError{lock.CheckTTL("ttl_ms", ttl), s.checkMaxTTL(ttl)} {
			if fe != nil {
				fields = append(fields, *fe)
			}
		}
	}
	if len(fields) > 0 {
		Error(w, r, lock.Invalid(fields...))
		return
	}
	c := callerOf(r)
	if err := authorize(c, auth.ScopeWrite, name); err != nil {
		Error(w, r, err)
		return
	}

	l, err := s.store.Renew(r.Context(), leaseRef(c, name, leaseID), ttl)
	s.reportLeaseLost(err)
	if err != nil {
		Error(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, s.newLease(l))
}

// handleRelease handles the "DELETE /v1/locks/{name}/leases/{lease_id}"
// route: it drops one hold, or all of them with all=true.
func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request) {
	q := parseQuery(r)
	all := q.bool("all")
	name, leaseID, fields := leasePath(r)
	q.fields = append(fields, q.fields...)
	if err := q.err(); err != nil {
		Error(w, r, err)
		return
	}
	c := callerOf(r)
	if err := authorize(c, auth.ScopeWrite, name); err != nil {
		Error(w, r, err)
		return
	}

	res, err := s.store.Release(r.Context(), leaseRef(c, name, leaseID), all)
	s.reportRelease(metrics.ReleaseLease, res, err)
	if err != nil {
		Error(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, ReleaseResult{
		Lock:      res.Lock,
		LeaseID:   res.LeaseID,
		HoldCount: res.HoldCount,
		Released:  res.Released,
	})
}
