package history

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/eventfeed"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
)

// t0 is the start of a minute, the tests' "now" minus a few minutes.
var t0 = time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC)

// clockAt is a settable clock.
type clockAt struct{ now time.Time }

func (c *clockAt) Now() time.Time { return c.now }

func grant(name, owner, principal string, token uint64, at time.Time, waited time.Duration) lock.Event {
	return lock.Event{Type: lock.EventGranted, Lock: name, Owner: owner, Principal: principal, Mode: lock.Exclusive,
		Token: token, HoldCount: 1, Queue: -1, Time: at, Waited: waited}
}

func end(typ lock.EventType, name, owner, principal string, token uint64, at time.Time) lock.Event {
	return lock.Event{Type: typ, Lock: name, Owner: owner, Principal: principal, Mode: lock.Exclusive, Token: token, Queue: -1, Time: at}
}

func TestWindow_History(t *testing.T) {
	t.Parallel()
	clk := &clockAt{t0.Add(10 * time.Minute)}
	w := New(Options{Leases: 3, Now: clk.Now})
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	w.Add(grant("a", "o1", "p1", 1, at(0), 0))
	w.Add(lock.Event{Type: lock.EventRenewed, Lock: "a", Token: 1, HoldCount: 1, Queue: -1, Time: at(1)})
	w.Add(lock.Event{Type: "updated", Lock: "a", Token: 1, HoldCount: 1, Queue: -1, Time: at(1)}) // a newer server's
	w.Add(lock.Event{ID: "9-0", UnknownLayout: "3", Time: at(1)})
	w.Add(end(lock.EventReleased, "a", "o1", "p1", 1, at(2)))
	w.Add(grant("a", "o2", "p2", 2, at(3), 1500*time.Millisecond))
	w.Add(end(lock.EventExpired, "a", "o2", "p2", 2, at(13)))
	w.Add(grant("a", "o3", "p3", 3, at(20), 0))
	w.Add(end(lock.EventForceReleased, "a", "o3", "admin", 3, at(21)))
	w.Add(grant("a", "o4", "p4", 4, at(30), 0))
	bound := grant("a", "o4", "p4", 5, at(31), 0)
	bound.Session = "s1"
	w.Add(bound)
	ended := end(lock.EventExpired, "a", "o4", "p4", 5, at(40))
	ended.Session = "s1"
	w.Add(ended)
	// The end of a lease whose grant the window did not see.
	w.Add(end(lock.EventReleased, "b", "o9", "p9", 9, at(5)))

	got := describe(w.History("a", 10))
	want := strings.Join([]string{
		"4 o4 p4 acquired 30s live waited 0s",
		"5 o4 p4 acquired 31s session_ended at 40s held 9s waited 0s",
		"3 o3 p3 acquired 20s force_released at 21s held 1s waited 0s",
		"2 o2 p2 acquired 3s expired at 13s held 10s waited 1.5s",
	}, "\n")
	if got != want {
		t.Errorf("history of a (3 ended leases kept):\n%s\nwant:\n%s", got, want)
	}
	if got := describe(w.History("a", 2)); strings.Count(got, "\n") != 1 {
		t.Errorf("history of a, limit 2:\n%s", got)
	}
	if got, want := describe(w.History("b", 10)), "9 o9 p9 acquired - released at 5s held - waited 0s"; got != want {
		t.Errorf("history of b = %q, want %q", got, want)
	}
	if got := w.History("c", 10); got != nil {
		t.Errorf("history of c = %v, want none", got)
	}
}

// describe writes leases one a line, times in seconds after t0.
func describe(leases []Lease) string {
	var lines []string
	for _, l := range leases {
		acq := "-"
		if !l.AcquiredAt.IsZero() {
			acq = l.AcquiredAt.Sub(t0).String()
		}
		line := fmt.Sprintf("%d %s %s acquired %s", l.Token, l.Owner, l.Principal, acq)
		if l.EndedBy == Live {
			line += " live"
		} else {
			held := "-"
			if !l.AcquiredAt.IsZero() {
				held = l.Held().String()
			}
			line += fmt.Sprintf(" %s at %s held %s", l.EndedBy, l.EndedAt.Sub(t0), held)
		}
		lines = append(lines, line+" waited "+l.Waited.String())
	}
	return strings.Join(lines, "\n")
}

