package redis_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
	"github.com/lockapi/lockapi/internal/testkit/storetest"
)

var ctx = context.Background()

// TestConformance runs the conformance suite on a single Redis, with script
// calls batched into pipelines and not, with events not recorded, and with
// the scripts run as on Redis 6.2; each behaviour gets a Redis of its own.
//
// The variants run two at a time (t.Parallel; -parallel defaults to the
// number of CPUs): each waits on Redis and on TTLs far more than it
// computes.
func TestConformance(t *testing.T) {
	t.Run("redis-events-off", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, storetest.Backend{
			Open: func(t *testing.T) lock.Store {
				return openStoreOptions(t, redisstore.ClientConfig{URL: redistest.Start(t).URL}, redisstore.Options{})
			},
			Semaphores: true, FairQueues: true, Sessions: true, Updates: true,
		})
	})
	// Redis 6.2 has no Functions: the scripts run with EVALSHA and EVAL.
	t.Run("redis-eval", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, storetest.Backend{
			Open: func(t *testing.T) lock.Store {
				s := openRedisWith(t, redistest.Start(t), true)
				redisstore.UseEval(s)
				return s
			},
			Semaphores: true, FairQueues: true, Events: true, Sessions: true, Updates: true,
		})
	})
	t.Run("redis-batched", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, storetest.Backend{
			Open:       func(t *testing.T) lock.Store { return openRedisWith(t, redistest.Start(t), true) },
			Semaphores: true, FairQueues: true, Events: true, Sessions: true, Updates: true,
		})
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, storetest.Backend{
			Open:       func(t *testing.T) lock.Store { return openRedis(t, redistest.Start(t)) },
			Semaphores: true, FairQueues: true, Events: true, Sessions: true, Updates: true,
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
// behaviour's store has a key prefix of its own, so the four variants run
// two at a time (t.Parallel) on the shared servers, which stop when all
// are done.
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
		hold  time.Duration // the merged event log's (Backend.EventsHold)
	}{
		{"sentinel", redisstore.ClientConfig{URL: sentinel.URL(), Mode: redisstore.ModeSentinel}, false, 0},
		{"sentinel-batched", redisstore.ClientConfig{URL: sentinel.URL(), Mode: redisstore.ModeSentinel}, true, 0},
		{"cluster", redisstore.ClientConfig{URL: cluster.URL(), Mode: redisstore.ModeCluster}, false, redisstore.ClusterEventsHold},
		{"cluster-batched", redisstore.ClientConfig{URL: cluster.URL(), Mode: redisstore.ModeCluster}, true, redisstore.ClusterEventsHold},
	} {
		t.Run(topology.name, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, storetest.Backend{
				Open:       func(t *testing.T) lock.Store { return openStore(t, topology.cfg, topology.batch) },
				Semaphores: true, FairQueues: true, Events: true, EventsHold: topology.hold, Sessions: true, Updates: true,
			})
		})
	}
	// No hot key: each master records the events of its names in a log of
	// its own, and a read merges them, each lock's events in order.
	t.Run("cluster-one-event-log-per-master", func(t *testing.T) {
		s := openStore(t, redisstore.ClientConfig{URL: cluster.URL(), Mode: redisstore.ModeCluster}, false)
		if s.Events() == nil {
			t.Fatal("events are off on Redis Cluster")
		}
		from, err := s.Events().LastEventID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		const names = 30
		for i := range names {
			storetest.Acquire(t, s, fmt.Sprintf("hot:%d", i), "o", time.Minute)
		}
		c, err := redisstore.NewClient(redisstore.ClientConfig{URL: cluster.URL(), Mode: redisstore.ModeCluster})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var mu sync.Mutex
		perMaster := map[string]int64{}
		err = c.UniversalClient.(*goredis.ClusterClient).ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
			keys, err := m.Keys(ctx, "*:events").Result()
			if err != nil {
				return err
			}
			var n int64
			for _, k := range keys {
				n += m.XLen(ctx, k).Val()
			}
			mu.Lock()
			perMaster[m.Options().Addr] = n
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		busy := 0
		for addr, n := range perMaster {
			t.Logf("%s: %d events", addr, n)
			if n > 0 {
				busy++
			}
		}
		if busy < 2 {
			t.Fatalf("events of %d names on %d master(s): %v", names, busy, perMaster)
		}
		time.Sleep(redisstore.EventsHold(s))
		evs, err := s.Events().ReadEvents(ctx, from, 1000)
		if err != nil {
			t.Fatal(err)
		}
		granted := map[string]bool{}
		for _, e := range evs {
			if e.Type == lock.EventGranted && strings.HasPrefix(e.Lock, "hot:") {
				granted[e.Lock] = true
			}
		}
		if len(granted) != names {
			t.Fatalf("read %d grants of %d names", len(granted), names)
		}
	})
}

