package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store"
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
}

func parseServeFlags(args []string, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	str := func(p *string, name, env, def, help string) {
		fs.StringVar(p, name, envOr(env, def), help+" ($"+env+")")
	}
	dur := func(p *time.Duration, name, env string, def time.Duration, help string) {
		v := def
		if s := os.Getenv(env); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				fmt.Fprintf(stderr, "lockapi: $%s: %v\n", env, err)
			} else {
				v = d
			}
		}
		fs.DurationVar(p, name, v, help+" ($"+env+")")
	}
	str(&c.Addr, "addr", "LOCKAPI_ADDR", ":8080", "address to listen on")
	str(&c.RedisURL, "redis-url", "LOCKAPI_REDIS_URL", "", "Redis URL, redis:// or rediss://; empty runs on the embedded memory store")
	str(&c.RedisMode, "redis-mode", "LOCKAPI_REDIS_MODE", "single", "single, sentinel (URL names sentinels and ?master_name=) or cluster (URL names seed nodes, more with &addr=)")
	str(&c.KeyPrefix, "key-prefix", "LOCKAPI_KEY_PREFIX", store.DefaultPrefix, "prefix of every Redis key and channel")
	dur(&c.DefaultTTL, "default-ttl", "LOCKAPI_DEFAULT_TTL", 30*time.Second, "lease TTL when a request gives none")
	dur(&c.MaxTTL, "max-ttl", "LOCKAPI_MAX_TTL", 24*time.Hour, "largest TTL a request may ask for")
	dur(&c.MaxWait, "max-wait", "LOCKAPI_MAX_WAIT", 60*time.Second, "longest wait of a long-poll; longer waits are clamped")
	str(&c.LogLevel, "log-level", "LOCKAPI_LOG_LEVEL", "info", "debug, info, warn or error")
	str(&c.LogFormat, "log-format", "LOCKAPI_LOG_FORMAT", "json", "json or console")
	dur(&c.ShutdownTimeout, "shutdown-timeout", "LOCKAPI_SHUTDOWN_TIMEOUT", 10*time.Second, "how long in-flight requests may take to finish on shutdown")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	switch {
	case c.DefaultTTL < lock.MinTTL || c.DefaultTTL > c.MaxTTL:
		return c, fmt.Errorf("-default-ttl must lie between %v and -max-ttl (%v)", lock.MinTTL, c.MaxTTL)
	case c.MaxWait < 0:
		return c, errors.New("-max-wait must not be negative")
	}
	return c, nil
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

// openRedis connects to Redis as configured. Commands are never retried by
// the client: a script whose reply was lost may have run, and running an
// acquire or a release twice is not the same as running it once.
func openRedis(c serveConfig) (redis.UniversalClient, error) {
	switch c.RedisMode {
	case "single":
		o, err := redis.ParseURL(c.RedisURL)
		if err != nil {
			return nil, err
		}
		o.MaxRetries = -1
		return redis.NewClient(o), nil
	case "sentinel":
		o, err := redis.ParseFailoverURL(c.RedisURL)
		if err != nil {
			return nil, err
		}
		o.MaxRetries = -1
		return redis.NewFailoverClient(o), nil
	case "cluster":
		o, err := redis.ParseClusterURL(c.RedisURL)
		if err != nil {
			return nil, err
		}
		o.MaxRetries = -1
		return redis.NewClusterClient(o), nil
	}
	return nil, fmt.Errorf("-redis-mode %q: want single, sentinel or cluster", c.RedisMode)
}

// redisTarget describes where a Redis URL points, without its password.
func redisTarget(rawURL string) string {
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		return "(unparsed URL)"
	}
	scheme := "redis"
	if o.TLSConfig != nil {
		scheme = "rediss"
	}
	return fmt.Sprintf("%s://%s/%d", scheme, o.Addr, o.DB)
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

	var st lock.Store
	if c.RedisURL == "" {
		st = store.NewMemory()
		log.Warn().Msg("no Redis configured (LOCKAPI_REDIS_URL): running on the embedded memory store; locks live only as long as this process")
	} else {
		rdb, err := openRedis(c)
		if err != nil {
			log.Error().Err(err).Msg("bad Redis configuration")
			return 2
		}
		defer rdb.Close()
		rs, err := store.NewRedis(rdb, store.RedisOptions{Prefix: c.KeyPrefix})
		if err != nil {
			log.Error().Err(err).Msg("bad Redis configuration")
			return 2
		}
		st = rs
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if err := st.Ping(pctx); err != nil {
			// Not fatal: /readyz says 503 until Redis answers.
			log.Warn().Err(err).Msg("Redis does not answer yet")
		}
		cancel()
		log.Info().Str("redis", redisTarget(c.RedisURL)).Str("mode", c.RedisMode).Str("key_prefix", c.KeyPrefix).Msg("using Redis store")
	}
	defer st.Close()

	srv := lockhttp.NewServer(st, lockhttp.Config{
		DefaultTTL: c.DefaultTTL,
		MaxTTL:     c.MaxTTL,
		MaxWait:    c.MaxWait,
		Logger:     log,
	})
	if err := srv.Open(c.Addr); err != nil {
		log.Error().Err(err).Str("addr", c.Addr).Msg("cannot listen")
		return 1
	}
	log.Info().Str("addr", c.Addr).Str("url", srv.URL()).Msg("lockapi listening")

	<-ctx.Done()
	log.Info().Dur("timeout", c.ShutdownTimeout).Msg("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	if err := srv.Close(sctx); err != nil {
		log.Error().Err(err).Msg("shutdown did not finish in time")
		return 1
	}
	return 0
}
