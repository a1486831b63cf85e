package ui

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/lock"
)

// How much of the store the list page reads: it shows at most maxRows
// locks, reading at most maxListPages pages of listPageSize.
const (
	maxRows      = 200
	listPageSize = 200
	maxListPages = 10
)

// lockView is a lock's state as the pages show it.
type lockView struct {
	Name      string
	Held      bool
	Kind      lock.Kind
	Limit     int
	Holders   []holderView
	Queue     int
	LastToken uint64
	// LockDelayMs is what is left of a lock-delay (docs/SESSIONS.md), 0
	// for none: the page's script counts it down as it does a TTL.
	LockDelayMs int64
	Index       string
}

// holderView is one lease of a lock, never its id.
type holderView struct {
	Owner     string
	Principal string
	// Mode is how the lease holds the lock: exclusive, shared, or a
	// semaphore's permit.
	Mode       string
	Token      uint64
	HoldCount  int
	AcquiredAt string
	// ExpiresInMs is the TTL left when the state was read: the page's
	// script counts it down on the browser's clock.
	ExpiresInMs int64
	Metadata    map[string]string
	// Session is the session the lease is bound to, "" for none: it ends
	// with the session (docs/SESSIONS.md).
	Session string
}

func newLockView(st lock.State) lockView {
	v := lockView{Name: st.Lock, Held: st.Held, Kind: st.Kind, Limit: st.Limit, Queue: st.Queue, LastToken: st.LastToken, Index: st.Index}
	if st.LockDelay > 0 {
		v.LockDelayMs = max(st.LockDelay.Milliseconds(), 1)
	}
	for _, hd := range st.Holders {
		mode := string(hd.Mode)
		switch {
		case st.Kind == lock.KindSemaphore:
			mode = "permit"
		case mode == "":
			mode = string(lock.Exclusive)
		}
		v.Holders = append(v.Holders, holderView{
			Owner: hd.Owner, Principal: hd.Principal, Mode: mode, Token: hd.Token, HoldCount: hd.HoldCount,
			AcquiredAt:  hd.AcquiredAt.UTC().Format(timeFormat),
			ExpiresInMs: max(hd.ExpiresIn.Milliseconds(), 0),
			Metadata:    hd.Metadata,
			Session:     hd.Session,
		})
	}
	return v
}

// timeFormat is how the pages write times: UTC, to the millisecond.
const timeFormat = "2006-01-02 15:04:05.000Z"

// Owner is what the list shows as the owner: the one holder's, or how many
// hold the lock: permits of a semaphore, readers, or holders; none for a
// free one (closed for a lock-delay).
func (v lockView) Owner() string {
	switch {
	case len(v.Holders) == 0:
		return "—"
	case len(v.Holders) == 1:
		return v.Holders[0].Owner
	case v.Kind == lock.KindSemaphore:
		return fmt.Sprintf("%d permits", len(v.Holders))
	case v.Kind == lock.KindShared:
		return fmt.Sprintf("%d readers", len(v.Holders))
	}
	return fmt.Sprintf("%d holders", len(v.Holders))
}

// HoldCount sums the holds of every lease.
func (v lockView) HoldCount() int {
	n := 0
	for _, hd := range v.Holders {
		n += hd.HoldCount
	}
	return n
}

// ExpiresInMs is when the first lease ends unless renewed.
func (v lockView) ExpiresInMs() int64 {
	if len(v.Holders) == 0 {
		return 0
	}
	ms := v.Holders[0].ExpiresInMs
	for _, hd := range v.Holders[1:] {
		ms = min(ms, hd.ExpiresInMs)
	}
	return ms
}

// locksPage is the data of the list page and of its rows fragment.
type locksPage struct {
	chrome
	feed
	// CanList: the session may list locks (the admin scope, as GET
	// /v1/locks needs).
	CanList bool
	Prefix  string
	Locks   []lockView
	// More: more locks are held than the page shows.
	More bool
	// Version changes when the rows do: the script asks for rows with
	// ?since=Version and gets 204 while nothing changed.
	Version string
}

