package memory

import (
	"slices"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// queueEntry is one waiter's place in a lock's queue: the Redis store's
// {name}:queue (arrival) and {name}:queue:deadline (deadline) members.
type queueEntry struct {
	id       string // the waiter id (lock.NewWaiterID): its first byte says how it queues
	arrival  uint64 // from memFence.arrivals, rising per name
	deadline time.Time
}

// pruneQueue drops the places whose deadline has come: their waiters stopped
// renewing them (lock.QueueEntryTTL).
func (n *memName) pruneQueue(now time.Time) {
	n.queue = slices.DeleteFunc(n.queue, func(e queueEntry) bool { return !now.Before(e.deadline) })
}

// head returns the waiter id at the head of the queue, "" when it is empty.
func (n *memName) head() string {
	if len(n.queue) == 0 {
		return ""
	}
	return n.queue[0].id
}

// place returns the index of waiterID's place, or -1 when it has none.
func (n *memName) place(waiterID string) int {
	if waiterID == "" {
		return -1
	}
	return slices.IndexFunc(n.queue, func(e queueEntry) bool { return e.id == waiterID })
}

// leave takes waiterID's place out of the queue and returns where it was, or
// -1 when it had none.
func (n *memName) leave(waiterID string) int {
	i := n.place(waiterID)
	if i >= 0 {
		n.queue = slices.Delete(n.queue, i, i+1)
	}
	return i
}

// heldOff reports whether the queue keeps req waiting (rule 8): an entry
// ahead of its place, or any entry when it has none, blocks it by
// lock.QueueBlocks. req.Mode is set.
func (n *memName) heldOff(req lock.AcquireRequest) bool {
	for _, e := range n.queue {
		if e.id == req.WaiterID {
			return false
		}
		if lock.QueueBlocks(e.id, req.Fair, req.Mode) {
			return true
		}
	}
	return false
}
