package redis

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/clock"
	"github.com/lockapi/lockapi/internal/lock"
)

// On Redis Cluster the event log is one stream per master (eventlog.go),
// read as one log ordered by the masters' clocks:
//
//   - An entry <ms>-<seq> of the log in slot L has the id
//     <ms>-<seq*16384+L>: unique, and ordered by time first.
//   - A read merges the logs in id order, and holds back what was recorded
//     in the last clusterHold (by Redis's clock, read before the logs): an
//     event recorded later on another master with an earlier id (the clocks
//     differ, or two masters recorded in the same ms) is then still in
//     time to come first. The masters' clocks must agree within
//     clusterHold for that.
//   - So every id a read hands out, and LastEventID's (which waits until
//     its id is past the hold), is a cursor: every event with an earlier
//     id has been recorded, and a read after it starts each log at it
//     (logAfter), in any process. Cutting a stream anywhere and resuming
//     it on any instance repeats and misses nothing.
//   - Reads remember where they left each log, by the id they returned
//     last (cursorCache): a read after that id goes on from there, so that
//     this process's reader misses nothing even when the clocks disagree.
//     An event it finds with an id before the one it started after is
//     marked Late: it is delivered out of order rather than lost. With
//     clocks that agree, the remembered place is the one logAfter gives.

// clusterHold is how long a cluster read holds back the newest events.
const clusterHold = 200 * time.Millisecond

const slotCount = 16384

// clusterEventID is the id of the entry streamID of the log of slot.
func clusterEventID(slot int, streamID string) string {
	ms, seq, _ := lock.ParseEventID(streamID)
	return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint(seq*slotCount+uint64(slot), 10)
}

// logAfter returns the stream id of slot's log after which its entries
// have ids after after.
func logAfter(slot int, after string) string {
	if after == "" {
		return "0-0"
	}
	ms, seq, _ := lock.ParseEventID(after)
	if seq >= uint64(slot) {
		return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint((seq-uint64(slot))/slotCount, 10)
	}
	if ms == 0 {
		return "0-0"
	}
	return strconv.FormatUint(ms-1, 10) + "-" + lastSeq
}

// lastSeq is the sequence of the last entry of a ms in a log that logAfter
// starts after: the largest that lock.ParseEventID reads (19 digits), far
// past any that a stream reaches. MaxUint64 (20 digits), which Redis reads
// too, read as 0-0 in eventsGone's comparison: a resume point before a
// log's entries of its ms then failed as gone once the log was trimmed.
const lastSeq = "9999999999999999999"

// logPos says, per log slot, the stream id after which the next read of
// that log starts.
type logPos map[int]string

// cursorCache remembers the positions that reads left the logs at, by the
// id of the last event they returned.
type cursorCache struct {
	mu    sync.Mutex
	byID  map[string]logPos
	order []string
}

const cursorCacheSize = 64

func (c *cursorCache) get(id string) logPos {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byID[id]
}

func (c *cursorCache) put(id string, p logPos) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = map[string]logPos{}
	}
	if _, ok := c.byID[id]; !ok {
		c.order = append(c.order, id)
		if len(c.order) > cursorCacheSize {
			delete(c.byID, c.order[0])
			c.order = c.order[1:]
		}
	}
	c.byID[id] = p
}

// logEntry is an entry read from the log of slot.
type logEntry struct {
	slot int
	id   string // its cluster id
	msg  goredis.XMessage
}

// clusterRead is the outcome of reading every log once.
type clusterRead struct {
	ready   []logEntry // in id order, recorded before the hold
	held    bool       // entries were held back
	nowMs   int64      // Redis's clock when read
	pos     logPos     // where the logs are left once ready is taken
	waitPos logPos     // where they are left, held entries included
}

