package redis

import "time"

// UseEval makes s run its scripts with EVALSHA and EVAL, as it does on a
// Redis without Functions (6.2).
func UseEval(s *Store) { s.scripts.lib.mode.Store(modeEval) }

// EventsHold is how long a read of s's event log holds back the newest
// events (clusterHold on Redis Cluster).
func EventsHold(s *Store) time.Duration { return s.journal.EventsHold() }
