package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Redis deployment modes.
const (
	ModeSingle   = "single"
	ModeSentinel = "sentinel"
	ModeCluster  = "cluster"
)

// ClientConfig says where Redis is.
type ClientConfig struct {
	// URL is redis:// or rediss://. In sentinel mode it names the sentinels
	// (more with &addr=) and must carry ?master_name=; in cluster mode it
	// names seed nodes (more with &addr=).
	URL  string
	Mode string // ModeSingle (default), ModeSentinel or ModeCluster
	// ConfigureTLS, when set, completes the TLS configuration of a rediss://
	// URL (CA bundle, client certificate). It is given nil for redis://.
	ConfigureTLS func(*tls.Config) error
}

// Client is a go-redis client set up the way the store needs it, with what
// the store must know of the deployment behind it.
type Client struct {
	goredis.UniversalClient
	Mode string
	// target says where the client connects, without credentials.
	target string
	// sentinel is set in sentinel mode: where to follow the master from.
	sentinel *sentinelConfig
	// seeds are the cluster's seed nodes, as configured.
	seeds  []*goredis.Options
	closed chan struct{} // closed by Close; nil outside single mode
	once   sync.Once
	// stopWatch ends the sentinel watch (sentinel mode) and waits for it.
	stopWatch func()
}

// Close closes the client and ends the dialer's recovery probes.
func (c *Client) Close() error {
	if c.closed != nil {
		c.once.Do(func() { close(c.closed) })
	}
	if c.stopWatch != nil {
		c.once.Do(c.stopWatch)
	}
	return c.UniversalClient.Close()
}

// watch listens to every sentinel for the write gate until Close.
func (c *Client) watch(follow *sentinelConfig) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		follow.watchSentinels(ctx, follow.gate)
	}()
	c.stopWatch = func() { cancel(); <-done }
}

// Target says where the client connects, for logs: the server and database
// (redis://host:port/db), the sentinels with the master's name and database,
// or the cluster's seeds. It never holds a user name or password.
func (c *Client) Target() string { return c.target }

// NewClient connects to Redis as cfg says, with the settings lockapi's
// correctness depends on:
//
//   - no command is ever retried by the client (MaxRetries -1, and in a
//     cluster MaxRedirects -1, since the cluster client otherwise re-sends a
//     command that timed out or whose connection broke): a script whose reply
//     was lost may have run, and running an acquire or a release twice is
//     not the same as running it once;
//   - socket deadlines follow the caller's context (ContextTimeoutEnabled),
//     so a store call never outlives its deadline, whatever Redis does;
//   - dials are not retried, so that a request answers 503 at once while
//     Redis is down; on a single Redis, the pool's dial circuit breaker is
//     probed every few milliseconds instead of every second, so that
//     lockapi serves again as soon as Redis answers (see fastRecoveryDialer).
//     Sentinel and Cluster clients resolve addresses per dial and move on to
//     other nodes, so they keep go-redis's dialer.
//
// Each mode parses its own URL form; what they share is set once, by
// common.
func NewClient(cfg ClientConfig) (*Client, error) {
	switch cfg.Mode {
	case "", ModeSingle:
		o, err := goredis.ParseURL(cfg.URL)
		if err != nil {
			return nil, err
		}
		if err := cfg.common(o.TLSConfig, &o.MaxRetries, &o.DialerRetries, &o.ContextTimeoutEnabled); err != nil {
			return nil, err
		}
		closed := make(chan struct{})
		o.Dialer = fastRecoveryDialer(o.DialTimeout, o.TLSConfig, closed)
		return &Client{UniversalClient: goredis.NewClient(o), Mode: ModeSingle, closed: closed,
			target: fmt.Sprintf("%s://%s/%d", scheme(o.TLSConfig), o.Addr, o.DB)}, nil
	case ModeSentinel:
		o, err := goredis.ParseFailoverURL(cfg.URL)
		if err != nil {
			return nil, err
		}
		if o.MasterName == "" {
			return nil, errors.New("a sentinel URL needs ?master_name=NAME, the name the sentinels monitor the master by")
		}
		if err := cfg.common(o.TLSConfig, &o.MaxRetries, &o.DialerRetries, &o.ContextTimeoutEnabled); err != nil {
			return nil, err
		}
		follow := newSentinelConfig(o)
		rdb := goredis.NewFailoverClient(o)
		rdb.AddHook(follow.gate) // where connections go (writeGate)
		c := &Client{UniversalClient: rdb, Mode: ModeSentinel, sentinel: follow,
			target: fmt.Sprintf("%s://%s (sentinels), master %q, db %d", scheme(o.TLSConfig), strings.Join(o.SentinelAddrs, ","), o.MasterName, o.DB)}
		c.watch(follow)
		return c, nil
	case ModeCluster:
		o, err := goredis.ParseClusterURL(cfg.URL)
		if err != nil {
			return nil, err
		}
		if err := cfg.common(o.TLSConfig, &o.MaxRetries, &o.DialerRetries, &o.ContextTimeoutEnabled); err != nil {
			return nil, err
		}
		o.MaxRedirects = -1
		c := &Client{UniversalClient: goredis.NewClusterClient(o), Mode: ModeCluster,
			target: fmt.Sprintf("%s://%s (cluster seeds)", scheme(o.TLSConfig), strings.Join(o.Addrs, ","))}
		for _, addr := range o.Addrs {
			c.seeds = append(c.seeds, &goredis.Options{
				Addr: addr, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig,
				DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1,
			})
		}
		return c, nil
	}
	return nil, fmt.Errorf("redis mode %q: want single, sentinel or cluster", cfg.Mode)
}

