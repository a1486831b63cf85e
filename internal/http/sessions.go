package http

import (
	"context"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/event"
	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/lock"
)

// Sessions (docs/SESSIONS.md): one TTL that many leases are bound to. A
// store without sessions (Store.Sessions is nil) has every session route,
// and every acquire that names a session, answered 501 unsupported.

// createSessionBody is the body of POST /v1/sessions; every field is
// optional.
type createSessionBody struct {
	TTLMs       *int64  `json:"ttl_ms"`
	Owner       *string `json:"owner"`
	LockDelayMs *int64  `json:"lock_delay_ms"`
}

// renewSessionBody is the body of POST /v1/sessions/{id}/renew.
type renewSessionBody struct {
	TTLMs *int64 `json:"ttl_ms"`
}

// Session is the JSON form of lock.Session.
type Session struct {
	SessionID   string         `json:"session_id"`
	Owner       string         `json:"owner"`
	Principal   string         `json:"principal"`
	TTLMs       int64          `json:"ttl_ms"`
	LockDelayMs int64          `json:"lock_delay_ms"`
	ExpiresAt   string         `json:"expires_at"`
	Leases      []SessionLease `json:"leases"`
	// Index changes when a lease is bound or ends (lock.SessionIndex).
	Index string `json:"index"`
}

// SessionLease is the JSON form of lock.SessionLease.
type SessionLease struct {
	Lock         string    `json:"lock"`
	LeaseID      string    `json:"lease_id"`
	Mode         lock.Mode `json:"mode"`
	FencingToken uint64    `json:"fencing_token"`
}

// SessionList is the answer to GET /v1/sessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

func newSession(s lock.Session) Session {
	out := Session{
		SessionID:   s.ID,
		Owner:       s.Owner,
		Principal:   s.Principal,
		TTLMs:       s.TTL.Milliseconds(),
		LockDelayMs: s.LockDelay.Milliseconds(),
		ExpiresAt:   event.FormatTime(s.ExpiresAt),
		Leases:      make([]SessionLease, 0, len(s.Leases)),
		Index:       lock.SessionIndex(s),
	}
	for _, l := range s.Leases {
		out.Leases = append(out.Leases, SessionLease{Lock: l.Lock, LeaseID: l.LeaseID, Mode: mode(l.Mode), FencingToken: l.Token})
	}
	return out
}

// errNoSessions answers the session routes on a store without sessions.
var errNoSessions = lock.Unsupported("this server's store keeps no sessions (docs/SESSIONS.md)")

// sessions returns the store's sessions, or the error that answers a store
// without them.
func (s *Server) sessions() (lock.Sessions, error) {
	if ss := s.store.Sessions(); ss != nil {
		return ss, nil
	}
	return nil, errNoSessions
}

func sessionLocation(id string) string { return "/v1/sessions/" + id }

// sessionRef names a session on behalf of the caller: another principal's
// session is not found, unless the caller is an admin (whose reach
// sessionVisible then bounds).
func sessionRef(c caller, id string) lock.SessionRef {
	ref := lock.SessionRef{ID: id}
	if c.key != nil && !c.key.Has(auth.ScopeAdmin) {
		ref.Principal = c.principal
	}
	return ref
}

// sessionVisible is the rule by which an admin sees and acts on another
// principal's session (docs/SECURITY.md): the key's patterns must cover
// the session's principal and every lock it holds, as they bound force
// release, listing and webhooks. Its own sessions, and every session on an
// open server, are always visible; a non-admin's reach the store bounds by
// principal (sessionRef).
func sessionVisible(c caller, sess lock.Session) bool {
	if c.key == nil || sess.Principal == c.principal {
		return true
	}
	if !c.key.Has(auth.ScopeAdmin) || !c.key.MayUse(sess.Principal) {
		return false
	}
	for _, l := range sess.Leases {
		if !c.key.MayUse(l.Lock) {
			return false
		}
	}
	return true
}

