// Package fencetest gives tests an in-memory fenced resource: the check that
// package fence makes durably in PostgreSQL and Redis, kept in a slice, so
// that a test can show a late write being refused without a database.
package fencetest

import (
	"sync"

	"github.com/lockapi/lockapi/fence"
)

// Resource admits a write only if its token is at least the highest token
// admitted so far, and refuses it with fence.ErrStale otherwise. Equal tokens
// are admitted, because one lease makes many writes with its one token. The
// zero value is an empty resource, safe for concurrent use.
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
		return fence.ErrStale
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
