package redis_test

import (
	"context"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/store/storetest"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

var ctx = context.Background()

// TestConformance runs the conformance suite on a single Redis, with script
// calls batched into pipelines and not; each behaviour gets a Redis of its
// own.
func TestConformance(t *testing.T) {
	t.Run("redis-batched", func(t *testing.T) {
		storetest.Run(t, storetest.Backend{
			Open: func(t *testing.T) lock.Store { return openRedisWith(t, redistest.Start(t), true) },
		})
	})
	t.Run("redis", func(t *testing.T) {
		storetest.Run(t, storetest.Backend{
			Open: func(t *testing.T) lock.Store { return openRedis(t, redistest.Start(t)) },
			LoseData: map[string]func(*testing.T, lock.Store) lock.Store{
				"flushall": func(t *testing.T, s lock.Store) lock.Store {
					if err := serverOf(t, s).Client(t).FlushAll(ctx).Err(); err != nil {
						t.Fatal(err)
					}
					return s
				},
				"restart-without-persistence": func(t *testing.T, s lock.Store) lock.Store {
					srv := serverOf(t, s)
					if !srv.CanRestart() {
						t.Skip("the Redis server is not one this test started, so it cannot restart it")
					}
					srv.Restart(t)
					return s
				},
			},
		})
	})
}

// TestTopologies runs the conformance suite on a Sentinel set (one master,
// one replica, three sentinels) and on a Redis Cluster (three masters, three
// replicas), each batched and not, started once for all of it: every
// behaviour's store has a key prefix of its own.
func TestTopologies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts multi-node Redis topologies")
	}
	sentinel := redistest.StartSentinel(t)
	cluster := redistest.StartCluster(t)
	for _, topology := range []struct {
		name  string
		cfg   redisstore.ClientConfig
		batch bool
	}{
		{"sentinel", redisstore.ClientConfig{URL: sentinel.URL(), Mode: redisstore.ModeSentinel}, false},
		{"sentinel-batched", redisstore.ClientConfig{URL: sentinel.URL(), Mode: redisstore.ModeSentinel}, true},
		{"cluster", redisstore.ClientConfig{URL: cluster.URL(), Mode: redisstore.ModeCluster}, false},
		{"cluster-batched", redisstore.ClientConfig{URL: cluster.URL(), Mode: redisstore.ModeCluster}, true},
	} {
		t.Run(topology.name, func(t *testing.T) {
			storetest.Run(t, storetest.Backend{
				Open: func(t *testing.T) lock.Store { return openStore(t, topology.cfg, topology.batch) },
			})
		})
	}
}

func BenchmarkStore_AcquireRelease(b *testing.B) {
	srv := redistest.Start(b)
	s, err := redisstore.New(srv.Client(b), redisstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchAcquireRelease(b, s)
}

// servers remembers the server behind each store that openRedisWith opened,
// for the data-loss hooks.
var servers sync.Map // lock.Store -> *redistest.Server

func serverOf(t *testing.T, s lock.Store) *redistest.Server {
	t.Helper()
	srv, ok := servers.Load(s)
	if !ok {
		t.Fatal("not a store opened on a redistest server")
	}
	return srv.(*redistest.Server)
}

func openRedis(t *testing.T, srv *redistest.Server) *redisstore.Store {
	t.Helper()
	return openRedisWith(t, srv, false)
}

// openRedisWith opens a Redis store on srv, with script calls batched into
// pipelines or not.
func openRedisWith(t *testing.T, srv *redistest.Server, batch bool) *redisstore.Store {
	t.Helper()
	s := openStore(t, redisstore.ClientConfig{URL: srv.URL}, batch)
	servers.Store(lock.Store(s), srv)
	return s
}

// openStore opens a Redis store the way lockapi serve does, on a client from
// redisstore.NewClient, closed with the test.
func openStore(t *testing.T, cfg redisstore.ClientConfig, batch bool) *redisstore.Store {
	t.Helper()
	c, err := redisstore.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.Options{Prefix: "test:" + ulid.Make().String() + ":", Batch: batch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
