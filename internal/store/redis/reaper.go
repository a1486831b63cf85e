package redis

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// reaper is the store's repairs in the background, of what happened with
// no caller to see it:
//
//   - ghost grants: leases that an acquire may have granted while its
//     caller was told the store was unavailable (the call timed out, or the
//     connection broke after the request was written). Nobody knows such a
//     lease, so it would block the lock until its TTL. lockapi chose the
//     request id, so it can name the hold to undo: the reaper runs
//     abandon.lua for it, again and again with backoff, until Redis
//     answers. The script also makes Redis remember the id, so an acquire
//     still on its way when the abandon runs grants nothing.
//   - expiries: Redis deletes an expired lease's keys on its own, and no
//     script records the expiry then. Each event log has a sweeper
//     (sweep.go) that runs expire.lua for it; the journal starts one per
//     log it knows, with sweeperFor.
//
// It holds what those scripts need, not the store: the keys, the runner,
// the journal the scripts record in, and the publish command.
type reaper struct {
	scriptKeys
	runner  *runner
	journal *journal // nil while no events are recorded
	publish string   // notifications.publish

	mu      sync.Mutex
	pending map[ghost]struct{}
	wake    chan struct{} // a ghost was added
	done    chan struct{}
	stopped chan struct{}

	abandoned atomic.Int64
}

type ghost struct{ name, requestID string }

// maxGhosts bounds the reaper's memory while Redis is away for long; a ghost
// dropped past it keeps its lock until the lease's TTL, as before.
const maxGhosts = 100_000

func newReaper(keys scriptKeys, run *runner, j *journal, publish string) *reaper {
	r := &reaper{
		scriptKeys: keys,
		runner:     run,
		journal:    j,
		publish:    publish,
		pending:    make(map[ghost]struct{}),
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		stopped:    make(chan struct{}),
	}
	go r.run()
	return r
}

// abandonMemory is how long Redis remembers an abandoned request id, so that
// the acquire, if it is still on its way, grants nothing when it arrives.
const abandonMemory = 10 * time.Minute

// abandon runs abandon.lua once: it undoes the hold that requestID took on
// name, if any, and reports how many holds it undid.
func (r *reaper) abandon(ctx context.Context, name, requestID string) (int64, error) {
	rec, err := r.journal.recordingFor(ctx, name)
	if err != nil {
		return 0, err
	}
	n, err := r.runner.run(ctx, "abandon", r.runner.scripts.abandon, r.keys(name), rec,
		requestID, r.channel(name), abandonMemory.Milliseconds(), r.publish).Int64()
	if n > 0 {
		rec.recorded()
	}
	return n, err
}

// sweeperFor returns the sweeper of one event log, not yet started.
func (r *reaper) sweeperFor(l *eventLog) *sweeper {
	return newSweeper(r, l, r.journal.retention)
}

// add hands the reaper a ghost to abandon.
func (r *reaper) add(name, requestID string) {
	r.mu.Lock()
	if len(r.pending) < maxGhosts {
		r.pending[ghost{name, requestID}] = struct{}{}
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *reaper) stats() (abandoned, pending int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.abandoned.Load(), int64(len(r.pending))
}

func (r *reaper) close() {
	close(r.done)
	<-r.stopped
}

// run abandons pending ghosts; after a round in which Redis did not answer,
// it waits (50 ms doubling to 2 s) before the next.
func (r *reaper) run() {
	defer close(r.stopped)
	const minBackoff, maxBackoff = 50 * time.Millisecond, 2 * time.Second
	backoff := minBackoff
	for {
		// The call that made a ghost just failed: give Redis the backoff
		// to come back before trying.
		select {
		case <-r.done:
			return
		case <-r.wake:
		}
		for {
			select {
			case <-r.done:
				return
			case <-time.After(backoff):
			}
			if r.round() {
				backoff = minBackoff
				break
			}
			backoff = min(backoff*2, maxBackoff)
		}
	}
}

// round tries every pending ghost once and reports whether Redis answered
// all of them.
func (r *reaper) round() bool {
	r.mu.Lock()
	batch := make([]ghost, 0, len(r.pending))
	for g := range r.pending {
		batch = append(batch, g)
	}
	r.mu.Unlock()
	ok := true
	for _, g := range batch {
		select {
		case <-r.done:
			return false
		default:
		}
		n, err := r.abandon(context.Background(), g.name, g.requestID)
		var rerr goredis.Error
		if err != nil && (!errors.As(err, &rerr) || transientReply(err)) {
			ok = false // not answered, or refused for now
			continue
		}
		// Answered: undone (n > 0), or there was nothing to undo. Either
		// way the request id is settled in Redis.
		if n > 0 {
			r.abandoned.Add(1)
		}
		r.mu.Lock()
		delete(r.pending, g)
		r.mu.Unlock()
	}
	return ok
}
