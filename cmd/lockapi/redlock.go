package main

import (
	"context"
	"crypto/tls"
	"strings"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/layout"
	"github.com/lockapi/lockapi/internal/metrics"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/store/redlock"
)

// modeRedlock is LOCKAPI_REDIS_MODE for independent masters, which
// internal/store/redlock runs the Redlock way.
const modeRedlock = "redlock"

// openRedlock opens a store on every master the URL names and the redlock
// store over them, and the masters' clients, for the caller to close once
// the store is closed; the first master keeps the release URL secret when
// none is configured. An odd number of masters, at least 3, is required.
func openRedlock(ctx context.Context, c serveConfig, m *metrics.Metrics, log zerolog.Logger) (rl *redlock.Store, clients []*redisstore.Client, err error) {
	urls, err := redlock.MasterURLs(c.RedisURL)
	if err != nil {
		return nil, nil, err
	}
	var masters []*redisstore.Store
	var opened []*redisstore.Client
	layouts := layout.NewReporter(log.With().Str("component", "layout").Logger(), m.UnknownLayout)
	defer func() {
		if err != nil {
			for _, s := range masters {
				_ = s.Close()
			}
			for _, c := range opened {
				_ = c.Close()
			}
		}
	}()
	for _, u := range urls {
		rdb, err := redisstore.NewClient(redisstore.ClientConfig{URL: u, Mode: redisstore.ModeSingle,
			ConfigureTLS: func(t *tls.Config) error { return redisTLS(c, t) }})
		if err != nil {
			return nil, nil, err
		}
		opened = append(opened, rdb)
		// A master down is not fatal: a minority of them may be.
		if err := checkTopology(ctx, c, rdb, log); err != nil {
			return nil, nil, err
		}
		opts := redisstore.Options{Prefix: c.KeyPrefix, Batch: c.RedisBatch, CallTimeout: c.RedlockTimeout, MinReplicas: c.MinReplicas, NoSessions: true,
			UnknownLayout: layouts.Unknown}
		if m != nil {
			opts.ObserveScript = m.Script
		}
		s, err := redisstore.New(rdb, opts)
		if err != nil {
			return nil, nil, err
		}
		masters = append(masters, s)
	}
	rl, err = redlock.New(masters)
	if err != nil {
		return nil, nil, err
	}
	storeCounters(m, rl)
	targets := make([]string, len(opened))
	for i, rdb := range opened {
		targets[i] = rdb.Target()
	}
	log.Info().Str("redis", joinTargets(targets)).Str("mode", modeRedlock).Str("key_prefix", c.KeyPrefix).
		Int("quorum", rl.Quorum()).Dur("per_master_timeout", c.RedlockTimeout).
		Msg("using Redis store: independent masters, a lease needs a majority of them; events and webhooks are off")
	return rl, opened, nil
}

// joinTargets writes the masters' targets (scheme://host:port/db) as one,
// the way the URL names them: scheme://host1:port1,host2:port2,.../db.
func joinTargets(targets []string) string {
	scheme, _, _ := strings.Cut(targets[0], "://")
	hosts := make([]string, len(targets))
	var db string
	for i, t := range targets {
		_, rest, _ := strings.Cut(t, "://")
		hosts[i], db, _ = strings.Cut(rest, "/")
	}
	return scheme + "://" + strings.Join(hosts, ",") + "/" + db
}
