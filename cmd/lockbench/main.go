// Command lockbench is lockapi's load tool. It drives a running lockapi
// server over HTTP (or, for the baseline, the same Lua scripts straight
// through go-redis) and prints one result line per run, key=value pairs that
// are easy to grep:
//
//	lockbench throughput [-c 32] [-k 100000] [-duration 10s]   acquire+release pairs/s, closed loop
//	lockbench throughput -against URL                           the same, alternating with a second server: its cost
//	lockbench rate -rate 8000|80%                               acquire latency at a fixed rate, open loop
//	lockbench baseline -redis URL                               the same cycle without HTTP
//	lockbench all -redis URL                                    baseline, then throughput, and their ratio
//	lockbench handoff [-waiters 10] [-n 2000]                   release-to-next-grant latency
//	lockbench idle -redis URL [-waiters 10000]                  the cost of parked long-poll waiters
//	lockbench redisson -redis URL                               Redis CPU per pair of a Redisson-style script pair
//	lockbench bare [-store redis|memory]                        lockapi's server CPU per pair against a bare front
//	lockbench cost -redis URL [-events-off URL] [-memory URL]   all of the CPU per pair comparisons, in one run
//	lockbench webhooks -redis URL [-hooks 1000] [-jobs 10]      webhook deliveries/s and Redis commands per delivery
//
// -record docs/BENCHMARKS.md adds the run to that file, with the machine it
// ran on and the project's targets beside the measured values. Progress goes
// to stderr, the result line to stdout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is everything a run can be told.
type config struct {
	mode       string
	server     string
	redisURL   string
	redisGiven bool // -redis was set explicitly: modes that only report Redis CPU use it then
	key        string
	h2c        bool   // plain-text HTTP/2 instead of HTTP/1.1
	prefix     string // lock names are prefix + a number
	keyPrefix  string // the server's Redis key prefix, for the baseline's store

	c, k              int
	inflight          int
	duration, warmup  time.Duration
	rate              string
	waiters, n        int
	ttl               time.Duration
	waitMs            int64
	window, settle    time.Duration
	serverPID         int
	record, label, vs string
	args              []string // as given, for the record
	load1             string   // the 1-minute load average before the run
	cpuProfile        string
	against           string
	rounds            int
	kind              lockKind

	// The comparison modes and the bare front (compare.go, bare.go).
	store     string // bare, bare-front: "redis" or "memory"
	events    bool   // bare-front: record events
	listen    string // bare-front: address to listen on
	eventsOff string // cost: a lockapi with events off, on the same Redis
	memory    string // cost: a lockapi on the memory store

	hooks, jobs int // webhooks: webhooks, and acquire+release pairs delivered to each

	sessions, leases int           // sessions: sessions, and leases bound to each
	sessionTTL       time.Duration // sessions: the sessions' TTL
}

// mode is a way to run lockbench: what it measures, for -h and errors, and
// the run that measures it.
type mode struct {
	name, help string
	run        func(ctx context.Context, cfg *config, log io.Writer) (*result, error)
}

// modes lists the modes. bare-front has no run: it serves until stopped.
var modes = []mode{
	{"throughput", "C clients doing acquire+release on K random names, closed loop: pairs/s and acquire latency", runThroughput},
	{"rate", "the same cycle open-loop at -rate pairs/s (or -rate 80% of a peak measured first): acquire latency from the scheduled start", runRate},
	{"baseline", "the same cycle through the store's Lua scripts on go-redis, no HTTP (needs -redis)", loadMode(baseline)},
	{"all", "baseline, then throughput, in one invocation: the ratio http/baseline (alias: both)", runAll},
	{"handoff", "W waiters long-polling one lock: release-to-next-grant latency over N hand-offs", runHandoffKind},
	{"idle", "N long-poll waiters parked on a held lock: the server's extra RSS, goroutines, Redis connections and commands/s (needs -redis)", runIdle},
	{"sse", "N idle event streams (GET /v1/events, default 1000): the server's extra RSS, goroutines and Redis commands/s (needs -redis)", runSSE},
	{"redisson", "the throughput cycle as a Redisson-style script pair straight from go-redis, unpipelined: Redis CPU per pair (needs -redis)", loadMode(redisson)},
	{"bare", "lockapi at -server against a bare front (net/http and the same store, nothing else) that lockbench starts: server CPU per pair, in alternating -rounds", runBare},
	{"cost", "Redisson-style baseline, lockapi, lockapi -events-off, bare front, and with -memory lockapi and a bare front on the memory store: Redis and server CPU per pair, in alternating -rounds (needs -redis)", runCost},
	{"webhooks", "H webhooks (-hooks, default 1000) to a local receiver, then -jobs acquire+release pairs delivered to each: deliveries/s, Redis commands per delivery and idle, acquire latency meanwhile (needs -redis; the server needs LOCKAPI_WEBHOOKS_ALLOW_PRIVATE=true)", runWebhooks},
	{"sessions", "S sessions (-sessions, default 1000) × L leases (-leases, default 100): renewal latency and Redis commands per renewal (with -redis), DELETE latency, and the time from a session's expiry to all its leases free", runSessions},
	{"bare-front", "serve the bare front on -listen (bare and cost start it themselves)", nil},
}

