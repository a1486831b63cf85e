package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The comparison modes (redisson, bare, cost) measure the CPU an
// acquire+release pair costs Redis and the server, for lockapi and for the
// baselines it is judged against, under the same closed-loop load. On a
// small shared machine one run of each would mostly measure the machine's
// mood, so each setup runs once per round, the rounds alternate their order
// (A B C, C B A, ...), and the result is each figure's median over the
// rounds with every round's value beside it.

// Targets of the comparison modes (issue 12, docs/BENCHMARKS.md).
const (
	targetRedisUsPerPair = 32.0 // Redis CPU µs per pair through lockapi, c=32, k=100000, batched
	targetBareRatio      = 1.15 // lockapi's server CPU per pair over the bare front's (issue 23)
)

// contender is one setup of a comparison, measured once per round.
type contender struct {
	key  string // prefix of its fields in the result line
	what string // for the progress log
	run  func(ctx context.Context) (*loadRun, error)
	runs []*loadRun
}

// measureRounds runs every contender once per round, forward in even
// rounds and backward in odd ones.
func measureRounds(ctx context.Context, cfg *config, cs []*contender, log io.Writer) error {
	for round := range cfg.rounds {
		order := slices.Clone(cs)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, c := range order {
			fmt.Fprintf(log, "lockbench: round %d of %d: %s\n", round+1, cfg.rounds, c.what)
			run, err := c.run(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", c.what, err)
			}
			c.runs = append(c.runs, run)
		}
	}
	return nil
}

// perRun is a figure of one run, with whether the run measured it.
type perRun func(*loadRun) (float64, bool)

func pairsPerSec(l *loadRun) (float64, bool) { return l.pairsPerSec(), true }

// median returns the median of a figure over the contender's runs (the
// upper one of an even count) and every run's value, in round order; ok is
// false unless every run measured it.
func (c *contender) median(f perRun) (med float64, all []float64, ok bool) {
	for _, r := range c.runs {
		v, ok := f(r)
		if !ok {
			return 0, nil, false
		}
		all = append(all, v)
	}
	return medianOf(all), all, len(all) > 0
}

func medianOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[len(s)/2]
}

func joinFloats(vs []float64, prec int) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = strconv.FormatFloat(v, 'f', prec, 64)
	}
	return strings.Join(out, ",")
}

// report writes the contender's medians and rounds: pairs/s, Redis and
// server CPU µs per pair, Redis commands per pair, and the errors of all
// rounds.
func (c *contender) report(r *result) {
	for _, f := range []struct {
		name string
		get  perRun
		prec int
	}{
		{"pairs_per_s", pairsPerSec, 0},
		{"redis_us_per_pair", (*loadRun).redisPerPair, 1},
		{"server_us_per_pair", (*loadRun).serverPerPair, 1},
	} {
		if med, all, ok := c.median(f.get); ok {
			r.setFloat(c.key+"_"+f.name, med, f.prec)
			r.set(c.key+"_"+f.name+"_rounds", joinFloats(all, f.prec))
		}
	}
	if med, _, ok := c.median((*loadRun).redisCmdsPerPair); ok {
		r.setFloat(c.key+"_redis_cmds_per_pair", med, 1)
	}
	if med, _, ok := c.median((*loadRun).redisReadsPerPair); ok {
		r.setFloat(c.key+"_redis_reads_per_pair", med, 2)
	}
	var errs int64
	for _, run := range c.runs {
		errs += run.stats.errors
	}
	r.setInt(c.key+"_errors", errs)
}

// ratio is the median over rounds of a's figure over b's in the same round,
// and every round's ratio.
func ratio(a, b *contender, f perRun) (med float64, all []float64, ok bool) {
	for i := range a.runs {
		x, okA := f(a.runs[i])
		y, okB := f(b.runs[i])
		if !okA || !okB || y <= 0 {
			return 0, nil, false
		}
		all = append(all, x/y)
	}
	return medianOf(all), all, len(all) > 0
}

// httpContender measures a server over HTTP, as throughput does. pid is the
// server's process (0: found from its port); withRedis samples -redis.
func httpContender(cfg *config, key, what, server string, pid int, withRedis bool, log io.Writer) *contender {
	c := *cfg
	c.server, c.serverPID = server, pid
	c.redisGiven = c.redisGiven && withRedis
	return &contender{key: key, what: what, run: func(ctx context.Context) (*loadRun, error) {
		return throughput(ctx, &c, log)
	}}
}

