package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
)

// storeCycler does the HTTP cycle's work without HTTP: the server's own
// store, so the same acquire and release scripts with the same arguments,
// called straight through go-redis. Its rate is what Redis and the Go client
// can do; the HTTP rate divided by it is the cost of the API layer.
type storeCycler struct {
	st    *redisstore.Store
	owner string
	ttl   time.Duration
}

func (s *storeCycler) cycle(ctx context.Context, name string) (time.Duration, outcome, error) {
	t0 := time.Now()
	g, err := s.st.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: s.owner, TTL: s.ttl})
	lat := time.Since(t0)
	switch {
	case lock.ErrorCode(err) == lock.CodeHeld:
		return lat, conflict, nil
	case err != nil:
		return lat, failed, err
	}
	if _, err := s.st.Release(ctx, lock.LeaseRef{Lock: name, ID: g.Lease.ID}, false); err != nil {
		return lat, failed, err
	}
	return lat, pair, nil
}

// baseline measures closed-loop pairs/s on the store, c goroutines on K
// names, as throughput does over HTTP.
func baseline(ctx context.Context, cfg *config, log io.Writer) (*loadRun, error) {
	// One connection per client, as the server would have at this
	// concurrency if its pool were large enough, and no retries, as in the
	// server (a script call is never retried).
	rdb, err := openRedis(ctx, cfg.redisURL, cfg.c)
	if err != nil {
		return nil, fmt.Errorf("baseline needs the server's Redis (-redis): %w", err)
	}
	defer rdb.Close()
	st, err := redisstore.New(rdb, redisstore.Options{Prefix: cfg.keyPrefix})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	// The tool is the "server" here: its CPU is the client's and the store's.
	meter := &cpuMeter{rdb: rdb, serverless: true}
	fmt.Fprintf(log, "lockbench: baseline on %s (key prefix %q), no HTTP\n", rdb.Options().Addr, cfg.keyPrefix)
	return closedLoop(ctx, cfg, meter, func(i int) cycler {
		return &storeCycler{st: st, owner: "lockbench-" + strconv.Itoa(i), ttl: cfg.ttl}
	}, log)
}

// runAll runs baseline, then throughput, in one invocation: both see the
// machine in the same state, so their ratio holds even where absolute rates
// wander from one minute to the next.
func runAll(ctx context.Context, cfg *config, log io.Writer) (*result, error) {
	base, err := baseline(ctx, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	fmt.Fprintf(log, "lockbench: baseline %.0f pairs/s; now over HTTP\n", base.pairsPerSec())
	web, err := throughput(ctx, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("throughput: %w", err)
	}
	r := cfg.newResult()
	r.setInt("c", int64(cfg.c))
	r.setInt("k", int64(cfg.k))
	r.set("duration", cfg.duration.String())
	web.report(r)
	ratio := web.pairsPerSec() / base.pairsPerSec()
	r.setFloat("baseline_pairs_per_s", base.pairsPerSec(), 0)
	r.setMs("baseline_acq_p50_ms", base.stats.acq.Quantile(0.50))
	r.setMs("baseline_acq_p99_ms", base.stats.acq.Quantile(0.99))
	r.set("baseline_tool_cpu_cores", strconv.FormatFloat((base.cpu[1].tool-base.cpu[0].tool).Seconds()/base.measured.Seconds(), 'f', 2, 64))
	if base.cpu[0].haveRedis && base.cpu[1].haveRedis {
		r.setFloat("baseline_redis_cpu_cores", (base.cpu[1].redis-base.cpu[0].redis).Seconds()/base.measured.Seconds(), 2)
	}
	if us, ok := base.cpuPerPair(); ok {
		r.setFloat("baseline_cpu_us_per_pair", us, 0)
	}
	r.setFloat("ratio", ratio, 3)
	r.targets = append(r.targets, target{
		What: "HTTP pairs/s vs baseline pairs/s (c=32, k=100000)",
		Want: fmt.Sprintf("≥ %.0f%%", targetRatio*100),
		Got:  fmt.Sprintf("%.1f%% (%.0f of %.0f)", ratio*100, web.pairsPerSec(), base.pairsPerSec()),
		Pass: ratio >= targetRatio,
		NA:   cfg.c != 32 || cfg.k != 100000,
	})
	return r, nil
}