// loadMode is the mode of one closed-loop run that load makes.
func loadMode(load func(context.Context, *config, io.Writer) (*loadRun, error)) func(context.Context, *config, io.Writer) (*result, error) {
	return func(ctx context.Context, cfg *config, log io.Writer) (*result, error) {
		run, err := load(ctx, cfg, log)
		if err != nil {
			return nil, err
		}
		return cfg.loadResult(run), nil
	}
}

// Defaults that depend on the mode; a zero flag value means "the mode's".
const (
	defaultHandoffWaiters = 10
	defaultIdleWaiters    = 10000
)

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	cfg := &config{args: args}
	// The mode may come first as a subcommand, or as -mode.
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cfg.mode, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("lockbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: lockbench MODE [flags]   (or lockbench -mode MODE [flags])\n\nmodes:\n")
		for _, m := range modes {
			fmt.Fprintf(stderr, "  %-10s %s\n", m.name, m.help)
		}
		fmt.Fprintf(stderr, "\nflags:\n")
		fs.PrintDefaults()
	}
	mode := fs.String("mode", "", "the mode, if not given as the first argument")
	fs.StringVar(&cfg.server, "server", "http://127.0.0.1:8080", "lockapi server URL")
	fs.StringVar(&cfg.redisURL, "redis", "redis://127.0.0.1:6379/0", "Redis URL the server uses: the store for baseline, INFO and CLIENT LIST for idle, and CPU figures for the others when given")
	fs.BoolVar(&cfg.h2c, "h2c", false, "speak plain-text HTTP/2, multiplexing requests on a few connections (HTTP/1.1 otherwise: one connection per request in flight)")
	fs.StringVar(&cfg.key, "key", "", "API key, sent as Authorization: Bearer, when the server requires one")
	fs.StringVar(&cfg.prefix, "prefix", "bench:", "lock name prefix")
	fs.StringVar(&cfg.keyPrefix, "key-prefix", "lockapi:", "the server's Redis key prefix (LOCKAPI_KEY_PREFIX), for baseline")
	fs.IntVar(&cfg.c, "c", 32, "concurrent clients (throughput, baseline, all, and rate's peak measurement)")
	fs.IntVar(&cfg.k, "k", 100000, "number of lock names, one picked at random per cycle")
	fs.IntVar(&cfg.inflight, "inflight", 0, "rate: most cycles in flight at once (default 4×c)")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "measured time of a load run")
	fs.DurationVar(&cfg.warmup, "warmup", 2*time.Second, "unmeasured time before it")
	fs.StringVar(&cfg.rate, "rate", "80%", "rate: target pairs/s, or a percentage of the peak that a closed-loop run measures first")
	fs.IntVar(&cfg.waiters, "waiters", 0, fmt.Sprintf("waiting clients: handoff (default %d), idle (default %d)", defaultHandoffWaiters, defaultIdleWaiters))
	fs.IntVar(&cfg.n, "n", 2000, "handoff: number of measured hand-offs")
	fs.DurationVar(&cfg.ttl, "ttl", 30*time.Second, "lease TTL of the acquires")
	fs.Int64Var(&cfg.waitMs, "wait-ms", 3_600_000, "wait_ms of long-poll acquires; the server clamps it to its maximum (LOCKAPI_MAX_WAIT)")
	fs.DurationVar(&cfg.window, "window", 10*time.Second, "idle: measurement window once the waiters are parked")
	fs.DurationVar(&cfg.settle, "settle", 3*time.Second, "handoff, idle: time to let waiters park when the server has no lockapi_waiters metric")
	fs.IntVar(&cfg.serverPID, "server-pid", 0, "the server's process id, for CPU and RSS from /proc (default: found from the -server port when it is on loopback)")
	fs.StringVar(&cfg.record, "record", "", "add this run to a benchmarks file, e.g. docs/BENCHMARKS.md")
	fs.StringVar(&cfg.label, "label", "", "a label for the run (e.g. metrics-on), so that runs can be told apart and compared")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write lockbench's own CPU profile to this file, to check that the tool is not what is measured")
	fs.StringVar(&cfg.against, "against", "", "throughput: a second server URL to compare -server with, in alternating rounds (e.g. metrics off): the cost of -server")
	fs.IntVar(&cfg.rounds, "rounds", 4, "throughput -against, bare, cost: rounds on each server")
	fs.StringVar(&cfg.store, "store", "redis", "bare, bare-front: the store of the bare front, redis or memory (bare: lockapi at -server must use the same)")
	fs.BoolVar(&cfg.events, "events", true, "bare-front: record events (bare and cost give it the setting of the lockapi compared)")
	fs.StringVar(&cfg.listen, "listen", "127.0.0.1:0", "bare-front: address to listen on")
	fs.StringVar(&cfg.eventsOff, "events-off", "", "cost: URL of a lockapi with LOCKAPI_EVENTS=false on the same Redis (another LOCKAPI_KEY_PREFIX)")
	fs.StringVar(&cfg.memory, "memory", "", "cost: URL of a lockapi on the memory store")
	fs.StringVar(&cfg.vs, "vs", "", "with -record: compare this throughput run with the recorded run of that label (e.g. -label metrics-on -vs metrics-off: the metrics overhead)")
	fs.StringVar(&cfg.kind.name, "kind", "lock", "throughput, rate, handoff: the kind of lock: lock, shared, semaphore (-limit), fair, or multi (-names at once)")
	fs.IntVar(&cfg.kind.limit, "limit", 4, "-kind semaphore: permits per name (handoff uses 1, so that every grant is a hand-off)")
	fs.IntVar(&cfg.kind.names, "names", 3, "-kind multi: names per multi-lock")
	fs.IntVar(&cfg.hooks, "hooks", targetHooks, hooksFlagHelp)
	fs.IntVar(&cfg.jobs, "jobs", 10, "webhooks: acquire+release pairs, two events each, delivered to every webhook")
	fs.IntVar(&cfg.sessions, "sessions", targetSessions, "sessions: number of sessions")
	fs.IntVar(&cfg.leases, "leases", targetSessionLeases, "sessions: leases bound to each session")
	fs.DurationVar(&cfg.sessionTTL, "session-ttl", 10*time.Second, "sessions: the sessions' TTL (long enough to bind every lease and renew once)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *mode != "" {
		cfg.mode = *mode
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "redis" {
			cfg.redisGiven = true
		}
	})
	if cfg.mode == "both" {
		cfg.mode = "all"
	}
	known := false
	for _, m := range modes {
		known = known || m.name == cfg.mode
	}
	switch {
	case cfg.mode == "":
		return nil, errors.New("which mode? lockbench -h lists them")
	case !known:
		return nil, fmt.Errorf("unknown mode %q; lockbench -h lists them", cfg.mode)
	case cfg.c < 1 || cfg.k < 1 || cfg.n < 1 || cfg.hooks < 1 || cfg.jobs < 1 || cfg.sessions < 1 || cfg.leases < 1 || cfg.waiters < 0 || cfg.inflight < 0:
		return nil, errors.New("-c, -k, -n, -hooks, -jobs, -sessions and -leases must be at least 1; -waiters and -inflight not negative")
	case cfg.duration <= 0 || cfg.warmup < 0 || cfg.window <= 0 || cfg.settle < 0:
		return nil, errors.New("-duration and -window must be positive; -warmup and -settle not negative")
	case cfg.against != "" && (cfg.mode != "throughput" || cfg.rounds < 1):
		return nil, errors.New("-against compares throughput: it goes with the throughput mode and -rounds of at least 1")
	case !slices.Contains([]string{"lock", "shared", "semaphore", "fair", "multi"}, cfg.kind.name):
		return nil, fmt.Errorf("-kind %q: want lock, shared, semaphore, fair or multi", cfg.kind.name)
	case cfg.kind.limit < 1 || cfg.kind.limit > 10000 || cfg.kind.names < 1 || cfg.kind.names > 64:
		return nil, errors.New("-limit is 1-10000 and -names 1-64")
	case cfg.store != "redis" && cfg.store != "memory":
		return nil, fmt.Errorf("-store %q: want redis or memory", cfg.store)
	case (cfg.mode == "bare" || cfg.mode == "cost") && cfg.rounds < 1:
		return nil, errors.New("-rounds must be at least 1")
	case cfg.vs != "" && cfg.record == "":
		return nil, errors.New("-vs compares with a recorded run: it needs -record")
	}
	if strings.ContainsAny(cfg.label, " |") {
		return nil, fmt.Errorf("-label %q: no spaces or |", cfg.label)
	}
	if cfg.inflight == 0 {
		cfg.inflight = 4 * cfg.c
	}
	if cfg.waiters == 0 {
		cfg.waiters = defaultHandoffWaiters
		if cfg.mode == "idle" {
			cfg.waiters = defaultIdleWaiters
		}
		if cfg.mode == "sse" {
			cfg.waiters = targetSSEStreams
		}
	}
	return cfg, nil
}

