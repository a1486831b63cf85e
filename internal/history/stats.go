package history

import (
	"cmp"
	"slices"
	"time"
)

// Sort orders the locks of Stats.
type Sort string

// The orders of Stats, each largest first, then by name.
const (
	ByGrants   Sort = "grants"   // grants in the window
	ByWaited   Sort = "waited"   // waited p99, then grants
	ByExpiries Sort = "expiries" // expiries, then grants
)

// Sorts lists every order, the default first.
var Sorts = []Sort{ByGrants, ByWaited, ByExpiries}

// StatsQuery asks for the hottest locks over the last Window.
type StatsQuery struct {
	// Window is how far back to count, in whole minutes up to the span;
	// the current minute counts as one.
	Window time.Duration
	Sort   Sort
	Limit  int
	// Visible selects the names the caller may read; nil: every name.
	Visible func(name string) bool
}

// LockStats are one lock's figures over a window. The percentiles are of
// the leases the window keeps of it (Options.Leases) that fall in the
// window: held of those that ended in it, waited of those granted in it.
type LockStats struct {
	Lock          string
	Grants        int
	Expiries      int
	ForceReleases int
	HeldP50       time.Duration
	HeldP99       time.Duration
	WaitedP50     time.Duration
	WaitedP99     time.Duration
	// MaxQueue is the largest queue of waiters an event reported.
	MaxQueue int
	// GrantsPerMinute has one count per minute of the window, oldest
	// first: a sparkline's points.
	GrantsPerMinute []int
}

// Minute is the figures of one minute, summed over the visible locks.
type Minute struct {
	At            time.Time
	Grants        int
	Expiries      int
	ForceReleases int
}

// PrincipalExpiries counts the leases of one principal that expired.
type PrincipalExpiries struct {
	Principal string
	Expiries  int
}

// Stats is the answer to a StatsQuery.
type Stats struct {
	// Since is the start of the window's first minute.
	Since time.Time
	// Locks are the hottest locks that had an event in the window, at
	// most Limit.
	Locks []LockStats
	// Minutes has every minute of the window, oldest first.
	Minutes []Minute
	// Expiring are the principals whose leases (of those the window keeps)
	// expired in the window, most first: crashing holders, at most Limit.
	Expiring []PrincipalExpiries
}

// Stats answers q.
func (w *Window) Stats(q StatsQuery) Stats {
	now := w.opts.Now().UnixMilli() / 60_000
	n := int64(min(max(q.Window, time.Minute), w.opts.Span) / time.Minute)
	from := now - n + 1
	out := Stats{Since: time.UnixMilli(from * 60_000).UTC(), Minutes: make([]Minute, n)}
	for i := range out.Minutes {
		out.Minutes[i].At = time.UnixMilli((from + int64(i)) * 60_000).UTC()
	}
	expiring := map[string]int{}
	w.mu.RLock()
	defer w.mu.RUnlock()
	var all []LockStats
	for name, r := range w.locks {
		if q.Visible != nil && !q.Visible(name) {
			continue
		}
		ls, seen := r.counts(name, from, out.Minutes)
		if !seen {
			continue
		}
		if q.Sort == ByWaited {
			r.percentiles(&ls, from*60_000, false)
		}
		r.expiring(expiring, from*60_000)
		all = append(all, ls)
	}
	sortLocks(all, q.Sort)
	out.Locks = all[:min(len(all), max(q.Limit, 0))]
	for i := range out.Locks {
		w.locks[out.Locks[i].Lock].percentiles(&out.Locks[i], from*60_000, true)
	}
	for p, c := range expiring {
		out.Expiring = append(out.Expiring, PrincipalExpiries{Principal: p, Expiries: c})
	}
	slices.SortFunc(out.Expiring, func(a, b PrincipalExpiries) int {
		return cmp.Or(cmp.Compare(b.Expiries, a.Expiries), cmp.Compare(a.Principal, b.Principal))
	})
	out.Expiring = out.Expiring[:min(len(out.Expiring), max(q.Limit, 0))]
	return out
}

// counts fills the name's counts over the minutes from from on, and adds
// them to mins; seen reports whether it had anything in them.
func (r *lockRec) counts(name string, from int64, mins []Minute) (ls LockStats, seen bool) {
	ls = LockStats{Lock: name}
	for _, m := range r.mins {
		if m.at < from || m.at >= from+int64(len(mins)) {
			continue
		}
		if ls.GrantsPerMinute == nil {
			ls.GrantsPerMinute = make([]int, len(mins))
		}
		i := m.at - from
		ls.GrantsPerMinute[i] = int(m.grants)
		ls.Grants += int(m.grants)
		ls.Expiries += int(m.expiries)
		ls.ForceReleases += int(m.forced)
		ls.MaxQueue = max(ls.MaxQueue, int(m.maxQueue))
		mins[i].Grants += int(m.grants)
		mins[i].Expiries += int(m.expiries)
		mins[i].ForceReleases += int(m.forced)
		seen = true
	}
	return ls, seen
}

// percentiles fills ls's waited percentiles, and its held ones when held,
// from the leases kept that fall after from (ms).
func (r *lockRec) percentiles(ls *LockStats, from int64, held bool) {
	var helds, waits []int64
	add := func(l leaseRec) {
		if l.acquired >= from {
			waits = append(waits, l.waited)
		}
		if held && l.end != Live && l.ended >= from && l.acquired != 0 {
			helds = append(helds, l.ended-l.acquired)
		}
	}
	for _, l := range r.live {
		add(l)
	}
	for _, l := range r.ended {
		add(l)
	}
	ls.WaitedP50, ls.WaitedP99 = percentile(waits, 50), percentile(waits, 99)
	if held {
		ls.HeldP50, ls.HeldP99 = percentile(helds, 50), percentile(helds, 99)
	}
}

// expiring counts, by principal, the kept leases that expired after from.
func (r *lockRec) expiring(into map[string]int, from int64) {
	for _, l := range r.ended {
		if l.end == Expired && l.ended >= from {
			into[l.principal]++
		}
	}
}

// percentile is the p-th percentile of ms by the nearest rank, 0 for none.
func percentile(ms []int64, p int) time.Duration {
	if len(ms) == 0 {
		return 0
	}
	slices.Sort(ms)
	rank := (p*len(ms) + 99) / 100 // ceil(p/100 * n), at least 1
	return time.Duration(ms[max(rank, 1)-1]) * time.Millisecond
}

func sortLocks(all []LockStats, by Sort) {
	slices.SortFunc(all, func(a, b LockStats) int {
		var c int
		switch by {
		case ByWaited:
			c = cmp.Compare(b.WaitedP99, a.WaitedP99)
		case ByExpiries:
			c = cmp.Compare(b.Expiries, a.Expiries)
		}
		return cmp.Or(c, cmp.Compare(b.Grants, a.Grants), cmp.Compare(a.Lock, b.Lock))
	})
}
