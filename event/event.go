// Package event is the one wire form of a lock event (docs/EVENTS.md): the
// data of each Server-Sent Event of GET /v1/events, the body of each webhook
// delivery, what `lockapi events --json` prints, and what the Go SDK
// (package client) hands its caller. The server writes it with Marshal, and
// the SDK and the CLI read it with encoding/json (Event.UnmarshalJSON): one
// definition, so they cannot drift apart.
//
// A new event type is one constant here and its entry in Types (and the
// EventType enum of openapi.yaml, which a test holds to Types); a new field
// is one field of Event, which every writer and reader then carries.
package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// TimeFormat is how the API writes every time: RFC 3339 in UTC with
// exactly three fractional digits, e.g. 2025-11-22T14:02:00.000Z.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// FormatTime writes t in TimeFormat.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// ParseTime reads a time the API wrote. It accepts any RFC 3339 time, as
// a JSON decoder of time.Time would.
func ParseTime(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }

// Type names a change of a lock.
type Type string

// The event types.
const (
	Granted       Type = "granted"        // a fresh lease: a new fencing token
	Reentered     Type = "reentered"      // the holder took one more hold
	Renewed       Type = "renewed"        // a lease's TTL was reset
	Released      Type = "released"       // a lease ended by its release (one hold, all holds, or the signed URL) or its abandonment
	Expired       Type = "expired"        // a lease's TTL ran out, or its session ended
	ForceReleased Type = "force_released" // an admin ended every lease of the lock
	Updated       Type = "updated"        // the holder replaced its lease's metadata (Event.Metadata)
)

// Types lists every type, in the order documentation lists them: the one
// list the server, its filters and its messages take the types from.
var Types = []Type{Granted, Reentered, Renewed, Released, Expired, ForceReleased, Updated}

// ParseType reads an event type; ok is false for a name not in Types.
func ParseType(s string) (t Type, ok bool) {
	t = Type(s)
	return t, slices.Contains(Types, t)
}

// TypeList is Types for people: "granted, reentered, ...".
func TypeList() string {
	names := make([]string, len(Types))
	for i, t := range Types {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// Mode is how a lease holds its lock.
type Mode string

// The modes of a lease. A semaphore's permit is exclusive.
const (
	Exclusive Mode = "exclusive"
	Shared    Mode = "shared"
)

// Event is one change of one lease of a lock. Its JSON members are named by
// the tags, in this order; Time is written in TimeFormat.
type Event struct {
	// ID orders the events: a later event has a larger id. A reader
	// resumes after one (GET /v1/events?after=, Last-Event-ID).
	ID   string `json:"id"`
	Type Type   `json:"type"`
	Lock string `json:"lock"`
	// Owner and Principal are the lease's; Principal of a force release is
	// the admin's who did it. Principal is "" on a server without API keys.
	Owner        string `json:"owner"`
	Principal    string `json:"principal"`
	Mode         Mode   `json:"mode"`
	FencingToken uint64 `json:"fencing_token"`
	// HoldCount is the holds left after the change: 0 when the lease ended.
	HoldCount int `json:"hold_count"`
	// QueueLength is the lock's queued waiters after the change; nil (and
	// absent) where the store did not know it.
	QueueLength *int `json:"queue_length,omitempty"`
	// WaitedMS is how long the request of a Granted event waited for the
	// lease, in milliseconds: 0 for an immediate grant. nil (and absent)
	// on every other type.
	WaitedMS *int64 `json:"waited_ms,omitempty"`
	// LeaseID is the lease's capability to renew and release: shown to
	// admins only, never in a webhook delivery.
	LeaseID string `json:"lease_id,omitempty"`
	// Session is the session the lease was bound to; absent for none. An
	// Expired event with one says the session's end ended the lease.
	Session string `json:"session,omitempty"`
	// Metadata is the lease's metadata after an Updated event, which
	// always carries it ({} when the update removed every label); nil
	// (and absent) on the other types.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Time is when the change happened, by the server's store.
	Time time.Time `json:"time"`
}

// fields is Event without its methods, so that encoding/json walks its
// fields: the tags above are the wire shape, written nowhere else.
type fields Event

// wire is Event as JSON: its fields, but the time in TimeFormat, and the
// metadata of an Updated event written even when empty (the outer members
// shadow the inner ones of the same names, and keep their places: Metadata
// and Time are Event's last fields).
type wire struct {
	fields
	Metadata *map[string]string `json:"metadata,omitempty"`
	Time     string             `json:"time"`
}

// newWire returns e as JSON writes it.
func newWire(e Event) wire {
	w := wire{fields: fields(e), Time: FormatTime(e.Time)}
	if md := e.Metadata; md != nil || e.Type == Updated {
		if md == nil {
			md = map[string]string{}
		}
		w.Metadata = &md
	}
	return w
}

// Marshal returns e's JSON as the API writes it, on one line and without
// HTML escaping (the API writes no HTML; see encoding/json's
// SetEscapeHTML). Every writer of events uses it, so that a stream, a
// webhook and the CLI send the same bytes. json.Marshal writes the same
// JSON value, but with <, > and & escaped.
func Marshal(e Event) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(newWire(e)); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// MarshalJSON implements json.Marshaler with Marshal.
func (e Event) MarshalJSON() ([]byte, error) { return Marshal(e) }

// UnmarshalJSON implements json.Unmarshaler: it reads what Marshal writes,
// with any RFC 3339 time; an absent or empty time is the zero time.
func (e *Event) UnmarshalJSON(data []byte) error {
	var w struct {
		*fields
		Time string `json:"time"`
	}
	w.fields = (*fields)(e)
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	e.Time = time.Time{}
	if w.Time == "" {
		return nil
	}
	t, err := ParseTime(w.Time)
	if err != nil {
		return fmt.Errorf("event: time: %w", err)
	}
	e.Time = t
	return nil
}
