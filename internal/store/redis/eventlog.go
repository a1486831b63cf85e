package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// eventLog is one event log and the expiries of the leases it tracks (see
// record in scripts/lib.lua). A single Redis (or a Sentinel master) has
// one. A Redis Cluster has one per master, so that no key carries every
// lock's events: its keys hash to the master's lowest slot, and the
// scripts of a name served by that master write them (the scripts run
// with the allow-cross-slot-keys flag there, see newScriptSet).
type eventLog struct {
	// slot is the cluster slot the log's keys hash to; -1 on a single
	// Redis, whose log ids are the stream's own.
	slot int
	key  string // the stream
	exp  string // the sorted set of live leases' expiries
	// announcer names the channel where a new earliest expiry is
	// announced: on a cluster, the unlock channel of a name no lock can
	// have, which the sharded listener keeps subscribed on the master.
	announcer string
	arg       string // the scripts' events argument (see events_from)
	sweep     *sweeper
}

// logTagPrefix starts the hash tag of a cluster log's keys: no lock name
// holds '#', so the tag never meets a lock's keys or unlock channel.
const logTagPrefix = "#e"

// slotTag returns a hash tag in slot: the first of #e0, #e1, ... (base 36)
// that hashes there.
func slotTag(slot int) string {
	for i := 0; ; i++ {
		tag := logTagPrefix + strconv.FormatInt(int64(i), 36)
		if clusterSlot(tag) == slot {
			return tag
		}
	}
}

// clusterSlot is Redis Cluster's slot of key: CRC16 (XMODEM) of its hash
// tag, or of the whole key when it has none, modulo 16384.
func clusterSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// clusterLogs knows a cluster's event logs: which master (by its lowest
// slot) serves each slot, and every log this process has seen, which it
// keeps reading and sweeping for its whole life (a log whose master lost
// its lowest slot in a resharding still holds events and expiries).
type clusterLogs struct {
	j *journal

	mu     sync.Mutex
	ranges []slotRange       // sorted by start; nil until loaded
	bySlot map[int]*eventLog // every log seen, by slot
	onNew  func(l *eventLog) // starts a new log's sweeper
	closed bool
}

type slotRange struct {
	start, end int
	log        *eventLog
}

// logFor returns the log of the master that serves name's slot, loading
// the slot map on first use.
func (c *clusterLogs) logFor(ctx context.Context, name string) (*eventLog, error) {
	c.mu.Lock()
	loaded := c.ranges != nil
	c.mu.Unlock()
	if !loaded {
		if err := c.load(ctx); err != nil {
			return nil, err
		}
	}
	slot := clusterSlot(name)
	c.mu.Lock()
	defer c.mu.Unlock()
	i, _ := slices.BinarySearchFunc(c.ranges, slot, func(r slotRange, slot int) int {
		switch {
		case r.end < slot:
			return -1
		case r.start > slot:
			return 1
		}
		return 0
	})
	if i == len(c.ranges) || c.ranges[i].start > slot {
		return nil, fmt.Errorf("no master serves slot %d", slot)
	}
	return c.ranges[i].log, nil
}

// all returns every log seen, by slot, loading the slot map on first use.
func (c *clusterLogs) all(ctx context.Context) ([]*eventLog, error) {
	c.mu.Lock()
	loaded := c.ranges != nil
	c.mu.Unlock()
	if !loaded {
		if err := c.load(ctx); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	logs := make([]*eventLog, 0, len(c.bySlot))
	for _, l := range c.bySlot {
		logs = append(logs, l)
	}
	slices.SortFunc(logs, func(a, b *eventLog) int { return a.slot - b.slot })
	return logs, nil
}

// load reads the slot map (CLUSTER SLOTS): each master's log is the one of
// its lowest slot.
func (c *clusterLogs) load(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.j.callTimeout)
	defer cancel()
	slots, err := c.j.cluster.ClusterSlots(ctx).Result()
	if err != nil {
		return storeError(err)
	}
	lowest := map[string]int{}
	for _, r := range slots {
		if len(r.Nodes) == 0 {
			continue
		}
		addr := r.Nodes[0].Addr
		if low, ok := lowest[addr]; !ok || r.Start < low {
			lowest[addr] = r.Start
		}
	}
	var fresh []*eventLog
	c.mu.Lock()
	ranges := make([]slotRange, 0, len(slots))
	for _, r := range slots {
		if len(r.Nodes) == 0 {
			continue
		}
		slot := lowest[r.Nodes[0].Addr]
		l := c.bySlot[slot]
		if l == nil {
			l = c.j.newClusterLog(slot)
			c.bySlot[slot] = l
			fresh = append(fresh, l)
		}
		ranges = append(ranges, slotRange{start: r.Start, end: r.End, log: l})
	}
	slices.SortFunc(ranges, func(a, b slotRange) int { return a.start - b.start })
	c.ranges = ranges
	// The sweepers start under the lock, so that close stops every one.
	if !c.closed && c.onNew != nil {
		for _, l := range fresh {
			c.onNew(l)
		}
	}
	c.mu.Unlock()
	return nil
}

