package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Targets of the idle mode, with 10,000 waiters.
const (
	targetIdleExtraRSS = 100 << 20
	targetIdlePubSub   = 2
	targetIdleWaiters  = 10000
)

// parkTimeout bounds the wait for every waiter to be parked.
const parkTimeout = 2 * time.Minute

// dialsInFlight caps the waiters that are connecting at once: the server's
// listen backlog is finite (net.core.somaxconn), and ten thousand SYNs at
// once would see some dropped and retried a second later.
const dialsInFlight = 256

// runIdle is the idle mode: N long-poll waiters, each on its own connection,
// parked on one lock the tool holds. What they cost the server (RSS,
// goroutines) and Redis (connections, commands) is the price of "waiting
// without polling".
func runIdle(ctx context.Context, cfg *config, log io.Writer) (*result, error) {
	n := cfg.waiters
	if err := raiseNoFile(uint64(n) + 256); err != nil {
		return nil, err
	}
	rdb, err := openRedis(ctx, cfg.redisURL, 1)
	if err != nil {
		return nil, fmt.Errorf("idle needs the server's Redis (-redis): %w", err)
	}
	defer rdb.Close()
	cl, err := cfg.connect(ctx, n+8)
	if err != nil {
		return nil, err
	}
	defer cl.close()
	mon := cl.newSession(nil)
	pid := cfg.serverPID
	if pid == 0 {
		pid = serverPID(cfg.server)
	}
	before := serverMem(ctx, mon, pid)
	if before.rss <= 0 {
		fmt.Fprintf(log, "lockbench: the server's RSS is unknown: it has no /metrics and is not a local process (-server-pid)\n")
	}

	// The lock stays held throughout. Its TTL is long enough that the
	// renewals (every TTL/3) all fall after the window, so the tool adds no
	// Redis command to what is measured.
	name := cfg.prefix + "idle"
	holdTTL := max(10*time.Minute, 3*(parkTimeout+cfg.window))
	holder := cl.newSession(acquireBody("lockbench-idle-holder", holdTTL, 0, lockKind{}))
	rep, err := holder.acquire(ctx, name)
	if err != nil {
		return nil, transportError(err)
	}
	if rep.status != http.StatusCreated {
		return nil, statusError("acquire "+name+" (is another lockbench running on it?)", rep)
	}
	leaseID := rep.leaseID
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = cl.newSession(nil).release(rctx, name, leaseID)
	}()

	wctx, cancel := context.WithCancel(ctx)
	var (
		wg      sync.WaitGroup
		runErr  firstError
		stopped atomic.Bool // the run is over: aborted requests are expected
	)
	fail := func(err error) {
		runErr.set(err)
		cancel()
	}
	defer func() {
		stopped.Store(true)
		cancel()
		wg.Wait()
	}()
	wg.Go(func() {
		renew := cl.newSession(nil)
		for {
			sleep(wctx, holdTTL/3)
			if wctx.Err() != nil {
				return
			}
			if r, err := renew.renew(wctx, name, leaseID, holdTTL); err == nil && r.status != http.StatusOK {
				fail(statusError("renew the held lock", r))
			}
		}
	})

	var (
		written, reissued, reissuedInWindow atomic.Int64
		inWindow                            atomic.Bool
	)
	dials := make(chan struct{}, dialsInFlight)
	fmt.Fprintf(log, "lockbench: parking %d waiters on %s\n", n, name)
	for i := range n {
		select {
		case dials <- struct{}{}:
		case <-wctx.Done():
		}
		if wctx.Err() != nil {
			break
		}
		s := cl.newSession(acquireBody("lockbench-idle-"+strconv.Itoa(i), cfg.ttl, cfg.waitMs, lockKind{}))
		wg.Go(func() {
			connected := sync.OnceFunc(func() { <-dials })
			defer connected()
			tctx := traceFirstWrite(wctx, &written, connected)
			for wctx.Err() == nil {
				rep, err := s.acquire(tctx, name)
				connected()
				switch {
				case wctx.Err() != nil || stopped.Load():
					return
				case err != nil:
					fail(fmt.Errorf("waiter %d: %w", i, transportError(err)))
				case rep.status == http.StatusConflict:
					// The wait reached the server's maximum: wait again.
					reissued.Add(1)
					if inWindow.Load() {
						reissuedInWindow.Add(1)
					}
				case rep.status == http.StatusCreated || rep.status == http.StatusOK:
					_, _ = s.release(wctx, name, rep.leaseID)
					fail(fmt.Errorf("waiter %d was granted %s: the tool's lease on it ended", i, name))
				default:
					fail(waiterStatusError("waiting acquire of "+name, rep, n))
				}
			}
		})
	}

	how, err := waitParked(wctx, mon, n, written.Load, cfg.settle)
	if err := runErr.get(); err != nil {
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	// Admitted is not yet asleep: each waiter still makes its tries and
	// subscribes. Parked means Redis has gone quiet.
	quiet, err := waitQuiet(wctx, rdb, min(time.Second, cfg.window/2), parkTimeout)
	if err := runErr.get(); err != nil {
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	how += "+redis_quiet"
	if !quiet {
		how += "_timeout"
		fmt.Fprintf(log, "lockbench: warning: Redis never went quiet for a second after the waiters were admitted; measuring anyway\n")
	}
	fmt.Fprintf(log, "lockbench: %d waiters parked (%s); measuring for %v\n", n, how, cfg.window)

	// The window. The tool's own INFO and CLIENT calls are left out of the
	// command count; nothing else of the tool touches Redis meanwhile.
	win, err := measureWindow(ctx, wctx, rdb, pid, cfg.window, &inWindow)
	if err != nil {
		return nil, err
	}
	cpu0, cpu1, window := win.cpu0, win.cpu1, win.took
	if err := runErr.get(); err != nil {
		return nil, err
	}
	clients, pubsub, err := clientCounts(ctx, rdb)
	if err != nil {
		return nil, fmt.Errorf("CLIENT LIST: %w", err)
	}
	infoClients, _ := redisInfo(ctx, rdb, "clients")
	during := serverMem(ctx, mon, pid)
	metrics, _ := scrapeMetrics(ctx, mon)

	cmds, lockCmds, breakdown := commandDiff(win.calls0, win.calls1)
	r := cfg.newResult()
	r.setInt("waiters", int64(n))
	r.set("parked_by", how)
	if v, ok := metrics["lockapi_waiters"]; ok {
		r.setFloat("lockapi_waiters", v, 0)
	}
	r.set("window", window.Round(time.Millisecond).String())
	r.set("server_mem_from", during.from)
	extra := during.rss - before.rss
	if before.rss > 0 && during.rss > 0 {
		r.setFloat("server_rss_before_mb", mb(before.rss), 1)
		r.setFloat("server_rss_mb", mb(during.rss), 1)
		r.setFloat("extra_rss_mb", mb(extra), 1)
		r.setFloat("extra_rss_per_waiter_kb", float64(extra)/1024/float64(n), 1)
	}
	if before.heap >= 0 && during.heap >= 0 && before.stack >= 0 && during.stack >= 0 {
		r.setFloat("extra_heap_mb", mb(during.heap-before.heap), 1)
		r.setFloat("extra_stack_mb", mb(during.stack-before.stack), 1)
	}
	if before.goroutines >= 0 && during.goroutines >= 0 {
		r.setInt("goroutines_before", before.goroutines)
		r.setInt("goroutines", during.goroutines)
	}
	r.setInt("redis_clients", int64(clients))
	r.setInt("redis_pubsub_conns", int64(pubsub))
	if v, ok := infoClients["pubsub_clients"]; ok {
		r.set("redis_pubsub_clients", v)
	}
	r.setFloat("redis_cmds_per_s", float64(cmds)/window.Seconds(), 2)
	r.setFloat("lock_cmds_per_s", float64(lockCmds)/window.Seconds(), 2)
	r.set("redis_cmds", breakdown)
	r.setInt("reissued", reissued.Load())
	r.setInt("reissued_in_window", reissuedInWindow.Load())
	addCPU(r, cpu0, cpu1)

	na := n != targetIdleWaiters
	rssTarget := target{What: "extra server RSS of the parked waiters", Want: "≤ 100 MB (10,000 waiters)", Got: "unknown", NA: na}
	if before.rss > 0 && during.rss > 0 {
		rssTarget.Got = fmt.Sprintf("%.1f MB (%.1f KB/waiter)", mb(extra), float64(extra)/1024/float64(n))
		rssTarget.Pass = extra <= targetIdleExtraRSS
	}
	r.targets = append(r.targets,
		rssTarget,
		target{What: "Redis pub/sub connections", Want: "≤ 2", Got: strconv.Itoa(pubsub) + fmt.Sprintf(" (of %d clients)", clients),
			Pass: pubsub <= targetIdlePubSub, NA: na},
		target{What: "Redis commands/s while held (pub/sub keep-alive PINGs aside)", Want: "0",
			Got:  strconv.FormatFloat(float64(lockCmds)/window.Seconds(), 'f', 2, 64) + " (" + breakdown + ")",
			Pass: lockCmds == 0, NA: na},
	)
	return r, nil
}

// window is a measured stretch of a run: Redis's command counts and the CPU
// of the server and Redis at its start and end.
type window struct {
	cpu0, cpu1     cpuSample
	calls0, calls1 map[string]int64
	took           time.Duration
}

// measureWindow samples CPU and Redis's command counts, waits d (or until
// wctx ends) and samples them again. during, when set, is true while the
// command counts are being taken.
func measureWindow(ctx, wctx context.Context, rdb *redis.Client, pid int, d time.Duration, during *atomic.Bool) (window, error) {
	var w window
	meter := &cpuMeter{pid: pid, rdb: rdb}
	w.cpu0 = meter.sample(ctx)
	if during != nil {
		during.Store(true)
	}
	var err error
	if w.calls0, err = commandCalls(ctx, rdb); err != nil {
		return w, fmt.Errorf("INFO commandstats: %w", err)
	}
	t0 := time.Now()
	sleep(wctx, d)
	if w.calls1, err = commandCalls(ctx, rdb); err != nil {
		return w, fmt.Errorf("INFO commandstats: %w", err)
	}
	w.took = time.Since(t0)
	if during != nil {
		during.Store(false)
	}
	w.cpu1 = meter.sample(ctx)
	return w, nil
}

// waitQuiet waits until Redis has run no command (but the tool's own) for
// quiet, up to limit, and reports whether it got there.
func waitQuiet(ctx context.Context, rdb *redis.Client, quiet, limit time.Duration) (bool, error) {
	deadline := time.Now().Add(limit)
	prev, err := commandCalls(ctx, rdb)
	if err != nil {
		return false, fmt.Errorf("INFO commandstats: %w", err)
	}
	for time.Now().Before(deadline) {
		sleep(ctx, quiet)
		if err := ctx.Err(); err != nil {
			return false, err
		}
		cur, err := commandCalls(ctx, rdb)
		if err != nil {
			return false, fmt.Errorf("INFO commandstats: %w", err)
		}
		if _, lock, _ := commandDiff(prev, cur); lock == 0 {
			return true, nil
		}
		prev = cur
	}
	return false, nil
}

// commandDiff counts the commands run between two INFO commandstats
// snapshots. all leaves out the tool's own INFO and CLIENT calls; lock also
// leaves out PING, which the server's pub/sub connection sends after 30
// quiet seconds to notice a dead connection, and which is not lock traffic.
func commandDiff(a, b map[string]int64) (all, lock int64, breakdown string) {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(b)) {
		d := b[name] - a[name]
		if d <= 0 || name == "info" || name == "client" || strings.HasPrefix(name, "client|") {
			continue
		}
		all += d
		if name != "ping" {
			lock += d
		}
		parts = append(parts, name+":"+strconv.FormatInt(d, 10))
	}
	if len(parts) == 0 {
		return 0, 0, "none"
	}
	return all, lock, strings.Join(parts, ",")
}

