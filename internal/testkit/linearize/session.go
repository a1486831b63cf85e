package linearize

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
)

// world is the state of one partition: the state of each of its names,
// and the sessions that ended. A partition of one name, as every history
// without sessions has, is a world of one state. Step never changes a
// world: it returns new ones.
type world struct {
	names []string // sorted
	parts []*state // parts[i] is names[i]'s state
	ended []string // the sessions that ended, sorted

	key string // String's answer, made at its first call (as state.key)
}

func (w *world) clone() *world {
	return &world{names: slices.Clone(w.names), parts: slices.Clone(w.parts), ended: slices.Clone(w.ended)}
}

func (w *world) String() string {
	if w.key == "" {
		var b strings.Builder
		for i, name := range w.names {
			fmt.Fprintf(&b, "%s: %s; ", name, w.parts[i])
		}
		fmt.Fprintf(&b, "ended %v", w.ended)
		w.key = b.String()
	}
	return w.key
}

// part returns the state of name, a free lock when the world has not met it.
func (w *world) part(name string) *state {
	if i, ok := slices.BinarySearch(w.names, name); ok {
		return w.parts[i]
	}
	return &state{}
}

// with returns w with name's state replaced by s.
func (w *world) with(name string, s *state) *world {
	n := w.clone()
	i, ok := slices.BinarySearch(n.names, name)
	if !ok {
		n.names = slices.Insert(n.names, i, name)
		n.parts = slices.Insert(n.parts, i, s)
		return n
	}
	n.parts[i] = s
	return n
}

func (w *world) hasEnded(session string) bool {
	_, ok := slices.BinarySearch(w.ended, session)
	return ok
}

// step returns the worlds that in, answered out, may lead to from w; none
// when the answer is impossible.
func (w *world) step(p Promise, in Input, out Output) []*world {
	switch in.Kind {
	case SessionRenew, SessionGet, SessionEnd, SessionExpire:
		return w.session(in, out)
	}
	if in.Kind == Acquire && in.Session != "" {
		// An acquire bound to an ended session is refused, and changes
		// nothing; one bound to a live session is not refused so.
		lost := out.Status == 410 && out.Problem == "session-lost"
		switch {
		case w.hasEnded(in.Session) && (out.Unknown || lost):
			return []*world{w}
		case w.hasEnded(in.Session) || lost:
			return nil
		}
	}
	var next []*world
	for _, settled := range w.part(in.Lock).settle() {
		for _, s := range settled.step(p, in, out) {
			next = append(next, w.with(in.Lock, s))
		}
	}
	return next
}

// session steps a session operation: a renewal or a read is answered 200
// while the session lives and 410 once it ended; an end (DELETE, or the
// expiry) releases every lease bound to it, in every name, at once.
func (w *world) session(in Input, out Output) []*world {
	ended := w.hasEnded(in.Session)
	lost := out.Status == 410 && out.Problem == "session-lost"
	switch {
	case in.Kind == SessionExpire && ended:
		return []*world{w}
	case in.Kind == SessionExpire:
		return []*world{w.end(in.Session)}
	case out.Unknown && in.Kind == SessionEnd && !ended:
		return []*world{w, w.end(in.Session)}
	case out.Unknown, ended && lost:
		return []*world{w}
	case !ended && out.Status == 200 && (in.Kind == SessionRenew || in.Kind == SessionGet):
		return []*world{w}
	case !ended && out.Status == 200 && in.Kind == SessionEnd:
		return []*world{w.end(in.Session)}
	}
	return nil
}

// end returns w after session's end: every lease bound to it released, in
// every name, and the session ended.
func (w *world) end(session string) *world {
	n := w.clone()
	for i, s := range n.parts {
		if !slices.ContainsFunc(s.leases, func(l lease) bool { return l.session == session }) {
			continue
		}
		c := s.clone()
		for j := len(c.leases) - 1; j >= 0; j-- {
			if c.leases[j].session == session {
				c.dropHold(j, true)
			}
		}
		n.parts[i] = c
	}
	i, _ := slices.BinarySearch(n.ended, session)
	n.ended = slices.Insert(n.ended, i, session)
	return n
}

// worlds is a set of worlds, ordered by key and without repeats.
type worlds []*world

func newWorlds(all []*world) worlds {
	slices.SortFunc(all, func(a, b *world) int { return strings.Compare(a.String(), b.String()) })
	return slices.CompactFunc(all, func(a, b *world) bool { return a.String() == b.String() })
}

func (ws worlds) equal(other worlds) bool {
	return slices.EqualFunc(ws, other, func(a, b *world) bool { return a.String() == b.String() })
}

func (ws worlds) hash() uint64 {
	h := fnv.New64a()
	for _, w := range ws {
		h.Write([]byte(w.String()))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

func (ws worlds) String() string {
	keys := make([]string, len(ws))
	for i, w := range ws {
		keys[i] = w.String()
	}
	return "{" + strings.Join(keys, ", ") + "}"
}

func describeSession(i Input, o Output) string {
	var req string
	switch i.Kind {
	case SessionRenew:
		req = "session-renew(" + i.Session + ")"
	case SessionGet:
		req = "session-get(" + i.Session + ")"
	case SessionEnd:
		req = "session-delete(" + i.Session + ")"
	default:
		return "session-expiry(" + i.Session + ")"
	}
	switch {
	case o.Unknown:
		return req + " -> ?"
	case o.Status >= 400:
		return fmt.Sprintf("%s -> %d %s", req, o.Status, o.Problem)
	}
	return fmt.Sprintf("%s -> %d", req, o.Status)
}
