package redis

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/notify"
)

var (
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/acquire_fast.lua
	acquireFastLua string
	//go:embed scripts/renew.lua
	renewLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/release_fast.lua
	releaseFastLua string
	//go:embed scripts/force_release.lua
	forceReleaseLua string
	//go:embed scripts/inspect.lua
	inspectLua string
	//go:embed scripts/abandon.lua
	abandonLua string
	//go:embed scripts/leave.lua
	leaveLua string
	//go:embed scripts/expire.lua
	expireLua string
	//go:embed scripts/lib.lua
	libLua string
)

// scriptSet is the store's library (library.go) and its entry points.
type scriptSet struct {
	lib                                                             *library
	acquire, acquireFast, renew, release, releaseFast, forceRelease *script
	inspect, abandon, leave, expire                                 *script
	raise                                                           *script // redlock.go
}

// newScriptSet builds the scripts of one store. On Redis Cluster with
// events, a script writes the event log of the master that serves its
// name, whose keys are in another slot of that master (see events_from in
// lib.lua): crossSlot flags the scripts so that Redis 7 allows it.
func newScriptSet(crossSlot bool) *scriptSet {
	l := newLibrary(libLua, crossSlot,
		entry{name: "acquire", body: acquireLua, ev: 8},
		entry{name: "acquire_fast", body: acquireFastLua, ev: 6},
		entry{name: "renew", body: renewLua, ev: 8},
		entry{name: "release", body: releaseLua, ev: 8},
		entry{name: "release_fast", body: releaseFastLua, ev: 4},
		entry{name: "force_release", body: forceReleaseLua, ev: 8},
		entry{name: "inspect", body: inspectLua, ev: 8, readOnly: true},
		entry{name: "abandon", body: abandonLua, ev: 8},
		entry{name: "leave", body: leaveLua, ev: 8},
		entry{name: "expire", body: expireLua, ev: 8},
		entry{name: "raise", body: raiseLua, ev: 8},
	)
	f := l.funcs
	return &scriptSet{lib: l, acquire: f[0], acquireFast: f[1], renew: f[2], release: f[3], releaseFast: f[4],
		forceRelease: f[5], inspect: f[6], abandon: f[7], leave: f[8], expire: f[9], raise: f[10]}
}

// fallback is a fast script's answer when the full script must run
// (FALLBACK in lib.lua).
const fallback = -9

// DefaultPrefix is the key prefix when none is configured.
const DefaultPrefix = "lockapi:"

