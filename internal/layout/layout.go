// Package layout names the layouts of the records lockapi keeps in Redis
// that another version of lockapi may read during a rolling deploy, and
// reports a record whose layout this version does not know
// (docs/UPGRADING.md, "Layout versions").
//
// Each such record carries its layout's number (a field v); a record
// without one was written by v0.1.0 and is layout 1. A reader that meets a
// number it does not know never drops the record silently: it tells a
// Reporter, which logs the first of each kind and counts every one
// (lockapi_unknown_layout_total{kind}), and says what it did with it.
package layout

import (
	"sync"

	"github.com/rs/zerolog"
)

// Kind names a kind of record.
type Kind string

// The kinds of records another version may read.
const (
	Events   Kind = "events"   // the event log's entries
	Sessions Kind = "sessions" // a session's hash
	Webhooks Kind = "webhooks" // a webhook subscription or dead letter
	Leases   Kind = "leases"   // a lock's lock hash, fence or shared record
)

// Kinds lists every kind, for metrics that show each from the start.
var Kinds = []Kind{Events, Sessions, Webhooks, Leases}

// The layouts this version writes and reads.
const (
	// EventsFields is an event entry of one stream field per event field
	// (t, l, k, o, p, m, n, h, q, s), without v: what v0.1.0 writes and
	// reads, and what LOCKAPI_EVENTS_BY_FIELD asks for.
	EventsFields = "1"
	// EventsPacked is an entry of v=2 and e, the event's fields in one
	// value separated by newlines (since v0.2.0).
	EventsPacked = "2"
	// SessionsV1 is a session's hash as v0.1.0 writes it and as this
	// version writes it, with v=1.
	SessionsV1 = "1"
	// WebhooksV1 is a subscription's or a dead letter's JSON as v0.1.0
	// writes it and as this version writes it, with "v": 1.
	WebhooksV1 = 1
	// LeasesV1 is a lock's records as v0.1.0 writes them and as this
	// version writes them, with v=1: the lock hash, the fence hash and
	// each shared lease's or permit's record (LEASE_LAYOUT in the Redis
	// store's scripts/lib.lua).
	LeasesV1 = "1"
)

// Unknown is told of a record of kind whose layout (its v) this version
// does not know; at names the record (a stream entry's id, a key).
type Unknown func(kind Kind, layout, at string)

// Reporter logs the first unknown layout of each kind, at warn, and
// counts every one.
type Reporter struct {
	log   zerolog.Logger
	count func(Kind)
	seen  sync.Map // Kind -> struct{}
}

// NewReporter returns a Reporter that logs to log and counts with count
// (nil counts nothing).
func NewReporter(log zerolog.Logger, count func(Kind)) *Reporter {
	return &Reporter{log: log, count: count}
}

// Unknown implements Unknown. A nil Reporter does nothing.
func (r *Reporter) Unknown(kind Kind, layout, at string) {
	if r == nil {
		return
	}
	if r.count != nil {
		r.count(kind)
	}
	if _, logged := r.seen.LoadOrStore(kind, struct{}{}); logged {
		return
	}
	r.log.Warn().Str("kind", string(kind)).Str("layout", layout).Str("at", at).
		Msg("a record in Redis has a layout this lockapi does not know (written by a newer version?): counted in lockapi_unknown_layout_total, not read; this is logged once per kind (docs/UPGRADING.md)")
}

// Tell calls u when it is set.
func (u Unknown) Tell(kind Kind, layout, at string) {
	if u != nil {
		u(kind, layout, at)
	}
}

// Plain reports whether v, a layout read from Redis, is short and of
// letters, digits, '.', '_' and '-' only, so that it may be logged and shown
// as it is (a reader shows "?" for another).
func Plain(v string) bool {
	if v == "" || len(v) > 16 {
		return false
	}
	for _, c := range v {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
