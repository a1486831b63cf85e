package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"crypto/tls"

	"github.com/mattn/go-isatty"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/eventfeed"
	"github.com/lockapi/lockapi/internal/force"
	"github.com/lockapi/lockapi/internal/history"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/layout"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/metrics"
	"github.com/lockapi/lockapi/internal/store/memory"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/ui"
	"github.com/lockapi/lockapi/internal/webhook"
	"github.com/lockapi/lockapi/internal/webhook/memstate"
	"github.com/lockapi/lockapi/internal/webhook/redisstate"
)

func newLogger(c serveConfig, w io.Writer) (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(c.LogLevel)
	if err != nil || c.LogLevel == "" {
		return zerolog.Logger{}, fmt.Errorf("-log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	switch c.LogFormat {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: !colourful(w)}
	default:
		return zerolog.Logger{}, fmt.Errorf("-log-format %q: want json or console", c.LogFormat)
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger(), nil
}

// colourful reports whether console logs to w may have colour: only on a
// terminal, and not when NO_COLOR is set (https://no-color.org), so that a
// file, a pipe or a log collector gets no escape codes.
func colourful(w io.Writer) bool {
	return os.Getenv("NO_COLOR") == "" && isTerminal(w)
}

// isTerminal reports whether w is a terminal; a variable for the tests,
// which have none.
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
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

// serve implements `lockapi serve`: it reads the configuration, opens the
// store and serves until ctx ends.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseServeConfig(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, serveHelp())
		return 0
	}
	if err != nil {
		reportUsage(stderr, "serve", err)
		return exitUsage
	}
	unknown := unknownVariables(os.Environ(), new(serveConfig).settings())
	if c.StrictEnv && len(unknown) > 0 {
		reportUsage(stderr, "serve", strictEnvError(unknown))
		return exitUsage
	}
	log, err := newLogger(c, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "lockapi serve: %v\n", err)
		return exitUsage
	}
	for _, line := range unknown {
		log.Warn().Msg(line)
	}
	if limit := applyMemoryLimit(c.MemoryLimit); limit != math.MaxInt64 {
		from := "GOMEMLIMIT"
		if c.MemoryLimit >= 0 {
			from = c.source("memory-limit")
		}
		log.Info().Int64("bytes", limit).Str("setting", from).Msg("soft memory limit")
	}
	keys, signer, tlsConfig, err := loadSecurity(c, log)
	if err != nil {
		log.Error().Err(err).Msg("bad security configuration")
		return exitUsage
	}

	var m *metrics.Metrics
	if c.Metrics {
		m = metrics.New()
	}
	watchKeys(ctx, c, keys, m, log)
	b, err := openBackend(ctx, c, m, log)
	if err != nil {
		log.Error().Err(err).Str("mode", c.RedisMode).Str("setting", c.source("redis-url")).Msg("bad Redis configuration")
		return exitUsage
	}
	defer b.close()
	if signer == nil {
		if signer, err = unconfiguredSigner(ctx, c, b, log); err != nil {
			log.Error().Err(err).Msg("bad release secret in Redis")
			return exitUsage
		}
	}

	// One reader of the store's event log feeds the event streams and the
	// webhook workers alike; it closes after both have stopped.
	// The history window follows it for as long as the process runs.
	var feed *eventfeed.Feed
	var hist *history.Window
	if el := b.store.Events(); el != nil {
		feed = eventfeed.New(el, eventfeed.Options{Logger: log.With().Str("component", "events").Logger()})
		defer feed.Close()
		hist = history.Start(feed, el, history.Options{Leases: c.HistoryLeases, Logger: log.With().Str("component", "history").Logger()})
		defer hist.Close()
	}
	hooks, err := openWebhooks(c, b.store, feed, b.hookState, m, log)
	if err != nil {
		log.Error().Err(err).Str("setting", c.source("webhooks-file")).Msg("bad webhooks configuration")
		return exitUsage
	}
	hooksDone := runWebhooks(ctx, hooks)

	srv := lockhttp.NewServer(b.store, lockhttp.Config{
		DefaultTTL:  c.DefaultTTL,
		MaxTTL:      c.MaxTTL,
		MaxWait:     c.MaxWait,
		Logger:      log,
		MinReplicas: c.MinReplicas,

		Keys:                    keys,
		Release:                 signer,
		MaxWaiters:              c.MaxWaiters,
		MaxWaitersPerCaller:     c.MaxWaitersPerCaller,
		MaxWatches:              c.MaxWatches,
		MaxWatchesPerCaller:     c.MaxWatchesPerCaller,
		MaxSessionsPerPrincipal: c.MaxSessionsPerPrincipal,
		MaxWebhooksPerPrincipal: c.MaxWebhooksPerPrincipal,
		RateLimit:               c.RateLimit,
		RateBurst:               c.RateBurst,
		TLS:                     tlsConfig,
		Metrics:                 m,
		Webhooks:                webhooksAPI(hooks),
		Events:                  feed,
		History:                 hist,
	})
	// The admin dashboard, beside the API and a client of its rules: its
	// live feed asks the API for /v1/events, and its force release is the
	// API's, counted alike.
	srv.MountDashboard(ui.New(ui.Config{Store: b.store, Keys: keys, API: srv.Handler(), Force: force.NewReleaser(b.store, m), Webhooks: webhooksAPI(hooks),
		Secrets: signer, SessionTTL: c.UISessionTTL, Revocations: b.revocations(c)}))
	if err := srv.Open(c.Addr); err != nil {
		log.Error().Err(err).Str("addr", c.Addr).Str("setting", c.source("addr")).Msg("cannot listen")
		return 1
	}
	// One line that says where to go next: the browser's page, the API
	// and its contract.
	url := srv.URL()
	log.Info().Str("addr", c.Addr).Str("url", url).Str("dashboard", url+lockhttp.DashboardPath).
		Str("api", url+"/v1/").Str("openapi", url+"/openapi.yaml").Msg("lockapi listening")
	closeAdmin, err := openAdminFor(c, m, log)
	if err != nil {
		return 1
	}
	defer closeAdmin()

	<-ctx.Done()
	return shutdown(c, srv, hooksDone, log)
}