// Store is the production store. Many lockapi processes may share one Redis
// (or a Sentinel-managed primary, or a Cluster: every key of one lock shares
// a hash slot).
type Store struct {
	keyspace
	rdb         goredis.UniversalClient
	scripts     *scriptSet
	cluster     *goredis.ClusterClient // nil unless rdb is one
	callTimeout time.Duration
	observe     func(script string, d time.Duration)
	batch       *batcher // nil: plain calls
	hub         *notify.Hub
	ghosts      *reaper
	listener    listener
	// publish is the command the scripts publish notices with: SPUBLISH
	// on Redis Cluster, so that a notice goes only to its lock's shard
	// instead of to every node.
	publish string
	// minReplicas: see Options.MinReplicas.
	minReplicas int

	// events is set while the scripts record events (Options.Events).
	// eventsArg is the scripts' events argument outside Redis Cluster: the
	// log's MAXLEN, or "0" to record none (see events_from in lib.lua).
	events    bool
	eventsArg string
	eventsMax string // the logs' MAXLEN
	retention time.Duration
	// log is the event log of a single Redis; clusterLogs those of a
	// cluster's masters. Both nil unless events.
	log         *eventLog
	clusterLogs *clusterLogs
	// The connections blocking reads of the log wait on: blocking on a
	// single Redis, nodeBlocking on a cluster (by master address).
	blocking     *blockingConns
	blockingMu   sync.Mutex
	nodeBlocking map[string]*blockingConns
	// cursors remembers where the latest cluster reads left each log
	// (clusterevents.go).
	cursors cursorCache
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
	s := &Store{
		keyspace:    keyspace{prefix},
		rdb:         rdb,
		callTimeout: opts.CallTimeout,
		observe:     opts.ObserveScript,
		minReplicas: opts.MinReplicas,
	}
	if s.callTimeout <= 0 {
		s.callTimeout = DefaultCallTimeout
	}
	var follow *sentinelConfig
	switch c := rdb.(type) {
	case *goredis.ClusterClient:
		s.cluster = c
	case *Client:
		follow = c.sentinel
		s.cluster, _ = c.UniversalClient.(*goredis.ClusterClient)
	}
	if opts.Batch {
		s.batch = newBatcher(rdb, s.callTimeout)
	}
	s.publish = "PUBLISH"
	if s.cluster != nil {
		s.publish = "SPUBLISH"
		s.listener = newShardedListener(s.cluster, s.keyspace)
	} else {
		s.listener = newClassicListener(rdb, s.keyspace, follow)
	}
	s.eventsArg = "0"
	plain := plainClient(rdb)
	if opts.Events && (s.cluster != nil || plain != nil) {
		s.events = true
		max := opts.EventsMax
		if max <= 0 {
			max = DefaultEventsMax
		}
		retention := opts.EventsRetention
		if retention <= 0 {
			retention = DefaultEventsRetention
		}
		s.eventsMax = strconv.Itoa(max)
		s.retention = retention
		if s.cluster != nil {
			s.clusterLogs = &clusterLogs{s: s, bySlot: map[int]*eventLog{}}
			s.nodeBlocking = map[string]*blockingConns{}
		} else {
			s.eventsArg = s.eventsMax
			s.log = &eventLog{slot: -1, key: s.eventsKey(), exp: s.expiriesKey(), arg: s.eventsArg}
			s.log.sweep = newSweeper(s, s.log, retention)
			s.blocking = &blockingConns{client: plain}
			s.listener.(*classicListener).announce(s.expiriesKey(), s.log.sweep.notice)
		}
	}
	s.scripts = newScriptSet(s.clusterLogs != nil)
	s.hub = notify.New(s.listener)
	s.listener.start(s.hub)
	s.ghosts = newReaper(s)
	if s.log != nil {
		s.log.sweep.start()
	}
	if s.clusterLogs != nil {
		// Each master's log gets its sweeper, and its announcements, once
		// the slot map names it.
		sharded := s.listener.(*shardedListener)
		s.clusterLogs.onNew = func(l *eventLog) {
			l.sweep = newSweeper(s, l, s.retention)
			sharded.announce(l.announcer, l.sweep.notice)
			l.sweep.start()
		}
		go func() {
			// Load the slot map now, so that expiries left by earlier
			// processes are swept without waiting for a first call.
			_, _ = s.clusterLogs.all(context.Background())
		}()
	}
	return s, nil
}

// plainClient returns the go-redis client of a single Redis or a Sentinel
// master behind rdb, nil for a Cluster (or anything else).
func plainClient(rdb goredis.UniversalClient) *goredis.Client {
	switch c := rdb.(type) {
	case *goredis.Client:
		return c
	case *Client:
		return plainClient(c.UniversalClient)
	}
	return nil
}

// keys lists the keys every full script takes, in the order lib.lua names
// them: the event log and the expiries set only while events are recorded
// outside Redis Cluster.
func (s *Store) keys(name string) []string {
	return s.withLog(s.lockKey(name), s.fenceKey(name), s.abandonedKey(name),
		s.sharedKey(name), s.expiryKey(name), s.queueKey(name), s.deadlineKey(name))
}

// acquireKeys and releaseKeys list the keys of the fast scripts
// (acquire_fast.lua, release_fast.lua).
func (s *Store) acquireKeys(name string) []string {
	return s.withLog(s.lockKey(name), s.fenceKey(name), s.abandonedKey(name), s.expiryKey(name), s.queueKey(name))
}

func (s *Store) releaseKeys(name string) []string {
	return s.withLog(s.lockKey(name), s.fenceKey(name), s.queueKey(name))
}

// withLog adds the event log and the expiries set to a script's keys while
// events are recorded outside Redis Cluster.
func (s *Store) withLog(keys ...string) []string {
	if s.log != nil {
		keys = append(keys, s.log.key, s.log.exp)
	}
	return keys
}

// movedAttempts bounds how often a script refused with MOVED or ASK (a Redis
// Cluster slot that moved: the script did not run) is sent again while the
// client reloads its slot map.
const movedAttempts = 3

