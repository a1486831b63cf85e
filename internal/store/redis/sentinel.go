package redis

import (
	"context"
	"net"
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
	// gate follows the master and holds writes through a failover.
	gate *writeGate
}

func newSentinelConfig(o *goredis.FailoverOptions) *sentinelConfig {
	return &sentinelConfig{
		addrs:      o.SentinelAddrs,
		masterName: o.MasterName,
		gate:       newWriteGate(o),
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

// follow calls changed with the master's address whenever it changes, until
// ctx ends. The client's write gate listens to every sentinel (see
// watchSentinels) and tells its followers after it has opened for the new
// master.
func (c *sentinelConfig) follow(ctx context.Context, changed func(addr string)) {
	c.gate.follow(ctx, changed)
}