// visibleSession checks, for an admin, that the session ref names is one
// sessionVisible lets it act on, and answers the same session-not-found
// that a principal gets for another's session when it is not. The answer
// then names the session's own principal, so the act that follows is
// bound to it.
func visibleSession(ctx context.Context, ss lock.Sessions, c caller, ref lock.SessionRef) (lock.SessionRef, error) {
	if c.key == nil || ref.Principal != "" {
		return ref, nil
	}
	sess, err := ss.GetSession(ctx, ref)
	if err != nil {
		return ref, err
	}
	if !sessionVisible(c, sess) {
		return ref, lock.SessionNotFound(ref.ID)
	}
	ref.Principal = sess.Principal
	return ref, nil
}

// checkSessionTTL checks a session's TTL against the domain's bounds, then
// against the server's MaxTTL.
func (s *Server) checkSessionTTL(ttl time.Duration) []lock.FieldError {
	fe := lock.CheckSessionTTL("ttl_ms", ttl)
	if fe == nil {
		fe = s.checkMaxTTL(ttl)
	}
	if fe == nil {
		return nil
	}
	return []lock.FieldError{*fe}
}

// handleCreateSession handles the "POST /v1/sessions" route.
func (s *Server) handleCreateSession(w http.ResponseWriter, r *http.Request) {
	var body createSessionBody
	if err := decodeBody(w, r, &body); err != nil {
		Error(w, r, err)
		return
	}
	req := lock.SessionRequest{TTL: lock.DefaultSessionTTL, Owner: ulid.Make().String()}
	if body.TTLMs != nil {
		req.TTL = millis(*body.TTLMs)
	}
	if body.Owner != nil {
		req.Owner = *body.Owner
	}
	if body.LockDelayMs != nil {
		req.LockDelay = millis(*body.LockDelayMs)
	}
	err := req.Validate()
	if err == nil && body.TTLMs != nil {
		if fields := s.checkSessionTTL(req.TTL); fields != nil {
			err = lock.Invalid(fields...)
		}
	}
	if err != nil {
		Error(w, r, err)
		return
	}
	c := callerOf(r)
	if err := authorize(c, auth.ScopeWrite, ""); err != nil {
		Error(w, r, err)
		return
	}
	ss, err := s.sessions()
	if err != nil {
		Error(w, r, err)
		return
	}
	req.Principal, req.Quota = c.principal, s.cfg.MaxSessionsPerPrincipal
	sess, err := ss.CreateSession(r.Context(), req)
	if err != nil {
		Error(w, r, err)
		return
	}
	w.Header().Set("Location", sessionLocation(sess.ID))
	writeJSON(w, r, http.StatusCreated, newSession(sess))
}

// sessionPath validates the id of a session route.
func sessionPath(r *http.Request) (string, error) {
	id := pathParam(r, "id")
	if fe := lock.CheckSessionID("id", id); fe != nil {
		return "", lock.Invalid(*fe)
	}
	return id, nil
}

// sessionCall is the part every route of one session shares: the path's
// id, the caller's write scope, and a store with sessions. It answers the
// error itself and returns ok false then.
func (s *Server) sessionCall(w http.ResponseWriter, r *http.Request, fields []lock.FieldError) (ss lock.Sessions, ref lock.SessionRef, ok bool) {
	id, err := sessionPath(r)
	if err != nil {
		fields = append(lock.AsError(err).Fields, fields...)
	}
	if len(fields) > 0 {
		Error(w, r, lock.Invalid(fields...))
		return nil, ref, false
	}
	c := callerOf(r)
	if err := authorize(c, auth.ScopeWrite, ""); err != nil {
		Error(w, r, err)
		return nil, ref, false
	}
	if ss, err = s.sessions(); err == nil {
		ref, err = visibleSession(r.Context(), ss, c, sessionRef(c, id))
	}
	if err != nil {
		Error(w, r, err)
		return nil, ref, false
	}
	return ss, ref, true
}

