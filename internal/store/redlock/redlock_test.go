package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/internal/lock"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
	"github.com/lockapi/lockapi/internal/store/redlock"
	"github.com/lockapi/lockapi/internal/store/storetest"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

var ctx = context.Background()

// TestConformance runs the conformance suite on 3 and 5 independent
// masters, started once: every behaviour's store has a key prefix of its
// own.
func TestConformance(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(map[int]string{3: "3-masters", 5: "5-masters"}[n], func(t *testing.T) {
			rl := redistest.StartRedlock(t, n)
			storetest.Run(t, storetest.Backend{
				Open:    func(t *testing.T) lock.Store { return open(t, rl) },
				Redlock: true,
			})
		})
	}
}

// open opens a redlock store on rl's masters under a key prefix of its own.
func open(t *testing.T, rl *redistest.Redlock) *redlock.Store {
	t.Helper()
	prefix := "test:" + ulid.Make().String() + ":"
	var masters []*redisstore.Store
	for _, m := range rl.Masters {
		c, err := redisstore.NewClient(redisstore.ClientConfig{URL: m.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s, err := redisstore.New(c, redisstore.Options{Prefix: prefix, CallTimeout: 2 * time.Second, Batch: true})
		if err != nil {
			t.Fatal(err)
		}
		masters = append(masters, s)
	}
	s, err := redlock.New(masters)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
