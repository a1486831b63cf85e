package memory

import (
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// The memory store's journal, its event log (docs/EVENTS.md): one log per
// store, written under Store.mu by the operation that makes the change, so
// that an event is recorded exactly when its change is made and in the same
// order.

const (
	// DefaultMaxEvents is how many events the log keeps at most unless
	// Options say otherwise (LOCKAPI_EVENTS_MAX).
	DefaultMaxEvents = 1_000_000
	// DefaultEventRetention is how long the log keeps an event unless
	// Options say otherwise (LOCKAPI_EVENTS_RETENTION).
	DefaultEventRetention = 24 * time.Hour
	// defaultReadLimit caps a read that asks for no limit (limit <= 0).
	defaultReadLimit = 1000
	// chunkSize is how many events one block of the log holds: the log
	// grows and is trimmed a block at a time, never copying events.
	chunkSize = 4096
)

var (
	_ lock.EventLog = (*Store)(nil)

	errEventsOff = &lock.Error{Code: lock.CodeUnavailable, Detail: "this store records no events (LOCKAPI_EVENTS=false)"}
	errClosed    = &lock.Error{Code: lock.CodeUnavailable, Detail: "the memory store is closed"}
)

// eventLog is the events of the retention window, oldest first. Ids are
// "<ms>-<seq>" as Redis stream ids are: ms is the store's clock when the
// event was recorded, seq counts events of the same ms. A clock that
// repeats a millisecond or goes back keeps the last ms and bumps seq, so
// ids rise strictly whatever the clock does.
type eventLog struct {
	off       bool
	max       int
	retention time.Duration

	// chunks hold the kept events, oldest first: every chunk is full
	// but the last, and the oldest kept is chunks[0][head]. n counts them.
	chunks  [][]logEntry
	head, n int
	// lastMS and lastSeq are the newest id ever given; trimmed is the
	// newest id trimmed, "" while none was: a reader that saw it missed
	// nothing, one that stopped before it did.
	lastMS, lastSeq uint64
	trimmed         string
	// wake is closed when an event is added, and made again by the next
	// waiter; nil while nobody waits.
	wake chan struct{}
}

type logEntry struct {
	ms, seq uint64
	e       lock.Event
}

func newEventLog(o Options) *eventLog {
	l := &eventLog{off: o.NoEvents, max: o.MaxEvents, retention: o.EventRetention}
	if l.max <= 0 {
		l.max = DefaultMaxEvents
	}
	if l.retention <= 0 {
		l.retention = DefaultEventRetention
	}
	return l
}

// nextEventID returns the id that follows lastMS-lastSeq when the clock
// reads nowMS.
func nextEventID(lastMS, lastSeq, nowMS uint64) (ms, seq uint64) {
	if nowMS > lastMS {
		return nowMS, 0
	}
	return lastMS, lastSeq + 1
}

func formatEventID(ms, seq uint64) string {
	return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint(seq, 10)
}

// add records e, giving it the next id, at the store's clock now, and
// trims what the log no longer keeps. Callers hold Store.mu.
func (l *eventLog) add(e lock.Event, now time.Time) {
	if l.off {
		return
	}
	l.lastMS, l.lastSeq = nextEventID(l.lastMS, l.lastSeq, uint64(max(now.UnixMilli(), 0)))
	e.ID = formatEventID(l.lastMS, l.lastSeq)
	if len(l.chunks) == 0 || len(l.chunks[len(l.chunks)-1]) == chunkSize {
		l.chunks = append(l.chunks, make([]logEntry, 0, chunkSize))
	}
	last := &l.chunks[len(l.chunks)-1]
	*last = append(*last, logEntry{ms: l.lastMS, seq: l.lastSeq, e: e})
	l.n++
	l.trim(now)
	if l.wake != nil {
		close(l.wake)
		l.wake = nil
	}
}

// trim drops the events past MaxEvents and those older than the retention
// period, but never the newest event: it says where the log stands.
// Callers hold Store.mu.
func (l *eventLog) trim(now time.Time) {
	drop := max(l.n-l.max, 0)
	if horizon := now.Add(-l.retention).UnixMilli(); horizon > 0 {
		for drop < l.n-1 && l.at(drop).ms < uint64(horizon) {
			drop++
		}
	}
	if drop == 0 {
		return
	}
	l.trimmed = l.at(drop - 1).e.ID
	for ; drop > 0; drop-- {
		l.chunks[0][l.head] = logEntry{} // let go of the event's strings
		l.head++
		l.n--
		if l.head == chunkSize {
			l.chunks[0] = nil
			l.chunks = l.chunks[1:]
			l.head = 0
		}
	}
}

// at returns the i-th kept event, the oldest being 0.
func (l *eventLog) at(i int) *logEntry {
	i += l.head
	return &l.chunks[i/chunkSize][i%chunkSize]
}

// newest returns the newest event's id, "" when none is kept.
func (l *eventLog) newest() string {
	if l.n == 0 {
		return ""
	}
	return l.at(l.n - 1).e.ID
}

// read returns up to limit events after the id after ("" from the oldest
// kept). Callers hold Store.mu.
func (l *eventLog) read(after string, limit int) ([]lock.Event, error) {
	if l.off {
		return nil, errEventsOff
	}
	start := 0
	if after != "" {
		ms, seq, ok := lock.ParseEventID(after)
		if !ok {
			return nil, lock.Invalid(lock.FieldError{Field: "after", Detail: "not an event id (<ms>-<seq>)"})
		}
		if l.trimmed != "" && lock.CompareEventIDs(after, l.trimmed) < 0 {
			return nil, lock.EventsGone(after, l.at(0).e.ID)
		}
		start = sort.Search(l.n, func(i int) bool {
			e := l.at(i)
			return e.ms > ms || (e.ms == ms && e.seq > seq)
		})
	}
	if limit <= 0 {
		limit = defaultReadLimit
	}
	end := min(start+limit, l.n)
	if start >= end {
		return nil, nil
	}
	out := make([]lock.Event, 0, end-start)
	for i := start; i < end; i++ {
		out = append(out, l.at(i).e)
	}
	return out, nil
}

// readBefore returns up to limit events before the id before ("" from the
// newest), newest first. Callers hold Store.mu.
func (l *eventLog) readBefore(before string, limit int) ([]lock.Event, error) {
	if l.off {
		return nil, errEventsOff
	}
	end := l.n
	if before != "" {
		ms, seq, ok := lock.ParseEventID(before)
		if !ok {
			return nil, lock.Invalid(lock.FieldError{Field: "before", Detail: "not an event id (<ms>-<seq>)"})
		}
		end = sort.Search(l.n, func(i int) bool {
			e := l.at(i)
			return e.ms > ms || (e.ms == ms && e.seq >= seq)
		})
	}
	if limit <= 0 {
		limit = defaultReadLimit
	}
	out := make([]lock.Event, 0, min(limit, end))
	for i := end - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, l.at(i).e)
	}
	return out, nil
}