// redissonContender measures the Redisson-style baseline.
func redissonContender(cfg *config, log io.Writer) *contender {
	return &contender{key: "redisson", what: "Redisson-style script pair on go-redis", run: func(ctx context.Context) (*loadRun, error) {
		return redisson(ctx, cfg, log)
	}}
}

// serverEvents tells whether the server at url records events: GET
// /v1/events streams (200) when it does and answers 501 when it does not.
// known is false when it answered neither (an API key is missing, say).
func serverEvents(ctx context.Context, cfg *config, url string) (on, known bool) {
	cl, err := newClient(url, cfg.key, 1, false)
	if err != nil {
		return false, false
	}
	defer cl.close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cl.base+"/v1/events", nil)
	if err != nil {
		return false, false
	}
	if cl.auth != "" {
		req.Header.Set("Authorization", cl.auth)
	}
	resp, err := cl.hc.Do(req)
	if err != nil {
		return false, false
	}
	resp.Body.Close() // a stream: do not wait for its end
	switch resp.StatusCode {
	case http.StatusOK:
		return true, true
	case http.StatusNotImplemented:
		return false, true
	}
	return false, false
}

// mustSeeServers fails unless the CPU of each server (a lockapi compared
// with a bare front) can be read from /proc: it must run on this machine.
func mustSeeServers(cfg *config, urls ...string) error {
	for i, u := range urls {
		if u == "" || (i == 0 && cfg.serverPID > 0) {
			continue
		}
		if serverPID(u) == 0 {
			return fmt.Errorf("cannot read the CPU of the server at %s: it must listen on loopback on this machine (or give -server-pid)", u)
		}
	}
	return nil
}

// bareContender starts a bare front that matches the server at like (its
// events setting) on store, and returns its contender and a func that stops
// it.
func bareContender(ctx context.Context, cfg *config, key, store, like string, log io.Writer) (*contender, func(), error) {
	events, known := serverEvents(ctx, cfg, like)
	if !known {
		return nil, nil, fmt.Errorf("%s: cannot tell whether it records events (GET /v1/events answered neither 200 nor 501)", like)
	}
	p, err := startBareFront(ctx, cfg, store, events, log)
	if err != nil {
		return nil, nil, err
	}
	what := fmt.Sprintf("bare front on the %s store (events %v)", store, events)
	return httpContender(cfg, key, what, p.url, p.pid, store == "redis", log), p.stop, nil
}

// runBare is the bare mode: lockapi at -server against a bare front on the
// same store, in alternating rounds.
func runBare(ctx context.Context, cfg *config, log io.Writer) (*result, error) {
	if err := mustSeeServers(cfg, cfg.server); err != nil {
		return nil, err
	}
	onRedis := cfg.store == "redis"
	lockapi := httpContender(cfg, "lockapi", "lockapi at "+cfg.server, cfg.server, cfg.serverPID, onRedis, log)
	bare, stop, err := bareContender(ctx, cfg, "bare", cfg.store, cfg.server, log)
	if err != nil {
		return nil, err
	}
	defer stop()
	if err := measureRounds(ctx, cfg, []*contender{lockapi, bare}, log); err != nil {
		return nil, err
	}
	r := cfg.comparisonResult(lockapi, bare)
	// Without both servers' CPU (lockapi in this process, as in the tests)
	// the result has no ratio.
	if t, ok := bareTarget(lockapi, bare, cfg.store); ok {
		r.setFloat("server_cpu_ratio", t.ratio, 3)
		r.set("server_cpu_ratio_rounds", joinFloats(t.rounds, 3))
		r.targets = append(r.targets, t.target)
	}
	return r, nil
}

// comparisonResult starts the result line of a comparison with the load
// and each contender's figures.
func (cfg *config) comparisonResult(cs ...*contender) *result {
	r := cfg.newResult()
	r.setInt("c", int64(cfg.c))
	r.setInt("k", int64(cfg.k))
	r.set("duration", cfg.duration.String())
	r.setInt("rounds", int64(cfg.rounds))
	for _, c := range cs {
		c.report(r)
	}
	return r
}

// ratioTarget is a server CPU comparison with its verdict.
type ratioTarget struct {
	target
	ratio  float64
	rounds []float64
}

