package redis

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/layout"
)

var (
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/acquire_fast.lua
	acquireFastLua string
	//go:embed scripts/renew.lua
	renewLua string
	//go:embed scripts/update.lua
	updateLua string
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
	//go:embed scripts/session_create.lua
	sessionCreateLua string
	//go:embed scripts/session_renew.lua
	sessionRenewLua string
	//go:embed scripts/session_get.lua
	sessionGetLua string
	//go:embed scripts/session_end.lua
	sessionEndLua string
	//go:embed scripts/session_sweep.lua
	sessionSweepLua string
	//go:embed scripts/session_join.lua
	sessionJoinLua string
	//go:embed scripts/session_shadow.lua
	sessionShadowLua string
)

// scriptSet is the store's library (below) and its entry points.
type scriptSet struct {
	lib                                                             *library
	acquire, acquireFast, renew, release, releaseFast, forceRelease *script
	inspect, abandon, leave, expire                                 *script
	raise                                                           *script // raisetoken.go
	update                                                          *script // update.go
	// The session scripts (sessions.go), and those of a session's shadows
	// on Redis Cluster (clustersessions.go).
	sessionCreate, sessionRenew, sessionGet, sessionEnd, sessionSweep *script
	sessionJoin, sessionShadow                                        *script
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
		entry{name: "session_create", body: sessionCreateLua, ev: 4},
		entry{name: "session_renew", body: sessionRenewLua, ev: 4},
		entry{name: "session_get", body: sessionGetLua, ev: 4, readOnly: true},
		entry{name: "session_end", body: sessionEndLua, ev: 4},
		entry{name: "session_sweep", body: sessionSweepLua, ev: 4},
		entry{name: "session_join", body: sessionJoinLua, ev: 4},
		entry{name: "session_shadow", body: sessionShadowLua, ev: 4},
		entry{name: "update", body: updateLua, ev: 8},
	)
	f := l.funcs
	return &scriptSet{lib: l, acquire: f[0], acquireFast: f[1], renew: f[2], release: f[3], releaseFast: f[4],
		forceRelease: f[5], inspect: f[6], abandon: f[7], leave: f[8], expire: f[9], raise: f[10],
		sessionCreate: f[11], sessionRenew: f[12], sessionGet: f[13], sessionEnd: f[14], sessionSweep: f[15],
		sessionJoin: f[16], sessionShadow: f[17], update: f[18]}
}

// The store's Lua is lib.lua and one file per entry point (scripts/). On
// Redis 7 and later it is loaded as one library of Redis Functions, once
// per Redis (a Redis that lost it, after a restart or a FUNCTION FLUSH, is
// given it again), and each call is an FCALL: the helpers of lib.lua are
// defined when the library loads, not on every call (that was 55,000 of
// the 380,000 instructions Redis ran for a plain acquire and release). On
// Redis 6.2, which has no Functions, each entry point runs with EVALSHA
// (EVAL when Redis lacks it), lib.lua prepended. Both forms run the same
// code: each file becomes the body of a function, which begin (lib.lua)
// hands the call's keys and arguments.

// library is the store's Lua, in both forms.
type library struct {
	name  string // lockapi_<hash of the code>: an edit makes another library
	code  string // FUNCTION LOAD's argument
	funcs []*script
	// mode is what the Redis behind the store speaks: modeUnknown until a
	// call tells, then modeFunctions, or modeEval once Redis refused
	// Functions (6.2, an ACL, a renamed command).
	mode atomic.Int32
}

const (
	modeUnknown int32 = iota
	modeFunctions
	modeEval
)

// script is one entry point of a library.
type script struct {
	lib  *library
	fn   string          // its function in the library
	eval *goredis.Script // its EVAL form
	// readOnly: it writes nothing, so it runs while a failover holds
	// writes (writeGate).
	readOnly bool
}

// entry is a script file as the library takes it.
type entry struct {
	name string // the function's suffix: acquire, release, ...
	body string // the file
	// ev is where the event log's key is among the script's keys (see
	// begin in lib.lua).
	ev int
	// readOnly marks a script that writes nothing, so that Redis runs it
	// even when it refuses writes (out of memory, say).
	readOnly bool
}

// newLibrary builds the library of entries on lib. crossSlot lets the
// scripts write keys of other slots than their name's (see scripts on
// Redis Cluster with events, clusterjournal.go).
func newLibrary(lib string, crossSlot bool, entries ...entry) *library {
	var body strings.Builder
	body.WriteString(lib)
	for _, e := range entries {
		body.WriteString("\nlocal function script_" + e.name + "()\n" + e.body + "\nend\n")
	}
	sum := sha1.Sum([]byte(body.String() + registration(entries, "", crossSlot)))
	l := &library{name: "lockapi_" + hex.EncodeToString(sum[:])[:16]}
	l.code = "#!lua name=" + l.name + "\n" + body.String() + registration(entries, l.name+"_", crossSlot)

	head := ""
	if crossSlot {
		head = "#!lua flags=allow-cross-slot-keys\n"
	}
	for _, e := range entries {
		src := head + "local EVAL_KEYS, EVAL_ARGV = KEYS, ARGV\n" + lib +
			"\nlocal function script_" + e.name + "()\n" + e.body + "\nend\n" +
			"begin(EVAL_KEYS, EVAL_ARGV, " + strconv.Itoa(e.ev) + ")\nreturn script_" + e.name + "()\n"
		l.funcs = append(l.funcs, &script{lib: l, fn: l.name + "_" + e.name, eval: goredis.NewScript(src), readOnly: e.readOnly})
	}
	return l
}

