package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/lockapi/lockapi/event"
	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
)

// The Activity page, a lock page's timeline and the Sessions page read the
// API (apiCall): GET /v1/stats/locks, GET /v1/locks/{name}/history and
// /v1/sessions, as the session's key.

// activityPage is the data of the Activity page.
type activityPage struct {
	chrome
	// Note says why there is nothing to show (a server without events).
	Note     string
	Window   string
	Chart    activityChart
	Locks    []hotLock
	Expiring []lockhttp.PrincipalExpiries
}

// hotLock is one row of the hot-locks table.
type hotLock struct {
	lockhttp.LockStats
	Spark, SparkTitle string
}

// activityWindow is what the Activity page shows: the last hour.
const activityWindow = "60m"

// handleActivity handles the "GET /ui/activity" route: grants, expiries
// and force releases per minute over the last hour, the hottest locks and
// the principals whose leases expired most, of the locks the session may
// read.
func (h *Handler) handleActivity(w http.ResponseWriter, r *http.Request, s session) {
	p := activityPage{chrome: h.chrome(s, "Activity"), Window: "the last hour"}
	var st lockhttp.LocksStats
	err := h.apiCall(r, s, http.MethodGet, "/v1/stats/locks?window="+activityWindow+"&limit=20", &st)
	if e, ok := err.(*apiError); ok && e.Type == "events-disabled" {
		p.Note = "Activity is made of lock events, and this server records none (LOCKAPI_EVENTS=false, or redlock mode)."
		h.render(w, r, http.StatusOK, "activity", p)
		return
	}
	if err != nil {
		h.failAPI(w, r, err)
		return
	}
	p.Chart = newActivityChart(st.Minutes)
	for _, l := range st.Locks {
		pts, title := sparkline(l.GrantsPerMinute)
		p.Locks = append(p.Locks, hotLock{LockStats: l, Spark: pts, SparkTitle: title})
	}
	p.Expiring = st.Expiring
	h.render(w, r, http.StatusOK, "activity", p)
}

// timelineOf returns the lock's timeline, or a note that says why there
// is none.
func (h *Handler) timelineOf(r *http.Request, s session, name string) (*timeline, string) {
	var hist lockhttp.LockHistory
	err := h.apiCall(r, s, http.MethodGet, "/v1/locks/"+url.PathEscape(name)+"/history?limit=100", &hist)
	if e, ok := err.(*apiError); ok && e.Type == "events-disabled" {
		return nil, "No timeline: it is made of lock events, and this server records none."
	}
	if err != nil {
		return nil, "Timeline unavailable: " + err.Error()
	}
	tl := newTimeline(hist.Leases, time.Now())
	if tl == nil {
		return nil, "No lease of this lock in the last hour."
	}
	return tl, ""
}

// sessionsPage is the data of the Sessions page.
type sessionsPage struct {
	chrome
	Note     string
	Sessions []sessionView
	// CanEnd: the session may end sessions (the admin scope).
	CanEnd bool
}

// sessionView is one live session.
type sessionView struct {
	ID, Owner, Principal string
	// ExpiresInMs is what is left of its TTL, counted down by the script.
	ExpiresInMs int64
	LockDelayMs int64
	Leases      []lockhttp.SessionLease
}

// handleSessions handles the "GET /ui/sessions" route: the live sessions
// the session's key may see (GET /v1/sessions: an admin's every
// principal's its patterns cover, anyone else's its own).
func (h *Handler) handleSessions(w http.ResponseWriter, r *http.Request, s session) {
	p := sessionsPage{chrome: h.chrome(s, "Sessions"), CanEnd: s.may(auth.ScopeAdmin, "")}
	if id := r.URL.Query().Get("ended"); id != "" && len(id) <= 64 {
		p.Notice = fmt.Sprintf("Ended session %s: its leases are released.", id)
	}
	var list lockhttp.SessionList
	err := h.apiCall(r, s, http.MethodGet, "/v1/sessions?limit=1000", &list)
	if e, ok := err.(*apiError); ok && (e.Type == "unsupported" || e.Type == "forbidden") {
		p.Note = e.Detail
		h.render(w, r, http.StatusOK, "sessions", p)
		return
	}
	if err != nil {
		h.failAPI(w, r, err)
		return
	}
	now := time.Now()
	for _, ss := range list.Sessions {
		v := sessionView{ID: ss.SessionID, Owner: ss.Owner, Principal: ss.Principal, LockDelayMs: ss.LockDelayMs, Leases: ss.Leases}
		if t, err := event.ParseTime(ss.ExpiresAt); err == nil {
			v.ExpiresInMs = max(t.Sub(now).Milliseconds(), 0)
		}
		p.Sessions = append(p.Sessions, v)
	}
	h.render(w, r, http.StatusOK, "sessions", p)
}

// handleEndSession handles the "POST /ui/sessions/{id}/end" route, the
// API's "DELETE /v1/sessions/{id}" for an admin: it ends the session and
// releases its leases, checked and counted as the API's.
func (h *Handler) handleEndSession(w http.ResponseWriter, r *http.Request, s session) {
	id := r.PathValue("id")
	if err := s.allow(auth.ScopeAdmin, ""); err != nil {
		h.failErr(w, r, err)
		return
	}
	if !lock.ValidULID(id) {
		h.fail(w, r, http.StatusBadRequest, "That is not a session id.")
		return
	}
	if err := h.apiCall(r, s, http.MethodDelete, "/v1/sessions/"+id, nil); err != nil {
		h.failAPI(w, r, err)
		return
	}
	http.Redirect(w, r, "/ui/sessions?ended="+url.QueryEscape(id), http.StatusSeeOther)
}
