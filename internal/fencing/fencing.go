// Package fencing holds the rule that makes fencing tokens safe, and a
// reference fenced resource that applies it.
//
// The rule: a fresh grant's token is max(last+1, now in microseconds). The
// counter alone gives strictly increasing tokens while the store keeps its
// data; the clock floor keeps them increasing when the store loses the
// counter (a restart without persistence, a failover to a lagging replica,
// FLUSHALL), provided the store's clock has not gone back past the last token
// issued. Microseconds since 1970 stay below 2^53 until the year 2255, so
// JavaScript clients read every token exactly.
//
// The Redis acquire script applies the same rule in Lua (see
// internal/store/redis/scripts/acquire.lua); the memory store calls Next.
package fencing

import (
	"errors"
	"sync"
	"time"
)

// MaxToken is the largest token: 2^53-1, exact in a JavaScript number.
const MaxToken = 1<<53 - 1

// ErrExhausted means the token space is used up; it cannot happen before the
// year 2255 unless a clock is far in the future.
var ErrExhausted = errors.New("fencing: token space exhausted")

// Next returns the token for a fresh grant after last, given the store's
// clock.
func Next(last uint64, now time.Time) (uint64, error) {
	next := last + 1
	if us := now.UnixMicro(); us > 0 && uint64(us) > next {
		next = uint64(us)
	}
	if next > MaxToken {
		return 0, ErrExhausted
	}
	return next, nil
}

// ErrStale is returned by a Resource for a write whose token is lower than
// one it has already admitted.
var ErrStale = errors.New("fencing: stale token")

// Resource is an in-memory fenced resource: it admits a write only if its
// token is at least the highest token admitted so far. Equal tokens are
// admitted, because one lease makes many writes with its one token.
//
// It is what a downstream service must do to be safe against a paused holder;
// the Postgres and Redis guards do the same durably.
type Resource struct {
	mu      sync.Mutex
	highest uint64
	writes  []Write
}

// Write is one admitted write.
type Write struct {
	Token uint64
	Value string
}

// Write admits value if token is not stale.
func (r *Resource) Write(token uint64, value string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if token < r.highest {
		return ErrStale
	}
	r.highest = token
	r.writes = append(r.writes, Write{Token: token, Value: value})
	return nil
}

// Writes returns the admitted writes in order.
func (r *Resource) Writes() []Write {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Write(nil), r.writes...)
}