// run runs lockbench and returns its exit status. It takes its context,
// arguments and output so that tests can run it in-process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "lockbench: %v\n", err)
		return 2
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "lockbench: -cpuprofile: %v\n", err)
			return 2
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	// The load average before the run says how busy the machine was with
	// other work; other_cpu_cores (see addCPU) says it for the window.
	cfg.load1 = loadAverage()
	if cfg.mode == "bare-front" {
		if err := runBareFront(ctx, cfg, stdout); err != nil {
			fmt.Fprintf(stderr, "lockbench bare-front: %v\n", err)
			return 1
		}
		return 0
	}
	i := slices.IndexFunc(modes, func(m mode) bool { return m.name == cfg.mode })
	res, err := modes[i].run(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "lockbench %s: %v\n", cfg.mode, err)
		return 1
	}
	if cfg.record != "" {
		if err := record(ctx, cfg, res, stderr); err != nil {
			fmt.Fprintf(stdout, "%s\n", res.line())
			fmt.Fprintf(stderr, "lockbench: -record %s: %v\n", cfg.record, err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "%s\n", res.line())
	return 0
}

// newResult starts a result line with the run's mode and label.
func (cfg *config) newResult() *result {
	r := &result{}
	r.set("mode", cfg.mode)
	if cfg.kind.name != "lock" {
		r.set("kind", cfg.kind.name)
	}
	if cfg.label != "" {
		r.set("label", cfg.label)
	}
	if cfg.load1 != "" {
		r.set("load1", cfg.load1)
	}
	return r
}

// meter returns the CPU meter of a run against the HTTP server, and a func
// that releases it. Redis is sampled only when -redis was given: the default
// URL might name another Redis than the server's.
func (cfg *config) meter(ctx context.Context, log io.Writer) (*cpuMeter, func()) {
	m := &cpuMeter{pid: cfg.serverPID}
	if m.pid == 0 {
		m.pid = serverPID(cfg.server)
	}
	if !cfg.redisGiven {
		return m, func() {}
	}
	rdb, err := openRedis(ctx, cfg.redisURL, 1)
	if err != nil {
		fmt.Fprintf(log, "lockbench: no Redis CPU figures: %v\n", err)
		return m, func() {}
	}
	m.rdb = rdb
	return m, func() { rdb.Close() }
}

// commandLine is the run's command line as a shell would take it.
func (cfg *config) commandLine() string {
	var b strings.Builder
	b.WriteString("lockbench")
	for _, a := range cfg.args {
		b.WriteByte(' ')
		if a == "" || strings.ContainsAny(a, " \t'\"$&;|<>()*?!`\\#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		b.WriteString(a)
	}
	return b.String()
}
