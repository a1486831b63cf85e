package redis

import (
	"context"
	"errors"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// topology is how the store reaches Redis: one server, a Sentinel master
// (through Client) or a Cluster, each call within callTimeout.
type topology struct {
	rdb         goredis.UniversalClient
	cluster     *goredis.ClusterClient // nil unless rdb is one
	callTimeout time.Duration
	gate        *writeGate // behind Sentinel; nil otherwise
}

// newTopology returns the topology of rdb, and the Sentinel master it
// follows, if any (nil otherwise).
func newTopology(rdb goredis.UniversalClient, callTimeout time.Duration) (*topology, *sentinelConfig) {
	t := &topology{rdb: rdb, callTimeout: callTimeout}
	if t.callTimeout <= 0 {
		t.callTimeout = DefaultCallTimeout
	}
	var follow *sentinelConfig
	switch c := rdb.(type) {
	case *goredis.ClusterClient:
		t.cluster = c
	case *Client:
		follow = c.sentinel
		if follow != nil {
			t.gate = follow.gate
		}
		t.cluster, _ = c.UniversalClient.(*goredis.ClusterClient)
	}
	return t, follow
}

// plainClient returns the go-redis client of a single Redis or a Sentinel
// master behind rdb, nil for a Cluster (or anything else).
func plainClient(rdb goredis.UniversalClient) *goredis.Client {
	switch c := rdb.(type) {
	case *goredis.Client:
		return c
	case *Client:
		return plainClient(c.UniversalClient)
	}
	return nil
}

// refusedByCluster reports a Redis Cluster redirection: the node did not run
// the command because it does not serve the slot (any more).
func (t *topology) refusedByCluster(err error) bool {
	if t.cluster == nil || err == nil {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ") || strings.HasPrefix(msg, "TRYAGAIN")
}

// noteFailure makes a cluster client reload its slot map as soon as a node
// refuses connections, times out or redirects, instead of once a minute: a
// master that was killed must not keep its shard's traffic after its replica
// took over.
func (t *topology) noteFailure(err error) {
	if t.cluster == nil || err == nil {
		return
	}
	var rerr goredis.Error
	if errors.As(err, &rerr) && !t.refusedByCluster(err) && !strings.HasPrefix(err.Error(), "CLUSTERDOWN") {
		return // a script's own error: the topology is fine
	}
	t.cluster.ReloadState(context.Background())
}
