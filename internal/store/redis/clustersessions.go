package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/lock"
)

// Sessions on Redis Cluster (docs/SESSIONS.md, "Redis Cluster"). A
// session's record lives in its own slot ({s:<id>}), its leases on any
// master, and a script reaches the keys of one master only. So each master
// that holds a bound lease keeps a shadow of the session beside its event
// log, in the log's hash tag (eventlog.go): the fields the lock scripts
// read (session_key in scripts/lib.lua), and the leases bound there. The
// record lists those masters (by their logs' slots).
//
//   - An acquire that binds a lease first notes its master in the record
//     (session_join.lua), then writes the shadow there (session_shadow.lua),
//     then acquires as anywhere else: three scripts.
//   - A renewal is one script on the record, then one per master holding a
//     shadow, pipelined: 1 + M scripts, M the masters that hold the
//     session's leases. One that reaches the record but not every shadow
//     answers 503: those leases end at the older expiry.
//   - Each master's shadow is due in its log's lease expiries (its member
//     is the session id), so that the master's sweeper (sweep.go, any
//     instance's) ends its leases by the master's clock, with
//     session_sweep.lua, as on a single Redis. The record needs no sweeper:
//     it forgets itself an hour after its expiry.
//   - DELETE marks the record released, then each shadow, then sweeps the
//     shadows, one goroutine per master.

// newClusterSessions returns the sessions of a store on Redis Cluster,
// whose masters' sweepers end them: no sweeper of its own.
func newClusterSessions(s *Store, logs *clusterLogs) *sessions {
	ss := &sessions{s: s, shadows: logs, done: make(chan struct{}), stopped: make(chan struct{})}
	close(ss.stopped)
	return ss
}

// Shadow keys, beside the log l (scripts/lib.lua lists them): the shadow's
// hash, its leases, and the log's lease expiries, where it is due.
func (l *eventLog) sessionKey(id string) string {
	return strings.TrimSuffix(l.key, ":events") + ":s:" + id
}

func (l *eventLog) sessionKeys(id string) []string {
	return []string{l.sessionKey(id), l.sessionKey(id) + ":leases", l.exp}
}

