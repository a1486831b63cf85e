package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// errFailover answers a write that waited for a Sentinel failover to end
// and could wait no longer: its caller's deadline came first, or the
// sentinels did not announce the end of the promotion within the gate's
// bound. The write did not run; a repeat after the switch is safe.
var errFailover = errors.New("store: a Sentinel failover is under way: writes resume on the new master")

// errStaleMaster refuses a connection to a node that is no longer the
// master the store follows. Nothing was written on it.
var errStaleMaster = errors.New("store: connection to a former Sentinel master refused")

// gateCap bounds how long the gate stays closed without hearing that the
// failover ended (see writeGate.failoverStarted).
const gateCap = 10 * time.Second

// gateMargin is added to the sentinels' failover-timeout: they decide a
// promotion timed out on a timer of their own (a tick of up to 100 ms) and
// after the INFO that would have shown it.
const gateMargin = time.Second

// writeGate keeps a Sentinel master's writes from being lost in a planned
// failover. With min_replicas 0, a write the old master accepts after the
// replica was told to become master is never seen by the new one: a grant
// whose holder then gets 410, a release that leaves its lock held until the
// TTL. The gate closes when a sentinel announces that it is promoting a
// replica (+failover-state-send-slaveof-noone, published at least one
// sentinel timer tick before it sends SLAVEOF NO ONE), so that scripts that
// write wait while reads go on; it opens when the promotion is done
// (+promoted-slave, after which the sentinels can no longer abort) or
// announced (+switch-master), and the writes that waited then run on the
// new master. It also opens when a sentinel gives up (the writes run on the
// master that stays), or after the failover-timeout the sentinels work
// with: the writes that waited that long answer unavailable, as does one
// whose caller's deadline comes first (see admit).
//
// It also owns where the client's connections go: once a sentinel has named
// a new master, a dial goes there (go-redis asks one sentinel per dial, which
// may not have heard of the switch yet), and a pooled connection to any
// other node is refused, by the pool's health check before it is handed out
// and by its first write otherwise.
type writeGate struct {
	// master is the address the store follows ("" until a sentinel
	// answered); shut is the gate's closing while writes wait for a
	// failover, nil while the gate is open.
	master atomic.Pointer[string]
	shut   atomic.Pointer[closing]

	mu    sync.Mutex
	epoch int64 // the config epoch of master, as far as known
	// hold is how long a closed gate waits for the failover to end.
	hold  time.Duration
	timer *time.Timer // lifts a gate no announcement lifted
	// from is the master a closed gate's failover moves away from: a late
	// +switch-master to it (a slow sentinel telling of an earlier switch)
	// does not open the gate.
	from string
	// announced is the last master handed to the followers; followers are
	// told each change (the listener moves its pub/sub connection).
	announced string
	followers map[int]func(addr string)
	nextID    int

	// tlsConfig is the data nodes' TLS configuration, for direct dials.
	dialTimeout time.Duration
	tlsConfig   *tls.Config

	closes, timeouts atomic.Int64 // for tests and metrics
	waiting          atomic.Int64 // writes waiting for the gate to open

	// conns are the client's open connections, so that those to a former
	// master are closed when the gate follows a new one: a read blocked
	// there (XREAD BLOCK on the event log) would otherwise wait until that
	// node is made a replica, seconds later. (go-redis does the same on
	// +switch-master, but only once a dial of its own has asked a
	// sentinel, which the gate's dials never do.)
	connsMu sync.Mutex
	conns   map[*gatedConn]struct{}
}

func newWriteGate(o *goredis.FailoverOptions) *writeGate {
	g := &writeGate{hold: gateCap, followers: map[int]func(string){}, dialTimeout: o.DialTimeout, tlsConfig: o.TLSConfig,
		conns: map[*gatedConn]struct{}{}}
	if g.dialTimeout <= 0 {
		g.dialTimeout = 5 * time.Second
	}
	return g
}

// closing is one time the gate closed: opened is closed when it opens
// again, and gaveUp, set before that, tells that it opened because its hold
// passed without word of the failover's end.
type closing struct {
	opened chan struct{}
	gaveUp bool
}

// admit lets a script run. One that writes, while the gate is closed, waits
// for the gate to open, and then runs on the master the gate opened for: it
// was not sent anywhere yet, so nothing of it reached the old master. It
// holds nothing while it waits (it has no batch lane nor connection until
// admitted), and it waits at most until ctx ends or the gate gives up on
// the failover (hold): then it answers errFailover, not sent. A nil gate
// (no Sentinel) admits everything.
func (g *writeGate) admit(ctx context.Context, s *script) error {
	if g == nil || s.readOnly {
		return nil
	}
	for {
		c := g.shut.Load()
		if c == nil {
			return nil
		}
		if err := g.wait(ctx, c); err != nil {
			return err
		}
		// Opened: look again, since another failover may have closed it.
	}
}

// wait waits for closing c to end; it returns errFailover when ctx ends
// first or the gate gave up.
func (g *writeGate) wait(ctx context.Context, c *closing) error {
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	select {
	case <-c.opened:
		if c.gaveUp {
			return errFailover
		}
		return nil
	case <-ctx.Done():
		return errFailover
	}
}

// currentMaster is the master the gate follows, "" while none is known.
func (g *writeGate) currentMaster() string {
	if p := g.master.Load(); p != nil {
		return *p
	}
	return ""
}

// stale reports a connection to addr that must not be used: a master is
// known and addr is not it.
func (g *writeGate) stale(addr string) bool {
	m := g.currentMaster()
	return m != "" && addr != m
}

