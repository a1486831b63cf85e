package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/history"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/store/redlock"
	"github.com/lockapi/lockapi/internal/ui"
	"github.com/lockapi/lockapi/internal/webhook"
)

// serveConfig is everything `lockapi serve` can be told, read once from
// the flags and LOCKAPI_* variables of its table (settings).
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
	UISessionTTL   time.Duration

	MaxWaiters          int
	MaxWaitersPerCaller int
	MaxWatches          int
	MaxWatchesPerCaller int
	RateLimit           float64
	RateBurst           int
	// MaxSessionsPerPrincipal and MaxWebhooksPerPrincipal are the quotas
	// of what a principal creates that outlives a request.
	MaxSessionsPerPrincipal int
	MaxWebhooksPerPrincipal int
	// MemoryLimit is Go's soft memory limit in bytes; -1: not given.
	MemoryLimit int64

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
	EventsByField   bool
	HistoryLeases   int

	TLSCert, TLSKey                       string
	RedisTLSCA, RedisTLSCert, RedisTLSKey string

	WebhooksFile          string
	WebhooksAllowPrivate  bool
	WebhooksTimeout       time.Duration
	WebhooksMaxDeliveries int
	WebhooksRetryFor      time.Duration
	WebhooksBackoffMin    time.Duration
	WebhooksBackoffMax    time.Duration

	// StrictEnv makes an unknown LOCKAPI_* variable an error, not a warning.
	StrictEnv bool

	// set says, by flag name, where each setting the user gave came from;
	// a setting left at its default is absent.
	set map[string]origin
}

// origin is where a setting came from: what the user set, and its text.
type origin struct {
	from, text string
	secret     bool // the text is never echoed back
}

// setting is one line of the configuration table: a flag and the LOCKAPI_*
// variable of the same name, in a group of the help, with its value.
type setting struct {
	name  string // the flag without dashes; the variable is envName(name)
	group string
	help  string
	value value
}

