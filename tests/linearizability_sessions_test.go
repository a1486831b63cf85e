package tests

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/testkit/linearize"
)

// Linearizability with sessions (docs/SESSIONS.md): half of the clients
// bind their leases to sessions, renew them, delete them, and let some
// expire, beside clients whose leases have TTLs of their own, on a few
// names checked together (one linearize group), so that a session's end
// must release all its leases, on every name, at one point in the history.
//
// An expiry is no request: it is recorded as an operation from the earliest
// moment the server may end the session (the call of its last renewal
// answered 200, or of its creation, plus its TTL, less linSessionSlack for
// the server's clock) to the answer that showed it ended (410
// session-lost), and the model places it anywhere in between.

const (
	linSessionNames = 3
	// linSessionShortTTL is the TTL of the sessions a client lets expire:
	// long enough for a client to bind a lease or two under -race, short
	// enough that a run sees a few dozen expiries.
	linSessionShortTTL = 400 * time.Millisecond
	// linSessionSlack is how much earlier than the history's clock the
	// server's clock may end a session (Redis TIME and the memory store
	// read the wall clock; the history reads the monotonic one).
	linSessionSlack = 20 * time.Millisecond
)

// TestLinearizability_sessions checks random histories of session-bound
// acquires, renewals, deletes and expiries on memory, single Redis and
// Cluster (redlock has no sessions). Its size is half of
// LOCKAPI_LINEARIZE_OPS.
func TestLinearizability_sessions(t *testing.T) {
	for _, b := range linBackends()[:3] {
		t.Run(b.name, func(t *testing.T) {
			s := startServer(t, b.start(t), "--log-level", "warn")
			c := newLinClient(s)
			for _, seed := range seeds(t, 1) {
				h := linearize.NewHistory()
				runSessionWorkload(t, c, h, seed, linearizeSize(t)/2)
				checkHistory(t, h, b.promise, seed)
			}
		})
	}
}

func runSessionWorkload(t *testing.T, c *linClient, h *linearize.History, seed uint64, ops int) {
	t.Helper()
	group := fmt.Sprintf("lin-sess-%d", seed)
	names := make([]string, linSessionNames)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", group, i)
	}
	var wg sync.WaitGroup
	for client := range linearizeClients {
		wg.Go(func() {
			w := &linSessionWorker{linWorker: newLinWorker(client, kindShared, names, seed), group: group,
				bound: client < linearizeClients/2}
			for range ops / linearizeClients {
				w.step(t, c, h)
			}
			w.finish(t, c, h)
		})
	}
	wg.Wait()
	logSessionOps(t, h)
}

// logSessionOps says what the history holds of sessions, so that a run
// that exercised none shows.
func logSessionOps(t *testing.T, h *linearize.History) {
	t.Helper()
	var bound, granted, renewals, reads, deletes, expiries, lost int
	for _, op := range h.Operations() {
		in, out := op.Input.(linearize.Input), op.Output.(linearize.Output)
		switch {
		case in.Kind == linearize.Acquire && in.Session != "":
			bound++
			if !out.Unknown && out.Status < 300 {
				granted++
			}
		case in.Kind == linearize.SessionRenew:
			renewals++
		case in.Kind == linearize.SessionGet:
			reads++
		case in.Kind == linearize.SessionEnd:
			deletes++
		case in.Kind == linearize.SessionExpire:
			expiries++
		}
		if out.Problem == "session-lost" {
			lost++
		}
	}
	t.Logf("%d session-bound acquires (%d granted), %d renewals, %d reads, %d deletes, %d expiries, %d answers 410 session-lost",
		bound, granted, renewals, reads, deletes, expiries, lost)
	if granted == 0 || deletes == 0 || expiries == 0 {
		t.Error("the history lacks session-bound grants, deletes or expiries")
	}
}

