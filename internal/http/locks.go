package http

import (
	"context"
	"net/http"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/lock"
)

// List limits of GET /v1/locks.
const (
	defaultListLimit = 100
	maxListLimit     = 1000
)

// handleInspect handles the "GET /v1/locks/{name}" route: the lock's state,
// at once or, with index, as a blocking query that answers when the state
// differs from index or wait_ms has passed.
func (s *Server) handleInspect(w http.ResponseWriter, r *http.Request) {
	name := pathParam(r, "name")
	q := parseQuery(r)
	index, _ := q.str("index")
	// With an index and no wait_ms, wait as long as allowed (Consul's
	// convention); without an index there is nothing to wait for.
	defaultWait := int64(0)
	if index != "" {
		defaultWait = s.cfg.MaxWait.Milliseconds()
	}
	waitMs := q.int("wait_ms", defaultWait, 0, s.cfg.MaxWait.Milliseconds(), true)
	if fe := lock.CheckName("name", name); fe != nil {
		q.fields = append([]lock.FieldError{*fe}, q.fields...)
	}
	if err := q.err(); err != nil {
		Error(w, r, err)
		return
	}
	c := callerOf(r)
	if err := authorize(c, auth.ScopeRead, name); err != nil {
		Error(w, r, err)
		return
	}

	ctx, wait := r.Context(), time.Duration(waitMs)*time.Millisecond
	if index != "" && wait > 0 && r.Method == http.MethodGet && s.canPark(w, r) {
		s.inspectParking(w, r, c, name, index, wait)
		return
	}
	if index != "" && wait > 0 {
		var end func()
		var err error
		if ctx, end, err = s.beginWatch(r, c); err != nil {
			Error(w, r, err)
			return
		}
		defer end()
	}
	st, err := lock.WaitChange(ctx, s.store, name, index, wait)
	answerInspect(w, r, st, waitError(ctx, err))
}

// answerInspect writes a lock's state, or err, as GET /v1/locks/{name}
// answers.
func answerInspect(w http.ResponseWriter, r *http.Request, st lock.State, err error) {
	if err != nil {
		Error(w, r, err)
		return
	}
	w.Header().Set("X-Lock-Index", st.Index)
	writeJSON(w, r, http.StatusOK, newLockState(st))
}

// handleForceRelease handles the "DELETE /v1/locks/{name}" route: it frees
// the lock whoever holds it. The dashboard's force release is the same
// service (internal/force), which checks and counts it.
func (s *Server) handleForceRelease(w http.ResponseWriter, r *http.Request) {
	name := pathParam(r, "name")
	released, err := s.force.Release(r.Context(), callerOf(r).key, name)
	if err != nil {
		Error(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, ForceReleaseResult{Lock: name, Released: released})
}

// handleList handles the "GET /v1/locks" route: one page of held locks whose
// names start with prefix.
func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	q := parseQuery(r)
	prefix, _ := q.str("prefix")
	limit := q.int("limit", defaultListLimit, 1, maxListLimit, false)
	cursor, _ := q.str("cursor")
	if fe := lock.CheckPrefix("prefix", prefix); fe != nil {
		q.fields = append(q.fields, *fe)
	}
	if err := q.err(); err != nil {
		Error(w, r, err)
		return
	}
	c := callerOf(r)
	err := authorize(c, auth.ScopeAdmin, "")
	if err == nil {
		err = reserved(prefix)
	}
	if err != nil {
		Error(w, r, err)
		return
	}

	// A key sees only the names its patterns cover, and the store passes
	// over the others before it counts a page: a page, and its cursor, are
	// the same whether or not there are names the key may not see.
	visible := func(name string) bool { return authorize(c, auth.ScopeAdmin, name) == nil }
	page, err := s.store.List(r.Context(), lock.ListRequest{Prefix: prefix, Limit: int(limit), Cursor: cursor, Visible: visible})
	if err != nil {
		Error(w, r, err)
		return
	}
	out := LockList{Locks: make([]LockState, 0, len(page.Locks))}
	for _, st := range page.Locks {
		if visible(st.Lock) { // again, for a store that ignores Visible
			out.Locks = append(out.Locks, newLockState(st))
		}
	}
	if page.NextCursor != "" {
		out.NextCursor = &page.NextCursor
	}
	writeJSON(w, r, http.StatusOK, out)
}

// inspectParking runs a blocking query of a lock as lock.WaitChange does,
// under the limits of blocking queries, parking the wait when it must
// sleep: an SDK's loss watch holds one per held lease.
func (s *Server) inspectParking(w http.ResponseWriter, r *http.Request, c caller, name, index string, wait time.Duration) {
	waitParking(s, s.watches, w, r, c, func(ctx context.Context) (lock.State, parkableWait[lock.State], error) {
		st, cw, err := lock.BeginWaitChange(ctx, s.store, name, index, wait)
		if cw == nil {
			return st, nil, err
		}
		return st, cw, err
	}, answerInspect, nil)
}
