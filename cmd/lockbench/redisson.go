package main

import (
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Redisson-style baseline: what a lock costs Redis when a client runs
// the smallest script pair a fenced, reentrant lock needs, straight from
// go-redis, one EVALSHA per call and no pipelining (as Redisson sends them).
// lockapi's own Redis CPU per pair is judged against it.

var (
	//go:embed scripts/redisson_acquire.lua
	redissonAcquireLua string
	//go:embed scripts/redisson_release.lua
	redissonReleaseLua string

	redissonAcquire = redis.NewScript(redissonAcquireLua)
	redissonRelease = redis.NewScript(redissonReleaseLua)
)

// redissonPrefix starts the baseline's keys, so that they never meet
// lockapi's.
const redissonPrefix = "lockbench-redisson:"

// redissonCycler is one client of the baseline: its owner is a client id
// and a thread number, as Redisson names a lock's holder.
type redissonCycler struct {
	rdb   *redis.Client
	owner string
	ttl   string // lease time, ms
}

func (c *redissonCycler) cycle(ctx context.Context, name string) (time.Duration, outcome, error) {
	keys := []string{redissonPrefix + "{" + name + "}", redissonPrefix + "{" + name + "}:token"}
	t0 := time.Now()
	res, err := redissonAcquire.Run(ctx, c.rdb, keys, c.ttl, c.owner).Int64Slice()
	lat := time.Since(t0)
	switch {
	case err != nil:
		return lat, failed, err
	case len(res) != 2:
		return lat, failed, fmt.Errorf("redisson acquire %s: reply %v", name, res)
	case res[0] != -1:
		return lat, conflict, nil
	}
	keys[1] = redissonPrefix + "{" + name + "}:channel"
	n, err := redissonRelease.Run(ctx, c.rdb, keys, "0", c.ttl, c.owner).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return lat, failed, fmt.Errorf("redisson release %s: not held", name)
	case err != nil:
		return lat, failed, err
	case n != 1:
		return lat, failed, fmt.Errorf("redisson release %s: %d holds left; is another lockbench using -prefix %q?", name, n, name)
	}
	return lat, pair, nil
}

// redisson runs the baseline closed loop: c clients, each with a connection
// of its own, on K names.
func redisson(ctx context.Context, cfg *config, log io.Writer) (*loadRun, error) {
	rdb, err := openRedis(ctx, cfg.redisURL, cfg.c)
	if err != nil {
		return nil, fmt.Errorf("the Redisson-style baseline needs a Redis (-redis): %w", err)
	}
	defer rdb.Close()
	client := rand.Text() // a client id, as Redisson's connection manager has one
	fmt.Fprintf(log, "lockbench: Redisson-style script pair on %s, unpipelined\n", rdb.Options().Addr)
	meter := &cpuMeter{rdb: rdb, serverless: true}
	return closedLoop(ctx, cfg, meter, func(i int) cycler {
		return &redissonCycler{rdb: rdb, owner: client + ":" + strconv.Itoa(i+1), ttl: strconv.FormatInt(cfg.ttl.Milliseconds(), 10)}
	}, log)
}
