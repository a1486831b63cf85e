package redis

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/notify"
)

// listener feeds a notify.Hub from Redis pub/sub: the hub tells it which
// locks to subscribe to, it tells the hub what their channels say.
type listener interface {
	notify.Subscriber
	// start begins delivering to hub; called once, before any Subscribe.
	start(hub *notify.Hub)
	close() error
	stats() listenerStats
}

type listenerStats struct {
	reconnects     int64 // pub/sub connections lost and redialled
	masterSwitches int64 // moves to a new Sentinel master
}

// classicListener uses one SUBSCRIBE connection for every lock of the
// process. Behind Sentinel it follows the master (see sentinelConfig).
type classicListener struct {
	rdb    goredis.UniversalClient
	keys   keyspace
	follow *sentinelConfig // nil: not behind Sentinel
	hub    *notify.Hub
	cancel context.CancelFunc
	done   chan struct{}

	// mu guards ps, psClient and subscribed. ps is replaced when the
	// Sentinel master changes; subscribed is what a new ps must subscribe to.
	mu         sync.Mutex
	ps         *goredis.PubSub
	psClient   *goredis.Client // the client of ps after a master change; nil before
	subscribed map[string]struct{}

	reconnects     atomic.Int64
	masterSwitches atomic.Int64

	// announcements are channels that stay subscribed for the life of the
	// listener (the event log's expiries, the sessions' expiries); each
	// one's messages go to its function, and so does "" whenever messages
	// may have been lost (a new connection, a master switch) or the
	// subscription is confirmed. Set before start, read-only after.
	announcements map[string]func(payload string)
}

func newClassicListener(rdb goredis.UniversalClient, keys keyspace, follow *sentinelConfig) *classicListener {
	return &classicListener{
		rdb:        rdb,
		keys:       keys,
		follow:     follow,
		ps:         rdb.Subscribe(context.Background()),
		subscribed: make(map[string]struct{}),
		done:       make(chan struct{}),
	}
}

// announce subscribes channel for good, with every message handed to fn;
// called before start.
func (l *classicListener) announce(channel string, fn func(payload string)) {
	if l.announcements == nil {
		l.announcements = map[string]func(string){}
	}
	l.announcements[channel] = fn
}

// lostAnnouncements tells every announcement's function that messages may
// have been lost.
func (l *classicListener) lostAnnouncements() {
	for _, fn := range l.announcements {
		fn("")
	}
}

func (l *classicListener) start(hub *notify.Hub) {
	l.hub = hub
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	for channel := range l.announcements {
		_ = l.ps.Subscribe(ctx, channel)
	}
	go l.receive(ctx)
	if l.follow != nil {
		go l.follow.follow(ctx, l.masterChanged)
	}
}

func (l *classicListener) close() error {
	l.cancel()
	err := l.pubsub().Close()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.psClient != nil {
		err = errors.Join(err, l.psClient.Close())
	}
	return err
}

func (l *classicListener) stats() listenerStats {
	return listenerStats{reconnects: l.reconnects.Load(), masterSwitches: l.masterSwitches.Load()}
}

func (l *classicListener) Subscribe(name string) error {
	l.mu.Lock()
	l.subscribed[name] = struct{}{}
	ps := l.ps
	l.mu.Unlock()
	return ps.Subscribe(context.Background(), l.keys.channel(name))
}

func (l *classicListener) Unsubscribe(name string) error {
	l.mu.Lock()
	delete(l.subscribed, name)
	ps := l.ps
	l.mu.Unlock()
	return ps.Unsubscribe(context.Background(), l.keys.channel(name))
}

func (l *classicListener) pubsub() *goredis.PubSub {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ps
}

// masterChanged moves the pub/sub connection to the new Sentinel master at
// addr, the address +switch-master named (not the one go-redis would ask a
// sentinel for: a sentinel that has not heard of the switch yet still names
// the old master), and subscribes it to every channel the old one had.
// Releases published meanwhile may have been missed, so the hub wakes
// everyone to look again (Reset).
func (l *classicListener) masterChanged(addr string) {
	l.masterSwitches.Add(1)
	client := goredis.NewClient(l.follow.master(addr))
	l.mu.Lock()
	old, oldClient := l.ps, l.psClient
	l.ps, l.psClient = client.Subscribe(context.Background()), client
	ps := l.ps
	channels := make([]string, 0, len(l.subscribed)+1)
	for name := range l.subscribed {
		channels = append(channels, l.keys.channel(name))
	}
	for channel := range l.announcements {
		channels = append(channels, channel)
	}
	l.mu.Unlock()
	_ = old.Close()
	if oldClient != nil {
		_ = oldClient.Close()
	}
	l.hub.Reset()
	l.lostAnnouncements()
	if len(channels) > 0 {
		_ = ps.Subscribe(context.Background(), channels...)
	} else {
		_ = ps.Ping(context.Background()) // dial now, not at the first waiter
	}
}