// bareTarget judges lockapi's server CPU per pair against the bare front's.
func bareTarget(lockapi, bare *contender, store string) (ratioTarget, bool) {
	med, all, ok := ratio(lockapi, bare, (*loadRun).serverPerPair)
	if !ok {
		return ratioTarget{}, false
	}
	a, _, _ := lockapi.median((*loadRun).serverPerPair)
	b, _, _ := bare.median((*loadRun).serverPerPair)
	return ratioTarget{
		target: target{
			What: fmt.Sprintf("lockapi server CPU per pair vs the bare front, %s store (median of per-round ratios)", store),
			Want: fmt.Sprintf("≤ %.2f×", targetBareRatio),
			Got:  fmt.Sprintf("%.2f× (%.0f vs %.0f µs; rounds %s)", med, a, b, joinFloats(all, 2)),
			Pass: med <= targetBareRatio,
		},
		ratio: med, rounds: all,
	}, true
}

// redisTarget judges the Redis CPU per pair of a lockapi contender.
func redisTarget(cfg *config, c, baseline *contender, what string) (target, bool) {
	med, all, ok := c.median((*loadRun).redisPerPair)
	if !ok {
		return target{}, false
	}
	got := fmt.Sprintf("%.1f µs (rounds %s)", med, joinFloats(all, 1))
	if b, _, ok := baseline.median((*loadRun).redisPerPair); ok {
		got += fmt.Sprintf("; Redisson-style %.1f µs", b)
	}
	return target{
		What: fmt.Sprintf("Redis CPU per pair through lockapi, %s (c=32, k=100000, batched)", what),
		Want: fmt.Sprintf("≤ %.0f µs", targetRedisUsPerPair),
		Got:  got,
		Pass: med <= targetRedisUsPerPair,
		NA:   cfg.c != 32 || cfg.k != 100000,
	}, true
}

// runCost is the cost mode: every comparison of issue 12 in one run. The
// Redisson-style baseline, lockapi at -server (events on), the lockapi at
// -events-off (on the same Redis) and a bare front like -server; with
// -memory, a lockapi on the memory store and a bare front on one too.
func runCost(ctx context.Context, cfg *config, log io.Writer) (*result, error) {
	if !cfg.redisGiven {
		return nil, fmt.Errorf("cost measures Redis CPU: give -redis, the Redis that -server uses")
	}
	if err := mustSeeServers(cfg, cfg.server, cfg.eventsOff, cfg.memory); err != nil {
		return nil, err
	}
	base := redissonContender(cfg, log)
	lockapi := httpContender(cfg, "lockapi", "lockapi at "+cfg.server, cfg.server, cfg.serverPID, true, log)
	bare, stop, err := bareContender(ctx, cfg, "bare", "redis", cfg.server, log)
	if err != nil {
		return nil, err
	}
	defer stop()
	cs := []*contender{base, lockapi, bare}
	var noEvents, lockapiMem, bareMem *contender
	if cfg.eventsOff != "" {
		noEvents = httpContender(cfg, "lockapi_events_off", "lockapi at "+cfg.eventsOff, cfg.eventsOff, 0, true, log)
		cs = append(cs, noEvents)
	}
	if cfg.memory != "" {
		lockapiMem = httpContender(cfg, "lockapi_memory", "lockapi at "+cfg.memory, cfg.memory, 0, false, log)
		var stopMem func()
		bareMem, stopMem, err = bareContender(ctx, cfg, "bare_memory", "memory", cfg.memory, log)
		if err != nil {
			return nil, err
		}
		defer stopMem()
		cs = append(cs, lockapiMem, bareMem)
	}
	if err := measureRounds(ctx, cfg, cs, log); err != nil {
		return nil, err
	}
	r := cfg.comparisonResult(cs...)
	if t, ok := redisTarget(cfg, lockapi, base, "events on"); ok {
		r.targets = append(r.targets, t)
	}
	if noEvents != nil {
		if t, ok := redisTarget(cfg, noEvents, base, "events off"); ok {
			r.targets = append(r.targets, t)
		}
	}
	if t, ok := bareTarget(lockapi, bare, "Redis"); ok {
		r.setFloat("server_cpu_ratio", t.ratio, 3)
		r.set("server_cpu_ratio_rounds", joinFloats(t.rounds, 3))
		r.targets = append(r.targets, t.target)
	}
	if lockapiMem != nil {
		if t, ok := bareTarget(lockapiMem, bareMem, "memory"); ok {
			r.setFloat("memory_server_cpu_ratio", t.ratio, 3)
			r.set("memory_server_cpu_ratio_rounds", joinFloats(t.rounds, 3))
			r.targets = append(r.targets, t.target)
		}
	}
	return r, nil
}
