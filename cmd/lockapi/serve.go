package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"crypto/tls"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/events"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/metrics"
	"github.com/lockapi/lockapi/internal/store/memory"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/store/redlock"
	"github.com/lockapi/lockapi/internal/webhook"
	"github.com/lockapi/lockapi/internal/webhook/memstate"
	"github.com/lockapi/lockapi/internal/webhook/redisstate"
)

// serveConfig is everything `lockapi serve` can be told. Each field has a
// flag and a LOCKAPI_* environment variable; a flag wins over the variable.
type serveConfig struct {
	Addr            string
	RedisURL        string
	RedisMode       string
	KeyPrefix       string
	DefaultTTL      time.Duration
	MaxTTL          time.Duration
	MaxWait         time.Duration
	LogLevel        string
	LogFormat       string
	ShutdownTimeout time.Duration

	APIKeys        string
	APIKeysFile    string
	ReleaseSecrets string

	MaxWaiters          int
	MaxWaitersPerCaller int
	RateLimit           float64
	RateBurst           int

	Metrics      bool
	AdminAddr    string
	RedisBatch   bool
	RedisTimeout time.Duration
	MinReplicas  int
	// RedlockTimeout bounds each master's part of a call in redlock mode.
	RedlockTimeout time.Duration

	Events          bool
	EventsMax       int
	EventsRetention time.Duration

	TLSCert, TLSKey                       string
	RedisTLSCA, RedisTLSCert, RedisTLSKey string

	WebhooksFile         string
	WebhooksAllowPrivate bool
	WebhooksTimeout      time.Duration
	WebhooksRetryFor     time.Duration
	WebhooksBackoffMin   time.Duration
	WebhooksBackoffMax   time.Duration
}