// common sets what the options of every mode share (see NewClient): the
// TLS configuration completed by cfg.ConfigureTLS, no retried commands,
// one dial attempt, deadlines from the context.
func (cfg ClientConfig) common(t *tls.Config, maxRetries, dialerRetries *int, contextTimeout *bool) error {
	if cfg.ConfigureTLS != nil {
		if err := cfg.ConfigureTLS(t); err != nil {
			return err
		}
	}
	*maxRetries, *dialerRetries, *contextTimeout = -1, 1, true
	return nil
}

// scheme is the URL scheme of a connection with TLS configuration t.
func scheme(t *tls.Config) string {
	if t != nil {
		return "rediss"
	}
	return "redis"
}

// probeEvery is how often a dial to a Redis that refused connections is
// tried again while the pool's circuit breaker is open.
const probeEvery = 10 * time.Millisecond

// maxProbe bounds one probing dial, so that a probe never runs forever.
const maxProbe = time.Minute

// fastRecoveryDialer dials like go-redis's own dialer, with one difference.
// After PoolSize failed dials, go-redis opens a circuit breaker: every call
// fails at once until a background probe (ConnPool.tryDial) dials
// successfully, and that probe sleeps a whole second after each failure, so
// lockapi would answer 503 for up to a second after Redis is back. Here the
// probe's dial retries every probeEvery until it connects, the client closes
// or maxProbe passed, so the breaker closes within milliseconds of Redis
// accepting connections. Every other dial tries once, so that calls fail at
// once while Redis refuses connections.
//
// The probe is told apart by its caller, since go-redis gives it no marker
// of its own (and dials for commands on goroutines of its own too);
// TestRedis_recovers_quickly_after_restart fails if a go-redis upgrade
// renames it.
func fastRecoveryDialer(timeout time.Duration, tlsConfig *tls.Config, closed <-chan struct{}) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	d := &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if tlsConfig == nil {
			return d.DialContext(ctx, network, addr)
		}
		td := &tls.Dialer{NetDialer: d, Config: tlsConfig}
		return td.DialContext(ctx, network, addr)
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !calledByBreakerProbe() {
			return dial(ctx, network, addr)
		}
		giveUp := time.NewTimer(maxProbe)
		defer giveUp.Stop()
		for {
			attempt, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
			conn, err := dial(attempt, network, addr)
			cancel()
			if err == nil {
				return conn, nil
			}
			select {
			case <-closed:
				return nil, err
			case <-giveUp.C:
				return nil, err
			case <-time.After(probeEvery):
			}
		}
	}
}

