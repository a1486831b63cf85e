package store

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/notify"
)

var (
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/renew.lua
	renewLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/force_release.lua
	forceReleaseLua string
	//go:embed scripts/inspect.lua
	inspectLua string

	// Each script is loaded once and run with EVALSHA, falling back to EVAL
	// when Redis lost its script cache (restart, failover, SCRIPT FLUSH).
	acquireScript      = redis.NewScript(acquireLua)
	renewScript        = redis.NewScript(renewLua)
	releaseScript      = redis.NewScript(releaseLua)
	forceReleaseScript = redis.NewScript(forceReleaseLua)
	inspectScript      = redis.NewScript(inspectLua)
)

// DefaultPrefix is the key prefix when none is configured.
const DefaultPrefix = "lockapi:"

// Redis is the production store. Many lockapi processes may share one Redis
// (or a Sentinel-managed primary, or a Cluster: every key of one lock shares
// a hash slot).
type Redis struct {
	rdb     redis.UniversalClient
	prefix  string
	observe func(script string, d time.Duration)
	batch   *batcher // nil: plain calls
	hub     *notify.Hub
	ps      *redis.PubSub
	cancel  context.CancelFunc
	done    chan struct{}

	reconnects atomic.Int64
}

var _ lock.Store = (*Redis)(nil)

// RedisOptions configures NewRedis.
type RedisOptions struct {
	// Prefix starts every key and channel name; it must not contain { or }
	// so that the {name} hash tag stays the only one.
	Prefix string
	// ObserveScript, when set, is told how long each script call took.
	ObserveScript func(script string, d time.Duration)
	// Batch sends concurrent script calls together in pipelines (see
	// batcher). Off, every call is its own EVALSHA round trip, as a plain
	// Redis client does.
	Batch bool
}

// NewRedis returns a store on rdb. It opens one pub/sub connection, shared by
// every waiter of this process, and closes it on Close; rdb itself is the
// caller's to close.
func NewRedis(rdb redis.UniversalClient, opts RedisOptions) (*Redis, error) {
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("store: key prefix %q must not contain { or }", prefix)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Redis{
		rdb:     rdb,
		prefix:  prefix,
		observe: opts.ObserveScript,
		ps:      rdb.Subscribe(ctx),
		cancel:  cancel,
		done:    make(chan struct{}),
	}
	if opts.Batch {
		s.batch = newBatcher(rdb)
	}
	s.hub = notify.New(pubsubSubscriber{s})
	go s.receive(ctx)
	return s, nil
}

func (s *Redis) lockKey(name string) string  { return s.prefix + "{" + name + "}:lock" }
func (s *Redis) fenceKey(name string) string { return s.prefix + "{" + name + "}:fence" }
func (s *Redis) channel(name string) string  { return s.prefix + "{" + name + "}:unlock" }

// nameOfChannel inverts channel; ok is false for foreign channels.
func (s *Redis) nameOfChannel(ch string) (string, bool) {
	rest, ok := strings.CutPrefix(ch, s.prefix+"{")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "}:unlock")
}

func (s *Redis) keys(name string) []string { return []string{s.lockKey(name), s.fenceKey(name)} }

// run runs one script (EVALSHA, falling back to EVAL) and reports its
// duration to the observer.
func (s *Redis) run(ctx context.Context, name string, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	start := time.Now()
	var cmd *redis.Cmd
	if s.batch != nil {
		cmd = s.batch.run(script, keys, args)
	} else {
		cmd = script.Run(ctx, s.rdb, keys, args...)
	}
	if s.observe != nil {
		s.observe(name, time.Since(start))
	}
	return cmd
}

// TryAcquire implements lock.Store with one script call.
func (s *Redis) TryAcquire(ctx context.Context, req lock.AcquireRequest) (lock.Grant, error) {
	if err := req.Validate(); err != nil {
		return lock.Grant{}, err
	}
	meta := "{}"
	if len(req.Metadata) > 0 {
		b, err := json.Marshal(req.Metadata)
		if err != nil {
			return lock.Grant{}, lock.AsError(err)
		}
		meta = string(b)
	}
	res, err := s.run(ctx, "acquire", acquireScript, s.keys(req.Lock),
		ulid.Make().String(), req.Owner, req.Principal, req.TTL.Milliseconds(), meta, s.channel(req.Lock)).Slice()
	if err != nil {
		return lock.Grant{}, storeError(err)
	}
	r := reply(res)
	if r.int(0) == 0 {
		return lock.Grant{}, lock.Held(req.Lock, lock.HeldBy{
			Owner:     r.str(1),
			Token:     r.uint(2),
			ExpiresIn: time.Duration(max(r.int(3), 0)) * time.Millisecond,
		})
	}
	lease := r.lease(req.Lock, 2)
	return lock.Grant{Lease: lease, Fresh: r.int(1) == 1}, r.err
}

