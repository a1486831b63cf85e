package redis

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
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

// keyspace names a lock's Redis keys and channel. Every name carries the hash
// tag {name}, so that one lock's keys share a Redis Cluster slot.
type keyspace struct{ prefix string }

func (k keyspace) lockKey(name string) string      { return k.prefix + "{" + name + "}:lock" }
func (k keyspace) fenceKey(name string) string     { return k.prefix + "{" + name + "}:fence" }
func (k keyspace) abandonedKey(name string) string { return k.prefix + "{" + name + "}:abandoned" }
func (k keyspace) channel(name string) string      { return k.prefix + "{" + name + "}:unlock" }

// Shared leases and permits, and the queue; see scripts/lib.lua.
func (k keyspace) sharedKey(name string) string   { return k.prefix + "{" + name + "}:lock:shared" }
func (k keyspace) expiryKey(name string) string   { return k.prefix + "{" + name + "}:lock:expiry" }
func (k keyspace) queueKey(name string) string    { return k.prefix + "{" + name + "}:queue" }
func (k keyspace) deadlineKey(name string) string { return k.prefix + "{" + name + "}:queue:deadline" }

// The event log and its lease expiries: one of each per Redis (no hash
// tag), used outside Redis Cluster only; see scripts/lib.lua. The expiries
// key's name is also the channel where an earliest expiry is announced.
func (k keyspace) eventsKey() string   { return k.prefix + "events" }
func (k keyspace) expiriesKey() string { return k.prefix + "events:expiries" }

// nameOfChannel inverts channel; ok is false for foreign channels.
func (k keyspace) nameOfChannel(ch string) (string, bool) {
	rest, ok := strings.CutPrefix(ch, k.prefix+"{")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "}:unlock")
}

// releaseSecretKey names the key, under the store's prefix, that holds the
// secret signing release URLs when none is configured. It has no hash tag:
// one key per Redis, and on Cluster any slot will do.
const releaseSecretKey = "release-secret"

// ReleaseSecretKey returns the key of the shared release-URL secret under
// prefix ("" is DefaultPrefix); auth.SharedReleaseSecret keeps it.
func ReleaseSecretKey(prefix string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return prefix + releaseSecretKey
}

// scriptKeys names the keys the scripts of a lock take: the lock's own,
// and the event log's while events are recorded outside Redis Cluster.
type scriptKeys struct {
	keyspace
	log *eventLog // a single Redis's event log; nil on a cluster or without events
}

// keys lists the keys every full script takes, in the order lib.lua names
// them: the event log and the expiries set only while events are recorded
// outside Redis Cluster.
func (k scriptKeys) keys(name string) []string {
	return k.withLog(k.lockKey(name), k.fenceKey(name), k.abandonedKey(name),
		k.sharedKey(name), k.expiryKey(name), k.queueKey(name), k.deadlineKey(name))
}

// acquireKeys and releaseKeys list the keys of the fast scripts
// (acquire_fast.lua, release_fast.lua).
func (k scriptKeys) acquireKeys(name string) []string {
	return k.withLog(k.lockKey(name), k.fenceKey(name), k.abandonedKey(name), k.expiryKey(name), k.queueKey(name))
}

func (k scriptKeys) releaseKeys(name string) []string {
	return k.withLog(k.lockKey(name), k.fenceKey(name), k.queueKey(name))
}

