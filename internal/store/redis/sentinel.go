package redis

import (
	"context"
	"net"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// sentinelConfig is what the store needs to follow a Sentinel-managed master
// on its own: go-redis moves its command connections to a new master, but not
// a pub/sub connection, which stays on the old master until that one is
// turned into a replica (seconds later) or dies. Waiters would sleep through
// every release made on the new master meanwhile.
type sentinelConfig struct {
	addrs      []string
	masterName string
	options    func(addr string) *goredis.Options // for a sentinel
	// master returns options for a client of the master at addr, with the
	// data nodes' credentials and TLS.
	master func(addr string) *goredis.Options
}

func newSentinelConfig(o *goredis.FailoverOptions) *sentinelConfig {
	return &sentinelConfig{
		addrs:      o.SentinelAddrs,
		masterName: o.MasterName,
		options: func(addr string) *goredis.Options {
			return &goredis.Options{
				Addr:        addr,
				Username:    o.SentinelUsername,
				Password:    o.SentinelPassword,
				TLSConfig:   o.TLSConfig,
				DialTimeout: time.Second,
				ReadTimeout: time.Second,
				MaxRetries:  -1,
			}
		},
		master: func(addr string) *goredis.Options {
			return &goredis.Options{
				Addr:        addr,
				Username:    o.Username,
				Password:    o.Password,
				DB:          o.DB,
				TLSConfig:   o.TLSConfig,
				DialTimeout: o.DialTimeout,
				MaxRetries:  -1,
			}
		},
	}
}

// masterAddr asks one sentinel for the master's address.
func (c *sentinelConfig) masterAddr(ctx context.Context, sc *goredis.SentinelClient) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	hp, err := sc.GetMasterAddrByName(ctx, c.masterName).Result()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// follow calls changed with the master's address whenever it differs from
// the last one seen, until ctx ends. It listens to +switch-master on one
// sentinel at a time and asks for the address again whenever it
// (re)connects, so a switch it missed while connecting is still seen.
func (c *sentinelConfig) follow(ctx context.Context, changed func(addr string)) {
	last := ""
	seen := func(addr string) {
		if addr != "" && addr != last {
			if last != "" {
				changed(addr)
			}
			last = addr
		}
	}
	backoff := 50 * time.Millisecond
	for i := 0; ctx.Err() == nil; i++ {
		sc := goredis.NewSentinelClient(c.options(c.addrs[i%len(c.addrs)]))
		ps := sc.Subscribe(ctx, "+switch-master")
		if _, err := ps.Receive(ctx); err == nil { // the subscribe confirmation
			if addr, err := c.masterAddr(ctx, sc); err == nil {
				seen(addr)
				backoff = 50 * time.Millisecond
			}
			for {
				msg, err := ps.ReceiveTimeout(ctx, 10*time.Second)
				if err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						if err := ps.Ping(ctx); err == nil {
							continue
						}
					}
					break
				}
				if m, ok := msg.(*goredis.Message); ok {
					// "<master name> <old ip> <old port> <new ip> <new port>"
					f := strings.Fields(m.Payload)
					if len(f) == 5 && f[0] == c.masterName {
						seen(net.JoinHostPort(f[3], f[4]))
					}
				}
			}
		}
		_ = ps.Close()
		_ = sc.Close()
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
}
