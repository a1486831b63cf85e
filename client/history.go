package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/lockapi/lockapi/client/api"
	"github.com/lockapi/lockapi/event"
)

// EndedBy says how a lease of a lock's history ended.
type EndedBy string

// The ends of a lease; "" for a current holder.
const (
	EndedReleased      EndedBy = "released"
	EndedExpired       EndedBy = "expired"
	EndedForceReleased EndedBy = "force_released"
	EndedSessionEnded  EndedBy = "session_ended"
)

// PastLease is one lease of a lock's history (History): a current holder,
// with no EndedAt, or a lease that ended. The server keeps what it read of
// the last hour of lock events; a time or duration it did not see is zero,
// and its Known field false.
type PastLease struct {
	Owner     string
	Principal string
	Shared    bool
	Token     uint64
	// Session is the session the lease was bound to; "" for none.
	Session string
	// AcquiredAt is zero when the grant is older than what the server read.
	AcquiredAt time.Time
	// EndedAt and EndedBy are zero and "" for a current holder.
	EndedAt time.Time
	EndedBy EndedBy
	// Held is from the grant to the end, Waited how long the request waited
	// for the grant; HeldKnown and WaitedKnown say whether the server knew.
	Held        time.Duration
	HeldKnown   bool
	Waited      time.Duration
	WaitedKnown bool
}

// History returns the lock name's recent leases, newest first, its current
// holders first (GET /v1/locks/{name}/history): at most limit of them, 0
// for the server's default (100). A server that records no lock events
// answers with a *ProblemError of type events-disabled. Other errors are
// Inspect's.
func (c *Client) History(ctx context.Context, name string, limit int) ([]PastLease, error) {
	params := &api.GetLockHistoryParams{}
	if limit > 0 {
		n := int32(min(limit, 1<<30))
		params.Limit = &n
	}
	var h api.LockHistory
	err := c.call(ctx, fmt.Sprintf("history of %q", name), name, 0, func(ctx context.Context) (*http.Response, error) {
		return c.api.GetLockHistory(ctx, name, params)
	}, http.StatusOK, &h)
	if err != nil {
		return nil, err
	}
	out := make([]PastLease, 0, len(h.Leases))
	for _, l := range h.Leases {
		out = append(out, newPastLease(l))
	}
	return out, nil
}

func newPastLease(l api.HistoryLease) PastLease {
	out := PastLease{Owner: l.Owner, Principal: l.Principal, Shared: l.Mode == api.LeaseModeShared, Token: uint64(l.FencingToken)}
	if l.Session != nil {
		out.Session = *l.Session
	}
	if l.AcquiredAt != nil {
		out.AcquiredAt = *l.AcquiredAt
	}
	if l.EndedAt != nil {
		out.EndedAt = *l.EndedAt
	}
	if l.EndedBy != nil {
		out.EndedBy = EndedBy(*l.EndedBy)
	}
	if l.HeldMs != nil {
		out.Held, out.HeldKnown = time.Duration(*l.HeldMs)*time.Millisecond, true
	}
	if l.WaitedMs != nil {
		out.Waited, out.WaitedKnown = time.Duration(*l.WaitedMs)*time.Millisecond, true
	}
	return out
}