// envName is the variable of the flag name: addr is LOCKAPI_ADDR.
func envName(name string) string {
	return "LOCKAPI_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// settings is the table of `lockapi serve`, bound to c: the one place that
// says which flags and variables there are, their defaults and their forms,
// in the order help lists them. Binding it gives c its defaults.
func (c *serveConfig) settings() []setting {
	const (
		listen  = "Listening"
		store   = "Store (empty --redis-url: the embedded memory store)"
		leases  = "Leases"
		access  = "Access"
		limits  = "Limits"
		events  = "Events and webhooks"
		observe = "Logs and metrics"
	)
	logLevel := value{arg: "debug|info|warn|error", def: "info", set: func(s string) error {
		if _, err := zerolog.ParseLevel(s); err != nil || s == "" {
			return wantf("debug, info, warn or error")
		}
		c.LogLevel = s
		return nil
	}}
	c.LogLevel = logLevel.def
	return []setting{
		{"addr", listen, "address to listen on", addrValue(&c.Addr, ":8080", false)},
		{"tls-cert", listen, "PEM certificate file: serve HTTPS (with --tls-key)", fileValue(&c.TLSCert)},
		{"tls-key", listen, "PEM private key file of --tls-cert", fileValue(&c.TLSKey)},
		{"admin-addr", listen, "address of a separate admin listener with pprof and /metrics; empty: off", addrValue(&c.AdminAddr, "", true)},
		{"shutdown-timeout", listen, "how long in-flight requests may take to finish on shutdown", durationValue(&c.ShutdownTimeout, 10*time.Second, notNegative)},

		{"redis-url", store, "Redis URL, redis:// or rediss://", redisURLValue(&c.RedisURL)},
		{"redis-mode", store, "single; sentinel (the URL names sentinels and ?master_name=); cluster (the URL names seed nodes, more with &addr=); redlock (the URL names 3, 5, ... independent masters: redis://a,b,c or &addr=)",
			oneOf(&c.RedisMode, redisstore.ModeSingle, redisstore.ModeSingle, redisstore.ModeSentinel, redisstore.ModeCluster, modeRedlock)},
		{"key-prefix", store, "prefix of every Redis key and channel, without { or }", prefixValue(&c.KeyPrefix)},
		{"redis-timeout", store, "deadline of every Redis call; a call that runs out is answered 503 and never sent again", durationValue(&c.RedisTimeout, redisstore.DefaultCallTimeout, positive)},
		{"redlock-timeout", store, "redlock mode: deadline of each master's part of a call, much shorter than any TTL", durationValue(&c.RedlockTimeout, redlock.DefaultTimeout, positive)},
		{"min-replicas", store, "replicas that must confirm a grant (Redis WAIT) before it is answered; a request may ask for fewer", intValue(&c.MinReplicas, 0, notNegative)},
		{"redis-batch", store, "send concurrent script calls to Redis together in pipelines", boolValue(&c.RedisBatch, true)},
		{"redis-tls-ca", store, "PEM CA bundle that signs the Redis server's certificate (rediss://)", fileValue(&c.RedisTLSCA)},
		{"redis-tls-cert", store, "PEM client certificate for Redis (rediss://, with --redis-tls-key)", fileValue(&c.RedisTLSCert)},
		{"redis-tls-key", store, "PEM client key of --redis-tls-cert", fileValue(&c.RedisTLSKey)},

		{"default-ttl", leases, "lease TTL when a request gives none", durationValue(&c.DefaultTTL, lockhttp.DefaultTTL, positive)},
		{"max-ttl", leases, fmt.Sprintf("largest TTL a request may ask for, at most %v", shortDuration(lockhttp.MaxTTLCeiling)), durationValue(&c.MaxTTL, lockhttp.DefaultMaxTTL, positive)},
		{"max-wait", leases, "longest wait of a long-poll; longer waits are clamped", durationValue(&c.MaxWait, lockhttp.DefaultMaxWait, notNegative)},

		{"api-keys", access, "API key lines, as `lockapi keys new` prints them, separated by newlines or ;; none: the server runs open", keysValue(&c.APIKeys)},
		{"api-keys-file", access, "file of API key lines, added to --api-keys; read again on SIGHUP and when it changes (every 2s)", keysFileValue(&c.APIKeysFile)},
		{"ui-session-ttl", access, "how long a dashboard session lasts from sign-in; signing out, or the key leaving the configuration, ends it sooner", durationValue(&c.UISessionTTL, ui.DefaultSessionTTL, positive)},
		{"release-secrets", access, "comma-separated secrets (16+ bytes) for signed release URLs; the first signs, all verify; empty: one kept in Redis for every instance (a random one per process on the memory store)", secretsValue(&c.ReleaseSecrets)},

		{"max-waiters", limits, "most requests waiting at once (long-poll acquires and event streams)", intValue(&c.MaxWaiters, lockhttp.DefaultMaxWaiters, positive)},
		{"max-waiters-per-caller", limits, "most waiting requests of one principal (or client address on an open server)", intValue(&c.MaxWaitersPerCaller, lockhttp.DefaultMaxWaitersPerCaller, positive)},
		{"max-watches", limits, "most blocking queries waiting at once (an SDK's loss watch: one per held lease and session), apart from the waiters", intValue(&c.MaxWatches, lockhttp.DefaultMaxWatches, positive)},
		{"max-watches-per-caller", limits, "most blocking queries waiting of one principal (or client address on an open server)", intValue(&c.MaxWatchesPerCaller, lockhttp.DefaultMaxWatchesPerCaller, positive)},
		{"max-sessions-per-principal", limits, "most live sessions of one principal (of all callers, on an open server), counted over every instance", intValue(&c.MaxSessionsPerPrincipal, lockhttp.DefaultMaxSessionsPerPrincipal, positive)},
		{"max-webhooks-per-principal", limits, "most webhooks one principal may create over /v1/webhooks, counted over every instance", intValue(&c.MaxWebhooksPerPrincipal, lockhttp.DefaultMaxWebhooksPerPrincipal, positive)},
		{"rate-limit", limits, "requests per second per principal (or client address); 0: no limit", rateValue(&c.RateLimit, 0)},
		{"rate-burst", limits, "burst of the rate limit; 0: one second's worth", intValue(&c.RateBurst, 0, notNegative)},
		{"memory-limit", limits, "Go's soft memory limit (debug.SetMemoryLimit), such as 512MiB; empty: GOMEMLIMIT's, or none", memoryLimitValue(&c.MemoryLimit)},

		{"events", events, "record every lock change in the event log", boolValue(&c.Events, true)},
		{"events-max", events, "about how many events the event log keeps at most", intValue(&c.EventsMax, redisstore.DefaultEventsMax, positive)},
		{"events-retention", events, "how long the event log keeps events at least, within --events-max", durationValue(&c.EventsRetention, redisstore.DefaultEventsRetention, positive)},
		{"events-by-field", events, "write each event's fields as stream fields of their own, the layout earlier versions read, while a rolling deploy runs them beside this one (Redis)", boolValue(&c.EventsByField, false)},
		{"history-leases", events, "ended leases per lock that each instance keeps in memory for GET /v1/locks/{name}/history, beside an hour of per-minute figures per lock", intValue(&c.HistoryLeases, history.DefaultLeases, positive)},
		{"webhooks-file", events, "JSON file of webhook subscriptions, beside those created over /v1/webhooks", fileValue(&c.WebhooksFile)},
		{"webhooks-allow-private", events, "let webhooks reach loopback, link-local and private addresses, and use http", boolValue(&c.WebhooksAllowPrivate, false)},
		{"webhooks-timeout", events, "time limit of one webhook delivery attempt", durationValue(&c.WebhooksTimeout, webhook.DefaultTimeout, positive)},
		{"webhooks-max-deliveries", events, "most webhook delivery attempts in flight at once, over every webhook; one receiver host gets half of them at most", intValue(&c.WebhooksMaxDeliveries, webhook.DefaultMaxDeliveries, positive)},
		{"webhooks-retry-for", events, "how long after an event its delivery is retried before it becomes a dead letter", durationValue(&c.WebhooksRetryFor, webhook.DefaultRetryFor, positive)},
		{"webhooks-backoff-min", events, "ceiling of the first wait between webhook attempts; it doubles per failure (full jitter)", durationValue(&c.WebhooksBackoffMin, webhook.DefaultBackoff.Min, positive)},
		{"webhooks-backoff-max", events, "largest ceiling of the wait between webhook attempts", durationValue(&c.WebhooksBackoffMax, webhook.DefaultBackoff.Max, positive)},

		{"log-level", observe, "least level logged", logLevel},
		{"log-format", observe, "json, or console for people", oneOf(&c.LogFormat, "json", "json", "console")},
		{"metrics", observe, "serve Prometheus metrics at /metrics", boolValue(&c.Metrics, true)},
		{"strict-env", observe, "a LOCKAPI_* variable that is no setting stops the server (exit 2) instead of a warning", boolValue(&c.StrictEnv, false)},
	}
}

// parseServeConfig reads the configuration from the flags in args and from
// the variables getenv returns; a flag wins over its variable, and an empty
// variable is unset. Every setting that does not read is a *badValue in the
// joined error; asked for help, it returns flag.ErrHelp.
func parseServeConfig(args []string, getenv func(string) string) (serveConfig, error) {
	var c serveConfig
	table := c.settings()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	given := map[string]string{}
	for _, s := range table {
		fs.Func(s.name, s.help, func(text string) error { given[s.name] = text; return nil })
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q: serve takes flags only", fs.Arg(0))
	}
	c.set = map[string]origin{}
	var errs []error
	for _, s := range table {
		o := origin{from: "--" + s.name}
		text, ok := given[s.name]
		if !ok {
			if text = getenv(envName(s.name)); text == "" {
				continue
			}
			o.from = envName(s.name)
		}
		o.text, o.secret = text, s.value.secret
		c.set[s.name] = o
		if err := s.value.set(text); err != nil {
			errs = append(errs, &badValue{from: o.from, text: text, secret: s.value.secret, why: err.Error()})
		}
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	return c, c.check()
}

// source names the setting as the user gave it: the variable when it came
// from the environment, else the flag.
func (c *serveConfig) source(name string) string {
	if o, ok := c.set[name]; ok {
		return o.from
	}
	return "--" + name
}

// sibling names the setting other the way the user gave name: a flag
// beside a flag, a variable beside a variable.
func (c *serveConfig) sibling(name, other string) string {
	if strings.HasPrefix(c.source(name), "LOCKAPI_") {
		return envName(other)
	}
	return "--" + other
}

// bad is the error of the setting name in the light of the others.
func (c *serveConfig) bad(name string, why string, args ...any) *badValue {
	o := c.set[name]
	return &badValue{from: c.source(name), text: o.text, secret: o.secret, why: fmt.Sprintf(why, args...)}
}

// check checks what no setting can check alone, naming the setting the user
// gave (of two, the one given).
func (c *serveConfig) check() error {
	_, ttlGiven := c.set["default-ttl"]
	_, maxGiven := c.set["max-ttl"]
	_, backoffMaxGiven := c.set["webhooks-backoff-max"]
	switch {
	case c.MaxTTL > lockhttp.MaxTTLCeiling:
		return c.bad("max-ttl", "want at most %v, the ceiling of every server", shortDuration(lockhttp.MaxTTLCeiling))
	case c.DefaultTTL < lock.MinTTL:
		return c.bad("default-ttl", "want at least %v", shortDuration(lock.MinTTL))
	case c.DefaultTTL > c.MaxTTL && maxGiven && !ttlGiven:
		return c.bad("max-ttl", "want at least the default TTL, %v (%s)", shortDuration(c.DefaultTTL), c.sibling("max-ttl", "default-ttl"))
	case c.DefaultTTL > c.MaxTTL:
		return c.bad("default-ttl", "want at most the largest TTL, %v (%s)", shortDuration(c.MaxTTL), c.sibling("default-ttl", "max-ttl"))
	case c.MinReplicas > 0 && c.RedisURL == "":
		return c.bad("min-replicas", "want 0 on the embedded memory store, which has no replicas (or set %s)", c.sibling("min-replicas", "redis-url"))
	case c.WebhooksBackoffMax < c.WebhooksBackoffMin && !backoffMaxGiven:
		return c.bad("webhooks-backoff-min", "want at most %s, %v", c.sibling("webhooks-backoff-min", "webhooks-backoff-max"), shortDuration(c.WebhooksBackoffMax))
	case c.WebhooksBackoffMax < c.WebhooksBackoffMin:
		return c.bad("webhooks-backoff-max", "want at least %s, %v", c.sibling("webhooks-backoff-max", "webhooks-backoff-min"), shortDuration(c.WebhooksBackoffMin))
	}
	if err := c.checkAPIKeys(); err != nil {
		return err
	}
	if err := c.checkTLS(); err != nil {
		return err
	}
	if err := c.checkRedisTLS(); err != nil {
		return err
	}
	return c.checkWebhooks()
}

// checkAPIKeys reads the keys of both settings together: a key configured
// in both is an error only they show.
func (c *serveConfig) checkAPIKeys() error {
	if _, err := loadKeys(*c); err != nil {
		return c.bad("api-keys-file", "%v; want each key once, in %s or in the file", err, c.sibling("api-keys-file", "api-keys"))
	}
	return nil
}

// checkTLS loads the certificate and key that serve HTTPS.
func (c *serveConfig) checkTLS() error {
	return checkPair(c, "tls-cert", "tls-key", c.TLSCert, c.TLSKey)
}

// checkRedisTLS loads the TLS files of Redis, which need a rediss:// URL.
func (c *serveConfig) checkRedisTLS() error {
	for _, name := range []string{"redis-tls-ca", "redis-tls-cert"} {
		if _, given := c.set[name]; given && !strings.HasPrefix(c.RedisURL, "rediss://") {
			return c.bad(name, "want a rediss:// URL in %s: TLS files do not upgrade a redis:// connection", c.sibling(name, "redis-url"))
		}
	}
	if c.RedisTLSCA != "" {
		pem, _ := os.ReadFile(c.RedisTLSCA)
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return c.bad("redis-tls-ca", "no PEM certificate in it; want a PEM CA bundle")
		}
	}
	return checkPair(c, "redis-tls-cert", "redis-tls-key", c.RedisTLSCert, c.RedisTLSKey)
}

// checkPair loads a certificate and its key, which go together.
func checkPair(c *serveConfig, certName, keyName, cert, key string) error {
	switch {
	case cert == "" && key == "":
		return nil
	case key == "":
		return c.bad(certName, "want %s with it", c.sibling(certName, keyName))
	case cert == "":
		return c.bad(keyName, "want %s with it", c.sibling(keyName, certName))
	}
	if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
		return c.bad(certName, "%v; want a PEM certificate, and its PEM key in %s", err, c.sibling(certName, keyName))
	}
	return nil
}

