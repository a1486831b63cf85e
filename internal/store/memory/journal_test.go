package memory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// What the memory store's event log does beyond the conformance suite
// (internal/testkit/storetest): its id rule, retention, the switch that turns
// it off, and the expiry timer behind the expired events.

func TestNextEventID(t *testing.T) {
	for _, c := range []struct {
		name                   string
		lastMS, lastSeq, nowMS uint64
		ms, seq                uint64
	}{
		{"first", 0, 0, 1795460000000, 1795460000000, 0},
		{"clock moved on", 1795460000000, 7, 1795460000001, 1795460000001, 0},
		{"same millisecond", 1795460000000, 7, 1795460000000, 1795460000000, 8},
		{"clock went back", 1795460000000, 7, 1795459999000, 1795460000000, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			ms, seq := nextEventID(c.lastMS, c.lastSeq, c.nowMS)
			if ms != c.ms || seq != c.seq {
				t.Fatalf("next after %d-%d at %d = %d-%d, want %d-%d", c.lastMS, c.lastSeq, c.nowMS, ms, seq, c.ms, c.seq)
			}
		})
	}
}

// cycle acquires and releases name: two events.
func cycle(t *testing.T, m *Store, name string) {
	t.Helper()
	ctx := context.Background()
	g, err := m.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "w", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Release(ctx, lock.LeaseRef{Lock: name, ID: g.Lease.ID}, false); err != nil {
		t.Fatal(err)
	}
}