// openAdminFor opens the admin listener if c asks for one, and returns
// what closes it; an error is logged.
func openAdminFor(c serveConfig, m *metrics.Metrics, log zerolog.Logger) (func(), error) {
	if c.AdminAddr == "" {
		return func() {}, nil
	}
	admin, err := openAdmin(c.AdminAddr, m)
	if err != nil {
		log.Error().Err(err).Str("admin_addr", c.AdminAddr).Str("setting", c.source("admin-addr")).Msg("cannot listen")
		return nil, err
	}
	log.Info().Str("admin_addr", admin.Addr).Msg("admin listener (pprof) open")
	return func() { _ = admin.Close() }, nil
}

// shutdown lets in-flight requests and the webhook workers finish within
// the shutdown timeout, and returns the exit status.
func shutdown(c serveConfig, srv *lockhttp.Server, hooksDone <-chan struct{}, log zerolog.Logger) int {
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

// unconfiguredSigner signs release URLs when no secrets are configured:
// with the secret kept in Redis for every instance, else with a random one.
func unconfiguredSigner(ctx context.Context, c serveConfig, b *backend, log zerolog.Logger) (*auth.ReleaseSigner, error) {
	if b.secrets != nil {
		return sharedReleaseSigner(ctx, c, b.secrets, log)
	}
	log.Warn().Msg("no LOCKAPI_RELEASE_SECRETS and no Redis: release URLs are signed with a random secret and stop working when this process restarts")
	return auth.NewReleaseSigner(auth.RandomSecret())
}

// runWebhooks runs the webhook workers, if any, until ctx ends; the channel
// closes once they have stopped.
func runWebhooks(ctx context.Context, hooks *webhook.Service) <-chan struct{} {
	done := make(chan struct{})
	if hooks == nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		hooks.Run(ctx)
	}()
	return done
}

// loadSecurity reads the API keys, the release URL secrets and the HTTPS
// certificate, which the configuration has checked, and says whether the
// server runs open. A nil signer: none configured.
func loadSecurity(c serveConfig, log zerolog.Logger) (*auth.Keyring, *auth.ReleaseSigner, *tls.Config, error) {
	keys, err := loadKeys(c)
	if err != nil {
		return nil, nil, nil, err
	}
	if keys.Len() == 0 {
		log.Warn().Msg("NO API KEYS CONFIGURED: the server runs open; any client can acquire, release and force-release any lock. Set LOCKAPI_API_KEYS or LOCKAPI_API_KEYS_FILE (see `lockapi keys new`)")
		if os.Getenv("LOCKAPI_API_KEY") != "" {
			log.Warn().Msg(clientKeyOnServer)
		}
	} else {
		log.Info().Int("keys", keys.Len()).Msg("API keys required on /v1 routes")
	}
	// An expired key is no configuration error (a rotation leaves the old
	// line for a while), but whoever still holds it will get 401s.
	for _, principal := range keys.Expired(time.Now()) {
		log.Warn().Str("principal", principal).Msg("an API key has expired (its expires= time has passed): requests with it are answered 401; remove its line")
	}
	signer, err := releaseSigner(c)
	if err != nil {
		return nil, nil, nil, err
	}
	tlsConfig, err := serverTLS(c)
	return keys, signer, tlsConfig, err
}

