package history

import (
	"slices"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// lockRec is what the window keeps of one name. Times are Unix ms, to keep
// a lease's record small (docs/PERFORMANCE.md measures it).
type lockRec struct {
	// live are the leases granted and not ended, as far as the events
	// read tell, oldest first.
	live []leaseRec
	// ended is a ring of the last ended leases: next is where the next one
	// goes once it stops growing (keepEnded).
	ended []leaseRec
	next  int
	// mins are the minutes of the span with an event, oldest first.
	mins []minute
	// last is the time of the name's latest event.
	last int64
}

// leaseRec is a Lease in little room.
type leaseRec struct {
	owner, principal, session string
	token                     uint64
	acquired, ended, waited   int64 // ms; acquired 0: not seen
	mode                      lock.Mode
	end                       EndReason
}

// minute is one minute's figures of one name.
type minute struct {
	at                       int64 // Unix minute
	grants, expiries, forced uint32
	maxQueue                 uint32
}

func (l leaseRec) lease() Lease {
	out := Lease{Owner: l.owner, Principal: l.principal, Mode: l.mode, Token: l.token, Session: l.session,
		EndedBy: l.end, Waited: time.Duration(l.waited) * time.Millisecond}
	if l.acquired != 0 {
		out.AcquiredAt = time.UnixMilli(l.acquired).UTC()
	}
	if l.end != Live {
		out.EndedAt = time.UnixMilli(l.ended).UTC()
	}
	return out
}

// endedAt returns the i-th newest ended lease.
func (r *lockRec) endedAt(i int) leaseRec {
	n := len(r.ended)
	return r.ended[((r.next-1-i)%n+n)%n]
}

// addLocked takes e in. Only the lease's beginning and end count: other
// types (renewals, re-entries, types of a newer server) tell the window
// nothing it keeps, but the queue length they carry.
func (w *Window) addLocked(e lock.Event) {
	if e.UnknownLayout != "" || e.Lock == "" {
		return
	}
	r := w.locks[e.Lock]
	if r == nil {
		if len(w.locks) >= w.opts.MaxLocks {
			w.untracked++
			return
		}
		r = &lockRec{}
		w.locks[e.Lock] = r
	}
	at := e.Time.UnixMilli()
	r.last = max(r.last, at)
	m := r.minute(at/60_000, w.spanStart())
	if m != nil && e.Queue > 0 {
		m.maxQueue = max(m.maxQueue, uint32(e.Queue))
	}
	switch {
	case e.Type == lock.EventGranted:
		r.live = append(r.live, leaseRec{owner: e.Owner, principal: e.Principal, session: e.Session, token: e.Token,
			acquired: at, waited: e.Waited.Milliseconds(), mode: e.Mode})
		if m != nil {
			m.grants++
		}
	case e.Type == lock.EventReleased && e.HoldCount == 0:
		w.endLease(r, e, at, Released)
	case e.Type == lock.EventExpired:
		end := Expired
		if e.Session != "" {
			end = SessionEnded
		}
		w.endLease(r, e, at, end)
		if m != nil {
			m.expiries++
		}
	case e.Type == lock.EventForceReleased:
		w.endLease(r, e, at, ForceReleased)
		if m != nil {
			m.forced++
		}
	}
}

// spanStart is the first Unix minute of the span.
func (w *Window) spanStart() int64 {
	return (w.opts.Now().UnixMilli() - w.opts.Span.Milliseconds()) / 60_000
}

// minute returns the bucket of Unix minute at, made if need be, with the
// buckets before from dropped; nil for a minute before from.
func (r *lockRec) minute(at, from int64) *minute {
	if at < from {
		return nil
	}
	drop := 0
	for drop < len(r.mins) && r.mins[drop].at < from {
		drop++
	}
	if drop > 0 {
		r.mins = slices.Delete(r.mins, 0, drop)
	}
	// Events come in time order but for late ones (lock.Event.Late):
	// look from the newest.
	i := len(r.mins)
	for i > 0 && r.mins[i-1].at > at {
		i--
	}
	if i > 0 && r.mins[i-1].at == at {
		return &r.mins[i-1]
	}
	r.mins = slices.Insert(r.mins, i, minute{at: at})
	return &r.mins[i]
}

// endLease ends the live lease of e's token, or records the end of one
// whose grant the window did not see.
func (w *Window) endLease(r *lockRec, e lock.Event, at int64, end EndReason) {
	var l leaseRec
	i := slices.IndexFunc(r.live, func(l leaseRec) bool { return l.token == e.Token })
	if i >= 0 {
		l = r.live[i]
		r.live = slices.Delete(r.live, i, i+1)
	} else {
		l = leaseRec{owner: e.Owner, principal: e.Principal, session: e.Session, token: e.Token, mode: e.Mode}
		if end == ForceReleased {
			l.principal = "" // the event's is the admin's
		}
	}
	l.ended, l.end = at, end
	w.keepEnded(r, l)
}

// keepEnded puts l into r's ring of ended leases. The ring grows to
// Options.Leases while the window keeps fewer than Options.MaxLeases in
// all, and only when its oldest lease is at its start (next is 0), so that
// it stays in order; otherwise l takes the oldest one's place.
func (w *Window) keepEnded(r *lockRec, l leaseRec) {
	n := len(r.ended)
	if n == 0 || (r.next == 0 && n < w.opts.Leases && w.kept < w.opts.MaxLeases) {
		if n == cap(r.ended) {
			// Grow by doubling, but never past Leases: append would.
			bigger := make([]leaseRec, n, min(w.opts.Leases, max(1, 2*n)))
			copy(bigger, r.ended)
			r.ended = bigger
		}
		r.ended = append(r.ended, l)
		w.kept++
		return
	}
	r.ended[r.next] = l
	r.next = (r.next + 1) % n
}

// sweep forgets the names that had no event in the span and hold no lease
// the window knows of, and the minutes before the span of the others.
func (w *Window) sweep() {
	w.mu.Lock()
	defer w.mu.Unlock()
	from := w.spanStart()
	for name, r := range w.locks {
		if len(r.live) == 0 && r.last/60_000 < from {
			w.kept -= len(r.ended)
			delete(w.locks, name)
			continue
		}
		drop := 0
		for drop < len(r.mins) && r.mins[drop].at < from {
			drop++
		}
		if drop > 0 {
			r.mins = slices.Delete(r.mins, 0, drop)
		}
	}
}

// forgetLive drops every live lease: after a gap in the events read, their
// ends may have been missed.
func (w *Window) forgetLive() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.locks {
		r.live = nil
	}
}
