package webhook_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
	"github.com/lockapi/lockapi/internal/webhook"
	"github.com/lockapi/lockapi/internal/webhook/redisstate"
)

// runService runs a Service on a State in Redis until the test ends; the
// memory store stands in for the leases and the event log, so that every
// Redis command is the State's. A Refresh of an hour shows that nothing
// waits for the safety interval.
func runService(t *testing.T, st *memory.Store, state webhook.State, run bool) *webhook.Service {
	t.Helper()
	svc, err := webhook.New(webhook.Config{
		Store: st, Log: st, State: state,
		Policy:   webhook.Policy{AllowPrivate: true},
		LeaseTTL: time.Second,
		Refresh:  time.Hour,
		Logger:   zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !run {
		return svc
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { svc.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return svc
}

// waitSubscribers waits until channel has n subscribers.
func waitSubscribers(t *testing.T, rdb *goredis.Client, channel string, n int64) {
	t.Helper()
	waitUntil(t, func() bool { return rdb.PubSubNumSub(context.Background(), channel).Val()[channel] == n })
}

// TestService_picks_up_another_instances_subscription_at_once: a
// subscription created through another instance's State is delivered
// within a second, not after the safety interval (an hour here).
func TestService_picks_up_another_instances_subscription_at_once(t *testing.T) {
	srv := redistest.Start(t)
	prefix := "test:" + ulid.Make().String() + ":"
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	first := srv.Client(t)
	runService(t, st, redisstate.New(first, prefix, 0), true)
	waitSubscribers(t, first, prefix+"webhooks:changed", 1)
	// The second instance only takes the API call: it runs no workers,
	// so only the first can deliver.
	second := runService(t, st, redisstate.New(srv.Client(t), prefix, 0), false)

	r := newReceiver(t)
	start := time.Now()
	sub, err := second.Create(context.Background(), webhook.Spec{URL: r.URL, Prefix: "ci:"})
	if err != nil {
		t.Fatal(err)
	}
	r.setSecret(sub.Secrets[0])
	ctx := context.Background()
	g, err := st.TryAcquire(ctx, lock.AcquireRequest{Lock: "ci:deploy", Owner: "ci-7", Principal: "ci", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got := r.waitFor(1)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the first delivery came %v after the other instance's create, want under 1 s", took)
	} else {
		t.Logf("first delivery %v after the other instance's create", took.Round(time.Millisecond))
	}
	if got[0].Lock != g.Lease.Lock {
		t.Fatalf("delivered %+v", got[0])
	}
}

// TestService_idle_sends_Redis_nothing: once started, a Service whose
// subscriptions do not change sends its State no command (INFO
// commandstats over 2 s, the test's own INFO left out).
func TestService_idle_sends_Redis_nothing(t *testing.T) {
	if os.Getenv(redistest.EnvURL) != "" {
		t.Skip("counts every command of the server: needs one of its own")
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	prefix := "test:" + ulid.Make().String() + ":"
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	state := redisstate.New(srv.Client(t), prefix, 0)
	// A subscription from the file: a worker runs, idle.
	svc, err := webhook.New(webhook.Config{Store: st, Log: st, State: state, Policy: webhook.Policy{AllowPrivate: true},
		File:   []webhook.Subscription{{ID: "from-file", URL: "http://127.0.0.1:1/", Secrets: []string{webhook.NewSecret()}, Source: webhook.SourceFile}},
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { svc.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	waitSubscribers(t, rdb, prefix+"webhooks:changed", 1)
	time.Sleep(300 * time.Millisecond) // the start's reads and the worker's cursor

	calls := func() (others, infos int64) {
		text := rdb.Info(context.Background(), "commandstats").Val()
		for line := range strings.Lines(text) {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
			if !ok {
				continue
			}
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			if name == "cmdstat_info" {
				infos += n
			} else {
				others += n
			}
		}
		return others, infos
	}
	before, infos := calls()
	time.Sleep(2 * time.Second)
	after, infosAfter := calls()
	if infosAfter-infos != 1 {
		t.Fatalf("%d INFO calls in between; want only the test's own", infosAfter-infos)
	}
	if n := after - before; n != 0 {
		t.Fatalf("an idle Service sent Redis %d commands in 2 s, want 0", n)
	}
	t.Logf("idle over 2 s: %d commands (besides the test's own INFO)", after-before)
}
