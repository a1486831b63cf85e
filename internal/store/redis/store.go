package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/layout"
	"github.com/lockapi/lockapi/internal/lock"
)

// DefaultPrefix is the key prefix when none is configured.
const DefaultPrefix = "lockapi:"

// Store is the production store. Many lockapi processes may share one Redis
// (or a Sentinel-managed primary, or a Cluster: every key of one lock shares
// a hash slot).
//
// It composes one type per concern: the keyspace names the keys (and
// scriptKeys those a script takes), the topology reaches Redis, the runner
// runs the scripts, the notifications wake waiters, the journal is the
// event log, and the reaper repairs in the background: it abandons the
// acquires whose outcome was lost and records the expiries no script saw.
type Store struct {
	scriptKeys
	*topology
	*runner
	notifications
	reaper *reaper
	// minReplicas: see Options.MinReplicas.
	minReplicas int

	// journal is the event log; nil while no events are recorded.
	journal *journal
	// sessions keeps sessions (sessions.go, clustersessions.go); nil on a
	// redlock master, and on a Redis Cluster without events.
	sessions *sessions
	// listBatches, when above 0, overrides the const listBatches (tests).
	listBatches int
	// unknown: see Options.UnknownLayout.
	unknown layout.Unknown
}

var _ lock.Store = (*Store)(nil)

// Options configures New.
type Options struct {
	// Prefix starts every key and channel name; it must not contain { or }
	// so that the {name} hash tag stays the only one.
	Prefix string
	// ObserveScript, when set, is told how long each script call took.
	ObserveScript func(script string, d time.Duration)
	// Batch sends concurrent script calls together in pipelines (see
	// batcher). Off, every call is its own EVALSHA round trip, as a plain
	// Redis client does.
	Batch bool
	// CallTimeout bounds every store call (DefaultCallTimeout when 0). A
	// call that times out is answered unavailable and never sent again.
	CallTimeout time.Duration
	// MinReplicas is how many replicas must confirm a renewal or a release
	// (Redis WAIT) before it is answered; an acquire says its own. Without
	// it, a failover could undo an acknowledged renewal, and the lease would
	// end at its earlier expiry while its holder works.
	MinReplicas int
	// Events records every change in the event log (docs/EVENTS.md), in
	// the script that makes it (on Redis Cluster, in the log of the
	// master that serves the name).
	Events bool
	// EventsMax is about how many events the log keeps at most
	// (DefaultEventsMax when 0); EventsRetention how long it keeps them at
	// least while it holds fewer (DefaultEventsRetention when 0).
	EventsMax       int
	EventsRetention time.Duration
	// EventsByField writes each event's fields as stream fields of their
	// own, the layout that versions before the packed one (one field, e)
	// write and read, for a rolling deploy from them: both layouts read
	// the same here (docs/EVENTS.md).
	EventsByField bool
	// UnknownLayout, when set, is told of every record read whose layout
	// this version does not know (package layout), written by a newer
	// version during a rolling deploy.
	UnknownLayout layout.Unknown
	// NoSessions opens the store without sessions: a redlock master, whose
	// store (internal/store/redlock) offers none. A Redis Cluster without
	// Events has none either: its masters keep the sessions' shadows beside
	// their event logs (docs/SESSIONS.md).
	NoSessions bool
}

// Event log bounds when Options says nothing (docs/EVENTS.md).
const (
	DefaultEventsMax       = 1_000_000
	DefaultEventsRetention = 24 * time.Hour
)

// DefaultCallTimeout bounds a store call when Options says nothing.
const DefaultCallTimeout = 2 * time.Second

