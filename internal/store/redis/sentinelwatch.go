package redis

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The sentinel events the gate follows. Only the sentinel that leads a
// failover announces its steps, so every sentinel is listened to.
const (
	evSwitchMaster  = "+switch-master"                     // "<name> <old ip> <old port> <new ip> <new port>"
	evPromoting     = "+failover-state-send-slaveof-noone" // "slave <addr> <ip> <port> @ <name> <ip> <port>"
	evPromoted      = "+promoted-slave"                    // same form
	evAbortTimeout  = "-failover-abort-slave-timeout"      // "master <name> <ip> <port>"
	evAbortNoGood   = "-failover-abort-no-good-slave"
	evAbortElection = "-failover-abort-not-elected"
)

// watchSentinels feeds gate from every sentinel of c until ctx ends: one
// pub/sub connection per sentinel, each asking its sentinel for the master
// (SENTINEL MASTER) whenever it (re)connects and when it has been quiet for
// a while, so that an announcement missed while it was away is made up for.
// It returns once every connection is closed.
func (c *sentinelConfig) watchSentinels(ctx context.Context, gate *writeGate) {
	var wg sync.WaitGroup
	for _, addr := range c.addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.watchSentinel(ctx, addr, gate)
		}()
	}
	wg.Wait()
}

func (c *sentinelConfig) watchSentinel(ctx context.Context, addr string, gate *writeGate) {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		sc := goredis.NewSentinelClient(c.options(addr))
		ps := sc.Subscribe(ctx, evSwitchMaster, evPromoting, evPromoted, evAbortTimeout, evAbortNoGood, evAbortElection)
		// A read on ps does not end with ctx (and a stopped sentinel never
		// answers): closing it does.
		stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
		if _, err := ps.Receive(ctx); err == nil { // the first subscribe confirmation
			if c.ask(ctx, sc, gate) {
				backoff = 50 * time.Millisecond
			}
			for {
				msg, err := ps.ReceiveTimeout(ctx, 10*time.Second)
				if err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() && ps.Ping(ctx) == nil {
						c.ask(ctx, sc, gate)
						continue
					}
					break
				}
				if m, ok := msg.(*goredis.Message); ok {
					c.event(m.Channel, m.Payload, gate)
				}
			}
		}
		stop()
		_ = ps.Close()
		_ = sc.Close()
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
}

// ask tells gate what the sentinel says of the master; it reports whether
// the sentinel answered.
func (c *sentinelConfig) ask(ctx context.Context, sc *goredis.SentinelClient, gate *writeGate) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	m, err := sc.Master(ctx, c.masterName).Result()
	if err != nil || m["ip"] == "" || m["port"] == "" {
		return false
	}
	epoch, _ := strconv.ParseInt(m["config-epoch"], 10, 64)
	ms, _ := strconv.ParseInt(m["failover-timeout"], 10, 64)
	gate.answered(net.JoinHostPort(m["ip"], m["port"]), epoch, time.Duration(ms)*time.Millisecond)
	return true
}

// event hands one sentinel announcement about our master to gate.
func (c *sentinelConfig) event(channel, payload string, gate *writeGate) {
	f := strings.Fields(payload)
	switch channel {
	case evSwitchMaster:
		if len(f) == 5 && f[0] == c.masterName {
			gate.switched(net.JoinHostPort(f[3], f[4]))
		}
	case evPromoting, evPromoted:
		// "slave <ip:port> <ip> <port> @ <master name> <ip> <port>"
		if len(f) != 8 || f[4] != "@" || f[5] != c.masterName {
			return
		}
		if channel == evPromoting {
			gate.failoverStarted(net.JoinHostPort(f[6], f[7]))
		} else {
			gate.switched(net.JoinHostPort(f[2], f[3]))
		}
	default: // an abort: "master <name> <ip> <port>"
		if len(f) >= 2 && f[1] == c.masterName {
			gate.failoverAborted()
		}
	}
}