func TestWindow_Stats(t *testing.T) {
	t.Parallel()
	clk := &clockAt{t0.Add(5*time.Minute + 30*time.Second)}
	w := New(Options{Now: clk.Now})
	// hot: 10 grants a minute for 5 minutes, each held 1 s, the later
	// ones waiting; cold: one grant; crash: leases of "batch" that expire.
	tok := uint64(0)
	for m := range 5 {
		for i := range 10 {
			tok++
			at := t0.Add(time.Duration(m)*time.Minute + time.Duration(i)*5*time.Second)
			e := grant("hot", "w", "web", tok, at, time.Duration(i)*100*time.Millisecond)
			e.Queue = i
			w.Add(e)
			w.Add(end(lock.EventReleased, "hot", "w", "web", tok, at.Add(time.Second)))
		}
	}
	w.Add(grant("cold", "w", "web", 1, t0.Add(4*time.Minute), 0))
	for i := range 3 {
		w.Add(grant("crash", "c", "batch", uint64(i+1), t0.Add(time.Duration(i)*time.Minute), 0))
		w.Add(end(lock.EventExpired, "crash", "c", "batch", uint64(i+1), t0.Add(time.Duration(i)*time.Minute+30*time.Second)))
	}
	w.Add(grant("secret", "w", "web", 1, t0.Add(5*time.Minute), 0))
	w.Add(grant("old", "w", "web", 1, t0.Add(-2*time.Hour), 0)) // before the span: not counted

	visible := func(name string) bool { return name != "secret" }
	st := w.Stats(StatsQuery{Window: 15 * time.Minute, Sort: ByGrants, Limit: 10, Visible: visible})
	if len(st.Minutes) != 15 || !st.Since.Equal(t0.Add(-9*time.Minute)) {
		t.Fatalf("%d minutes since %v, want 15 since %v", len(st.Minutes), st.Since, t0.Add(-9*time.Minute))
	}
	var names []string
	for _, l := range st.Locks {
		names = append(names, l.Lock)
	}
	if got := strings.Join(names, " "); got != "hot crash cold" {
		t.Fatalf("locks by grants: %s, want hot crash cold", got)
	}
	hot := st.Locks[0]
	if hot.Grants != 50 || hot.Expiries != 0 || hot.MaxQueue != 9 || hot.HeldP50 != time.Second || hot.HeldP99 != time.Second {
		t.Errorf("hot: %+v", hot)
	}
	if hot.WaitedP50 != 400*time.Millisecond || hot.WaitedP99 != 900*time.Millisecond {
		t.Errorf("hot waited p50 %v p99 %v, want 400ms 900ms (of the last 100 leases)", hot.WaitedP50, hot.WaitedP99)
	}
	if got := fmt.Sprint(hot.GrantsPerMinute[9:]); got != "[10 10 10 10 10 0]" {
		t.Errorf("hot grants per minute, from t0: %s", got)
	}
	if m := st.Minutes[9]; m.Grants != 11 || m.Expiries != 1 {
		t.Errorf("the minute of t0: %+v, want 11 grants (hot, crash), 1 expiry", m)
	}
	if len(st.Expiring) != 1 || st.Expiring[0] != (PrincipalExpiries{"batch", 3}) {
		t.Errorf("expiring principals: %+v, want batch with 3", st.Expiring)
	}
	if st := w.Stats(StatsQuery{Window: 15 * time.Minute, Sort: ByExpiries, Limit: 1, Visible: visible}); len(st.Locks) != 1 || st.Locks[0].Lock != "crash" {
		t.Errorf("top lock by expiries: %+v, want crash", st.Locks)
	}
	if st := w.Stats(StatsQuery{Window: 15 * time.Minute, Sort: ByWaited, Limit: 1}); len(st.Locks) != 1 || st.Locks[0].Lock != "hot" {
		t.Errorf("top lock by waited: %+v, want hot", st.Locks)
	}
	if st := w.Stats(StatsQuery{Window: time.Minute, Sort: ByGrants, Limit: 10}); len(st.Locks) != 1 || st.Locks[0].Lock != "secret" {
		t.Errorf("last minute, every name: %+v, want secret alone", st.Locks)
	}
}