// run runs one script (EVALSHA, falling back to EVAL) within the store's call
// deadline and reports its duration to the observer. A script is sent again
// only when Redis refused it without running it (MOVED, ASK); nothing else is
// ever retried.
func (s *Store) run(ctx context.Context, name string, script *script, keys []string, args ...any) *goredis.Cmd {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	var cmd *goredis.Cmd
	for attempt := 1; ; attempt++ {
		if s.batch != nil {
			cmd = s.batch.run(script, keys, args)
		} else {
			cmd = script.run(ctx, s.rdb, keys, args)
		}
		if s.clusterLogs != nil && isNonLocal(cmd.Err()) && attempt < movedAttempts {
			// The events argument named a log its master does not serve
			// (the slot map changed): nothing ran; name the right one.
			if err := s.clusterLogs.load(ctx); err == nil && len(args) > 0 {
				if _, ok := args[len(args)-1].(string); ok {
					if ev, _, err := s.eventsOf(ctx, s.nameOfKey(keys[0])); err == nil {
						args[len(args)-1] = ev
					}
				}
			}
			continue
		}
		if !s.refusedByCluster(cmd.Err()) || attempt == movedAttempts || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt) * 20 * time.Millisecond)
	}
	s.noteFailure(cmd.Err())
	if s.observe != nil {
		s.observe(name, time.Since(start))
	}
	return cmd
}