// New returns a store on rdb, which should come from NewClient: only
// then are retries off and deadlines honoured on the sockets, and only then
// does the store follow a Sentinel master. It opens one pub/sub connection,
// shared by every waiter of this process, and closes it on Close; rdb itself
// is the caller's to close.
func New(rdb goredis.UniversalClient, opts Options) (*Store, error) {
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("store: key prefix %q must not contain { or }", prefix)
	}
	top, follow := newTopology(rdb, opts.CallTimeout)
	ks := keyspace{prefix}
	j := newJournal(top, ks, opts)
	run := &runner{topology: top, scripts: newScriptSet(j.clustered()), observe: opts.ObserveScript, unknown: opts.UnknownLayout}
	if opts.Batch {
		run.batch = newBatcher(rdb, top.cluster, top.callTimeout)
	}
	keys := scriptKeys{keyspace: ks, log: j.singleLog()}
	s := &Store{
		scriptKeys:    keys,
		topology:      top,
		runner:        run,
		notifications: newNotifications(top, ks, follow),
		minReplicas:   opts.MinReplicas,
		journal:       j,
		unknown:       opts.UnknownLayout,
	}
	s.reaper = newReaper(keys, run, j, s.publish)
	// A single Redis's log is announced on the listener before it starts
	// (it subscribes then); a cluster's logs as the slot map names them.
	j.announce(s.listener, s.reaper.sweeperFor)
	if l, ok := s.listener.(*classicListener); ok && !opts.NoSessions {
		s.sessions = newSessions(s, l) // a single Redis or Sentinel
	} else if j.clustered() && !opts.NoSessions {
		s.sessions = newClusterSessions(s, j.clusterLogs)
	}
	s.notifications.start()
	j.startSweeping(s.listener, s.reaper.sweeperFor)
	return s, nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// Ping implements lock.Store: the master (the current one, behind Sentinel),
// or every master of a cluster, answers PING within the call deadline.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	var err error
	if s.cluster != nil {
		err = s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			return c.Ping(ctx).Err()
		})
		if err == nil {
			err = s.clusterCovered(ctx)
		}
	} else {
		err = s.rdb.Ping(ctx).Err()
	}
	if err != nil {
		s.noteFailure(err)
		return storeError(err)
	}
	return nil
}

// clusterCovered reports an error unless every slot has a master that
// answers: a shard whose master died and has no replica to take over yet
// leaves its slots uncovered.
func (s *Store) clusterCovered(ctx context.Context) error {
	info, err := s.cluster.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return errors.New("store: cluster_state is not ok")
	}
	return nil
}

// Close stops the pub/sub connection, the reaper and the sweeper. It does
// not close the Redis client.
func (s *Store) Close() error {
	if s.sessions != nil {
		s.sessions.close()
	}
	s.journal.stopSweeping()
	if s.batch != nil {
		s.batch.close()
	}
	err := s.listener.close()
	s.reaper.close()
	s.journal.closeReaders()
	return err
}

// Reconnects counts how often a pub/sub connection failed and was redialled.
func (s *Store) Reconnects() int64 { return s.listener.stats().reconnects }

// MasterSwitches counts how often the pub/sub connection moved to a new
// Sentinel master.
func (s *Store) MasterSwitches() int64 { return s.listener.stats().masterSwitches }

// Ghosts returns how many acquires with an unknown outcome were abandoned,
// and how many wait to be.
func (s *Store) Ghosts() (abandoned, pending int64) { return s.reaper.stats() }

// storeError classifies a go-redis error. Connection trouble and Redis states
// that pass (loading, failover, cluster down) are "unavailable"; a client that
// went away keeps its context error; anything else is a bug.
func storeError(err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	if _, ok := unknownLeaseLayout(err); ok {
		return errLeaseLayout
	}
	var rerr goredis.Error
	if errors.As(err, &rerr) && !transientReply(err) {
		return &lock.Error{Code: lock.CodeInternal, Detail: "internal error", Err: err}
	}
	return lock.Unavailable(err)
}

// transientReply reports a Redis error reply for a state that passes
// (loading, failover, a moved slot, cluster down): the command did not run.
func transientReply(err error) bool {
	msg := err.Error()
	for _, transient := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "MOVED", "ASK ", "NOREPLICAS"} {
		if strings.HasPrefix(msg, transient) {
			return true
		}
	}
	return false
}