func TestWindow_bounds(t *testing.T) {
	t.Parallel()
	clk := &clockAt{t0}
	w := New(Options{MaxLocks: 2, Now: clk.Now})
	for i := range 3 {
		w.Add(grant(fmt.Sprint("n", i), "w", "p", 1, t0, 0))
		w.Add(end(lock.EventReleased, fmt.Sprint("n", i), "w", "p", 1, t0))
	}
	if w.Len() != 2 || w.Untracked() != 2 {
		t.Errorf("%d names tracked, %d events left out; want 2 and 2", w.Len(), w.Untracked())
	}
	w.Add(grant("n0", "w", "p", 2, t0, 0)) // n0 holds a lease: kept
	clk.now = t0.Add(time.Hour + 2*time.Minute)
	w.sweep()
	if w.Len() != 1 || len(w.History("n0", 10)) != 2 {
		t.Errorf("after an hour: %d names, n0's history %v; want n0 alone, whole", w.Len(), w.History("n0", 10))
	}
}

// Past MaxLeases in all, a name's ring stops growing, and stays in order.
func TestWindow_MaxLeases(t *testing.T) {
	t.Parallel()
	w := New(Options{Leases: 10, MaxLeases: 3, Now: func() time.Time { return t0 }})
	lease := func(name string, tok uint64) {
		w.Add(grant(name, fmt.Sprint("o", tok), "p", tok, t0, 0))
		w.Add(end(lock.EventReleased, name, "", "p", tok, t0.Add(time.Duration(tok)*time.Second)))
	}
	for tok := range uint64(3) {
		lease("a", tok+1)
	}
	lease("b", 1)
	lease("b", 2)
	lease("a", 4)
	lease("a", 5)
	tokens := func(name string) (out []uint64) {
		for _, l := range w.History(name, 10) {
			out = append(out, l.Token)
		}
		return out
	}
	if a, b := fmt.Sprint(tokens("a")), fmt.Sprint(tokens("b")); a != "[5 4 3]" || b != "[2]" {
		t.Errorf("kept a %s, b %s; want [5 4 3] and [2]", a, b)
	}
}

// The window fills itself from what the log kept at start, then follows
// the feed from there: nothing in between is lost or taken twice.
func TestWindow_fills_then_follows(t *testing.T) {
	t.Parallel()
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	ctx := context.Background()
	acquireRelease := func(name string) {
		t.Helper()
		g, err := mem.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "w", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mem.Release(ctx, lock.LeaseRef{Lock: name, ID: g.Lease.ID}, true); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		acquireRelease("before")
	}
	feed := eventfeed.New(mem.Events(), eventfeed.Options{})
	t.Cleanup(feed.Close)
	added := make(chan lock.Event, 100)
	w := Start(feed, mem.Events(), Options{Added: func(e lock.Event) { added <- e }})
	t.Cleanup(w.Close)
	<-w.Ready()
	if n := len(w.History("before", 10)); n != 3 {
		t.Fatalf("filled with %d leases of before, want 3", n)
	}
	acquireRelease("after")
	waitAdded(t, added, func(e lock.Event) bool { return e.Lock == "after" && e.Type == lock.EventReleased })
	if n, m := len(w.History("before", 10)), len(w.History("after", 10)); n != 3 || m != 1 {
		t.Errorf("%d leases of before, %d of after; want 3 and 1", n, m)
	}
}

// A window started on an empty log misses none of the first events, which
// may come before it joins the feed.
func TestWindow_starts_on_an_empty_log(t *testing.T) {
	t.Parallel()
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	feed := eventfeed.New(mem.Events(), eventfeed.Options{})
	t.Cleanup(feed.Close)
	added := make(chan lock.Event, 100)
	w := Start(feed, mem.Events(), Options{Added: func(e lock.Event) { added <- e }})
	t.Cleanup(w.Close)
	<-w.Ready() // the fill found nothing: the feed starts at the log's oldest, whenever it subscribes
	if _, err := mem.TryAcquire(context.Background(), lock.AcquireRequest{Lock: "first", Owner: "w", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitAdded(t, added, func(e lock.Event) bool {
		if e.Lock != "first" || e.Type != lock.EventGranted {
			t.Errorf("first event taken in: %+v", e)
		}
		return true
	})
}

// waitAdded waits, 10 s at most, for an event taken in that is done.
func waitAdded(t *testing.T, added <-chan lock.Event, done func(lock.Event) bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-added:
			if done(e) {
				return
			}
		case <-timeout:
			t.Fatal("the event never reached the window")
		}
	}
}