// logAt returns the log of slot, loading the slot map when it is new.
func (c *clusterLogs) logAt(ctx context.Context, slot int) (*eventLog, error) {
	c.mu.Lock()
	l := c.bySlot[slot]
	c.mu.Unlock()
	if l != nil {
		return l, nil
	}
	if err := c.load(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l = c.bySlot[slot]; l == nil {
		return nil, lock.Unavailable(fmt.Errorf("store: no master's log is in slot %d", slot))
	}
	return l, nil
}

// join prepares the master whose log rec names to hold a lease bound to
// session sid: noted in the session's record, with a shadow of it.
func (ss *sessions) join(ctx context.Context, sid, principal string, rec *recording) error {
	if !lock.ValidULID(sid) {
		return lock.SessionNotFound(sid)
	}
	if rec.log == nil {
		return errNoSessions
	}
	res, err := ss.call(ctx, "session_join", ss.s.scripts.sessionJoin, sid, principal, strconv.Itoa(rec.log.slot))
	if err != nil {
		return err
	}
	r := reply(res)
	// exp, ttl, delay, principal, ver. Its own recording: the shadow's keys
	// are those of rec's log, which a relocation must not change under it
	// (a stale slot map makes the binding fail, 503, rather than bind a
	// lease on a master the record does not name).
	shadow, err := ss.s.run(ctx, "session_shadow", ss.s.scripts.sessionShadow, rec.log.sessionKeys(sid), &recording{arg: rec.log.arg},
		sid, r.str(1), r.str(2), r.str(3), r.str(4), r.str(5), "").Slice()
	if isNonLocal(err) {
		_ = ss.shadows.load(ctx)
		return lock.Unavailable(fmt.Errorf("store: the slot map changed while binding to session %s; try again: %w", sid, err))
	}
	if err != nil {
		return storeError(err)
	}
	if reply(shadow).int(0) == -6 {
		return lock.SessionLost(sid)
	}
	return r.err
}

// shadowCalls returns a session_shadow.lua call on the shadow beside each
// master's log that a record's answer names (session_answer in scripts/lib.lua: the masters'
// slots from index 7), with the session's fields as session_shadow.lua
// takes them.
func (ss *sessions) shadowCalls(ctx context.Context, id string, r *replyReader, ended string) ([]*scriptCall, error) {
	var calls []*scriptCall
	for i := 7; i < len(r.v); i++ {
		slot, err := strconv.Atoi(r.str(i))
		if err != nil {
			return nil, lock.AsError(fmt.Errorf("store: session %s names master slot %q", id, r.str(i)))
		}
		l, err := ss.shadows.logAt(ctx, slot)
		if err != nil {
			return nil, err
		}
		calls = append(calls, &scriptCall{script: ss.s.scripts.sessionShadow, keys: l.sessionKeys(id),
			args: []any{id, r.str(5), r.str(3), r.str(4), r.str(2), r.str(6), ended, l.arg}})
	}
	return calls, r.err
}

// renewShadows renews the shadows of session id, which its record's
// renewal answered res: one pipeline, one script per master. A shadow it
// could not renew makes the renewal 503: that master's leases end at the
// older expiry.
func (ss *sessions) renewShadows(ctx context.Context, id string, res []any) (lock.Session, error) {
	r := reply(res)
	sess := sessionHead(id, r)
	calls, err := ss.shadowCalls(ctx, id, r, "")
	if err != nil {
		return lock.Session{}, err
	}
	if len(calls) > 0 {
		ctx, cancel := context.WithTimeout(ctx, ss.s.callTimeout)
		defer cancel()
		runPipelined(ctx, ss.s.rdb, calls)
	}
	for _, c := range calls {
		got, err := c.cmd.Slice()
		if err == nil && reply(got).int(0) == -6 {
			err = errors.New("its leases on that master ended with an earlier expiry")
		}
		if err != nil {
			ss.s.noteFailure(err)
			return lock.Session{}, lock.Unavailable(fmt.Errorf("store: session %s renewed, but not its shadow %s: %w", id, c.keys[0], err))
		}
		sess.Leases = append(sess.Leases, sessionLeases(reply(got), 1)...)
	}
	sortLeases(sess.Leases)
	return sess, nil
}

// readShadows reads the leases of session id from the shadows its record
// names (res).
func (ss *sessions) readShadows(ctx context.Context, id string, res []any) (lock.Session, error) {
	r := reply(res)
	sess := sessionHead(id, r)
	calls, err := ss.shadowCalls(ctx, id, r, "")
	if err != nil {
		return lock.Session{}, err
	}
	if len(calls) == 0 {
		return sess, r.err
	}
	ctx, cancel := context.WithTimeout(ctx, ss.s.callTimeout)
	defer cancel()
	pipe := ss.s.rdb.Pipeline()
	reads := make([]*goredis.MapStringStringCmd, len(calls))
	for i, c := range calls {
		reads[i] = pipe.HGetAll(ctx, c.keys[1])
	}
	_, _ = pipe.Exec(ctx)
	for _, read := range reads {
		held, err := read.Result()
		if err != nil {
			ss.s.noteFailure(err)
			return lock.Session{}, storeError(err)
		}
		sess.Leases = append(sess.Leases, leasesOf(held)...)
	}
	sortLeases(sess.Leases)
	return sess, r.err
}

// leasesOf reads a session's leases hash (bind in scripts/lib.lua).
func leasesOf(held map[string]string) []lock.SessionLease {
	flat := make([]any, 0, 2*len(held))
	for k, v := range held {
		flat = append(flat, k, v)
	}
	return sessionLeases(reply(flat), 0)
}

// endShadows ends the shadows of session id, whose record session_end.lua
// marked released (res): each is marked released (which answers its
// leases), then swept until none is left, every master at once. Should this instance die
// midway, the masters' sweepers finish: a released shadow is due at once.
func (ss *sessions) endShadows(ctx context.Context, id string, res []any) (lock.Session, error) {
	r := reply(res)
	sess := sessionHead(id, r)
	calls, err := ss.shadowCalls(ctx, id, r, "released")
	if err != nil {
		return sess, err
	}
	if len(calls) == 0 {
		return sess, nil
	}
	pctx, cancel := context.WithTimeout(ctx, ss.s.callTimeout)
	runPipelined(pctx, ss.s.rdb, calls)
	cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil {
			ss.s.noteFailure(err)
			errs = append(errs, err)
			continue
		}
		held, _ := c.cmd.Slice()
		sess.Leases = append(sess.Leases, sessionLeases(reply(held), 1)...)
		wg.Add(1)
		go func(keys []string, arg string) {
			defer wg.Done()
			if err := ss.finishShadow(ctx, id, keys, arg); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}(c.keys, c.args[len(c.args)-1].(string))
	}
	wg.Wait()
	sortLeases(sess.Leases)
	if err := errors.Join(errs...); err != nil {
		return sess, storeError(err)
	}
	return sess, nil
}

// finishShadow runs session_sweep.lua on a shadow (keys) until none of its
// leases is left; the master's sweeper may end some of them meanwhile.
func (ss *sessions) finishShadow(ctx context.Context, id string, keys []string, arg string) error {
	rec := &recording{arg: arg}
	for range maxSessionChunks {
		left, err := ss.s.run(ctx, "session_sweep", ss.s.scripts.sessionSweep, keys, rec, id).Int64()
		if err != nil || left <= 0 {
			return err
		}
	}
	return nil
}
