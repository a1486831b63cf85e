package redis

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/layout"
	"github.com/lockapi/lockapi/internal/lock"
)

// Sessions implements lock.Store: a single Redis, a Sentinel master and a
// Redis Cluster recording events keep sessions (docs/SESSIONS.md, "Storage
// on Redis"); a Cluster without events does not, nor does a store opened as
// a redlock master (Options.NoSessions), and both refuse an acquire that
// names one.
func (s *Store) Sessions() lock.Sessions {
	if s.sessions == nil {
		return nil
	}
	return s.sessions
}

// errSessionLayout answers a session stored in a layout this version
// does not know: a newer instance, which wrote it, reads it.
var errSessionLayout = &lock.Error{Code: lock.CodeUnavailable,
	Detail: "this session was stored by a newer lockapi, in a layout this instance does not know: a newer instance reads it (docs/UPGRADING.md)"}

var errNoSessions = lock.Unsupported("this store keeps no sessions: on Redis Cluster they need the event log (LOCKAPI_EVENTS), and a redlock master has none (docs/SESSIONS.md)")

// Session keys; see the session scripts' keys in scripts/lib.lua. A
// session's own keys are tagged with its id; the expiries set is one per
// Redis.
func (k keyspace) sessionKey(id string) string       { return k.prefix + "{s:" + id + "}:session" }
func (k keyspace) sessionLeasesKey(id string) string { return k.prefix + "{s:" + id + "}:leases" }
func (k keyspace) sessionExpiriesKey() string        { return k.prefix + "sessions:expiries" }

// sessionKeys lists the keys of the session scripts.
func (k scriptKeys) sessionKeys(id string) []string {
	return k.withLog(k.sessionKey(id), k.sessionLeasesKey(id), k.sessionExpiriesKey())
}

// sessions is the store's lock.Sessions, and its sweeper: every instance
// ends due sessions, whichever made them, so that a session outlives the
// instance that made it, events on or off.
//
// The sweeper sends Redis nothing while nothing is due. It sleeps until the
// earliest expiry it knows of; a script that puts a session into the
// expiries set earlier than every other announces it on the channel of the
// set's name, so every instance learns of it. A renewal moves nothing (see
// session_renew.lua): the sweeper that finds a renewed session due moves it
// to its real expiry. Whenever announcements may have been lost (a new
// pub/sub connection, a Sentinel master switch) it looks at the set again.
type sessions struct {
	s *Store
	// shadows are the event logs beside which a Redis Cluster's masters
	// keep the sessions' shadows (clustersessions.go); nil elsewhere,
	// where the sweeper below runs.
	shadows *clusterLogs

	poke    chan struct{}
	done    chan struct{}
	stopped chan struct{}
	once    sync.Once

	mu        sync.Mutex
	announced int64 // the earliest ms announced since the last look; 0: none
	lookAgain bool  // announcements may have been lost
}

// Bounds of the sweeper's looks: at most one every sessionLookGap (a
// session Redis's clock finds alive a moment longer than ours is not
// looked at in a loop), and a failed look is tried again after a backoff.
const (
	sessionLookGap        = 20 * time.Millisecond
	sessionLookMaxBackoff = 2 * time.Second
)

// newSessions returns the sessions of s, whose sweeper hears announcements
// on l: called before l starts, which subscribes.
func newSessions(s *Store, l *classicListener) *sessions {
	ss := &sessions{s: s, poke: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{}), lookAgain: true}
	l.announce(s.sessionExpiriesKey(), ss.notice)
	go ss.sweep()
	return ss
}

func (ss *sessions) close() {
	ss.once.Do(func() { close(ss.done) })
	<-ss.stopped
}

// notice takes an announcement: an expiry in ms, or "" when announcements
// may have been lost.
func (ss *sessions) notice(payload string) {
	ss.mu.Lock()
	if ms, err := strconv.ParseInt(payload, 10, 64); err == nil && ms > 0 {
		if ss.announced == 0 || ms < ss.announced {
			ss.announced = ms
		}
	} else {
		ss.lookAgain = true
	}
	ss.mu.Unlock()
	select {
	case ss.poke <- struct{}{}:
	default:
	}
}

