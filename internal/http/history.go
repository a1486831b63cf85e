package http

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lockapi/lockapi/event"
	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/history"
	"github.com/lockapi/lockapi/internal/lock"
)

// The limits of the history and stats routes' parameters.
const (
	defaultHistoryLimit = 100
	maxHistoryLimit     = 1000
	defaultStatsLimit   = 20
	maxStatsLimit       = 1000
	defaultStatsWindow  = 15 * time.Minute
)

// errHistoryOff answers the history and stats routes of a server that
// reads no lock events: they are made of them.
var errHistoryOff = &httpError{kindEventsOff, "lock history and statistics are made of lock events, and this server records none (LOCKAPI_EVENTS=false, or redlock mode)"}

// HistoryLease is one lease of GET /v1/locks/{name}/history. A live lease
// has no ended_at, ended_by nor held_ms; acquired_at and waited_ms are
// absent where the grant is older than what the server keeps.
type HistoryLease struct {
	Owner        string    `json:"owner"`
	Principal    string    `json:"principal"`
	Mode         lock.Mode `json:"mode"`
	FencingToken uint64    `json:"fencing_token"`
	Session      string    `json:"session,omitempty"`
	AcquiredAt   string    `json:"acquired_at,omitempty"`
	EndedAt      string    `json:"ended_at,omitempty"`
	EndedBy      string    `json:"ended_by,omitempty"`
	HeldMs       *int64    `json:"held_ms,omitempty"`
	WaitedMs     *int64    `json:"waited_ms,omitempty"`
}

// LockHistory is the answer to GET /v1/locks/{name}/history.
type LockHistory struct {
	Lock   string         `json:"lock"`
	Leases []HistoryLease `json:"leases"`
}

// LockStats is one lock of GET /v1/stats/locks.
type LockStats struct {
	Lock            string `json:"lock"`
	Grants          int    `json:"grants"`
	Expiries        int    `json:"expiries"`
	ForceReleases   int    `json:"force_releases"`
	HeldP50Ms       int64  `json:"held_p50_ms"`
	HeldP99Ms       int64  `json:"held_p99_ms"`
	WaitedP50Ms     int64  `json:"waited_p50_ms"`
	WaitedP99Ms     int64  `json:"waited_p99_ms"`
	MaxQueue        int    `json:"max_queue"`
	GrantsPerMinute []int  `json:"grants_per_minute"`
}

// StatsMinute is one minute of GET /v1/stats/locks, over the locks the
// caller may read.
type StatsMinute struct {
	At            string `json:"at"`
	Grants        int    `json:"grants"`
	Expiries      int    `json:"expiries"`
	ForceReleases int    `json:"force_releases"`
}

// PrincipalExpiries is one principal of GET /v1/stats/locks whose leases
// expired.
type PrincipalExpiries struct {
	Principal string `json:"principal"`
	Expiries  int    `json:"expiries"`
}

// LocksStats is the answer to GET /v1/stats/locks.
type LocksStats struct {
	WindowMs int64               `json:"window_ms"`
	Since    string              `json:"since"`
	Sort     string              `json:"sort"`
	Locks    []LockStats         `json:"locks"`
	Minutes  []StatsMinute       `json:"minutes"`
	Expiring []PrincipalExpiries `json:"expiring_principals"`
}

// handleLockHistory handles the "GET /v1/locks/{name}/history" route: the
// lock's recent leases, newest first, its current holders (the store's
// answer) before the ended ones (the server's window of events).
func (s *Server) handleLockHistory(w http.ResponseWriter, r *http.Request) {
	name := pathParam(r, "name")
	q := parseQuery(r)
	limit := int(q.int("limit", defaultHistoryLimit, 1, maxHistoryLimit, true))
	if fe := lock.CheckName("name", name); fe != nil {
		q.fields = append([]lock.FieldError{*fe}, q.fields...)
	}
	if err := q.err(); err != nil {
		Error(w, r, err)
		return
	}
	if err := authorize(callerOf(r), auth.ScopeRead, name); err != nil {
		Error(w, r, err)
		return
	}
	if s.cfg.History == nil {
		Error(w, r, errHistoryOff)
		return
	}
	st, err := s.store.Inspect(r.Context(), name)
	if err != nil {
		Error(w, r, err)
		return
	}
	seen := s.cfg.History.History(name, maxHistoryLimit+len(st.Holders))
	live := make(map[uint64]history.Lease)
	for _, l := range seen {
		if l.EndedBy == history.Live {
			live[l.Token] = l
		}
	}
	out := LockHistory{Lock: name, Leases: make([]HistoryLease, 0, min(limit, len(seen)+len(st.Holders)))}
	for i := len(st.Holders) - 1; i >= 0 && len(out.Leases) < limit; i-- {
		h := st.Holders[i]
		l, ok := live[h.Token]
		if !ok {
			l = history.Lease{AcquiredAt: h.AcquiredAt, Waited: -1}
		}
		l.Owner, l.Principal, l.Mode, l.Token, l.Session = h.Owner, h.Principal, h.Mode, h.Token, h.Session
		out.Leases = append(out.Leases, newHistoryLease(l))
	}
	for _, l := range seen {
		if len(out.Leases) == limit {
			break
		}
		if l.EndedBy != history.Live {
			out.Leases = append(out.Leases, newHistoryLease(l))
		}
	}
	writeJSON(w, r, http.StatusOK, out)
}

