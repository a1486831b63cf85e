package redis

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/layout"
	"github.com/lockapi/lockapi/internal/lock"
)

// The event log (docs/EVENTS.md) is one stream per Redis, <prefix>events,
// which the scripts append to in the same call as each change (see record
// in scripts/lib.lua). Its ids are the events' ids.

var _ lock.EventLog = (*journal)(nil)

// Events implements lock.Store: the store's journal, or nil when it
// records no events (Options.Events is false).
func (s *Store) Events() lock.EventLog {
	if s.journal == nil {
		return nil
	}
	return s.journal
}

// callerWins gives a caller whose context ended while a read was on its
// way its own context error (context.DeadlineExceeded, context.Canceled)
// instead of "unavailable": the read failed because the caller's deadline
// passed or the caller went away, and Redis is not to blame. The store's
// own call deadline, which has no say over the caller's context, still
// answers unavailable.
func callerWins(caller context.Context, err *error) {
	if *err != nil && caller.Err() != nil && lock.ErrorCode(*err) == lock.CodeUnavailable {
		*err = caller.Err()
	}
}

// defaultEventsLimit is a read's limit when the caller gives none.
const defaultEventsLimit = 100

func checkAfter(after string) error {
	if after == "" {
		return nil
	}
	if _, _, ok := lock.ParseEventID(after); !ok {
		return lock.Invalid(lock.FieldError{Field: "after", Detail: "not an event id"})
	}
	return nil
}

// ReadEvents implements lock.EventLog with XRANGE, and XINFO STREAM to tell
// whether after is older than the log keeps, in one round trip.
func (j *journal) ReadEvents(ctx context.Context, after string, limit int) (_ []lock.Event, err error) {
	defer callerWins(ctx, &err)
	if err := checkAfter(after); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = defaultEventsLimit
	}
	if j.clusterLogs != nil {
		return j.readClusterEvents(ctx, after, limit)
	}
	ctx, cancel := context.WithTimeout(ctx, j.callTimeout)
	defer cancel()
	key := j.eventsKey()
	pipe := j.rdb.Pipeline()
	var info *goredis.XInfoStreamCmd
	start := "-"
	if after != "" {
		info = pipe.XInfoStream(ctx, key)
		start = "(" + after
	}
	read := pipe.XRangeN(ctx, key, start, "+", int64(limit))
	_, _ = pipe.Exec(ctx)
	if info != nil {
		if err := eventsGone(after, info); err != nil {
			return nil, err
		}
	}
	msgs, err := read.Result()
	if err != nil {
		return nil, storeError(err)
	}
	return j.parseEvents(msgs), nil
}

// eventsGone returns lock.EventsGone when events recorded after after may
// have been trimmed: the log trimmed anything and starts after after (or
// holds nothing while it once held a later event). The newest trimmed id is
// not known (Redis keeps it for XDEL only), so a reader that stopped right
// at it is told gone too. A log that never trimmed (entries-added is its
// length) or that Redis does not have (nothing recorded yet, or the data
// was lost) answers from what it has.
func eventsGone(after string, info *goredis.XInfoStreamCmd) error {
	st, err := info.Result()
	switch {
	case err != nil && strings.Contains(err.Error(), "no such key"):
		return nil
	case err != nil:
		return storeError(err)
	}
	// entries-added is 0 before Redis 7: then assume something was trimmed.
	trimmed := st.EntriesAdded > st.Length || st.EntriesAdded == 0 && st.Length > 0
	switch {
	case !trimmed:
	case st.Length > 0 && lock.CompareEventIDs(after, st.FirstEntry.ID) < 0:
		return lock.EventsGone(after, st.FirstEntry.ID)
	case st.Length == 0 && lock.CompareEventIDs(after, st.LastGeneratedID) < 0:
		return lock.EventsGone(after, "")
	}
	return nil
}