// Renew implements lock.Store.
func (s *Redis) Renew(ctx context.Context, ref lock.LeaseRef, ttl time.Duration) (lock.Lease, error) {
	name := ref.Lock
	res, err := s.run(ctx, "renew", renewScript, s.keys(name), ref.ID, ttl.Milliseconds(), s.channel(name), ref.Principal).Slice()
	if err != nil {
		return lock.Lease{}, storeError(err)
	}
	r := reply(res)
	switch r.int(0) {
	case 0:
		return lock.Lease{}, lock.LeaseLost(name, ref.ID)
	case -1:
		return lock.Lease{}, lock.NotYourLease(name, ref.ID)
	}
	lease := r.lease(name, 1)
	return lease, r.err
}

// Release implements lock.Store.
func (s *Redis) Release(ctx context.Context, ref lock.LeaseRef, all bool) (lock.ReleaseResult, error) {
	name := ref.Lock
	allArg := "0"
	if all {
		allArg = "1"
	}
	out := lock.ReleaseResult{Lock: name, LeaseID: ref.ID}
	res, err := s.run(ctx, "release", releaseScript, s.keys(name), ref.ID, allArg, s.channel(name), ref.Principal).Slice()
	if err != nil {
		return out, storeError(err)
	}
	r := reply(res)
	switch r.int(0) {
	case 0:
		return out, lock.LeaseLost(name, ref.ID)
	case -1:
		return out, lock.NotYourLease(name, ref.ID)
	}
	out.HoldCount = int(r.int(1))
	out.Released = r.int(2) == 1
	out.Retried = r.int(3) == 1
	return out, r.err
}

// Inspect implements lock.Store.
func (s *Redis) Inspect(ctx context.Context, name string) (lock.State, error) {
	res, err := s.run(ctx, "inspect", inspectScript, s.keys(name)).Slice()
	if err != nil {
		return lock.State{}, storeError(err)
	}
	return stateOf(name, reply(res))
}

func stateOf(name string, r *replyReader) (lock.State, error) {
	st := lock.State{Lock: name, LastToken: r.uint(8)}
	if r.str(0) != "" {
		st.Held = true
		st.Holder = &lock.Holder{
			Owner:      r.str(1),
			Principal:  r.str(2),
			Token:      r.uint(3),
			HoldCount:  int(r.int(4)),
			AcquiredAt: r.millis(5),
			ExpiresAt:  r.millis(6),
			ExpiresIn:  time.Duration(max(r.int(10), 0)) * time.Millisecond,
			Metadata:   r.metadata(7),
		}
	}
	st.Index = lock.ComputeIndex(r.uint(9), st)
	return st, r.err
}

// ForceRelease implements lock.Store.
func (s *Redis) ForceRelease(ctx context.Context, name string) (bool, error) {
	n, err := s.run(ctx, "force_release", forceReleaseScript, s.keys(name), s.channel(name)).Int()
	if err != nil {
		return false, storeError(err)
	}
	return n == 1, nil
}