// handleLocks handles the "GET /ui/" route: the held locks whose names start
// with ?prefix=, and the live feed of their events.
func (h *Handler) handleLocks(w http.ResponseWriter, r *http.Request, s session) {
	p, err := h.locksPage(r, s)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	q := r.URL.Query()
	if name := q.Get("released"); lock.ValidName(name) {
		p.Notice = fmt.Sprintf("Force-released %s.", name)
	} else if name := q.Get("free"); lock.ValidName(name) {
		p.Notice = fmt.Sprintf("%s was free already: nothing to release.", name)
	}
	p.feed = h.feed(r.Context(), s, lock.EventFilter{Prefix: p.Prefix})
	h.render(w, r, http.StatusOK, "locks", p)
}

// handleRows handles the "GET /ui/rows" route: the list page's table rows,
// which its script fetches every half second; 204 when they are the
// version ?since= names.
func (h *Handler) handleRows(w http.ResponseWriter, r *http.Request, s session) {
	p, err := h.locksPage(r, s)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	h.fragment(w, r, "locks", "rows", p.Version, p)
}

func (h *Handler) locksPage(r *http.Request, s session) (locksPage, error) {
	p := locksPage{chrome: h.chrome(s, "Held locks"), Prefix: r.URL.Query().Get("prefix"), CanList: s.may(auth.ScopeAdmin, "")}
	if fe := lock.CheckPrefix("prefix", p.Prefix); fe != nil {
		return p, lock.Invalid(*fe)
	}
	if !p.CanList {
		return p, nil
	}
	var err error
	p.Locks, p.More, err = h.held(r.Context(), s, p.Prefix)
	hash := fnv.New64a()
	for _, l := range p.Locks {
		fmt.Fprintf(hash, "%s\x00%s\x00", l.Name, l.Index)
	}
	fmt.Fprint(hash, p.More)
	p.Version = fmt.Sprintf("%x", hash.Sum64())
	return p, err
}

// held reads the held locks under prefix that the session may list, and
// those closed for a lock-delay, sorted by name.
func (h *Handler) held(ctx context.Context, s session, prefix string) (locks []lockView, more bool, err error) {
	cursor := ""
	// As GET /v1/locks: the names a key may not see, and lockapi's own,
	// are passed over before a page is counted.
	visible := func(name string) bool { return s.may(auth.ScopeAdmin, name) && !lock.Reserved(name) }
	for range maxListPages {
		page, err := h.store.List(ctx, lock.ListRequest{Prefix: prefix, Limit: listPageSize, Cursor: cursor, Visible: visible})
		if err != nil {
			return nil, false, err
		}
		for _, st := range page.Locks {
			if (st.Held || st.LockDelay > 0) && visible(st.Lock) { // again, for a store that ignores Visible
				locks = append(locks, newLockView(st))
			}
		}
		if cursor = page.NextCursor; cursor == "" || len(locks) >= maxRows {
			break
		}
	}
	slices.SortFunc(locks, func(a, b lockView) int { return strings.Compare(a.Name, b.Name) })
	more = cursor != ""
	if len(locks) > maxRows {
		locks, more = locks[:maxRows], true
	}
	return locks, more, nil
}

// handleGoTo handles the "GET /ui/lock" route: the form that opens a lock
// by name.
func (h *Handler) handleGoTo(w http.ResponseWriter, r *http.Request, _ session) {
	name := r.URL.Query().Get("name")
	if fe := lock.CheckName("name", name); fe != nil {
		h.fail(w, r, http.StatusBadRequest, fe.Detail)
		return
	}
	http.Redirect(w, r, "/ui/locks/"+name, http.StatusSeeOther)
}

// lockPage is the data of a lock's page, its state fragment and the
// force-release confirmation.
type lockPage struct {
	chrome
	feed
	Lock lockView
	// CanRelease: the session may force-release this lock.
	CanRelease bool
	// Timeline is the lock's recent leases (nil: TimelineNote says why
	// there are none).
	Timeline     *timeline
	TimelineNote string
}

