package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// sweeper records the expiry of leases whose TTL ran out, for the reaper
// (reaper.go), in one event log: Redis deletes an expired lease's keys on
// its own, and no script runs then. On Redis Cluster it also ends the
// leases of the sessions whose shadows its master keeps (their members
// are the session ids, see clustersessions.go). Every live
// lease is a member of the expiries set (see record in scripts/lib.lua),
// scored by its expiry; the sweeper runs expire.lua for each member that is
// due, which records the expiry unless a script or another instance's
// sweeper did already.
//
// It sends Redis nothing while nothing is due. It sleeps until the earliest
// expiry it knows of; a script that adds an expiry earlier than every other
// announces it on the expiries channel, so every instance learns of it,
// whichever granted the lease, and marks it in the set (member ""): until
// the mark is due, later expiries go unannounced, and the look at the mark
// finds them. (A fast grant announces its expiry also when no mark is
// pending, and marks it: one ZADD does both, see acquire_fast.lua.) Whenever announcements may have been lost (a new pub/sub
// connection, a Sentinel master switch) it looks at the set again.
//
// It also trims the log to its retention, once a second at most (a tenth
// of the retention when shorter), and only while this process writes: the
// trim ends a second after the last write, and an idle Redis gets no
// command from it.
type sweeper struct {
	r         *reaper // runs expire.lua
	log       *eventLog
	retention time.Duration

	poke    chan struct{} // something below changed
	done    chan struct{}
	stopped chan struct{}

	mu        sync.Mutex
	announced int64 // Redis ms of the earliest expiry announced since the last look; 0: none
	lookAgain bool  // announcements may have been lost

	wrote     atomic.Bool   // this process recorded events since the last trim
	trimEvery time.Duration // how often the log is trimmed while this process writes
}

const (
	// sweepBatch bounds the members one look takes; a full batch is
	// followed by another look at once.
	sweepBatch = 100
	// maxTrimEvery bounds how often the log is trimmed to its retention
	// while this process writes: every tenth of the retention, or this.
	// XTRIM with ~ removes whole stream nodes, so a trim that finds
	// nothing to remove is cheap.
	maxTrimEvery = time.Second
)

func newSweeper(r *reaper, log *eventLog, retention time.Duration) *sweeper {
	return &sweeper{
		r:         r,
		log:       log,
		retention: retention,
		poke:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		stopped:   make(chan struct{}),
		lookAgain: true,
		trimEvery: min(retention/10, maxTrimEvery),
	}
}

func (sw *sweeper) start() { go sw.run() }

func (sw *sweeper) close() {
	close(sw.done)
	<-sw.stopped
}

func (sw *sweeper) wake() {
	select {
	case sw.poke <- struct{}{}:
	default:
	}
}

// notice takes a message of the expiries channel: an expiry's ms, or ""
// when announcements may have been lost.
func (sw *sweeper) notice(payload string) {
	sw.mu.Lock()
	if ms, err := strconv.ParseInt(payload, 10, 64); err == nil && ms > 0 {
		if sw.announced == 0 || ms < sw.announced {
			sw.announced = ms
		}
	} else {
		sw.lookAgain = true
	}
	sw.mu.Unlock()
	sw.wake()
}

// noteWrite notes that this process recorded events, so that the log's
// retention is kept.
func (sw *sweeper) noteWrite() {
	if !sw.wrote.Load() && sw.wrote.CompareAndSwap(false, true) {
		sw.wake()
	}
}

func (sw *sweeper) run() {
	defer close(sw.stopped)
	const minBackoff, maxBackoff = 50 * time.Millisecond, 2 * time.Second
	backoff := minBackoff
	var (
		next     int64         // Redis ms of the earliest expiry known; 0: none
		offset   time.Duration // Redis's clock minus ours
		lastTrim time.Time
		look     bool
	)
	redisNow := func() int64 { return time.Now().Add(offset).UnixMilli() }
	for {
		sw.mu.Lock()
		if sw.announced != 0 && (next == 0 || sw.announced < next) {
			next = sw.announced
		}
		sw.announced = 0
		look = look || sw.lookAgain
		sw.lookAgain = false
		sw.mu.Unlock()

		trim := sw.wrote.Load() && time.Since(lastTrim) >= sw.trimEvery
		if look || trim || (next != 0 && next < redisNow()) {
			if trim {
				sw.wrote.Store(false)
			}
			n, off, err := sw.sweep(trim, offset)
			if err != nil {
				if trim {
					sw.wrote.Store(true)
				}
				look = true
				select {
				case <-sw.done:
					return
				case <-time.After(backoff):
				}
				backoff = min(backoff*2, maxBackoff)
				continue
			}
			backoff = minBackoff
			next, offset, look = n, off, false
			if trim {
				lastTrim = time.Now()
			}
			continue // take the announcements made meanwhile
		}

		var timer *time.Timer
		var fired <-chan time.Time
		wait := time.Duration(-1)
		if next != 0 {
			// A lease's keys go one ms after its expiry.
			wait = time.Duration(next+1-redisNow()) * time.Millisecond
		}
		if sw.wrote.Load() {
			if d := sw.trimEvery - time.Since(lastTrim); wait < 0 || d < wait {
				wait = d
			}
		}
		if wait >= 0 {
			timer = time.NewTimer(max(wait, time.Millisecond))
			fired = timer.C
		}
		select {
		case <-sw.done:
		case <-sw.poke:
		case <-fired:
		}
		if timer != nil {
			timer.Stop()
		}
		select {
		case <-sw.done:
			return
		default:
		}
	}
}