func ids(evs []lock.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

func wantGone(t *testing.T, err error, oldest string) {
	t.Helper()
	var e *lock.Error
	if !errors.As(err, &e) || e.Code != lock.CodeEventsGone || e.Oldest != oldest {
		t.Fatalf("err = %v, want events-gone with oldest %q", err, oldest)
	}
}

func TestEvents_MaxEvents_trims_the_oldest(t *testing.T) {
	m := NewWithOptions(Options{MaxEvents: 3})
	defer m.Close()
	ctx := context.Background()
	all := make([]string, 0, 6)
	for range 3 {
		cycle(t, m, "max")
		evs, _ := m.ReadEvents(ctx, "", 10)
		all = append(all, ids(evs)[len(evs)-2:]...)
	}
	evs, err := m.ReadEvents(ctx, "", 10)
	if err != nil || fmt.Sprint(ids(evs)) != fmt.Sprint(all[3:]) {
		t.Fatalf("kept %v, %v; want the newest 3 of %v", ids(evs), err, all)
	}
	// A reader that saw the newest trimmed event missed nothing; one
	// that stopped before it did.
	if evs, err := m.ReadEvents(ctx, all[2], 10); err != nil || len(evs) != 3 {
		t.Fatalf("after the newest trimmed: %v, %v", ids(evs), err)
	}
	_, err = m.ReadEvents(ctx, all[1], 10)
	wantGone(t, err, all[3])
	_, err = m.WaitEvents(ctx, all[0], 10)
	wantGone(t, err, all[3])
}

// A log longer than a few of its blocks keeps exactly the newest MaxEvents,
// in order, across the blocks' edges.
func TestEvents_MaxEvents_across_blocks(t *testing.T) {
	const keep = 2*chunkSize + 123
	m := NewWithOptions(Options{MaxEvents: keep})
	defer m.Close()
	ctx := context.Background()
	for i := range 3 * chunkSize {
		cycle(t, m, fmt.Sprint("blocks:", i))
	}
	var kept []lock.Event
	after := ""
	for {
		evs, err := m.ReadEvents(ctx, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		kept = append(kept, evs...)
		after = evs[len(evs)-1].ID
	}
	if len(kept) != keep {
		t.Fatalf("kept %d events, want %d", len(kept), keep)
	}
	for i := 1; i < len(kept); i++ {
		if lock.CompareEventIDs(kept[i-1].ID, kept[i].ID) >= 0 {
			t.Fatalf("event %s before %s", kept[i-1].ID, kept[i].ID)
		}
	}
	if last, _ := m.LastEventID(ctx); last != kept[len(kept)-1].ID || kept[len(kept)-1].Lock != fmt.Sprint("blocks:", 3*chunkSize-1) {
		t.Fatalf("last event id %q, newest kept %s", last, describeEvent(kept[len(kept)-1]))
	}
	m.mu.Lock()
	chunks := len(m.log.chunks)
	m.mu.Unlock()
	if chunks > keep/chunkSize+2 {
		t.Fatalf("%d blocks hold %d events", chunks, keep)
	}
}

func describeEvent(e lock.Event) string { return fmt.Sprintf("%s %s %s", e.ID, e.Type, e.Lock) }

func TestEvents_EventRetention_trims_by_age(t *testing.T) {
	m := NewWithOptions(Options{EventRetention: 50 * time.Millisecond})
	defer m.Close()
	ctx := context.Background()
	cycle(t, m, "old")
	first, _ := m.ReadEvents(ctx, "", 10)
	time.Sleep(100 * time.Millisecond)
	cycle(t, m, "new")
	evs, err := m.ReadEvents(ctx, "", 10)
	if err != nil || len(evs) != 2 || evs[0].Lock != "new" {
		t.Fatalf("kept %v, %v; want new's two events", ids(evs), err)
	}
	_, err = m.ReadEvents(ctx, first[0].ID, 10)
	wantGone(t, err, evs[0].ID)

	// While nothing is recorded the sweeper trims too, but keeps the
	// newest event: it says where the log stands.
	time.Sleep(1500 * time.Millisecond)
	kept, err := m.ReadEvents(ctx, "", 10)
	if err != nil || len(kept) != 1 || kept[0].ID != evs[1].ID {
		t.Fatalf("kept %v, %v; want only %s", ids(kept), err, evs[1].ID)
	}
	if last, _ := m.LastEventID(ctx); last != evs[1].ID {
		t.Fatalf("last event id = %q, want %q", last, evs[1].ID)
	}
}

func TestEvents_malformed_resume_point(t *testing.T) {
	m := New()
	defer m.Close()
	for _, after := range []string{"x", "1-", "-1", "1-2-3", "1.5-0"} {
		_, err := m.ReadEvents(context.Background(), after, 10)
		if lock.ErrorCode(err) != lock.CodeInvalid {
			t.Fatalf("read after %q: %v, want invalid", after, err)
		}
	}
}

func TestEvents_off(t *testing.T) {
	m := NewWithOptions(Options{NoEvents: true})
	defer m.Close()
	ctx := context.Background()
	if m.Events() != nil {
		t.Fatal("an event log with NoEvents")
	}
	cycle(t, m, "quiet")
	if _, err := m.ReadEvents(ctx, "", 10); lock.ErrorCode(err) != lock.CodeUnavailable {
		t.Fatalf("ReadEvents = %v", err)
	}
	if _, err := m.WaitEvents(ctx, "", 10); lock.ErrorCode(err) != lock.CodeUnavailable {
		t.Fatalf("WaitEvents = %v", err)
	}
	if _, err := m.LastEventID(ctx); lock.ErrorCode(err) != lock.CodeUnavailable {
		t.Fatalf("LastEventID = %v", err)
	}
	if on := New(); on.Events() == nil {
		t.Fatal("New records no events")
	} else {
		on.Close()
	}
}

func TestWaitEvents_ends_when_the_store_closes(t *testing.T) {
	m := New()
	done := make(chan error, 1)
	go func() {
		_, err := m.WaitEvents(context.Background(), "", 10)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	m.Close()
	select {
	case err := <-done:
		if lock.ErrorCode(err) != lock.CodeUnavailable {
			t.Fatalf("WaitEvents on a closed store = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitEvents still waits after Close")
	}
}

// Every live lease is in the expiry heap, whatever the mix of grants,
// re-entries, renewals and releases; each lease expires once, and with no
// lease left the timer is not set again: nothing polls.
func TestExpiry_schedule_follows_the_leases(t *testing.T) {
	m := New()
	defer m.Close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	var leases []lock.LeaseRef
	for range 500 {
		name := fmt.Sprint("sched:", rng.IntN(20))
		ttl := time.Duration(50+rng.IntN(400)) * time.Millisecond
		switch op := rng.IntN(6); {
		case op < 3:
			req := lock.AcquireRequest{Lock: name, Owner: fmt.Sprint("o", rng.IntN(3)), TTL: ttl}
			if op == 1 {
				req.Mode = lock.Shared
			}
			if g, err := m.TryAcquire(ctx, req); err == nil {
				leases = append(leases, lock.LeaseRef{Lock: name, ID: g.Lease.ID})
			}
		case op == 3 && len(leases) > 0:
			m.Renew(ctx, leases[rng.IntN(len(leases))], ttl)
		case op == 4 && len(leases) > 0:
			m.Release(ctx, leases[rng.IntN(len(leases))], rng.IntN(2) == 0)
		case op == 5 && rng.IntN(4) == 0:
			m.ForceRelease(ctx, name, "admin")
		}
		checkSchedule(t, m)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		m.mu.Lock()
		due, names, armed := len(m.due), len(m.names), m.armed
		m.mu.Unlock()
		if due == 0 && names == 0 && !armed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d leases scheduled, %d names, timer set %v, after every TTL ended", due, names, armed)
		}
		time.Sleep(20 * time.Millisecond)
	}
	evs, err := m.ReadEvents(ctx, "", 0)
	for len(evs) > 0 && err == nil {
		more, e := m.ReadEvents(ctx, evs[len(evs)-1].ID, 0)
		if len(more) == 0 {
			break
		}
		evs, err = append(evs, more...), e
	}
	if err != nil {
		t.Fatal(err)
	}
	granted, ended := map[string]bool{}, map[string]int{}
	for _, e := range evs {
		switch {
		case e.Type == lock.EventGranted:
			granted[e.LeaseID] = true
		case e.Type == lock.EventExpired, e.Type == lock.EventForceReleased,
			e.Type == lock.EventReleased && e.HoldCount == 0:
			ended[e.LeaseID]++
		}
	}
	for id := range granted {
		if ended[id] != 1 {
			t.Fatalf("lease %s ended %d times in the log", id, ended[id])
		}
	}
	if len(ended) != len(granted) {
		t.Fatalf("%d leases granted, %d ended", len(granted), len(ended))
	}
}

// checkSchedule fails the test unless m.due holds exactly the live leases,
// as a heap whose slots are right.
func checkSchedule(t *testing.T, m *Store) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, name := range m.names {
		for l := range name.leases {
			n++
			if l.slot < 0 || l.slot >= len(m.due) || m.due[l.slot] != l {
				t.Fatalf("lease %s of %s is not in the schedule at slot %d", l.ID, l.Lock, l.slot)
			}
		}
	}
	if n != len(m.due) {
		t.Fatalf("%d leases held, %d scheduled", n, len(m.due))
	}
	for i := 1; i < len(m.due); i++ {
		if m.due.Less(i, (i-1)/2) {
			t.Fatalf("the schedule is not a heap at %d", i)
		}
	}
	if len(m.due) > 0 && (!m.armed || m.armedAt.After(m.due[0].ExpiresAt)) {
		t.Fatalf("the timer (set %v, for %v) would miss the earliest expiry %v", m.armed, m.armedAt, m.due[0].ExpiresAt)
	}
}