// BenchmarkStore_AcquireRelease measures an acquire and release cycle with
// events recorded and not, and the CPU time Redis spends on it.
func BenchmarkStore_AcquireRelease(b *testing.B) {
	for _, events := range []bool{false, true} {
		b.Run(fmt.Sprintf("events=%v", events), func(b *testing.B) {
			srv := redistest.Start(b)
			rdb := srv.Client(b)
			s, err := redisstore.New(rdb, redisstore.Options{Events: events})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			before := redisCPU(b, rdb)
			storetest.BenchAcquireRelease(b, s)
			b.ReportMetric(float64((redisCPU(b, rdb)-before).Microseconds())/float64(b.N), "redis-µs/cycle")
		})
	}
}

// BenchmarkStore_pairs_c32 measures what issue 12 budgets: Redis CPU per
// acquire+release pair with 32 concurrent callers on 100,000 names and the
// batcher on, as the server runs the store, with events on and off.
func BenchmarkStore_pairs_c32(b *testing.B) {
	for _, events := range []bool{false, true} {
		b.Run(fmt.Sprintf("events=%v", events), func(b *testing.B) {
			srv := redistest.Start(b)
			rdb := srv.Client(b)
			s, err := redisstore.New(rdb, redisstore.Options{Events: events, Batch: true})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			scriptsBefore := scriptTime(b, rdb)
			before := redisCPU(b, rdb)
			benchPairs(b, s)
			b.ReportMetric(float64((redisCPU(b, rdb)-before).Microseconds())/float64(b.N), "redis-µs/pair")
			b.ReportMetric(float64((scriptTime(b, rdb)-scriptsBefore).Microseconds())/float64(b.N), "script-µs/pair")
		})
	}
}

// BenchmarkStoreCluster_pairs_c32 is BenchmarkStore_pairs_c32 on Redis
// Cluster, for issue 23's Cluster figure: Redis's work per pair summed over
// the masters (docs/BENCHMARKS.md counts it with callgrind on each). The
// cluster is the one LOCKAPI_TEST_CLUSTER_URL names (as LOCKAPI_REDIS_URL
// names a cluster), so that it can run under callgrind, or else three
// masters with a replica each that the test kit starts.
func BenchmarkStoreCluster_pairs_c32(b *testing.B) {
	url := os.Getenv("LOCKAPI_TEST_CLUSTER_URL")
	if url == "" {
		url = redistest.StartCluster(b).URL()
	}
	for _, events := range []bool{false, true} {
		b.Run(fmt.Sprintf("events=%v", events), func(b *testing.B) {
			c, err := redisstore.NewClient(redisstore.ClientConfig{URL: url, Mode: redisstore.ModeCluster})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			s, err := redisstore.New(c, redisstore.Options{Events: events, Batch: true, Prefix: "bench:" + ulid.Make().String() + ":"})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			benchPairs(b, s)
		})
	}
}

// benchPairs runs b.N acquire+release pairs on s: 32 callers, 100,000
// names.
func benchPairs(b *testing.B, s lock.Store) {
	var next atomic.Int64
	b.SetParallelism(16) // 32 callers on 2 cores
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			name := "p:" + strconv.FormatInt(next.Add(7919)%100_000, 10)
			g, err := s.TryAcquire(ctx, lock.AcquireRequest{Lock: name, Owner: "w", TTL: time.Minute})
			if lock.ErrorCode(err) == lock.CodeHeld {
				continue
			}
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := s.Release(ctx, lock.LeaseRef{Lock: name, ID: g.Lease.ID}, false); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// redisCPU reads the CPU time the Redis server used (INFO cpu).
func redisCPU(b *testing.B, rdb *goredis.Client) time.Duration {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for line := range strings.Lines(info) {
		name, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
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
// redisstore.NewClient, closed with the test, recording events (on a
// Cluster, each master's log, beside which it keeps the sessions' shadows).
func openStore(t *testing.T, cfg redisstore.ClientConfig, batch bool) *redisstore.Store {
	t.Helper()
	return openStoreOptions(t, cfg, redisstore.Options{Batch: batch, Events: true})
}

// openStoreOptions is openStore with opts, under a key prefix of its own.
func openStoreOptions(t *testing.T, cfg redisstore.ClientConfig, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	c, err := redisstore.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	opts.Prefix = "test:" + ulid.Make().String() + ":"
	s, err := redisstore.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// scriptTime reads the time Redis spent running scripts (INFO commandstats,
// FCALL, EVALSHA and EVAL): their cost without the network's.
func scriptTime(b *testing.B, rdb *goredis.Client) time.Duration {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var us int64
	for _, line := range strings.Split(info, "\n") {
		name, _, _ := strings.Cut(line, ":")
		if name != "cmdstat_fcall" && name != "cmdstat_evalsha" && name != "cmdstat_eval" {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				us += n
			}
		}
	}
	return time.Duration(us) * time.Microsecond
}
