package redistest

import (
	"strings"
	"testing"
)

// Redlock is a set of independent Redis masters, the topology of lockapi's
// redlock mode: no replication between them, each a server of its own.
type Redlock struct {
	Masters []*Server
}

// StartRedlock starts n independent redis-server processes on free
// loopback ports, stopped when tb ends. Only a redis-server from PATH can
// be started n times, so LOCKAPI_TEST_REDIS_URL and Docker don't count: the
// test is skipped (or fails when CI is set) without one. WithAOF gives
// every master appendonly yes and appendfsync always.
func StartRedlock(tb testing.TB, n int, opts ...Option) *Redlock {
	tb.Helper()
	bin := lookBins(tb, "StartRedlock", "redis-server")[0]
	o := applyOptions(opts)
	r := &Redlock{}
	for range n {
		r.Masters = append(r.Masters, startProcess(tb, bin, nil, o.aof))
	}
	return r
}

// URL names every master in one URL, as LOCKAPI_REDIS_URL takes them in
// redlock mode: redis://host1:port1,host2:port2,.../0.
func (r *Redlock) URL() string {
	addrs := make([]string, len(r.Masters))
	for i, m := range r.Masters {
		addrs[i] = m.Addr
	}
	return "redis://" + strings.Join(addrs, ",") + "/0"
}