// CreateSession implements lock.Sessions.
func (ss *sessions) CreateSession(ctx context.Context, req lock.SessionRequest) (lock.Session, error) {
	id := ulid.Make().String()
	if req.Quota > 0 {
		if err := ss.claimSession(ctx, id, req); err != nil {
			return lock.Session{}, err
		}
	}
	res, confirmed, err := ss.write(ctx, "session_create", ss.s.scripts.sessionCreate, id,
		req.Owner, req.Principal, req.TTL.Milliseconds(), req.LockDelay.Milliseconds(), id)
	if err != nil {
		if req.Quota > 0 && lock.ErrorCode(err) != lock.CodeUnavailable {
			ss.unclaimSession(ctx, req.Principal, id)
		}
		return lock.Session{}, err
	}
	if err := ss.confirm("session", confirmed, "it ends by itself at its TTL; create another"); err != nil {
		return lock.Session{}, err
	}
	return sessionOf(id, res)
}

// RenewSession implements lock.Sessions: one script, whatever the session
// holds.
func (ss *sessions) RenewSession(ctx context.Context, ref lock.SessionRef, ttl time.Duration) (lock.Session, error) {
	res, confirmed, err := ss.write(ctx, "session_renew", ss.s.scripts.sessionRenew, ref.ID, ref.Principal, ttl.Milliseconds(), ref.ID)
	if err != nil {
		return lock.Session{}, err
	}
	var sess lock.Session
	if ss.shadows != nil {
		sess, err = ss.renewShadows(ctx, ref.ID, res)
	} else {
		sess, err = sessionOf(ref.ID, res)
	}
	if err == nil {
		err = ss.confirm("session renewal", confirmed,
			"if Redis fails over now the session and its leases may end at its earlier expiry: renew again")
	}
	if err != nil {
		return lock.Session{}, err
	}
	return sess, nil
}

// GetSession implements lock.Sessions.
func (ss *sessions) GetSession(ctx context.Context, ref lock.SessionRef) (lock.Session, error) {
	res, err := ss.call(ctx, "session_get", ss.s.scripts.sessionGet, ref.ID, ref.Principal)
	if err != nil {
		return lock.Session{}, err
	}
	if ss.shadows != nil {
		return ss.readShadows(ctx, ref.ID, res)
	}
	return sessionOf(ref.ID, res)
}

// EndSession implements lock.Sessions: it marks the session released, then
// releases its leases in chunks (session_sweep.lua). Should this instance
// die midway, any instance's sweeper finishes: the session is due at once.
func (ss *sessions) EndSession(ctx context.Context, ref lock.SessionRef) (lock.Session, error) {
	res, confirmed, err := ss.write(ctx, "session_end", ss.s.scripts.sessionEnd, ref.ID, ref.Principal, ref.ID)
	if err != nil {
		return lock.Session{}, err
	}
	var sess lock.Session
	if ss.shadows != nil {
		sess, err = ss.endShadows(ctx, ref.ID, res)
	} else if sess, err = sessionOf(ref.ID, res); err == nil {
		err = ss.finish(ctx, ref.ID)
	}
	if sess.ID != "" {
		ss.unclaimSession(ctx, sess.Principal, sess.ID)
		ss.announceEnd(ctx, sess.ID)
	}
	if err != nil {
		return sess, err
	}
	return sess, ss.confirm("session's end", confirmed,
		"it ended on the master; if Redis fails over now its leases may live on until its expiry: delete it again")
}

// announceEnd wakes the blocking queries of session id on every instance
// (lock.WaitSessionChange watches lock.SessionWatchName): one PUBLISH.
// Best effort: should it fail, they learn at the session's expiry or
// their wait's end.
func (ss *sessions) announceEnd(ctx context.Context, id string) {
	ch := ss.s.channel(lock.SessionWatchName(id))
	if ss.s.cluster != nil {
		_ = ss.s.rdb.SPublish(ctx, ch, "e").Err()
		return
	}
	_ = ss.s.rdb.Publish(ctx, ch, "e").Err()
}

// finish runs session_sweep.lua on a due session until none of its leases
// is left, or it turns out to live on.
func (ss *sessions) finish(ctx context.Context, id string) error {
	for range maxSessionChunks {
		left, err := ss.s.run(ctx, "session_sweep", ss.s.scripts.sessionSweep, ss.s.sessionKeys(id), ss.rec(), id).Int64()
		if err != nil {
			return storeError(err)
		}
		if left <= 0 {
			return nil
		}
	}
	return nil
}

