package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// This file drives the acquire+release cycles that throughput, rate and
// baseline measure. The three differ only in how one cycle is done (over
// HTTP, or straight on the store) and in how cycles are started (closed loop:
// each client starts its next cycle when the last one ends; open loop: on a
// fixed schedule).

// outcome is how one cycle ended.
type outcome int

const (
	pair     outcome = iota // acquired and released
	conflict                // another client held the name: 409, not a pair
	failed                  // anything else
)

// cycler does cycles for one client. acquire is the acquire's latency alone,
// from just before its request to the end of its response.
type cycler interface {
	cycle(ctx context.Context, name string) (acquire time.Duration, out outcome, err error)
}

// names is the set of K lock names the clients pick from at random, built
// once so that picking one costs nothing.
func names(prefix string, k int) []string {
	out := make([]string, k)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// loadStats is what one worker counts; workers keep their own and the driver
// merges them at the end.
type loadStats struct {
	acq       hist
	pairs     int64
	conflicts int64
	errors    int64
	firstErr  error
}

func (s *loadStats) merge(o *loadStats) {
	s.acq.Merge(&o.acq)
	s.pairs += o.pairs
	s.conflicts += o.conflicts
	s.errors += o.errors
	if s.firstErr == nil {
		s.firstErr = o.firstErr
	}
}

func (s *loadStats) count(lat time.Duration, out outcome, err error) {
	switch out {
	case pair:
		s.pairs++
		s.acq.Record(lat)
	case conflict:
		s.conflicts++
	default:
		s.errors++
		if s.firstErr == nil {
			s.firstErr = err
		}
	}
}

// loadRun is the outcome of one timed load phase.
type loadRun struct {
	stats    loadStats
	measured time.Duration // the length of the measured window
	cpu      [2]cpuSample  // at the window's start and end
	late     int64         // open loop: cycles started more than 1 ms behind schedule
}

// pairsPerSec is the measured rate of completed pairs.
func (l *loadRun) pairsPerSec() float64 {
	if l.measured <= 0 {
		return 0
	}
	return float64(l.stats.pairs) / l.measured.Seconds()
}

// report writes the run's counts, rate, latencies and CPU to r.
func (l *loadRun) report(r *result) {
	r.setInt("pairs", l.stats.pairs)
	r.setFloat("pairs_per_s", l.pairsPerSec(), 0)
	r.setInt("conflicts", l.stats.conflicts)
	r.setInt("errors", l.stats.errors)
	r.addLatencies("acq", &l.stats.acq)
	addCPU(r, l.cpu[0], l.cpu[1])
	if us, ok := l.cpuPerPair(); ok {
		r.setFloat("cpu_us_per_pair", us, 0)
	}
	if us, ok := l.serverPerPair(); ok {
		r.setFloat("server_us_per_pair", us, 1)
	}
	if us, ok := l.redisPerPair(); ok {
		r.setFloat("redis_us_per_pair", us, 1)
	}
	if n, ok := l.redisCmdsPerPair(); ok {
		r.setFloat("redis_cmds_per_pair", n, 1)
	}
	if n, ok := l.redisReadsPerPair(); ok {
		r.setFloat("redis_reads_per_pair", n, 2)
	}
}

// serverPerPair is the server's CPU time per pair, from /proc/<pid>/stat.
func (l *loadRun) serverPerPair() (float64, bool) {
	a, b := l.cpu[0], l.cpu[1]
	if l.stats.pairs == 0 || !a.haveServer || !b.haveServer {
		return 0, false
	}
	return float64((b.server - a.server).Nanoseconds()) / 1e3 / float64(l.stats.pairs), true
}

// redisPerPair is Redis's CPU time per pair: the change of used_cpu_user
// plus used_cpu_sys (INFO cpu, Redis's own getrusage: every thread of the
// redis-server process) over the measured window. Everything Redis did in
// the window counts, so the Redis must serve this run alone.
func (l *loadRun) redisPerPair() (float64, bool) {
	a, b := l.cpu[0], l.cpu[1]
	if l.stats.pairs == 0 || !a.haveRedis || !b.haveRedis {
		return 0, false
	}
	return float64((b.redis - a.redis).Nanoseconds()) / 1e3 / float64(l.stats.pairs), true
}

// redisCmdsPerPair is how many commands Redis ran per pair, script calls
// not counted but the commands the scripts ran (see scriptCommands).
func (l *loadRun) redisCmdsPerPair() (float64, bool) {
	return l.perPair(func(s cpuSample) int64 { return s.redisCmds })
}

// redisReadsPerPair is how many socket reads Redis processed per pair:
// 2 when every script call is a round trip of its own, less the more the
// calls share pipelines.
func (l *loadRun) redisReadsPerPair() (float64, bool) {
	return l.perPair(func(s cpuSample) int64 { return s.redisReads })
}

// perPair is the change of a counter of the samples over the window, per
// pair; a counter is -1 when unknown.
func (l *loadRun) perPair(counter func(cpuSample) int64) (float64, bool) {
	a, b := counter(l.cpu[0]), counter(l.cpu[1])
	if l.stats.pairs == 0 || a < 0 || b < 0 {
		return 0, false
	}
	return float64(b-a) / float64(l.stats.pairs), true
}

// cpuPerPair is the CPU time one pair cost the tool, the server and Redis
// together. On a machine where all three share the cores, this (not pairs/s)
// is what a change to the server moves, and it does not depend on how busy
// the machine was with other work.
func (l *loadRun) cpuPerPair() (float64, bool) {
	a, b := l.cpu[0], l.cpu[1]
	if l.stats.pairs == 0 || !a.haveRedis || !b.haveRedis || (!a.serverless && !(a.haveServer && b.haveServer)) {
		return 0, false
	}
	total := (b.tool - a.tool) + (b.server - a.server) + (b.redis - a.redis)
	return float64(total.Microseconds()) / float64(l.stats.pairs), true
}

// check fails a run whose cycles mostly failed: its rate would be
// meaningless. A few errors are reported in the result instead.
func (l *loadRun) check() error {
	s := &l.stats
	if s.errors > 0 && s.errors*100 > s.pairs+s.conflicts+s.errors {
		return fmt.Errorf("%d of %d cycles failed; first: %w", s.errors, s.pairs+s.conflicts+s.errors, s.firstErr)
	}
	if s.pairs == 0 {
		return errors.New("no acquire+release pair completed in the measured window")
	}
	return nil
}

// Phases of a timed run, read by every worker after each cycle.
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// closedLoop runs c clients, each doing back-to-back cycles on random names
// for warmup, then for duration while counting. Only cycles that start in
// the measured window are counted, and the window's length is the time
// between the two phase switches, so the rate is pairs over a known time.
func closedLoop(ctx context.Context, cfg *config, meter *cpuMeter, newCycler func(i int) cycler, log io.Writer) (*loadRun, error) {
	all := names(cfg.prefix, cfg.k)
	var phase atomic.Int32
	stats := make([]loadStats, cfg.c)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var wg sync.WaitGroup
	for i := range cfg.c {
		cy := newCycler(i)
		st := &stats[i]
		rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
		wg.Go(func() {
			for {
				p := phase.Load()
				if p == phaseStop || ctx.Err() != nil {
					return
				}
				lat, out, err := cy.cycle(ctx, all[rng.IntN(len(all))])
				fatal := out == failed && fatalErr(err)
				if p == phaseMeasure || fatal {
					st.count(lat, out, err)
				}
				if fatal {
					cancel()
					return
				}
			}
		})
	}

	run := &loadRun{}
	fmt.Fprintf(log, "lockbench: %d clients, %d names, warm-up %v, measuring %v\n", cfg.c, cfg.k, cfg.warmup, cfg.duration)
	sleep(ctx, cfg.warmup)
	run.cpu[0] = meter.sample(ctx)
	phase.Store(phaseMeasure)
	sleep(ctx, cfg.duration)
	phase.Store(phaseStop)
	run.cpu[1] = meter.sample(ctx)
	run.measured = run.cpu[1].at.Sub(run.cpu[0].at)
	wg.Wait()
	for i := range stats {
		run.stats.merge(&stats[i])
	}
	if err := ctx.Err(); err != nil && run.stats.firstErr != nil {
		return nil, run.stats.firstErr
	}
	return run, run.check()
}

// openLoop starts cycles on a fixed schedule, rate per second, whatever the
// server's answers: cycle i is due at start + i/rate. Up to inflight workers
// take the next due cycle, wait for its time and run it. Latency counts from
// the cycle's due time, not from when a worker got to it, so when the server
// (or the tool) falls behind, the queueing shows in the percentiles instead
// of silently slowing the schedule down (coordinated omission).
func openLoop(ctx context.Context, cfg *config, meter *cpuMeter, rate float64, newCycler func(i int) cycler, log io.Writer) (*loadRun, error) {
	all := names(cfg.prefix, cfg.k)
	interval := float64(time.Second) / rate
	stats := make([]loadStats, cfg.inflight)
	var next, late atomic.Int64
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	fmt.Fprintf(log, "lockbench: open loop at %.0f pairs/s, up to %d in flight, %d names, warm-up %v, measuring %v\n",
		rate, cfg.inflight, cfg.k, cfg.warmup, cfg.duration)
	start := time.Now().Add(10 * time.Millisecond) // time for the workers to start
	measureFrom := start.Add(cfg.warmup)
	end := measureFrom.Add(cfg.duration)
	var lastDone atomic.Int64 // unix nanos of the last measured cycle's end

	var wg sync.WaitGroup
	for i := range cfg.inflight {
		cy := newCycler(i)
		st := &stats[i]
		rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
		wg.Go(func() {
			for ctx.Err() == nil {
				due := start.Add(time.Duration(float64(next.Add(1)-1) * interval))
				if !due.Before(end) {
					return
				}
				if d := time.Until(due); d > 0 {
					sleep(ctx, d)
				}
				began := time.Now()
				lag := began.Sub(due)
				lat, out, err := cy.cycle(ctx, all[rng.IntN(len(all))])
				if out == failed && fatalErr(err) {
					st.count(lat, out, err)
					cancel()
					return
				}
				if due.Before(measureFrom) {
					continue
				}
				if lag > time.Millisecond {
					late.Add(1)
				}
				st.count(lag+lat, out, err)
				storeMax(&lastDone, time.Now().UnixNano())
			}
		})
	}

	run := &loadRun{}
	sleep(ctx, time.Until(measureFrom))
	run.cpu[0] = meter.sample(ctx)
	sleep(ctx, time.Until(end))
	run.cpu[1] = meter.sample(ctx)
	wg.Wait()
	for i := range stats {
		run.stats.merge(&stats[i])
	}
	if err := ctx.Err(); err != nil && run.stats.firstErr != nil {
		return nil, run.stats.firstErr
	}
	// The achieved rate is over the time the scheduled cycles really took: a
	// server that cannot keep up finishes them after the window ends.
	run.measured = max(time.Unix(0, lastDone.Load()).Sub(measureFrom), cfg.duration)
	run.late = late.Load()
	return run, run.check()
}

// fatalErr reports an error after which the whole run stops at once (a
// wrong key, no server), rather than being one failed cycle among many.
func fatalErr(err error) bool {
	var fe *fatalError
	return errors.As(err, &fe)
}

// fatalError wraps errors that no amount of retrying fixes.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// storeMax raises a to v unless it is already larger.
func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if old >= v || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// firstError keeps the first error of many goroutines.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