// calledByBreakerProbe reports whether go-redis's pool probe is dialing.
func calledByBreakerProbe() bool {
	pcs := make([]uintptr, 16)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, ".(*ConnPool).tryDial") {
			return true
		}
		if !more {
			return false
		}
	}
}

// TopologyError says that Redis answered and is not what the configuration
// says it is: a mistake to fix, not a reason to wait.
type TopologyError struct{ Detail string }

func (e *TopologyError) Error() string { return e.Detail }

// CheckTopology asks Redis whether it is what c's mode says: a single master
// (not a replica, not a cluster node), sentinels that monitor the named
// master, or cluster nodes; and whether every master has at least
// minReplicas replicas connected. It returns a *TopologyError for a
// mismatch, and another error when Redis does not answer (which may pass).
func CheckTopology(ctx context.Context, c *Client, minReplicas int) error {
	if err := checkMode(ctx, c); err != nil {
		return err
	}
	if minReplicas <= 0 {
		return nil
	}
	where := func(m *goredis.Client) string { return "the master at " + m.Options().Addr }
	if c.sentinel != nil {
		where = func(*goredis.Client) string { return fmt.Sprintf("the master %q", c.sentinel.masterName) }
	}
	check := func(ctx context.Context, m *goredis.Client) error {
		info, err := m.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		n := 0
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
				n, _ = strconv.Atoi(v)
			}
		}
		if n < minReplicas {
			return &TopologyError{fmt.Sprintf("min_replicas is %d, but %s has %d replicas connected", minReplicas, where(m), n)}
		}
		return nil
	}
	switch u := c.UniversalClient.(type) {
	case *goredis.ClusterClient:
		return u.ForEachMaster(ctx, check)
	case *goredis.Client:
		return check(ctx, u)
	}
	return nil
}

func checkMode(ctx context.Context, c *Client) error {
	switch c.Mode {
	case ModeSingle:
		info, err := c.Info(ctx, "cluster", "replication").Result()
		if err != nil {
			return err
		}
		if strings.Contains(info, "cluster_enabled:1") {
			return &TopologyError{"this Redis is a cluster node: use -redis-mode cluster"}
		}
		if strings.Contains(info, "role:slave") {
			return &TopologyError{"this Redis is a replica, which refuses writes: point lockapi at the master, or use -redis-mode sentinel"}
		}
		return nil
	case ModeSentinel:
		var lastErr error
		for _, addr := range c.sentinel.addrs {
			sc := goredis.NewSentinelClient(c.sentinel.options(addr))
			_, err := c.sentinel.masterAddr(ctx, sc)
			_ = sc.Close()
			switch {
			case err == nil:
				return nil
			case errors.Is(err, goredis.Nil) || strings.Contains(err.Error(), "No such master"):
				return &TopologyError{fmt.Sprintf("the sentinel at %s monitors no master named %q (master_name in the URL)", addr, c.sentinel.masterName)}
			case strings.Contains(err.Error(), "unknown command"):
				return &TopologyError{fmt.Sprintf("%s is not a sentinel: in sentinel mode the URL names sentinels", addr)}
			}
			lastErr = err
		}
		return lastErr
	case ModeCluster:
		var lastErr error
		for _, o := range c.seeds {
			node := goredis.NewClient(o)
			info, err := node.ClusterInfo(ctx).Result()
			_ = node.Close()
			if err != nil && strings.Contains(err.Error(), "cluster support disabled") {
				return &TopologyError{fmt.Sprintf("the seed %s is not a cluster node (cluster support disabled): use -redis-mode single", o.Addr)}
			}
			if err == nil && strings.Contains(info, "cluster_state:") {
				return nil
			}
			lastErr = err
		}
		return lastErr
	}
	return nil
}