func parseServeFlags(args []string, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	str := func(p *string, name, env, def, help string) {
		fs.StringVar(p, name, envOr(env, def), help+" ($"+env+")")
	}
	// A variable that does not parse is fatal, unless its flag is given.
	badEnv := map[string]string{} // by flag name: why its variable does not parse
	dur := func(p *time.Duration, name, env string, def time.Duration, help string) {
		fs.DurationVar(p, name, fromEnv(badEnv, name, env, def, time.ParseDuration, "a duration such as 500ms, 30s or 1h"), help+" ($"+env+")")
	}
	num := func(p *int, name, env string, def int, help string) {
		fs.IntVar(p, name, fromEnv(badEnv, name, env, def, strconv.Atoi, "an integer"), help+" ($"+env+")")
	}
	str(&c.Addr, "addr", "LOCKAPI_ADDR", ":8080", "address to listen on")
	str(&c.RedisURL, "redis-url", "LOCKAPI_REDIS_URL", "", "Redis URL, redis:// or rediss://; empty runs on the embedded memory store")
	str(&c.RedisMode, "redis-mode", "LOCKAPI_REDIS_MODE", "single", "single, sentinel (URL names sentinels and ?master_name=), cluster (URL names seed nodes, more with &addr=) or redlock (URL names 3, 5, ... independent masters: redis://a,b,c or &addr=)")
	str(&c.KeyPrefix, "key-prefix", "LOCKAPI_KEY_PREFIX", redisstore.DefaultPrefix, "prefix of every Redis key and channel")
	dur(&c.DefaultTTL, "default-ttl", "LOCKAPI_DEFAULT_TTL", 30*time.Second, "lease TTL when a request gives none")
	dur(&c.MaxTTL, "max-ttl", "LOCKAPI_MAX_TTL", lockhttp.DefaultMaxTTL, fmt.Sprintf("largest TTL a request may ask for, at most %v", lockhttp.MaxTTLCeiling))
	dur(&c.MaxWait, "max-wait", "LOCKAPI_MAX_WAIT", 60*time.Second, "longest wait of a long-poll; longer waits are clamped")
	str(&c.LogLevel, "log-level", "LOCKAPI_LOG_LEVEL", "info", "debug, info, warn or error")
	str(&c.LogFormat, "log-format", "LOCKAPI_LOG_FORMAT", "json", "json or console")
	dur(&c.RedisTimeout, "redis-timeout", "LOCKAPI_REDIS_TIMEOUT", redisstore.DefaultCallTimeout, "deadline of every Redis call; a call that runs out is answered 503 and never sent again")
	dur(&c.RedlockTimeout, "redlock-timeout", "LOCKAPI_REDLOCK_TIMEOUT", redlock.DefaultTimeout, "redlock mode: deadline of each master's part of a call, much shorter than any TTL")
	dur(&c.ShutdownTimeout, "shutdown-timeout", "LOCKAPI_SHUTDOWN_TIMEOUT", 10*time.Second, "how long in-flight requests may take to finish on shutdown")
	str(&c.APIKeys, "api-keys", "LOCKAPI_API_KEYS", "", "API key lines, as lockapi keys new prints them, separated by newlines or ;; none: the server runs open")
	str(&c.APIKeysFile, "api-keys-file", "LOCKAPI_API_KEYS_FILE", "", "file of API key lines, added to -api-keys")
	str(&c.ReleaseSecrets, "release-secrets", "LOCKAPI_RELEASE_SECRETS", "", "comma-separated secrets (16+ bytes) for signed release URLs; the first signs, all verify; empty: one kept in Redis for every instance (a random one per process on the memory store)")
	num(&c.MaxWaiters, "max-waiters", "LOCKAPI_MAX_WAITERS", lockhttp.DefaultMaxWaiters, "most requests waiting at once (long-poll acquires and blocking queries)")
	num(&c.MaxWaitersPerCaller, "max-waiters-per-caller", "LOCKAPI_MAX_WAITERS_PER_CALLER", lockhttp.DefaultMaxWaitersPerCaller, "most waiting requests of one principal (or client address on an open server)")
	parseRate := func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }
	fs.Float64Var(&c.RateLimit, "rate-limit", fromEnv(badEnv, "rate-limit", "LOCKAPI_RATE_LIMIT", 0, parseRate, "a number of requests per second"),
		"requests per second per principal (or client address); 0: no limit ($LOCKAPI_RATE_LIMIT)")
	num(&c.MinReplicas, "min-replicas", "LOCKAPI_MIN_REPLICAS", 0, "replicas that must confirm a grant (Redis WAIT) before it is answered; a request may ask for fewer")
	num(&c.RateBurst, "rate-burst", "LOCKAPI_RATE_BURST", 0, "burst of the rate limit; 0: one second's worth")
	batchOn := envOr("LOCKAPI_REDIS_BATCH", "true")
	str(&batchOn, "redis-batch", "LOCKAPI_REDIS_BATCH", batchOn, "send concurrent script calls to Redis together in pipelines (true or false)")
	metricsOn := envOr("LOCKAPI_METRICS", "true")
	str(&metricsOn, "metrics", "LOCKAPI_METRICS", metricsOn, "serve Prometheus metrics at /metrics (true or false)")
	eventsOn := envOr("LOCKAPI_EVENTS", "true")
	str(&eventsOn, "events", "LOCKAPI_EVENTS", eventsOn, "record every lock change in the event log (true or false)")
	num(&c.EventsMax, "events-max", "LOCKAPI_EVENTS_MAX", redisstore.DefaultEventsMax, "about how many events the event log keeps at most")
	dur(&c.EventsRetention, "events-retention", "LOCKAPI_EVENTS_RETENTION", redisstore.DefaultEventsRetention, "how long the event log keeps events at least, within -events-max")
	str(&c.AdminAddr, "admin-addr", "LOCKAPI_ADMIN_ADDR", "", "address of a separate admin listener with pprof and /metrics; empty: off")
	str(&c.TLSCert, "tls-cert", "LOCKAPI_TLS_CERT", "", "PEM certificate file: serve HTTPS (with -tls-key)")
	str(&c.TLSKey, "tls-key", "LOCKAPI_TLS_KEY", "", "PEM private key file for -tls-cert")
	str(&c.RedisTLSCA, "redis-tls-ca", "LOCKAPI_REDIS_TLS_CA", "", "PEM CA bundle that signs the Redis server's certificate (rediss://)")
	str(&c.RedisTLSCert, "redis-tls-cert", "LOCKAPI_REDIS_TLS_CERT", "", "PEM client certificate for Redis (rediss://)")
	str(&c.RedisTLSKey, "redis-tls-key", "LOCKAPI_REDIS_TLS_KEY", "", "PEM client key for -redis-tls-cert")
	str(&c.WebhooksFile, "webhooks-file", "LOCKAPI_WEBHOOKS_FILE", "", "JSON file of webhook subscriptions, beside those created over /v1/webhooks (see the README)")
	allowPrivate := envOr("LOCKAPI_WEBHOOKS_ALLOW_PRIVATE", "false")
	str(&allowPrivate, "webhooks-allow-private", "LOCKAPI_WEBHOOKS_ALLOW_PRIVATE", allowPrivate, "let webhooks reach loopback, link-local and private addresses, and use http (true or false)")
	dur(&c.WebhooksTimeout, "webhooks-timeout", "LOCKAPI_WEBHOOKS_TIMEOUT", webhook.DefaultTimeout, "time limit of one webhook delivery attempt")
	dur(&c.WebhooksRetryFor, "webhooks-retry-for", "LOCKAPI_WEBHOOKS_RETRY_FOR", webhook.DefaultRetryFor, "how long after an event its webhook delivery is retried before it becomes a dead letter")
	dur(&c.WebhooksBackoffMin, "webhooks-backoff-min", "LOCKAPI_WEBHOOKS_BACKOFF_MIN", webhook.DefaultBackoff.Min, "ceiling of the first wait between webhook attempts; it doubles per failure (full jitter)")
	dur(&c.WebhooksBackoffMax, "webhooks-backoff-max", "LOCKAPI_WEBHOOKS_BACKOFF_MAX", webhook.DefaultBackoff.Max, "largest ceiling of the wait between webhook attempts")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true; delete(badEnv, f.Name) })
	if len(badEnv) > 0 {
		var msgs []string
		for _, name := range slices.Sorted(maps.Keys(badEnv)) {
			msgs = append(msgs, badEnv[name])
		}
		return c, errors.New(strings.Join(msgs, "; "))
	}
	for _, b := range []struct {
		p              *bool
		flag, env, val string
	}{
		{&c.RedisBatch, "redis-batch", "LOCKAPI_REDIS_BATCH", batchOn},
		{&c.Events, "events", "LOCKAPI_EVENTS", eventsOn},
		{&c.Metrics, "metrics", "LOCKAPI_METRICS", metricsOn},
		{&c.WebhooksAllowPrivate, "webhooks-allow-private", "LOCKAPI_WEBHOOKS_ALLOW_PRIVATE", allowPrivate},
	} {
		var err error
		if *b.p, err = strconv.ParseBool(b.val); err != nil {
			from := "$" + b.env
			if given[b.flag] {
				from = "-" + b.flag
			}
			return c, fmt.Errorf("%s %q: want true or false", from, b.val)
		}
	}
	if !(c.RateLimit >= 0) { // also NaN
		return c, fmt.Errorf("-rate-limit %v: want a number of requests per second, 0 for none", c.RateLimit)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return c, errors.New("-tls-cert and -tls-key go together")
	}
	if (c.RedisTLSCert == "") != (c.RedisTLSKey == "") {
		return c, errors.New("-redis-tls-cert and -redis-tls-key go together")
	}
	switch {
	case c.MaxTTL > lockhttp.MaxTTLCeiling:
		return c, fmt.Errorf("-max-ttl %v is over the ceiling of every server, %v", c.MaxTTL, lockhttp.MaxTTLCeiling)
	case c.DefaultTTL < lock.MinTTL || c.DefaultTTL > c.MaxTTL:
		return c, fmt.Errorf("-default-ttl must lie between %v and -max-ttl (%v)", lock.MinTTL, c.MaxTTL)
	case c.MaxWait < 0:
		return c, errors.New("-max-wait must not be negative")
	case c.RedisTimeout <= 0 || c.RedlockTimeout <= 0:
		return c, errors.New("-redis-timeout and -redlock-timeout must be positive")
	case c.EventsMax <= 0 || c.EventsRetention <= 0:
		return c, errors.New("-events-max and -events-retention must be positive")
	case c.MinReplicas < 0:
		return c, errors.New("-min-replicas must not be negative")
	case c.MinReplicas > 0 && c.RedisURL == "":
		return c, errors.New("-min-replicas needs Redis with replicas; the embedded memory store has none")
	case c.WebhooksTimeout <= 0 || c.WebhooksRetryFor <= 0 || c.WebhooksBackoffMin <= 0:
		return c, errors.New("-webhooks-timeout, -webhooks-retry-for and -webhooks-backoff-min must be positive")
	case c.WebhooksBackoffMax < c.WebhooksBackoffMin:
		return c, errors.New("-webhooks-backoff-max must be at least -webhooks-backoff-min")
	}
	return c, nil
}