// List implements lock.Store with SCAN: the cursor is Redis's, and a page
// holds the held locks of as many SCAN batches as it takes to reach Limit, so
// it may hold a few more than Limit, and a lock that is acquired or released
// during the listing may or may not appear. On Redis Cluster it lists the
// node the client routes SCAN to (see docs).
func (s *Redis) List(ctx context.Context, req lock.ListRequest) (lock.ListPage, error) {
	var cursor uint64
	if req.Cursor != "" {
		c, err := strconv.ParseUint(req.Cursor, 10, 64)
		if err != nil || c == 0 {
			return lock.ListPage{}, lock.Invalid(lock.FieldError{Field: "cursor", Detail: "not a cursor returned by this server"})
		}
		cursor = c
	}
	limit := req.Limit
	if limit <= 0 {
		limit = 100
	}
	match := s.prefix + "{" + req.Prefix + "*}:lock"
	var names []string
	for {
		keys, next, err := s.rdb.Scan(ctx, cursor, match, int64(max(limit, 100))).Result()
		if err != nil {
			return lock.ListPage{}, storeError(err)
		}
		for _, k := range keys {
			name := strings.TrimSuffix(strings.TrimPrefix(k, s.prefix+"{"), "}:lock")
			if lock.ValidName(name) {
				names = append(names, name)
			}
		}
		cursor = next
		if cursor == 0 || len(names) >= limit {
			break
		}
	}

	page := lock.ListPage{Locks: make([]lock.State, 0, len(names))}
	if cursor != 0 {
		page.NextCursor = strconv.FormatUint(cursor, 10)
	}
	calls := make([]*scriptCall, len(names))
	for i, name := range names {
		calls[i] = &scriptCall{script: inspectScript, keys: s.keys(name)}
	}
	if len(calls) > 0 {
		runPipelined(ctx, s.rdb, calls)
	}
	for i, name := range names {
		res, err := calls[i].cmd.Slice()
		if err != nil {
			return lock.ListPage{}, storeError(err)
		}
		st, err := stateOf(name, reply(res))
		if err != nil {
			return lock.ListPage{}, err
		}
		if st.Held { // it may have been released or expired since SCAN
			page.Locks = append(page.Locks, st)
		}
	}
	return page, nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// Watch implements lock.Store: it returns once this process's pub/sub
// connection is subscribed to the lock's channel.
func (s *Redis) Watch(ctx context.Context, name string, kind lock.WatchKind) (lock.Watcher, error) {
	w, err := s.hub.Watch(ctx, name, kind)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, lock.Unavailable(err)
	}
	return w, nil
}

// Ping implements lock.Store.
func (s *Redis) Ping(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return storeError(err)
	}
	return nil
}

// Close stops the pub/sub connection. It does not close the Redis client.
func (s *Redis) Close() error {
	if s.batch != nil {
		s.batch.close()
	}
	s.cancel()
	err := s.ps.Close()
	<-s.done
	return err
}

// Reconnects counts how often the pub/sub connection failed and was redialled.
func (s *Redis) Reconnects() int64 { return s.reconnects.Load() }

// WatcherCount returns the number of registered waiters and watchers.
func (s *Redis) WatcherCount() int { return s.hub.Len() }

// receive feeds the hub from the one pub/sub connection. It sends a PING when
// the connection has been quiet for pingEvery, so that a dead connection is
// noticed, redialled and resubscribed (go-redis resubscribes by itself; the
// hub then wakes everyone to look again).
func (s *Redis) receive(ctx context.Context) {
	defer close(s.done)
	const pingEvery = 30 * time.Second
	backoff := 50 * time.Millisecond
	for {
		msg, err := s.ps.ReceiveTimeout(ctx, pingEvery)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				_ = s.ps.Ping(ctx)
				continue
			}
			// Lost the connection: messages may be lost until go-redis has
			// redialled, so everyone looks again now, and again when the
			// resubscription is confirmed.
			s.reconnects.Add(1)
			s.hub.Reset()
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				if name, ok := s.nameOfChannel(m.Channel); ok {
					s.hub.Confirmed(name)
				}
			}
		case *redis.Message:
			if name, ok := s.nameOfChannel(m.Channel); ok {
				released, ttl := parseNotice(m.Payload)
				s.hub.Notify(name, released, ttl)
			}
		}
	}
}

// parseNotice reads an unlock-channel message: "r" when the lock became
// free, "c:<ttl ms>" when it was granted or renewed with that TTL, "c" for
// other changes.
func parseNotice(payload string) (released bool, ttl time.Duration) {
	if payload == "r" {
		return true, 0
	}
	if ms, ok := strings.CutPrefix(payload, "c:"); ok {
		if n, err := strconv.ParseInt(ms, 10, 64); err == nil && n > 0 {
			return false, time.Duration(n) * time.Millisecond
		}
	}
	return false, 0
}

// pubsubSubscriber adapts the pub/sub connection to notify.Subscriber.
type pubsubSubscriber struct{ s *Redis }

func (p pubsubSubscriber) Subscribe(name string) error {
	return p.s.ps.Subscribe(context.Background(), p.s.channel(name))
}

func (p pubsubSubscriber) Unsubscribe(name string) error {
	return p.s.ps.Unsubscribe(context.Background(), p.s.channel(name))
}

// storeError classifies a go-redis error. Connection trouble and Redis states
// that pass (loading, failover, cluster down) are "unavailable"; a client that
// went away keeps its context error; anything else is a bug.
func storeError(err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, transient := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY"} {
			if strings.HasPrefix(msg, transient) {
				return lock.Unavailable(err)
			}
		}
		return &lock.Error{Code: lock.CodeInternal, Detail: "internal error", Err: err}
	}
	return lock.Unavailable(err)
}
