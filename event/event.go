// Package event is the wire form of a lock event (docs/EVENTS.md): the data
// of each Server-Sent Event of GET /v1/events, the body of each webhook
// delivery, and what `lockapi events --json` prints. The server writes it,
// and the Go SDK (package client) and the CLI read it: one definition, so
// the three cannot drift apart.
package event

import "time"

// TimeFormat is how the API writes every time: RFC 3339 in UTC with
// exactly three fractional digits, e.g. 2025-11-22T14:02:00.000Z.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// FormatTime writes t in TimeFormat.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// ParseTime reads a time the API wrote. It accepts any RFC 3339 time, as
// a JSON decoder of time.Time would.
func ParseTime(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }

// Event is one change of one lease of a lock, as JSON.
type Event struct {
	ID           string `json:"id"`
	Type         string `json:"type"` // granted, reentered, renewed, released, expired or force_released
	Lock         string `json:"lock"`
	Owner        string `json:"owner"`
	Principal    string `json:"principal"`
	Mode         string `json:"mode"` // exclusive or shared
	FencingToken uint64 `json:"fencing_token"`
	HoldCount    int    `json:"hold_count"`
	// QueueLength is absent where the store did not know it.
	QueueLength *int   `json:"queue_length,omitempty"`
	Time        string `json:"time"` // in TimeFormat
	// LeaseID is the lease's capability to renew and release: shown to
	// admins only, never in a webhook delivery.
	LeaseID string `json:"lease_id,omitempty"`
	// Session is the session the lease was bound to; absent for none. An
	// expired event with one says the session's end ended the lease.
	Session string `json:"session,omitempty"`
}