// newHistoryLease is l's JSON; a negative Waited is unknown.
func newHistoryLease(l history.Lease) HistoryLease {
	out := HistoryLease{Owner: l.Owner, Principal: l.Principal, Mode: mode(l.Mode), FencingToken: l.Token, Session: l.Session}
	if !l.AcquiredAt.IsZero() {
		out.AcquiredAt = event.FormatTime(l.AcquiredAt)
		if l.Waited >= 0 {
			ms := l.Waited.Milliseconds()
			out.WaitedMs = &ms
		}
	}
	if l.EndedBy != history.Live {
		out.EndedAt, out.EndedBy = event.FormatTime(l.EndedAt), l.EndedBy.String()
		if !l.AcquiredAt.IsZero() {
			ms := l.Held().Milliseconds()
			out.HeldMs = &ms
		}
	}
	return out
}

// handleLockStats handles the "GET /v1/stats/locks" route: the hottest
// locks over the last window, of those the caller may read.
func (s *Server) handleLockStats(w http.ResponseWriter, r *http.Request) {
	q := parseQuery(r)
	window := defaultStatsWindow
	if v, ok := q.str("window"); ok {
		var err error
		if window, err = parseWindow(v); err != nil {
			window = defaultStatsWindow
			q.fail("window", "must be whole minutes from 1m to 60m, or 1h: e.g. 15m")
		}
	}
	sort := history.ByGrants
	if v, ok := q.str("sort"); ok {
		sort = history.Sort(v)
		if !validSort(sort) {
			q.fail("sort", fmt.Sprintf("must be one of %s", sortList()))
		}
	}
	limit := int(q.int("limit", defaultStatsLimit, 1, maxStatsLimit, true))
	if err := q.err(); err != nil {
		Error(w, r, err)
		return
	}
	c := callerOf(r)
	if err := authorize(c, auth.ScopeRead, ""); err != nil {
		Error(w, r, err)
		return
	}
	if s.cfg.History == nil {
		Error(w, r, errHistoryOff)
		return
	}
	// A key sees the figures of the names its patterns cover only, an
	// admin's too (locks:admin is no wider a set of names).
	visible := func(name string) bool { return authorize(c, auth.ScopeRead, name) == nil }
	st := s.cfg.History.Stats(history.StatsQuery{Window: window, Sort: sort, Limit: limit, Visible: visible})
	writeJSON(w, r, http.StatusOK, newLocksStats(st, window, sort))
}

// parseWindow reads a stats window: 1m to 60m (no leading zero), or 1h,
// as openapi.yaml's pattern says.
func parseWindow(v string) (time.Duration, error) {
	if v == "1h" {
		return time.Hour, nil
	}
	num, ok := strings.CutSuffix(v, "m")
	n, err := strconv.Atoi(num)
	if !ok || err != nil || num == "" || num[0] < '1' || num[0] > '9' || n < 1 || n > 60 {
		return 0, errBadWindow
	}
	return time.Duration(n) * time.Minute, nil
}

var errBadWindow = errors.New("bad window")

func validSort(s history.Sort) bool {
	for _, v := range history.Sorts {
		if v == s {
			return true
		}
	}
	return false
}

func sortList() string {
	names := make([]string, len(history.Sorts))
	for i, v := range history.Sorts {
		names[i] = string(v)
	}
	return strings.Join(names, ", ")
}

func newLocksStats(st history.Stats, window time.Duration, sort history.Sort) LocksStats {
	out := LocksStats{WindowMs: window.Milliseconds(), Since: event.FormatTime(st.Since), Sort: string(sort),
		Locks: make([]LockStats, 0, len(st.Locks)), Minutes: make([]StatsMinute, 0, len(st.Minutes)),
		Expiring: make([]PrincipalExpiries, 0, len(st.Expiring))}
	for _, l := range st.Locks {
		out.Locks = append(out.Locks, LockStats{Lock: l.Lock, Grants: l.Grants, Expiries: l.Expiries, ForceReleases: l.ForceReleases,
			HeldP50Ms: l.HeldP50.Milliseconds(), HeldP99Ms: l.HeldP99.Milliseconds(),
			WaitedP50Ms: l.WaitedP50.Milliseconds(), WaitedP99Ms: l.WaitedP99.Milliseconds(),
			MaxQueue: l.MaxQueue, GrantsPerMinute: l.GrantsPerMinute})
	}
	for _, m := range st.Minutes {
		out.Minutes = append(out.Minutes, StatsMinute{At: event.FormatTime(m.At), Grants: m.Grants, Expiries: m.Expiries, ForceReleases: m.ForceReleases})
	}
	for _, p := range st.Expiring {
		out.Expiring = append(out.Expiring, PrincipalExpiries{Principal: p.Principal, Expiries: p.Expiries})
	}
	return out
}