// refusedByCluster reports a Redis Cluster redirection: the node did not run
// the command because it does not serve the slot (any more).
func (s *Store) refusedByCluster(err error) bool {
	if s.cluster == nil || err == nil {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ") || strings.HasPrefix(msg, "TRYAGAIN")
}

// noteFailure makes a cluster client reload its slot map as soon as a node
// refuses connections, times out or redirects, instead of once a minute: a
// master that was killed must not keep its shard's traffic after its replica
// took over.
func (s *Store) noteFailure(err error) {
	if s.cluster == nil || err == nil {
		return
	}
	var rerr goredis.Error
	if errors.As(err, &rerr) && !s.refusedByCluster(err) && !strings.HasPrefix(err.Error(), "CLUSTERDOWN") {
		return // a script's own error: the topology is fine
	}
	s.cluster.ReloadState(context.Background())
}

// outcomeUnknown reports whether a failed call may have run in Redis: the
// request may have been written before the connection broke or the deadline
// passed. A reply from Redis (even an error) or a failed dial means it did
// not run, or ran and was answered.
func outcomeUnknown(err error) bool {
	if err == nil {
		return false
	}
	var rerr goredis.Error
	if errors.As(err, &rerr) {
		return false
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return false
	}
	return !errors.Is(err, goredis.ErrClosed)
}

// TryAcquire implements lock.Store with one script call.
func (s *Store) TryAcquire(ctx context.Context, req lock.AcquireRequest) (lock.Grant, error) {
	return s.AcquireAs(ctx, req, ulid.Make().String())
}

// AcquireAs is TryAcquire with the request id chosen by the caller: it names
// the acquire for Abandon, and a fresh grant's lease takes it as its id.
// Redlock (internal/store/redlock) gives every master the same one, so that
// a lease has one id everywhere.
func (s *Store) AcquireAs(ctx context.Context, req lock.AcquireRequest, requestID string) (lock.Grant, error) {
	// The caller validated req (lock.AcquireRequest.Validate); a kind
	// without rules would still upset every later holder of the name.
	if err := req.CheckKind(); err != nil {
		return lock.Grant{}, err
	}
	meta := ""
	if len(req.Metadata) > 0 {
		b, err := json.Marshal(req.Metadata)
		if err != nil {
			return lock.Grant{}, lock.AsError(err)
		}
		meta = string(b)
	}
	ev, evlog, err := s.eventsOf(ctx, req.Lock)
	if err != nil {
		return lock.Grant{}, storeError(err)
	}
	cmd, confirmed := s.acquire(ctx, req, requestID, meta, ev)
	if fresh, ok := cmd.Val().(string); ok && cmd.Err() == nil {
		// A fresh exclusive lease: "<token> <acquired ms>".
		g, err := freshGrant(req, requestID, fresh)
		if err == nil {
			evlog.recorded()
		}
		return s.confirmGrant(ctx, req, g, confirmed, err)
	}
	res, err := cmd.Slice()
	if err != nil {
		if outcomeUnknown(err) {
			// It may have granted a lease that nobody will ever know of.
			s.ghosts.add(req.Lock, requestID)
		}
		return lock.Grant{}, storeError(err)
	}
	r := reply(res)
	switch r.int(0) {
	case 0:
		return lock.Grant{}, lock.Held(req.Lock, lock.HeldBy{
			Owner:     r.str(1),
			Token:     r.uint(2),
			ExpiresIn: time.Duration(max(r.int(3), 0)) * time.Millisecond,
			Queue:     int(r.int(4)),
			Queued:    r.int(5) == 1,
			// The holder's own TTL: look again (3) may be the queue's.
			LeaseExpiresIn: time.Duration(max(r.int(6), 0)) * time.Millisecond,
		})
	case -1: // abandoned before it ran: its caller was told 503 already
		return lock.Grant{}, lock.Unavailable(errors.New("store: acquire ran after it was abandoned"))
	case -2:
		return lock.Grant{}, lock.LimitMismatch(req.Lock, req.Limit, int(r.int(1)))
	case -3:
		return lock.Grant{}, lock.UpgradeRefused(req.Lock, req.Owner)
	}
	lease := r.lease(req.Lock, 2)
	lease.Mode, lease.Limit = lock.Mode(r.str(13)), int(r.int(14))
	g := lock.Grant{Lease: lease, Fresh: r.int(1) == 1, RequestID: r.str(11), Replayed: r.int(12) == 1}
	if !g.Replayed {
		evlog.recorded()
	}
	return s.confirmGrant(ctx, req, g, confirmed, r.err)
}

// confirmGrant returns a grant once enough replicas confirmed it (confirmed
// of req.MinReplicas), and undoes it otherwise. err is what reading the
// grant's reply met.
func (s *Store) confirmGrant(ctx context.Context, req lock.AcquireRequest, g lock.Grant, confirmed int, err error) (lock.Grant, error) {
	if err == nil && confirmed < req.MinReplicas {
		// A failover now could lose this grant and hand the lock to
		// someone else while its holder works. Undo it.
		_ = s.Abandon(ctx, req.Lock, g.RequestID)
		return lock.Grant{}, unconfirmed("grant", confirmed, req.MinReplicas, "it was released")
	}
	return g, err
}

// acquire runs the acquire script: the fast one when the request is a plain
// exclusive try (see acquire_fast.lua), and the full one when the request
// is anything else or the fast script leaves it to the full one.
func (s *Store) acquire(ctx context.Context, req lock.AcquireRequest, requestID, meta, ev string) (*goredis.Cmd, int) {
	if req.Mode != lock.Shared && req.Limit == 0 && !req.Fair && req.WaiterID == "" && req.IdempotencyKey == "" {
		cmd, confirmed := s.write(ctx, "acquire", s.scripts.acquireFast, s.acquireKeys(req.Lock), req.MinReplicas,
			requestID, req.Owner, req.Principal, req.TTL.Milliseconds(), meta, s.channel(req.Lock), s.publish, ev)
		if !fellBack(cmd) {
			return cmd, confirmed
		}
	}
	mode, fair := "x", "0"
	if req.Mode == lock.Shared {
		mode = "s"
	}
	if req.Fair {
		fair = "1"
	}
	return s.write(ctx, "acquire", s.scripts.acquire, s.keys(req.Lock), req.MinReplicas,
		requestID, req.Owner, req.Principal, req.TTL.Milliseconds(), meta, s.channel(req.Lock), req.IdempotencyKey, s.publish,
		mode, req.Limit, fair, req.WaiterID, ev)
}

// fellBack reports a fast script's answer that the full script must run.
func fellBack(cmd *goredis.Cmd) bool {
	n, err := cmd.Int64()
	return err == nil && n == fallback
}

// freshGrant is the grant of a fresh exclusive lease, which the scripts
// answer with "<token> <acquired ms>" only: the rest is as req asked.
func freshGrant(req lock.AcquireRequest, requestID, reply string) (lock.Grant, error) {
	tok, acq, _ := strings.Cut(reply, " ")
	token, err1 := strconv.ParseUint(tok, 10, 64)
	ms, err2 := strconv.ParseInt(acq, 10, 64)
	if err1 != nil || err2 != nil {
		return lock.Grant{}, &lock.Error{Code: lock.CodeInternal, Detail: "internal error",
			Err: fmt.Errorf("store: acquire reply %q is not a token and a time", reply)}
	}
	at := time.UnixMilli(ms).UTC()
	var md map[string]string
	if len(req.Metadata) > 0 {
		md = maps.Clone(req.Metadata)
	}
	return lock.Grant{
		Lease: lock.Lease{
			Lock: req.Lock, Mode: lock.Exclusive, ID: requestID, Owner: req.Owner, Principal: req.Principal,
			Token: token, HoldCount: 1, TTL: req.TTL, AcquiredAt: at, ExpiresAt: at.Add(req.TTL),
			Metadata: md,
		},
		Fresh:     true,
		RequestID: requestID,
	}, nil
}

// unconfirmed is the error of a write that fewer than n replicas confirmed.
func unconfirmed(what string, got, n int, then string) error {
	return &lock.Error{Code: lock.CodeUnavailable,
		Detail: fmt.Sprintf("replication did not confirm the %s: %d of %d replicas acknowledged it in time; %s", what, got, n, then)}
}

// write runs a script that changes a lock. With n > 0 it also waits for n
// replicas to have the change: the script and WAIT go on one connection to
// the lock's master, in one round trip, since WAIT counts the replicas that
// have every write its own connection made. That bypasses the batcher, whose
// pipelines mix callers. confirmed is how many replicas acknowledged in time
// (0 when n is 0).
func (s *Store) write(ctx context.Context, name string, script *script, keys []string, n int, args ...any) (cmd *goredis.Cmd, confirmed int) {
	if n <= 0 {
		return s.run(ctx, name, script, keys, args...), 0
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	var master goredis.Cmdable = s.rdb
	if s.cluster != nil {
		c, err := s.cluster.MasterForKey(ctx, keys[0])
		if err != nil {
			s.noteFailure(err)
			cmd = goredis.NewCmd(ctx)
			cmd.SetErr(err)
			return cmd, 0
		}
		master = c
	}
	// WAIT may use half of the call's time; the rest is for the round trip.
	// FCALL, or EVAL, not EVALSHA: a NOSCRIPT (a master new since a
	// failover) would cost a second WAIT, and this path pays a replica's
	// round trip anyway. A Redis without the library (or without
	// Functions) refused the FCALL without running it: it is sent again.
	var wait *goredis.Cmd
	for range 3 {
		pipe := master.Pipeline()
		cmd = script.evalNow(ctx, pipe, keys, args)
		wait = pipe.Do(ctx, "wait", n, (s.callTimeout / 2).Milliseconds())
		_, _ = pipe.Exec(ctx)
		load, again := script.lib.noted(cmd.Err())
		if load {
			if err := script.lib.load(ctx, s.rdb); err != nil {
				cmd.SetErr(err)
				break
			}
		}
		if !again {
			break
		}
	}
	s.noteFailure(cmd.Err())
	if s.observe != nil {
		s.observe(name, time.Since(start))
	}
	acked, err := wait.Int64()
	if err != nil {
		return cmd, 0
	}
	return cmd, int(acked)
}

// abandonMemory is how long Redis remembers an abandoned request id, so that
// the acquire, if it is still on its way, grants nothing when it arrives.
const abandonMemory = 10 * time.Minute

// Abandon implements lock.Store. A call whose outcome is unknown is handed
// to the reaper, which repeats it until Redis answers.
func (s *Store) Abandon(ctx context.Context, name, requestID string) error {
	_, err := s.abandon(ctx, name, requestID)
	if outcomeUnknown(err) {
		s.ghosts.add(name, requestID)
	}
	if err != nil {
		return storeError(err)
	}
	return nil
}

func (s *Store) abandon(ctx context.Context, name, requestID string) (int64, error) {
	ev, evlog, err := s.eventsOf(ctx, name)
	if err != nil {
		return 0, err
	}
	n, err := s.run(ctx, "abandon", s.scripts.abandon, s.keys(name),
		requestID, s.channel(name), abandonMemory.Milliseconds(), s.publish, ev).Int64()
	if n > 0 {
		evlog.recorded()
	}
	return n, err
}

// Renew implements lock.Store.
func (s *Store) Renew(ctx context.Context, ref lock.LeaseRef, ttl time.Duration) (lock.Lease, error) {
	name := ref.Lock
	ev, evlog, err := s.eventsOf(ctx, name)
	if err != nil {
		return lock.Lease{}, storeError(err)
	}
	cmd, confirmed := s.write(ctx, "renew", s.scripts.renew, s.keys(name), s.minReplicas, ref.ID, ttl.Milliseconds(), s.channel(name), ref.Principal, s.publish, ev)
	res, err := cmd.Slice()
	if err != nil {
		return lock.Lease{}, storeError(err)
	}
	r := reply(res)
	switch r.int(0) {
	case 0:
		return lock.Lease{}, lock.LeaseLost(name, ref.ID)
	case -1:
		return lock.Lease{}, lock.NotYourLease(name, ref.ID)
	}
	evlog.recorded()
	lease := r.lease(name, 1)
	lease.Mode, lease.Limit = lock.Mode(r.str(10)), int(r.int(11))
	if r.err == nil && confirmed < s.minReplicas {
		return lock.Lease{}, unconfirmed("renewal", confirmed, s.minReplicas,
			"if Redis fails over now the lease may end at its earlier expiry: renew again")
	}
	return lease, r.err
}

// Release implements lock.Store.
func (s *Store) Release(ctx context.Context, ref lock.LeaseRef, all bool) (lock.ReleaseResult, error) {
	name := ref.Lock
	allArg := "0"
	if all {
		allArg = "1"
	}
	out := lock.ReleaseResult{Lock: name, LeaseID: ref.ID}
	ev, evlog, err := s.eventsOf(ctx, name)
	if err != nil {
		return out, storeError(err)
	}
	// The fast script ends the last hold of an exclusive lease; anything
	// else it leaves to the full one.
	cmd, confirmed := s.write(ctx, "release", s.scripts.releaseFast, s.releaseKeys(name), s.minReplicas, ref.ID, ref.Principal, s.channel(name), s.publish, ev)
	if fellBack(cmd) {
		cmd, confirmed = s.write(ctx, "release", s.scripts.release, s.keys(name), s.minReplicas, ref.ID, allArg, s.channel(name), ref.Principal, s.publish, ev)
	}
	if n, err := cmd.Int64(); err == nil && n == 1 {
		// The fast script ended the lease.
		out.Released = true
		evlog.recorded()
		return out, s.confirmRelease(confirmed)
	}
	res, err := cmd.Slice()
	if err != nil {
		return out, storeError(err)
	}
	r := reply(res)
	switch r.int(0) {
	case 0:
		return out, lock.LeaseLost(name, ref.ID)
	case -1:
		return out, lock.NotYourLease(name, ref.ID)
	}
	out.HoldCount = int(r.int(1))
	out.Released = r.int(2) == 1
	out.Retried = r.int(3) == 1
	if !out.Retried {
		evlog.recorded()
	}
	if r.err != nil {
		return out, r.err
	}
	return out, s.confirmRelease(confirmed)
}

// confirmRelease is the error of a release that fewer replicas confirmed
// than the store asks for.
func (s *Store) confirmRelease(confirmed int) error {
	if confirmed < s.minReplicas {
		return unconfirmed("release", confirmed, s.minReplicas,
			"it took effect on the master, but a failover now could undo it: release again (a repeat is safe)")
	}
	return nil
}

// Inspect implements lock.Store.
func (s *Store) Inspect(ctx context.Context, name string) (lock.State, error) {
	res, err := s.run(ctx, "inspect", s.scripts.inspect, s.keys(name)).Slice()
	if err != nil {
		return lock.State{}, storeError(err)
	}
	return stateOf(name, reply(res))
}

func stateOf(name string, r *replyReader) (lock.State, error) {
	st := lock.State{Lock: name, LastToken: r.uint(8), Limit: int(r.int(11)), Queue: int(r.int(12))}
	if r.str(0) != "" {
		st.Holder = &lock.Holder{
			Mode:       lock.Exclusive,
			Owner:      r.str(1),
			Principal:  r.str(2),
			Token:      r.uint(3),
			HoldCount:  int(r.int(4)),
			AcquiredAt: r.millis(5),
			ExpiresAt:  r.millis(6),
			ExpiresIn:  time.Duration(max(r.int(10), 0)) * time.Millisecond,
			Metadata:   r.metadata(7),
		}
		st.Holders = append(st.Holders, *st.Holder)
	}
	now := r.int(13)
	for i := 14; i < len(r.v); i++ {
		h, err := sharedHolder(r.str(i), now, st.Limit)
		if err != nil {
			return lock.State{}, err
		}
		st.Holders = append(st.Holders, h)
	}
	sort.Slice(st.Holders, func(i, j int) bool { return st.Holders[i].Token < st.Holders[j].Token })
	switch {
	case st.Holder != nil:
		st.Kind = lock.KindExclusive
	case len(st.Holders) > 0 && st.Limit > 0:
		st.Kind = lock.KindSemaphore
	case len(st.Holders) > 0:
		st.Kind = lock.KindShared
	}
	if st.Kind != lock.KindSemaphore {
		st.Limit = 0
	}
	st.Held = st.Kind != ""
	st.Index = lock.ComputeIndex(r.uint(9), st)
	return st, r.err
}

// record is a shared lease or permit as lib.lua keeps it; numbers are
// strings so that none loses precision on the way.
type record struct {
	Owner     string `json:"owner"`
	Principal string `json:"principal"`
	Token     string `json:"token"`
	Count     string `json:"count"`
	Acq       string `json:"acq"`
	Exp       string `json:"exp"`
	Meta      string `json:"meta"`
}

// sharedHolder reads a record that inspect.lua returned; now is Redis's
// clock then, which times the expiry whatever the skew with ours.
func sharedHolder(raw string, now int64, limit int) (lock.Holder, error) {
	var rec record
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return lock.Holder{}, lock.AsError(fmt.Errorf("store: bad shared lease record: %w", err))
	}
	num := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	h := lock.Holder{
		Mode:       lock.Shared,
		Owner:      rec.Owner,
		Principal:  rec.Principal,
		Token:      uint64(num(rec.Token)),
		HoldCount:  int(num(rec.Count)),
		AcquiredAt: time.UnixMilli(num(rec.Acq)).UTC(),
		ExpiresAt:  time.UnixMilli(num(rec.Exp)).UTC(),
		ExpiresIn:  time.Duration(max(num(rec.Exp)-now, 0)) * time.Millisecond,
	}
	if limit > 0 {
		h.Mode = lock.Exclusive
	}
	if rec.Meta != "" && rec.Meta != "{}" {
		if err := json.Unmarshal([]byte(rec.Meta), &h.Metadata); err != nil {
			return lock.Holder{}, lock.AsError(fmt.Errorf("store: bad shared lease metadata: %w", err))
		}
	}
	return h, nil
}

// ForceRelease implements lock.Store.
func (s *Store) ForceRelease(ctx context.Context, name, principal string) (bool, error) {
	ev, evlog, err := s.eventsOf(ctx, name)
	if err != nil {
		return false, storeError(err)
	}
	n, err := s.run(ctx, "force_release", s.scripts.forceRelease, s.keys(name), s.channel(name), s.publish, principal, ev).Int()
	if err != nil {
		return false, storeError(err)
	}
	if n == 1 {
		evlog.recorded()
	}
	return n == 1, nil
}

// List implements lock.Store with SCAN: a page holds the held locks of as
// many SCAN batches as it takes to reach Limit, so it may hold a few more
// than Limit, and a lock that is acquired or released during the listing may
// or may not appear. On Redis Cluster it walks every master in turn, in the
// order of the slots they serve; the cursor names the shard (by its first
// slot) and the cursor within it.
func (s *Store) List(ctx context.Context, req lock.ListRequest) (lock.ListPage, error) {
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	limit := req.Limit
	if limit <= 0 {
		limit = 100
	}
	shards, err := s.shards(ctx)
	if err != nil {
		s.noteFailure(err)
		return lock.ListPage{}, storeError(err)
	}
	shard, cursor, err := parseListCursor(req.Cursor, shards)
	if err != nil {
		return lock.ListPage{}, err
	}
	// The exclusive lease ({name}:lock) or the shared leases and permits
	// ({name}:lock:shared, beside {name}:lock:expiry) exist while a name is
	// held. A name held both ways (a downgrade) may show up on two pages.
	match := s.prefix + "{" + req.Prefix + "*}:lock*"
	var names []string
	seen := make(map[string]bool)
	for shard < len(shards) {
		keys, next, err := shards[shard].client.Scan(ctx, cursor, match, int64(max(limit, 100))).Result()
		if err != nil {
			s.noteFailure(err)
			return lock.ListPage{}, storeError(err)
		}
		for _, k := range keys {
			name, kind, _ := strings.Cut(strings.TrimPrefix(k, s.prefix+"{"), "}:")
			if (kind == "lock" || kind == "lock:shared") && lock.ValidName(name) && !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
		cursor = next
		if cursor == 0 {
			shard++
		}
		if len(names) >= limit {
			break
		}
	}

	page := lock.ListPage{Locks: make([]lock.State, 0, len(names))}
	if shard < len(shards) {
		page.NextCursor = formatListCursor(shards, shard, cursor)
	}
	calls := make([]*scriptCall, len(names))
	for i, name := range names {
		calls[i] = &scriptCall{script: s.scripts.inspect, keys: s.keys(name)}
	}
	if len(calls) > 0 {
		runPipelined(ctx, s.rdb, calls)
	}
	for i, name := range names {
		res, err := calls[i].cmd.Slice()
		if err != nil {
			s.noteFailure(err)
			return lock.ListPage{}, storeError(err)
		}
		st, err := stateOf(name, reply(res))
		if err != nil {
			return lock.ListPage{}, err
		}
		if st.Held { // it may have been released or expired since SCAN
			page.Locks = append(page.Locks, st)
		}
	}
	return page, nil
}

// shard is one master to SCAN, named by the first slot it serves (0 outside
// a cluster).
type shard struct {
	firstSlot int
	client    goredis.Cmdable
}

// shards returns the masters to list, in slot order.
func (s *Store) shards(ctx context.Context) ([]shard, error) {
	if s.cluster == nil {
		return []shard{{client: s.rdb}}, nil
	}
	slots, err := s.cluster.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	first := map[string]int{} // master address -> its lowest slot
	for _, r := range slots {
		if len(r.Nodes) == 0 {
			continue
		}
		if f, ok := first[r.Nodes[0].Addr]; !ok || r.Start < f {
			first[r.Nodes[0].Addr] = r.Start
		}
	}
	var mu sync.Mutex
	var out []shard
	err = s.cluster.ForEachMaster(ctx, func(_ context.Context, c *goredis.Client) error {
		f, ok := first[c.Options().Addr]
		if !ok {
			return nil // serves no slot (yet)
		}
		mu.Lock()
		defer mu.Unlock()
		out = append(out, shard{firstSlot: f, client: c})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) != len(first) {
		return nil, errors.New("store: the client's view of the cluster's masters differs from CLUSTER SLOTS; try again")
	}
	slices.SortFunc(out, func(a, b shard) int { return a.firstSlot - b.firstSlot })
	return out, nil
}

// formatListCursor encodes where the next page starts: "<first slot of the
// shard>-<SCAN cursor>" in a cluster, the plain SCAN cursor otherwise.
func formatListCursor(shards []shard, i int, cursor uint64) string {
	c := strconv.FormatUint(cursor, 10)
	if len(shards) == 1 && shards[0].firstSlot == 0 {
		return c
	}
	return strconv.Itoa(shards[i].firstSlot) + "-" + c
}

// parseListCursor inverts formatListCursor. A shard that no longer starts at
// the cursor's slot (the cluster was resharded) resumes at the shard serving
// that slot now.
func parseListCursor(raw string, shards []shard) (int, uint64, error) {
	bad := lock.Invalid(lock.FieldError{Field: "cursor", Detail: "not a cursor returned by this server"})
	if raw == "" {
		return 0, 0, nil
	}
	slotPart, cursorPart, cut := strings.Cut(raw, "-")
	if !cut {
		slotPart, cursorPart = "0", raw
	}
	slot, err1 := strconv.Atoi(slotPart)
	cursor, err2 := strconv.ParseUint(cursorPart, 10, 64)
	if err1 != nil || err2 != nil || slot < 0 || slot > 16383 {
		return 0, 0, bad
	}
	i := 0
	for i+1 < len(shards) && shards[i+1].firstSlot <= slot {
		i++
	}
	if cursor == 0 && !cut {
		return 0, 0, bad // a plain SCAN cursor is never 0 mid-listing
	}
	return i, cursor, nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// Watch implements lock.Store: it returns once this process's pub/sub
// connection is subscribed to the lock's channel.
func (s *Store) Watch(ctx context.Context, name string, kind lock.WatchKind) (lock.Watcher, error) {
	w, err := s.hub.Watch(ctx, name, kind)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, lock.Unavailable(err)
	}
	return w, nil
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
	if s.log != nil && s.log.sweep != nil {
		s.log.sweep.close()
	}
	if s.clusterLogs != nil {
		s.clusterLogs.close()
	}
	if s.batch != nil {
		s.batch.close()
	}
	err := s.listener.close()
	s.ghosts.close()
	if s.blocking != nil {
		s.blocking.close()
	}
	s.blockingMu.Lock()
	for _, b := range s.nodeBlocking {
		b.close()
	}
	s.blockingMu.Unlock()
	return err
}

// Reconnects counts how often a pub/sub connection failed and was redialled.
func (s *Store) Reconnects() int64 { return s.listener.stats().reconnects }

// MasterSwitches counts how often the pub/sub connection moved to a new
// Sentinel master.
func (s *Store) MasterSwitches() int64 { return s.listener.stats().masterSwitches }

// Ghosts returns how many acquires with an unknown outcome were abandoned,
// and how many wait to be.
func (s *Store) Ghosts() (abandoned, pending int64) { return s.ghosts.stats() }

// WatcherCount returns the number of registered waiters and watchers.
func (s *Store) WatcherCount() int { return s.hub.Len() }

// storeError classifies a go-redis error. Connection trouble and Redis states
// that pass (loading, failover, cluster down) are "unavailable"; a client that
// went away keeps its context error; anything else is a bug.
func storeError(err error) error {
	if errors.Is(err, context.Canceled) {
		return err
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

// Leave implements lock.Store.
func (s *Store) Leave(ctx context.Context, name, waiterID string) error {
	if err := s.run(ctx, "leave", s.scripts.leave, s.keys(name), waiterID, s.channel(name), s.publish).Err(); err != nil {
		return storeError(err)
	}
	return nil
}
