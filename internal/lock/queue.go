package lock

import (
	"crypto/sha256"
	"encoding/base32"
	"time"

	"github.com/oklog/ulid/v2"
)

// A lock's queue holds its fair waiters, and the exclusive waiters that
// shared holders keep out (so that new readers queue behind them). A queue
// entry lives QueueEntryTTL unless its waiter renews it, which AcquireWait
// does every QueueRenewal by trying again: a waiter whose client left, or
// whose lockapi instance died, leaves the queue within QueueEntryTTL.
const (
	QueueEntryTTL = time.Second
	QueueRenewal  = 300 * time.Millisecond
)

// NewWaiterID returns a queue id for a waiting acquire. Its first byte says
// how the entry queues, so that the stores' scripts read it off the id:
// 'x' exclusive, 'X' exclusive and fair, 's' shared, 'S' shared and fair.
func NewWaiterID(req AcquireRequest) string {
	c := byte('x')
	if req.Mode == Shared {
		c = 's'
	}
	if req.Fair {
		c -= 'a' - 'A'
	}
	return string(c) + ulid.Make().String()
}

// WaiterFlags reads a waiter id's first byte: whether the entry is fair and
// whether it is shared. ok is false for an id NewWaiterID did not make.
func WaiterFlags(id string) (fair, shared, ok bool) {
	if id == "" {
		return false, false, false
	}
	switch id[0] {
	case 'x':
		return false, false, true
	case 'X':
		return true, false, true
	case 's':
		return false, true, true
	case 'S':
		return true, true, true
	}
	return false, false, false
}

// QueueBlocks reports whether a queue entry ahead of an acquire keeps it
// waiting: any fair entry does, an exclusive entry holds off shared
// acquires (writers do not starve), and a fair acquire waits for everyone
// ahead. The stores apply this rule to every entry ahead.
func QueueBlocks(ahead string, fair bool, mode Mode) bool {
	aFair, aShared, _ := WaiterFlags(ahead)
	return fair || aFair || (mode == Shared && !aShared)
}

// StableWaiterID returns the queue id of a waiting acquire that carries an
// Idempotency-Key: the same for every repeat of the request, so that a client
// whose wait outlasts one request (the server's longest wait) asks again and
// finds its place in the queue where it left it, if it comes back before the
// place lapses.
func StableWaiterID(req AcquireRequest) string {
	h := sha256.Sum256([]byte(req.Lock + "\x00" + req.Principal + "\x00" + req.Owner + "\x00" + req.IdempotencyKey))
	return NewWaiterID(req)[:1] + base32.StdEncoding.EncodeToString(h[:16])[:26]
}
