package redis_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// TestSessions_renewal_costs_the_same counts the Redis commands a session's
// renewal costs (INFO commandstats: the call on the wire and every command
// its script runs) with 1 bound lease and with 300 (more than one chunk of
// session_sweep.lua): the same few, whatever the session holds, within the
// issue's budget of 5.
func TestSessions_renewal_costs_the_same(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s := openStoreOptions(t, redisstore.ClientConfig{URL: srv.URL}, redisstore.Options{})
	ss := s.Sessions()
	var costs []int64
	for _, n := range []int{1, 300} {
		sess, err := ss.CreateSession(ctx, lock.SessionRequest{Owner: "w", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			req := lock.AcquireRequest{Lock: fmt.Sprintf("cost:%d:%d", n, i), Owner: "w", Session: sess.ID}
			if i%3 == 1 {
				req.Mode = lock.Shared
			}
			if _, err := s.TryAcquire(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		before := commandCalls(t, rdb)
		renewed, err := ss.RenewSession(ctx, lock.SessionRef{ID: sess.ID}, 0)
		if err != nil || len(renewed.Leases) != n {
			t.Fatalf("renew = %d leases, %v; want %d", len(renewed.Leases), err, n)
		}
		var cost int64
		for name, calls := range commandsSince(t, rdb, before) {
			// The sessions sweeper's look and pub/sub pings run beside.
			if name != "zrangebyscore" && name != "ping" {
				cost += calls
			}
		}
		costs = append(costs, cost)
	}
	t.Logf("Redis commands per renewal: %d with 1 lease, %d with 300", costs[0], costs[1])
	if costs[0] != costs[1] || costs[1] > 5 {
		t.Fatalf("a renewal costs %d commands with 1 lease and %d with 300, want the same and at most 5", costs[0], costs[1])
	}
}