// withLog adds the event log and the expiries set to a script's keys while
// events are recorded outside Redis Cluster.
func (k scriptKeys) withLog(keys ...string) []string {
	if k.log != nil {
		keys = append(keys, k.log.key, k.log.exp)
	}
	return keys
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
	if req.Session != "" && s.sessions == nil {
		return lock.Grant{}, errNoSessions
	}
	meta := ""
	if len(req.Metadata) > 0 {
		b, err := json.Marshal(req.Metadata)
		if err != nil {
			return lock.Grant{}, lock.AsError(err)
		}
		meta = string(b)
	}
	rec, err := s.journal.recordingFor(ctx, req.Lock)
	if err != nil {
		return lock.Grant{}, storeError(err)
	}
	if req.Session != "" && s.sessions.shadows != nil {
		// On Redis Cluster the name's master must hold a shadow of the
		// session first (clustersessions.go).
		if err := s.sessions.join(ctx, req.Session, req.Principal, rec); err != nil {
			return lock.Grant{}, err
		}
	}
	cmd, confirmed := s.acquire(ctx, req, requestID, meta, rec)
	if fresh, ok := cmd.Val().(string); ok && cmd.Err() == nil {
		// A fresh exclusive lease: "<token> <acquired ms>".
		g, err := freshGrant(req, requestID, fresh)
		if err == nil {
			rec.recorded()
		}
		return s.confirmGrant(ctx, req, g, confirmed, err)
	}
	res, err := cmd.Slice()
	if err != nil {
		if outcomeUnknown(err) {
			// It may have granted a lease that nobody will ever know of.
			s.reaper.add(req.Lock, requestID)
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
	case -4:
		return lock.Grant{}, lock.LockDelayed(req.Lock, time.Duration(r.int(1))*time.Millisecond)
	case -5:
		return lock.Grant{}, lock.SessionNotFound(req.Session)
	case -6:
		return lock.Grant{}, lock.SessionLost(req.Session)
	}
	lease := r.lease(req.Lock, 2)
	lease.Mode, lease.Limit, lease.Session = lock.Mode(r.str(13)), int(r.int(14)), r.str(15)
	g := lock.Grant{Lease: lease, Fresh: r.int(1) == 1, RequestID: r.str(11), Replayed: r.int(12) == 1}
	if !g.Replayed {
		rec.recorded()
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
// exclusive try that has not waited (see acquire_fast.lua), and the full one when the request
// is anything else or the fast script leaves it to the full one.
func (s *Store) acquire(ctx context.Context, req lock.AcquireRequest, requestID, meta string, rec *recording) (*goredis.Cmd, int) {
	if req.Mode != lock.Shared && req.Limit == 0 && !req.Fair && req.WaiterID == "" && req.IdempotencyKey == "" && req.Session == "" && req.Waited == 0 {
		cmd, confirmed := s.write(ctx, "acquire", s.scripts.acquireFast, s.acquireKeys(req.Lock), req.MinReplicas, rec,
			requestID, req.Owner, req.Principal, req.TTL.Milliseconds(), meta, s.channel(req.Lock), s.publish)
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
	return s.write(ctx, "acquire", s.scripts.acquire, s.keys(req.Lock), req.MinReplicas, rec,
		requestID, req.Owner, req.Principal, req.TTL.Milliseconds(), meta, s.channel(req.Lock), req.IdempotencyKey, s.publish,
		mode, req.Limit, fair, req.WaiterID, req.Session, req.Waited.Milliseconds())
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

// Abandon implements lock.Store. A call whose outcome is unknown is handed
// to the reaper, which repeats it until Redis answers.
func (s *Store) Abandon(ctx context.Context, name, requestID string) error {
	_, err := s.reaper.abandon(ctx, name, requestID)
	if outcomeUnknown(err) {
		s.reaper.add(name, requestID)
	}
	if err != nil {
		return storeError(err)
	}
	return nil
}

// Renew implements lock.Store.
func (s *Store) Renew(ctx context.Context, ref lock.LeaseRef, ttl time.Duration) (lock.Lease, error) {
	name := ref.Lock
	rec, err := s.journal.recordingFor(ctx, name)
	if err != nil {
		return lock.Lease{}, storeError(err)
	}
	cmd, confirmed := s.write(ctx, "renew", s.scripts.renew, s.keys(name), s.minReplicas, rec, ref.ID, ttl.Milliseconds(), s.channel(name), ref.Principal, s.publish)
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
	rec.recorded()
	lease := r.lease(name, 1)
	lease.Mode, lease.Limit, lease.Session = lock.Mode(r.str(10)), int(r.int(11)), r.str(12)
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
	rec, err := s.journal.recordingFor(ctx, name)
	if err != nil {
		return out, storeError(err)
	}
	// The fast script ends the last hold of an exclusive lease; anything
	// else it leaves to the full one.
	cmd, confirmed := s.write(ctx, "release", s.scripts.releaseFast, s.releaseKeys(name), s.minReplicas, rec, ref.ID, ref.Principal, s.channel(name), s.publish)
	if fellBack(cmd) {
		cmd, confirmed = s.write(ctx, "release", s.scripts.release, s.keys(name), s.minReplicas, rec, ref.ID, allArg, s.channel(name), ref.Principal, s.publish)
	}
	if n, err := cmd.Int64(); err == nil && n == 1 {
		// The fast script ended the lease.
		out.Released = true
		rec.recorded()
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
		rec.recorded()
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
	rec, err := s.inspectRecording(ctx, name)
	if err != nil {
		return lock.State{}, storeError(err)
	}
	res, err := s.run(ctx, "inspect", s.scripts.inspect, s.keys(name), rec).Slice()
	if err != nil {
		return lock.State{}, storeError(err)
	}
	st, err := stateOf(name, reply(res))
	if _, ok := unknownLeaseLayout(err); ok {
		s.noteLayout(err, s.sharedKey(name))
		return lock.State{}, errLeaseLayout
	}
	return st, err
}

// inspectRecording is inspect.lua's events argument: on Redis Cluster the
// name's log, beside which its master keeps the sessions' shadows; none
// elsewhere.
func (s *Store) inspectRecording(ctx context.Context, name string) (*recording, error) {
	if !s.journal.clustered() {
		return nil, nil
	}
	return s.journal.recordingFor(ctx, name)
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
			Session:    r.str(14),
		}
		st.Holders = append(st.Holders, *st.Holder)
	}
	now := r.int(13)
	st.LockDelay = time.Duration(max(r.int(15), 0)) * time.Millisecond
	for i := 16; i < len(r.v); i++ {
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
	Sess      string `json:"sess"`
	V         any    `json:"v"` // its layout (leaselayout.go)
}

// sharedHolder reads a record that inspect.lua returned; now is Redis's
// clock then, which times the expiry whatever the skew with ours.
func sharedHolder(raw string, now int64, limit int) (lock.Holder, error) {
	var rec record
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return lock.Holder{}, lock.AsError(fmt.Errorf("store: bad shared lease record: %w", err))
	}
	if v := fmt.Sprint(rec.V); rec.V != nil && v != layout.LeasesV1 {
		return lock.Holder{}, leaseLayout(v)
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
		Session:    rec.Sess,
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
	rec, err := s.journal.recordingFor(ctx, name)
	if err != nil {
		return false, storeError(err)
	}
	n, err := s.run(ctx, "force_release", s.scripts.forceRelease, s.keys(name), rec, s.channel(name), s.publish, principal).Int()
	if err != nil {
		return false, storeError(err)
	}
	if n == 1 {
		rec.recorded()
	}
	return n == 1, nil
}

// listBatches is how many SCAN batches one page of List walks at most
// (Store.listBatches overrides it in tests).
const listBatches = 32

// List implements lock.Store with SCAN: a page holds the held (or closed)
// locks of as many SCAN batches as it takes to reach Limit, so it may hold a few more
// than Limit, and a lock that is acquired or released during the listing may
// or may not appear. A page walks at most listBatches batches: then it ends
// with what it found and the cursor where it stopped, so a page may be short
// or empty while it has a next cursor (for a caller whose Visible passes over
// most names, or a prefix few keys match). On Redis Cluster it walks every
// master in turn, in the order of the slots they serve; the cursor names the
// shard (by its first slot) and the cursor within it.
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
	names, shard, cursor, err := s.scanNames(ctx, req, limit, shards, shard, cursor)
	if err != nil {
		return lock.ListPage{}, err
	}
	page := lock.ListPage{Locks: make([]lock.State, 0, len(names))}
	if shard < len(shards) {
		page.NextCursor = formatListCursor(shards, shard, cursor)
	}
	calls := make([]*scriptCall, len(names))
	for i, name := range names {
		rec, err := s.inspectRecording(ctx, name)
		if err != nil {
			return lock.ListPage{}, storeError(err)
		}
		calls[i] = &scriptCall{script: s.scripts.inspect, keys: s.keys(name), args: rec.append(nil)}
	}
	if len(calls) > 0 {
		runPipelined(ctx, s.rdb, calls)
	}
	for i, name := range names {
		res, err := calls[i].cmd.Slice()
		_, newer := unknownLeaseLayout(err)
		if err != nil && !newer {
			s.noteFailure(err)
			return lock.ListPage{}, storeError(err)
		}
		var st lock.State
		if err == nil {
			st, err = stateOf(name, reply(res))
			_, newer = unknownLeaseLayout(err)
		}
		if newer {
			// A newer instance's lock: told, and left out, as a listing
			// of webhooks leaves out theirs (docs/UPGRADING.md).
			s.noteLayout(err, s.lockKey(name))
			continue
		}
		if err != nil {
			return lock.ListPage{}, err
		}
		if st.Held || st.LockDelay > 0 { // it may have been released or expired since SCAN
			page.Locks = append(page.Locks, st)
		}
	}
	return page, nil
}

// scanNames walks shards from (shard, cursor) and returns the names of
// held or closed locks it found that req shows, and where it stopped: once it has
// limit names, or has run its budget of SCAN batches, or at the end.
//
// Where it stops tells nothing of the names req does not show: the MATCH
// pattern is made of req.Prefix alone, never of Visible, and SCAN's cursor
// moves by COUNT (made of limit alone) over the keyspace whatever MATCH
// keeps. So a page stops on its budget, after the same batches and on the
// same cursor, whether the names it walked were hidden or did not match;
// only the names it shows (which the caller sees anyway) can stop it
// sooner.
func (s *Store) scanNames(ctx context.Context, req lock.ListRequest, limit int, shards []shard, shard int, cursor uint64) ([]string, int, uint64, error) {
	// The exclusive lease ({name}:lock) or the shared leases and permits
	// ({name}:lock:shared, beside {name}:lock:expiry) exist while a name is
	// held, {name}:delay while it is closed for a lock-delay; the pattern
	// keeps these and drops the rest of a name's keys. A name found by two
	// of them (held both ways, a downgrade) may show up on two pages.
	match := s.prefix + "{" + req.Prefix + "*}:[ld][oe]*"
	budget := s.listBatches
	if budget <= 0 {
		budget = listBatches
	}
	var names []string
	seen := make(map[string]bool)
	for batch := 0; shard < len(shards) && batch < budget && len(names) < limit; batch++ {
		keys, next, err := shards[shard].client.Scan(ctx, cursor, match, int64(max(limit, 100))).Result()
		if err != nil {
			s.noteFailure(err)
			return nil, 0, 0, storeError(err)
		}
		for _, k := range keys {
			name, kind, _ := strings.Cut(strings.TrimPrefix(k, s.prefix+"{"), "}:")
			if (kind == "lock" || kind == "lock:shared" || kind == "delay") && lock.ValidName(name) && !seen[name] && req.Shows(name) {
				seen[name] = true
				names = append(names, name)
			}
		}
		cursor = next
		if cursor == 0 {
			shard++
		}
	}
	return names, shard, cursor, nil
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

// Leave implements lock.Store.
func (s *Store) Leave(ctx context.Context, name, waiterID string) error {
	if err := s.run(ctx, "leave", s.scripts.leave, s.keys(name), nil, waiterID, s.channel(name), s.publish).Err(); err != nil {
		return storeError(err)
	}
	return nil
}
