package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"strings"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

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
// Redis Cluster with events, clusterevents.go).
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