// checkWebhooks reads the webhooks file the way the webhook service will.
func (c *serveConfig) checkWebhooks() error {
	if c.WebhooksFile == "" {
		return nil
	}
	if _, err := webhook.LoadFile(c.WebhooksFile, webhook.Policy{AllowPrivate: c.WebhooksAllowPrivate}); err != nil {
		return c.bad("webhooks-file", "%v; want a JSON file of webhook subscriptions (see docs/WEBHOOKS.md)", err)
	}
	return nil
}

// prefixValue is the prefix of Redis keys, which may not hold the braces
// of Redis Cluster's hash tags.
func prefixValue(p *string) value {
	v := stringValue(p, redisstore.DefaultPrefix)
	v.arg = "TEXT"
	v.set = func(s string) error {
		if strings.ContainsAny(s, "{}") {
			return wantf("a prefix without { or }, such as %s", redisstore.DefaultPrefix)
		}
		*p = s
		return nil
	}
	return v
}

// keysValue is API key lines; the text is never echoed, in case a key
// itself was pasted where its line belongs.
func keysValue(p *string) value {
	return value{arg: "LINES", secret: true, set: func(s string) error {
		if _, err := auth.ParseKeys(s); err != nil {
			return wantf("lines as `lockapi keys new` prints them: principal=… scopes=… patterns=… sha256=…; %s", keyLineAt(err))
		}
		*p = s
		return nil
	}}
}

// keyLineAt is which key line is bad, without the line: a key pasted where
// its line belongs would be echoed.
func keyLineAt(err error) string {
	where, _, _ := strings.Cut(err.Error(), ": ")
	if errors.Is(err, auth.ErrBadExpires) {
		return where + "'s expires= is not " + strings.TrimPrefix(auth.ErrBadExpires.Error(), "want ")
	}
	return where + " is not"
}

// keysFileValue is a readable file of API key lines.
func keysFileValue(p *string) value {
	v := fileValue(p)
	read := v.set
	v.set = func(s string) error {
		if err := read(s); err != nil || s == "" {
			return err
		}
		b, _ := os.ReadFile(s)
		if _, err := auth.ParseKeys(string(b)); err != nil {
			return wantf("a file of lines as `lockapi keys new` prints them (%v)", err)
		}
		return nil
	}
	return v
}

// secretsValue is the release URL secrets, never echoed.
func secretsValue(p *string) value {
	return value{arg: "SECRETS", secret: true, set: func(s string) error {
		if _, err := releaseSigner(serveConfig{ReleaseSecrets: s}); err != nil {
			return wantf("comma-separated secrets of 16 bytes or more")
		}
		*p = s
		return nil
	}}
}