// maxSessionChunks bounds one finish: 200 leases a chunk (SESSION_CHUNK in
// lib.lua), so a million leases; the sweeper goes on with any more.
const maxSessionChunks = 5000

// ListSessions implements lock.Sessions: it scans the session hashes.
func (ss *sessions) ListSessions(ctx context.Context, f lock.SessionFilter) ([]lock.Session, error) {
	var ids []string
	shards, err := ss.s.shards(ctx)
	if err != nil {
		return nil, storeError(err)
	}
	for _, sh := range shards {
		iter := sh.client.Scan(ctx, 0, ss.s.prefix+"{s:*}:session", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			id := strings.TrimSuffix(strings.TrimPrefix(k, ss.s.prefix+"{s:"), "}:session")
			if lock.ValidULID(id) {
				ids = append(ids, id)
			}
		}
		if err := iter.Err(); err != nil {
			return nil, storeError(err)
		}
	}
	slices.Sort(ids)
	var out []lock.Session
	for _, id := range ids {
		if f.Limit > 0 && len(out) >= f.Limit {
			break
		}
		sess, err := ss.GetSession(ctx, lock.SessionRef{ID: id, Principal: f.Principal})
		if e := lock.AsError(err); err != nil && (e.Code == lock.CodeSessionLost || e.Code == lock.CodeSessionNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if strings.HasPrefix(sess.Owner, f.OwnerPrefix) && f.Shows(sess) {
			out = append(out, sess)
		}
	}
	return out, nil
}

// call runs a session script that reads on session id's keys and reads
// its answer's status: -5 unknown (or another principal's), -6 ended.
func (ss *sessions) call(ctx context.Context, name string, sc *script, id string, args ...any) ([]any, error) {
	res, _, err := ss.exec(ctx, name, sc, id, 0, args...)
	return res, err
}

// write is call for a script that changes the session: like every write
// of a lock, it waits for the server's min_replicas (runner.write), and
// returns how many replicas confirmed it. A session's creation, renewal
// and end must survive a failover as a lease's grant, renewal and release
// do: a renewal acknowledged on the master alone, then lost with it,
// would end the session, and every lease bound to it, before the expiry
// its holder was told.
func (ss *sessions) write(ctx context.Context, name string, sc *script, id string, args ...any) ([]any, int, error) {
	return ss.exec(ctx, name, sc, id, ss.s.minReplicas, args...)
}

// confirm is the error of a session write that fewer than min_replicas
// replicas confirmed (then says what the caller should know), nil when
// enough did.
func (ss *sessions) confirm(what string, confirmed int, then string) error {
	if confirmed < ss.s.minReplicas {
		return unconfirmed(what, confirmed, ss.s.minReplicas, then)
	}
	return nil
}

func (ss *sessions) exec(ctx context.Context, name string, sc *script, id string, replicas int, args ...any) ([]any, int, error) {
	if !lock.ValidULID(id) {
		return nil, 0, lock.SessionNotFound(id)
	}
	cmd, confirmed := ss.s.write(ctx, name, sc, ss.keysOf(id), replicas, ss.rec(), args...)
	res, err := cmd.Slice()
	if err != nil {
		return nil, 0, storeError(err)
	}
	switch reply(res).int(0) {
	case -5:
		return nil, 0, lock.SessionNotFound(id)
	case -6:
		return nil, 0, lock.SessionLost(id)
	case -7:
		v := reply(res).str(1)
		if !layout.Plain(v) {
			v = "?"
		}
		ss.s.unknown.Tell(layout.Sessions, v, ss.keysOf(id)[0])
		return nil, 0, errSessionLayout
	}
	return res, confirmed, nil
}

// keysOf lists the keys of the session scripts on session id's record:
// on Redis Cluster, neither the sessions' expiries nor an event log.
func (ss *sessions) keysOf(id string) []string {
	if ss.shadows != nil {
		return []string{ss.s.sessionKey(id), ss.s.sessionLeasesKey(id)}
	}
	return ss.s.sessionKeys(id)
}

// rec is the session scripts' events argument: the log of a single Redis,
// or "c" on Redis Cluster (session_begin in scripts/lib.lua).
func (ss *sessions) rec() *recording {
	if ss.shadows != nil {
		return &recording{arg: "c"}
	}
	rec, _ := ss.s.journal.recordingFor(context.Background(), "")
	return rec
}

// sessionOf reads session_reply (scripts/lib.lua).
func sessionOf(id string, res []any) (lock.Session, error) {
	r := reply(res)
	sess := sessionHead(id, r)
	sess.Leases = sessionLeases(r, 6)
	sortLeases(sess.Leases)
	return sess, r.err
}

// sessionHead reads a session's fields, as session_answer (scripts/lib.lua)
// puts them first.
func sessionHead(id string, r *replyReader) lock.Session {
	return lock.Session{
		ID:        id,
		Owner:     r.str(1),
		Principal: r.str(2),
		TTL:       time.Duration(r.int(3)) * time.Millisecond,
		LockDelay: time.Duration(r.int(4)) * time.Millisecond,
		ExpiresAt: r.millis(5),
	}
}

// sessionLeases reads the leases a reply lists from index from on, each a
// field and a value of a session's leases hash (bind in scripts/lib.lua).
func sessionLeases(r *replyReader, from int) []lock.SessionLease {
	var leases []lock.SessionLease
	for i := from; i+1 < len(r.v); i += 2 {
		name, leaseID, _ := strings.Cut(r.str(i), "\n")
		parts := strings.SplitN(r.str(i+1), "\n", 3)
		if len(parts) != 3 {
			r.fail(i+1, "not a session lease")
			break
		}
		limit, _ := strconv.Atoi(parts[1])
		token, _ := strconv.ParseUint(parts[2], 10, 64)
		leases = append(leases, lock.SessionLease{Lock: name, LeaseID: leaseID, Mode: lock.Mode(parts[0]), Limit: limit, Token: token})
	}
	return leases
}

// sortLeases orders a session's leases by name, then id.
func sortLeases(leases []lock.SessionLease) {
	slices.SortFunc(leases, func(a, b lock.SessionLease) int {
		if c := strings.Compare(a.Lock, b.Lock); c != 0 {
			return c
		}
		return strings.Compare(a.LeaseID, b.LeaseID)
	})
}

// sweep ends due sessions (or moves on those that were renewed), sleeping
// until the earliest expiry it knows of.
func (ss *sessions) sweep() {
	defer close(ss.stopped)
	var next int64 // ms of the earliest expiry known; 0: none
	backoff := sessionLookGap
	for {
		ss.mu.Lock()
		if ss.announced != 0 && (next == 0 || ss.announced < next) {
			next = ss.announced
		}
		look := ss.lookAgain
		ss.announced, ss.lookAgain = 0, false
		ss.mu.Unlock()

		if look || (next != 0 && next <= time.Now().UnixMilli()) {
			first, err := ss.sweepDue()
			if err != nil {
				ss.mu.Lock()
				ss.lookAgain = true
				ss.mu.Unlock()
				backoff = min(2*backoff, sessionLookMaxBackoff)
			} else {
				next, backoff = first, sessionLookGap
			}
			select {
			case <-ss.done:
				return
			case <-time.After(backoff):
			}
			continue
		}
		var wake <-chan time.Time
		if next != 0 {
			wake = time.After(time.Until(time.UnixMilli(next)))
		}
		select {
		case <-ss.done:
			return
		case <-ss.poke:
		case <-wake:
		}
	}
}

// sweepDue runs session_sweep.lua on every session due by this instance's
// clock (the script decides by Redis's), and returns the earliest expiry
// left in the set (0: none).
func (ss *sessions) sweepDue() (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		now := strconv.FormatInt(time.Now().UnixMilli(), 10)
		due, err := ss.s.rdb.ZRangeByScore(ctx, ss.s.sessionExpiriesKey(), &goredis.ZRangeBy{Min: "-inf", Max: now, Count: sweepBatch}).Result()
		if err != nil {
			return 0, err
		}
		for _, id := range due {
			if err := ss.finish(ctx, id); err != nil {
				return 0, err
			}
		}
		if len(due) < sweepBatch {
			break
		}
	}
	first, err := ss.s.rdb.ZRangeWithScores(ctx, ss.s.sessionExpiriesKey(), 0, 0).Result()
	if err != nil || len(first) == 0 {
		return 0, err
	}
	return int64(first[0].Score), nil
}