// sweep looks at the earliest expiries, runs expire.lua for those due, and
// trims the log when trim is set. It returns the Redis ms of the earliest
// expiry not yet due (0: none), and Redis's clock minus ours. offset is the
// last one known, which times the trim.
// refusedRetry is how long, in Redis ms, the sweeper leaves due leases it
// cannot read (a newer layout, during a rolling deploy) before it looks
// again.
const refusedRetry = 1000

func (sw *sweeper) sweep(trim bool, offset time.Duration) (next int64, _ time.Duration, err error) {
	r := sw.r
	ctx, cancel := context.WithTimeout(context.Background(), r.runner.callTimeout)
	defer cancel()
	node, err := r.journal.logNode(ctx, sw.log)
	if err != nil {
		return 0, offset, err
	}
	sent := time.Now()
	pipe := node.Pipeline()
	now := pipe.Time(ctx)
	first := pipe.ZRangeWithScores(ctx, sw.log.exp, 0, sweepBatch-1)
	if trim {
		minID := strconv.FormatInt(sent.Add(offset).Add(-sw.retention).UnixMilli(), 10) + "-0"
		pipe.XTrimMinIDApprox(ctx, sw.log.key, minID, 0)
	}
	_, _ = pipe.Exec(ctx)
	// A failed trim waits for the next one; expiries go on.
	if err := errors.Join(now.Err(), first.Err()); err != nil {
		return 0, offset, err
	}
	rtt := time.Since(sent)
	offset = now.Val().Sub(sent.Add(rtt / 2))
	nowMs := now.Val().UnixMilli()

	var calls []*scriptCall
	mark := false
	for _, z := range first.Val() {
		member, _ := z.Member.(string)
		if int64(z.Score) > nowMs {
			next = int64(z.Score)
			break
		}
		if member == "" {
			mark = true
			continue
		}
		if !strings.Contains(member, "\n") {
			// A session's shadow on Redis Cluster (clustersessions.go):
			// its leases here end, a chunk at a time.
			calls = append(calls, &scriptCall{script: r.runner.scripts.sessionSweep, keys: sw.log.sessionKeys(member), args: []any{member, sw.log.arg}})
			continue
		}
		name, _, _ := strings.Cut(member, "\n")
		calls = append(calls, &scriptCall{script: r.runner.scripts.expire, keys: r.keys(name), args: []any{member, sw.log.arg}})
	}
	if mark {
		// The announced mark is due: no script moves it now (an expiry
		// to come is later), so it goes, and the look that follows sees
		// every expiry added without an announcement meanwhile.
		if err := node.ZRem(ctx, sw.log.exp, "").Err(); err != nil {
			return 0, offset, err
		}
	}
	more, refused, err := sw.runCalls(ctx, calls)
	if err != nil {
		return 0, offset, err
	}
	if mark || more || len(calls) == sweepBatch || (next != 0 && next <= nowMs) {
		next = nowMs // look again at once
	}
	if refused > 0 && (next == 0 || next < nowMs+refusedRetry) {
		// The refused leases stay due until a newer instance's sweeper
		// ends them: looking again at once would spin on them.
		next = nowMs + refusedRetry
	}
	return next, offset, nil
}

// runCalls runs the sweep's expire and session-sweep calls, and reports whether a
// session's shadow has leases left to end, and how many due leases were of a
// newer layout (left to a newer instance's sweeper).
func (sw *sweeper) runCalls(ctx context.Context, calls []*scriptCall) (more bool, refused int, _ error) {
	if len(calls) == 0 {
		return false, 0, nil
	}
	r := sw.r
	runPipelined(ctx, r.runner.rdb, calls)
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil {
			if _, newer := unknownLeaseLayout(err); newer {
				// A newer instance's lease: told; its sweeper records
				// the expiry.
				r.runner.noteLayout(err, firstKey(c.keys))
				refused++
				continue
			}
			return false, 0, err
		}
		if c.script == r.runner.scripts.sessionSweep {
			left, _ := c.cmd.Int64()
			more = more || left > 0
		}
	}
	return more, refused, nil
}