// registration is the Lua that registers the entries as functions named
// prefix + entry name.
func registration(entries []entry, prefix string, crossSlot bool) string {
	var b strings.Builder
	for _, e := range entries {
		var flags []string
		if crossSlot {
			flags = append(flags, "'allow-cross-slot-keys'")
		}
		if e.readOnly {
			flags = append(flags, "'no-writes'")
		}
		b.WriteString("redis.register_function{function_name = '" + prefix + e.name +
			"', flags = {" + strings.Join(flags, ", ") + "}, callback = function(keys, args)\n" +
			"\tbegin(keys, args, " + strconv.Itoa(e.ev) + ")\n\treturn script_" + e.name + "()\nend}\n")
	}
	return b.String()
}

// load gives Redis the library; a Redis that has it already is fine. On
// Redis Cluster every master gets it. A Redis that refuses FUNCTION LOAD
// (renamed away, or not granted to lockapi's user) gets the scripts with
// EVAL from then on, as a Redis without Functions does.
func (l *library) load(ctx context.Context, rdb goredis.UniversalClient) error {
	err := l.loadAll(ctx, rdb)
	if refusesFunctions(err) {
		l.mode.Store(modeEval)
		return nil
	}
	return err
}

func (l *library) loadAll(ctx context.Context, rdb goredis.UniversalClient) error {
	loadOn := func(ctx context.Context, c goredis.Cmdable) error {
		err := c.FunctionLoad(ctx, l.code).Err()
		if err != nil && strings.Contains(err.Error(), "already exists") {
			return nil
		}
		return err
	}
	if c, ok := clusterOf(rdb); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error { return loadOn(ctx, m) })
	}
	return loadOn(ctx, rdb)
}

// clusterOf returns the cluster client behind rdb, if it is one.
func clusterOf(rdb goredis.UniversalClient) (*goredis.ClusterClient, bool) {
	switch c := rdb.(type) {
	case *goredis.ClusterClient:
		return c, true
	case *Client:
		return clusterOf(c.UniversalClient)
	}
	return nil, false
}

// useEval reports whether calls go through EVAL: Redis said it has no
// Functions.
func (l *library) useEval() bool { return l.mode.Load() == modeEval }

// noted learns from a call's error what Redis speaks, and reports what the
// caller must do: load the library and call again (Redis lacks it), call
// again with EVAL (Redis has no Functions), or nothing.
func (l *library) noted(err error) (load, again bool) {
	switch {
	case err == nil:
		l.mode.CompareAndSwap(modeUnknown, modeFunctions)
	case isFunctionNotFound(err):
		l.mode.CompareAndSwap(modeUnknown, modeFunctions)
		return true, true
	case refusesFunctions(err):
		l.mode.Store(modeEval)
		return false, true
	}
	return false, false
}

func isFunctionNotFound(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "ERR Function not found")
}

// refusesFunctions recognises the answer to FCALL or FUNCTION of a Redis
// older than 7.0, one where the command is renamed away, or one whose ACL
// does not grant it to lockapi's user: nothing ran.
func refusesFunctions(err error) bool {
	if err == nil {
		return false
	}
	msg := strings.ToLower(err.Error())
	return (strings.HasPrefix(msg, "err unknown command") || strings.HasPrefix(msg, "noperm")) &&
		(strings.Contains(msg, "fcall") || strings.Contains(msg, "function"))
}

// queue adds a call of the script to a pipeline (or runs it on a client):
// FCALL, or EVALSHA once Redis said it has no Functions.
func (s *script) queue(ctx context.Context, c goredis.Cmdable, keys []string, args []any) *goredis.Cmd {
	if s.lib.useEval() {
		return s.eval.EvalSha(ctx, c, keys, args...)
	}
	return c.FCall(ctx, s.fn, keys, args...)
}

// run calls the script on rdb: FCALL, and when Redis lacks the library,
// FUNCTION LOAD and FCALL again; EVALSHA (EVAL when Redis lacks the
// script) on a Redis without Functions. A call is sent again only when
// Redis refused it without running it.
func (s *script) run(ctx context.Context, rdb goredis.UniversalClient, keys []string, args []any) *goredis.Cmd {
	var cmd *goredis.Cmd
	for range 3 {
		if s.lib.useEval() {
			return s.eval.Run(ctx, rdb, keys, args...)
		}
		cmd = rdb.FCall(ctx, s.fn, keys, args...)
		load, again := s.lib.noted(cmd.Err())
		if load {
			if err := s.lib.load(ctx, rdb); err != nil {
				cmd.SetErr(err)
				return cmd
			}
		}
		if !again {
			break
		}
	}
	return cmd
}

// evalNow adds a call of the script to a pipeline in a form that cannot be
// refused for want of a cached script: FCALL, or EVAL on a Redis without
// Functions. A refused FCALL (the library is missing) is for the caller to
// send again after s.lib.noted.
func (s *script) evalNow(ctx context.Context, c goredis.Cmdable, keys []string, args []any) *goredis.Cmd {
	if s.lib.useEval() {
		return s.eval.Eval(ctx, c, keys, args...)
	}
	return c.FCall(ctx, s.fn, keys, args...)
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
	// unknown is told of a lock's record of a layout this version does
	// not know, which a script refused (leaselayout.go).
	unknown layout.Unknown
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
	if err := s.gate.admit(ctx, script); err != nil {
		return failedCmd(ctx, err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	var cmd *goredis.Cmd
	for attempt := 1; ; attempt++ {
		all := rec.append(args)
		if s.batch != nil {
			cmd = s.batch.run(ctx, script, keys, all)
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
	s.noteLayout(cmd.Err(), firstKey(keys))
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
	if err := s.gate.admit(ctx, script); err != nil {
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
	s.noteLayout(cmd.Err(), firstKey(keys))
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
