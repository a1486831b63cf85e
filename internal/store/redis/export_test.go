package redis

import "time"

// UseEval makes s run its scripts with EVALSHA and EVAL, as it does on a
// Redis without Functions (6.2).
func UseEval(s *Store) { s.scripts.lib.mode.Store(modeEval) }

// EventsHold is how long a read of s's event log holds back the newest
// events (clusterHold on Redis Cluster).
func EventsHold(s *Store) time.Duration { return s.journal.hold() }

// ClusterEventsHold is how long a read of a Redis Cluster's event log,
// merged from its masters' logs, holds back the newest events.
const ClusterEventsHold = clusterHold

// ErrFailover is the cause of a write refused while a Sentinel failover is
// under way (writeGate).
var ErrFailover = errFailover

// GateCloses counts how often the write gate of c closed; 0 outside
// Sentinel mode.
func GateCloses(c *Client) int64 {
	if c.sentinel == nil {
		return 0
	}
	return c.sentinel.gate.closes.Load()
}