// failoverStarted closes the gate, for at most hold: the master at from is
// being replaced.
func (g *writeGate) failoverStarted(from string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut.Load() != nil {
		return
	}
	g.from = from
	g.closes.Add(1)
	c := &closing{opened: make(chan struct{})}
	g.shut.Store(c)
	g.timer = time.AfterFunc(g.hold, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.shut.Load() == c { // not a later closing's
			g.timeouts.Add(1)
			c.gaveUp = true
			g.openLocked()
		}
	})
}

// failoverAborted opens the gate: the old master stays.
func (g *writeGate) failoverAborted() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.openLocked()
}

// openLocked opens the gate and wakes the writes that wait for it. A
// switch to a new master stored it before: they run there.
func (g *writeGate) openLocked() {
	if c := g.shut.Swap(nil); c != nil {
		close(c.opened)
	}
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
}

// switched records a new master announced by a sentinel (+switch-master or
// +promoted-slave) and opens the gate. Its config epoch is at least one
// more than the last one known, which keeps a sentinel that has not heard of
// the switch from naming the old master again (see answered).
func (g *writeGate) switched(addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if addr != g.currentMaster() {
		g.epoch++
		g.master.Store(&addr)
	}
	if addr != g.from {
		g.openLocked()
	}
	g.tellLocked()
}

// answered records what a sentinel said when asked (SENTINEL MASTER): the
// master, its config epoch and the failover-timeout. An answer older than
// what the gate knows is ignored.
func (g *writeGate) answered(addr string, epoch int64, failoverTimeout time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if failoverTimeout > 0 {
		g.hold = min(failoverTimeout+gateMargin, gateCap)
	}
	cur := g.currentMaster()
	switch {
	case cur == "" || epoch > g.epoch:
		g.epoch = epoch
		if addr != cur {
			g.master.Store(&addr)
		}
	case epoch == g.epoch && addr == cur:
	default:
		return
	}
	g.tellLocked()
}

// tellLocked hands a changed master to the followers. The first master
// known is no change: the listener's first connection went there already.
func (g *writeGate) tellLocked() {
	m := g.currentMaster()
	if m == g.announced {
		return
	}
	first := g.announced == ""
	g.announced = m
	if first {
		return
	}
	g.closeStale()
	for _, fn := range g.followers {
		fn(m)
	}
}

// follow calls changed with the master's address whenever it changes, after
// the gate has opened for it, until ctx ends.
func (g *writeGate) follow(ctx context.Context, changed func(addr string)) {
	g.mu.Lock()
	id := g.nextID
	g.nextID++
	g.followers[id] = changed
	g.mu.Unlock()
	<-ctx.Done()
	g.mu.Lock()
	delete(g.followers, id)
	g.mu.Unlock()
}

// DialHook sends every new connection of the client to the master the gate
// follows, once one is known, and marks it with its address so that it is
// refused once another master is followed.
func (g *writeGate) DialHook(next goredis.DialHook) goredis.DialHook {
	d := &net.Dialer{KeepAlive: 5 * time.Minute}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		var err error
		if m := g.currentMaster(); m != "" {
			ctx, cancel := context.WithTimeout(ctx, g.dialTimeout)
			defer cancel()
			if g.tlsConfig == nil {
				conn, err = d.DialContext(ctx, network, m)
			} else {
				conn, err = (&tls.Dialer{NetDialer: d, Config: g.tlsConfig}).DialContext(ctx, network, m)
			}
			addr = m
		} else {
			conn, err = next(ctx, network, addr)
			if err == nil {
				addr = conn.RemoteAddr().String()
			}
		}
		if err != nil {
			return nil, err
		}
		gc := &gatedConn{Conn: conn, addr: addr, gate: g}
		g.connsMu.Lock()
		g.conns[gc] = struct{}{}
		g.connsMu.Unlock()
		if sc, ok := conn.(syscall.Conn); ok {
			return &gatedTCPConn{gatedConn: gc, sc: sc}, nil
		}
		return gc, nil
	}
}

// ProcessHook and ProcessPipelineHook pass commands on: the store decides
// which scripts write (admit).
func (g *writeGate) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (g *writeGate) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// gatedConn is a client connection to the data node at addr, refused once
// the gate follows another master.
type gatedConn struct {
	net.Conn
	addr string
	gate *writeGate
}

// closeStale closes the connections to any node but the current master.
func (g *writeGate) closeStale() {
	g.connsMu.Lock()
	var stale []*gatedConn
	for c := range g.conns {
		if g.stale(c.addr) {
			stale = append(stale, c)
		}
	}
	g.connsMu.Unlock()
	for _, c := range stale {
		_ = c.Close()
	}
}

func (c *gatedConn) Close() error {
	c.gate.connsMu.Lock()
	delete(c.gate.conns, c)
	c.gate.connsMu.Unlock()
	return c.Conn.Close()
}

func (c *gatedConn) Write(b []byte) (int, error) {
	if c.gate.stale(c.addr) {
		return 0, errStaleMaster
	}
	return c.Conn.Write(b)
}

// gatedTCPConn is a gatedConn whose socket go-redis's pool checks before
// handing it out (SyscallConn): refusing the check makes the pool drop the
// connection and dial a new one, so no command fails for it.
type gatedTCPConn struct {
	*gatedConn
	sc syscall.Conn
}

func (c *gatedTCPConn) SyscallConn() (syscall.RawConn, error) {
	if c.gate.stale(c.addr) {
		return nil, errStaleMaster
	}
	return c.sc.SyscallConn()
}