// fromEnv returns the value of the variable env, or def when it is unset.
// A value that does not parse is recorded in bad under the flag's name,
// with what was wanted, and def stands in.
func fromEnv[T any](bad map[string]string, flagName, env string, def T, parse func(string) (T, error), want string) T {
	s := os.Getenv(env)
	if s == "" {
		return def
	}
	v, err := parse(s)
	if err != nil {
		bad[flagName] = fmt.Sprintf("$%s %q: want %s", env, s, want)
		return def
	}
	return v
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func newLogger(c serveConfig, w io.Writer) (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(c.LogLevel)
	if err != nil || c.LogLevel == "" {
		return zerolog.Logger{}, fmt.Errorf("-log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	switch c.LogFormat {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	default:
		return zerolog.Logger{}, fmt.Errorf("-log-format %q: want json or console", c.LogFormat)
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger(), nil
}

// checkTopology checks at startup that Redis is the deployment c says
// (redisstore.CheckTopology), and returns the mismatch, which is fatal.
// Redis not answering yet is not: it is logged, and /readyz says 503 until
// Redis answers.
func checkTopology(ctx context.Context, c serveConfig, rdb *redisstore.Client, log zerolog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err := redisstore.CheckTopology(ctx, rdb, c.MinReplicas)
	var bad *redisstore.TopologyError
	if errors.As(err, &bad) {
		return err
	}
	if err != nil {
		log.Warn().Err(err).Str("redis", rdb.Target()).Msg("Redis does not answer yet")
	}
	return nil
}

// storeCounters exports the counters of a Redis-backed store.
func storeCounters(m *metrics.Metrics, s interface {
	Reconnects() int64
	Ghosts() (abandoned, pending int64)
}) {
	m.Counter("lockapi_pubsub_reconnects_total", "Times the pub/sub connection that wakes waiters was lost and redialled.",
		func() float64 { return float64(s.Reconnects()) })
	m.Counter("lockapi_ghost_grants_abandoned_total", "Holds undone because the acquire that added them could not be answered (timeout, broken connection, client gone).",
		func() float64 { n, _ := s.Ghosts(); return float64(n) })
}

// openRedis connects to Redis as configured; redisstore.NewClient says which
// settings lockapi's correctness depends on (no retries, deadlines on sockets).
func openRedis(c serveConfig) (*redisstore.Client, error) {
	return redisstore.NewClient(redisstore.ClientConfig{
		URL:          c.RedisURL,
		Mode:         c.RedisMode,
		ConfigureTLS: func(t *tls.Config) error { return redisTLS(c, t) },
	})
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseServeFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "lockapi serve: %v\n", err)
		return 2
	}
	log, err := newLogger(c, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "lockapi serve: %v\n", err)
		return 2
	}

	keys, err := loadKeys(c)
	if err != nil {
		log.Error().Err(err).Msg("bad API key configuration")
		return 2
	}
	if keys.Len() == 0 {
		log.Warn().Msg("NO API KEYS CONFIGURED: the server runs open; any client can acquire, release and force-release any lock. Set LOCKAPI_API_KEYS or LOCKAPI_API_KEYS_FILE (see `lockapi keys new`)")
	} else {
		log.Info().Int("keys", keys.Len()).Msg("API keys required on /v1 routes")
	}
	signer, err := releaseSigner(c)
	if err != nil {
		log.Error().Err(err).Msg("bad release secret configuration")
		return 2
	}
	tlsConfig, err := serverTLS(c)
	if err != nil {
		log.Error().Err(err).Msg("bad TLS configuration")
		return 2
	}

	// go-redis logs dial failures and the like on its own; send them
	// through our logger (debug: the failures that matter are logged with
	// the request that met them).
	redis.SetLogger(redisLogger{log})

	var m *metrics.Metrics
	if c.Metrics {
		m = metrics.New()
	}

	var st lock.Store
	var hookState webhook.State
	if c.RedisURL == "" {
		st = memory.NewWithOptions(memory.Options{MaxEvents: c.EventsMax, EventRetention: c.EventsRetention, NoEvents: !c.Events})
		hookState = memstate.New()
		log.Warn().Msg("no Redis configured (LOCKAPI_REDIS_URL): running on the embedded memory store; locks live only as long as this process")
	} else if c.RedisMode == modeRedlock {
		rl, clients, err := openRedlock(ctx, c, m, log)
		if err != nil {
			log.Error().Err(err).Msg("bad Redis configuration")
			return 2
		}
		defer func() {
			for _, c := range clients {
				_ = c.Close()
			}
		}()
		st = rl
		hookState = memstate.New() // no events in redlock mode: no webhooks either
		if signer == nil {
			if signer, err = sharedReleaseSigner(ctx, c, clients[0], log); err != nil {
				log.Error().Err(err).Msg("bad release secret in Redis")
				_ = rl.Close()
				return 2
			}
		}
	} else {
		rdb, err := openRedis(c)
		if err != nil {
			log.Error().Err(err).Msg("bad Redis configuration")
			return 2
		}
		defer rdb.Close()
		if err := checkTopology(ctx, c, rdb, log); err != nil {
			log.Error().Err(err).Str("mode", c.RedisMode).Msg("bad Redis configuration")
			return 2
		}
		opts := redisstore.Options{Prefix: c.KeyPrefix, Batch: c.RedisBatch, CallTimeout: c.RedisTimeout, MinReplicas: c.MinReplicas,
			Events: c.Events, EventsMax: c.EventsMax, EventsRetention: c.EventsRetention}
		if m != nil {
			opts.ObserveScript = m.Script
		}
		rs, err := redisstore.New(rdb, opts)
		if err != nil {
			log.Error().Err(err).Msg("bad Redis configuration")
			return 2
		}
		storeCounters(m, rs)
		m.Counter("lockapi_sentinel_master_switches_total", "Times the pub/sub connection followed a new Sentinel master.",
			func() float64 { return float64(rs.MasterSwitches()) })
		st = rs
		hookState = redisstate.New(rdb, c.KeyPrefix, c.RedisTimeout)
		if signer == nil {
			if signer, err = sharedReleaseSigner(ctx, c, rdb, log); err != nil {
				log.Error().Err(err).Msg("bad release secret in Redis")
				_ = rs.Close()
				return 2
			}
		}
		log.Info().Str("redis", rdb.Target()).Str("mode", c.RedisMode).Str("key_prefix", c.KeyPrefix).Msg("using Redis store")
	}
	defer st.Close()
	if signer == nil {
		signer, _ = auth.NewReleaseSigner(auth.RandomSecret())
		log.Warn().Msg("no LOCKAPI_RELEASE_SECRETS and no Redis: release URLs are signed with a random secret and stop working when this process restarts")
	}

	// One reader of the store's event log feeds the event streams and the
	// webhook workers alike; it closes after both have stopped.
	var feed *events.Feed
	if el := st.Events(); el != nil {
		feed = events.New(el, events.Options{Logger: log.With().Str("component", "events").Logger()})
		defer feed.Close()
	}
	hooks, err := openWebhooks(c, st, feed, hookState, m, log)
	if err != nil {
		log.Error().Err(err).Msg("bad webhooks configuration")
		return 2
	}
	hooksDone := make(chan struct{})
	if hooks != nil {
		go func() {
			defer close(hooksDone)
			hooks.Run(ctx)
		}()
	} else {
		close(hooksDone)
	}

	srv := lockhttp.NewServer(st, lockhttp.Config{
		DefaultTTL:  c.DefaultTTL,
		MaxTTL:      c.MaxTTL,
		MaxWait:     c.MaxWait,
		Logger:      log,
		MinReplicas: c.MinReplicas,

		Keys:                keys,
		Release:             signer,
		MaxWaiters:          c.MaxWaiters,
		MaxWaitersPerCaller: c.MaxWaitersPerCaller,
		RateLimit:           c.RateLimit,
		RateBurst:           c.RateBurst,
		TLS:                 tlsConfig,
		Metrics:             m,
		Webhooks:            webhooksAPI(hooks),
		Events:              feed,
	})
	if err := srv.Open(c.Addr); err != nil {
		log.Error().Err(err).Str("addr", c.Addr).Msg("cannot listen")
		return 1
	}
	log.Info().Str("addr", c.Addr).Str("url", srv.URL()).Msg("lockapi listening")
	if c.AdminAddr != "" {
		admin, err := openAdmin(c.AdminAddr, m)
		if err != nil {
			log.Error().Err(err).Str("admin_addr", c.AdminAddr).Msg("cannot listen")
			return 1
		}
		defer admin.Close()
		log.Info().Str("admin_addr", admin.Addr).Msg("admin listener (pprof) open")
	}

	<-ctx.Done()
	log.Info().Dur("timeout", c.ShutdownTimeout).Msg("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	if err := srv.Close(sctx); err != nil {
		log.Error().Err(err).Msg("shutdown did not finish in time")
		return 1
	}
	// The webhook workers release their leases, for another instance to
	// take over at once.
	select {
	case <-hooksDone:
	case <-sctx.Done():
		log.Error().Msg("webhook workers did not stop in time")
		return 1
	}
	return 0
}

