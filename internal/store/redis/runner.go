package redis

import (
	"context"
	_ "embed"
	"errors"
	"net"
	"time"

	goredis "github.com/redis/go-redis/v9"
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

// runner runs the store's scripts: through the batcher when there is one,
// within the call deadline, told to the observer, and sent again only when
// Redis refused a script without running it.
type runner struct {
	*topology
	scripts *scriptSet
	batch   *batcher // nil: plain calls
	observe func(script string, d time.Duration)
}

// movedAttempts bounds how often a script refused with MOVED or ASK (a Redis
// Cluster slot that moved: the script did not run) is sent again while the
// client reloads its slot map.
const movedAttempts = 3

// run runs one script (EVALSHA, falling back to EVAL) within the store's call
// deadline and reports its duration to the observer. rec, when the script
// records events, is the log they go to: its argument follows args (see
// events_from in lib.lua). A script is sent again only when Redis refused
// it without running it (MOVED, ASK, or a log its master no longer serves);
// nothing else is ever retried.
func (s *runner) run(ctx context.Context, name string, script *script, keys []string, rec *recording, args ...any) *goredis.Cmd {
	if err := s.gate.admit(script); err != nil {
		return failedCmd(ctx, err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	var cmd *goredis.Cmd
	for attempt := 1; ; attempt++ {
		all := rec.append(args)
		if s.batch != nil {
			cmd = s.batch.run(script, keys, all)
		} else {
			cmd = script.run(ctx, s.rdb, keys, all)
		}
		if rec.clustered() && isNonLocal(cmd.Err()) && attempt < movedAttempts {
			// The events argument named a log its master does not serve
			// (the slot map changed): nothing ran; name the right one.
			_ = rec.relocate(ctx)
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
	if errors.Is(err, errFailover) || errors.Is(err, errStaleMaster) {
		return false // refused before anything was sent
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return false
	}
	return !errors.Is(err, goredis.ErrClosed)
}

// write runs a script that changes a lock. With n > 0 it also waits for n
// replicas to have the change: the script and WAIT go on one connection to
// the lock's master, in one round trip, since WAIT counts the replicas that
// have every write its own connection made. That bypasses the batcher, whose
// pipelines mix callers. confirmed is how many replicas acknowledged in time
// (0 when n is 0).
func (s *runner) write(ctx context.Context, name string, script *script, keys []string, n int, rec *recording, args ...any) (cmd *goredis.Cmd, confirmed int) {
	if n <= 0 {
		return s.run(ctx, name, script, keys, rec, args...), 0
	}
	if err := s.gate.admit(script); err != nil {
		return failedCmd(ctx, err), 0
	}
	args = rec.append(args)
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

// failedCmd is a command that failed with err without being sent.
func failedCmd(ctx context.Context, err error) *goredis.Cmd {
	cmd := goredis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// fellBack reports a fast script's answer that the full script must run.
func fellBack(cmd *goredis.Cmd) bool {
	n, err := cmd.Int64()
	return err == nil && n == fallback
}
