package redis

import (
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// UseEval makes s run its scripts with EVALSHA and EVAL, as it does on a
// Redis without Functions (6.2).
func UseEval(s *Store) { s.scripts.lib.mode.Store(modeEval) }

// EventsHold is how long a read of s's event log holds back the newest
// events (clusterHold on Redis Cluster).
func EventsHold(s *Store) time.Duration { return s.journal.hold() }

// ClusterEventsHold is how long a read of a Redis Cluster's event log,
// merged from its masters' logs, holds back the newest events.
const ClusterEventsHold = clusterHold

// ErrFailover is the cause of a write that waited for a Sentinel failover
// to end and could wait no longer (writeGate).
var ErrFailover = errFailover

// GateCloses counts how often the write gate of c closed; 0 outside
// Sentinel mode.
func GateCloses(c *Client) int64 {
	if c.sentinel == nil {
		return 0
	}
	return c.sentinel.gate.closes.Load()
}

// GateShut reports whether the write gate of c is closed.
func GateShut(c *Client) bool { return c.sentinel != nil && c.sentinel.gate.shut.Load() != nil }

// GateWaiting counts the writes of c waiting for its write gate to open.
func GateWaiting(c *Client) int64 {
	if c.sentinel == nil {
		return 0
	}
	return c.sentinel.gate.waiting.Load()
}

// Gate is a write gate that a test closes and opens by hand, in place of
// the sentinels' announcements (HandGate).
type Gate struct{ g *writeGate }

// HandGate gives s a write gate that the test drives, which gives up on a
// failover after hold.
func HandGate(s *Store, hold time.Duration) *Gate {
	g := newWriteGate(&goredis.FailoverOptions{})
	g.hold = hold
	s.topology.gate = g
	return &Gate{g: g}
}

// Promoting closes the gate, as a sentinel's +failover-state-send-slaveof-noone
// for the master at from does.
func (g *Gate) Promoting(from string) { g.g.failoverStarted(from) }

// Promoted opens it, as a sentinel's +promoted-slave for the replica at to
// does.
func (g *Gate) Promoted(to string) { g.g.switched(to) }

// Waiting counts the writes waiting for the gate to open.
func (g *Gate) Waiting() int64 { return g.g.waiting.Load() }

// SetListBatches sets how many SCAN batches one page of s.List walks at
// most.
func SetListBatches(s *Store, n int) { s.listBatches = n }