// openWebhooks returns the webhook service, or nil when the store records
// no events: then there is nothing to deliver, and a webhooks file is a
// configuration error.
func openWebhooks(c serveConfig, st lock.Store, feed *events.Feed, state webhook.State, m *metrics.Metrics, log zerolog.Logger) (*webhook.Service, error) {
	policy := webhook.Policy{AllowPrivate: c.WebhooksAllowPrivate}
	var file []webhook.Subscription
	if c.WebhooksFile != "" {
		var err error
		if file, err = webhook.LoadFile(c.WebhooksFile, policy); err != nil {
			return nil, err
		}
	}
	eventLog := st.Events()
	if eventLog == nil {
		if len(file) > 0 {
			return nil, fmt.Errorf("%s configures webhooks, but this store records no lock events to deliver", c.WebhooksFile)
		}
		log.Info().Msg("webhooks off: the store records no lock events; /v1/webhooks answers 501")
		return nil, nil
	}
	if c.WebhooksAllowPrivate {
		log.Warn().Msg("LOCKAPI_WEBHOOKS_ALLOW_PRIVATE=true: webhooks may reach loopback, link-local and private addresses, over http too")
	}
	svc, err := webhook.New(webhook.Config{
		Store:      st,
		Log:        eventLog,
		Feed:       feed,
		State:      state,
		File:       file,
		Policy:     policy,
		Timeout:    c.WebhooksTimeout,
		RetryFor:   c.WebhooksRetryFor,
		Backoff:    webhook.Backoff{Min: c.WebhooksBackoffMin, Max: c.WebhooksBackoffMax},
		Logger:     log,
		OnDelivery: func(o webhook.Outcome) { m.WebhookDelivery(string(o)) },
	})
	if err != nil {
		return nil, err
	}
	m.Gauge("lockapi_webhook_retry_backlog", "Webhook events this instance waits to try again after a failed attempt (each subscription delivers in order: at most one each).",
		func() float64 { return float64(svc.RetryBacklog()) })
	m.Gauge("lockapi_webhook_oldest_undelivered_seconds", "Age of the oldest event this instance's webhook workers read and have not delivered yet; 0 when caught up.",
		func() float64 { return svc.OldestUndelivered().Seconds() })
	log.Info().Int("from_file", len(file)).Msg("webhooks on")
	return svc, nil
}

// webhooksAPI is the service as the HTTP layer takes it: a nil service is
// a nil interface, which answers 501.
func webhooksAPI(svc *webhook.Service) lockhttp.Webhooks {
	if svc == nil {
		return nil
	}
	return svc
}

// redisLogger adapts zerolog to go-redis's logger.
type redisLogger struct{ log zerolog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug().Str("component", "go-redis").Msgf(format, v...)
}