// Events implements lock.Store: the store itself, or nil when it was made
// with Options.NoEvents.
func (m *Store) Events() lock.EventLog {
	if m.log.off {
		return nil
	}
	return m
}

// ReadEvents implements lock.EventLog. A limit <= 0 reads up to 1000
// events.
func (m *Store) ReadEvents(ctx context.Context, after string, limit int) ([]lock.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.log.read(after, limit)
}

// WaitEvents implements lock.EventLog: it sleeps on a channel the next
// event closes. It ends with ctx's error when ctx ends first, and with an
// unavailable error when the store closes.
func (m *Store) WaitEvents(ctx context.Context, after string, limit int) ([]lock.Event, error) {
	for {
		m.mu.Lock()
		evs, err := m.log.read(after, limit)
		if err != nil || len(evs) > 0 {
			m.mu.Unlock()
			return evs, err
		}
		if m.closed {
			m.mu.Unlock()
			return nil, errClosed
		}
		if m.log.wake == nil {
			m.log.wake = make(chan struct{})
		}
		wake := m.log.wake
		m.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// ReadEventsBefore implements lock.EventLog. A limit <= 0 reads up to
// 1000 events.
func (m *Store) ReadEventsBefore(ctx context.Context, before string, limit int) ([]lock.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.log.readBefore(before, limit)
}

// LastEventID implements lock.EventLog.
func (m *Store) LastEventID(ctx context.Context) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.log.off {
		return "", errEventsOff
	}
	return m.log.newest(), nil
}

// record adds the event of a change of lease l of name n: typ, with holds
// the holds l has left, at the store's clock now. Callers hold m.mu.
func (m *Store) record(typ lock.EventType, n *memName, l *memLease, holds int, now time.Time) {
	m.log.add(leaseEvent(typ, n, l, holds, now), now)
}

// leaseEvent describes a change of l. The event's time is the change's, and
// for an expiry the moment the TTL ran out, which the sweep that records it
// may notice a little later.
func leaseEvent(typ lock.EventType, n *memName, l *memLease, holds int, now time.Time) lock.Event {
	at := now
	if typ == lock.EventExpired {
		at = l.ExpiresAt
	}
	return lock.Event{
		Type:      typ,
		Lock:      l.Lock,
		Owner:     l.Owner,
		Principal: l.Principal,
		LeaseID:   l.ID,
		Mode:      l.Mode,
		Token:     l.Token,
		Session:   l.Session,
		HoldCount: holds,
		Queue:     len(n.queue),
		Time:      at,
	}
}

// closeEvents wakes every WaitEvents at Close. Callers hold m.mu.
func (m *Store) closeEvents() {
	if m.log.wake != nil {
		close(m.log.wake)
		m.log.wake = nil
	}
}