// readLogs reads up to limit entries of every log after the positions in
// pos, or after after for logs pos does not name. gone checks whether after
// is older than a log keeps.
//
// Redis's clock is read first, in a call of its own: the hold is sound only
// if every log is read after the time it is measured from (an entry
// recorded after a log's read has a later ms than that). In the pipeline of
// the reads, TIME went to one master while the other masters ran their
// XRANGEs concurrently, possibly earlier, so an entry recorded between a
// log's read and TIME could sort before the last event delivered.
func (j *journal) readLogs(ctx context.Context, after string, pos logPos, limit int, gone bool) (clusterRead, error) {
	logs, err := j.clusterLogs.all(ctx)
	if err != nil {
		return clusterRead{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, j.callTimeout)
	defer cancel()
	nowMs, err := j.redisTime(ctx)
	if err != nil {
		return clusterRead{}, err
	}
	from := make(logPos, len(logs))
	for _, l := range logs {
		if p, ok := pos[l.slot]; ok {
			from[l.slot] = p
		} else {
			from[l.slot] = logAfter(l.slot, after)
		}
	}
	pipe := j.rdb.Pipeline()
	reads := make([]*goredis.XMessageSliceCmd, len(logs))
	infos := make([]*goredis.XInfoStreamCmd, len(logs))
	for i, l := range logs {
		if gone && after != "" {
			infos[i] = pipe.XInfoStream(ctx, l.key)
		}
		reads[i] = pipe.XRangeN(ctx, l.key, "("+from[l.slot], "+", int64(limit))
	}
	_, _ = pipe.Exec(ctx)
	var all []logEntry
	for i, l := range logs {
		if infos[i] != nil {
			if err := eventsGone(from[l.slot], infos[i]); err != nil {
				if lock.ErrorCode(err) == lock.CodeEventsGone {
					st, _ := infos[i].Result()
					return clusterRead{}, lock.EventsGone(after, clusterEventID(l.slot, st.FirstEntry.ID))
				}
				return clusterRead{}, err
			}
		}
		msgs, err := reads[i].Result()
		if err != nil {
			j.noteFailure(err)
			return clusterRead{}, storeError(err)
		}
		for _, m := range msgs {
			all = append(all, logEntry{slot: l.slot, id: clusterEventID(l.slot, m.ID), msg: m})
		}
	}
	return mergeLogs(from, all, nowMs, limit), nil
}

// redisTime reads Redis's clock, in ms.
func (j *journal) redisTime(ctx context.Context) (int64, error) {
	now, err := j.rdb.Time(ctx).Result()
	if err != nil {
		j.noteFailure(err)
		return 0, storeError(err)
	}
	return now.UnixMilli(), nil
}

// heldAt reports whether an event of ms is held back at nowMs (Redis's
// clock, read before the logs): one recorded after the logs were read may
// still sort before it.
func heldAt(ms uint64, nowMs int64) bool {
	return int64(ms) > nowMs-clusterHold.Milliseconds()
}

// mergeLogs merges the entries that one read found in the logs after from,
// each log read (up to limit entries) after Redis's clock said nowMs: the
// ready ones in id order, up to limit, and where they leave the logs.
func mergeLogs(from logPos, found []logEntry, nowMs int64, limit int) clusterRead {
	slices.SortFunc(found, func(a, b logEntry) int { return lock.CompareEventIDs(a.id, b.id) })
	r := clusterRead{nowMs: nowMs, pos: maps.Clone(from), waitPos: maps.Clone(from)}
	for _, e := range found {
		r.waitPos[e.slot] = e.msg.ID
	}
	for _, e := range found {
		ms, _, _ := lock.ParseEventID(e.id)
		if held := heldAt(ms, nowMs); held || len(r.ready) == limit {
			r.held = r.held || held
			break
		}
		r.ready = append(r.ready, e)
		r.pos[e.slot] = e.msg.ID
	}
	return r
}

// clusterEvents turns r's ready entries into events, marking Late those
// before after, and remembers where they leave the logs.
func (j *journal) clusterEvents(after string, r clusterRead) []lock.Event {
	evs := make([]lock.Event, 0, len(r.ready))
	for _, e := range r.ready {
		ev := j.parseEvent(e.msg)
		ev.ID = e.id
		ev.Late = after != "" && lock.CompareEventIDs(e.id, after) <= 0
		evs = append(evs, ev)
	}
	switch n := len(evs); {
	case n == 0:
	case evs[n-1].Late:
		// Only events before after: a read after after goes on past them.
		j.cursors.put(after, r.pos)
	default:
		j.cursors.put(evs[n-1].ID, r.pos)
	}
	return evs
}

// readClusterEvents implements ReadEvents on Redis Cluster. When the only
// events after after are held back, it waits for them (clusterHold at
// most): an empty answer means that nothing was recorded after after.
func (j *journal) readClusterEvents(ctx context.Context, after string, limit int) ([]lock.Event, error) {
	pos := j.cursors.get(after)
	for {
		r, err := j.readLogs(ctx, after, pos, limit, true)
		if err != nil {
			return nil, err
		}
		if len(r.ready) > 0 || !r.held {
			return j.clusterEvents(after, r), nil
		}
		pos = r.pos
		if !clock.Sleep(ctx, clusterHold/4) {
			return nil, ctx.Err()
		}
	}
}

// waitClusterEvents implements WaitEvents on Redis Cluster: it reads, and
// when nothing is ready waits for the held events to be, or blocks on every
// log until one records something.
func (j *journal) waitClusterEvents(ctx context.Context, after string, limit int) ([]lock.Event, error) {
	pos := j.cursors.get(after)
	for {
		r, err := j.readLogs(ctx, after, pos, limit, true)
		if err != nil {
			return nil, err
		}
		if len(r.ready) > 0 {
			return j.clusterEvents(after, r), nil
		}
		pos = r.pos
		if r.held {
			if !clock.Sleep(ctx, clusterHold/4) {
				return nil, ctx.Err()
			}
			continue
		}
		if err := j.blockOnLogs(ctx, r.waitPos); err != nil {
			return nil, err
		}
	}
}

// blockOnLogs returns once a log records an entry after its position in
// pos, or with ctx's error: one blocking read per log, each on a connection
// to its master, and no other command while nothing happens.
func (j *journal) blockOnLogs(ctx context.Context, pos logPos) error {
	logs, err := j.clusterLogs.all(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(logs))
	for _, l := range logs {
		go func() {
			errs <- j.blockOnLog(ctx, l, cmp.Or(pos[l.slot], "0-0"))
		}()
	}
	first := <-errs
	cancel()
	for range len(logs) - 1 {
		<-errs
	}
	if first != nil && ctx.Err() != nil && errors.Is(first, context.Canceled) {
		return context.Cause(ctx)
	}
	return first
}

// blockOnLog waits on l's master until l records an entry after from.
func (j *journal) blockOnLog(ctx context.Context, l *eventLog, from string) error {
	node, err := j.cluster.MasterForKey(ctx, l.key)
	if err != nil {
		j.noteFailure(err)
		return storeError(err)
	}
	addr := node.Options().Addr
	j.blockingMu.Lock()
	b := j.nodeBlocking[addr]
	if b == nil {
		b = &blockingConns{client: node}
		j.nodeBlocking[addr] = b
	}
	j.blockingMu.Unlock()
	return j.blockUntilAfter(ctx, b, node, l.key, from)
}

// lastClusterEventID implements LastEventID on Redis Cluster: the id of the
// newest event of all logs, returned once it is no longer held back (see
// readLogs), so that no event recorded after it returns sorts before it.
//
// The newest id is not a place in every log until then: another master may
// still record an event with an earlier id (in the same ms, or in the ms
// between the reads of the logs). A reader that started each log where it
// ended read such an event after the id, as Late, and the Feed delivered it
// twice to a subscriber that had read it from the log already (issue 29).
// Readers after the id start each log at it (logAfter), which is exact once
// it is stable.
func (j *journal) lastClusterEventID(ctx context.Context) (string, error) {
	newest, nowMs, err := j.newestClusterEvent(ctx)
	if err != nil || newest == "" {
		return newest, err
	}
	ms, _, _ := lock.ParseEventID(newest)
	for heldAt(ms, nowMs) {
		wait := time.Duration(int64(ms)-nowMs)*time.Millisecond + clusterHold
		if !clock.Sleep(ctx, wait) {
			return "", ctx.Err()
		}
		if nowMs, err = j.redisTime(ctx); err != nil {
			return "", err
		}
	}
	return newest, nil
}

// newestClusterEvent returns the id of the newest event of all logs, and
// Redis's clock read before them.
func (j *journal) newestClusterEvent(ctx context.Context) (string, int64, error) {
	logs, err := j.clusterLogs.all(ctx)
	if err != nil {
		return "", 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, j.callTimeout)
	defer cancel()
	nowMs, err := j.redisTime(ctx)
	if err != nil {
		return "", 0, err
	}
	pipe := j.rdb.Pipeline()
	lasts := make([]*goredis.XMessageSliceCmd, len(logs))
	for i, l := range logs {
		lasts[i] = pipe.XRevRangeN(ctx, l.key, "+", "-", 1)
	}
	_, _ = pipe.Exec(ctx)
	newest := ""
	for i, l := range logs {
		msgs, err := lasts[i].Result()
		if err != nil {
			j.noteFailure(err)
			return "", 0, storeError(err)
		}
		if len(msgs) == 0 {
			continue
		}
		if id := clusterEventID(l.slot, msgs[0].ID); newest == "" || lock.CompareEventIDs(id, newest) > 0 {
			newest = id
		}
	}
	return newest, nowMs, nil
}

// logBefore returns the stream id of slot's log before which its entries
// have ids before before, "" when none has.
func logBefore(slot int, before string) string {
	ms, seq, _ := lock.ParseEventID(before)
	if seq > uint64(slot) {
		// seq*slotCount+slot < before's seq, rounded up.
		return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint((seq-uint64(slot)+slotCount-1)/slotCount, 10)
	}
	if ms == 0 {
		return ""
	}
	return strconv.FormatUint(ms, 10) + "-0"
}

// readClusterEventsBefore implements ReadEventsBefore on Redis Cluster: the
// newest limit entries of every log before before, merged newest first. It
// holds nothing back: an event recorded later with an earlier id (see
// clusterHold) comes before the newest id that LastEventID returns, which
// waits for it.
func (j *journal) readClusterEventsBefore(ctx context.Context, before string, limit int) ([]lock.Event, error) {
	logs, err := j.clusterLogs.all(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, j.callTimeout)
	defer cancel()
	pipe := j.rdb.Pipeline()
	reads := make([]*goredis.XMessageSliceCmd, len(logs))
	for i, l := range logs {
		end := "+"
		if before != "" {
			if end = logBefore(l.slot, before); end == "" {
				continue
			}
			end = "(" + end
		}
		reads[i] = pipe.XRevRangeN(ctx, l.key, end, "-", int64(limit))
	}
	_, _ = pipe.Exec(ctx)
	var all []logEntry
	for i, l := range logs {
		if reads[i] == nil {
			continue
		}
		msgs, err := reads[i].Result()
		if err != nil {
			j.noteFailure(err)
			return nil, storeError(err)
		}
		for _, m := range msgs {
			all = append(all, logEntry{slot: l.slot, id: clusterEventID(l.slot, m.ID), msg: m})
		}
	}
	slices.SortFunc(all, func(a, b logEntry) int { return lock.CompareEventIDs(b.id, a.id) })
	evs := make([]lock.Event, 0, min(limit, len(all)))
	for _, e := range all[:min(limit, len(all))] {
		ev := j.parseEvent(e.msg)
		ev.ID = e.id
		evs = append(evs, ev)
	}
	return evs, nil
}

// hold is how long a read of the log holds back the newest events:
// clusterHold on Redis Cluster, 0 elsewhere.
func (j *journal) hold() time.Duration {
	if j.clusterLogs != nil {
		return clusterHold
	}
	return 0
}