// newClusterLog names the log of slot.
func (j *journal) newClusterLog(slot int) *eventLog {
	tag := slotTag(slot)
	l := &eventLog{
		slot:      slot,
		key:       j.prefix + "{" + tag + "}:events",
		exp:       j.prefix + "{" + tag + "}:events:expiries",
		announcer: tag,
	}
	l.arg = j.max + "\n" + l.key + "\n" + l.exp + "\n" + j.channel(tag)
	return l
}

// isNonLocal reports a script refused, before it changed anything, because
// the events argument named the log of a master that no longer serves it
// (events_from in scripts/lib.lua): the slot map changed.
func isNonLocal(err error) bool {
	return err != nil && strings.Contains(err.Error(), "non local key")
}

// close stops every log's sweeper; no sweeper starts after it.
func (c *clusterLogs) close() {
	c.mu.Lock()
	c.closed = true
	logs := make([]*eventLog, 0, len(c.bySlot))
	for _, l := range c.bySlot {
		logs = append(logs, l)
	}
	c.mu.Unlock()
	for _, l := range logs {
		if l.sweep != nil {
			l.sweep.close()
		}
	}
}

// recording is where the events of one script call on a lock go: the
// script's events argument (events_from in scripts/lib.lua), which the
// runner passes after the script's other arguments, and the log it names
// (nil when events are not recorded).
type recording struct {
	j    *journal
	lock string
	arg  string
	log  *eventLog
}

// recordingFor returns where the events of a script on name go.
func (j *journal) recordingFor(ctx context.Context, name string) (*recording, error) {
	switch {
	case j == nil: // events are off
		return &recording{lock: name, arg: "0"}, nil
	case j.clusterLogs != nil:
		l, err := j.clusterLogs.logFor(ctx, name)
		if err != nil {
			return nil, err
		}
		return &recording{j: j, lock: name, arg: l.arg, log: l}, nil
	}
	return &recording{j: j, lock: name, arg: j.single.arg, log: j.single}, nil
}

// relocate points rec at the log that serves its lock now, after a script
// was refused because the slot map changed (isNonLocal).
func (rec *recording) relocate(ctx context.Context) error {
	if err := rec.j.clusterLogs.load(ctx); err != nil {
		return err
	}
	now, err := rec.j.recordingFor(ctx, rec.lock)
	if err != nil {
		return err
	}
	*rec = *now
	return nil
}

// clustered reports a recording into one of a cluster's logs, whose
// master may change with the slot map.
func (rec *recording) clustered() bool { return rec != nil && rec.log != nil && rec.log.slot >= 0 }

// append returns args followed by the events argument; args alone for a
// script that records no events (rec nil).
func (rec *recording) append(args []any) []any {
	if rec == nil {
		return args
	}
	return append(slices.Clip(args), rec.arg)
}

// recorded tells the log's sweeper that a script recorded events, so that
// it keeps the log's retention.
func (rec *recording) recorded() {
	if rec != nil && rec.log != nil && rec.log.sweep != nil {
		rec.log.sweep.noteWrite()
	}
}

// logNode returns the client of the master that holds l's keys, so that
// one pipeline reads them with that master's clock.
func (j *journal) logNode(ctx context.Context, l *eventLog) (goredis.Cmdable, error) {
	if j.cluster == nil {
		return j.rdb, nil
	}
	node, err := j.cluster.MasterForKey(ctx, l.key)
	if err != nil {
		j.noteFailure(err)
		return nil, err
	}
	return node, nil
}