// receive feeds the hub from the pub/sub connection. It sends a PING when
// the connection has been quiet for pingEvery, so that a dead connection is
// noticed, redialled and resubscribed (go-redis resubscribes by itself; the
// hub then wakes everyone to look again).
func (l *classicListener) receive(ctx context.Context) {
	defer close(l.done)
	const pingEvery = 30 * time.Second
	backoff := 50 * time.Millisecond
	for {
		ps := l.pubsub()
		msg, err := ps.ReceiveTimeout(ctx, pingEvery)
		if ctx.Err() != nil {
			return
		}
		if ps != l.pubsub() {
			continue // replaced by masterChanged, which woke everyone
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				_ = ps.Ping(ctx)
				continue
			}
			// Lost the connection: messages may be lost until go-redis has
			// redialled, so everyone looks again now, and again when the
			// resubscription is confirmed.
			l.reconnects.Add(1)
			l.hub.Reset()
			l.lostAnnouncements()
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		if !l.announcement(msg) {
			deliver(l.hub, l.keys, msg)
		}
	}
}

// announcement hands msg to announced if it belongs to the announcements
// channel.
func (l *classicListener) announcement(msg any) bool {
	switch m := msg.(type) {
	case *goredis.Subscription:
		if fn := l.announcements[m.Channel]; fn != nil {
			if m.Kind == "subscribe" {
				fn("")
			}
			return true
		}
	case *goredis.Message:
		if fn := l.announcements[m.Channel]; fn != nil {
			fn(m.Payload)
			return true
		}
	}
	return false
}

// deliver hands one pub/sub message to the hub: a confirmed subscription or
// a lock's notice.
func deliver(hub *notify.Hub, keys keyspace, msg any) {
	switch m := msg.(type) {
	case *goredis.Subscription:
		if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
			if name, ok := keys.nameOfChannel(m.Channel); ok {
				hub.Confirmed(name)
			}
		}
	case *goredis.Message:
		if name, ok := keys.nameOfChannel(m.Channel); ok {
			released, ttl, head := parseNotice(m.Payload)
			hub.Notify(name, released, ttl, head)
		}
	}
}

// parseNotice reads an unlock-channel message: "r" when the lock became
// free, "c:<ttl ms>" when it was granted or renewed with that TTL, "c" for
// other changes, and "q:<waiter id>" when the queue's head may now be
// granted.
func parseNotice(payload string) (released bool, ttl time.Duration, head string) {
	if payload == "r" {
		return true, 0, ""
	}
	if id, ok := strings.CutPrefix(payload, "q:"); ok {
		return false, 0, id
	}
	if ms, ok := strings.CutPrefix(payload, "c:"); ok {
		if n, err := strconv.ParseInt(ms, 10, 64); err == nil && n > 0 {
			return false, time.Duration(n) * time.Millisecond, ""
		}
	}
	return false, 0, ""
}

// notifications is the store's pub/sub: the listener (one connection per
// process, or one per shard on Redis Cluster) whose messages wake the
// hub's waiters, and the command the scripts publish with.
type notifications struct {
	hub      *notify.Hub
	listener listener
	// publish is SPUBLISH on Redis Cluster, so that a notice goes only to
	// its lock's shard instead of to every node; PUBLISH elsewhere.
	publish string
}

func newNotifications(top *topology, ks keyspace, follow *sentinelConfig) notifications {
	if top.cluster != nil {
		return notifications{publish: "SPUBLISH", listener: newShardedListener(top.cluster, ks)}
	}
	return notifications{publish: "PUBLISH", listener: newClassicListener(top.rdb, ks, follow)}
}

// start makes the hub and subscribes.
func (n *notifications) start() {
	n.hub = notify.New(n.listener)
	n.listener.start(n.hub)
}