// serverMemory is the server's resident memory and goroutines; -1 when
// unknown.
type serverMemory struct {
	rss, goroutines int64
	// heap and stack are the bytes of heap spans and goroutine stacks in
	// use (Go's memstats), -1 when unknown. Unlike RSS they do not depend on
	// what the server allocated and freed before the run, which the runtime
	// returns to the OS only slowly, and they say where the memory went.
	heap, stack int64
	from        string // "metrics", "proc" or "none"
}

// serverMem reads the server's memory from /metrics when it has one, else
// RSS from /proc when the server runs here.
func serverMem(ctx context.Context, mon *session, pid int) serverMemory {
	out := serverMemory{rss: -1, goroutines: -1, heap: -1, stack: -1, from: "none"}
	if m, ok := scrapeMetrics(ctx, mon); ok {
		if v, ok := m["process_resident_memory_bytes"]; ok {
			out.rss, out.from = int64(v), "metrics"
		}
		if v, ok := m["go_goroutines"]; ok {
			out.goroutines = int64(v)
		}
		if v, ok := m["go_memstats_heap_inuse_bytes"]; ok {
			out.heap = int64(v)
		}
		if v, ok := m["go_memstats_stack_inuse_bytes"]; ok {
			out.stack = int64(v)
		}
	}
	if out.rss < 0 && pid > 0 {
		if v, ok := procRSS(pid); ok {
			out.rss, out.from = v, "proc"
		}
	}
	return out
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// waitParked returns once n waiting requests are parked on the server: by
// its lockapi_waiters gauge when /metrics has one, otherwise once all n
// requests have been written plus the settle time. It says which.
func waitParked(ctx context.Context, mon *session, n int, written func() int64, settle time.Duration) (string, error) {
	deadline := time.Now().Add(parkTimeout)
	last := -1.0
	for ctx.Err() == nil {
		if written() >= int64(n) {
			m, ok := scrapeMetrics(ctx, mon)
			v, has := m["lockapi_waiters"]
			if !ok || !has {
				sleep(ctx, settle)
				return "settle_" + settle.String(), ctx.Err()
			}
			if last = v; v >= float64(n) {
				// The gauge counts a waiter as it is admitted, a moment
				// before it subscribes and sleeps.
				sleep(ctx, 100*time.Millisecond)
				return "metrics", ctx.Err()
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("after %v, %d of %d waiters have sent their request and lockapi_waiters is %v", parkTimeout, written(), n, last)
		}
		sleep(ctx, 50*time.Millisecond)
	}
	return "", ctx.Err()
}

// traceFirstWrite returns ctx with a trace that counts, once, the first
// request written on it, and then calls each of also.
func traceFirstWrite(ctx context.Context, written *atomic.Int64, also ...func()) context.Context {
	var once sync.Once
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) {
			once.Do(func() { written.Add(1) })
			for _, f := range also {
				f()
			}
		},
	})
}

// raiseNoFile makes sure this process may open need descriptors, raising
// the soft RLIMIT_NOFILE up to the hard limit if it must. (The Go runtime
// already raises it at start on Linux; a lower hard limit still needs the
// operator.)
func raiseNoFile(need uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur < need && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", lim.Max, err)
		}
	}
	if lim.Cur < need {
		return errors.New("RLIMIT_NOFILE is " + strconv.FormatUint(lim.Cur, 10) +
			" (hard limit " + strconv.FormatUint(lim.Max, 10) + "), and this many waiters need about " +
			strconv.FormatUint(need, 10) + " open files, one connection each: run `ulimit -n " +
			strconv.FormatUint(need, 10) + "` (raising the hard limit needs root or /etc/security/limits.conf); " +
			"the server needs as many")
	}
	return nil
}
