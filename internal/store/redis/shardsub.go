package redis

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/notify"
)

// shardedListener listens on Redis Cluster with sharded pub/sub (Redis 7):
// the scripts SPUBLISH a lock's notices to its own shard only, and this
// listener keeps one SSUBSCRIBE connection per master that serves a watched
// lock. Classic PUBLISH would be broadcast to every node of the cluster.
//
// A lock's channel lives with its slot. When the slot's master changes (a
// failover, planned or not), the old connection fails or the node sends
// sunsubscribe for the channel; the listener then asks the cluster where the
// slot lives now, moves the channel there, and wakes every waiter to look
// again, since notices may have been missed meanwhile.
type shardedListener struct {
	cluster *goredis.ClusterClient
	keys    keyspace
	hub     *notify.Hub
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu     sync.Mutex
	shards map[string]*shardConn // by master address
	home   map[string]*shardConn // by lock name: where its channel is subscribed

	reconnects atomic.Int64

	// announced holds the names whose channel stays subscribed for good,
	// with the function their messages go to (see announce).
	announced map[string]func(payload string)
}

// shardConn is the SSUBSCRIBE connection to one master.
type shardConn struct {
	addr  string
	ps    *goredis.PubSub
	names map[string]struct{}
	// dropped holds the names whose channel the node unsubscribed by itself
	// (sunsubscribe): it no longer serves their slot, whatever the client's
	// slot map says yet. l.mu guards names and dropped.
	dropped map[string]struct{}
	// moved is signalled when the connection failed or the node dropped one
	// of its channels: its names may belong elsewhere now.
	moved chan struct{}
}

// locateTimeout bounds finding a slot's master and opening its connection.
const locateTimeout = 2 * time.Second

func newShardedListener(cluster *goredis.ClusterClient, keys keyspace) *shardedListener {
	ctx, cancel := context.WithCancel(context.Background())
	return &shardedListener{
		cluster: cluster,
		keys:    keys,
		ctx:     ctx,
		cancel:  cancel,
		shards:  make(map[string]*shardConn),
		home:    make(map[string]*shardConn),
	}
}

func (l *shardedListener) start(hub *notify.Hub) { l.hub = hub }

func (l *shardedListener) close() error {
	l.cancel()
	l.mu.Lock()
	shards := l.shards
	l.shards = map[string]*shardConn{}
	l.mu.Unlock()
	var err error
	for _, sc := range shards {
		err = errors.Join(err, sc.ps.Close())
	}
	l.wg.Wait()
	return err
}

func (l *shardedListener) stats() listenerStats {
	return listenerStats{reconnects: l.reconnects.Load()}
}

// Subscribe implements notify.Subscriber.
func (l *shardedListener) Subscribe(name string) error {
	ch := l.keys.channel(name)
	ctx, cancel := context.WithTimeout(l.ctx, locateTimeout)
	defer cancel()
	node, err := l.cluster.MasterForKey(ctx, ch)
	if err != nil {
		return err
	}
	l.mu.Lock()
	sc := l.shard(node)
	sc.names[name] = struct{}{}
	l.home[name] = sc
	l.mu.Unlock()
	return sc.ps.SSubscribe(ctx, ch)
}

// Unsubscribe implements notify.Subscriber.
func (l *shardedListener) Unsubscribe(name string) error {
	l.mu.Lock()
	sc := l.home[name]
	if sc == nil {
		l.mu.Unlock()
		return nil
	}
	delete(l.home, name)
	delete(sc.names, name)
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(l.ctx, locateTimeout)
	defer cancel()
	return sc.ps.SUnsubscribe(ctx, l.keys.channel(name))
}

// shard returns the connection to node, opening it if needed. l.mu is held.
func (l *shardedListener) shard(node *goredis.Client) *shardConn {
	addr := node.Options().Addr
	sc := l.shards[addr]
	if sc == nil {
		sc = &shardConn{addr: addr, ps: node.SSubscribe(l.ctx), names: map[string]struct{}{}, dropped: map[string]struct{}{}, moved: make(chan struct{}, 1)}
		l.shards[addr] = sc
		l.wg.Add(2)
		go l.receive(sc)
		go l.rehome(sc)
	}
	return sc
}

// receive feeds the hub from one shard's connection. go-redis redials and
// resubscribes a failed connection on the next receive; rehome decides
// whether its channels should move.
func (l *shardedListener) receive(sc *shardConn) {
	defer l.wg.Done()
	const pingEvery = 5 * time.Second
	backoff := 50 * time.Millisecond
	for {
		msg, err := sc.ps.ReceiveTimeout(l.ctx, pingEvery)
		if l.ctx.Err() != nil || errors.Is(err, goredis.ErrClosed) {
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				_ = sc.ps.Ping(l.ctx)
				continue
			}
			l.reconnects.Add(1)
			if backoff == 50*time.Millisecond {
				// The first failure of a streak: notices may be lost
				// from now on, so everyone looks again once.
				l.lost()
			}
			signal(sc.moved)
			select {
			case <-l.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 500*time.Millisecond)
			continue
		}
		backoff = 50 * time.Millisecond
		if m, ok := msg.(*goredis.Subscription); ok && m.Kind == "sunsubscribe" {
			// Sent by the node itself when it stopped serving the slot;
			// our own unsubscribes have removed the name already.
			if name, ok := l.keys.nameOfChannel(m.Channel); ok {
				l.mu.Lock()
				if l.home[name] == sc {
					sc.dropped[name] = struct{}{}
					signal(sc.moved)
				}
				l.mu.Unlock()
			}
			continue
		}
		if m, ok := msg.(*goredis.Message); ok {
			if fn := l.announcedFor(m.Channel); fn != nil {
				fn(m.Payload)
				continue
			}
		}
		deliver(l.hub, l.keys, msg)
	}
}

