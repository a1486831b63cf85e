package redis

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/lockapi/lockapi/internal/layout"
)

// journal is the store's event log (docs/EVENTS.md), what lock.Store's
// Events hands out: the log of a single Redis (or Sentinel master), or one
// log per master of a Redis Cluster read as one (clusterjournal.go). The
// scripts write it (see record in scripts/lib.lua); the journal reads it,
// waits on it, and owns the sweepers that record expiries and trim it.
// A store without events has no journal.
type journal struct {
	keyspace
	*topology
	max       string // the logs' MAXLEN, then " fields" with Options.EventsByField: the events argument's first line (events_from in scripts/lib.lua)
	retention time.Duration
	// unknown is told of entries of a layout this version does not know.
	unknown layout.Unknown

	// single is the log of a single Redis; clusterLogs those of a
	// cluster's masters. Exactly one is set.
	single      *eventLog
	clusterLogs *clusterLogs

	// The connections blocking reads of the log wait on, out of the
	// scripts' pool: blocking on a single Redis, nodeBlocking on a cluster
	// (by master address).
	blocking     *blockingConns
	blockingMu   sync.Mutex
	nodeBlocking map[string]*blockingConns
	// cursors remembers where the latest cluster reads left each log
	// (clusterjournal.go).
	cursors cursorCache
}

// newJournal returns the event log that opts asks for, or nil when events
// are off, or when rdb is neither a cluster nor a plain client (nothing
// to read the log with).
func newJournal(top *topology, ks keyspace, opts Options) *journal {
	plain := plainClient(top.rdb)
	if !opts.Events || (top.cluster == nil && plain == nil) {
		return nil
	}
	max := opts.EventsMax
	if max <= 0 {
		max = DefaultEventsMax
	}
	j := &journal{keyspace: ks, topology: top, max: strconv.Itoa(max), retention: opts.EventsRetention, unknown: opts.UnknownLayout}
	if opts.EventsByField {
		j.max += " fields"
	}
	if j.retention <= 0 {
		j.retention = DefaultEventsRetention
	}
	if top.cluster != nil {
		j.clusterLogs = &clusterLogs{j: j, bySlot: map[int]*eventLog{}}
		j.nodeBlocking = map[string]*blockingConns{}
		return j
	}
	j.single = &eventLog{slot: -1, key: ks.eventsKey(), exp: ks.expiriesKey(), arg: j.max}
	j.blocking = &blockingConns{client: plain}
	return j
}

// clustered reports a journal of one log per cluster master.
func (j *journal) clustered() bool { return j != nil && j.clusterLogs != nil }

// singleLog returns the log of a single Redis, nil on a cluster or without
// events: the scripts then take its keys.
func (j *journal) singleLog() *eventLog {
	if j == nil {
		return nil
	}
	return j.single
}

// announce gives a single Redis's log its sweeper and subscribes it to the
// log's expiry announcements: before the listener starts, which subscribes.
func (j *journal) announce(l listener, sweeperFor func(*eventLog) *sweeper) {
	if j == nil || j.single == nil {
		return
	}
	j.single.sweep = sweeperFor(j.single)
	l.(*classicListener).announce(j.expiriesKey(), j.single.sweep.notice)
}

// startSweeping starts the sweepers once the listener runs. A cluster
// master's log gets its sweeper, and its announcements, once the slot map
// names it; the map is loaded now, so that expiries left by earlier
// processes are swept without waiting for a first call.
func (j *journal) startSweeping(l listener, sweeperFor func(*eventLog) *sweeper) {
	switch {
	case j == nil:
	case j.single != nil:
		j.single.sweep.start()
	default:
		sharded := l.(*shardedListener)
		j.clusterLogs.onNew = func(log *eventLog) {
			log.sweep = sweeperFor(log)
			sharded.announce(log.announcer, log.sweep.notice)
			log.sweep.start()
		}
		go func() { _, _ = j.clusterLogs.all(context.Background()) }()
	}
}

// stopSweeping stops every sweeper; none starts after it.
func (j *journal) stopSweeping() {
	switch {
	case j == nil:
	case j.single != nil:
		if j.single.sweep != nil {
			j.single.sweep.close()
		}
	default:
		j.clusterLogs.close()
	}
}

// closeReaders closes the connections blocking reads wait on.
func (j *journal) closeReaders() {
	if j == nil {
		return
	}
	if j.blocking != nil {
		j.blocking.close()
	}
	j.blockingMu.Lock()
	for _, b := range j.nodeBlocking {
		b.close()
	}
	j.blockingMu.Unlock()
}