// WaitEvents implements lock.EventLog: ReadEvents, then, when nothing was
// recorded after after, one blocking XREAD on a connection of its own until
// something is or ctx ends.
func (j *journal) WaitEvents(ctx context.Context, after string, limit int) (_ []lock.Event, err error) {
	defer callerWins(ctx, &err)
	if j.clusterLogs != nil {
		if err := checkAfter(after); err != nil {
			return nil, err
		}
		if limit <= 0 {
			limit = defaultEventsLimit
		}
		return j.waitClusterEvents(ctx, after, limit)
	}
	for {
		evs, err := j.ReadEvents(ctx, after, limit)
		if err != nil || len(evs) > 0 {
			return evs, err
		}
		from := after
		if from == "" {
			from = "0-0"
		}
		if err := j.blockUntilAfter(ctx, j.blocking, j.rdb, j.eventsKey(), from); err != nil {
			return nil, err
		}
		// Something was recorded after after: read it as ReadEvents does,
		// which also tells when the log was trimmed past after meanwhile.
	}
}

// blockUntilAfter returns once the stream key holds an entry after from, or
// with ctx's error once ctx ends. It waits on a connection of conns, and
// unblocks it through node, the client of the same Redis.
func (j *journal) blockUntilAfter(ctx context.Context, conns *blockingConns, node goredis.Cmdable, key, from string) error {
	conn, err := conns.get(ctx, j.callTimeout)
	if err != nil {
		return storeError(err)
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The read is bounded by ctx through CLIENT UNBLOCK below, not by
		// its deadline, which would make go-redis drop the connection.
		streams, err := conn.c.XRead(context.WithoutCancel(ctx), &goredis.XReadArgs{
			Streams: []string{key, from}, Count: 1, Block: 0,
		}).Result()
		n := 0
		for _, st := range streams {
			n += len(st.Messages)
		}
		if errors.Is(err, goredis.Nil) {
			err = nil // unblocked
		}
		conns.put(conn, err)
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return storeError(r.err)
		}
		if r.n == 0 {
			// Unblocked by someone else (CLIENT UNBLOCK from an admin):
			// look again.
			return ctx.Err()
		}
		return nil
	case <-ctx.Done():
	}
	// CLIENT UNBLOCK ends the read; it may have to be repeated if it
	// overtook the XREAD on its way to Redis. A read that does not end
	// (Redis is gone) is left to its goroutine, which closes the
	// connection once it ends.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(j.callTimeout)
	for {
		uctx, cancel := context.WithTimeout(context.Background(), j.callTimeout)
		_ = node.ClientUnblock(uctx, conn.id).Err()
		cancel()
		select {
		case <-done:
			return ctx.Err()
		case <-giveUp:
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// ReadEventsBefore implements lock.EventLog with XREVRANGE (one per
// master's log on Redis Cluster, merged).
func (j *journal) ReadEventsBefore(ctx context.Context, before string, limit int) ([]lock.Event, error) {
	if before != "" {
		if _, _, ok := lock.ParseEventID(before); !ok {
			return nil, lock.Invalid(lock.FieldError{Field: "before", Detail: "not an event id"})
		}
	}
	if limit <= 0 {
		limit = defaultEventsLimit
	}
	if j.clusterLogs != nil {
		return j.readClusterEventsBefore(ctx, before, limit)
	}
	ctx, cancel := context.WithTimeout(ctx, j.callTimeout)
	defer cancel()
	end := "+"
	if before != "" {
		end = "(" + before
	}
	msgs, err := j.rdb.XRevRangeN(ctx, j.eventsKey(), end, "-", int64(limit)).Result()
	if err != nil {
		j.noteFailure(err)
		return nil, storeError(err)
	}
	return j.parseEvents(msgs), nil
}

// LastEventID implements lock.EventLog.
func (j *journal) LastEventID(ctx context.Context) (_ string, err error) {
	defer callerWins(ctx, &err)
	if j.clusterLogs != nil {
		return j.lastClusterEventID(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, j.callTimeout)
	defer cancel()
	msgs, err := j.rdb.XRevRangeN(ctx, j.eventsKey(), "+", "-", 1).Result()
	if err != nil {
		j.noteFailure(err)
		return "", storeError(err)
	}
	if len(msgs) == 0 {
		return "", nil
	}
	return msgs[0].ID, nil
}

func (j *journal) parseEvents(msgs []goredis.XMessage) []lock.Event {
	evs := make([]lock.Event, 0, len(msgs))
	for _, m := range msgs {
		evs = append(evs, j.parseEvent(m))
	}
	return evs
}

// parseEvent is parseEventLayout that tells j.unknown of an entry whose
// layout this version does not know.
func (j *journal) parseEvent(m goredis.XMessage) lock.Event {
	e := parseEvent(m)
	if e.UnknownLayout != "" {
		j.unknown.Tell(layout.Events, e.UnknownLayout, m.ID)
	}
	return e
}

// parseEvent reads a stream entry as record in scripts/lib.lua writes it:
// v=2 (layout.EventsPacked) and one field, e, whose value is the event's
// fields in eventFields' order, separated by newlines (none of them holds
// one), and after them, on a grant whose request waited, the ms it waited
// (lock.Event.Waited); e without v (builds before the layout versions) reads the same. An
// entry of one field per event field named as eventFields names them
// (layout.EventsFields, v0.1.0's: without v, or v=1) reads the same. An entry of
// another layout is an event with only its ID, Time and UnknownLayout
// (its v, or "?" when it has neither v nor t). An update's entry has the
// field md beside them, its metadata.
func parseEvent(m goredis.XMessage) lock.Event {
	ms, _, _ := lock.ParseEventID(m.ID)
	var f [len(eventFields) + 1]string // and the packed layout's waited ms
	v, versioned := m.Values["v"].(string)
	e, packed := m.Values["e"].(string)
	switch {
	case versioned && v == layout.EventsPacked && packed, !versioned && packed:
		for i := range f {
			var more bool
			f[i], e, more = strings.Cut(e, "\n")
			if !more {
				break
			}
		}
	case (!versioned || v == layout.EventsFields) && m.Values["t"] != nil:
		for i, name := range eventFields {
			f[i], _ = m.Values[name].(string)
		}
	default:
		if !versioned || !layout.Plain(v) {
			v = "?"
		}
		return lock.Event{ID: m.ID, Time: time.UnixMilli(int64(ms)).UTC(), UnknownLayout: v, Queue: -1}
	}
	num := func(s string) int { n, _ := strconv.Atoi(s); return n }
	token, _ := strconv.ParseUint(f[6], 10, 64)
	var md map[string]string
	if raw, ok := m.Values["md"].(string); ok {
		// An update's metadata (record in lib.lua): JSON the store
		// wrote itself, "" for none.
		md = map[string]string{}
		if raw != "" {
			_ = json.Unmarshal([]byte(raw), &md)
		}
	}
	return lock.Event{
		ID:        m.ID,
		Type:      lock.EventType(f[0]),
		Lock:      f[1],
		LeaseID:   f[2],
		Owner:     f[3],
		Principal: f[4],
		Mode:      lock.Mode(f[5]),
		Token:     token,
		HoldCount: num(f[7]),
		Queue:     num(f[8]),
		Session:   f[9],
		Metadata:  md,
		Waited:    time.Duration(num(f[10])) * time.Millisecond,
		Time:      time.UnixMilli(int64(ms)).UTC(),
	}
}

// eventFields names an event's fields in the order of a packed entry (e),
// as an entry of one field per event field named them: type, lock, lease
// id, owner, principal, mode, token, holds left, queue length, session.
var eventFields = [...]string{"t", "l", "k", "o", "p", "m", "n", "h", "q", "s"}

// blockingConns keeps the connections blocking reads wait on, out of the
// pool the scripts use, each with its CLIENT ID (which CLIENT UNBLOCK
// names). A connection that failed is closed; at most maxIdleBlocking idle
// ones are kept.
type blockingConns struct {
	client *goredis.Client
	mu     sync.Mutex
	idle   []*blockingConn
	closed bool
}

type blockingConn struct {
	c  *goredis.Conn
	id int64
}

const maxIdleBlocking = 2

func (b *blockingConns) get(ctx context.Context, timeout time.Duration) (*blockingConn, error) {
	b.mu.Lock()
	if n := len(b.idle); n > 0 {
		c := b.idle[n-1]
		b.idle = b.idle[:n-1]
		b.mu.Unlock()
		return c, nil
	}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := b.client.Conn()
	id, err := c.ClientID(ctx).Result()
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &blockingConn{c: c, id: id}, nil
}

func (b *blockingConns) put(c *blockingConn, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil || b.closed || len(b.idle) >= maxIdleBlocking {
		_ = c.c.Close()
		return
	}
	b.idle = append(b.idle, c)
}

func (b *blockingConns) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, c := range b.idle {
		_ = c.c.Close()
	}
	b.idle = nil
}