// linSession is a worker's session.
type linSession struct {
	id  string
	ttl time.Duration
	// since is the call of its creation or of its last renewal answered
	// 200: the server's clock ends it no earlier than since + ttl.
	since int64
	// expiring: the worker lets it expire.
	expiring bool
}

// linSessionWorker is one client of the session workload: a session-bound
// one (bound) holds its leases through its session; the others acquire
// with TTLs of their own.
type linSessionWorker struct {
	*linWorker
	group string
	bound bool
	sess  *linSession
}

func (w *linSessionWorker) step(t *testing.T, c *linClient, h *linearize.History) {
	rng := w.rng
	if !w.bound {
		w.acquireOrRelease(t, c, h)
		return
	}
	switch {
	case w.sess == nil:
		w.open(t, c, h, rng.IntN(4) == 0)
	case w.sess.expiring:
		w.letExpire(t, c, h)
	case rng.IntN(100) < 10:
		w.renew(t, c, h)
	case rng.IntN(100) < 8:
		w.end(t, c, h)
	default:
		w.acquireOrRelease(t, c, h)
	}
}

// acquireOrRelease releases a hold, or acquires a name, bound to the
// worker's session when it has one.
func (w *linSessionWorker) acquireOrRelease(t *testing.T, c *linClient, h *linearize.History) {
	rng := w.rng
	if len(w.held) > 0 && (len(w.held) >= 3 || rng.IntN(100) < 45) {
		i := rng.IntN(len(w.held))
		if c.releaseIn(t, h, w.client, w.held[i], rng.IntN(10) == 0, w.group).answered {
			w.held = slices.Delete(w.held, i, i+1)
		}
		return
	}
	in := linearize.Input{Kind: linearize.Acquire, Lock: w.names[rng.IntN(len(w.names))], Owner: w.owner,
		Shared: rng.IntN(3) == 0, Group: w.group, Tag: c.nextTag()}
	body := map[string]any{"owner": in.Owner, "ttl_ms": linearizeTTL}
	if w.sess != nil {
		in.Session = w.sess.id
		body = map[string]any{"owner": in.Owner, "session": in.Session}
	}
	if in.Shared {
		body["mode"] = "shared"
	}
	out, call, ret := w.record(t, c, h, in, "POST", "/v1/locks/"+in.Lock+"/leases", body)
	switch {
	case !out.Unknown && out.Status < 300:
		w.held = append(w.held, heldLease{in.Lock, out.LeaseID})
	case out.Status == 410 && out.Problem == "session-lost":
		w.expired(t, h, call, ret)
	}
}

// record sends one request, records it as in and returns its output with
// its call and return times; a 5xx is of unknown outcome (an acquire's is
// undone by lockapi later: Abandoned).
func (w *linSessionWorker) record(t *testing.T, c *linClient, h *linearize.History, in linearize.Input, method, path string, body any) (linearize.Output, int64, int64) {
	call := h.Now()
	a := c.send(t, method, path, body)
	ret := h.Now()
	if a.refused {
		t.Fatalf("%s %s: lockapi refused the connection", method, path)
	}
	out := a.output(t)
	if a.status >= 500 {
		out.Abandoned = in.Kind == linearize.Acquire
		h.AddFailed(w.client, in, call, out, ret)
	} else {
		h.Add(w.client, in, call, out, ret)
	}
	return out, call, ret
}

// open creates a session, which is no operation of the model: a session
// lives from its creation until it ends. An expiring one binds a lease or
// two at once, then is left to expire.
func (w *linSessionWorker) open(t *testing.T, c *linClient, h *linearize.History, expiring bool) {
	ttl := time.Duration(linearizeTTL) * time.Millisecond
	if expiring {
		ttl = linSessionShortTTL
	}
	call := h.Now()
	a := c.send(t, "POST", "/v1/sessions", map[string]any{"ttl_ms": ttl.Milliseconds()})
	var created struct {
		ID string `json:"session_id"`
	}
	if a.status != 201 || json.Unmarshal(a.body, &created) != nil {
		t.Fatalf("create session: %d %s", a.status, a.body)
	}
	w.sess = &linSession{id: created.ID, ttl: ttl, since: call, expiring: expiring}
	if expiring {
		for range 1 + w.rng.IntN(2) {
			if w.sess != nil {
				w.acquireOrRelease(t, c, h)
			}
		}
	}
}