// handleRenewSession handles the "POST /v1/sessions/{id}/renew" route.
func (s *Server) handleRenewSession(w http.ResponseWriter, r *http.Request) {
	var body renewSessionBody
	if err := decodeBody(w, r, &body); err != nil {
		Error(w, r, err)
		return
	}
	var ttl time.Duration // 0: the session's own
	var fields []lock.FieldError
	if body.TTLMs != nil {
		ttl = millis(*body.TTLMs)
		fields = s.checkSessionTTL(ttl)
	}
	ss, ref, ok := s.sessionCall(w, r, fields)
	if !ok {
		return
	}
	sess, err := ss.RenewSession(r.Context(), ref, ttl)
	if err != nil {
		Error(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, newSession(sess))
}

// handleGetSession handles the "GET /v1/sessions/{id}" route: the session
// at once or, with index, as a blocking query that answers when the
// session's index differs from index (a lease bound or ended), the
// session ends, or wait_ms has passed; as the lock's (handleInspect).
func (s *Server) handleGetSession(w http.ResponseWriter, r *http.Request) {
	q := parseQuery(r)
	index, _ := q.str("index")
	defaultWait := int64(0)
	if index != "" {
		defaultWait = s.cfg.MaxWait.Milliseconds()
	}
	waitMs := q.int("wait_ms", defaultWait, 0, s.cfg.MaxWait.Milliseconds(), true)
	ss, ref, ok := s.sessionCall(w, r, q.fields)
	if !ok {
		return
	}
	ctx, wait := r.Context(), time.Duration(waitMs)*time.Millisecond
	if index != "" && wait > 0 {
		var end func()
		var err error
		if ctx, end, err = s.beginWatch(r, callerOf(r)); err != nil {
			Error(w, r, err)
			return
		}
		defer end()
	}
	sess, err := lock.WaitSessionChange(ctx, s.store, ss, ref, index, wait)
	if err != nil {
		Error(w, r, waitError(ctx, err))
		return
	}
	writeJSON(w, r, http.StatusOK, newSession(sess))
}

// handleDeleteSession handles the "DELETE /v1/sessions/{id}" route: it ends
// the session and releases its leases, and answers the session as it was.
func (s *Server) handleDeleteSession(w http.ResponseWriter, r *http.Request) {
	ss, ref, ok := s.sessionCall(w, r, nil)
	if !ok {
		return
	}
	sess, err := ss.EndSession(r.Context(), ref)
	if err != nil {
		Error(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, newSession(sess))
}

// Bounds of GET /v1/sessions.
const (
	defaultSessionListLimit = 100
	maxSessionListLimit     = 1000
)

// handleListSessions handles the "GET /v1/sessions" route: an admin sees
// every principal's sessions that its patterns cover (sessionVisible),
// anyone else their own.
func (s *Server) handleListSessions(w http.ResponseWriter, r *http.Request) {
	q := parseQuery(r)
	prefix, _ := q.str("owner_prefix")
	limit := q.int("limit", defaultSessionListLimit, 1, maxSessionListLimit, false)
	if utf8.RuneCountInString(prefix) > lock.MaxOwnerLen {
		q.fail("owner_prefix", fmt.Sprintf("an owner prefix is at most %d characters", lock.MaxOwnerLen))
	}
	if err := q.err(); err != nil {
		Error(w, r, err)
		return
	}
	c := callerOf(r)
	if err := authorize(c, auth.ScopeWrite, ""); err != nil {
		Error(w, r, err)
		return
	}
	ss, err := s.sessions()
	if err != nil {
		Error(w, r, err)
		return
	}
	f := lock.SessionFilter{OwnerPrefix: prefix, Limit: int(limit), Principal: sessionRef(c, "").Principal,
		Visible: func(sess lock.Session) bool { return sessionVisible(c, sess) }}
	list, err := ss.ListSessions(r.Context(), f)
	if err != nil {
		Error(w, r, err)
		return
	}
	out := SessionList{Sessions: make([]Session, 0, len(list))}
	for _, sess := range list {
		out.Sessions = append(out.Sessions, newSession(sess))
	}
	writeJSON(w, r, http.StatusOK, out)
}