// rehome moves sc's channels to the masters that serve their slots now,
// each time sc reports trouble, until they all have moved away or the
// listener closes. While the slot map still names sc's node, it asks the
// cluster to reload the map and looks again shortly: a replica's promotion
// takes a node timeout or so, and its shard must serve again right after.
func (l *shardedListener) rehome(sc *shardConn) {
	defer l.wg.Done()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-sc.moved:
		}
		started := time.Now()
		for delay := 20 * time.Millisecond; ; delay = min(delay*2, 200*time.Millisecond) {
			l.cluster.ReloadState(l.ctx)
			select {
			case <-l.ctx.Done():
				return
			case <-time.After(delay):
			}
			stay, done := l.move(sc, time.Since(started) > maxStale)
			if done {
				return
			}
			if stay {
				break // the node serves them still; wait for new trouble
			}
		}
	}
}

// maxStale is how long the slot map may go on naming a node that dropped a
// channel before the channel is subscribed there again.
const maxStale = 5 * time.Second

// move resubscribes, on their current masters, the names of sc whose slot
// moved away from sc's node. stay reports that every name is still served by
// sc's node and that it answers; done that sc has no names left and was
// closed. A name the node dropped stays to be moved while the slot map still
// names the node, unless giveUp: then it is subscribed on the node again.
func (l *shardedListener) move(sc *shardConn, giveUp bool) (stay, done bool) {
	ctx, cancel := context.WithTimeout(l.ctx, locateTimeout)
	defer cancel()
	l.mu.Lock()
	names := make([]string, 0, len(sc.names))
	for name := range sc.names {
		names = append(names, name)
	}
	l.mu.Unlock()

	moved, waiting := 0, 0
	for _, name := range names {
		node, err := l.cluster.MasterForKey(ctx, l.keys.channel(name))
		l.mu.Lock()
		_, dropped := sc.dropped[name]
		l.mu.Unlock()
		if err != nil || node.Options().Addr == sc.addr {
			switch {
			case dropped && giveUp:
				l.mu.Lock()
				delete(sc.dropped, name)
				l.mu.Unlock()
				_ = sc.ps.SSubscribe(ctx, l.keys.channel(name))
			case dropped:
				waiting++
			}
			continue
		}
		l.mu.Lock()
		if l.home[name] != sc { // unsubscribed meanwhile
			l.mu.Unlock()
			continue
		}
		delete(sc.names, name)
		delete(sc.dropped, name)
		to := l.shard(node)
		to.names[name] = struct{}{}
		l.home[name] = to
		l.mu.Unlock()
		moved++
		// The confirmation wakes this name's waiters (Hub.Confirmed with
		// nothing pending), as after any resubscription.
		_ = to.ps.SSubscribe(ctx, l.keys.channel(name))
	}
	if moved > 0 {
		l.lost()
	}

	l.mu.Lock()
	empty := len(sc.names) == 0
	if empty && l.shards[sc.addr] == sc {
		delete(l.shards, sc.addr)
	}
	l.mu.Unlock()
	if empty {
		_ = sc.ps.Close()
		return false, true
	}
	if moved > 0 || waiting > 0 {
		return false, false
	}
	// Nothing moved: is the node answering? If not, its replica has not
	// taken over yet; keep looking.
	return sc.ps.Ping(ctx) == nil, false
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// announce keeps name's channel subscribed for the life of the listener, on
// whichever master serves it, and hands every message on it to fn, and ""
// whenever messages may have been lost (a connection failed, a channel
// moved, or the first subscription is confirmed).
func (l *shardedListener) announce(name string, fn func(payload string)) {
	l.mu.Lock()
	if l.announced == nil {
		l.announced = map[string]func(string){}
	}
	l.announced[name] = fn
	l.mu.Unlock()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
			if err := l.Subscribe(name); err == nil {
				fn("")
				return
			}
			select {
			case <-l.ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
	}()
}

func (l *shardedListener) announcedFor(channel string) func(string) {
	name, ok := l.keys.nameOfChannel(channel)
	if !ok {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.announced[name]
}

// lost wakes everyone who relies on messages that may have been lost: the
// hub's waiters look again, and so does every announcement's reader.
func (l *shardedListener) lost() {
	l.hub.Reset()
	l.mu.Lock()
	fns := make([]func(string), 0, len(l.announced))
	for _, fn := range l.announced {
		fns = append(fns, fn)
	}
	l.mu.Unlock()
	for _, fn := range fns {
		fn("")
	}
}