// renew renews the session, and learns that it ended from a 410.
func (w *linSessionWorker) renew(t *testing.T, c *linClient, h *linearize.History) {
	in := linearize.Input{Kind: linearize.SessionRenew, Session: w.sess.id, Group: w.group}
	out, call, ret := w.record(t, c, h, in, "POST", "/v1/sessions/"+w.sess.id+"/renew", map[string]any{})
	switch {
	case out.Status == 200:
		w.sess.since = call
	case out.Status == 410 && out.Problem == "session-lost":
		w.expired(t, h, call, ret)
	}
}

// letExpire waits until the session may have expired, then reads it
// (GET, which renews nothing, so a slow answer cannot keep it alive) until
// it answers 410: the expiry is recorded then.
func (w *linSessionWorker) letExpire(t *testing.T, c *linClient, h *linearize.History) {
	due := w.sess.since + int64(w.sess.ttl) - h.Now()
	time.Sleep(time.Duration(max(due, 0)))
	deadline := time.Now().Add(10 * time.Second)
	for w.sess != nil {
		if time.Now().After(deadline) {
			t.Fatalf("session %s (TTL %v) still lives 10 s after its TTL ran out", w.sess.id, w.sess.ttl)
		}
		time.Sleep(10 * time.Millisecond)
		in := linearize.Input{Kind: linearize.SessionGet, Session: w.sess.id, Group: w.group}
		out, call, ret := w.record(t, c, h, in, "GET", "/v1/sessions/"+w.sess.id, nil)
		if out.Status == 410 && out.Problem == "session-lost" {
			w.expired(t, h, call, ret)
		}
	}
}

// end deletes the session, which releases every lease bound to it.
func (w *linSessionWorker) end(t *testing.T, c *linClient, h *linearize.History) {
	in := linearize.Input{Kind: linearize.SessionEnd, Session: w.sess.id, Group: w.group}
	out, call, ret := w.record(t, c, h, in, "DELETE", "/v1/sessions/"+w.sess.id, nil)
	switch {
	case out.Status == 410 && out.Problem == "session-lost":
		w.expired(t, h, call, ret)
	case out.Status == 200:
		w.dropBound()
		w.sess = nil
	}
}

// expired records the session's expiry, shown ended by an answer that
// returned at ret to a request called at call, and forgets the session
// and its leases, whose releases would answer 410 lease-lost.
func (w *linSessionWorker) expired(t *testing.T, h *linearize.History, call, ret int64) {
	from := w.sess.since + int64(w.sess.ttl-linSessionSlack)
	if from > ret {
		t.Errorf("session %s (TTL %v) ended %v before its TTL ran out", w.sess.id, w.sess.ttl, time.Duration(from-ret))
		from = call
	}
	h.Add(w.client, linearize.Input{Kind: linearize.SessionExpire, Session: w.sess.id, Group: w.group}, from, linearize.Output{}, ret)
	w.dropBound()
	w.sess = nil
}

// dropBound forgets the leases bound to the worker's session: every lease
// a session-bound worker holds.
func (w *linSessionWorker) dropBound() { w.held = nil }

// finish releases what the worker holds and deletes its session.
func (w *linSessionWorker) finish(t *testing.T, c *linClient, h *linearize.History) {
	for _, l := range w.held {
		c.releaseIn(t, h, w.client, l, false, w.group)
	}
	w.held = nil
	if w.sess != nil {
		w.end(t, c, h)
	}
}