// handleLock handles the "GET /ui/locks/{name}" route: the lock's holders,
// blocking-query index and events.
func (h *Handler) handleLock(w http.ResponseWriter, r *http.Request, s session) {
	p, err := h.lockPage(r, s, auth.ScopeRead)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	p.feed = h.feed(r.Context(), s, lock.EventFilter{Lock: p.Lock.Name})
	p.Timeline, p.TimelineNote = h.timelineOf(r, s, p.Lock.Name)
	h.render(w, r, http.StatusOK, "lock", p)
}

// handleLockState handles the "GET /ui/locks/{name}/state" route: the
// lock page's state, which its script fetches every half second; 204 while
// the lock's index is the one ?since= names.
func (h *Handler) handleLockState(w http.ResponseWriter, r *http.Request, s session) {
	p, err := h.lockPage(r, s, auth.ScopeRead)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	h.fragment(w, r, "lock", "state", p.Lock.Index, p)
}

// handleConfirm handles the "GET /ui/locks/{name}/release" route: what a
// force release would end, and the form that does it.
func (h *Handler) handleConfirm(w http.ResponseWriter, r *http.Request, s session) {
	p, err := h.lockPage(r, s, auth.ScopeAdmin)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	p.Title = "Force-release " + p.Lock.Name
	h.render(w, r, http.StatusOK, "confirm", p)
}

// handleForceRelease handles the "POST /ui/locks/{name}/release" route, the
// API's "DELETE /v1/locks/{name}": it frees the lock whoever holds it.
func (h *Handler) handleForceRelease(w http.ResponseWriter, r *http.Request, s session) {
	name := r.PathValue("name")
	// The session's check first: to the session, a nil key is an open
	// server only when the server is open. The service checks again by the
	// same rule, and counts the release as the API's does.
	if err := authorize(s, auth.ScopeAdmin, name); err != nil {
		h.failErr(w, r, err)
		return
	}
	released, err := h.force.Release(r.Context(), s.key, name)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	if released {
		http.Redirect(w, r, "/ui/?released="+name, http.StatusSeeOther)
	} else {
		http.Redirect(w, r, "/ui/?free="+name, http.StatusSeeOther)
	}
}

func (h *Handler) lockPage(r *http.Request, s session, scope auth.Scope) (lockPage, error) {
	name := r.PathValue("name")
	if err := authorize(s, scope, name); err != nil {
		return lockPage{}, err
	}
	st, err := h.store.Inspect(r.Context(), name)
	if err != nil {
		return lockPage{}, err
	}
	return lockPage{chrome: h.chrome(s, name), Lock: newLockView(st), CanRelease: s.may(auth.ScopeAdmin, name)}, nil
}

// authorize checks a lock name and the session's right to use it with
// scope, with the API's answers: a name lockapi keeps for itself
// (lock.Reserved) only an admin's force release may touch.
func authorize(s session, scope auth.Scope, name string) error {
	if fe := lock.CheckName("name", name); fe != nil {
		return lock.Invalid(*fe)
	}
	if lock.Reserved(name) && scope != auth.ScopeAdmin {
		return &lock.Error{Code: lock.CodeForbidden, Detail: fmt.Sprintf("%q is a reserved name: names that begin with %q are lockapi's own", name, lock.ReservedPrefix)}
	}
	return s.allow(scope, name)
}

// fragment answers a script's refresh: 204 when the client has version
// already, else the fragment with its version in X-UI-Version.
func (h *Handler) fragment(w http.ResponseWriter, r *http.Request, page, name, version string, data any) {
	w.Header().Set("X-UI-Version", version)
	if r.URL.Query().Get("since") == version {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	h.execute(w, r, http.StatusOK, h.pages[page], name, data)
}

// funcs are the templates' helpers.
var funcs = map[string]any{
	"seconds": formatTTL,
	"ms":      formatMs,
	"minute":  minuteLabel,
	"sub":     func(a, b int) int { return a - b },
}

// formatTTL writes a TTL as the script's countdown does: 12.3 s, 4m 05s,
// 2h 03m.
func formatTTL(ms int64) string {
	d := time.Duration(max(ms, 0)) * time.Millisecond
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
	}
}