// backend is the store serve runs on, with what goes with it.
type backend struct {
	store     lock.Store
	hookState webhook.State
	// secrets is the Redis that keeps the release URL secret every
	// instance shares; nil on the memory store.
	secrets *redisstore.Client
	close   func()
}

// revocations keeps the dashboard's sign-outs where every instance reads
// them: in Redis (the first master in redlock mode), else in this process.
func (b *backend) revocations(c serveConfig) auth.Revocations {
	if b.secrets == nil {
		return auth.MemoryRevocations()
	}
	return auth.RedisRevocations(b.secrets, c.KeyPrefix+"ui:signout:")
}

// openBackend opens the store c configures: the memory store without a
// Redis URL, else Redis in c's mode.
func openBackend(ctx context.Context, c serveConfig, m *metrics.Metrics, log zerolog.Logger) (*backend, error) {
	// go-redis logs dial failures and the like on its own; send them
	// through our logger (debug: the failures that matter are logged with
	// the request that met them).
	redis.SetLogger(redisLogger{log})
	switch {
	case c.RedisURL == "":
		st := memory.NewWithOptions(memory.Options{MaxEvents: c.EventsMax, EventRetention: c.EventsRetention, NoEvents: !c.Events})
		log.Warn().Msg("no Redis configured (LOCKAPI_REDIS_URL): running on the embedded memory store; locks live only as long as this process")
		return &backend{store: st, hookState: memstate.New(), close: func() { _ = st.Close() }}, nil
	case c.RedisMode == modeRedlock:
		rl, clients, err := openRedlock(ctx, c, m, log)
		if err != nil {
			return nil, err
		}
		return &backend{store: rl, hookState: memstate.New(), secrets: clients[0], close: func() {
			_ = rl.Close()
			for _, c := range clients {
				_ = c.Close()
			}
		}}, nil // no events in redlock mode: no webhooks either
	}
	return openRedisBackend(ctx, c, m, log)
}

// openRedisBackend opens the store on one Redis deployment: single,
// Sentinel or Cluster.
func openRedisBackend(ctx context.Context, c serveConfig, m *metrics.Metrics, log zerolog.Logger) (*backend, error) {
	rdb, err := openRedis(c)
	if err != nil {
		return nil, err
	}
	if err := checkTopology(ctx, c, rdb, log); err != nil {
		_ = rdb.Close()
		return nil, err
	}
	opts := redisstore.Options{Prefix: c.KeyPrefix, Batch: c.RedisBatch, CallTimeout: c.RedisTimeout, MinReplicas: c.MinReplicas,
		Events: c.Events, EventsMax: c.EventsMax, EventsRetention: c.EventsRetention, EventsByField: c.EventsByField}
	if m != nil {
		opts.ObserveScript = m.Script
	}
	layouts := layout.NewReporter(log.With().Str("component", "layout").Logger(), m.UnknownLayout)
	opts.UnknownLayout = layouts.Unknown
	rs, err := redisstore.New(rdb, opts)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	storeCounters(m, rs)
	m.Counter("lockapi_sentinel_master_switches_total", "Times the pub/sub connection followed a new Sentinel master.",
		func() float64 { return float64(rs.MasterSwitches()) })
	log.Info().Str("redis", rdb.Target()).Str("mode", c.RedisMode).Str("key_prefix", c.KeyPrefix).Msg("using Redis store")
	hookState := redisstate.New(rdb, c.KeyPrefix, c.RedisTimeout)
	hookState.SetUnknownLayout(layouts.Unknown)
	return &backend{store: rs, hookState: hookState, secrets: rdb, close: func() {
		_ = rs.Close()
		_ = rdb.Close()
	}}, nil
}

// openWebhooks returns the webhook service, or nil when the store records
// no events: then there is nothing to deliver, and a webhooks file is a
// configuration error.
func openWebhooks(c serveConfig, st lock.Store, feed *eventfeed.Feed, state webhook.State, m *metrics.Metrics, log zerolog.Logger) (*webhook.Service, error) {
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
		Store:         st,
		Log:           eventLog,
		Feed:          feed,
		State:         state,
		File:          file,
		Policy:        policy,
		Timeout:       c.WebhooksTimeout,
		MaxDeliveries: c.WebhooksMaxDeliveries,
		RetryFor:      c.WebhooksRetryFor,
		Backoff:       webhook.Backoff{Min: c.WebhooksBackoffMin, Max: c.WebhooksBackoffMax},
		Logger:        log,
		OnDelivery:    func(o webhook.Outcome) { m.WebhookDelivery(string(o)) },
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
