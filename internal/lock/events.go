package lock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockapi/lockapi/event"
)

// EventType names a change of a lock. The types are the public event
// package's, the one list (event.Types) that the API, its filters and the
// SDK share: a new type is added there.
type EventType = event.Type

const (
	EventGranted       = event.Granted
	EventReentered     = event.Reentered
	EventRenewed       = event.Renewed
	EventReleased      = event.Released
	EventExpired       = event.Expired
	EventForceReleased = event.ForceReleased
	EventUpdated       = event.Updated
)

// Event is one recorded change of one lock. Events of one lock are recorded
// atomically with the change and in the order of the changes.
type Event struct {
	// ID is opaque and ordered: a later event of the log has a larger ID
	// (compare with CompareEventIDs).
	ID   string
	Type EventType
	Lock string
	// Owner and Principal are the lease's; Principal of a force release is
	// the admin's who did it.
	Owner     string
	Principal string
	// LeaseID is the lease's id: a capability, shown to admins only.
	LeaseID string
	Mode    Mode
	Token   uint64
	// Session is the session the lease was bound to, "" for none: an
	// expired event with one says the session's end ended the lease.
	Session   string
	HoldCount int // holds left after the change
	// Metadata is the lease's new metadata, on an EventUpdated only.
	Metadata map[string]string
	Queue    int // queued waiters, where the store knew it (-1: unknown)
	// Waited is how long the request of a granted event waited for it
	// (AcquireRequest.Waited), to the millisecond; 0 otherwise.
	Waited time.Duration
	Time   time.Time
	// Late marks an event read after events with larger ids: a log that
	// merges several (Redis Cluster's, one per master) orders them by the
	// masters' clocks, and a master whose clock is behind records events
	// that sort before ones already read. A reader delivers a late event
	// rather than drop it as a repeat.
	Late bool
	// UnknownLayout is the layout of a record this version cannot read
	// (written by a newer one, docs/UPGRADING.md), "" for an event read:
	// such an event has only its ID and Time. It passes every filter, so
	// that each reader says so (an event stream with a comment) rather
	// than drop it silently.
	UnknownLayout string
}

// EventFilter selects events: by exact lock or name prefix, and by type.
// The zero value selects every event.
type EventFilter struct {
	Lock   string
	Prefix string
	Types  []EventType
}

// Match reports whether e passes the filter; an event of an unknown
// layout passes every filter (Event.UnknownLayout).
func (f EventFilter) Match(e Event) bool {
	if e.UnknownLayout != "" {
		return true
	}
	if f.Lock != "" && e.Lock != f.Lock {
		return false
	}
	if f.Prefix != "" && !strings.HasPrefix(e.Lock, f.Prefix) {
		return false
	}
	return len(f.Types) == 0 || slices.Contains(f.Types, e.Type)
}

// EventLog is the log of events a store records with its changes. It keeps
// at least the events of the retention period or the last MaxEvents,
// whichever is fewer.
type EventLog interface {
	// ReadEvents returns up to limit events recorded after the event after
	// ("" starts at the oldest kept), oldest first. When after is older
	// than anything kept, it fails with CodeEventsGone, and the error's
	// Oldest says where the log starts now.
	ReadEvents(ctx context.Context, after string, limit int) ([]Event, error)
	// WaitEvents is ReadEvents that, when nothing was recorded after after,
	// waits until something is or ctx ends. It sends nothing to the store
	// while it waits except what waiting itself needs (one blocking read).
	WaitEvents(ctx context.Context, after string, limit int) ([]Event, error)
	// LastEventID returns the newest event's id, "" when there is none: a
	// reader that wants only what comes next starts after it.
	LastEventID(ctx context.Context) (string, error)
	// ReadEventsBefore returns up to limit events recorded before the event
	// before ("" starts at the newest), newest first: the recent events of a
	// busy log, which reading forward from a guessed point would miss. It
	// ends at the oldest event kept, and never fails with CodeEventsGone.
	ReadEventsBefore(ctx context.Context, before string, limit int) ([]Event, error)
}

// CodeEventsGone: a resume point older than the event log keeps (HTTP 410).
const CodeEventsGone Code = "events-gone"

// EventsGone builds the error for a resume point the log no longer keeps.
func EventsGone(after, oldest string) *Error {
	return &Error{Code: CodeEventsGone, Oldest: oldest,
		Detail: fmt.Sprintf("event %q is older than the event log keeps; the oldest event kept is %q", after, oldest)}
}

// maxEventIDDigits bounds each part of an event id: 19 digits always fit
// in 64 bits, and no store issues a longer part (milliseconds have 13).
const maxEventIDDigits = 19

// MaxEventIDLen is the length of the longest event id.
const MaxEventIDLen = 2*maxEventIDDigits + 1

// ParseEventID reads an event id: "<ms>-<seq>", as Redis stream ids are,
// each part 1-19 decimal digits.
func ParseEventID(id string) (ms, seq uint64, ok bool) {
	a, b, found := strings.Cut(id, "-")
	if !found || len(a) > maxEventIDDigits || len(b) > maxEventIDDigits {
		return 0, 0, false
	}
	var err1, err2 error
	ms, err1 = strconv.ParseUint(a, 10, 64)
	seq, err2 = strconv.ParseUint(b, 10, 64)
	return ms, seq, err1 == nil && err2 == nil
}

// CompareEventIDs orders two valid event ids: -1, 0 or +1.
func CompareEventIDs(a, b string) int {
	am, as, _ := ParseEventID(a)
	bm, bs, _ := ParseEventID(b)
	if c := cmp.Compare(am, bm); c != 0 {
		return c
	}
	return cmp.Compare(as, bs)
}