// MarshalJSON writes l as the server answers it (HistoryLease): the same
// members, in the same order, times in the API's format.
func (l PastLease) MarshalJSON() ([]byte, error) {
	out := struct {
		Owner        string `json:"owner"`
		Principal    string `json:"principal"`
		Mode         string `json:"mode"`
		FencingToken uint64 `json:"fencing_token"`
		Session      string `json:"session,omitempty"`
		AcquiredAt   string `json:"acquired_at,omitempty"`
		EndedAt      string `json:"ended_at,omitempty"`
		EndedBy      string `json:"ended_by,omitempty"`
		HeldMs       *int64 `json:"held_ms,omitempty"`
		WaitedMs     *int64 `json:"waited_ms,omitempty"`
	}{Owner: l.Owner, Principal: l.Principal, Mode: string(api.LeaseModeExclusive), FencingToken: l.Token, Session: l.Session, EndedBy: string(l.EndedBy)}
	if l.Shared {
		out.Mode = string(api.LeaseModeShared)
	}
	if !l.AcquiredAt.IsZero() {
		out.AcquiredAt = event.FormatTime(l.AcquiredAt)
	}
	if !l.EndedAt.IsZero() {
		out.EndedAt = event.FormatTime(l.EndedAt)
	}
	if l.HeldKnown {
		ms := l.Held.Milliseconds()
		out.HeldMs = &ms
	}
	if l.WaitedKnown {
		ms := l.Waited.Milliseconds()
		out.WaitedMs = &ms
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as the server writes
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// StatsSort orders the locks of LockStats.
type StatsSort string

// The orders of LockStats, largest first.
const (
	SortByGrants   StatsSort = "grants"
	SortByWaited   StatsSort = "waited" // waited p99
	SortByExpiries StatsSort = "expiries"
)

// LockStatsOptions selects LockStats' answer. Every field is optional.
type LockStatsOptions struct {
	// Window is how far back to count, in whole minutes from 1m to 1h; 0
	// is the server's default (15m).
	Window time.Duration
	// Sort orders the locks; "" is SortByGrants.
	Sort StatsSort
	// Limit is the most locks (and principals); 0 is the server's default
	// (20).
	Limit int
}

// HotLock is one lock's figures over a window of LockStats.
type HotLock struct {
	Lock          string
	Grants        int
	Expiries      int
	ForceReleases int
	HeldP50       time.Duration
	HeldP99       time.Duration
	WaitedP50     time.Duration
	WaitedP99     time.Duration
	// MaxQueue is the largest queue of waiters seen.
	MaxQueue int
	// GrantsPerMinute has a count per minute of the window, oldest first.
	GrantsPerMinute []int
}

// StatsMinute is one minute of a LockStats window, over the locks the
// caller may read.
type StatsMinute struct {
	At            time.Time
	Grants        int
	Expiries      int
	ForceReleases int
}

// ExpiringPrincipal is a principal whose leases expired in the window.
type ExpiringPrincipal struct {
	Principal string
	Expiries  int
}

// LockStats is the answer of (*Client).LockStats.
type LockStats struct {
	Window time.Duration
	// Since is the start of the window's first minute.
	Since time.Time
	Sort  StatsSort
	// Locks are the hottest locks the caller may read.
	Locks []HotLock
	// Minutes has every minute of the window, oldest first.
	Minutes []StatsMinute
	// Expiring lists the principals whose leases expired most.
	Expiring []ExpiringPrincipal
}

// LockStats returns the hottest locks over a recent window, of those the
// caller may read (GET /v1/stats/locks). A server that records no lock
// events answers with a *ProblemError of type events-disabled.
func (c *Client) LockStats(ctx context.Context, opts LockStatsOptions) (*LockStats, error) {
	params := &api.GetLockStatsParams{}
	if opts.Window > 0 {
		w := fmt.Sprintf("%dm", int64(opts.Window/time.Minute))
		params.Window = &w
	}
	if opts.Sort != "" {
		s := api.GetLockStatsParamsSort(opts.Sort)
		params.Sort = &s
	}
	if opts.Limit > 0 {
		n := int32(min(opts.Limit, 1<<30))
		params.Limit = &n
	}
	var s api.LockStatsList
	err := c.call(ctx, "lock stats", "", 0, func(ctx context.Context) (*http.Response, error) {
		return c.api.GetLockStats(ctx, params)
	}, http.StatusOK, &s)
	if err != nil {
		return nil, err
	}
	return newLockStats(&s), nil
}

func newLockStats(s *api.LockStatsList) *LockStats {
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	out := &LockStats{Window: ms(s.WindowMs), Since: s.Since, Sort: StatsSort(s.Sort)}
	for _, l := range s.Locks {
		h := HotLock{Lock: l.Lock, Grants: int(l.Grants), Expiries: int(l.Expiries), ForceReleases: int(l.ForceReleases),
			HeldP50: ms(l.HeldP50Ms), HeldP99: ms(l.HeldP99Ms), WaitedP50: ms(l.WaitedP50Ms), WaitedP99: ms(l.WaitedP99Ms),
			MaxQueue: int(l.MaxQueue), GrantsPerMinute: make([]int, len(l.GrantsPerMinute))}
		for i, n := range l.GrantsPerMinute {
			h.GrantsPerMinute[i] = int(n)
		}
		out.Locks = append(out.Locks, h)
	}
	for _, m := range s.Minutes {
		out.Minutes = append(out.Minutes, StatsMinute{At: m.At, Grants: int(m.Grants), Expiries: int(m.Expiries), ForceReleases: int(m.ForceReleases)})
	}
	for _, p := range s.ExpiringPrincipals {
		out.Expiring = append(out.Expiring, ExpiringPrincipal{Principal: p.Principal, Expiries: int(p.Expiries)})
	}
	return out
}
