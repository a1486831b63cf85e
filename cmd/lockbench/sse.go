package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Targets of the sse mode, with 1,000 streams.
const (
	targetSSEStreams = 1000
	targetSSECmds    = 0
)

// runSSE is the sse mode: N idle event streams (GET /v1/events) open at
// once while nothing happens. What they cost the server (RSS, goroutines)
// and Redis (commands) is the price of watching.
func runSSE(ctx context.Context, cfg *config, log io.Writer) (*result, error) {
	n := cfg.waiters
	if err := raiseNoFile(uint64(n) + 256); err != nil {
		return nil, err
	}
	rdb, err := openRedis(ctx, cfg.redisURL, 1)
	if err != nil {
		return nil, fmt.Errorf("sse needs the server's Redis (-redis): %w", err)
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

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg     sync.WaitGroup
		open   atomic.Int64
		runErr firstError
	)
	defer func() { cancel(); wg.Wait() }()
	fmt.Fprintf(log, "lockbench: opening %d event streams\n", n)
	dials := make(chan struct{}, dialsInFlight)
	for i := range n {
		select {
		case dials <- struct{}{}:
		case <-sctx.Done():
		}
		if sctx.Err() != nil {
			break
		}
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(sctx, http.MethodGet, cl.base+"/v1/events?prefix="+cfg.prefix+"sse-"+strconv.Itoa(i), nil)
			req.Header = mon.bare.Clone()
			resp, err := cl.hc.Do(req)
			<-dials
			if err != nil {
				if sctx.Err() == nil {
					runErr.set(fmt.Errorf("stream %d: %w", i, transportError(err)))
					cancel()
				}
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				runErr.set(statusError("GET /v1/events", reply{status: resp.StatusCode, body: b}))
				cancel()
				return
			}
			open.Add(1)
			// Read until the run ends: heartbeats only, nothing matches.
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
			}
		})
	}
	deadline := time.Now().Add(parkTimeout)
	for open.Load() < int64(n) && sctx.Err() == nil {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("after %v only %d of %d streams are open", parkTimeout, open.Load(), n)
		}
		sleep(sctx, 20*time.Millisecond)
	}
	if err := runErr.get(); err != nil {
		return nil, err
	}
	// Idle means that nothing is left to happen: the expiries of leases
	// from earlier runs are recorded when they fall due, and the log is
	// trimmed up to a second after the last write.
	if err := waitExpiriesDue(sctx, rdb, parkTimeout, log); err != nil {
		return nil, err
	}
	quiet, err := waitQuiet(sctx, rdb, 2*time.Second, parkTimeout)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "lockbench: %d streams open (redis quiet: %v); measuring for %v\n", n, quiet, cfg.window)

	win, err := measureWindow(ctx, sctx, rdb, pid, cfg.window, nil)
	if err != nil {
		return nil, err
	}
	if err := runErr.get(); err != nil {
		return nil, err
	}
	during := serverMem(ctx, mon, pid)
	clients, _, _ := clientCounts(ctx, rdb)

	cmds, lockCmds, breakdown := commandDiff(win.calls0, win.calls1)
	window := win.took
	r := cfg.newResult()
	r.setInt("streams", int64(n))
	r.set("window", window.Round(time.Millisecond).String())
	extra := during.rss - before.rss
	if before.rss > 0 && during.rss > 0 {
		r.setFloat("server_rss_before_mb", mb(before.rss), 1)
		r.setFloat("server_rss_mb", mb(during.rss), 1)
		r.setFloat("extra_rss_mb", mb(extra), 1)
		r.setFloat("extra_rss_per_stream_kb", float64(extra)/1024/float64(n), 1)
	}
	if before.goroutines >= 0 && during.goroutines >= 0 {
		r.setInt("goroutines_before", before.goroutines)
		r.setInt("goroutines", during.goroutines)
	}
	r.setInt("redis_clients", int64(clients))
	r.setFloat("redis_cmds_per_s", float64(cmds)/window.Seconds(), 2)
	r.setFloat("lock_cmds_per_s", float64(lockCmds)/window.Seconds(), 2)
	r.set("redis_cmds", breakdown)
	addCPU(r, win.cpu0, win.cpu1)
	r.targets = append(r.targets, target{What: "Redis commands/s with idle event streams (pub/sub keep-alive PINGs aside)", Want: "0 (1,000 streams)",
		Got:  strconv.FormatFloat(float64(lockCmds)/window.Seconds(), 'f', 2, 64) + " (" + breakdown + ")",
		Pass: lockCmds == targetSSECmds, NA: n != targetSSEStreams})
	return r, nil
}

// waitExpiriesDue waits until every lease expiry the event sweepers track
// (the sorted sets *events:expiries, see internal/store/redis) is a second
// past due, within limit.
func waitExpiriesDue(ctx context.Context, rdb *redis.Client, limit time.Duration, log io.Writer) error {
	var last float64
	iter := rdb.Scan(ctx, 0, "*events:expiries", 100).Iterator()
	for iter.Next(ctx) {
		top, err := rdb.ZRangeWithScores(ctx, iter.Val(), -1, -1).Result()
		if err != nil {
			return err
		}
		if len(top) > 0 && top[0].Score > last {
			last = top[0].Score
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return err
	}
	wait := time.UnixMilli(int64(last)).Add(time.Second).Sub(now)
	if wait <= 0 {
		return nil
	}
	if wait > limit {
		return fmt.Errorf("a lease expiry is tracked %v from now: the server is not idle", wait.Round(time.Second))
	}
	fmt.Fprintf(log, "lockbench: waiting %v for the last tracked lease expiry\n", wait.Round(time.Millisecond))
	sleep(ctx, wait)
	return ctx.Err()
}
